/* test_message.c: frames and messages: writer/decoder round trips and a malformed corpus. */
#include <gpukv/gpukv.h>
#include <string.h>

#include "check_main.h"
#include "commands.h"
#include "message.h"

/* The header bytes of the one frame in w, after checking its prefix. */
static const uint8_t *only_frame(gkv_wr_t *w, size_t *len)
{
    ck_assert_uint_ge(w->sb.size, GKV_FRAME_PREFIX);
    *len = gkv_frame_get_len((const uint8_t *)w->sb.data);
    ck_assert_uint_eq(*len + GKV_FRAME_PREFIX, w->sb.size);
    return (const uint8_t *)w->sb.data + GKV_FRAME_PREFIX;
}

START_TEST(frame_length_prefix_round_trips)
{
    uint8_t p[4];
    gkv_frame_put_len(p, 0x01020304);
    ck_assert_uint_eq(p[0], 1);
    ck_assert_uint_eq(p[3], 4);
    ck_assert_uint_eq(gkv_frame_get_len(p), 0x01020304);
    ck_assert_int_eq(gkv_frame_check_len(0, GKV_MAX_HEADER), GKV_EPROTO);
    ck_assert_int_eq(gkv_frame_check_len(GKV_MAX_HEADER + 1, GKV_MAX_HEADER), GKV_EPROTO);
    ck_assert_int_eq(gkv_frame_check_len(GKV_MAX_HEADER, GKV_MAX_HEADER), 0);
}
END_TEST

START_TEST(set_request_round_trips)
{
    gkv_wr_t w;
    gkv_wr_init(&w);
    gkv_wr_begin(&w);
    gkv_wr_uint(&w, GKV_F_OP, GKV_OP_SET);
    gkv_wr_uint(&w, GKV_F_ID, 77);
    gkv_wr_bin(&w, GKV_F_KEY, "k\0y", 3);
    gkv_wr_uint(&w, GKV_F_PAYLOAD, 1ull << 40);
    gkv_wr_uint(&w, GKV_F_FLAGS, GKV_SET_NX);
    gkv_wr_bin(&w, GKV_F_META, "dtype=f4", 8);
    gkv_wr_uint(&w, 999, 5); /* unknown fields are skipped */
    ck_assert_int_eq(gkv_wr_end(&w), 0);
    size_t len;
    const uint8_t *h = only_frame(&w, &len);
    gkv_request_t req;
    const char *why;
    ck_assert_int_eq(gkv_req_decode(h, len, &req, &why), 0);
    ck_assert_uint_eq(req.op, GKV_OP_SET);
    ck_assert_uint_eq(req.id, 77);
    ck_assert_uint_eq(req.key.len, 3);
    ck_assert_int_eq(memcmp(req.key.p, "k\0y", 3), 0);
    ck_assert_uint_eq(req.payload_len, 1ull << 40);
    ck_assert_uint_eq(req.flags, GKV_SET_NX);
    ck_assert(req.has & GKV_HAS_META);
    ck_assert_int_eq(memcmp(req.meta.p, "dtype=f4", 8), 0);
    gkv_wr_fini(&w);
}
END_TEST

START_TEST(batch_requests_round_trip)
{
    gkv_wr_t w;
    gkv_wr_init(&w);
    gkv_wr_begin(&w);
    gkv_wr_uint(&w, GKV_F_OP, GKV_OP_MGET);
    size_t pos = gkv_wr_array_begin(&w, GKV_F_ITEMS);
    for (int i = 0; i < 3; i++) {
        msgpack_pack_array(&w.pk, 4);
        msgpack_pack_bin(&w.pk, 2);
        msgpack_pack_bin_body(&w.pk, i == 0 ? "k0" : i == 1 ? "k1" : "k2", 2);
        msgpack_pack_uint64(&w.pk, (uint64_t)i);
        msgpack_pack_uint64(&w.pk, 10);
        msgpack_pack_uint64(&w.pk, 0);
    }
    gkv_wr_array_end(&w, pos, 3);
    ck_assert_int_eq(gkv_wr_end(&w), 0);
    size_t len;
    const uint8_t *h = only_frame(&w, &len);
    gkv_request_t req;
    const char *why;
    ck_assert_int_eq(gkv_req_decode(h, len, &req, &why), 0);
    ck_assert_uint_eq(req.nitems, 3);
    gkv_reader_t it;
    uint32_t n;
    gkv_item_t item;
    gkv_read_init(&it, req.items.p, req.items.len);
    ck_assert_int_eq(gkv_read_array(&it, &n), 0);
    for (uint32_t i = 0; i < n; i++) {
        ck_assert_int_eq(gkv_req_items_next(&it, &item), 0);
        ck_assert_uint_eq(item.offset, i);
        ck_assert_uint_eq(item.length, 10);
        ck_assert_int_eq(item.key.p[1], '0' + (int)i);
    }
    gkv_wr_fini(&w);
}
END_TEST

