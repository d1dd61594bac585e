/* test_lease.c: the lease table and the lease handlers (MAP, RELEASE, CREATE, SEAL, ABORT) driven
 * directly, without sockets: ids, counts and bytes, writable leases unpublished until SEAL,
 * keep, spares and the limits. */
#include "check_main.h"
#include "cmd_fixture.h"

static gkv_request_t req_lease(unsigned op, uint64_t lease)
{
    gkv_request_t q;
    memset(&q, 0, sizeof(q));
    q.op = op;
    q.id = 9;
    q.lease = lease;
    q.has = GKV_HAS_LEASE;
    return q;
}

/* MAP of key: returns the lease id (0 on failure, with *status). */
static uint64_t map(const char *key, int *status)
{
    gkv_request_t q = req_key(GKV_OP_MAP, key);
    gkv_reply_t rep;
    *status = run(&rep, &q);
    gkv_reply_release(&srv.store, &rep);
    return *status ? 0 : last_response().lease;
}

/* CREATE of key (size bytes, flags): the writable lease's id, or 0 with *status. */
static uint64_t create(const char *key, uint64_t size, unsigned flags, int *status)
{
    gkv_request_t q = req_key(GKV_OP_CREATE, key);
    q.size = size;
    q.has |= GKV_HAS_SIZE;
    q.flags = flags;
    gkv_reply_t rep;
    *status = run(&rep, &q);
    if (*status == 0)
        ck_assert(rep.fence); /* its memory is another process's only once allocated */
    gkv_reply_release(&srv.store, &rep);
    return *status ? 0 : last_response().lease;
}

/* SEAL of lease with flags, naming spare (0: none). Returns the status; *spare_out the reply's
 * spare (0: none). */
static int seal(uint64_t lease, unsigned flags, uint64_t spare, uint64_t *spare_out)
{
    gkv_request_t q = req_lease(GKV_OP_SEAL, lease);
    q.flags = flags;
    if (spare) {
        q.spare = spare;
        q.has |= GKV_HAS_SPARE;
    }
    gkv_reply_t rep;
    int rc = run(&rep, &q);
    if (spare_out)
        *spare_out = rc ? 0 : last_response().spare;
    return rc;
}

static int simple(unsigned op, uint64_t lease)
{
    gkv_request_t q = req_lease(op, lease);
    gkv_reply_t rep;
    return run(&rep, &q);
}

/* The bytes of the lease's entry (host backend: readable in place). */
static char *lease_bytes(uint64_t id)
{
    gkv_lease_t *l = gkv_lease_find(&leases, id);
    ck_assert_ptr_nonnull(l);
    return srv.devs.dev[0].be->ops->host_view(srv.devs.dev[0].be, l->entry->mem);
}

START_TEST(map_pins_the_value_through_overwrite_and_delete)
{
    int st;
    ck_assert_int_eq(put("k", "first", 0), 0);
    uint64_t id = map("k", &st);
    ck_assert_int_eq(st, 0);
    ck_assert_uint_ne(id, 0);
    ck_assert_uint_eq(leases.count, 1);
    ck_assert_uint_eq(leases.bytes, 5);
    ck_assert_uint_eq(srv.lease_totals.leases, 1);
    ck_assert_int_eq(put("k", "second", 0), 0);
    gkv_request_t q = req_key(GKV_OP_DEL, "k");
    gkv_reply_t rep;
    ck_assert_int_eq(run(&rep, &q), 0);
    ck_assert_int_eq(memcmp(lease_bytes(id), "first", 5), 0);
    ck_assert_int_eq(simple(GKV_OP_RELEASE, id), 0);
    ck_assert_uint_eq(leases.count, 0);
    ck_assert_uint_eq(leases.bytes, 0);
    ck_assert_uint_eq(srv.store.used, 0); /* the value went with its lease */
    ck_assert_int_eq(simple(GKV_OP_RELEASE, id), GKV_ENOLEASE);
    ck_assert_uint_eq(map("nope", &st), 0);
    ck_assert_int_eq(st, GKV_ENOTFOUND);
}
END_TEST

START_TEST(map_is_refused_without_zero_copy)
{
    ck_assert_int_eq(put("k", "v", 0), 0);
    gkv_request_t q = req_key(GKV_OP_MAP, "k");
    gkv_reply_t rep;
    gkv_reply_init(&rep, &wr, &leases);
    rep.in.authed = true;
    gkv_wr_reset(&wr);
    ck_assert_int_eq(gkv_dispatch(&srv.cmd, &q, &rep), GKV_ENOTSUP);
    ck_assert_uint_eq(leases.count, 0);
}
END_TEST

