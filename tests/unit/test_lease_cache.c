/* test_lease_cache.c: libgpukv's lease cache (client/lease_cache.h) alone, with mappings made
 * here: a key's newest read lease is found, spares by size and GPU; a key keeps at most
 * GKV_CACHE_PER_KEY, the cache its slots and bytes, the oldest going first to the end
 * function; off (0 slots) or a value over max_bytes goes straight to the end; every lease is
 * ended exactly once; later ends from several threads all come back once. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "lease_cache.h"

typedef struct {
    gkv_mapping_t *ended[64];
    int n;
} ends_t;

static int record(void *arg, gkv_mapping_t *m)
{
    ends_t *e = arg;
    ck_assert_int_lt(e->n, 64);
    for (int i = 0; i < e->n; i++)
        ck_assert_ptr_ne(e->ended[i], m); /* ended once */
    e->ended[e->n++] = m;
    return 0;
}

static gkv_mapping_t maps[16];

static gkv_mapping_t *mk(int i, uint64_t size, int writable, int gpu)
{
    memset(&maps[i], 0, sizeof(maps[i]));
    maps[i].value_size = maps[i].length = size;
    maps[i].writable = writable;
    maps[i].gpu = gpu;
    maps[i].lease = 100 + (uint64_t)i;
    return &maps[i];
}

START_TEST(the_newest_read_lease_and_spares_by_size_and_gpu_are_found)
{
    gkv_lease_cache_t lc;
    ends_t e = {0};
    gkv_lc_init(&lc);
    gkv_mapping_t *a = mk(0, 10, 0, 0), *b = mk(1, 10, 0, 0), *s = mk(2, 20, 1, 1);
    ck_assert(gkv_lc_wants(&lc, a));
    ck_assert_int_eq(gkv_lc_put(&lc, a, "k", 1, record, &e), 0);
    ck_assert_int_eq(gkv_lc_put(&lc, b, "k", 1, record, &e), 0);
    ck_assert_ptr_eq(gkv_lc_read(&lc, "k", 1), b); /* the newest */
    ck_assert_ptr_null(gkv_lc_read(&lc, "kk", 2));
    ck_assert_int_eq(gkv_lc_put(&lc, s, "k", 1, record, &e), 0); /* the key's third: a goes */
    ck_assert_int_eq(e.n, 1);
    ck_assert_ptr_eq(e.ended[0], a);
    ck_assert_ptr_eq(gkv_lc_spare(&lc, "k", 1, 20, -1), s);
    ck_assert_ptr_eq(gkv_lc_spare(&lc, "k", 1, 20, 1), s);
    ck_assert_ptr_null(gkv_lc_spare(&lc, "k", 1, 20, 0));  /* another GPU */
    ck_assert_ptr_null(gkv_lc_spare(&lc, "k", 1, 21, -1)); /* another size */
    ck_assert(gkv_lc_take(&lc, s));
    ck_assert(!gkv_lc_take(&lc, s)); /* once */
    ck_assert_ptr_null(gkv_lc_spare(&lc, "k", 1, 20, -1));
    ck_assert_uint_eq(lc.bytes, 10);
    ck_assert_int_eq(gkv_lc_end_all(&lc, record, &e), 0);
    ck_assert_int_eq(e.n, 2);
    ck_assert_ptr_eq(e.ended[1], b);
    ck_assert_uint_eq(lc.bytes, 0);
    ck_assert_ptr_null(gkv_lc_read(&lc, "k", 1));
    gkv_lc_fini(&lc);
}
END_TEST

