/* test_exports.c: the table of exported allocations kept for reuse, over fake addresses: export
 * data remembered, only exported allocations kept, exact-size reuse, the byte cap (oldest
 * given back first), drain, and held allocations never given back. */
#include <gpukv/gpukv.h>
#include <string.h>

#include "check_main.h"
#include "exports.h"

typedef struct {
    uint64_t released[16], sizes[16];
    int n;
} sink_t;

static void sink_release(void *ctx, uint64_t addr, uint64_t size)
{
    sink_t *s = ctx;
    ck_assert_int_lt(s->n, 16);
    s->released[s->n] = addr;
    s->sizes[s->n++] = size;
}

static void export(gkv_exports_t *k, uint64_t addr, uint64_t size)
{
    uint8_t data[GKV_EXPORT_MAX];
    memset(data, (int)(addr & 0xff), sizeof(data));
    ck_assert_int_eq(gkv_exports_add(k, addr, size, data, sizeof(data)), 0);
}

START_TEST(export_data_is_remembered_while_live)
{
    sink_t s = {0};
    gkv_exports_t *k;
    ck_assert_int_eq(gkv_exports_init(&k, 1000, sink_release, &s), 0);
    const uint8_t *d;
    uint32_t len;
    ck_assert(!gkv_exports_find(k, 0x1000, &d, &len));
    export(k, 0x1000, 100);
    ck_assert(gkv_exports_find(k, 0x1000, &d, &len));
    ck_assert_uint_eq(len, GKV_EXPORT_MAX);
    ck_assert_uint_eq(d[0], 0x00);
    export(k, 0x20ab, 100);
    ck_assert(gkv_exports_find(k, 0x20ab, &d, &len));
    ck_assert_uint_eq(d[5], 0xab);
    gkv_exports_fini(k);
    ck_assert_int_eq(s.n, 0); /* live allocations are the caller's */
}
END_TEST

START_TEST(only_exported_allocations_are_kept_and_reused_by_exact_size)
{
    sink_t s = {0};
    gkv_exports_t *k;
    ck_assert_int_eq(gkv_exports_init(&k, 1000, sink_release, &s), 0);
    ck_assert(!gkv_exports_freed(k, 0x5000)); /* never exported: the caller frees it */
    export(k, 0x1000, 100);
    ck_assert_uint_eq(gkv_exports_count(k, 100), 0);
    ck_assert(gkv_exports_freed(k, 0x1000));
    ck_assert_uint_eq(gkv_exports_bytes(k), 100);
    ck_assert_uint_eq(gkv_exports_count(k, 100), 1);
    ck_assert_uint_eq(gkv_exports_count(k, 99), 0);
    export(k, 0x3000, 100);
    ck_assert(gkv_exports_freed(k, 0x3000));
    ck_assert_uint_eq(gkv_exports_count(k, 100), 2);
    uint64_t b;
    ck_assert(gkv_exports_take(k, 100, &b));
    ck_assert_uint_eq(b, 0x1000); /* the oldest */
    ck_assert_uint_eq(gkv_exports_count(k, 100), 1);
    ck_assert(gkv_exports_freed(k, 0x1000));
    ck_assert(gkv_exports_take(k, 100, &b));
    ck_assert_uint_eq(b, 0x3000);
    ck_assert_uint_eq(gkv_exports_reuses(k), 2);
    const uint8_t *d;
    uint32_t len;
    ck_assert(!gkv_exports_find(k, 0x1000, &d, &len)); /* not live now */
    uint64_t a;
    ck_assert(!gkv_exports_take(k, 99, &a));
    ck_assert(!gkv_exports_take(k, 101, &a));
    ck_assert(gkv_exports_take(k, 100, &a));
    ck_assert_uint_eq(a, 0x1000);
    ck_assert_uint_eq(gkv_exports_bytes(k), 0);
    ck_assert_uint_eq(gkv_exports_reuses(k), 3);
    ck_assert(gkv_exports_find(k, 0x1000, &d, &len)); /* live again, data still known */
    ck_assert(!gkv_exports_take(k, 100, &a));                /* taken once only */
    ck_assert_int_eq(s.n, 0);
    gkv_exports_fini(k);
}
END_TEST