START_TEST(create_is_unpublished_until_seal)
{
    int st;
    uint64_t id = create("k", 4, 0, &st);
    ck_assert_int_eq(st, 0);
    ck_assert_uint_eq(srv.lease_totals.creates, 1);
    memcpy(lease_bytes(id), "abcd", 4);
    gkv_request_t g = req_key(GKV_OP_GET, "k");
    gkv_reply_t rep;
    ck_assert_int_eq(run(&rep, &g), GKV_ENOTFOUND);
    ck_assert_int_eq(seal(id, 0, 0, NULL), 0);
    ck_assert_uint_eq(leases.count, 0); /* no keep: the lease ends */
    ck_assert_uint_eq(srv.lease_totals.creates, 0);
    ck_assert_int_eq(run(&rep, &g), 0);
    ck_assert_int_eq(
        memcmp(srv.devs.dev[0].be->ops->host_view(srv.devs.dev[0].be, rep.segs[0].entry->mem),
               "abcd", 4),
        0);
    gkv_reply_release(&srv.store, &rep);
}
END_TEST

START_TEST(abort_and_release_discard_an_unsealed_value)
{
    int st;
    uint64_t a = create("a", 8, 0, &st), b = create("b", 8, 0, &st);
    ck_assert_uint_eq(srv.store.used, 16);
    ck_assert_int_eq(simple(GKV_OP_ABORT, a), 0);
    ck_assert_int_eq(simple(GKV_OP_RELEASE, b), 0);
    ck_assert_uint_eq(srv.store.used, 0);
    ck_assert_uint_eq(srv.lease_totals.creates, 0);
    gkv_request_t g = req_key(GKV_OP_GET, "a");
    gkv_reply_t rep;
    ck_assert_int_eq(run(&rep, &g), GKV_ENOTFOUND);
}
END_TEST

START_TEST(seal_and_abort_take_only_writable_leases)
{
    int st;
    ck_assert_int_eq(put("k", "v", 0), 0);
    uint64_t m = map("k", &st);
    ck_assert_int_eq(seal(m, 0, 0, NULL), GKV_EINVAL);
    ck_assert_int_eq(simple(GKV_OP_ABORT, m), GKV_EINVAL);
    ck_assert_int_eq(seal(m + 100, 0, 0, NULL), GKV_ENOLEASE);
    gkv_request_t q = req_lease(GKV_OP_SEAL, 0);
    q.has = 0;
    gkv_reply_t rep;
    ck_assert_int_eq(run(&rep, &q), GKV_EINVAL);
    ck_assert_uint_eq(leases.count, 1);
}
END_TEST

/* SEAL with keep: the lease goes on as a read lease on the published value; NX refused with
 * keep leaves it writable (the discarded value's memory, no flags). */
START_TEST(seal_keep_and_refused_nx)
{
    int st;
    uint64_t id = create("k", 3, 0, &st);
    memcpy(lease_bytes(id), "one", 3);
    ck_assert_int_eq(seal(id, GKV_SEAL_KEEP, 0, NULL), 0);
    gkv_lease_t *l = gkv_lease_find(&leases, id);
    ck_assert(!l->writable);
    ck_assert_uint_eq(srv.lease_totals.creates, 0);

    uint64_t w = create("n", 3, GKV_SET_NX, &st);
    ck_assert_int_eq(put("n", "other writer", 0), 0); /* NX is checked again at SEAL */
    ck_assert_int_eq(seal(w, GKV_SEAL_KEEP, 0, NULL), GKV_EEXISTS);
    l = gkv_lease_find(&leases, w);
    ck_assert_ptr_nonnull(l);
    ck_assert(l->writable);
    ck_assert_uint_eq(l->flags, 0);
    ck_assert_int_eq(seal(w, 0, 0, NULL), 0); /* flags gone: it now replaces the value */
    ck_assert_uint_eq(leases.count, 1);
    ck_assert_int_eq(seal(id, 0, 0, NULL), GKV_EINVAL); /* a read lease again */
}
END_TEST

/* A SEAL naming this connection's read lease on the value it replaced turns that lease into a
 * writable spare on the same memory, unless anything else holds the value. */
