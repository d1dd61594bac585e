/* test_ttl.c: deadlines in the store (host backend): a key is gone for every lookup once its
 * deadline passes, active expiry reaps the earliest first, EXPIRE/PERSIST/TTL, an overwrite
 * without a ttl drops the deadline (in place or linked anew), and the heap stays exact under
 * churn. */
#include <gpukv/gpukv.h>
#include <stdio.h>
#include <string.h>

#include "check_main.h"
#include "store.h"

#define LIMIT (1u << 20)

#define STORE_LIMIT LIMIT
#include "store_fixture.h"

/* SET key (16 bytes) with a ttl (0: none); the store clock is st.now_ms. */
static void put(const char *key, uint64_t ttl)
{
    gkv_entry_t *e;
    ck_assert_int_eq(gkv_store_entry_new(&st, 0, key, strlen(key), 16, NULL, 0, 0, &e), 0);
    if (ttl)
        ck_assert_int_eq(gkv_store_entry_ttl(&st, e, ttl), 0);
    ck_assert_int_eq(gkv_store_publish(&st, e, 0, NULL), 0);
    gkv_store_unref(&st, e);
}

static bool there(const char *key)
{
    return gkv_store_find(&st, key, strlen(key)) != NULL;
}

static uint64_t left(const char *key)
{
    uint64_t l;
    ck_assert_int_eq(gkv_store_ttl(&st, key, strlen(key), &l), 0);
    return l;
}

START_TEST(a_key_is_gone_at_its_deadline)
{
    st.now_ms = 1000;
    put("a", 500);
    put("b", 0);
    ck_assert_uint_eq(left("a"), 500);
    ck_assert_uint_eq(left("b"), UINT64_MAX);
    st.now_ms = 1499;
    ck_assert(there("a"));
    st.now_ms = 1500;
    ck_assert(!there("a"));
    ck_assert(gkv_store_get(&st, "a", 1) == NULL);
    ck_assert_uint_eq(st.stats.expired, 1);
    ck_assert_uint_eq(gkv_index_count(st.ix), 1);
    ck_assert_uint_eq(st.linked_bytes, 16);
    ck_assert_uint_eq(gkv_store_next_deadline(&st), 0);
    gkv_store_flush(&st);
}
END_TEST

START_TEST(reap_takes_the_earliest_first_and_stops_at_now)
{
    st.now_ms = 0;
    char k[16];
    for (int i = 0; i < 100; i++) {
        snprintf(k, sizeof(k), "k%d", i);
        put(k, (uint64_t)(1000 - i * 7)); /* deadlines 1000 down to 307 */
    }
    ck_assert_uint_eq(gkv_store_next_deadline(&st), 1000 - 99 * 7);
    st.now_ms = 650;
    uint32_t n = gkv_store_reap(&st, 10);
    ck_assert_uint_eq(n, 10);
    ck_assert_uint_eq(st.ttl.n, 90); /* k99..k90 went: deadlines 307..370 */
    ck_assert_ptr_null(gkv_index_get(st.ix, "k90", 3));
    ck_assert_ptr_nonnull(gkv_index_get(st.ix, "k89", 3));
    ck_assert_uint_eq(gkv_store_next_deadline(&st), 1000 - 89 * 7);
    n = gkv_store_reap(&st, 1000);
    ck_assert_uint_eq(n, 40); /* deadlines 307..650: i = 50..99 */
    ck_assert(there("k49") && !there("k50"));
    ck_assert_uint_eq(gkv_store_next_deadline(&st), 1000 - 49 * 7);
    ck_assert_uint_eq(st.ttl.n, 50);
    gkv_store_flush(&st);
    ck_assert_uint_eq(st.ttl.n, 0);
}
END_TEST

