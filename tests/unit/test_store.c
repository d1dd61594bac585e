/* test_store.c: the store on the host backend: accounting, publish and swap, refcounts, NX/XX,
 * deletes under reference, and the copy of a value (MAP's of a slab value, MOVE's) being published
 * only while the key still names what it copied. */
#include <gpukv/gpukv.h>
#include <string.h>

#include "check_main.h"
#include "store.h"

#define LIMIT (1u << 20)

#define STORE_LIMIT LIMIT
#include "store_fixture.h"

/* A new unpublished entry of key holding value (the caller's reference). */
static gkv_entry_t *make(const char *key, const char *value)
{
    gkv_entry_t *e;
    size_t n = strlen(value);
    ck_assert_int_eq(gkv_store_entry_new(&st, 0, key, strlen(key), n, NULL, 0, 0, &e), 0);
    memcpy(be->ops->host_view(be, e->mem), value, n);
    return e;
}

static const char *bytes(const gkv_entry_t *e)
{
    return be->ops->host_view(be, e->mem);
}

static gkv_entry_t *get(const char *key)
{
    return gkv_store_get(&st, key, strlen(key));
}

START_TEST(entries_are_accounted_until_their_last_reference)
{
    gkv_entry_t *e = make("k", "12345");
    ck_assert_uint_eq(st.used, 5);
    ck_assert_uint_eq(st.entries, 1);
    gkv_store_ref(e);
    gkv_store_unref(&st, e);
    ck_assert_uint_eq(st.used, 5);
    gkv_store_unref(&st, e);
    ck_assert_uint_eq(st.used, 0);
    ck_assert_uint_eq(st.entries, 0);
}
END_TEST

START_TEST(over_the_limit_is_oom_and_touches_nothing)
{
    gkv_entry_t *a = make("a", "xyz"), *b;
    ck_assert_int_eq(gkv_store_publish(&st, a, 0, NULL), 0);
    gkv_store_unref(&st, a);
    ck_assert_int_eq(gkv_store_entry_new(&st, 0, "b", 1, LIMIT, NULL, 0, 0, &b), GKV_EOOM);
    ck_assert_uint_eq(st.stats.oom_errors, 1);
    ck_assert_uint_eq(st.used, 3);
    ck_assert_ptr_nonnull(get("a"));
    gkv_store_flush(&st);
}
END_TEST

START_TEST(publish_links_a_new_key)
{
    gkv_entry_t *e = make("k", "v1"), *holder = NULL;
    ck_assert_int_eq(gkv_store_publish(&st, e, 0, &holder), 0);
    ck_assert_ptr_eq(holder, e);
    ck_assert_uint_eq(e->refs, 2); /* ours and the index's */
    ck_assert_ptr_eq(get("k"), e);
    ck_assert_int_eq(gkv_store_publish(&st, e, 0, NULL), 0); /* again: nothing changes */
    ck_assert_uint_eq(e->refs, 2);
    gkv_store_unref(&st, e);
    ck_assert_int_eq(gkv_store_del(&st, "k", 1), 1);
    ck_assert_int_eq(gkv_store_del(&st, "k", 1), 0);
}
END_TEST

/* Nothing but the index holds the current entry: the new value moves into it in place and the
 * new entry leaves with the old value. */
START_TEST(overwrite_of_an_unused_value_swaps_in_place)
{
    gkv_entry_t *old = make("k", "old"), *e = make("k", "newer"), *holder = NULL;
    ck_assert_int_eq(gkv_store_publish(&st, old, 0, NULL), 0);
    gkv_store_unref(&st, old);
    ck_assert_int_eq(gkv_store_publish(&st, e, 0, &holder), 0);
    ck_assert_ptr_eq(holder, old);
    ck_assert_ptr_eq(get("k"), old);
    ck_assert_uint_eq(old->size, 5);
    ck_assert_int_eq(memcmp(bytes(old), "newer", 5), 0);
    ck_assert_uint_eq(e->size, 3);
    ck_assert_int_eq(memcmp(bytes(e), "old", 3), 0);
    ck_assert_uint_eq(st.used, 8);
    gkv_store_unref(&st, e); /* the old value goes */
    ck_assert_uint_eq(st.used, 5);
    gkv_store_flush(&st);
}
END_TEST

