/* test_watch_order.c: a watch spanning the cluster keeps each key's events in version order
 * (server/cluster/watch.c, gkv_cluster_watch_fresh; docs/handoff.md, "Watches across a
 * cluster", guarantee 2): an event older than one of its key delivered is dropped and counted,
 * a removal of the version delivered goes through, keys are independent, a FLUSH (version 0)
 * always goes. The streams themselves are tests/cluster/test_cluster.py's. */
#include <string.h>

#include <gpukv/gpukv.h>
#include <stdio.h>

#include "check_main.h"
#include "cluster.h"

static void no_event(void *arg, unsigned kind, const uint8_t *key, size_t klen, uint64_t size,
                     uint64_t seq, uint64_t version, const char *node)
{
    (void)arg, (void)kind, (void)key, (void)klen, (void)size, (void)seq, (void)version,
        (void)node;
}

static gkv_cluster_t cl; /* on, with no members: the watch opens no stream */

static bool fresh(gkv_cl_watch_t *w, unsigned kind, const char *key, uint64_t version)
{
    return gkv_cluster_watch_fresh(w, kind, (const uint8_t *)key, strlen(key), version);
}

START_TEST(a_keys_late_events_are_dropped_and_counted)
{
    memset(&cl, 0, sizeof(cl));
    cl.on = true;
    gkv_cl_watch_t *w = gkv_cluster_watch_open(&cl, (const uint8_t *)"k/", 2, no_event, NULL);
    ck_assert_ptr_nonnull(w);
    ck_assert(fresh(w, GKV_EVENT_SET, "k/a", 5));
    ck_assert(!fresh(w, GKV_EVENT_SET, "k/a", 3));     /* a superseded owner's, late */
    ck_assert(!fresh(w, GKV_EVENT_EXPIRE, "k/a", 4));  /* its expiry, late too */
    ck_assert(!fresh(w, GKV_EVENT_SET, "k/a", 5));     /* the same set again */
    ck_assert(fresh(w, GKV_EVENT_DELETE, "k/a", 5));   /* the value delivered, deleted */
    ck_assert(!fresh(w, GKV_EVENT_SET, "k/a", 5));     /* and never set again after */
    ck_assert(fresh(w, GKV_EVENT_SET, "k/a", 9));
    ck_assert(fresh(w, GKV_EVENT_EVICT, "k/a", 9));
    ck_assert_uint_eq(cl.watch_stale, 4);
    /* Another key has its own order; a FLUSH (and any event without a version) goes. */
    ck_assert(fresh(w, GKV_EVENT_SET, "k/b", 1));
    ck_assert(fresh(w, GKV_EVENT_FLUSH, "", 0));
    ck_assert(fresh(w, GKV_EVENT_SET, "k/b", 2));
    ck_assert(!fresh(w, GKV_EVENT_SET, "k/a", 8));
    ck_assert_uint_eq(cl.watch_stale, 5);
    gkv_cluster_watch_close(&cl, w);
}
END_TEST

START_TEST(the_last_keys_keep_their_order_and_the_oldest_leaves)
{
    memset(&cl, 0, sizeof(cl));
    cl.on = true;
    gkv_cl_watch_t *w = gkv_cluster_watch_open(&cl, NULL, 0, no_event, NULL);
    ck_assert_ptr_nonnull(w);
    enum { KEYS = GKV_CL_WATCH_RECENT + 100 };
    char key[16];
    for (int i = 0; i < KEYS; i++) {
        snprintf(key, sizeof(key), "k/%d", i);
        ck_assert(fresh(w, GKV_EVENT_SET, key, 1000 + (uint64_t)i));
        ck_assert(fresh(w, GKV_EVENT_SET, key, 2000 + (uint64_t)i)); /* an update stays */
    }
    /* The last GKV_CL_WATCH_RECENT keys are remembered: a late event of each is dropped. */
    for (int i = KEYS - GKV_CL_WATCH_RECENT; i < KEYS; i++) {
        snprintf(key, sizeof(key), "k/%d", i);
        ck_assert_msg(!fresh(w, GKV_EVENT_SET, key, 1000 + (uint64_t)i), "key %d", i);
    }
    ck_assert_uint_eq(cl.watch_stale, GKV_CL_WATCH_RECENT);
    /* The first 100 left: one late event of each goes through (and takes a place). */
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "k/%d", i);
        ck_assert_msg(fresh(w, GKV_EVENT_SET, key, 1000 + (uint64_t)i), "key %d", i);
        ck_assert(!fresh(w, GKV_EVENT_SET, key, 999));
    }
    gkv_cluster_watch_close(&cl, w);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("watch_order");
    TCase *tc = tcase_create("watch_order");
    tcase_add_test(tc, a_keys_late_events_are_dropped_and_counted);
    tcase_add_test(tc, the_last_keys_keep_their_order_and_the_oldest_leaves);
    suite_add_tcase(s, tc);
    return s;
}
