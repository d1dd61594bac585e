/* test_persist.c: server/persist's pieces without a daemon: commit waiters (commit.h) released
 * in order, once, up to the committed length; the snapshot file's codec (snapfile.h): each part
 * comes back as written, and every damaged byte of a header, device table, record header or
 * trailer is detected; the placer (place.h): records placed on the device their UUID names,
 * skipped for a passed deadline, a key too long or a GPU not served, or placed anywhere when
 * asked, and published with their deadline. */
#include <stdio.h>
#include <string.h>

#include "check_main.h"
#include "commit.h"
#include "duration.h"
#include "frame.h"
#include "place.h"
#include "snapfile.h"
#define STORE_LIMIT (1u << 20)
#include "store_fixture.h"

/* --- commit waiters --- */

typedef struct {
    gkv_commit_waiter_t w;
    int readies;
    bool resumed;
    int order; /* the release that freed it: ready_seq at the time */
} waiter_t;

static int ready_seq;

static void on_ready(gkv_commit_waiter_t *w, bool resume)
{
    waiter_t *t = (waiter_t *)w;
    t->readies++;
    t->resumed = resume;
    t->order = ++ready_seq;
}

START_TEST(waiters_are_released_once_their_records_have_committed)
{
    gkv_commits_t q = {0};
    waiter_t a = {.w.ready = on_ready}, b = {.w.ready = on_ready}, c = {.w.ready = on_ready};
    ready_seq = 0;
    ck_assert(gkv_commits_wait(&q, &a.w, 100));
    ck_assert(gkv_commits_wait(&q, &b.w, 200));
    ck_assert(gkv_commits_wait(&q, &c.w, 300));
    ck_assert(!gkv_commits_wait(&q, &a.w, 250)); /* already waiting: only its end moves up */
    ck_assert_uint_eq(a.w.until, 250);
    ck_assert_uint_eq(q.waits, 3);
    gkv_commits_release(&q, 199, false, true); /* nothing has committed far enough */
    ck_assert_int_eq(a.readies + b.readies + c.readies, 0);
    gkv_commits_release(&q, 250, false, true);
    ck_assert_int_eq(a.readies, 1);
    ck_assert_int_eq(b.readies, 1);
    ck_assert_int_eq(c.readies, 0);
    ck_assert(a.resumed && b.resumed);
    ck_assert(!a.w.queued && !b.w.queued && c.w.queued);
    gkv_commits_release(&q, 250, false, true); /* released once only */
    ck_assert_int_eq(a.readies, 1);
    gkv_commits_release(&q, 0, true, false); /* the journal went: every waiter, not resumed */
    ck_assert_int_eq(c.readies, 1);
    ck_assert(!c.resumed);
    ck_assert_ptr_null(q.head);
}
END_TEST

static gkv_commits_t *requeue_q;

static void requeue(gkv_commit_waiter_t *w, bool resume)
{
    on_ready(w, resume);
    if (((waiter_t *)w)->readies == 1) /* its next request appended more meanwhile */
        ck_assert(gkv_commits_wait(requeue_q, w, 500));
}

START_TEST(a_waiter_may_wait_again_from_its_ready)
{
    gkv_commits_t q = {0};
    waiter_t a = {.w.ready = requeue};
    requeue_q = &q;
    ck_assert(gkv_commits_wait(&q, &a.w, 100));
    gkv_commits_release(&q, 100, false, true);
    ck_assert_int_eq(a.readies, 1);
    ck_assert(a.w.queued);
    gkv_commits_release(&q, 499, false, true);
    ck_assert_int_eq(a.readies, 1);
    gkv_commits_release(&q, 500, false, true);
    ck_assert_int_eq(a.readies, 2);
    ck_assert(!a.w.queued);
}
END_TEST

/* --- the snapshot file's codec --- */