START_TEST(seal_makes_a_spare_of_the_replaced_value)
{
    int st;
    ck_assert_int_eq(put("k", "AAAA", 0), 0);
    uint64_t old = map("k", &st);
    gkv_devptr_t old_mem = gkv_lease_find(&leases, old)->entry->mem;
    uint64_t w = create("k", 4, 0, &st), spare;
    memcpy(lease_bytes(w), "BBBB", 4);
    ck_assert_int_eq(seal(w, 0, old, &spare), 0);
    ck_assert_uint_eq(spare, old);
    gkv_lease_t *l = gkv_lease_find(&leases, old);
    ck_assert(l->writable);
    ck_assert_uint_eq(l->entry->mem.v, old_mem.v);
    ck_assert_uint_eq(srv.lease_totals.creates, 1);
    memcpy(lease_bytes(old), "CCCC", 4); /* the next value, written in place */
    ck_assert_int_eq(seal(old, 0, 0, NULL), 0);
    gkv_request_t g = req_key(GKV_OP_GET, "k");
    gkv_reply_t rep;
    ck_assert_int_eq(run(&rep, &g), 0);
    ck_assert_uint_eq(rep.segs[0].entry->mem.v, old_mem.v);
    gkv_reply_release(&srv.store, &rep);

    /* Another reference on the replaced value (a second lease): no spare. */
    uint64_t r1 = map("k", &st), r2 = map("k", &st);
    uint64_t w2 = create("k", 4, 0, &st);
    ck_assert_int_eq(seal(w2, 0, r1, &spare), 0);
    ck_assert_uint_eq(spare, 0);
    ck_assert(!gkv_lease_find(&leases, r1)->writable);
    ck_assert_int_eq(simple(GKV_OP_RELEASE, r2), 0);
    /* A different key's lease is never a spare. */
    ck_assert_int_eq(put("other", "xxxx", 0), 0);
    uint64_t o = map("other", &st), w3 = create("k", 4, 0, &st);
    ck_assert_int_eq(seal(w3, 0, o, &spare), 0);
    ck_assert_uint_eq(spare, 0);
}
END_TEST

START_TEST(release_of_a_batch_is_all_or_nothing)
{
    int st;
    ck_assert_int_eq(put("k", "v", 0), 0);
    uint64_t a = map("k", &st), b = map("k", &st);
    /* [a, a]: named twice; nothing ends. Encoded as msgpack: fixarray of two positive ints. */
    uint8_t twice[3] = {0x92, (uint8_t)a, (uint8_t)a};
    ck_assert_uint_lt(b, 128);
    gkv_request_t q = req_lease(GKV_OP_RELEASE, 0);
    q.has = GKV_HAS_LEASES;
    q.leases = (gkv_slice_t){twice, 3};
    q.nleases = 2;
    gkv_reply_t rep;
    ck_assert_int_eq(run(&rep, &q), GKV_ENOLEASE);
    ck_assert_uint_eq(leases.count, 2);
    uint8_t both[3] = {0x92, (uint8_t)a, (uint8_t)b};
    q.leases = (gkv_slice_t){both, 3};
    ck_assert_int_eq(run(&rep, &q), 0);
    ck_assert_uint_eq(last_response().count, 2);
    ck_assert_uint_eq(leases.count, 0);
}
END_TEST

START_TEST(limits_refuse_more_leases)
{
    int st;
    srv.cfg.max_leases = 2;
    srv.cfg.max_leased_bytes = 10;
    gkv_server_apply_settings(&srv);
    ck_assert_int_eq(put("k", "12345678", 0), 0);
    ck_assert_uint_ne(map("k", &st), 0);
    ck_assert_uint_eq(map("k", &st), 0);
    ck_assert_int_eq(st, GKV_ELEASELIMIT); /* 16 bytes would be over 10 */
    ck_assert_uint_ne(create("small", 2, 0, &st), 0);
    ck_assert_uint_eq(create("more", 1, 0, &st), 0);
    ck_assert_int_eq(st, GKV_ELEASELIMIT); /* a third lease */
    ck_assert_uint_eq(leases.count, 2);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("lease");
    TCase *t = tcase_create("handlers");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, map_pins_the_value_through_overwrite_and_delete);
    tcase_add_test(t, map_is_refused_without_zero_copy);
    tcase_add_test(t, create_is_unpublished_until_seal);
    tcase_add_test(t, abort_and_release_discard_an_unsealed_value);
    tcase_add_test(t, seal_and_abort_take_only_writable_leases);
    tcase_add_test(t, seal_keep_and_refused_nx);
    tcase_add_test(t, seal_makes_a_spare_of_the_replaced_value);
    tcase_add_test(t, release_of_a_batch_is_all_or_nothing);
    tcase_add_test(t, limits_refuse_more_leases);
    suite_add_tcase(s, t);
    return s;
}
