/* test_watch.c: watching a prefix (WATCH, net/watch.h) against a real gpukvd: 100,000 changes
 * arrive in order with their kind, key and size, and none from outside the prefix; deletes,
 * deadlines, evictions and FLUSH are told; a watcher that never reads is cut with OVERFLOW
 * (its backlog bounded) and may watch again; a watching connection takes only UNWATCH and
 * PING; a watcher that goes away is forgotten; bad watches are refused. */
#include <check.h>
#include <gpukv/gpukv.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_client.h"
#include "commands.h"
#include "harness.h"
#include "message.h"
#include "raw_frame.h"

static gkv_daemon_t start_with(const char *const *flags)
{
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, flags), 0);
    return d;
}

static gkv_daemon_t start(void)
{
    const char *const flags[] = {NULL};
    return start_with(flags);
}

/* Reads the next event, failing the test unless there is one within 5 s. */
static gkv_event_t next_event(gkv_client_t *w)
{
    gkv_event_t ev;
    int rc = gkv_watch_next(w, &ev, 5000);
    ck_assert_msg(rc == 0, "watch_next: %s", gkv_err_name(rc));
    return ev;
}

static void expect_event(gkv_client_t *w, gkv_event_kind_t kind, const char *key, uint64_t size)
{
    gkv_event_t ev = next_event(w);
    ck_assert_int_eq(ev.kind, kind);
    ck_assert_uint_eq(ev.klen, strlen(key));
    ck_assert(memcmp(ev.key, key, ev.klen) == 0);
    ck_assert_uint_eq(ev.size, size);
}

typedef struct {
    const char *url;
    int n;
} writer_t;

/* n SETs under p/ (value size i % 97), each followed by one under q/ the watcher must not see. */
static void *writer(void *arg)
{
    writer_t *wr = arg;
    gkv_client_t *c = connect_or_fail(wr->url);
    char key[32], val[97];
    memset(val, 'v', sizeof(val));
    for (int i = 0; i < wr->n; i++) {
        snprintf(key, sizeof(key), "p/%d", i);
        ck_assert_int_eq(gkv_set(c, key, strlen(key), val, (size_t)(i % 97), NULL), 0);
        snprintf(key, sizeof(key), "q/%d", i);
        ck_assert_int_eq(gkv_set(c, key, strlen(key), val, 1, NULL), 0);
    }
    gkv_client_close(c);
    return NULL;
}

START_TEST(a_hundred_thousand_changes_arrive_in_order_and_only_the_prefix_s)
{
    enum { N = 100000 };
    gkv_daemon_t d = start();
    gkv_client_t *w = connect_or_fail(d.url);
    uint64_t seq0;
    ck_assert_int_eq(gkv_watch(w, "p/", 2, &seq0), 0);
    writer_t wr = {d.url, N};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, writer, &wr), 0);
    uint64_t last = seq0;
    char key[32];
    for (int i = 0; i < N; i++) {
        gkv_event_t ev = next_event(w);
        snprintf(key, sizeof(key), "p/%d", i);
        ck_assert_int_eq(ev.kind, GKV_EVENT_SET);
        ck_assert_msg(ev.klen == strlen(key) && memcmp(ev.key, key, ev.klen) == 0,
                      "event %d is for %.*s", i, (int)ev.klen, (const char *)ev.key);
        ck_assert_uint_eq(ev.size, (uint64_t)(i % 97));
        /* Each p/ write is followed by a q/ write, also a change: seq grows by two. */
        ck_assert_uint_eq(ev.seq, last + (i ? 2 : 1));
        last = ev.seq;
    }
    pthread_join(t, NULL);
    gkv_event_t ev;
    ck_assert_int_eq(gkv_watch_next(w, &ev, 100), GKV_ETIMEDOUT); /* q/ never came */
    ck_assert_int_eq(gkv_unwatch(w), 0);
    ck_assert_int_eq(gkv_ping(w), 0); /* an ordinary connection again */
    ck_assert_uint_eq(info_u64(w, "watch_events_sent"), N);
    ck_assert_uint_eq(info_u64(w, "watching_clients"), 0);
    gkv_client_close(w);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

