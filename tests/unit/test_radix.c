/* test_radix.c: the radix tree against a plain sorted list, through random inserts, removals,
 * replacements and seeks over keys built to reach every corner: a small alphabet with 0x00 and
 * 0xff, keys that are prefixes of others, shared paths longer than the bytes a node keeps, and
 * nodes of every kind, grown and shrunk. */
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "hash.h"
#include "radix.h"

typedef struct {
    size_t len;
    uint64_t tag;
    uint8_t key[]; /* KEY_MAX bytes in the tests that do not say otherwise */
} leaf_t;

#define KEY_MAX 48

static leaf_t *leaf_new(const uint8_t *k, size_t len, size_t cap)
{
    leaf_t *l = calloc(1, sizeof(*l) + cap);
    ck_assert_ptr_nonnull(l);
    memcpy(l->key, k, len);
    l->len = len;
    return l;
}

static const uint8_t *key_of(const void *leaf, size_t *len)
{
    const leaf_t *l = leaf;
    *len = l->len;
    return l->key;
}

static int cmp(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);
    return c ? c : (alen > blen) - (alen < blen);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void)
{
    return gkv_xorshift64(&rng);
}

/* A random key: sometimes behind a 20-byte shared path (longer than a node keeps), then 0-6
 * bytes, mostly from {0x00, 'a', 'b', 0xff} (deep trees of prefixes), sometimes from 20 symbols
 * (nodes of 16 and 48 children). */
static void random_key(uint8_t *k, size_t *len)
{
    static const uint8_t alphabet[] = {0x00, 'a', 'b', 0xff, 0x01, 'c', 'd', 'e', 'f',  'g',
                                       'h',  'i', 'j', 'k',  'l',  'm', 'n', 'o', 0x7f, 0xfe};
    size_t n = 0;
    if (next() & 1) {
        memcpy(k, "a-shared-path-of-20-", 20);
        n = 20;
    }
    size_t more = next() % 7, symbols = next() % 4 ? 4 : sizeof(alphabet);
    for (size_t i = 0; i < more; i++)
        k[n++] = alphabet[next() % symbols];
    *len = n;
}

/* The reference: leaves in a sorted array. */
typedef struct {
    leaf_t *v[4096];
    size_t n;
} model_t;

static size_t model_find(const model_t *m, const uint8_t *k, size_t len, bool after)
{
    size_t i = 0;
    while (i < m->n) {
        int c = cmp(m->v[i]->key, m->v[i]->len, k, len);
        if (c > 0 || (c == 0 && !after))
            break;
        i++;
    }
    return i;
}

static void check_seek(const gkv_radix_t *t, const model_t *m, const uint8_t *k, size_t len)
{
    for (int after = 0; after < 2; after++) {
        size_t i = model_find(m, k, len, after);
        void *got = gkv_radix_seek(t, k, len, after);
        ck_assert_ptr_eq(got, i < m->n ? m->v[i] : NULL);
    }
}

START_TEST(matches_a_sorted_list_through_random_operations)
{
    gkv_radix_t t;
    gkv_radix_init(&t, key_of);
    model_t *m = calloc(1, sizeof(*m));
    for (int op = 0; op < 200000; op++) {
        uint8_t k[KEY_MAX];
        size_t len;
        random_key(k, &len);
        size_t i = model_find(m, k, len, false);
        bool present = i < m->n && cmp(m->v[i]->key, m->v[i]->len, k, len) == 0;
        switch (next() % 4) {
        case 0:
        case 1:
            if (present) { /* replace */
                leaf_t *l = leaf_new(k, len, KEY_MAX);
                l->tag = (uint64_t)op;
                ck_assert_ptr_eq(gkv_radix_replace(&t, l), m->v[i]);
                free(m->v[i]);
                m->v[i] = l;
            } else if (m->n < 4096) {
                leaf_t *l = leaf_new(k, len, KEY_MAX);
                ck_assert_int_eq(gkv_radix_insert(&t, l), 0);
                memmove(&m->v[i + 1], &m->v[i], (m->n - i) * sizeof(m->v[0]));
                m->v[i] = l;
                m->n++;
            }
            break;
        case 2: {
            void *got = gkv_radix_remove(&t, k, len);
            if (present) {
                ck_assert_ptr_eq(got, m->v[i]);
                free(m->v[i]);
                memmove(&m->v[i], &m->v[i + 1], (m->n - i - 1) * sizeof(m->v[0]));
                m->n--;
            } else {
                ck_assert_ptr_null(got);
            }
            break;
        }
        default:
            check_seek(&t, m, k, len);
        }
        if (op % 20000 == 0) { /* a full walk in order */
            const leaf_t *l = gkv_radix_seek(&t, (const uint8_t *)"", 0, false);
            for (size_t j = 0; j < m->n; j++) {
                ck_assert_ptr_eq(l, m->v[j]);
                l = gkv_radix_seek(&t, l->key, l->len, true);
            }
            ck_assert_ptr_null(l);
        }
    }
    /* Removing everything gives back every node. */
    for (size_t j = 0; j < m->n; j++) {
        ck_assert_ptr_eq(gkv_radix_remove(&t, m->v[j]->key, m->v[j]->len), m->v[j]);
        free(m->v[j]);
    }
    ck_assert_uint_eq(t.root, 0);
    ck_assert_uint_eq(t.nodes, 0);
    ck_assert_uint_eq(t.bytes, 0);
    free(m);
}
END_TEST