/* A reader holds the current entry: the new entry is linked and the reader keeps its bytes. */
START_TEST(overwrite_under_a_reader_links_the_new_entry)
{
    gkv_entry_t *old = make("k", "old"), *e = make("k", "newer"), *holder = NULL;
    ck_assert_int_eq(gkv_store_publish(&st, old, 0, NULL), 0); /* we keep our reference */
    ck_assert_int_eq(gkv_store_publish(&st, e, 0, &holder), 0);
    ck_assert_ptr_eq(holder, e);
    ck_assert_ptr_eq(get("k"), e);
    ck_assert_uint_eq(old->refs, 1);
    ck_assert_int_eq(memcmp(bytes(old), "old", 3), 0);
    gkv_store_unref(&st, old);
    gkv_store_unref(&st, e);
    ck_assert_uint_eq(st.used, 5);
    gkv_store_flush(&st);
    ck_assert_uint_eq(st.used, 0);
}
END_TEST

/* GKV_PUBLISH_LINK: the new entry is linked even where it could have moved into the unused old
 * one, so whoever leases the new entry holds the published value (an early MAP's lease). */
START_TEST(publish_link_never_moves_the_value)
{
    gkv_entry_t *old = make("k", "old"), *e = make("k", "newer"), *holder = NULL;
    ck_assert_int_eq(gkv_store_publish(&st, old, 0, NULL), 0);
    gkv_store_unref(&st, old); /* only the index holds it: a plain publish would move into it */
    ck_assert_int_eq(gkv_store_publish(&st, e, GKV_PUBLISH_LINK, &holder), 0);
    ck_assert_ptr_eq(holder, e);
    ck_assert_ptr_eq(get("k"), e);
    ck_assert_int_eq(memcmp(bytes(e), "newer", 5), 0);
    ck_assert_uint_eq(st.used, 5); /* the old value went with its entry */
    gkv_store_unref(&st, e);
    gkv_store_flush(&st);
    ck_assert_uint_eq(st.used, 0);
}
END_TEST

START_TEST(nx_and_xx_refuse_and_change_nothing)
{
    gkv_entry_t *a = make("k", "a"), *b = make("k", "b"), *c = make("other", "c");
    ck_assert_int_eq(gkv_store_publish(&st, a, GKV_SET_XX, NULL), GKV_ENOTFOUND);
    ck_assert_ptr_null(get("k"));
    ck_assert_int_eq(gkv_store_publish(&st, a, GKV_SET_NX, NULL), 0);
    ck_assert_int_eq(gkv_store_publish(&st, b, GKV_SET_NX, NULL), GKV_EEXISTS);
    ck_assert_ptr_eq(get("k"), a);
    ck_assert_int_eq(memcmp(bytes(a), "a", 1), 0);
    ck_assert_int_eq(gkv_store_publish(&st, b, GKV_SET_XX, NULL), 0);
    ck_assert_int_eq(gkv_store_publish(&st, c, GKV_SET_XX, NULL), GKV_ENOTFOUND);
    gkv_store_unref(&st, a);
    gkv_store_unref(&st, b);
    gkv_store_unref(&st, c);
    gkv_store_flush(&st);
}
END_TEST

START_TEST(a_deleted_value_lives_while_referenced)
{
    gkv_entry_t *e = make("k", "value");
    ck_assert_int_eq(gkv_store_publish(&st, e, 0, NULL), 0);
    ck_assert_int_eq(gkv_store_del(&st, "k", 1), 1);
    ck_assert_ptr_null(get("k"));
    ck_assert_uint_eq(st.used, 5);
    ck_assert_int_eq(memcmp(bytes(e), "value", 5), 0);
    gkv_store_unref(&st, e);
    ck_assert_uint_eq(st.used, 0);
}
END_TEST

START_TEST(metadata_is_copied_and_renewed)
{
    gkv_entry_t *e;
    ck_assert_int_eq(gkv_store_entry_new(&st, 0, "k", 1, 4, "m1", 2, 0, &e), 0);
    uint32_t len;
    const uint8_t *m = gkv_entry_meta(e, &len);
    ck_assert_uint_eq(len, 2);
    ck_assert_int_eq(memcmp(m, "m1", 2), 0);
    ck_assert_int_eq(gkv_store_entry_renew(&st, e, "meta2", 5), 0);
    m = gkv_entry_meta(e, &len);
    ck_assert_int_eq(memcmp(m, "meta2", 5), 0);
    ck_assert_int_eq(gkv_store_entry_renew(&st, e, NULL, 0), 0);
    ck_assert_ptr_null(gkv_entry_meta(e, &len));
    ck_assert_uint_eq(len, 0);
    gkv_store_unref(&st, e);
}
END_TEST

