/* check_main.h: the main() every unit test shares: runs the file's suite, exit 0 on success. */
#ifndef GKV_TESTS_CHECK_MAIN_H
#define GKV_TESTS_CHECK_MAIN_H

#include <check.h>
#include <stdlib.h>

Suite *make_suite(void);

int main(void)
{
    SRunner *sr = srunner_create(make_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
