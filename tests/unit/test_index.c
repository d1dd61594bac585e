/* test_index.c: the key index: lookups, replacement, unlinking, ordered prefix walks, 1 M keys,
 * each with the key order kept inline (_i 0) and by the helper thread (_i 1, order.h), and a
 * random mix against a model. Nodes carry a small record of the test's own in front of their
 * links. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "index.h"

typedef struct {
    uint64_t tag;
} rec_t;

static rec_t *node(gkv_index_t *ix, const char *key, size_t klen, uint64_t tag)
{
    rec_t *r = gkv_inode_new(ix, key, klen);
    ck_assert_ptr_nonnull(r);
    ck_assert_uint_eq(r->tag, 0); /* zeroed */
    r->tag = tag;
    return r;
}

/* An index, its key order kept by a helper thread when helper is set. */
static gkv_index_t *new_index(int helper)
{
    gkv_index_t *ix = gkv_index_alloc(sizeof(rec_t));
    ck_assert_ptr_nonnull(ix);
    if (helper)
        ck_assert_int_eq(gkv_index_start_helper(ix), 0);
    return ix;
}

static size_t key_of(char *buf, size_t cap, unsigned i)
{
    return (size_t)snprintf(buf, cap, "dir%03u/item%07u", i % 1000, i);
}

static void free_rec(void *data, void *arg)
{
    gkv_inode_free(arg, data);
}

START_TEST(link_get_replace_unlink)
{
    gkv_index_t *ix = new_index(_i);
    void *old;
    rec_t *a = node(ix, "k", 1, 1), *b = node(ix, "k", 1, 2);
    size_t kl;
    ck_assert_int_eq(memcmp(gkv_inode_data_key(ix, a, &kl), "k", 1), 0);
    ck_assert_uint_eq(kl, 1);
    ck_assert_int_eq(gkv_index_link(ix, a, &old), 0);
    ck_assert_ptr_null(old);
    ck_assert_ptr_eq(gkv_index_get(ix, "k", 1), a);
    size_t mem1 = gkv_index_memory(ix);
    ck_assert_int_eq(gkv_index_link(ix, b, &old), 0); /* replaces a, which stays the caller's */
    ck_assert_ptr_eq(old, a);
    ck_assert_ptr_eq(gkv_index_get(ix, "k", 1), b);
    ck_assert_uint_eq(gkv_index_count(ix), 1);
    ck_assert_uint_gt(mem1, 0);
    ck_assert_uint_eq(a->tag, 1); /* untouched by the replacement */
    gkv_inode_free(ix, a);
    ck_assert_ptr_null(gkv_index_get(ix, "k\0", 2)); /* binary-safe: a different key */
    const gkv_inode_t *n = gkv_index_seek(ix, "", 0);
    ck_assert_ptr_eq(gkv_inode_val(ix, n), b);
    ck_assert_ptr_null(gkv_index_next(ix, n));
    void *pick[4];
    ck_assert_uint_eq(gkv_index_sample(ix, pick, 4), 4); /* the one node, four times */
    ck_assert_ptr_eq(pick[3], b);
    gkv_index_unlink_node(ix, b);
    ck_assert_uint_eq(gkv_index_sample(ix, pick, 4), 0);
    ck_assert_ptr_null(gkv_index_get(ix, "k", 1));
    ck_assert_ptr_null(gkv_index_seek(ix, "", 0));
    ck_assert_uint_eq(gkv_index_count(ix), 0);
    gkv_inode_free(ix, b);
    gkv_index_free(ix, NULL, NULL);
}
END_TEST