START_TEST(each_part_comes_back_as_written)
{
    uint8_t h[GKV_SNAP_HEADER_LEN], r[GKV_SNAP_RECORD_LEN], t[GKV_SNAP_TRAILER_LEN];
    uint8_t table[2 * GKV_SNAP_UUID_LEN + 4];
    gkv_snap_header_t in = {.ndev = 2, .unix_ms = 1764000000000ull, .keys = 7, .bytes = 1u << 30};
    gkv_snap_header_t out;
    gkv_snap_header_encode(h, &in);
    ck_assert_ptr_null(gkv_snap_header_decode(h, &out));
    ck_assert_uint_eq(out.ndev, 2);
    ck_assert_uint_eq(out.unix_ms, in.unix_ms);
    ck_assert_uint_eq(out.keys, 7);
    ck_assert_uint_eq(out.bytes, 1u << 30);
    const char *uuids[2] = {"GPU-0123", ""};
    gkv_snap_table_encode(table, uuids, 2);
    ck_assert(gkv_snap_table_check(table, 2));
    ck_assert_str_eq((const char *)table, "GPU-0123");
    ck_assert_uint_eq(table[GKV_SNAP_UUID_LEN], 0);
    gkv_jrec_t rec = {.klen = 65535,
                      .meta_len = GKV_MAX_META,
                      .size = 5ull << 32,
                      .expire_unix_ms = 42,
                      .dev = 1};
    gkv_jrec_t back;
    gkv_snap_record_encode(r, &rec);
    ck_assert_ptr_null(gkv_snap_record_decode(r, 2, &back));
    ck_assert_uint_eq(back.klen, 65535);
    ck_assert_uint_eq(back.meta_len, GKV_MAX_META);
    ck_assert_uint_eq(back.size, 5ull << 32);
    ck_assert_uint_eq(back.expire_unix_ms, 42);
    ck_assert_uint_eq(back.dev, 1);
    ck_assert_ptr_nonnull(gkv_snap_record_decode(r, 1, &back)); /* device 1 of 1: none such */
    gkv_snap_trailer_encode(t, 7, 1u << 30);
    ck_assert(gkv_snap_trailer_check(t, 7));
    ck_assert(!gkv_snap_trailer_check(t, 6));
}
END_TEST

/* Flipping any one bit of any byte of each part is detected. */
START_TEST(every_damaged_byte_is_detected)
{
    uint8_t h[GKV_SNAP_HEADER_LEN], r[GKV_SNAP_RECORD_LEN], t[GKV_SNAP_TRAILER_LEN];
    uint8_t table[3 * GKV_SNAP_UUID_LEN + 4];
    gkv_snap_header_t hd;
    gkv_jrec_t rec;
    gkv_snap_header_encode(h, &(gkv_snap_header_t){.ndev = 3, .unix_ms = 1, .keys = 2});
    const char *uuids[3] = {"GPU-a", "GPU-b", "GPU-c"};
    gkv_snap_table_encode(table, uuids, 3);
    gkv_snap_record_encode(r, &(gkv_jrec_t){.klen = 3, .meta_len = 0, .size = 10, .dev = 2});
    gkv_snap_trailer_encode(t, 2, 10);
    for (unsigned bit = 0; bit < 8; bit++) {
        for (size_t i = 0; i < sizeof(h); i++) {
            h[i] ^= (uint8_t)(1u << bit);
            ck_assert_msg(gkv_snap_header_decode(h, &hd) != NULL, "header byte %zu", i);
            h[i] ^= (uint8_t)(1u << bit);
        }
        for (size_t i = 0; i < sizeof(table); i++) {
            table[i] ^= (uint8_t)(1u << bit);
            ck_assert_msg(!gkv_snap_table_check(table, 3), "table byte %zu", i);
            table[i] ^= (uint8_t)(1u << bit);
        }
        for (size_t i = 0; i < sizeof(r); i++) {
            r[i] ^= (uint8_t)(1u << bit);
            ck_assert_msg(gkv_snap_record_decode(r, 3, &rec) != NULL, "record byte %zu", i);
            r[i] ^= (uint8_t)(1u << bit);
        }
        for (size_t i = 0; i < sizeof(t); i++) {
            t[i] ^= (uint8_t)(1u << bit);
            ck_assert_msg(!gkv_snap_trailer_check(t, 2), "trailer byte %zu", i);
            t[i] ^= (uint8_t)(1u << bit);
        }
    }
    /* Undamaged, each still passes. */
    ck_assert_ptr_null(gkv_snap_header_decode(h, &hd));
    ck_assert(gkv_snap_table_check(table, 3));
    ck_assert_ptr_null(gkv_snap_record_decode(r, 3, &rec));
    ck_assert(gkv_snap_trailer_check(t, 2));
}
END_TEST

