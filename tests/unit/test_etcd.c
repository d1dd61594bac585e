/* test_etcd.c: the etcd client (server/cluster/etcd.h) and the membership (membership.h)
 * against a private etcd on loopback: leases, guarded puts, ranges, the watch, base64; nodes
 * joining and seeing each other, a name that is taken, a leave seen at once, a node that dies
 * seen within its TTL, and the last known members kept while etcd is down. Skipped (77)
 * without an etcd binary. */
#include <gpukv/gpukv.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "check_main.h"
#include "etcd.h"
#include "etcd_fixture.h"
#include "membership.h"

static gkv_test_etcd_t etcd;

static void up(void)
{
    if (gkv_test_etcd_start(&etcd))
        ck_abort_msg("etcd did not start");
}

static void down(void)
{
    gkv_test_etcd_stop(&etcd);
}

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

START_TEST(base64_round_trips_every_length)
{
    uint8_t in[64], back[64];
    char text[100];
    for (size_t i = 0; i < sizeof(in); i++)
        in[i] = (uint8_t)(i * 37 + 1);
    for (size_t len = 0; len <= sizeof(in); len++) {
        gkv_base64_encode(in, len, text);
        ck_assert_uint_eq(strlen(text), (len + 2) / 3 * 4);
        ck_assert_int_eq(gkv_base64_decode(text, back), (long)len);
        ck_assert_mem_eq(back, in, len);
    }
    gkv_base64_encode("/gpukv/c/members/a", 18, text);
    ck_assert_str_eq(text, "L2dwdWt2L2MvbWVtYmVycy9h");
    ck_assert_int_eq(gkv_base64_decode("abc", back), -1);
    ck_assert_int_eq(gkv_base64_decode("ab=c", back), -1);
    ck_assert_int_eq(gkv_base64_decode("a*cd", back), -1);
}
END_TEST

START_TEST(leases_puts_and_ranges)
{
    gkv_etcd_t *e = gkv_etcd_alloc(etcd.endpoint, 2000);
    ck_assert_ptr_nonnull(e);
    int64_t id = 0, ttl = 0;
    ck_assert_int_eq(gkv_etcd_grant(e, 5, &id), 0);
    ck_assert_int_ne(id, 0);
    ck_assert_int_eq(gkv_etcd_keepalive(e, id, &ttl), 0);
    ck_assert_int_gt(ttl, 0);
    int created = -1;
    ck_assert_int_eq(gkv_etcd_put(e, "/t/a/x", "one", 3, id, 1, &created), 0);
    ck_assert_int_eq(created, 1);
    ck_assert_int_eq(gkv_etcd_put(e, "/t/a/x", "two", 3, id, 1, &created), 0);
    ck_assert_int_eq(created, 0); /* only_if_new: it exists */
    ck_assert_int_eq(gkv_etcd_put(e, "/t/a/y", "", 0, 0, 0, NULL), 0);
    ck_assert_int_eq(gkv_etcd_put(e, "/t/b", "no", 2, 0, 0, NULL), 0);
    gkv_etcd_range_t r;
    ck_assert_int_eq(gkv_etcd_range_prefix(e, "/t/a/", &r), 0);
    ck_assert_uint_eq(r.n, 2);
    ck_assert_str_eq(r.kvs[0].key, "/t/a/x");
    ck_assert_str_eq(r.kvs[0].value, "one");
    ck_assert_int_eq(r.kvs[0].lease, id);
    ck_assert_str_eq(r.kvs[1].key, "/t/a/y");
    ck_assert_uint_eq(r.kvs[1].value_len, 0);
    ck_assert_int_gt(r.revision, 0);
    gkv_etcd_range_fini(&r);
    /* Revoking the lease takes its keys. */
    ck_assert_int_eq(gkv_etcd_revoke(e, id), 0);
    ck_assert_int_eq(gkv_etcd_keepalive(e, id, &ttl), 0);
    ck_assert_int_eq(ttl, 0);
    ck_assert_int_eq(gkv_etcd_range_prefix(e, "/t/a/", &r), 0);
    ck_assert_uint_eq(r.n, 1);
    gkv_etcd_range_fini(&r);
    ck_assert_int_eq(gkv_etcd_delete(e, "/t/a/y"), 0);
    gkv_etcd_free(e);
}
END_TEST