START_TEST(seek_walks_in_byte_order)
{
    gkv_index_t *ix = new_index(_i);
    const char *keys[] = {"b/2", "a", "b/1", "c", "b/10", "\xff", "b"};
    void *old;
    for (size_t i = 0; i < 7; i++)
        gkv_index_link(ix, node(ix, keys[i], strlen(keys[i]), i), &old);
    const char *want[] = {"b", "b/1", "b/10", "b/2", "c", "\xff"};
    const gkv_inode_t *n = gkv_index_seek(ix, "b", 1);
    for (size_t i = 0; i < 6; i++, n = gkv_index_next(ix, n)) {
        ck_assert_ptr_nonnull(n);
        size_t kl;
        const uint8_t *k = gkv_inode_key(n, &kl);
        ck_assert_uint_eq(kl, strlen(want[i]));
        ck_assert_int_eq(memcmp(k, want[i], kl), 0);
    }
    ck_assert_ptr_null(n);
    ck_assert_ptr_null(gkv_index_seek(ix, "\xff\xff", 2));
    gkv_index_free(ix, free_rec, ix);
}
END_TEST

static void count_drop(void *val, void *arg)
{
    size_t *counts = arg;
    counts[0]++;
    free(val); /* nodes are single allocations starting at their data */
}

START_TEST(a_million_keys)
{
    enum { N = 1000000 };
    gkv_index_t *ix = new_index(_i);
    char k[64];
    void *old;
    for (unsigned i = 0; i < N; i++) {
        size_t kl = key_of(k, sizeof(k), i);
        ck_assert_int_eq(gkv_index_link(ix, node(ix, k, kl, i + 1), &old), 0);
        ck_assert_ptr_null(old);
    }
    ck_assert_uint_eq(gkv_index_count(ix), N);
    for (unsigned i = 0; i < N; i += 7) {
        size_t kl = key_of(k, sizeof(k), i);
        rec_t *r = gkv_index_get(ix, k, kl);
        ck_assert_ptr_nonnull(r);
        ck_assert_uint_eq(r->tag, i + 1);
    }
    /* Unlink every third key; the rest must still be found (backward-shift deletion). */
    for (unsigned i = 0; i < N; i += 3) {
        size_t kl = key_of(k, sizeof(k), i);
        rec_t *r = gkv_index_get(ix, k, kl);
        ck_assert_ptr_nonnull(r);
        ck_assert_uint_eq(r->tag, i + 1);
        gkv_index_unlink_node(ix, r);
        gkv_inode_free(ix, r);
    }
    /* And every fifth left. */
    for (unsigned i = 5; i < N; i += 5) {
        size_t kl = key_of(k, sizeof(k), i);
        rec_t *r = gkv_index_get(ix, k, kl);
        if (i % 3 == 0) {
            ck_assert_ptr_null(r);
            continue;
        }
        gkv_index_unlink_node(ix, r);
        ck_assert_ptr_null(gkv_index_get(ix, k, kl));
        gkv_inode_free(ix, r);
    }
    for (unsigned i = 0; i < N; i++) {
        size_t kl = key_of(k, sizeof(k), i);
        rec_t *r = gkv_index_get(ix, k, kl);
        if (i % 3 == 0 || (i % 5 == 0 && i))
            ck_assert_ptr_null(r);
        else
            ck_assert_uint_eq(r->tag, i + 1);
    }
    /* Samples are linked nodes. */
    for (int round = 0; round < 1000; round++) {
        void *pick[16];
        size_t got = gkv_index_sample(ix, pick, 16);
        ck_assert_uint_eq(got, 16);
        for (size_t j = 0; j < got; j++) {
            unsigned i = (unsigned)(((rec_t *)pick[j])->tag - 1);
            ck_assert(i % 3 != 0 && (i % 5 != 0 || !i));
        }
    }
    /* A prefix holds exactly its keys, in order. */
    const char *prefix = "dir042/";
    unsigned seen = 0;
    char prev[64] = "";
    for (const gkv_inode_t *n = gkv_index_seek(ix, prefix, 7); n; n = gkv_index_next(ix, n)) {
        size_t kl;
        const uint8_t *key = gkv_inode_key(n, &kl);
        if (kl < 7 || memcmp(key, prefix, 7) != 0)
            break;
        char cur[64];
        snprintf(cur, sizeof(cur), "%.*s", (int)kl, (const char *)key);
        ck_assert_int_lt(strcmp(prev, cur), 0);
        strcpy(prev, cur);
        seen++;
    }
    unsigned expect = 0;
    for (unsigned i = 42; i < N; i += 1000)
        expect += i % 3 != 0 && i % 5 != 0;
    ck_assert_uint_eq(seen, expect);
    size_t dropped[1] = {0};
    size_t left = gkv_index_count(ix);
    gkv_index_free(ix, count_drop, dropped);
    ck_assert_uint_eq(dropped[0], left);
}
END_TEST