static void count_and_free(void *leaf, void *arg)
{
    (*(size_t *)arg)++;
    free(leaf);
}

START_TEST(nodes_grow_to_256_children_and_shrink_back)
{
    gkv_radix_t t;
    gkv_radix_init(&t, key_of);
    leaf_t *l[256];
    for (int b = 0; b < 256; b++) { /* "p" then every byte: the node under "p" grows 4-16-48-256 */
        uint8_t k[2] = {'p', (uint8_t)(255 - b)};
        l[b] = leaf_new(k, 2, 2);
        ck_assert_int_eq(gkv_radix_insert(&t, l[b]), 0);
    }
    size_t big = t.bytes;
    const leaf_t *x = gkv_radix_seek(&t, (const uint8_t *)"p", 1, false);
    for (int c = 0; c < 256; c++) { /* in byte order, whatever the node's kind */
        ck_assert_ptr_eq(x, l[255 - c]);
        x = gkv_radix_seek(&t, x->key, x->len, true);
    }
    ck_assert_ptr_null(x);
    for (int b = 0; b < 255; b++) {
        uint8_t k[2] = {'p', (uint8_t)b};
        const leaf_t *next = gkv_radix_seek(&t, k, 2, true);
        ck_assert_ptr_eq(next, l[255 - (b + 1)]);
    }
    for (int b = 0; b < 250; b++) {
        ck_assert_ptr_eq(gkv_radix_remove(&t, l[b]->key, 2), l[b]);
        free(l[b]);
    }
    ck_assert_uint_lt(t.bytes, big / 8); /* back to a small node */
    uint8_t k[2] = {'p', 0};
    ck_assert_ptr_eq(gkv_radix_seek(&t, k, 2, false), l[255]);
    size_t dropped = 0;
    gkv_radix_clear(&t, count_and_free, &dropped);
    ck_assert_uint_eq(dropped, 6);
    ck_assert_uint_eq(t.nodes, 0);
    ck_assert_uint_eq(t.bytes, 0);
    for (int kind = 0; kind < 2; kind++) { /* clearing full nodes of 48 and of 256 children */
        for (int b = 0; b < (kind ? 256 : 40); b++) {
            uint8_t q[2] = {'q', (uint8_t)b};
            ck_assert_int_eq(gkv_radix_insert(&t, leaf_new(q, 2, 2)), 0);
        }
        dropped = 0;
        gkv_radix_clear(&t, count_and_free, &dropped);
        ck_assert_uint_eq(dropped, kind ? 256 : 40);
        ck_assert_uint_eq(t.bytes, 0);
    }
}
END_TEST

START_TEST(a_chain_of_prefixes_is_cleared_without_recursion)
{
    /* "", "x", "xx", ... 4000 keys deep: every node holds an end leaf and one child. */
    enum { N = 4000 };
    gkv_radix_t t;
    gkv_radix_init(&t, key_of);
    static uint8_t xs[N];
    memset(xs, 'x', N);
    for (size_t i = 0; i < N; i++)
        ck_assert_int_eq(gkv_radix_insert(&t, leaf_new(xs, i, i)), 0);
    const leaf_t *l = gkv_radix_seek(&t, (const uint8_t *)"xxx", 3, true);
    ck_assert_uint_eq(l->len, 4);
    size_t dropped = 0;
    gkv_radix_clear(&t, count_and_free, &dropped);
    ck_assert_uint_eq(dropped, N);
    ck_assert_uint_eq(t.nodes, 0);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("radix");
    TCase *t = tcase_create("radix");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, matches_a_sorted_list_through_random_operations);
    tcase_add_test(t, nodes_grow_to_256_children_and_shrink_back);
    tcase_add_test(t, a_chain_of_prefixes_is_cleared_without_recursion);
    suite_add_tcase(s, t);
    return s;
}