START_TEST(an_endpoint_that_does_not_answer_is_unavailable_in_bounded_time)
{
    char list[128];
    snprintf(list, sizeof(list), "127.0.0.1:%d", gkv_test_free_port());
    gkv_etcd_t *e = gkv_etcd_alloc(list, 500);
    int64_t id;
    ck_assert_int_eq(gkv_etcd_grant(e, 5, &id), GKV_EUNAVAILABLE);
    gkv_etcd_free(e);
    /* A dead endpoint first, then the live one: the call goes on to the next. */
    snprintf(list, sizeof(list), "127.0.0.1:%d,%s", gkv_test_free_port(), etcd.endpoint);
    e = gkv_etcd_alloc(list, 500);
    ck_assert_int_eq(gkv_etcd_grant(e, 5, &id), 0);
    gkv_etcd_free(e);
    ck_assert_ptr_null(gkv_etcd_alloc("", 500));
    ck_assert_ptr_null(gkv_etcd_alloc("a,,b", 500));
}
END_TEST

typedef struct {
    gkv_etcd_t *e;
    atomic_int events;
} watch_arg_t;

static int count_event(void *arg)
{
    watch_arg_t *w = arg;
    return atomic_fetch_add(&w->events, 1) + 1 >= 2;
}

static void *put_later(void *arg)
{
    gkv_etcd_t *e = arg;
    nap_ms(200);
    gkv_etcd_put(e, "/w/1", "a", 1, 0, 0, NULL);
    nap_ms(100);
    gkv_etcd_put(e, "/other", "b", 1, 0, 0, NULL); /* outside the prefix: no event */
    nap_ms(100);
    gkv_etcd_delete(e, "/w/1");
    return NULL;
}

START_TEST(a_watch_reports_changes_under_its_prefix)
{
    gkv_etcd_t *e = gkv_etcd_alloc(etcd.endpoint, 2000), *w = gkv_etcd_alloc(etcd.endpoint, 2000);
    gkv_etcd_range_t r;
    ck_assert_int_eq(gkv_etcd_range_prefix(e, "/w/", &r), 0);
    watch_arg_t arg = {e, 0};
    pthread_t t;
    pthread_create(&t, NULL, put_later, e);
    volatile int stop = 0;
    ck_assert_int_eq(gkv_etcd_watch(w, "/w/", r.revision + 1, count_event, &arg, &stop), 0);
    ck_assert_int_eq(atomic_load(&arg.events), 2); /* the put and the delete */
    pthread_join(t, NULL);
    gkv_etcd_range_fini(&r);
    gkv_etcd_free(e);
    gkv_etcd_free(w);
}
END_TEST

typedef struct {
    atomic_int changes;
} seen_t;

static void on_change(void *arg)
{
    atomic_fetch_add(&((seen_t *)arg)->changes, 1);
}

static gkv_membership_cfg_t node_cfg(const char *name, int ttl)
{
    gkv_membership_cfg_t c = {.endpoints = etcd.endpoint, .cluster = "unit", .ttl_s = ttl,
                              .timeout_ms = 1000};
    snprintf(c.self.name, sizeof(c.self.name), "%s", name);
    snprintf(c.self.advertise, sizeof(c.self.advertise), "127.0.0.1:%d", 7000 + name[1]);
    c.self.weight = 1;
    return c;
}

/* Waits up to ms for ms_ to list n members. */
static size_t wait_members(gkv_membership_t *m, size_t n, long ms)
{
    gkv_members_t l = {0};
    for (long t = 0; t <= ms; t += 50) {
        gkv_membership_members(m, &l);
        size_t got = l.n;
        gkv_members_fini(&l);
        if (got == n)
            return got;
        nap_ms(50);
    }
    gkv_membership_members(m, &l);
    size_t got = l.n;
    gkv_members_fini(&l);
    return got;
}