START_TEST(several_frames_share_one_buffer)
{
    gkv_wr_t w;
    gkv_wr_init(&w);
    for (int i = 0; i < 3; i++) {
        gkv_wr_begin(&w);
        gkv_wr_uint(&w, GKV_F_ID, (uint64_t)i);
        gkv_wr_int(&w, GKV_F_STATUS, -i);
        gkv_wr_str(&w, GKV_F_MESSAGE, "m");
        ck_assert_int_eq(gkv_wr_end(&w), 0);
    }
    const uint8_t *p = (const uint8_t *)w.sb.data;
    for (int i = 0; i < 3; i++) {
        uint32_t len = gkv_frame_get_len(p);
        gkv_response_t r;
        ck_assert_int_eq(gkv_resp_decode(p + 4, len, &r), 0);
        ck_assert_uint_eq(r.id, (uint64_t)i);
        ck_assert_int_eq(r.status, -i);
        p += 4 + len;
    }
    ck_assert_ptr_eq(p, (const uint8_t *)w.sb.data + w.sb.size);
    gkv_wr_fini(&w);
}
END_TEST

START_TEST(oversized_header_is_refused_and_removed)
{
    gkv_wr_t w;
    gkv_wr_init(&w);
    static uint8_t big[GKV_MAX_HEADER];
    gkv_wr_begin(&w);
    gkv_wr_bin(&w, GKV_F_KEY, big, sizeof(big));
    ck_assert_int_eq(gkv_wr_end(&w), GKV_ETOOBIG);
    ck_assert_uint_eq(w.sb.size, 0);
    gkv_wr_fini(&w);
}
END_TEST

/* Each entry is a header (no prefix) that must be refused without crashing or allocating. */
static const struct {
    const char *name;
    const uint8_t *bytes;
    size_t len;
} corpus[] = {
#define C(name, ...) {name, (const uint8_t[]){__VA_ARGS__}, sizeof((const uint8_t[]){__VA_ARGS__})}
    C("not a map", 0x93, 0x01, 0x02, 0x03),
    C("msgpack-c 1013 bomb", 0xdd, 0xff, 0x00, 0x00, 0x00),
    C("map32 bomb", 0xdf, 0xff, 0xff, 0xff, 0xff, 0x00),
    C("truncated map", 0x82, 0x00, 0x03),
    C("no op", 0x81, 0x01, 0x05),
    C("op is a string", 0x81, 0x00, 0xa3, 's', 'e', 't'),
    C("negative op", 0x81, 0x00, 0xff),
    C("key is an int", 0x82, 0x00, 0x03, 0x02, 0x05),
    C("key length past end", 0x82, 0x00, 0x03, 0x02, 0xc4, 0x10, 'a'),
    C("keys not an array", 0x82, 0x00, 0x07, 0x09, 0xc4, 0x01, 'a'),
    C("keys holds ints", 0x82, 0x00, 0x07, 0x09, 0x91, 0x01),
    C("keys count bomb", 0x82, 0x00, 0x07, 0x09, 0xdd, 0x7f, 0xff, 0xff, 0xff),
    C("item of 3", 0x82, 0x00, 0x05, 0x0a, 0x91, 0x93, 0xa1, 'k', 0x00, 0x00),
    C("field id negative", 0x82, 0x00, 0x02, 0xff, 0x00),
    C("unknown field malformed", 0x82, 0x00, 0x02, 0x63, 0xc1),
    C("unknown field ext", 0x82, 0x00, 0x02, 0x63, 0xd4, 0x01, 0x01),
    C("trailing bytes", 0x81, 0x00, 0x02, 0x00),
    C("uint64 past int64 for int field", 0x81, 0x00, 0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0xff),
    C("empty", 0x80, 0x00),
#undef C
};

START_TEST(malformed_headers_are_refused)
{
    gkv_request_t req;
    const char *why = NULL;
    int rc = gkv_req_decode(corpus[_i].bytes, corpus[_i].len, &req, &why);
    ck_assert_msg(rc == GKV_EPROTO, "'%s' was accepted", corpus[_i].name);
    ck_assert_ptr_nonnull(why);
    ck_assert_uint_gt(strlen(why), 0);
}
END_TEST

