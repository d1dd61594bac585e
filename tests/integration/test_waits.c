/* test_waits.c: GET and MAP that wait for a key to exist (the wait field, keywait.h), against a
 * real gpukvd: a waiter gets the value another client SETs (bytes exact) and holds nothing
 * after; a wait that runs out answers TIMEDOUT and holds nothing; one SET wakes many waiters of
 * its key (and only them); a waiter that goes away is forgotten; a key that exists answers at
 * once; bad waits are refused; a MAP waits the same way. With --key-versions, replies and events
 * name each value's version and a wait may ask for a value newer than one it names (after). */
#include <check.h>
#include <gpukv/gpukv.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check_client.h"
#include "harness.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Waits until INFO says n requests wait for keys (at most ~5 s). */
static void until_waiting(gkv_client_t *c, uint64_t n)
{
    info_until(c, "waiting_for_keys", n, 5000);
}

typedef struct {
    const char *url;
    const char *key;
    uint32_t wait_ms;
    bool map;
    bool newer; /* wait for a version above after (gkv_wait_newer) */
    uint64_t after;
    int rc;
    char got[64];
    double took;
    uint64_t version; /* of the value got */
} waiter_t;

static void *waiter(void *arg)
{
    waiter_t *w = arg;
    gkv_client_t *c;
    if ((w->rc = gkv_client_connect(w->url, &c)))
        return NULL;
    double t0 = now_s();
    if (w->newer) {
        gkv_wait_newer(c, w->wait_ms, w->after);
        gkv_value_info_t info;
        w->rc = gkv_get(c, w->key, strlen(w->key), NULL, w->got, sizeof(w->got) - 1, &info);
        if (!w->rc)
            w->got[info.length] = 0;
        w->version = gkv_last_version(c);
    } else if (w->map) {
        gkv_mapping_t *m;
        w->rc = gkv_map_wait(c, w->key, strlen(w->key), NULL, w->wait_ms, &m);
        if (!w->rc) {
            if (!m->on_device && m->length < sizeof(w->got))
                memcpy(w->got, m->ptr, m->length);
            else
                strcpy(w->got, "(on a device)");
            gkv_unmap(c, m);
        }
    } else {
        gkv_value_info_t info;
        w->rc = gkv_get_wait(c, w->key, strlen(w->key), NULL, w->wait_ms, w->got,
                             sizeof(w->got) - 1, &info);
        if (!w->rc)
            w->got[info.length] = 0;
    }
    w->took = now_s() - t0;
    gkv_client_close(c);
    return NULL;
}

static gkv_daemon_t start(void)
{
    const char *const flags[] = {"--host-zero-copy", "yes", NULL};
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, flags), 0);
    return d;
}

START_TEST(a_waiting_get_gets_the_value_another_client_sets)
{
    gkv_daemon_t d = start();
    gkv_client_t *c = connect_or_fail(d.url);
    waiter_t w = {.url = d.url, .key = "layer/1", .wait_ms = 10000};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, waiter, &w), 0);
    until_waiting(c, 1);
    ck_assert_int_eq(gkv_set(c, "layer/0", 7, "other", 5, NULL), 0); /* another key: no wake */
    usleep(50000);
    ck_assert_uint_eq(info_u64(c, "waiting_for_keys"), 1);
    ck_assert_int_eq(gkv_set(c, "layer/1", 7, "the value", 9, NULL), 0);
    pthread_join(t, NULL);
    ck_assert_int_eq(w.rc, 0);
    ck_assert_str_eq(w.got, "the value");
    ck_assert_uint_eq(info_u64(c, "waiting_for_keys"), 0);
    ck_assert_uint_eq(info_u64(c, "key_waits_woken"), 1);
    ck_assert_uint_eq(info_u64(c, "leases"), 0);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

