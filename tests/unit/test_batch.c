/* test_batch.c: the copy batcher over the host backend and a real libuv loop: writes reach value
 * memory, reads deliver the right bytes to the right sink in order, references are held until
 * a batch is done, a full batch makes writers wait for room, MAP's "writes pending", and bulk
 * copies (a larger SET's last chunk) land, count as writes and give their buffers back. */
#include <gpukv/gpukv.h>
#include <string.h>

#include "batch.h"
#include "check_main.h"

static gkv_backend_t *be;
static gkv_store_t st;
static gkv_batcher_t b;
static gkv_poller_t poller;
static gkv_staging_t staging;
static uv_loop_t loop;

/* What deliver saw, in order. */
static struct {
    void *sink;
    uint64_t tag;
    char bytes[64];
    uint32_t len;
    int status;
} got[2 * GKV_BATCH_PIECES];
static int ngot;

static void deliver(void *sink, uint64_t tag, const void *bytes, uint32_t len, int status)
{
    ck_assert_int_lt(ngot, (int)(sizeof(got) / sizeof(got[0])));
    got[ngot].sink = sink;
    got[ngot].tag = tag;
    got[ngot].len = len;
    got[ngot].status = status;
    memcpy(got[ngot].bytes, bytes, len < 64 ? len : 64);
    ngot++;
}

static void setup(void)
{
    gkv_backend_config_t bc = {GKV_BACKEND_HOST, 0, 64u << 20};
    char why[256];
    ck_assert_int_eq(gkv_backend_open(&bc, &be, why, sizeof(why)), 0);
    ck_assert_int_eq(gkv_store_init(&st, be, 64u << 20), 0);
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    gkv_poller_init(&poller, be, &loop);
    gkv_staging_init(&staging, be);
    ck_assert_int_eq(gkv_batcher_init(&b, be, &st, &loop, &poller, &staging, deliver), 0);
    ngot = 0;
}

static void teardown(void)
{
    gkv_batcher_close(&b);
    gkv_poller_close(&poller);
    uv_run(&loop, UV_RUN_DEFAULT);
    gkv_batcher_fini(&b);
    ck_assert_int_eq(staging.nfree, staging.ntotal); /* every bulk buffer came back */
    gkv_staging_fini(&staging);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    gkv_store_fini(&st);
    ck_assert_uint_eq(st.used, 0);
    be->ops->close(be);
}

/* Lets the loop start the open batch (prepare) and hear of finished ones (async). */
static void spin(void)
{
    for (int i = 0; i < 4; i++)
        uv_run(&loop, UV_RUN_NOWAIT);
}

static gkv_entry_t *entry(const char *key, uint64_t size)
{
    gkv_entry_t *e;
    ck_assert_int_eq(
        gkv_store_entry_new(&st, 0, key, strlen(key), size, NULL, 0, GKV_LANE_BATCH, &e), 0);
    return e;
}

/* A small SET as a connection does it: reserve, fill, commit. */
static void write_value(gkv_entry_t *e, const char *bytes, gkv_waiter_t *w)
{
    void *dst = gkv_batch_in_reserve(&b, (uint32_t)e->size, w);
    ck_assert_ptr_nonnull(dst);
    memcpy(dst, bytes, e->size);
    gkv_batch_in_commit(&b, e);
}

static const char *view(gkv_entry_t *e)
{
    return be->ops->host_view(be, e->mem);
}

START_TEST(writes_land_and_references_are_held_until_done)
{
    gkv_entry_t *e = entry("k", 5);
    write_value(e, "hello", NULL);
    ck_assert_uint_eq(e->refs, 2); /* ours and the batch's */
    ck_assert_int_ne(memcmp(view(e), "hello", 5), 0); /* not started yet */
    ck_assert(gkv_batch_writes_pending(&b) == false); /* started now; the host finishes at once */
    ck_assert_int_eq(memcmp(view(e), "hello", 5), 0);
    spin();
    ck_assert_uint_eq(e->refs, 1);
    ck_assert_uint_eq(b.batches, 1);
    ck_assert_uint_eq(b.pieces, 1);
    gkv_store_unref(&st, e);
}
END_TEST

/* Reads queued after a write in the same batch see the written bytes (ins run before outs);
 * every sink gets its own bytes and tag, in the order queued. */
START_TEST(reads_deliver_the_right_bytes_in_order)
{
    gkv_entry_t *a = entry("a", 3), *c = entry("c", 4);
    write_value(a, "abc", NULL);
    write_value(c, "wxyz", NULL);
    int sink1, sink2;
    ck_assert(gkv_batch_out_room(&b, 1, 3));
    gkv_store_ref(a);
    gkv_batch_out(&b, a, 0, 3, &sink1, 100);
    ck_assert(gkv_batch_out_room(&b, 1, 2));
    gkv_store_ref(c);
    gkv_batch_out(&b, c, 2, 2, &sink2, 7);
    ck_assert_int_eq(ngot, 0);
    spin();
    ck_assert_int_eq(ngot, 2);
    ck_assert_ptr_eq(got[0].sink, &sink1);
    ck_assert_uint_eq(got[0].tag, 100);
    ck_assert_int_eq(memcmp(got[0].bytes, "abc", 3), 0);
    ck_assert_ptr_eq(got[1].sink, &sink2);
    ck_assert_uint_eq(got[1].tag, 7);
    ck_assert_uint_eq(got[1].len, 2);
    ck_assert_int_eq(memcmp(got[1].bytes, "yz", 2), 0);
    ck_assert_int_eq(got[1].status, 0);
    ck_assert_uint_eq(a->refs, 1);
    ck_assert_uint_eq(c->refs, 1);
    gkv_store_unref(&st, a);
    gkv_store_unref(&st, c);
}
END_TEST