START_TEST(nodes_join_see_each_other_and_leave)
{
    seen_t s1 = {0}, s2 = {0}, s3 = {0};
    gkv_membership_t *a, *b, *c, *dup;
    gkv_membership_cfg_t ca = node_cfg("n1", 2), cb = node_cfg("n2", 2), cc = node_cfg("n3", 2);
    ck_assert_int_eq(gkv_membership_start(&ca, on_change, &s1, &a), 0);
    ck_assert_int_eq(gkv_membership_start(&cb, on_change, &s2, &b), 0);
    ck_assert_int_eq(gkv_membership_start(&cc, on_change, &s3, &c), 0);
    ck_assert_uint_eq(wait_members(a, 3, 3000), 3);
    ck_assert_uint_eq(wait_members(c, 3, 3000), 3);
    gkv_members_t l;
    gkv_membership_members(a, &l);
    ck_assert_str_eq(l.m[0].name, "n1");
    ck_assert_str_eq(l.m[1].name, "n2");
    ck_assert_str_eq(l.m[1].advertise, cb.self.advertise);
    ck_assert_int_ne(l.m[1].incarnation, 0);
    gkv_members_fini(&l);
    /* A second node with a live node's name is refused. */
    ck_assert_int_eq(gkv_membership_start(&cb, on_change, &s2, &dup), GKV_EEXISTS);
    ck_assert_int_ge(atomic_load(&s1.changes), 1);
    /* A node that leaves is gone for the others at once (its lease revoked)... */
    gkv_membership_stop(b);
    ck_assert_uint_eq(wait_members(a, 2, 1000), 2);
    /* ... and one that stops renewing within its TTL: here etcd is told to forget nothing, the
     * node's threads are stopped without a revoke by killing etcd's view of it: its lease is
     * revoked from outside, as an expiry would be, and it joins again as a new incarnation. */
    gkv_membership_state_t before, after;
    gkv_membership_state(c, &before);
    gkv_etcd_t *e = gkv_etcd_alloc(etcd.endpoint, 1000);
    ck_assert_int_eq(gkv_etcd_revoke(e, before.incarnation), 0);
    gkv_etcd_free(e);
    ck_assert_uint_eq(wait_members(a, 1, 2000), 1);
    ck_assert_uint_eq(wait_members(a, 2, 3000), 2); /* n3 renewed, found its lease gone, rejoined */
    /* n1 may see n3's new record before n3's own thread has stored its new lease: a moment. */
    for (int i = 0; i < 100; i++) {
        gkv_membership_state(c, &after);
        if (after.incarnation != before.incarnation)
            break;
        struct timespec pause = {0, 10 * 1000000L};
        nanosleep(&pause, NULL);
    }
    ck_assert_int_ne(after.incarnation, before.incarnation);
    ck_assert_uint_eq(after.joins, 2);
    gkv_membership_stop(a);
    gkv_membership_stop(c);
}
END_TEST

START_TEST(members_stay_while_etcd_is_down_and_renew_when_it_returns)
{
    seen_t s = {0};
    gkv_membership_t *a, *b;
    gkv_membership_cfg_t ca = node_cfg("d1", 3), cb = node_cfg("d2", 3);
    ck_assert_int_eq(gkv_membership_start(&ca, on_change, &s, &a), 0);
    ck_assert_int_eq(gkv_membership_start(&cb, on_change, &s, &b), 0);
    ck_assert_uint_eq(wait_members(a, 2, 3000), 2);
    gkv_test_etcd_kill(&etcd);
    nap_ms(4500); /* longer than the TTL */
    gkv_membership_state_t st;
    gkv_membership_state(a, &st);
    ck_assert(!st.reachable);
    ck_assert_uint_ne(st.unreachable_since, 0);
    ck_assert_uint_eq(wait_members(a, 2, 0), 2); /* the last known list */
    ck_assert_int_eq(gkv_test_etcd_start(&etcd), 0);
    /* etcd gives leases a fresh TTL when it comes back: both stay members. */
    nap_ms(2500);
    gkv_membership_state(a, &st);
    ck_assert(st.reachable);
    ck_assert_uint_eq(wait_members(a, 2, 3000), 2);
    gkv_membership_stop(a);
    gkv_membership_stop(b);
}
END_TEST

START_TEST(bad_names_and_ttls_are_refused)
{
    seen_t s = {0};
    gkv_membership_t *m;
    gkv_membership_cfg_t c = node_cfg("ok", 5);
    strcpy(c.self.name, "has space");
    ck_assert_int_eq(gkv_membership_start(&c, on_change, &s, &m), GKV_EINVAL);
    c = node_cfg("ok", 1);
    ck_assert_int_eq(gkv_membership_start(&c, on_change, &s, &m), GKV_EINVAL);
    c = node_cfg("ok", 5);
    c.cluster = "a/b";
    ck_assert_int_eq(gkv_membership_start(&c, on_change, &s, &m), GKV_EINVAL);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("etcd");
    TCase *tc = tcase_create("etcd");
    tcase_add_unchecked_fixture(tc, up, down);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, base64_round_trips_every_length);
    tcase_add_test(tc, leases_puts_and_ranges);
    tcase_add_test(tc, an_endpoint_that_does_not_answer_is_unavailable_in_bounded_time);
    tcase_add_test(tc, a_watch_reports_changes_under_its_prefix);
    tcase_add_test(tc, nodes_join_see_each_other_and_leave);
    tcase_add_test(tc, bad_names_and_ttls_are_refused);
    tcase_add_test(tc, members_stay_while_etcd_is_down_and_renew_when_it_returns);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    if (!gkv_test_etcd_binary()) {
        printf("no etcd binary (apt-get install etcd-server): skipped\n");
        return 77;
    }
    return gkv_check_run(make_suite());
}
