/* check_main.h: the main() every unit test shares: runs the file's suite, exit 0 on success.
 * With GKV_CHECK_NO_MAIN defined it only gives gkv_check_run (tests/integration/suite_main.h). */
#ifndef GKV_TESTS_CHECK_MAIN_H
#define GKV_TESTS_CHECK_MAIN_H

#include <check.h>
#include <stdlib.h>

/* Runs s (and frees it); EXIT_SUCCESS when every test passed. */
static inline int gkv_check_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#ifndef GKV_CHECK_NO_MAIN
Suite *make_suite(void);

int main(void)
{
    return gkv_check_run(make_suite());
}
#endif

#endif