START_TEST(the_cap_gives_back_the_oldest_first)
{
    sink_t s = {0};
    gkv_exports_t *k;
    ck_assert_int_eq(gkv_exports_init(&k, 1000, sink_release, &s), 0);
    export(k, 0x1000, 400);
    export(k, 0x2000, 400);
    export(k, 0x3000, 400);
    export(k, 0x4000, 2000);
    ck_assert(gkv_exports_freed(k, 0x1000));
    ck_assert(gkv_exports_freed(k, 0x2000));
    ck_assert_int_eq(s.n, 0);
    ck_assert(gkv_exports_freed(k, 0x3000)); /* 1200 > 1000: the oldest goes */
    ck_assert_int_eq(s.n, 1);
    ck_assert_uint_eq(s.released[0], 0x1000);
    ck_assert_uint_eq(s.sizes[0], 400);
    ck_assert_uint_eq(gkv_exports_bytes(k), 800);
    gkv_exports_tag(k, 0x2000, 7); /* kept with its clear's number */
    ck_assert_uint_eq(gkv_exports_tag_of(k, 0x2000), 7);
    ck_assert_uint_eq(gkv_exports_tag_of(k, 0x3000), 0);
    ck_assert_uint_eq(gkv_exports_tag_of(k, 0x9000), 0); /* no such allocation */
    ck_assert(!gkv_exports_freed(k, 0x4000)); /* over the cap by itself: freed as usual */
    ck_assert_int_eq(s.n, 1);
    uint64_t a, b;
    ck_assert(gkv_exports_take(k, 400, &a));
    ck_assert(gkv_exports_take(k, 400, &b));
    ck_assert_uint_eq(a, 0x2000); /* the one kept longest first */
    ck_assert_uint_eq(b, 0x3000);
    ck_assert(gkv_exports_freed(k, a));
    ck_assert(gkv_exports_freed(k, b));
    ck_assert_uint_eq(gkv_exports_drain(k), 800);
    ck_assert_int_eq(s.n, 3);
    ck_assert_uint_eq(gkv_exports_bytes(k), 0);
    ck_assert(!gkv_exports_take(k, 400, &a));
    export(k, 0x6000, 10);
    ck_assert(gkv_exports_freed(k, 0x6000));
    gkv_exports_fini(k); /* gives back what is kept */
    ck_assert_int_eq(s.n, 4);
    ck_assert_uint_eq(s.released[3], 0x6000);
}
END_TEST

START_TEST(a_zero_cap_keeps_nothing)
{
    sink_t s = {0};
    gkv_exports_t *k;
    ck_assert_int_eq(gkv_exports_init(&k, 0, sink_release, &s), 0);
    export(k, 0x1000, 1);
    ck_assert(!gkv_exports_freed(k, 0x1000));
    const uint8_t *d;
    uint32_t len;
    ck_assert(!gkv_exports_find(k, 0x1000, &d, &len)); /* forgotten once freed */
    gkv_exports_fini(k);
    ck_assert_int_eq(s.n, 0);
}
END_TEST

/* Held allocations (gkv_exports_hold): kept when freed whatever the cap, passed over by the
 * cap's trimming and by drain, given back once no longer held and past the cap; holding what
 * was never exported (or unholding what is not held) changes nothing. */
START_TEST(held_allocations_are_never_given_back)
{
    sink_t s = {0};
    gkv_exports_t *k;
    ck_assert_int_eq(gkv_exports_init(&k, 150, sink_release, &s), 0);
    ck_assert(!gkv_exports_hold(k, 0x9000, 1)); /* never exported */
    export(k, 0x1000, 100);
    export(k, 0x2000, 100);
    export(k, 0x3000, 400); /* larger than the cap */
    ck_assert(!gkv_exports_hold(k, 0x1000, -1)); /* not held */
    ck_assert(gkv_exports_hold(k, 0x1000, 1));
    ck_assert(gkv_exports_hold(k, 0x3000, 1));
    ck_assert_uint_eq(gkv_exports_holds_now(k), 2);
    ck_assert(gkv_exports_freed(k, 0x1000));
    ck_assert(gkv_exports_freed(k, 0x3000)); /* kept past the cap: it is held */
    ck_assert(gkv_exports_freed(k, 0x2000)); /* the cap: nothing unheld to give back first */
    ck_assert_int_eq(s.n, 0);
    ck_assert_uint_eq(gkv_exports_drain(k), 100); /* 0x2000 alone */
    ck_assert_int_eq(s.n, 1);
    ck_assert_uint_eq(s.released[0], 0x2000);
    uint64_t addr;
    ck_assert(gkv_exports_take(k, 100, &addr)); /* a held one serves another value */
    ck_assert_uint_eq(addr, 0x1000);
    ck_assert(gkv_exports_freed(k, 0x1000));
    ck_assert(gkv_exports_hold(k, 0x3000, -1)); /* 500 kept, cap 150: it goes */
    ck_assert_int_eq(s.n, 2);
    ck_assert_uint_eq(s.released[1], 0x3000);
    ck_assert(gkv_exports_hold(k, 0x1000, -1)); /* 100 kept, under the cap: it stays */
    ck_assert_int_eq(s.n, 2);
    ck_assert_uint_eq(gkv_exports_holds_now(k), 0);
    ck_assert_uint_eq(gkv_exports_drain(k), 100);
    ck_assert_int_eq(s.n, 3);
    gkv_exports_fini(k);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("keep");
    TCase *t = tcase_create("keep");
    tcase_add_test(t, export_data_is_remembered_while_live);
    tcase_add_test(t, only_exported_allocations_are_kept_and_reused_by_exact_size);
    tcase_add_test(t, the_cap_gives_back_the_oldest_first);
    tcase_add_test(t, a_zero_cap_keeps_nothing);
    tcase_add_test(t, held_allocations_are_never_given_back);
    suite_add_tcase(s, t);
    return s;
}