START_TEST(a_wait_that_runs_out_answers_timedout_holding_nothing)
{
    gkv_daemon_t d = start();
    gkv_client_t *c = connect_or_fail(d.url);
    char buf[16];
    double t0 = now_s();
    ck_assert_int_eq(gkv_get_wait(c, "never", 5, NULL, 200, buf, sizeof(buf), NULL), GKV_ETIMEDOUT);
    double took = now_s() - t0;
    ck_assert_msg(took >= 0.19 && took < 3.0, "the wait took %.3f s", took);
    ck_assert_uint_eq(info_u64(c, "key_waits_timed_out"), 1);
    ck_assert_uint_eq(info_u64(c, "waiting_for_keys"), 0);
    /* The connection goes on: a key that exists answers at once. */
    ck_assert_int_eq(gkv_set(c, "here", 4, "x", 1, NULL), 0);
    t0 = now_s();
    ck_assert_int_eq(gkv_get_wait(c, "here", 4, NULL, 60000, buf, sizeof(buf), NULL), 0);
    ck_assert(now_s() - t0 < 1.0);
    ck_assert_int_eq(gkv_ping(c), 0);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

START_TEST(one_set_wakes_every_waiter_of_its_key)
{
    enum { N = 32 };
    gkv_daemon_t d = start();
    gkv_client_t *c = connect_or_fail(d.url);
    waiter_t w[N + 1];
    pthread_t t[N + 1];
    for (int i = 0; i <= N; i++) { /* the last waits for another key, and times out */
        w[i] = (waiter_t){.url = d.url,
                          .key = i < N ? "batch/7" : "batch/8",
                          .wait_ms = i < N ? 20000 : 1500,
                          .map = i % 2};
        ck_assert_int_eq(pthread_create(&t[i], NULL, waiter, &w[i]), 0);
    }
    until_waiting(c, N + 1);
    ck_assert_int_eq(gkv_set(c, "batch/7", 7, "ready", 5, NULL), 0);
    for (int i = 0; i <= N; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < N; i++) {
        ck_assert_msg(w[i].rc == 0, "waiter %d: %d", i, w[i].rc);
        ck_assert_msg(!strcmp(w[i].got, "ready") || !strcmp(w[i].got, "(on a device)"),
                      "waiter %d got %s", i, w[i].got);
    }
    ck_assert_int_eq(w[N].rc, GKV_ETIMEDOUT);
    ck_assert_uint_eq(info_u64(c, "key_waits_woken"), N);
    ck_assert_uint_eq(info_u64(c, "waiting_for_keys"), 0);
    ck_assert_uint_eq(info_u64(c, "leases"), 0);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* A waiter whose connection goes away is forgotten (its slot freed) once its wait ends, and a
 * later SET of the key is as usual. */
START_TEST(a_waiter_that_goes_away_is_forgotten)
{
    gkv_daemon_t d = start();
    gkv_client_t *c = connect_or_fail(d.url);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) { /* a client that waits, then dies */
        gkv_client_t *k;
        if (gkv_client_connect(d.url, &k))
            _exit(1);
        char b[8];
        gkv_get_wait(k, "gone", 4, NULL, 300, b, sizeof(b), NULL);
        _exit(0);
    }
    until_waiting(c, 1);
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    ck_assert_int_eq(gkv_set(c, "gone", 4, "v", 1, NULL), 0);
    for (int i = 0; i < 200 && info_u64(c, "waiting_for_keys"); i++)
        usleep(10000);
    ck_assert_uint_eq(info_u64(c, "waiting_for_keys"), 0);
    ck_assert_int_eq(gkv_ping(c), 0);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* A daemon that stops answers its waiters SHUTDOWN at once (their long waits do not hold it). */
START_TEST(a_stopping_daemon_answers_its_waiters)
{
    gkv_daemon_t d = start();
    gkv_client_t *c = connect_or_fail(d.url);
    waiter_t w = {.url = d.url, .key = "late", .wait_ms = 60000};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, waiter, &w), 0);
    until_waiting(c, 1);
    gkv_client_close(c);
    double t0 = now_s();
    ck_assert_int_eq(harness_stop(&d), 0);
    pthread_join(t, NULL);
    ck_assert_msg(w.rc == GKV_ESHUTDOWN || w.rc == GKV_ECLOSED, "the waiter got %d", w.rc);
    ck_assert_msg(now_s() - t0 < 10.0, "stopping took %.1f s", now_s() - t0);
}
END_TEST

/* --key-versions: each value published has a version, above every earlier one; GET, MAP,
 * GETSIZE and watch events name it, and a wait with after answers with a newer value only. */
