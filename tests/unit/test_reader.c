/* test_reader.c: the bounded msgpack reader. */
#include <gpukv/gpukv.h>
#include <string.h>

#include "check_main.h"
#include "reader.h"

#define BYTES(...) ((const uint8_t[]){__VA_ARGS__}), sizeof((const uint8_t[]){__VA_ARGS__})

START_TEST(reads_integers_of_every_width)
{
    gkv_reader_t r;
    uint64_t u;
    int64_t s;
    gkv_read_init(&r, BYTES(0x05, 0xcc, 0xff, 0xcd, 0x01, 0x00, 0xce, 0, 1, 0, 0, 0xcf, 0xff, 0xff,
                           0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xd0, 0x80));
    ck_assert_int_eq(gkv_read_uint(&r, &u), 0);
    ck_assert_uint_eq(u, 5);
    ck_assert_int_eq(gkv_read_uint(&r, &u), 0);
    ck_assert_uint_eq(u, 255);
    ck_assert_int_eq(gkv_read_uint(&r, &u), 0);
    ck_assert_uint_eq(u, 256);
    ck_assert_int_eq(gkv_read_uint(&r, &u), 0);
    ck_assert_uint_eq(u, 65536);
    ck_assert_int_eq(gkv_read_uint(&r, &u), 0);
    ck_assert_uint_eq(u, UINT64_MAX);
    ck_assert_int_eq(gkv_read_uint(&r, &u), GKV_EPROTO); /* -1 is not unsigned */
    ck_assert_int_eq(gkv_read_int(&r, &s), 0);
    ck_assert_int_eq(s, -1);
    ck_assert_int_eq(gkv_read_int(&r, &s), 0);
    ck_assert_int_eq(s, -128);
    ck_assert_uint_eq(gkv_read_left(&r), 0);
}
END_TEST

START_TEST(refuses_counts_larger_than_the_buffer)
{
    gkv_reader_t r;
    uint32_t n;
    /* msgpack-c issue 1013: array32 of 0xff000000 elements in 5 bytes. */
    gkv_read_init(&r, BYTES(0xdd, 0xff, 0x00, 0x00, 0x00));
    ck_assert_int_eq(gkv_read_array(&r, &n), GKV_EPROTO);
    ck_assert_int_eq(gkv_read_skip(&r), GKV_EPROTO);
    gkv_read_init(&r, BYTES(0xdf, 0x00, 0x00, 0x00, 0x02, 0x01, 0x02, 0x03));
    ck_assert_int_eq(gkv_read_map(&r, &n), GKV_EPROTO); /* 2 pairs need 4 bytes */
    gkv_read_init(&r, BYTES(0xc6, 0x7f, 0xff, 0xff, 0xff, 'a'));
    gkv_slice_t s;
    ck_assert_int_eq(gkv_read_bin(&r, &s), GKV_EPROTO);
    ck_assert_uint_eq(gkv_read_left(&r), 6); /* a failed read does not move */
}
END_TEST

START_TEST(refuses_truncated_values_and_wrong_types)
{
    gkv_reader_t r;
    uint64_t u;
    gkv_slice_t s;
    gkv_read_init(&r, BYTES(0xcd, 0x01));
    ck_assert_int_eq(gkv_read_uint(&r, &u), GKV_EPROTO);
    gkv_read_init(&r, BYTES(0xa3, 'a', 'b'));
    ck_assert_int_eq(gkv_read_bin(&r, &s), GKV_EPROTO);
    gkv_read_init(&r, BYTES(0xa3, 'a', 'b', 'c'));
    ck_assert_int_eq(gkv_read_uint(&r, &u), GKV_EPROTO);
    ck_assert_int_eq(gkv_read_bin(&r, &s), 0);
    ck_assert_uint_eq(s.len, 3);
    ck_assert_int_eq(memcmp(s.p, "abc", 3), 0);
    gkv_read_init(&r, NULL, 0);
    ck_assert_int_eq(gkv_read_uint(&r, &u), GKV_EPROTO);
    ck_assert_int_eq(gkv_read_skip(&r), GKV_EPROTO);
}
END_TEST

START_TEST(skip_limits_nesting_depth)
{
    uint8_t deep[64];
    memset(deep, 0x91, sizeof(deep)); /* [[[[...]]]] 64 deep, never closed */
    deep[63] = 0x01;
    gkv_reader_t r;
    gkv_read_init(&r, deep, sizeof(deep));
    ck_assert_int_eq(gkv_read_skip(&r), GKV_EPROTO);
    gkv_read_init(&r, BYTES(0x82, 0x01, 0x92, 0xc3, 0xc0, 0xa1, 'x', 0xcb, 0, 0, 0, 0, 0, 0, 0, 0));
    ck_assert_int_eq(gkv_read_skip(&r), 0);
    ck_assert_uint_eq(gkv_read_left(&r), 0);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("reader");
    TCase *t = tcase_create("integers");
    tcase_add_test(t, reads_integers_of_every_width);
    suite_add_tcase(s, t);
    t = tcase_create("hostile counts");
    tcase_add_test(t, refuses_counts_larger_than_the_buffer);
    suite_add_tcase(s, t);
    t = tcase_create("truncation and types");
    tcase_add_test(t, refuses_truncated_values_and_wrong_types);
    suite_add_tcase(s, t);
    t = tcase_create("nesting");
    tcase_add_test(t, skip_limits_nesting_depth);
    suite_add_tcase(s, t);
    return s;
}
