/* zc_daemon.h: the daemon (host backend, arena shared) and helpers the zero-copy integration
 * suites share. */
#ifndef GKV_TESTS_ZC_DAEMON_H
#define GKV_TESTS_ZC_DAEMON_H

#include <signal.h>
#include <stdlib.h>

#include "check_client.h"
#include "raw_frame.h"
#define GKV_CHECK_NO_MAIN
#include "../unit/check_main.h"

static gkv_daemon_t d;

static inline void start(void)
{
    static const char *const args[] = {"--host-zero-copy", "yes", "--max-leases", "4096", NULL};
    ck_assert_int_eq(harness_start(&d, args), 0);
}

static inline void stop(void)
{
    ck_assert_int_eq(harness_stop(&d), 0);
}

#define conn(url) connect_or_fail(url)
#define KEY(s) (s), strlen(s)

/* Raw requests on a zero-copy connection (after a raw HELLO), for what the library never
 * sends. hdr has room for 64 KiB. */
static inline int raw_zc_connect(void)
{
    return raw_connect(d.sock);
}

static inline int64_t raw_req(int fd, unsigned op, raw_fields_t f, gkv_response_t *r, uint8_t *hdr)
{
    return raw_request(fd, op, f, r, hdr, 65536);
}

/* HELLO, MAP, RELEASE, SEAL, ABORT of one lease, or CREATE of 16 bytes. */
static inline int64_t raw_op(int fd, unsigned op, const char *key, uint64_t lease,
                             gkv_response_t *r, uint8_t *hdr)
{
    raw_fields_t f = {.key = key, .lease = lease, .size = op == GKV_OP_CREATE ? 16 : 0};
    return raw_req(fd, op, f, r, hdr);
}

/* A raw request with the fields the lease tests vary (0: left out). */
static inline int64_t raw_zc(int fd, unsigned op, const char *key, uint64_t size, uint64_t lease,
                             uint64_t flags, gkv_response_t *r, uint8_t *hdr)
{
    raw_fields_t f = {.key = key, .size = size, .lease = lease, .flags = flags};
    return raw_req(fd, op, f, r, hdr);
}

/* Waits (up to 1 s) until the daemon counts `leases` leases: it ends a closed connection's
 * leases when it sees the close. */
static inline void wait_leases(gkv_client_t *c, uint64_t leases)
{
    for (int i = 0; i < 200 && info_u64(c, "leases") != leases; i++)
        usleep(5000);
    ck_assert_uint_eq(info_u64(c, "leases"), leases);
}

/* Runs the n tests of a zero-copy suite against one daemon (started and stopped around them).
 * Returns the process's exit status. */
static inline int zc_run_suite(const char *name, const TTest *const *tests, size_t n)
{
    signal(SIGPIPE, SIG_IGN);
    Suite *s = suite_create(name);
    TCase *t = tcase_create("host backend");
    tcase_add_unchecked_fixture(t, start, stop);
    tcase_set_timeout(t, 120);
    for (size_t i = 0; i < n; i++)
        tcase_add_test(t, tests[i]);
    suite_add_tcase(s, t);
    return harness_run_end(gkv_check_run(s));
}

#endif
