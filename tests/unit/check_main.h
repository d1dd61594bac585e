/* check_main.h: the main() every unit test shares: runs the file's suite, exit 0 on success.
 * With GKV_CHECK_NO_MAIN defined it only gives gkv_check_run and gkv_check_run_as
 * (tests/integration/suite_main.h, tests/gpu/). */
#ifndef GKV_TESTS_CHECK_MAIN_H
#define GKV_TESTS_CHECK_MAIN_H

#include <check.h>
#include <stdlib.h>

/* Runs s (and frees it), each test in a process of its own or not as fork says (CK_NOFORK for
 * suites whose process uses CUDA, which does not survive fork; CK_FORK_GETENV: as $CK_FORK
 * says, forking by default); EXIT_SUCCESS when every test passed. */
static inline int gkv_check_run_as(Suite *s, enum fork_status fork)
{
    SRunner *sr = srunner_create(s);
    if (fork != CK_FORK_GETENV)
        srunner_set_fork_status(sr, fork);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

static inline int gkv_check_run(Suite *s)
{
    return gkv_check_run_as(s, CK_FORK_GETENV);
}

#ifndef GKV_CHECK_NO_MAIN
Suite *make_suite(void);

int main(void)
{
    return gkv_check_run(make_suite());
}
#endif

#endif