START_TEST(impossible_records_are_refused_even_with_a_good_checksum)
{
    uint8_t r[GKV_SNAP_RECORD_LEN];
    gkv_jrec_t rec;
    gkv_snap_record_encode(r, &(gkv_jrec_t){.klen = 0, .size = 1});
    ck_assert_ptr_nonnull(gkv_snap_record_decode(r, 1, &rec));
    gkv_snap_record_encode(r, &(gkv_jrec_t){.klen = 65536, .size = 1});
    ck_assert_ptr_nonnull(gkv_snap_record_decode(r, 1, &rec));
    gkv_snap_record_encode(r, &(gkv_jrec_t){.klen = 1, .meta_len = GKV_MAX_META + 1});
    ck_assert_ptr_nonnull(gkv_snap_record_decode(r, 1, &rec));
    uint8_t h[GKV_SNAP_HEADER_LEN];
    gkv_snap_header_t hd;
    gkv_snap_header_encode(h, &(gkv_snap_header_t){.ndev = 0});
    ck_assert_ptr_nonnull(gkv_snap_header_decode(h, &hd));
    gkv_snap_header_encode(h, &(gkv_snap_header_t){.ndev = GKV_MAX_DEVICES + 1});
    ck_assert_ptr_nonnull(gkv_snap_header_decode(h, &hd));
}
END_TEST

START_TEST(snapshot_names)
{
    ck_assert(gkv_snap_name("gpukv-0001764000000000.snap"));
    ck_assert(!gkv_snap_name("gpukv-.snap"));
    ck_assert(!gkv_snap_name("gpukv-12a4.snap"));
    ck_assert(!gkv_snap_name(".gpukv-0001764000000000.snap.tmp"));
    ck_assert(gkv_snap_tmp_name(".gpukv-0001764000000000.snap.tmp"));
    ck_assert(!gkv_snap_tmp_name("gpukv-0001764000000000.snap"));
}
END_TEST

/* --- the placer --- */

static gkv_devices_t devs1;

static gkv_persist_env_t env_of(void)
{
    memset(&devs1, 0, sizeof(devs1));
    devs1.dev[0].be = be;
    devs1.n = 1;
    return (gkv_persist_env_t){.store = &st, .devs = &devs1, .max_key = 8};
}

static gkv_jrec_t rec_of(const char *key, uint64_t size, uint32_t dev, uint64_t expire)
{
    return (gkv_jrec_t){.key = (const uint8_t *)key,
                        .klen = (uint32_t)strlen(key),
                        .meta = (const uint8_t *)"mm",
                        .meta_len = 2,
                        .size = size,
                        .dev = dev,
                        .expire_unix_ms = expire};
}

/* Places r, filling its value with fill; true when it was published. */
static bool place(gkv_placer_t *p, const gkv_jrec_t *r, uint8_t fill)
{
    unsigned to;
    gkv_entry_t *e;
    if (gkv_place_check(p, r, &to))
        return false;
    ck_assert_int_eq(gkv_place_entry(p, r, to, GKV_LANE_SHARED, &e), 0);
    if (!e)
        return false;
    uint8_t buf[64];
    memset(buf, fill, sizeof(buf));
    ck_assert_int_eq(be->ops->write_sync(be, (gkv_devptr_t){e->mem.v}, buf, r->size), 0);
    ck_assert_int_eq(gkv_place_publish(p, r, e), 0);
    return true;
}

