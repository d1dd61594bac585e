/* test_slab.c: the slab allocator over a fake backing (addresses only, never dereferenced):
 * classes, disjoint slots, reuse, regions coming and going, refusal as OOM. */
#include <gpukv/gpukv.h>
#include <stdlib.h>

#include "check_main.h"
#include "slab.h"

typedef struct {
    uint64_t next, live, limit;
} fake_t;

static int fake_new(void *ctx, uint64_t size, uint64_t *base)
{
    fake_t *f = ctx;
    if (f->live + size > f->limit)
        return GKV_EOOM;
    f->next += size + 4096 * 3; /* regions are not adjacent */
    *base = f->next;
    f->live += size;
    return 0;
}

static void fake_free(void *ctx, uint64_t base, uint64_t size)
{
    (void)base;
    ((fake_t *)ctx)->live -= size;
}

static gkv_slab_t *make(fake_t *f, uint64_t limit)
{
    *f = (fake_t){1ull << 32, 0, limit};
    gkv_slab_backing_t b = {fake_new, fake_free, f};
    gkv_slab_t *s;
    ck_assert_int_eq(gkv_slab_alloc_init(&s, &b), 0);
    return s;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

START_TEST(slots_are_aligned_disjoint_and_reused)
{
    fake_t f;
    gkv_slab_t *s = make(&f, 1ull << 40);
    enum { N = 40000 };
    uint64_t *addr = malloc(N * sizeof(*addr)), *sorted = malloc(N * sizeof(*addr));
    for (int i = 0; i < N; i++) {
        uint64_t size = 1 + (uint64_t)(i * 7919) % GKV_SLAB_MAX;
        ck_assert_int_eq(gkv_slab_get(s, size, &addr[i]), 0);
        ck_assert_uint_eq(addr[i] % 16, 0);
        ck_assert(gkv_slab_owns(s, addr[i]));
        ck_assert(gkv_slab_owns(s, addr[i] + size - 1));
    }
    ck_assert_uint_ge(gkv_slab_used(s), 0);
    /* Disjoint: sorted, each slot ends before the next begins (sizes differ; use the class
     * bound, a slot is never larger than 1.25x its request rounded up to 16). */
    for (int i = 0; i < N; i++)
        sorted[i] = addr[i];
    qsort(sorted, N, sizeof(*sorted), cmp_u64);
    for (int i = 1; i < N; i++)
        ck_assert_uint_gt(sorted[i], sorted[i - 1]);
    for (int i = 0; i < N; i++) {
        uint64_t size = 1 + (uint64_t)(i * 7919) % GKV_SLAB_MAX;
        for (int j = i + 1; j < N && j < i + 50; j++) { /* no overlap with near neighbours */
            uint64_t sj = 1 + (uint64_t)(j * 7919) % GKV_SLAB_MAX;
            ck_assert(addr[i] + size <= addr[j] || addr[j] + sj <= addr[i]);
        }
    }
    uint64_t held = gkv_slab_held(s);
    for (int i = 0; i < N; i++)
        gkv_slab_put(s, addr[i], 1 + (uint64_t)(i * 7919) % GKV_SLAB_MAX);
    ck_assert_uint_eq(gkv_slab_used(s), 0);
    /* Empty regions went back, but one. */
    ck_assert_uint_eq(gkv_slab_held(s), GKV_SLAB_REGION);
    ck_assert_uint_lt(gkv_slab_held(s), held);
    ck_assert_uint_eq(f.live, GKV_SLAB_REGION);
    /* A freed slot is handed out again. */
    uint64_t a, b;
    ck_assert_int_eq(gkv_slab_get(s, 100, &a), 0);
    gkv_slab_put(s, a, 100);
    ck_assert_int_eq(gkv_slab_get(s, 100, &b), 0);
    ck_assert_uint_eq(a, b);
    gkv_slab_put(s, b, 100);
    gkv_slab_free_all(s);
    ck_assert_uint_eq(f.live, 0);
    free(addr);
    free(sorted);
}
END_TEST

START_TEST(small_values_cost_a_slot_not_an_allocation)
{
    fake_t f;
    gkv_slab_t *s = make(&f, 1ull << 40);
    /* 64 B values: 16384 to a page, 64 pages to a region. */
    uint64_t a;
    for (int i = 0; i < 16384 * 64; i++)
        ck_assert_int_eq(gkv_slab_get(s, 64, &a), 0);
    ck_assert_uint_eq(gkv_slab_held(s), GKV_SLAB_REGION);
    ck_assert_uint_eq(gkv_slab_used(s), 64ull * 16384 * 64);
    ck_assert_int_eq(gkv_slab_get(s, 64, &a), 0); /* the next one takes a second region */
    ck_assert_uint_eq(gkv_slab_held(s), 2ull * GKV_SLAB_REGION);
    gkv_slab_free_all(s);
}
END_TEST

START_TEST(refused_regions_are_oom_and_bad_sizes_einval)
{
    fake_t f;
    gkv_slab_t *s = make(&f, GKV_SLAB_REGION); /* room for one region only */
    uint64_t a, first;
    ck_assert_int_eq(gkv_slab_get(s, 0, &a), GKV_EINVAL);
    ck_assert_int_eq(gkv_slab_get(s, GKV_SLAB_MAX + 1, &a), GKV_EINVAL);
    /* 16 KiB values: 64 per page, 64 pages. */
    ck_assert_int_eq(gkv_slab_get(s, GKV_SLAB_MAX, &first), 0);
    for (int i = 1; i < 64 * 64; i++)
        ck_assert_int_eq(gkv_slab_get(s, GKV_SLAB_MAX, &a), 0);
    ck_assert_int_eq(gkv_slab_get(s, GKV_SLAB_MAX, &a), GKV_EOOM);
    ck_assert_int_eq(gkv_slab_get(s, 64, &a), GKV_EOOM); /* no free page for another class */
    gkv_slab_put(s, first, GKV_SLAB_MAX);
    ck_assert_int_eq(gkv_slab_get(s, GKV_SLAB_MAX, &a), 0);
    ck_assert_uint_eq(a, first);
    ck_assert(!gkv_slab_owns(s, 5));
    gkv_slab_free_all(s);
}
END_TEST

START_TEST(pages_move_between_classes)
{
    fake_t f;
    gkv_slab_t *s = make(&f, GKV_SLAB_REGION);
    enum { N = 64 * 64 };
    static uint64_t big[N];
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(gkv_slab_get(s, GKV_SLAB_MAX, &big[i]), 0);
    for (int i = 0; i < N; i++)
        gkv_slab_put(s, big[i], GKV_SLAB_MAX);
    /* Every page is free again: the same region now serves 64 B values. */
    uint64_t a;
    for (int i = 0; i < 16384 * 64; i++)
        ck_assert_int_eq(gkv_slab_get(s, 64, &a), 0);
    ck_assert_int_eq(gkv_slab_get(s, 64, &a), GKV_EOOM);
    gkv_slab_free_all(s);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("slab");
    TCase *t = tcase_create("slab");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, slots_are_aligned_disjoint_and_reused);
    tcase_add_test(t, small_values_cost_a_slot_not_an_allocation);
    tcase_add_test(t, refused_regions_are_oom_and_bad_sizes_einval);
    tcase_add_test(t, pages_move_between_classes);
    suite_add_tcase(s, t);
    return s;
}
