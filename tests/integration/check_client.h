/* check_client.h: what the Check suites of the integration tests share beside the harness. */
#ifndef GKV_TESTS_CHECK_CLIENT_H
#define GKV_TESTS_CHECK_CLIENT_H

#include <check.h>
#include <gpukv/gpukv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* Connects to url or fails the test, naming the error. The caller closes the client. */
static inline gkv_client_t *connect_or_fail(const char *url)
{
    gkv_client_t *c = NULL;
    int rc = gkv_client_connect(url, &c);
    ck_assert_msg(rc == 0, "connect %s: %s", url, gkv_strerror(rc));
    return c;
}

/* One INFO field as a number, or the test fails. */
static inline uint64_t info_u64(gkv_client_t *c, const char *name)
{
    char *text, pat[64];
    ck_assert_int_eq(gkv_info(c, &text), 0);
    snprintf(pat, sizeof(pat), "\n%s:", name);
    const char *p = strstr(text, pat);
    ck_assert_msg(p != NULL, "INFO has no %s", name);
    uint64_t v = strtoull(p + strlen(pat), NULL, 10);
    gkv_free(text);
    return v;
}

/* Waits until INFO's field name reads want, looking every 2 ms for at most ms milliseconds of
 * sleep, then asserts that it does. */
static inline void info_until(gkv_client_t *c, const char *name, uint64_t want, int ms)
{
    for (int slept = 0; slept < ms && info_u64(c, name) != want; slept += 2)
        harness_sleep_ms(2);
    ck_assert_uint_eq(info_u64(c, name), want);
}

/* The daemon the command tests of a program share, and its Check fixtures. */
static gkv_daemon_t shared;

static inline void start_shared(void)
{
    ck_assert_int_eq(harness_start(&shared, NULL), 0);
}

static inline void stop_shared(void)
{
    ck_assert_int_eq(harness_stop(&shared), 0);
}

/* i = 0, 1: the shared daemon's Unix socket URL, then its TCP URL. */
static inline const char *shared_url(int i)
{
    return harness_url(&shared, i);
}

#endif
