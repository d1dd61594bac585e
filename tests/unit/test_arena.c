/* test_arena.c: the host arena's allocator: fit, alignment, merging, exhaustion. */
#include <gpukv/gpukv.h>
#include <stdlib.h>

#include "arena.h"
#include "check_main.h"

START_TEST(allocations_are_aligned_and_disjoint)
{
    gkv_arena_t *a;
    ck_assert_int_eq(gkv_arena_alloc_init(&a, 1 << 20, 64), 0);
    uint64_t off[100];
    for (int i = 0; i < 100; i++) {
        ck_assert_int_eq(gkv_arena_alloc(a, (uint64_t)i * 7 + 1, &off[i]), 0);
        ck_assert_uint_eq(off[i] % 64, 0);
        for (int j = 0; j < i; j++) /* ranges never overlap */
            ck_assert(off[i] + (uint64_t)i * 7 + 1 <= off[j] ||
                      off[j] + (uint64_t)j * 7 + 1 <= off[i]);
    }
    for (int i = 0; i < 100; i++)
        gkv_arena_free(a, off[i], (uint64_t)i * 7 + 1);
    ck_assert_uint_eq(gkv_arena_used(a), 0);
    ck_assert_uint_eq(gkv_arena_free_ranges(a), 1); /* everything merged back */
    gkv_arena_free_all(a);
}
END_TEST

/* A reload's reservations, in ascending order: the gaps stay free for allocations, nothing
 * overlaps, out-of-order or misaligned ones are refused, and freeing merges back to one range. */
START_TEST(reservations_in_ascending_order_leave_the_gaps_free)
{
    gkv_arena_t *a;
    ck_assert_int_eq(gkv_arena_alloc_init(&a, 1 << 20, 64), 0);
    ck_assert_int_eq(gkv_arena_reserve(a, 0, 100), 0);
    ck_assert_int_eq(gkv_arena_reserve(a, 4096, 4096), 0);
    ck_assert_int_eq(gkv_arena_reserve(a, 4096, 64), GKV_EINVAL);   /* taken */
    ck_assert_int_eq(gkv_arena_reserve(a, 1000, 64), GKV_EINVAL);   /* below the last one */
    ck_assert_int_eq(gkv_arena_reserve(a, 8200, 64), GKV_EINVAL);   /* misaligned */
    ck_assert_int_eq(gkv_arena_reserve(a, (1 << 20) - 64, 128), GKV_EINVAL); /* past the end */
    ck_assert_int_eq(gkv_arena_reserve(a, (1 << 20) - 64, 64), 0); /* the very end */
    ck_assert_uint_eq(gkv_arena_used(a), 128 + 4096 + 64);
    ck_assert_uint_eq(gkv_arena_free_ranges(a), 2);
    uint64_t off;
    ck_assert_int_eq(gkv_arena_alloc(a, 3000, &off), 0); /* fits the gap between the first two */
    ck_assert(off >= 128 && off + 3000 <= 4096);
    gkv_arena_free(a, off, 3000);
    gkv_arena_free(a, 0, 100);
    gkv_arena_free(a, 4096, 4096);
    gkv_arena_free(a, (1 << 20) - 64, 64);
    ck_assert_uint_eq(gkv_arena_used(a), 0);
    ck_assert_uint_eq(gkv_arena_free_ranges(a), 1);
    gkv_arena_free_all(a);
}
END_TEST

START_TEST(exhaustion_is_oom_and_frees_make_room)
{
    gkv_arena_t *a;
    ck_assert_int_eq(gkv_arena_alloc_init(&a, 4096, 64), 0);
    uint64_t x, y, z;
    ck_assert_int_eq(gkv_arena_alloc(a, 2048, &x), 0);
    ck_assert_int_eq(gkv_arena_alloc(a, 2048, &y), 0);
    ck_assert_int_eq(gkv_arena_alloc(a, 1, &z), GKV_EOOM);
    ck_assert_int_eq(gkv_arena_alloc(a, 0, &z), GKV_EINVAL);
    ck_assert_int_eq(gkv_arena_alloc(a, 1ull << 40, &z), GKV_EOOM);
    gkv_arena_free(a, x, 2048);
    ck_assert_int_eq(gkv_arena_alloc(a, 1024, &z), 0);
    ck_assert_int_eq(gkv_arena_alloc(a, 1024, &z), 0);
    ck_assert_int_eq(gkv_arena_alloc(a, 64, &z), GKV_EOOM);
    gkv_arena_free_all(a);
}
END_TEST

START_TEST(random_churn_keeps_accounting_exact)
{
    enum { N = 2000 };
    gkv_arena_t *a;
    ck_assert_int_eq(gkv_arena_alloc_init(&a, 64 << 20, 64), 0);
    uint64_t off[N], size[N];
    int live[N] = {0};
    uint64_t used = 0;
    srand(7);
    for (int step = 0; step < 50000; step++) {
        int i = rand() % N;
        if (live[i]) {
            gkv_arena_free(a, off[i], size[i]);
            used -= (size[i] + 63) & ~63ull;
            live[i] = 0;
        } else {
            size[i] = (uint64_t)(rand() % 40000) + 1;
            if (gkv_arena_alloc(a, size[i], &off[i]) == 0) {
                live[i] = 1;
                used += (size[i] + 63) & ~63ull;
            }
        }
        ck_assert_uint_eq(gkv_arena_used(a), used);
    }
    for (int i = 0; i < N; i++)
        if (live[i])
            gkv_arena_free(a, off[i], size[i]);
    ck_assert_uint_eq(gkv_arena_used(a), 0);
    ck_assert_uint_eq(gkv_arena_free_ranges(a), 1);
    gkv_arena_free_all(a);
}
END_TEST

START_TEST(bad_parameters)
{
    gkv_arena_t *a;
    ck_assert_int_eq(gkv_arena_alloc_init(&a, 1024, 48), GKV_EINVAL);
    ck_assert_int_eq(gkv_arena_alloc_init(&a, 10, 64), GKV_EINVAL);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("arena");
    TCase *t = tcase_create("allocation");
    tcase_add_test(t, allocations_are_aligned_and_disjoint);
    tcase_add_test(t, reservations_in_ascending_order_leave_the_gaps_free);
    tcase_add_test(t, exhaustion_is_oom_and_frees_make_room);
    tcase_add_test(t, bad_parameters);
    suite_add_tcase(s, t);
    t = tcase_create("churn");
    tcase_add_test(t, random_churn_keeps_accounting_exact);
    suite_add_tcase(s, t);
    return s;
}