START_TEST(deletes_deadlines_evictions_and_flush_are_told)
{
    const char *const flags[] = {"--maxmemory", "1M", "--maxmemory-policy", "allkeys-lru", NULL};
    gkv_daemon_t d = start_with(flags);
    gkv_client_t *w = connect_or_fail(d.url), *c = connect_or_fail(d.url);
    ck_assert_int_eq(gkv_watch(w, "", 0, NULL), 0); /* every key */
    ck_assert_int_eq(gkv_set(c, "a", 1, "xyz", 3, NULL), 0);
    expect_event(w, GKV_EVENT_SET, "a", 3);
    ck_assert_int_eq(gkv_set(c, "a", 1, "wxyz", 4, NULL), 0); /* an overwrite */
    expect_event(w, GKV_EVENT_SET, "a", 4);
    ck_assert_int_eq(gkv_del(c, (const void *const[]){"a"}, (const size_t[]){1}, 1), 1);
    expect_event(w, GKV_EVENT_DELETE, "a", 0);
    gkv_set_opts_t ttl = {.ttl_ms = 50};
    ck_assert_int_eq(gkv_set(c, "t", 1, "1", 1, &ttl), 0);
    expect_event(w, GKV_EVENT_SET, "t", 1);
    expect_event(w, GKV_EVENT_EXPIRE, "t", 0); /* active expiry: nobody reads it */
    /* Room for two values of 400 KiB: the third evicts one of them (allkeys-lru samples keys,
     * so the older is the likelier, not the sure, choice). */
    static char big[400 << 10];
    ck_assert_int_eq(gkv_set(c, "e1", 2, big, sizeof(big), NULL), 0);
    ck_assert_int_eq(gkv_set(c, "e2", 2, big, sizeof(big), NULL), 0);
    ck_assert_int_eq(gkv_set(c, "e3", 2, big, sizeof(big), NULL), 0);
    expect_event(w, GKV_EVENT_SET, "e1", sizeof(big));
    expect_event(w, GKV_EVENT_SET, "e2", sizeof(big));
    gkv_event_t ev = next_event(w);
    ck_assert_int_eq(ev.kind, GKV_EVENT_EVICT);
    ck_assert(ev.klen == 2 && (memcmp(ev.key, "e1", 2) == 0 || memcmp(ev.key, "e2", 2) == 0));
    ck_assert_uint_eq(ev.size, 0);
    expect_event(w, GKV_EVENT_SET, "e3", sizeof(big));
    ck_assert_int_eq(gkv_flush(c), 0);
    expect_event(w, GKV_EVENT_FLUSH, "", 0);
    gkv_client_close(c);
    gkv_client_close(w);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

START_TEST(a_watcher_that_never_reads_is_cut_and_may_watch_again)
{
    const char *const flags[] = {"--watch-buffer", "64K", NULL};
    gkv_daemon_t d = start_with(flags);
    gkv_client_t *w = connect_or_fail(d.url), *c = connect_or_fail(d.url);
    ck_assert_int_eq(gkv_watch(w, "k", 1, NULL), 0);
    char key[256];
    memset(key, 'k', sizeof(key));
    /* 20,000 events of ~300 bytes (6 MB) for a watcher that reads none: well past 64 KiB and
     * what the socket buffers hold. */
    for (int i = 0; i < 20000; i++) {
        snprintf(key + 200, 32, "%d", i);
        ck_assert_int_eq(gkv_set(c, key, strlen(key), "v", 1, NULL), 0);
    }
    ck_assert_uint_eq(info_u64(c, "watches_overflowed"), 1);
    ck_assert_uint_eq(info_u64(c, "watching_clients"), 0);
    long rss = harness_rss_anon_kb(&d);
    ck_assert_msg(rss > 0 && rss < 200 * 1024, "the daemon holds %ld KiB", rss);
    /* The watcher reads what was sent, then OVERFLOW; then it is ordinary again. */
    gkv_event_t ev;
    int rc, n = 0;
    while ((rc = gkv_watch_next(w, &ev, 5000)) == 0)
        n++;
    ck_assert_int_eq(rc, GKV_EOVERFLOW);
    ck_assert_msg(n > 0 && n < 20000, "%d events before the cut", n);
    ck_assert_str_eq(gkv_err_name(rc), "OVERFLOW");
    ck_assert_int_eq(gkv_ping(w), 0);
    ck_assert_int_eq(gkv_unwatch(w), 0); /* nothing to end: fine */
    ck_assert_int_eq(gkv_watch(w, "z", 1, NULL), 0);
    ck_assert_int_eq(gkv_set(c, "z1", 2, "v", 1, NULL), 0);
    expect_event(w, GKV_EVENT_SET, "z1", 1);
    gkv_client_close(c);
    gkv_client_close(w);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

START_TEST(a_watching_connection_takes_only_unwatch_and_ping)
{
    gkv_daemon_t d = start();
    gkv_client_t *w = connect_or_fail(d.url);
    ck_assert_int_eq(gkv_watch(w, "x/", 2, NULL), 0);
    char b[8];
    /* The library refuses before sending: replies could not be told from events. */
    ck_assert_int_eq(gkv_get(w, "x/1", 3, NULL, b, sizeof(b), NULL), GKV_EINVAL);
    ck_assert_int_eq(gkv_watch(w, "y", 1, NULL), GKV_EINVAL);
    ck_assert_int_eq(gkv_unwatch(w), 0);
    ck_assert_int_eq(gkv_set(w, "x/1", 3, "v", 1, NULL), 0);
    gkv_client_close(w);

    /* The daemon refuses too (a client that is not libgpukv). */
    int fd = raw_connect(d.sock);
    gkv_response_t r;
    uint8_t hdr[4096];
    ck_assert_int_eq(raw_request(fd, GKV_OP_WATCH, (raw_fields_t){0}, &r, hdr, sizeof(hdr)), 0);
    ck_assert_int_eq(raw_request(fd, GKV_OP_GET, (raw_fields_t){.key = "x/1"}, &r, hdr,
                                 sizeof(hdr)),
                     GKV_EINVAL);
    ck_assert_int_eq(raw_request(fd, GKV_OP_WATCH, (raw_fields_t){0}, &r, hdr, sizeof(hdr)),
                     GKV_EINVAL); /* watches already */
    ck_assert_int_eq(raw_request(fd, GKV_OP_PING, (raw_fields_t){0}, &r, hdr, sizeof(hdr)), 0);
    ck_assert_int_eq(raw_request(fd, GKV_OP_UNWATCH, (raw_fields_t){0}, &r, hdr, sizeof(hdr)), 0);
    ck_assert_uint_eq(r.count, 0);
    ck_assert_int_eq(raw_request(fd, GKV_OP_GET, (raw_fields_t){.key = "x/1"}, &r, hdr,
                                 sizeof(hdr)),
                     0);
    close(fd);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

START_TEST(a_watcher_that_goes_away_is_forgotten)
{
    gkv_daemon_t d = start();
    gkv_client_t *c = connect_or_fail(d.url);
    for (int i = 0; i < 8; i++) {
        gkv_client_t *w = connect_or_fail(d.url);
        ck_assert_int_eq(gkv_watch(w, "", 0, NULL), 0);
        ck_assert_int_eq(gkv_set(c, "k", 1, "v", 1, NULL), 0);
        gkv_client_close(w); /* with an event unread */
    }
    for (int i = 0; i < 200 && info_u64(c, "watching_clients"); i++)
        harness_sleep_ms(10);
    ck_assert_uint_eq(info_u64(c, "watching_clients"), 0);
    ck_assert_int_eq(gkv_set(c, "k", 1, "v", 1, NULL), 0);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

START_TEST(bad_watches_are_refused)
{
    gkv_daemon_t d = start();
    gkv_client_t *c = connect_or_fail(d.url);
    /* gkv_watch_local on a daemon alone: the same watch (its own changes are all there are). */
    gkv_client_t *w = connect_or_fail(d.url);
    ck_assert_int_eq(gkv_watch_local(w, "lw/", 3, NULL), 0);
    ck_assert_int_eq(gkv_watch_local(w, "lw/", 3, NULL), GKV_EINVAL); /* watches already */
    ck_assert_int_eq(gkv_set(c, "lw/1", 4, "v", 1, NULL), 0);
    gkv_event_t lev;
    ck_assert_int_eq(gkv_watch_next(w, &lev, 5000), 0);
    ck_assert_int_eq(lev.kind, GKV_EVENT_SET);
    ck_assert_uint_eq(lev.klen, 4);
    ck_assert_int_eq(memcmp(lev.key, "lw/1", 4), 0);
    gkv_client_close(w);
    char longp[1100];
    memset(longp, 'p', sizeof(longp));
    ck_assert_int_eq(gkv_watch(c, longp, sizeof(longp), NULL), GKV_ETOOBIG);
    ck_assert_int_eq(gkv_watch(c, NULL, 3, NULL), GKV_EINVAL);
    gkv_event_t ev;
    ck_assert_int_eq(gkv_watch_next(c, &ev, 0), GKV_EINVAL); /* not watching */
    /* The daemon checks the prefix too. */
    int fd = raw_connect(d.sock);
    gkv_wr_t wr;
    gkv_wr_init(&wr);
    gkv_wr_begin(&wr);
    gkv_wr_uint(&wr, GKV_F_OP, GKV_OP_WATCH);
    gkv_wr_uint(&wr, GKV_F_ID, 9);
    gkv_wr_bin(&wr, GKV_F_PREFIX, longp, sizeof(longp));
    gkv_wr_end(&wr);
    gkv_response_t r;
    uint8_t hdr[4096];
    ck_assert_int_eq(raw_call(fd, &wr, &r, hdr, sizeof(hdr)), GKV_ETOOBIG);
    gkv_wr_fini(&wr);
    close(fd);
    ck_assert_int_eq(gkv_ping(c), 0);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("watch");
    TCase *t = tcase_create("watch");
    tcase_set_timeout(t, 240);
    tcase_add_test(t, a_hundred_thousand_changes_arrive_in_order_and_only_the_prefix_s);
    tcase_add_test(t, deletes_deadlines_evictions_and_flush_are_told);
    tcase_add_test(t, a_watcher_that_never_reads_is_cut_and_may_watch_again);
    tcase_add_test(t, a_watching_connection_takes_only_unwatch_and_ping);
    tcase_add_test(t, a_watcher_that_goes_away_is_forgotten);
    tcase_add_test(t, bad_watches_are_refused);
    suite_add_tcase(s, t);
    return s;
}

#include "suite_main.h"