START_TEST(expire_persist_and_ttl)
{
    st.now_ms = 10;
    put("k", 0);
    ck_assert_int_eq(gkv_store_expire(&st, "none", 4, 100), 0);
    ck_assert_int_eq(gkv_store_expire(&st, "k", 1, 100), 1);
    ck_assert_uint_eq(left("k"), 100);
    ck_assert_int_eq(gkv_store_expire(&st, "k", 1, 5), 1); /* moved earlier */
    ck_assert_uint_eq(gkv_store_next_deadline(&st), 15);
    ck_assert_int_eq(gkv_store_persist(&st, "k", 1), 1);
    ck_assert_int_eq(gkv_store_persist(&st, "k", 1), 0);
    ck_assert_int_eq(gkv_store_persist(&st, "none", 4), GKV_ENOTFOUND);
    uint64_t l;
    ck_assert_int_eq(gkv_store_ttl(&st, "none", 4, &l), GKV_ENOTFOUND);
    st.now_ms = 1000000;
    ck_assert(there("k"));
    gkv_store_flush(&st);
}
END_TEST

START_TEST(an_overwrite_without_a_ttl_drops_the_deadline)
{
    st.now_ms = 0;
    put("k", 100);
    put("k", 0); /* in place: nothing else holds the old value */
    ck_assert_uint_eq(left("k"), UINT64_MAX);
    ck_assert_uint_eq(st.ttl.n, 0);
    put("k", 50);
    ck_assert_uint_eq(left("k"), 50);
    gkv_entry_t *reader = gkv_store_get(&st, "k", 1);
    gkv_store_ref(reader); /* the next overwrite links a new entry */
    put("k", 0);
    ck_assert_uint_eq(left("k"), UINT64_MAX);
    ck_assert_uint_eq(st.ttl.n, 0);
    put("k", 70);
    ck_assert_uint_eq(st.ttl.n, 1);
    gkv_store_unref(&st, reader);
    ck_assert_int_eq(gkv_store_del(&st, "k", 1), 1);
    ck_assert_uint_eq(st.ttl.n, 0);
}
END_TEST

START_TEST(the_heap_stays_exact_under_churn)
{
    uint64_t x = 12345;
    char k[16];
    for (int i = 0; i < 20000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        snprintf(k, sizeof(k), "c%u", (unsigned)(x % 500));
        st.now_ms = (uint64_t)i;
        switch (x >> 60) {
        case 0:
        case 1:
        case 2:
        case 3:
            put(k, 1 + (x >> 40) % 3000);
            break;
        case 4:
        case 5:
            put(k, 0);
            break;
        case 6:
            gkv_store_del(&st, k, strlen(k));
            break;
        case 7:
            gkv_store_persist(&st, k, strlen(k));
            break;
        case 8:
            gkv_store_expire(&st, k, strlen(k), 1 + (x >> 40) % 3000);
            break;
        case 9:
            gkv_store_reap(&st, 3);
            break;
        default:
            there(k);
            break;
        }
        /* Every member has a deadline and its position; the top is the earliest. */
        for (uint32_t j = 0; j < st.ttl.n; j++) {
            ck_assert(st.ttl.v[j]->x && st.ttl.v[j]->x->expire_at);
            ck_assert_uint_eq(st.ttl.v[j]->x->heap_pos, j);
            if (j)
                ck_assert_uint_ge(st.ttl.v[j]->x->expire_at, st.ttl.v[(j - 1) / 2]->x->expire_at);
        }
    }
    /* Members are exactly the linked keys with a deadline. */
    uint32_t with = 0;
    for (const gkv_inode_t *n = gkv_index_seek(st.ix, "", 0); n; n = gkv_index_next(st.ix, n)) {
        const gkv_entry_t *e = gkv_inode_val(st.ix, n);
        with += e->x && e->x->expire_at;
    }
    ck_assert_uint_eq(with, st.ttl.n);
    gkv_store_flush(&st);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("ttl");
    TCase *t = tcase_create("deadlines");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_set_timeout(t, 120);
    tcase_add_test(t, a_key_is_gone_at_its_deadline);
    tcase_add_test(t, reap_takes_the_earliest_first_and_stops_at_now);
    tcase_add_test(t, expire_persist_and_ttl);
    tcase_add_test(t, an_overwrite_without_a_ttl_drops_the_deadline);
    tcase_add_test(t, the_heap_stays_exact_under_churn);
    suite_add_tcase(s, t);
    return s;
}
