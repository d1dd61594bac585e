/* test_notify.c: gpukvd under systemd's Type=notify, with a datagram socket standing in for
 * systemd's NOTIFY_SOCKET: READY=1 once it answers, RELOADING=1 then READY=1 on SIGHUP,
 * STOPPING=1 on SIGTERM. Skipped (77) when gpukvd was built without libsystemd. */
#include <check.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "harness.h"
#define GKV_CHECK_NO_MAIN
#include "../unit/check_main.h"

static int notify_fd = -1;

/* Waits up to 20 s for a datagram containing what; true when one came. */
static bool wait_state(const char *what)
{
    char buf[1024];
    for (int i = 0; i < 200; i++) {
        struct pollfd p = {notify_fd, POLLIN, 0};
        if (poll(&p, 1, 100) != 1)
            continue;
        ssize_t n = recv(notify_fd, buf, sizeof(buf) - 1, 0);
        if (n <= 0)
            continue;
        buf[n] = 0;
        if (strstr(buf, what))
            return true;
    }
    return false;
}

START_TEST(ready_reloading_and_stopping_reach_systemd)
{
    char dir[] = "/tmp/gkv-notify-XXXXXX", path[96];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/notify.sock", dir);
    notify_fd = socket(AF_UNIX, SOCK_DGRAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, path, strlen(path) + 1);
    ck_assert_int_eq(bind(notify_fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    setenv("NOTIFY_SOCKET", path, 1);
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, NULL), 0);
    unsetenv("NOTIFY_SOCKET");
    ck_assert(wait_state("READY=1"));
    kill(d.pid, SIGHUP);
    ck_assert(wait_state("RELOADING=1"));
    ck_assert(wait_state("READY=1"));
    kill(d.pid, SIGTERM);
    ck_assert(wait_state("STOPPING=1"));
    ck_assert_int_eq(harness_stop(&d), 0);
    close(notify_fd);
    unlink(path);
    rmdir(dir);
}
END_TEST

int main(void)
{
#ifndef GKV_HAVE_SYSTEMD
    fprintf(stderr, "gpukvd was built without libsystemd: no readiness notification to test\n");
    return 77;
#endif
    Suite *s = suite_create("service");
    TCase *t = tcase_create("systemd");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, ready_reloading_and_stopping_reach_systemd);
    suite_add_tcase(s, t);
    return harness_run_end(gkv_check_run(s));
}
