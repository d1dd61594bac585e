/* test_expiry.c: deadlines against a real gpukvd: keys expire within 100 ms of their deadline while
 * another client keeps the daemon busy, and their memory comes back without anyone asking
 * (active expiry); LIST, GETSIZE and EXISTS leave expired keys out; EXPIRE/PERSIST/TTL, and a
 * ttl given to CREATE and SEAL. */
#include <check.h>
#include <gpukv/gpukv.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check_client.h"
#include "harness.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

#define KEY(s) (s), strlen(s)

typedef struct {
    const char *url;
    atomic_bool stop;
    uint64_t ops;
} load_t;

/* Another client: SETs and GETs of 64 KiB values under its own keys, as fast as it can. */
static void *load(void *arg)
{
    load_t *l = arg;
    gkv_client_t *c;
    if (gkv_client_connect(l->url, &c))
        return NULL;
    size_t n = 64u << 10;
    uint8_t *v = calloc(1, n);
    char key[32];
    for (uint64_t i = 0; !atomic_load(&l->stop); i++) {
        snprintf(key, sizeof(key), "load/%u", (unsigned)(i % 64));
        if (gkv_set(c, KEY(key), v, n, NULL) || gkv_get(c, KEY(key), NULL, v, n, NULL) != 0)
            break;
        l->ops++;
    }
    free(v);
    gkv_client_close(c);
    return NULL;
}

START_TEST(keys_expire_within_100ms_of_their_deadline_under_load)
{
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, NULL), 0);
    load_t l = {.url = d.url};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, load, &l), 0);
    gkv_client_t *c = connect_or_fail(d.url);
    enum { N = 20 };
    double sent[N], answered[N], gone[N], gone_after[N];
    size_t n = 256u << 10;
    uint8_t *v = calloc(1, n);
    uint64_t used0 = info_u64(c, "used_bytes");
    char key[32];
    for (int i = 0; i < N; i++) {
        gkv_set_opts_t o = {.ttl_ms = 300 + 20 * (uint64_t)i};
        snprintf(key, sizeof(key), "ttl/%d", i);
        sent[i] = now_ms();
        ck_assert_int_eq(gkv_set(c, KEY(key), v, n, &o), 0);
        answered[i] = now_ms();
        gone[i] = 0;
    }
    int left = N;
    double t0 = now_ms();
    while (left && now_ms() - t0 < 5000) {
        for (int i = 0; i < N; i++) {
            if (gone[i])
                continue;
            snprintf(key, sizeof(key), "ttl/%d", i);
            double before = now_ms();
            int rc = gkv_getsize(c, KEY(key), &(uint64_t){0});
            if (rc == GKV_ENOTFOUND) {
                gone[i] = before; /* the daemon judged it gone between these two */
                gone_after[i] = now_ms();
                left--;
            } else {
                ck_assert_int_eq(rc, 0);
                /* Still there: its deadline (no earlier than the SET was sent) has not passed. */
                ck_assert_msg(before <= answered[i] + 300 + 20 * i + 100,
                              "ttl/%d still there %.0f ms after its deadline", i,
                              before - (answered[i] + 300 + 20 * i));
            }
        }
        harness_sleep_ms(5);
    }
    ck_assert_int_eq(left, 0);
    double worst = -1e9;
    for (int i = 0; i < N; i++) {
        double deadline = 300 + 20 * i;
        if (gone[i] - answered[i] - deadline > worst)
            worst = gone[i] - answered[i] - deadline;
        /* The daemon judged between gone and gone_after, and counts whole milliseconds. */
        ck_assert_msg(gone_after[i] >= sent[i] + deadline - 1.5, "ttl/%d gone %.1f ms early", i,
                      sent[i] + deadline - gone_after[i]);
        ck_assert_msg(gone[i] <= answered[i] + deadline + 100, "ttl/%d gone %.0f ms late", i,
                      gone[i] - answered[i] - deadline);
    }
    /* Active expiry: INFO looks nothing up, yet the memory is back and the count is right. */
    ck_assert_uint_eq(info_u64(c, "keys_with_ttl"), 0);
    ck_assert_uint_ge(info_u64(c, "expired_keys"), N);
    ck_assert_uint_le(info_u64(c, "used_bytes"),
                      used0 + 65 * (64u << 10)); /* load: 64 + 1 in flight */
    atomic_store(&l.stop, true);
    pthread_join(th, NULL);
    fprintf(stderr, "%s: %d keys, seen gone at most %.1f ms after their deadline, %llu load ops\n",
            harness_backend(), N, worst, (unsigned long long)l.ops);
    ck_assert_uint_gt(l.ops, 10); /* the load ran */
    gkv_client_close(c);
    free(v);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

START_TEST(active_expiry_frees_memory_nobody_asks_about)
{
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, NULL), 0);
    gkv_client_t *c = connect_or_fail(d.url);
    size_t n = 1u << 20;
    uint8_t *v = calloc(1, n);
    char key[32];
    for (int i = 0; i < 16; i++) {
        gkv_set_opts_t o = {.ttl_ms = 200};
        snprintf(key, sizeof(key), "big/%d", i);
        ck_assert_int_eq(gkv_set(c, KEY(key), v, n, &o), 0);
    }
    ck_assert_uint_ge(info_u64(c, "used_bytes"), 16u << 20);
    harness_sleep_ms(300);
    ck_assert_uint_eq(info_u64(c, "used_bytes"), 0);
    ck_assert_uint_eq(info_u64(c, "expired_keys"), 16);
    gkv_client_close(c);
    free(v);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

