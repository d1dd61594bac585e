/* test_eviction.c: --maxmemory-policy against a real gpukvd: filling twice maxmemory evicts and
 * keeps used_bytes under the limit at every sample, what is left reads back exact (never torn),
 * and values that another client holds under lease are never evicted. Also DEL of a prefix. */
#include <check.h>
#include <gpukv/gpukv.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_client.h"
#include "harness.h"
#include "probe.h"

#define MAXMEM (8u << 20)
#define VAL (64u << 10)

/* The key of value i in buf (32 bytes); KEYN(buf) passes it with its length. */
static const char *key_of(int i, char *buf)
{
    snprintf(buf, 32, "ev/%06d", i);
    return buf;
}
#define KEYN(i, buf) key_of((i), (buf)), strlen(key_of((i), (buf)))

static gkv_daemon_t start_policy(const char *policy)
{
    const char *const extra[] = {
        "--maxmemory", "8M", "--maxmemory-policy", policy, "--host-zero-copy", "yes", NULL};
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, extra), 0);
    return d;
}

START_TEST(filling_twice_maxmemory_evicts_and_stays_under)
{
    static const char *const policies[] = {"allkeys-lru", "allkeys-lfu"};
    gkv_daemon_t d = start_policy(policies[_i]);
    gkv_client_t *c = connect_or_fail(d.url);
    uint8_t *v = malloc(VAL), *got = malloc(VAL);
    char key[32];
    int n = 2 * MAXMEM / VAL;
    /* On the GPU: device memory the daemon takes while it evicts stays within what maxmemory
     * promises (values, plus kept exports up to maxmemory/8 and the pool's 64 MiB of slack). */
    bool gpu = strcmp(harness_backend(), "cuda") == 0;
    size_t free0 = 0, free_min = SIZE_MAX, total;
    if (gpu)
        ck_assert_int_eq(gkv_test_gpu_meminfo(&free0, &total), 0);
    for (int i = 0; i < n; i++) {
        harness_fill(v, VAL, (uint64_t)i);
        ck_assert_int_eq(gkv_set(c, KEYN(i, key), v, VAL, NULL), 0);
        if (i % 8 == 0)
            ck_assert_uint_le(info_u64(c, "used_bytes"), MAXMEM);
        size_t fr;
        if (gpu && i % 8 == 0 && gkv_test_gpu_meminfo(&fr, &total) == 0 && fr < free_min)
            free_min = fr;
        if (i % 3 == 0 && i) { /* some reads, so that LRU/LFU have something to weigh */
            int rc = gkv_get(c, KEYN(i / 2, key), NULL, got, VAL, NULL);
            ck_assert(rc == 0 || rc == GKV_ENOTFOUND);
        }
    }
    ck_assert_uint_gt(info_u64(c, "evicted_keys"), (uint64_t)n / 2 - 8);
    if (gpu) {
        fprintf(stderr, "cuda: device memory taken while evicting: %.1f MiB (maxmemory %u MiB)\n",
                (double)(free0 - free_min) / 1048576, MAXMEM >> 20);
        ck_assert_uint_le(free0 - free_min, MAXMEM + MAXMEM / 8 + (64u << 20));
    }
    int left = 0;
    for (int i = 0; i < n; i++) {
        int rc = gkv_get(c, KEYN(i, key), NULL, got, VAL, NULL);
        ck_assert_msg(rc == 0 || rc == GKV_ENOTFOUND, "%s: %d", key, rc);
        if (rc == 0) {
            harness_fill(v, VAL, (uint64_t)i);
            ck_assert_msg(memcmp(v, got, VAL) == 0, "%s torn", key);
            left++;
        }
    }
    ck_assert_int_ge(left, (int)(MAXMEM / VAL) - 8);
    char *text;
    ck_assert_int_eq(gkv_info(c, &text), 0);
    ck_assert_ptr_nonnull(strstr(text, policies[_i]));
    gkv_free(text);
    gkv_client_close(c);
    free(v);
    free(got);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* 32 values mapped by another client (leases held), then 10,000 SETs that keep evicting: the
 * leased ones are all still there and unchanged. */
START_TEST(leased_values_are_never_evicted)
{
    gkv_daemon_t d = start_policy("allkeys-lru");
    gkv_client_t *w = connect_or_fail(d.url), *r = connect_or_fail(d.url);
    uint8_t *v = malloc(VAL), *got = malloc(VAL);
    char key[32];
    gkv_mapping_t *m[32];
    for (int i = 0; i < 32; i++) {
        harness_fill(v, VAL, 100000 + (uint64_t)i);
        ck_assert_int_eq(gkv_set(w, KEYN(100000 + i, key), v, VAL, NULL), 0);
        ck_assert_int_eq(gkv_map(r, KEYN(100000 + i, key), NULL, &m[i]), 0);
    }
    size_t small = 16u << 10;
    for (int i = 0; i < 10000; i++) {
        harness_fill(v, small, (uint64_t)i);
        ck_assert_int_eq(gkv_set(w, KEYN(i, key), v, small, NULL), 0);
    }
    ck_assert_uint_gt(info_u64(w, "evicted_keys"), 9000);
    /* What is mapped is not evictable: INFO's estimate leaves the 32 leased values out. */
    ck_assert_uint_le(info_u64(w, "evictable_bytes"), MAXMEM - 32 * VAL);
    ck_assert_uint_ge(info_u64(w, "leased_bytes"), 32 * VAL);
    ck_assert_uint_le(info_u64(w, "used_bytes"), MAXMEM);
    for (int i = 0; i < 32; i++) {
        harness_fill(v, VAL, 100000 + (uint64_t)i);
        ck_assert_int_eq(gkv_get(w, KEYN(100000 + i, key), NULL, got, VAL, NULL), 0);
        ck_assert_int_eq(memcmp(v, got, VAL), 0);
        if (!m[i]->on_device) /* the host backend: the mapping reads the arena directly */
            ck_assert_int_eq(memcmp(v, m[i]->ptr, VAL), 0);
        ck_assert_int_eq(gkv_unmap(r, m[i]), 0);
    }
    gkv_client_close(r);
    gkv_client_close(w);
    free(v);
    free(got);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

START_TEST(noeviction_is_the_default_and_refuses)
{
    const char *const extra[] = {"--maxmemory", "1M", NULL};
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, extra), 0);
    gkv_client_t *c = connect_or_fail(d.url);
    uint8_t *v = calloc(1, VAL);
    char key[32];
    int rc = 0, i = 0;
    while ((rc = gkv_set(c, KEYN(i, key), v, VAL, NULL)) == 0)
        i++;
    ck_assert_int_eq(rc, GKV_EOOM);
    ck_assert_int_eq(i, (1 << 20) / VAL);
    ck_assert_uint_eq(info_u64(c, "evicted_keys"), 0);
    char *text;
    ck_assert_int_eq(gkv_info(c, &text), 0);
    ck_assert_ptr_nonnull(strstr(text, "maxmemory_policy:noeviction"));
    ck_assert_ptr_nonnull(strstr(text, "key_order_thread:yes")); /* as the harness asks */
    gkv_free(text);
    gkv_client_close(c);
    free(v);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* DEL of a prefix: 100,000 keys in one call (2048 per request inside), the rest untouched; a
 * client's requests keep being answered meanwhile. */
START_TEST(del_prefix_of_100000_keys)
{
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, NULL), 0);
    gkv_client_t *c = connect_or_fail(d.url);
    char key[32];
    for (int i = 0; i < 100000; i++) {
        snprintf(key, sizeof(key), "dp/%06d", i);
        ck_assert_int_eq(gkv_set(c, key, strlen(key), "v", 1, NULL), 0);
    }
    for (int i = 0; i < 10; i++) {
        snprintf(key, sizeof(key), "dq/%d", i); /* sorts right after dp/ */
        ck_assert_int_eq(gkv_set(c, key, strlen(key), "w", 1, NULL), 0);
    }
    uint64_t count = 0, bytes;
    ck_assert_int_eq(gkv_del_prefix(c, "dp/", 3, &count), 0);
    ck_assert_uint_eq(count, 100000);
    ck_assert_int_eq(gkv_getsize_prefix(c, "dp/", 3, &bytes, &count), 0);
    ck_assert_uint_eq(count, 0);
    ck_assert_int_eq(gkv_getsize_prefix(c, "", 0, &bytes, &count), 0);
    ck_assert_uint_eq(count, 10);
    ck_assert_int_eq(gkv_del_prefix(c, "dp/", 3, &count), 0);
    ck_assert_uint_eq(count, 0);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("evict");
    TCase *t = tcase_create("evict");
    tcase_set_timeout(t, 300);
    tcase_add_loop_test(t, filling_twice_maxmemory_evicts_and_stays_under, 0, 2);
    tcase_add_test(t, leased_values_are_never_evicted);
    tcase_add_test(t, noeviction_is_the_default_and_refuses);
    tcase_add_test(t, del_prefix_of_100000_keys);
    suite_add_tcase(s, t);
    return s;
}

#include "suite_main.h"