START_TEST(records_are_placed_by_their_devices_uuid_or_skipped_with_a_reason)
{
    gkv_persist_env_t env = env_of();
    gkv_placer_t p;
    gkv_placer_init(&p, &env, false);
    gkv_placer_device(&p, &devs1, 0, "", 0);         /* the host arena of one: no UUID */
    gkv_placer_device(&p, &devs1, 1, "GPU-gone", 8); /* a GPU this daemon lacks */
    uint64_t later = gkv_wall_clock_ms() + 3600000;
    gkv_jrec_t ok = rec_of("k1", 16, 0, later), old = rec_of("k2", 16, 0, 1);
    gkv_jrec_t longkey = rec_of("k-too-long", 16, 0, 0), gone = rec_of("k3", 16, 1, 0);
    ck_assert(place(&p, &ok, 7));
    ck_assert(!place(&p, &old, 7));
    ck_assert(!place(&p, &longkey, 7));
    ck_assert(!place(&p, &gone, 7));
    ck_assert_uint_eq(p.keys, 1);
    ck_assert_uint_eq(p.bytes, 16);
    ck_assert_uint_eq(p.expired, 1);
    ck_assert_uint_eq(p.too_long, 1);
    ck_assert_uint_eq(p.no_device, 1);
    gkv_entry_t *e = gkv_store_get(&st, "k1", 2);
    ck_assert_ptr_nonnull(e);
    uint32_t ml;
    ck_assert_int_eq(memcmp(gkv_entry_meta(e, &ml), "mm", 2), 0);
    uint8_t back[16];
    ck_assert_int_eq(be->ops->read_sync(be, back, (gkv_devptr_t){e->mem.v}, 16), 0);
    ck_assert_uint_eq(back[0], 7);
    ck_assert_uint_eq(back[15], 7);
    uint64_t due = gkv_store_deadline_unix(&st, e, gkv_wall_clock_ms());
    ck_assert_uint_le(due > later ? due - later : later - due, 5); /* its deadline came along */
    /* Anywhere (snapshots): the missing GPU's record lands on a device that has room. */
    gkv_placer_t q;
    gkv_placer_init(&q, &env, true);
    gkv_placer_device(&q, &devs1, 0, "", 0);
    gkv_placer_device(&q, &devs1, 1, "GPU-gone", 8);
    ck_assert(place(&q, &gone, 9));
    /* No room anywhere: skipped and counted, nothing published. */
    gkv_jrec_t huge = rec_of("k4", 2u << 20, 0, 0);
    unsigned to;
    gkv_entry_t *none;
    ck_assert_ptr_null(gkv_place_check(&q, &huge, &to));
    ck_assert_int_eq(gkv_place_entry(&q, &huge, to, GKV_LANE_SHARED, &none), 0);
    ck_assert_ptr_null(none);
    ck_assert_uint_eq(q.no_room, 1);
    ck_assert_ptr_null(gkv_store_get(&st, "k4", 2));
    gkv_store_flush(&st);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("persist");
    TCase *c = tcase_create("commits");
    tcase_add_test(c, waiters_are_released_once_their_records_have_committed);
    tcase_add_test(c, a_waiter_may_wait_again_from_its_ready);
    suite_add_tcase(s, c);
    c = tcase_create("snapfile");
    tcase_add_test(c, each_part_comes_back_as_written);
    tcase_add_test(c, every_damaged_byte_is_detected);
    tcase_add_test(c, impossible_records_are_refused_even_with_a_good_checksum);
    tcase_add_test(c, snapshot_names);
    suite_add_tcase(s, c);
    c = tcase_create("place");
    tcase_add_checked_fixture(c, setup, teardown);
    tcase_add_test(c, records_are_placed_by_their_devices_uuid_or_skipped_with_a_reason);
    suite_add_tcase(s, c);
    return s;
}