static int woken;
static void on_room(gkv_waiter_t *w)
{
    (void)w;
    woken++;
}

/* Writers that find every buffer busy wait, and are called once a batch is done. */
START_TEST(a_full_ring_makes_writers_wait_for_room)
{
    enum { N = GKV_BATCH_BUFS * GKV_BATCH_PIECES + 1 };
    static gkv_entry_t *e[N];
    gkv_waiter_t w = {.ready = on_room};
    int i;
    woken = 0;
    /* The host finishes a batch as it starts, but only the loop hears of it: without spinning,
     * every buffer stays busy. */
    for (i = 0; i < N; i++) {
        e[i] = entry("k", 16);
        void *dst = gkv_batch_in_reserve(&b, 16, &w);
        if (!dst)
            break;
        memset(dst, i & 0xff, 16);
        gkv_batch_in_commit(&b, e[i]);
    }
    ck_assert_int_eq(i, GKV_BATCH_BUFS * GKV_BATCH_PIECES);
    ck_assert(w.queued);
    ck_assert_int_eq(woken, 0);
    spin();
    ck_assert_int_eq(woken, 1);
    ck_assert_ptr_nonnull(gkv_batch_in_reserve(&b, 16, &w));
    for (int j = 0; j < i; j++) {
        ck_assert_uint_eq((uint8_t)view(e[j])[15], j & 0xff);
        gkv_store_unref(&st, e[j]);
    }
    gkv_store_unref(&st, e[i]); /* made, never committed */
}
END_TEST

/* A bulk copy lands with its batch, after the small writes queued before it and before the
 * reads; it counts as a pending write for MAP, holds a reference on its entry and hands its
 * staging buffer back once the batch is done. A full set of bulk slots sends the batch on. */
START_TEST(bulk_copies_land_and_give_their_buffers_back)
{
    enum { LEN = 100000 };
    gkv_entry_t *e = entry("big", 2 * LEN);
    gkv_waiter_t w = {.ready = on_room};
    for (int part = 0; part < 2; part++) {
        ck_assert(gkv_batch_bulk_room(&b, &w));
        uint8_t *stage = gkv_staging_get(&staging, NULL);
        ck_assert_ptr_nonnull(stage);
        for (int i = 0; i < LEN; i++)
            stage[i] = (uint8_t)(i * 7 + part);
        gkv_batch_in_bulk(&b, e, (uint64_t)part * LEN, stage, LEN);
    }
    ck_assert_uint_eq(e->refs, 3);
    int sink;
    ck_assert(gkv_batch_out_room(&b, 1, 16));
    gkv_store_ref(e);
    gkv_batch_out(&b, e, LEN + 1000, 16, &sink, 1);
    ck_assert_int_eq(staging.nfree, 0);
    ck_assert(gkv_batch_writes_pending(&b) == false); /* started; the host is done at once */
    spin();
    ck_assert_int_eq(staging.nfree, staging.ntotal);
    ck_assert_uint_eq(e->refs, 1);
    for (int i = 0; i < 2 * LEN; i++)
        ck_assert_uint_eq((uint8_t)view(e)[i], (uint8_t)((i % LEN) * 7 + i / LEN));
    ck_assert_int_eq(ngot, 1);
    for (int i = 0; i < 16; i++)
        ck_assert_uint_eq((uint8_t)got[0].bytes[i], (uint8_t)((1000 + i) * 7 + 1));

    /* A full set of bulk slots sends the batch on; the next slot is in the next buffer. */
    uint64_t started = b.batches;
    for (int i = 0; i <= GKV_BATCH_BULK; i++) {
        ck_assert(gkv_batch_bulk_room(&b, &w));
        uint8_t *stage = gkv_staging_get(&staging, NULL);
        ck_assert_ptr_nonnull(stage);
        gkv_batch_in_bulk(&b, e, 0, stage, 16);
    }
    ck_assert_uint_eq(b.batches, started + 1);
    ck_assert(!w.queued);
    spin();
    gkv_store_unref(&st, e);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("batch");
    TCase *t = tcase_create("host");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, writes_land_and_references_are_held_until_done);
    tcase_add_test(t, reads_deliver_the_right_bytes_in_order);
    tcase_add_test(t, a_full_ring_makes_writers_wait_for_room);
    tcase_add_test(t, bulk_copies_land_and_give_their_buffers_back);
    suite_add_tcase(s, t);
    return s;
}