START_TEST(every_prefix_of_a_valid_header_is_refused)
{
    gkv_wr_t w;
    gkv_wr_init(&w);
    gkv_wr_begin(&w);
    gkv_wr_uint(&w, GKV_F_OP, GKV_OP_GET);
    gkv_wr_uint(&w, GKV_F_ID, 1234567);
    gkv_wr_bin(&w, GKV_F_KEY, "some/key", 8);
    gkv_wr_uint(&w, GKV_F_OFFSET, 100000);
    ck_assert_int_eq(gkv_wr_end(&w), 0);
    size_t len;
    const uint8_t *h = only_frame(&w, &len);
    gkv_request_t req;
    const char *why;
    for (size_t cut = 0; cut < len; cut++)
        ck_assert_int_eq(gkv_req_decode(h, cut, &req, &why), GKV_EPROTO);
    ck_assert_int_eq(gkv_req_decode(h, len, &req, &why), 0);
    gkv_wr_fini(&w);
}
END_TEST

START_TEST(responses_decode_arrays_raw)
{
    gkv_wr_t w;
    gkv_wr_init(&w);
    gkv_wr_begin(&w);
    gkv_wr_uint(&w, GKV_F_ID, 9);
    gkv_wr_int(&w, GKV_F_STATUS, 0);
    size_t pos = gkv_wr_array_begin(&w, GKV_F_ENTRIES);
    msgpack_pack_array(&w.pk, 2);
    msgpack_pack_bin(&w.pk, 1);
    msgpack_pack_bin_body(&w.pk, "a", 1);
    msgpack_pack_uint64(&w.pk, 42);
    gkv_wr_array_end(&w, pos, 1);
    gkv_wr_bin(&w, GKV_F_CURSOR, "a", 1);
    ck_assert_int_eq(gkv_wr_end(&w), 0);
    size_t len;
    const uint8_t *h = only_frame(&w, &len);
    gkv_response_t r;
    ck_assert_int_eq(gkv_resp_decode(h, len, &r), 0);
    ck_assert_uint_eq(r.id, 9);
    ck_assert(r.has_cursor);
    gkv_reader_t it;
    uint32_t n, two;
    gkv_slice_t k;
    uint64_t size;
    gkv_read_init(&it, r.entries.p, r.entries.len);
    ck_assert_int_eq(gkv_read_array(&it, &n), 0);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(gkv_read_array(&it, &two), 0);
    ck_assert_int_eq(gkv_read_bin(&it, &k), 0);
    ck_assert_int_eq(gkv_read_uint(&it, &size), 0);
    ck_assert_uint_eq(size, 42);
    ck_assert_int_eq(gkv_resp_decode(h, len - 1, &r), GKV_EPROTO);
    gkv_wr_fini(&w);
}
END_TEST

START_TEST(command_names_come_from_the_list)
{
    ck_assert_str_eq(gkv_op_name(GKV_OP_SET), "set");
    ck_assert_str_eq(gkv_op_name(GKV_OP_INFO), "info");
    ck_assert_ptr_null(gkv_op_name(0));
    ck_assert_ptr_null(gkv_op_name(GKV_OP_MAX));
    ck_assert_str_eq(gkv_err_name(GKV_EOOM), "OOM");
    ck_assert_int_eq(GKV_EOOM, -4);
    ck_assert_str_eq(gkv_strerror(GKV_ENOTFOUND), "key not found");
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("message");
    TCase *t = tcase_create("frames");
    tcase_add_test(t, frame_length_prefix_round_trips);
    tcase_add_test(t, several_frames_share_one_buffer);
    tcase_add_test(t, oversized_header_is_refused_and_removed);
    suite_add_tcase(s, t);
    t = tcase_create("round trips");
    tcase_add_test(t, set_request_round_trips);
    tcase_add_test(t, batch_requests_round_trip);
    tcase_add_test(t, responses_decode_arrays_raw);
    tcase_add_test(t, command_names_come_from_the_list);
    suite_add_tcase(s, t);
    t = tcase_create("malformed corpus");
    tcase_add_loop_test(t, malformed_headers_are_refused, 0, sizeof(corpus) / sizeof(corpus[0]));
    tcase_add_test(t, every_prefix_of_a_valid_header_is_refused);
    suite_add_tcase(s, t);
    return s;
}