START_TEST(list_getsize_and_exists_leave_expired_keys_out)
{
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, NULL), 0);
    gkv_client_t *c = connect_or_fail(d.url);
    char key[32];
    for (int i = 0; i < 150; i++) {
        gkv_set_opts_t o = {.ttl_ms = i < 100 ? 150 : 0};
        snprintf(key, sizeof(key), "p/%03d", i);
        ck_assert_int_eq(gkv_set(c, KEY(key), "xy", 2, &o), 0);
    }
    uint64_t bytes, count;
    ck_assert_int_eq(gkv_getsize_prefix(c, KEY("p/"), &bytes, &count), 0);
    ck_assert_uint_eq(count, 150);
    harness_sleep_ms(200);
    ck_assert_int_eq(gkv_getsize_prefix(c, KEY("p/"), &bytes, &count), 0);
    ck_assert_uint_eq(count, 50);
    ck_assert_uint_eq(bytes, 100);
    ck_assert_int_eq(gkv_getsize_prefix(c, KEY(""), &bytes, &count), 0);
    ck_assert_uint_eq(count, 50);
    gkv_list_t *it;
    ck_assert_int_eq(gkv_list_open(c, KEY("p/"), 0, 0, &it), 0);
    gkv_list_entry_t e;
    int listed = 0, rc;
    while ((rc = gkv_list_next(it, &e)) == 1)
        listed++;
    ck_assert_int_eq(rc, 0);
    gkv_list_close(it);
    ck_assert_int_eq(listed, 50);
    const void *keys[2] = {"p/000", "p/149"};
    size_t lens[2] = {5, 5};
    ck_assert_int_eq(gkv_exists(c, keys, lens, 2), 1);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

START_TEST(expire_persist_ttl_and_ttls_on_create)
{
    const char *const extra[] = {"--host-zero-copy", "yes", NULL};
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, extra), 0);
    gkv_client_t *c = connect_or_fail(d.url);
    uint64_t left;
    ck_assert_int_eq(gkv_set(c, KEY("k"), "v", 1, NULL), 0);
    ck_assert_int_eq(gkv_ttl(c, KEY("k"), &left), 0);
    ck_assert_uint_eq(left, GKV_NO_TTL);
    ck_assert_int_eq(gkv_expire(c, KEY("k"), 60000), 1);
    ck_assert_int_eq(gkv_ttl(c, KEY("k"), &left), 0);
    ck_assert_uint_le(left, 60000);
    ck_assert_uint_gt(left, 50000);
    ck_assert_int_eq(gkv_persist(c, KEY("k")), 1);
    ck_assert_int_eq(gkv_persist(c, KEY("k")), 0);
    ck_assert_int_eq(gkv_expire(c, KEY("nope"), 10), 0);
    ck_assert_int_eq(gkv_persist(c, KEY("nope")), GKV_ENOTFOUND);
    ck_assert_int_eq(gkv_ttl(c, KEY("nope"), &left), GKV_ENOTFOUND);
    ck_assert_int_eq(gkv_expire(c, KEY("k"), 0), GKV_EINVAL);
    /* An overwrite without a ttl drops the deadline, as Redis's SET does. */
    gkv_set_opts_t o = {.ttl_ms = 60000};
    ck_assert_int_eq(gkv_set(c, KEY("k"), "v", 1, &o), 0);
    ck_assert_int_eq(gkv_set(c, KEY("k"), "w", 1, NULL), 0);
    ck_assert_int_eq(gkv_ttl(c, KEY("k"), &left), 0);
    ck_assert_uint_eq(left, GKV_NO_TTL);
    /* CREATE and SEAL (zero-copy) carry it too; twice, the second through the spare. */
    for (int i = 0; i < 3; i++) {
        gkv_mapping_t *w;
        gkv_set_opts_t t = {.ttl_ms = 30000 + 10000 * (uint64_t)i};
        ck_assert_int_eq(gkv_create(c, KEY("z"), 4096, &t, &w), 0);
        ck_assert_int_eq(gkv_seal(c, w), 0);
        ck_assert_int_eq(gkv_ttl(c, KEY("z"), &left), 0);
        ck_assert_uint_le(left, t.ttl_ms);
        ck_assert_uint_gt(left, t.ttl_ms - 5000);
    }
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("ttl");
    TCase *t = tcase_create("ttl");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, keys_expire_within_100ms_of_their_deadline_under_load);
    tcase_add_test(t, active_expiry_frees_memory_nobody_asks_about);
    tcase_add_test(t, list_getsize_and_exists_leave_expired_keys_out);
    tcase_add_test(t, expire_persist_ttl_and_ttls_on_create);
    suite_add_tcase(s, t);
    return s;
}

#include "suite_main.h"