/* Keys and metadata count in host_bytes until the entry is freed, and host_limit refuses an
 * entry (or larger metadata) that would pass it, changing nothing. */
START_TEST(keys_and_metadata_count_against_the_host_limit)
{
    uint64_t base = gkv_store_host_memory(&st);
    char meta[1000] = {0};
    gkv_entry_t *a, *b;
    ck_assert_int_eq(gkv_store_entry_new(&st, 0, "key-a", 5, 0, meta, 1000, 0, &a), 0);
    uint64_t one = gkv_store_host_memory(&st) - base;
    ck_assert_uint_ge(one, 1005);
    st.host_limit = base + one + one / 2;
    ck_assert(!gkv_store_host_room(&st, 5, 1000));
    ck_assert_int_eq(gkv_store_entry_new(&st, 0, "key-b", 5, 0, meta, 1000, 0, &b), GKV_ENOMEM);
    ck_assert_int_eq(gkv_store_entry_new(&st, 0, "key-b", 5, 0, NULL, 0, 0, &b), 0);
    ck_assert_int_eq(gkv_store_entry_renew(&st, b, meta, 1000), GKV_ENOMEM);
    ck_assert_int_eq(gkv_store_entry_renew(&st, a, NULL, 0), 0); /* smaller: always allowed */
    ck_assert_int_eq(gkv_store_entry_renew(&st, b, meta, 1000), 0);
    gkv_store_unref(&st, a);
    gkv_store_unref(&st, b);
    ck_assert_uint_eq(gkv_store_host_memory(&st), base);
    st.host_limit = 0;
}
END_TEST

/* MAP's copy of a value: published in the value's place only while the key still names it, and
 * linked as it is (the caller's lease keeps its memory). */
START_TEST(copy_end_publishes_the_copy_only_over_what_it_copied)
{
    gkv_entry_t *e = make("k", "chunk"), *copy;
    ck_assert_int_eq(gkv_store_publish(&st, e, 0, NULL), 0);
    ck_assert_int_eq(gkv_store_copy_begin(&st, e, e->dev, &copy), 0);
    ck_assert_uint_ne(copy->mem.v, e->mem.v);
    ck_assert_int_eq(memcmp(bytes(copy), "chunk", 5), 0);
    ck_assert_uint_eq(st.used, 10);
    ck_assert(gkv_store_copy_end(&st, e, copy));
    ck_assert_ptr_eq(get("k"), copy);
    ck_assert_uint_eq(copy->refs, 2);
    gkv_store_unref(&st, e); /* the original goes with its last reference */
    ck_assert_uint_eq(st.used, 5);

    /* The key moved on while the copy ran: the copy stays the caller's alone. */
    gkv_entry_t *copy2, *newer = make("k", "newer");
    ck_assert_int_eq(gkv_store_copy_begin(&st, copy, copy->dev, &copy2), 0);
    ck_assert_int_eq(gkv_store_publish(&st, newer, 0, NULL), 0);
    ck_assert(!gkv_store_copy_end(&st, copy, copy2));
    ck_assert_ptr_eq(get("k"), newer);
    ck_assert_uint_eq(copy2->refs, 1);
    gkv_store_unref(&st, copy2);
    gkv_store_unref(&st, copy);
    gkv_store_unref(&st, newer);
    gkv_store_flush(&st);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("store");
    TCase *t = tcase_create("core");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, entries_are_accounted_until_their_last_reference);
    tcase_add_test(t, over_the_limit_is_oom_and_touches_nothing);
    tcase_add_test(t, publish_links_a_new_key);
    tcase_add_test(t, overwrite_of_an_unused_value_swaps_in_place);
    tcase_add_test(t, overwrite_under_a_reader_links_the_new_entry);
    tcase_add_test(t, publish_link_never_moves_the_value);
    tcase_add_test(t, nx_and_xx_refuse_and_change_nothing);
    tcase_add_test(t, a_deleted_value_lives_while_referenced);
    tcase_add_test(t, metadata_is_copied_and_renewed);
    tcase_add_test(t, keys_and_metadata_count_against_the_host_limit);
    tcase_add_test(t, copy_end_publishes_the_copy_only_over_what_it_copied);
    suite_add_tcase(s, t);
    return s;
}
