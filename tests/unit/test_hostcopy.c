/* test_hostcopy.c: host copies of small values: what is kept and what not, replacing and
 * dropping, the byte budget (random eviction keeps within it), and a random mix of puts and
 * drops against a model (probing survives removals). */
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "hostcopy.h"

static uint8_t value[64 << 10];

static void fill(uint8_t seed, uint64_t len)
{
    for (uint64_t i = 0; i < len; i++)
        value[i] = (uint8_t)(seed + i * 31);
}

static bool holds(gkv_hostcopy_t *hc, const void *key, uint8_t seed, uint64_t len)
{
    uint64_t got = 0;
    const uint8_t *b = gkv_hostcopy_get(hc, key, &got);
    if (!b || got != len)
        return false;
    for (uint64_t i = 0; i < len; i++)
        if (b[i] != (uint8_t)(seed + i * 31))
            return false;
    return true;
}

START_TEST(keeps_values_in_its_range_and_drops_them)
{
    gkv_hostcopy_t hc;
    gkv_hostcopy_init(&hc, 1 << 20, 64 << 10);
    int a, b, c, d;
    fill(1, 4096);
    gkv_hostcopy_put(&hc, &a, value, 4096);
    fill(2, GKV_HOSTCOPY_MIN - 1);
    gkv_hostcopy_put(&hc, &b, value, GKV_HOSTCOPY_MIN - 1); /* too small */
    fill(3, (64 << 10) + 1 > sizeof(value) ? sizeof(value) : 1);
    gkv_hostcopy_put(&hc, &c, value, (64 << 10) + 1); /* too large: not read */
    ck_assert(holds(&hc, &a, 1, 4096));
    uint64_t len;
    ck_assert_ptr_null(gkv_hostcopy_get(&hc, &b, &len));
    ck_assert_ptr_null(gkv_hostcopy_get(&hc, &c, &len));
    ck_assert_ptr_null(gkv_hostcopy_get(&hc, &d, &len));
    ck_assert_uint_eq(hc.count, 1);
    ck_assert_uint_eq(hc.hits, 1);
    /* A new value for the same key replaces the copy. */
    fill(9, 2000);
    gkv_hostcopy_put(&hc, &a, value, 2000);
    ck_assert(holds(&hc, &a, 9, 2000));
    ck_assert_uint_eq(hc.count, 1);
    gkv_hostcopy_drop(&hc, &a);
    gkv_hostcopy_drop(&hc, &a); /* twice: nothing to drop */
    ck_assert_ptr_null(gkv_hostcopy_get(&hc, &a, &len));
    ck_assert_uint_eq(hc.count, 0);
    ck_assert_uint_eq(hc.bytes, hc.cap * sizeof(gkv_hostcopy_slot_t)); /* the table alone */
    gkv_hostcopy_fini(&hc);
    ck_assert_uint_eq(hc.bytes, 0);
}
END_TEST

START_TEST(a_budget_of_zero_keeps_nothing)
{
    gkv_hostcopy_t hc;
    gkv_hostcopy_init(&hc, 0, 64 << 10);
    int a;
    gkv_hostcopy_put(&hc, &a, value, 4096);
    uint64_t len;
    ck_assert_ptr_null(gkv_hostcopy_get(&hc, &a, &len));
    ck_assert_uint_eq(hc.bytes, 0);
    ck_assert_ptr_null(hc.slots);
    gkv_hostcopy_fini(&hc);
}
END_TEST

/* 2000 values of 4 KiB into a 1 MiB budget: the budget holds, the newest copy is always kept,
 * the others that remain are intact, and evictions account for the rest. */
START_TEST(the_budget_holds_by_evicting_at_random)
{
    enum { N = 2000, LEN = 4096 };
    static char keys[N];
    gkv_hostcopy_t hc;
    gkv_hostcopy_init(&hc, 1 << 20, 64 << 10);
    for (int i = 0; i < N; i++) {
        fill((uint8_t)i, LEN);
        gkv_hostcopy_put(&hc, &keys[i], value, LEN);
        ck_assert_uint_le(hc.bytes, 1 << 20);
        ck_assert(holds(&hc, &keys[i], (uint8_t)i, LEN));
    }
    ck_assert_uint_gt(hc.count, 200);
    ck_assert_uint_eq(hc.fills, N);
    ck_assert_uint_eq(hc.evictions, N - hc.count);
    uint32_t kept = 0;
    for (int i = 0; i < N; i++) {
        uint64_t len;
        if (gkv_hostcopy_get(&hc, &keys[i], &len)) {
            ck_assert(holds(&hc, &keys[i], (uint8_t)i, LEN));
            kept++;
        }
    }
    ck_assert_uint_eq(kept, hc.count);
    gkv_hostcopy_fini(&hc);
}
END_TEST

/* Puts and drops at random over 5000 keys against a model: every key's copy is found with its
 * own bytes after removals shifted the table, and nothing dropped is found. */
START_TEST(a_random_mix_matches_a_model)
{
    enum { KEYS = 5000, OPS = 200000 };
    static char keys[KEYS];
    static int model[KEYS]; /* 0: none, else seed + 1 */
    memset(model, 0, sizeof(model));
    gkv_hostcopy_t hc;
    gkv_hostcopy_init(&hc, 1ull << 30, 64 << 10);
    uint64_t rng = 88172645463325252ull;
    for (int op = 0; op < OPS; op++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        unsigned k = (unsigned)(rng % KEYS);
        if ((rng >> 24) % 3) {
            uint8_t seed = (uint8_t)(rng >> 40);
            fill(seed, GKV_HOSTCOPY_MIN);
            gkv_hostcopy_put(&hc, &keys[k], value, GKV_HOSTCOPY_MIN);
            model[k] = seed + 1;
        } else {
            gkv_hostcopy_drop(&hc, &keys[k]);
            model[k] = 0;
        }
        if (op % 20000 == 19999) {
            uint32_t n = 0;
            for (unsigned i = 0; i < KEYS; i++) {
                uint64_t len;
                if (model[i]) {
                    ck_assert(holds(&hc, &keys[i], (uint8_t)(model[i] - 1), GKV_HOSTCOPY_MIN));
                    n++;
                } else {
                    ck_assert_ptr_null(gkv_hostcopy_get(&hc, &keys[i], &len));
                }
            }
            ck_assert_uint_eq(n, hc.count);
        }
    }
    ck_assert_uint_eq(hc.evictions, 0);
    gkv_hostcopy_fini(&hc);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("hostcopy");
    TCase *t = tcase_create("basics");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, keeps_values_in_its_range_and_drops_them);
    tcase_add_test(t, a_budget_of_zero_keeps_nothing);
    tcase_add_test(t, the_budget_holds_by_evicting_at_random);
    tcase_add_test(t, a_random_mix_matches_a_model);
    suite_add_tcase(s, t);
    return s;
}
