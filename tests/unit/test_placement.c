/* test_placement.c: weighted rendezvous placement and {tag}s (server/cluster/placement.h):
 * the same answer everywhere, about 1/N of the keys move when a node joins or leaves, and a
 * node's share of homes follows its weight. */
#include <stdio.h>
#include <string.h>

#include "check_main.h"
#include "placement.h"

static void member(gkv_member_t *m, const char *name, uint32_t weight)
{
    memset(m, 0, sizeof(*m));
    snprintf(m->name, sizeof(m->name), "%s", name);
    m->weight = weight;
    m->hash = gkv_place_node_hash(name);
}

static long home_of(const gkv_member_t *m, size_t n, const char *key)
{
    return gkv_place_home(m, n, gkv_place_key_hash(key, strlen(key)));
}

START_TEST(a_tag_is_the_first_braced_part_with_something_inside)
{
    static const struct {
        const char *key;
        const char *part;
    } cases[] = {
        {"user:{1000}:a", "1000"}, {"{a}{b}", "a"},  {"x{}y{z}", "x{}y{z}"}, {"{}", "{}"},
        {"no-tag", "no-tag"},      {"a{b", "a{b"}, {"a}b{c}", "c"},          {"{x}", "x"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t off, n;
        gkv_place_hashed_part(cases[i].key, strlen(cases[i].key), &off, &n);
        ck_assert_uint_eq(n, strlen(cases[i].part));
        ck_assert_mem_eq(cases[i].key + off, cases[i].part, n);
    }
    /* Keys with the same tag share a home, whatever else they hold. */
    ck_assert_uint_eq(gkv_place_key_hash("a{t}b", 5), gkv_place_key_hash("{t}", 3));
    ck_assert_uint_eq(gkv_place_key_hash("{t}x", 4), gkv_place_key_hash("t", 1));
}
END_TEST

START_TEST(every_node_computes_the_same_home_in_any_order)
{
    gkv_member_t a[3], b[3];
    member(&a[0], "n1", 1);
    member(&a[1], "n2", 1);
    member(&a[2], "n3", 1);
    b[0] = a[2];
    b[1] = a[0];
    b[2] = a[1];
    for (int i = 0; i < 2000; i++) {
        char key[32];
        snprintf(key, sizeof(key), "key-%d", i);
        long ha = home_of(a, 3, key), hb = home_of(b, 3, key);
        ck_assert_int_ge(ha, 0);
        ck_assert_str_eq(a[ha].name, b[hb].name);
    }
    ck_assert_int_eq(home_of(a, 0, "k"), -1);
}
END_TEST

/* With N equal nodes each gets about 1/N of the keys; a joining node takes about 1/(N+1), all
 * of it from the others, and nothing moves between the others. */
START_TEST(a_join_or_leave_moves_only_the_keys_whose_home_changes)
{
    enum { KEYS = 30000 };
    gkv_member_t m[4];
    member(&m[0], "alpha", 1);
    member(&m[1], "beta", 1);
    member(&m[2], "gamma", 1);
    member(&m[3], "delta", 1);
    unsigned count[4] = {0}, moved = 0, moved_elsewhere = 0;
    for (int i = 0; i < KEYS; i++) {
        char key[32];
        snprintf(key, sizeof(key), "chunk/%d", i);
        long before = home_of(m, 3, key), after = home_of(m, 4, key);
        count[after]++;
        if (before != after) {
            moved++;
            if (after != 3)
                moved_elsewhere++;
        }
    }
    ck_assert_uint_eq(moved_elsewhere, 0);
    /* 1/4 of 30000 is 7500; allow a few standard deviations (~75). */
    ck_assert_uint_gt(moved, 7000);
    ck_assert_uint_lt(moved, 8000);
    for (int i = 0; i < 4; i++) {
        ck_assert_uint_gt(count[i], 7000);
        ck_assert_uint_lt(count[i], 8000);
    }
}
END_TEST

START_TEST(a_node_gets_homes_in_proportion_to_its_weight)
{
    enum { KEYS = 40000 };
    gkv_member_t m[2];
    member(&m[0], "small", 1);
    member(&m[1], "large", 3);
    unsigned large = 0;
    for (int i = 0; i < KEYS; i++) {
        char key[32];
        snprintf(key, sizeof(key), "w%d", i);
        large += home_of(m, 2, key) == 1;
    }
    /* Expected 3/4 = 30000. */
    ck_assert_uint_gt(large, 29300);
    ck_assert_uint_lt(large, 30700);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("placement");
    TCase *tc = tcase_create("placement");
    tcase_add_test(tc, a_tag_is_the_first_braced_part_with_something_inside);
    tcase_add_test(tc, every_node_computes_the_same_home_in_any_order);
    tcase_add_test(tc, a_join_or_leave_moves_only_the_keys_whose_home_changes);
    tcase_add_test(tc, a_node_gets_homes_in_proportion_to_its_weight);
    suite_add_tcase(s, tc);
    return s;
}