START_TEST(slots_and_bytes_bound_the_cache_oldest_first)
{
    gkv_lease_cache_t lc;
    ends_t e = {0};
    gkv_lc_init(&lc);
    ck_assert_int_eq(gkv_lc_configure(&lc, 3, 100, 250, record, &e), 0);
    static const char *keys[4] = {"k0", "k1", "k2", "k3"}; /* borrowed: they outlive it */
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(gkv_lc_put(&lc, mk(i, 50, 0, 0), keys[i], 2, record, &e), 0);
    ck_assert_int_eq(lc.n, 3); /* the fourth pushed the oldest out */
    ck_assert_int_eq(e.n, 1);
    ck_assert_ptr_eq(e.ended[0], &maps[0]);
    /* 150 bytes cached; 120 more exceed 250: the oldest go until it fits. */
    ck_assert(!gkv_lc_wants(&lc, mk(4, 120, 0, 0))); /* over max_value for gkv_unmap */
    ck_assert_int_eq(gkv_lc_put(&lc, &maps[4], "k4", 2, record, &e), 0);
    ck_assert_int_eq(e.n, 2);
    ck_assert_ptr_eq(e.ended[1], &maps[1]);
    ck_assert_uint_le(lc.bytes, 250);
    /* Larger than max_bytes: straight to the end, the cached ones staying. */
    int before = lc.n;
    ck_assert_int_eq(gkv_lc_put(&lc, mk(5, 300, 0, 0), "k5", 2, record, &e), 0);
    ck_assert_ptr_eq(e.ended[e.n - 1], &maps[5]);
    ck_assert_int_eq(lc.n, before);
    /* Fewer slots: the oldest go. */
    ck_assert_int_eq(gkv_lc_configure(&lc, 1, 100, 0, record, &e), 0);
    ck_assert_int_eq(lc.n, 1);
    ck_assert_ptr_eq(gkv_lc_read(&lc, "k4", 2), &maps[4]);
    /* Off: nothing stays. */
    ck_assert_int_eq(gkv_lc_configure(&lc, 0, 100, 0, record, &e), 0);
    ck_assert_int_eq(lc.n, 0);
    ck_assert(!gkv_lc_wants(&lc, mk(6, 1, 0, 0)));
    ck_assert_int_eq(gkv_lc_put(&lc, &maps[6], "k6", 2, record, &e), 0);
    ck_assert_ptr_eq(e.ended[e.n - 1], &maps[6]);
    ck_assert_int_eq(e.n, 7); /* 0..6: every lease ended once (record checks) */
    gkv_lc_fini(&lc);
}
END_TEST

START_TEST(a_keys_leases_end_together)
{
    gkv_lease_cache_t lc;
    ends_t e = {0};
    gkv_lc_init(&lc);
    ck_assert_int_eq(gkv_lc_put(&lc, mk(0, 1, 0, 0), "a", 1, record, &e), 0);
    ck_assert_int_eq(gkv_lc_put(&lc, mk(1, 1, 1, 0), "a", 1, record, &e), 0);
    ck_assert_int_eq(gkv_lc_put(&lc, mk(2, 1, 0, 0), "b", 1, record, &e), 0);
    ck_assert_int_eq(gkv_lc_end_key(&lc, "a", 1, record, &e), 0);
    ck_assert_int_eq(e.n, 2);
    ck_assert_int_eq(lc.n, 1);
    ck_assert_ptr_eq(gkv_lc_read(&lc, "b", 1), &maps[2]);
    gkv_lc_fini(&lc);
}
END_TEST

static gkv_lease_cache_t shared;
static gkv_mapping_t later_maps[4][100];

static void *queue_later(void *arg)
{
    gkv_mapping_t *ms = arg;
    for (int i = 0; i < 100; i++) {
        ms[i].length = 1u << 20;
        ck_assert_int_eq(gkv_lc_later(&shared, &ms[i]), 0);
    }
    return NULL;
}

START_TEST(later_ends_from_several_threads_come_back_once)
{
    gkv_lc_init(&shared);
    ck_assert(!gkv_lc_later_due(&shared));
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, queue_later, later_maps[i]);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    ck_assert(gkv_lc_later_due(&shared)); /* 400 waiting, 400 MiB */
    gkv_mapping_t **list;
    size_t n = gkv_lc_take_later(&shared, &list);
    ck_assert_uint_eq(n, 400);
    int seen[4] = {0};
    for (size_t i = 0; i < n; i++) {
        int th = (int)((list[i] - &later_maps[0][0]) / 100);
        ck_assert(th >= 0 && th < 4);
        seen[th]++;
    }
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(seen[i], 100);
    free(list);
    ck_assert(!gkv_lc_later_due(&shared));
    ck_assert_uint_eq(gkv_lc_take_later(&shared, &list), 0);
    free(list);
    gkv_lc_fini(&shared);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("lease_cache");
    TCase *t = tcase_create("lease_cache");
    tcase_add_test(t, the_newest_read_lease_and_spares_by_size_and_gpu_are_found);
    tcase_add_test(t, slots_and_bytes_bound_the_cache_oldest_first);
    tcase_add_test(t, a_keys_leases_end_together);
    tcase_add_test(t, later_ends_from_several_threads_come_back_once);
    suite_add_tcase(s, t);
    return s;
}