START_TEST(a_wait_for_a_newer_version_answers_with_the_next_value)
{
    const char *const flags[] = {"--host-zero-copy", "yes", "--key-versions", "yes", NULL};
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, flags), 0);
    gkv_client_t *c = connect_or_fail(d.url), *wc = connect_or_fail(d.url);
    ck_assert_int_eq(gkv_watch(wc, "v", 1, NULL), 0);
    char buf[16];
    uint64_t size;
    ck_assert_int_eq(gkv_set(c, "v", 1, "one", 3, NULL), 0);
    ck_assert_int_eq(gkv_getsize(c, "v", 1, &size), 0);
    uint64_t v1 = gkv_last_version(c);
    ck_assert_uint_gt(v1, 0);
    gkv_event_t ev;
    ck_assert_int_eq(gkv_watch_next(wc, &ev, 5000), 0);
    ck_assert_uint_eq(gkv_watch_version(wc), v1);
    ck_assert_int_eq(gkv_set(c, "other", 5, "x", 1, NULL), 0);
    ck_assert_int_eq(gkv_set(c, "v", 1, "two", 3, NULL), 0);
    ck_assert_int_eq(gkv_get(c, "v", 1, NULL, buf, sizeof(buf), NULL), 0);
    uint64_t v2 = gkv_last_version(c);
    ck_assert_uint_gt(v2, v1);
    gkv_mapping_t *m;
    ck_assert_int_eq(gkv_map(c, "v", 1, NULL, &m), 0);
    ck_assert_uint_eq(m->version, v2);
    ck_assert_int_eq(gkv_unmap(c, m), 0);
    /* Waiting for a value newer than v2: the one SET next, not the one there now. */
    waiter_t w = {.url = d.url, .key = "v", .wait_ms = 10000, .newer = true, .after = v2};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, waiter, &w), 0);
    until_waiting(c, 1);
    ck_assert_int_eq(gkv_set(c, "v", 1, "three", 5, NULL), 0);
    pthread_join(t, NULL);
    ck_assert_int_eq(w.rc, 0);
    ck_assert_str_eq(w.got, "three");
    ck_assert_uint_gt(w.version, v2);
    uint64_t v3 = w.version;
    /* A version already passed answers at once with the value there. */
    double t0 = now_s();
    ck_assert_int_eq(gkv_wait_newer(c, 60000, v1), 0);
    ck_assert_int_eq(gkv_get(c, "v", 1, NULL, buf, sizeof(buf), NULL), 0);
    ck_assert(now_s() - t0 < 1.0);
    ck_assert_uint_eq(gkv_last_version(c), v3);
    /* None newer in time: TIMEDOUT, nothing held, the connection goes on. */
    ck_assert_int_eq(gkv_wait_newer(c, 200, v3), 0);
    ck_assert_int_eq(gkv_map(c, "v", 1, NULL, &m), GKV_ETIMEDOUT);
    ck_assert_uint_eq(info_u64(c, "leases"), 0);
    ck_assert_uint_eq(info_u64(c, "waiting_for_keys"), 0);
    /* A key that does not exist yet waits as without after; a delete is no new value. */
    waiter_t w2 = {.url = d.url, .key = "later", .wait_ms = 10000, .newer = true, .after = v3};
    ck_assert_int_eq(pthread_create(&t, NULL, waiter, &w2), 0);
    until_waiting(c, 1);
    const void *vk[] = {"v"};
    const size_t vl[] = {1};
    ck_assert_int_eq(gkv_del(c, vk, vl, 1), 1);
    ck_assert_int_eq(gkv_set(c, "later", 5, "new", 3, NULL), 0);
    pthread_join(t, NULL);
    ck_assert_int_eq(w2.rc, 0);
    ck_assert_str_eq(w2.got, "new");
    ck_assert_uint_gt(w2.version, v3);
    /* The watcher of "v" saw "two" and "three" set, each with its version, then the delete
     * naming the version that went ("other" and "later" are not under "v"). */
    uint64_t last = v1;
    int sets = 0, deletes = 0;
    while (gkv_watch_next(wc, &ev, 200) == 0) {
        if (ev.kind == GKV_EVENT_SET) {
            ck_assert_uint_gt(gkv_watch_version(wc), last);
            last = gkv_watch_version(wc);
            sets++;
        } else {
            ck_assert_int_eq(ev.kind, GKV_EVENT_DELETE);
            ck_assert_uint_eq(gkv_watch_version(wc), v3);
            deletes++;
        }
    }
    ck_assert_int_eq(sets, 2);
    ck_assert_int_eq(deletes, 1);
    ck_assert_uint_eq(last, v3);
    ck_assert_int_eq(gkv_ping(c), 0);
    gkv_client_close(wc);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

START_TEST(bad_waits_are_refused)
{
    gkv_daemon_t d = start();
    gkv_client_t *c = connect_or_fail(d.url);
    char b[8];
    ck_assert_int_eq(gkv_get_wait(c, "k", 1, NULL, 0, b, sizeof(b), NULL), GKV_EINVAL);
    ck_assert_int_eq(gkv_get_wait(c, "k", 1, NULL, 3600001, b, sizeof(b), NULL), GKV_EINVAL);
    ck_assert_int_eq(gkv_wait_newer(c, 0, 1), GKV_EINVAL);
    /* A daemon without --key-versions names no versions and refuses after. */
    ck_assert_int_eq(gkv_set(c, "k", 1, "x", 1, NULL), 0);
    ck_assert_int_eq(gkv_get(c, "k", 1, NULL, b, sizeof(b), NULL), 0);
    ck_assert_uint_eq(gkv_last_version(c), 0);
    ck_assert_int_eq(gkv_wait_newer(c, 1000, 0), 0);
    ck_assert_int_eq(gkv_get(c, "k", 1, NULL, b, sizeof(b), NULL), GKV_ENOTSUP);
    ck_assert_int_eq(gkv_ping(c), 0);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("waits");
    TCase *t = tcase_create("waits");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, a_waiting_get_gets_the_value_another_client_sets);
    tcase_add_test(t, a_wait_that_runs_out_answers_timedout_holding_nothing);
    tcase_add_test(t, one_set_wakes_every_waiter_of_its_key);
    tcase_add_test(t, a_waiter_that_goes_away_is_forgotten);
    tcase_add_test(t, a_stopping_daemon_answers_its_waiters);
    tcase_add_test(t, a_wait_for_a_newer_version_answers_with_the_next_value);
    tcase_add_test(t, bad_waits_are_refused);
    suite_add_tcase(s, t);
    return s;
}

#include "suite_main.h"
