/* test_cmd.c: command handlers and the store, driven directly (no sockets, no loop). */
#include <gpukv/gpukv.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "cmd_fixture.h"

START_TEST(set_get_ranges)
{
    ck_assert_int_eq(put("k", "0123456789", 0), 0);
    gkv_request_t q = req_key(GKV_OP_GET, "k");
    gkv_reply_t rep;
    ck_assert_int_eq(run(&rep, &q), 0);
    ck_assert_uint_eq(rep.nsegs, 1);
    ck_assert_uint_eq(rep.segs[0].len, 10);
    gkv_reply_release(&srv.store, &rep);
    q.offset = 3;
    q.length = 4;
    ck_assert_int_eq(run(&rep, &q), 0);
    ck_assert_uint_eq(rep.segs[0].off, 3);
    ck_assert_uint_eq(rep.segs[0].len, 4);
    gkv_response_t r = last_response();
    ck_assert_uint_eq(r.size, 10);
    ck_assert_uint_eq(r.payload_len, 4);
    gkv_reply_release(&srv.store, &rep);
    q.offset = 0;
    q.length = 0;
    q.suffix = 3;
    ck_assert_int_eq(run(&rep, &q), 0);
    ck_assert_uint_eq(rep.segs[0].off, 7);
    gkv_reply_release(&srv.store, &rep);
    q.suffix = 0;
    q.offset = 11;
    ck_assert_int_eq(run(&rep, &q), GKV_ERANGE);
    ck_assert_int_eq(last_response().status, GKV_ERANGE);
    ck_assert_uint_eq(rep.nsegs, 0);
}
END_TEST

START_TEST(nx_xx_and_missing_keys)
{
    ck_assert_int_eq(put("a", "1", GKV_SET_XX), GKV_ENOTFOUND);
    ck_assert_int_eq(put("a", "1", GKV_SET_NX), 0);
    ck_assert_int_eq(put("a", "2", GKV_SET_NX), GKV_EEXISTS);
    ck_assert_int_eq(put("a", "3", GKV_SET_XX), 0);
    ck_assert_int_eq(put("a", "3", GKV_SET_XX | GKV_SET_NX), GKV_EINVAL);
    gkv_request_t q = req_key(GKV_OP_GET, "nope");
    gkv_reply_t rep;
    ck_assert_int_eq(run(&rep, &q), GKV_ENOTFOUND);
    ck_assert_int_eq(last_response().status, GKV_ENOTFOUND);
}
END_TEST

/* Before authentication only HELLO and PING run; a token in the server makes HELLO check it. */
START_TEST(unauthenticated_connections_run_hello_and_ping_only)
{
    gkv_reply_t rep;
    gkv_request_t q = req_key(GKV_OP_GET, "k");
    gkv_reply_init(&rep, &wr, &leases);
    gkv_wr_reset(&wr);
    ck_assert_int_eq(gkv_dispatch(&srv.cmd, &q, &rep), GKV_EAUTH);
    q = req_key(GKV_OP_PING, "k");
    gkv_reply_init(&rep, &wr, &leases);
    ck_assert_int_eq(gkv_dispatch(&srv.cmd, &q, &rep), 0);
    memcpy(srv.token, "0123456789abcdef", 17);
    srv.token_len = 16;
    q = req_key(GKV_OP_HELLO, "k");
    q.token.p = (const uint8_t *)"0123456789abcdeX";
    q.token.len = 16;
    gkv_reply_init(&rep, &wr, &leases);
    ck_assert_int_eq(gkv_dispatch(&srv.cmd, &q, &rep), GKV_EAUTH);
    ck_assert(rep.auth_failed && !rep.auth_ok);
    q.token.p = (const uint8_t *)"0123456789abcdef";
    gkv_reply_init(&rep, &wr, &leases);
    ck_assert_int_eq(gkv_dispatch(&srv.cmd, &q, &rep), 0);
    ck_assert(rep.auth_ok && !rep.auth_failed);
    srv.token_len = 0;
}
END_TEST

START_TEST(generic_checks)
{
    gkv_reply_t rep;
    gkv_request_t q = req_key(99, "k");
    ck_assert_int_eq(run(&rep, &q), GKV_EUNKNOWNCMD);
    q = req_key(GKV_OP_GET, "");
    ck_assert_int_eq(run(&rep, &q), GKV_EINVAL);
    char longkey[2000];
    memset(longkey, 'x', sizeof(longkey) - 1);
    longkey[sizeof(longkey) - 1] = 0;
    q = req_key(GKV_OP_GET, longkey);
    ck_assert_int_eq(run(&rep, &q), GKV_ETOOBIG);
    q = req_key(GKV_OP_PING, "k");
    q.payload_len = 5;
    ck_assert_int_eq(run(&rep, &q), GKV_EINVAL);
    q = req_key(GKV_OP_GET, "k");
    q.has = 0;
    ck_assert_int_eq(run(&rep, &q), GKV_EINVAL);
}
END_TEST

