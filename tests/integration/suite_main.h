/* suite_main.h: the main() of an integration suite that runs on both backends: SIGPIPE ignored
 * (tests write to sockets the daemon may have closed), the cuda run skipped (exit 77, ctest's
 * "skipped") where no GPU is usable, then the Check suite make_suite() builds. */
#ifndef GKV_TESTS_SUITE_MAIN_H
#define GKV_TESTS_SUITE_MAIN_H

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "probe.h"
#define GKV_CHECK_NO_MAIN
#include "../unit/check_main.h"

static Suite *make_suite(void);

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    if (strcmp(harness_backend(), "cuda") == 0 && !gkv_test_gpu_usable()) {
        fprintf(stderr, "no usable GPU: the cuda run of this suite is skipped\n");
        return 77;
    }
    return harness_run_end(gkv_check_run(make_suite()));
}

#endif