/* Links, replaces and unlinks at random over 4096 keys, with walks in between, and compares
 * every walk with a model of which keys are linked. Long runs without a walk fill the helper's
 * ring; nodes are freed as soon as they are unlinked or replaced (the index holds them back
 * while the helper may still read them: ASan sees any early free). */
START_TEST(a_random_mix_matches_a_model)
{
    enum { KEYS = 4096, OPS = 300000 };
    gkv_index_t *ix = new_index(_i);
    static rec_t *linked[KEYS];
    memset(linked, 0, sizeof(linked));
    uint64_t rng = 88172645463325252ull;
    char k[32];
    unsigned count = 0;
    for (unsigned op = 0; op < OPS; op++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        unsigned i = (unsigned)(rng % KEYS);
        size_t kl = (size_t)snprintf(k, sizeof(k), "m/%04x", i);
        void *old;
        if ((rng >> 20) % 3) { /* link or replace */
            rec_t *r = node(ix, k, kl, op + 1);
            ck_assert_int_eq(gkv_index_link(ix, r, &old), 0);
            ck_assert_ptr_eq(old, linked[i]);
            if (old)
                gkv_inode_free(ix, old);
            else
                count++;
            linked[i] = r;
        } else if (linked[i]) {
            gkv_index_unlink_node(ix, linked[i]);
            gkv_inode_free(ix, linked[i]);
            linked[i] = NULL;
            count--;
        }
        if (op % 50000 == 49999 || (op > 250000 && op % 997 == 0)) {
            unsigned seen = 0, want = 0;
            for (const gkv_inode_t *n = gkv_index_seek(ix, "m/", 2); n; n = gkv_index_next(ix, n)) {
                size_t nl;
                const uint8_t *nk = gkv_inode_key(n, &nl);
                char text[16];
                snprintf(text, sizeof(text), "%.*s", (int)nl, (const char *)nk);
                unsigned j;
                ck_assert_int_eq(sscanf(text, "m/%4x", &j), 1);
                while (want < j) /* keys in order: none skipped */
                    ck_assert_ptr_null(linked[want++]);
                ck_assert_ptr_eq(gkv_inode_val(ix, n), linked[j]);
                want = j + 1;
                seen++;
            }
            ck_assert_uint_eq(seen, count);
        }
    }
    ck_assert_uint_eq(gkv_index_count(ix), count);
    gkv_index_free(ix, free_rec, ix);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("index");
    TCase *t = tcase_create("basics");
    /* The random mix takes seconds under the sanitizers, more with the helper thread sharing
     * two cores with other tests (ctest -j2): Check's 4 s default failed it once. */
    tcase_set_timeout(t, 60);
    tcase_add_loop_test(t, link_get_replace_unlink, 0, 2);
    tcase_add_loop_test(t, seek_walks_in_byte_order, 0, 2);
    tcase_add_loop_test(t, a_random_mix_matches_a_model, 0, 2);
    suite_add_tcase(s, t);
    t = tcase_create("scale");
    tcase_set_timeout(t, 120);
    tcase_add_loop_test(t, a_million_keys, 0, 2);
    suite_add_tcase(s, t);
    return s;
}