START_TEST(oom_keeps_stored_values)
{
    static char big[400 << 10];
    memset(big, 'v', sizeof(big) - 1);
    ck_assert_int_eq(put("one", big, 0), 0);
    ck_assert_int_eq(put("two", big, 0), 0);
    uint64_t used = srv.store.used;
    ck_assert_int_eq(put("three", big, 0), GKV_EOOM);
    ck_assert_uint_eq(srv.store.used, used);
    gkv_request_t q = req_key(GKV_OP_GET, "one");
    gkv_reply_t rep;
    ck_assert_int_eq(run(&rep, &q), 0);
    const char *v = srv.devs.dev[0].be->ops->host_view(srv.devs.dev[0].be, rep.segs[0].entry->mem);
    ck_assert_int_eq(memcmp(v, big, sizeof(big) - 1), 0);
    gkv_reply_release(&srv.store, &rep);
    q = req_key(GKV_OP_DEL, "one");
    ck_assert_int_eq(run(&rep, &q), 0);
    ck_assert_uint_eq(last_response().count, 1);
    ck_assert_int_eq(put("three", big, 0), 0);
}
END_TEST

START_TEST(deleted_value_lives_while_referenced)
{
    ck_assert_int_eq(put("k", "payload", 0), 0);
    gkv_request_t q = req_key(GKV_OP_GET, "k");
    gkv_reply_t get;
    ck_assert_int_eq(run(&get, &q), 0);
    gkv_entry_t *e = get.segs[0].entry;
    ck_assert_int_eq(gkv_store_del(&srv.store, "k", 1), 1);
    ck_assert_uint_eq(srv.store.entries, 1); /* still alive for the transfer */
    ck_assert_int_eq(
        memcmp(srv.devs.dev[0].be->ops->host_view(srv.devs.dev[0].be, e->mem), "payload", 7), 0);
    gkv_reply_release(&srv.store, &get);
    ck_assert_uint_eq(srv.store.entries, 0);
    ck_assert_uint_eq(srv.store.used, 0);
}
END_TEST

START_TEST(list_pages_and_directories)
{
    const char *keys[] = {"d/a", "d/b/1", "d/b/2", "d/c", "d/e/x", "e"};
    for (int i = 0; i < 6; i++)
        ck_assert_int_eq(put(keys[i], "xy", 0), 0);
    gkv_request_t q;
    memset(&q, 0, sizeof(q));
    q.op = GKV_OP_LIST;
    q.prefix = (gkv_slice_t){(const uint8_t *)"d/", 2};
    q.delim = (gkv_slice_t){(const uint8_t *)"/", 1};
    q.has = GKV_HAS_PREFIX | GKV_HAS_DELIM;
    q.limit = 2;
    gkv_reply_t rep;
    ck_assert_int_eq(run(&rep, &q), 0);
    gkv_response_t r = last_response();
    ck_assert(r.has_cursor); /* d/a and d/b/ so far */
    ck_assert_int_eq(memcmp(r.cursor.p, "d/b/", 4), 0);
    uint8_t cursor[16];
    memcpy(cursor, r.cursor.p, r.cursor.len);
    q.cursor = (gkv_slice_t){cursor, r.cursor.len};
    q.has |= GKV_HAS_CURSOR;
    q.limit = 10;
    ck_assert_int_eq(run(&rep, &q), 0);
    r = last_response();
    ck_assert(!r.has_cursor);
    gkv_reader_t it;
    uint32_t n;
    gkv_read_init(&it, r.entries.p, r.entries.len);
    gkv_read_array(&it, &n);
    ck_assert_uint_eq(n, 1); /* d/c */
    gkv_read_init(&it, r.dirs.p, r.dirs.len);
    gkv_read_array(&it, &n);
    ck_assert_uint_eq(n, 1); /* d/e/ */
    memset(&q, 0, sizeof(q));
    q.op = GKV_OP_GETSIZE;
    q.prefix = (gkv_slice_t){(const uint8_t *)"d/b", 3};
    q.has = GKV_HAS_PREFIX;
    ck_assert_int_eq(run(&rep, &q), 0);
    r = last_response();
    ck_assert_uint_eq(r.bytes, 4);
    ck_assert_uint_eq(r.count, 2);
}
END_TEST

/* The table names a handler for every command of the list, and a continuation for exactly the
 * commands that take a payload. */
START_TEST(table_covers_the_command_list)
{
    unsigned n = 0;
    for (unsigned op = 1; op < GKV_OP_MAX; op++) {
        const gkv_command_t *cmd = gkv_command_lookup(&srv.cmd, op);
        ck_assert_ptr_nonnull(cmd);
        ck_assert_str_eq(cmd->name, gkv_op_name(op));
        ck_assert_ptr_nonnull(cmd->run);
        ck_assert_int_eq(cmd->on_payload != NULL, (cmd->flags & GKV_CMD_PAYLOAD) != 0);
        n++;
    }
    ck_assert_uint_eq(n, 26);
    ck_assert_ptr_null(gkv_command_lookup(&srv.cmd, 0));
    ck_assert_ptr_null(gkv_command_lookup(&srv.cmd, GKV_OP_MAX));
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("cmd");
    TCase *t = tcase_create("handlers");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, table_covers_the_command_list);
    tcase_add_test(t, set_get_ranges);
    tcase_add_test(t, nx_xx_and_missing_keys);
    tcase_add_test(t, unauthenticated_connections_run_hello_and_ping_only);
    tcase_add_test(t, generic_checks);
    tcase_add_test(t, oom_keeps_stored_values);
    tcase_add_test(t, deleted_value_lives_while_referenced);
    tcase_add_test(t, list_pages_and_directories);
    suite_add_tcase(s, t);
    return s;
}
