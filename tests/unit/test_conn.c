/* test_conn.c: the connection state machine (server/net) driven through a socketpair, with no
 * daemon: a gkv_net_t wired to a host store, devices, staging and a command table of the data
 * handlers. Requests split into single bytes are answered in order; a value larger than a
 * staging buffer goes in and comes back whole; pipelined requests past --output-limit are all
 * answered; a failed HELLO's reply is held (hold.auth) until the sweep lets it go, then the
 * connection closes; a reply waits for the journal's commit (hold.commit); a malformed frame
 * gets PROTO and a close; a client that leaves mid-payload leaves nothing behind (ASan). */
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check_main.h"
#include "commands.h"
#include "conn.h"
#include "error.h"
#include "frame.h"
#include "handlers.h"
#include "journal.h"
#include "message.h"

#define LIMIT (64u << 20)

static uv_loop_t loop;
static gkv_devices_t devs;
static gkv_store_t store;
static gkv_staging_t staging;
static gkv_lease_totals_t totals;
static gkv_cmd_ctx_t cmd;
static gkv_fdstore_t fdstore;
static gkv_net_t net;
static gkv_command_t table[GKV_OP_MAX];
static int cl = -1; /* the client's end */

/* A HELLO that always fails authentication, as a wrong token does. */
static int hello_fails(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    (void)ctx;
    (void)req;
    rep->auth_failed = true;
    return gkv_reply_fail(rep, GKV_EAUTH, "wrong token");
}

static void setup(void)
{
    memset(&net, 0, sizeof(net));
    memset(&devs, 0, sizeof(devs));
    memset(&fdstore, 0, sizeof(fdstore));
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    gkv_backend_config_t bc = {GKV_BACKEND_HOST, 0, LIMIT};
    char why[256];
    ck_assert_int_eq(gkv_backend_open(&bc, &devs.dev[0].be, why, sizeof(why)), 0);
    devs.n = 1;
    ck_assert_int_eq(gkv_store_init(&store, devs.dev[0].be, LIMIT), 0);
    gkv_staging_init(&staging, devs.dev[0].be);
    ck_assert_int_eq(
        gkv_devices_start(&devs, &store, &loop, &staging, gkv_conn_batch_deliver, why, sizeof(why)),
        0);
    table[GKV_OP_HELLO] = (gkv_command_t){"hello", GKV_FLAGS_HELLO, hello_fails, NULL};
    table[GKV_OP_SET] = (gkv_command_t){"set", GKV_FLAGS_SET, gkv_cmd_set, gkv_cmd_set_commit};
    table[GKV_OP_GET] = (gkv_command_t){"get", GKV_FLAGS_GET, gkv_cmd_get, NULL};
    table[GKV_OP_DEL] = (gkv_command_t){"del", GKV_FLAGS_DEL, gkv_cmd_del, NULL};
    cmd = (gkv_cmd_ctx_t){
        .store = &store,
        .devs = &devs,
        .lease_totals = &totals,
        .lim = {.max_key = 1024, .max_value = LIMIT, .max_leases = 16, .max_leased_bytes = LIMIT},
        .table = table};
    fdstore.env = (gkv_persist_env_t){.store = &store, .devs = &devs, .loop = &loop};
    gkv_net_init(&net, &loop);
    net.store = &store;
    net.devs = &devs;
    net.staging = &staging;
    net.cmd = &cmd;
    net.fdstore = &fdstore;
    net.set = (gkv_net_settings_t){.output_limit = 1u << 20, .maxclients = 16};
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    cl = sv[0];
    ck_assert_int_eq(gkv_conn_open(&net, sv[1], true), 0);
    ck_assert_uint_eq(net.nconns, 1);
}

/* Runs the loop until cond holds (at most about 10 s). */
#define PUMP_UNTIL(cond)                                                                           \
    do {                                                                                           \
        for (int i_ = 0; i_ < 100000 && !(cond); i_++) {                                           \
            uv_run(&loop, UV_RUN_NOWAIT);                                                          \
            if (!(cond))                                                                           \
                usleep(100);                                                                       \
        }                                                                                          \
        ck_assert(cond);                                                                           \
    } while (0)

static void teardown(void)
{
    if (cl >= 0)
        close(cl);
    cl = -1;
    gkv_net_stop_conns(&net, 0, true);
    PUMP_UNTIL(net.nconns == 0);
    gkv_devices_close(&devs);
    gkv_net_close(&net);
    uv_run(&loop, UV_RUN_DEFAULT);
    gkv_devices_fini(&devs);
    gkv_net_fini(&net);
    gkv_staging_fini(&staging);
    gkv_store_fini(&store);
    ck_assert_uint_eq(store.used, 0); /* nothing a connection held is left */
    gkv_devices_close_backends(&devs);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
}

/* Frames. */

static void frame(gkv_wr_t *w, unsigned op, uint64_t id, const char *key, uint64_t payload)
{
    gkv_wr_begin(w);
    gkv_wr_uint(w, GKV_F_OP, op);
    gkv_wr_uint(w, GKV_F_ID, id);
    if (key)
        gkv_wr_bin(w, GKV_F_KEY, key, strlen(key));
    if (payload)
        gkv_wr_uint(w, GKV_F_PAYLOAD, payload);
    ck_assert_int_eq(gkv_wr_end(w), 0);
}

/* Writes n bytes to the client's end while the loop runs (the socket's buffer is small). */
static void send_all(const void *p, size_t n)
{
    const uint8_t *b = p;
    fcntl(cl, F_SETFL, O_NONBLOCK);
    while (n) {
        ssize_t w = write(cl, b, n);
        if (w > 0) {
            b += w;
            n -= (size_t)w;
        }
        uv_run(&loop, UV_RUN_NOWAIT);
    }
}

/* Reads exactly n bytes from the client's end while the loop runs. */
static void recv_all(void *p, size_t n)
{
    uint8_t *b = p;
    fcntl(cl, F_SETFL, O_NONBLOCK);
    for (int spins = 0; n; spins++) {
        ck_assert_int_lt(spins, 2000000);
        ssize_t r = read(cl, b, n);
        if (r > 0) {
            b += r;
            n -= (size_t)r;
            continue;
        }
        ck_assert(r < 0 && errno == EAGAIN); /* not closed */
        uv_run(&loop, UV_RUN_NOWAIT);
    }
}

/* Reads one response; its status. */
static int64_t response(gkv_response_t *r, uint8_t *hdr, size_t cap)
{
    uint8_t pre[4];
    recv_all(pre, 4);
    uint32_t len = gkv_frame_get_len(pre);
    ck_assert_uint_le(len, cap);
    recv_all(hdr, len);
    ck_assert_int_eq(gkv_resp_decode(hdr, len, r), 0);
    return r->status;
}

/* True once the client's end reads EOF (the connection closed). */
static bool at_eof(void)
{
    uint8_t b;
    ssize_t r = recv(cl, &b, 1, MSG_DONTWAIT);
    return r == 0;
}

START_TEST(requests_split_into_single_bytes_are_answered_in_order)
{
    gkv_wr_t w;
    gkv_wr_init(&w);
    frame(&w, GKV_OP_SET, 1, "k", 5);
    msgpack_sbuffer_write(&w.sb, "hello", 5);
    frame(&w, GKV_OP_GET, 2, "k", 0);
    frame(&w, GKV_OP_DEL, 3, "k", 0);
    frame(&w, GKV_OP_GET, 4, "k", 0);
    for (size_t i = 0; i < w.sb.size; i++)
        send_all(w.sb.data + i, 1);
    gkv_wr_fini(&w);
    gkv_response_t r;
    uint8_t hdr[256], val[5];
    ck_assert_int_eq(response(&r, hdr, sizeof(hdr)), 0);
    ck_assert_uint_eq(r.id, 1);
    ck_assert_int_eq(response(&r, hdr, sizeof(hdr)), 0);
    ck_assert_uint_eq(r.id, 2);
    ck_assert_uint_eq(r.payload_len, 5);
    recv_all(val, 5);
    ck_assert_int_eq(memcmp(val, "hello", 5), 0);
    ck_assert_int_eq(response(&r, hdr, sizeof(hdr)), 0);
    ck_assert_uint_eq(r.id, 3);
    ck_assert_int_eq(response(&r, hdr, sizeof(hdr)), GKV_ENOTFOUND);
    ck_assert_uint_eq(r.id, 4);
    ck_assert_uint_eq(net.metrics.cmd[GKV_OP_GET].calls, 2);
    ck_assert_uint_eq(net.metrics.cmd[GKV_OP_GET].errors, 1);
    ck_assert(net.conns->phase == CONN_HEADER && !gkv_conn_held(net.conns));
}
END_TEST

START_TEST(a_value_larger_than_a_staging_buffer_goes_in_and_comes_back_whole)
{
    size_t n = 2 * GKV_STAGING_CHUNK + 12345;
    uint8_t *v = malloc(n), *back = malloc(n);
    for (size_t i = 0; i < n; i++)
        v[i] = (uint8_t)(i * 7 + (i >> 12));
    gkv_wr_t w;
    gkv_wr_init(&w);
    frame(&w, GKV_OP_SET, 1, "big", n);
    send_all(w.sb.data, w.sb.size);
    gkv_wr_reset(&w);
    send_all(v, n);
    gkv_response_t r;
    uint8_t hdr[256];
    ck_assert_int_eq(response(&r, hdr, sizeof(hdr)), 0);
    frame(&w, GKV_OP_GET, 2, "big", 0);
    send_all(w.sb.data, w.sb.size);
    gkv_wr_fini(&w);
    ck_assert_int_eq(response(&r, hdr, sizeof(hdr)), 0);
    ck_assert_uint_eq(r.payload_len, n);
    recv_all(back, n);
    ck_assert_int_eq(memcmp(v, back, n), 0);
    PUMP_UNTIL(net.conns->phase == CONN_HEADER && !net.conns->stage);
    free(v);
    free(back);
}
END_TEST

START_TEST(pipelined_requests_past_the_output_limit_are_all_answered)
{
    net.set.output_limit = 4096;
    char value[1024];
    memset(value, 'v', sizeof(value));
    gkv_wr_t w;
    gkv_wr_init(&w);
    frame(&w, GKV_OP_SET, 1, "p", sizeof(value));
    msgpack_sbuffer_write(&w.sb, value, sizeof(value));
    for (unsigned i = 0; i < 300; i++)
        frame(&w, GKV_OP_GET, 2 + i, "p", 0);
    send_all(w.sb.data, w.sb.size); /* nothing read meanwhile: the output fills */
    gkv_wr_fini(&w);
    gkv_response_t r;
    uint8_t hdr[256], got[1024];
    ck_assert_int_eq(response(&r, hdr, sizeof(hdr)), 0);
    for (unsigned i = 0; i < 300; i++) {
        ck_assert_int_eq(response(&r, hdr, sizeof(hdr)), 0);
        ck_assert_uint_eq(r.id, 2 + i);
        recv_all(got, sizeof(got));
        ck_assert_int_eq(memcmp(got, value, sizeof(got)), 0);
    }
}
END_TEST

START_TEST(a_failed_hello_is_held_until_the_sweep_then_the_connection_closes)
{
    gkv_wr_t w;
    gkv_wr_init(&w);
    frame(&w, GKV_OP_HELLO, 1, NULL, 0);
    send_all(w.sb.data, w.sb.size);
    gkv_wr_fini(&w);
    PUMP_UNTIL(net.conns && net.conns->hold.auth);
    for (int i = 0; i < 50; i++)
        uv_run(&loop, UV_RUN_NOWAIT);
    uint8_t b;
    ck_assert_int_lt(recv(cl, &b, 1, MSG_DONTWAIT | MSG_PEEK), 0); /* nothing out while held */
    ck_assert_uint_eq(net.stats.auth_failures, 1);
    gkv_net_sweep(&net, uv_now(&loop) + 10000); /* its delay is over */
    gkv_response_t r;
    uint8_t hdr[256];
    ck_assert_int_eq(response(&r, hdr, sizeof(hdr)), GKV_EAUTH);
    PUMP_UNTIL(net.nconns == 0 && at_eof());
}
END_TEST

START_TEST(a_reply_waits_for_the_journal_to_commit_its_records)
{
    gkv_journal_t *j;
    ck_assert_int_eq(gkv_journal_create(&j), 0);
    /* What the fd store attaches when it is on (fdstore.c set_journal). */
    fdstore.journal = j;
    store.journal = j;
    devs.dev[0].batcher.journal = j;
    devs.dev[0].batcher.committed = gkv_fdstore_committed;
    devs.dev[0].batcher.committed_ctx = &fdstore;
    gkv_wr_t w;
    gkv_wr_init(&w);
    frame(&w, GKV_OP_SET, 1, "j", 3);
    msgpack_sbuffer_write(&w.sb, "abc", 3);
    send_all(w.sb.data, w.sb.size);
    gkv_wr_fini(&w);
    gkv_response_t r;
    uint8_t hdr[256];
    ck_assert_int_eq(response(&r, hdr, sizeof(hdr)), 0);
    ck_assert_uint_eq(fdstore.commits.waits, 1); /* it was held for the commit */
    ck_assert(!net.conns->hold.commit && !net.conns->commit.queued);
    ck_assert_uint_eq(gkv_journal_committed(j), gkv_journal_used(j));
    fdstore.journal = NULL;
    store.journal = NULL;
    devs.dev[0].batcher.journal = NULL;
    gkv_journal_close(j);
}
END_TEST

START_TEST(a_malformed_frame_gets_proto_and_a_close)
{
    uint8_t zero[4] = {0, 0, 0, 0}; /* a header of length 0 */
    send_all(zero, sizeof(zero));
    gkv_response_t r;
    uint8_t hdr[256];
    ck_assert_int_eq(response(&r, hdr, sizeof(hdr)), GKV_EPROTO);
    PUMP_UNTIL(net.nconns == 0 && at_eof());
    ck_assert_uint_eq(net.stats.protocol_errors, 1);
}
END_TEST

START_TEST(a_client_that_leaves_mid_payload_leaves_nothing_behind)
{
    size_t n = 3 * GKV_STAGING_CHUNK;
    uint8_t *part = calloc(1, GKV_STAGING_CHUNK + 100);
    gkv_wr_t w;
    gkv_wr_init(&w);
    frame(&w, GKV_OP_SET, 1, "gone", n);
    send_all(w.sb.data, w.sb.size);
    gkv_wr_fini(&w);
    send_all(part, GKV_STAGING_CHUNK + 100); /* one chunk copied in, the next begun */
    PUMP_UNTIL(net.conns->phase == CONN_PAYLOAD && net.conns->rcv.got >= GKV_STAGING_CHUNK);
    ck_assert_uint_gt(store.used, 0);
    close(cl);
    cl = -1;
    PUMP_UNTIL(net.nconns == 0);
    ck_assert_uint_eq(store.used, 0);
    ck_assert_uint_eq(staging.ntotal, staging.nfree); /* every buffer given back */
    free(part);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("conn");
    TCase *t = tcase_create("conn");
    tcase_set_timeout(t, 60);
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, requests_split_into_single_bytes_are_answered_in_order);
    tcase_add_test(t, a_value_larger_than_a_staging_buffer_goes_in_and_comes_back_whole);
    tcase_add_test(t, pipelined_requests_past_the_output_limit_are_all_answered);
    tcase_add_test(t, a_failed_hello_is_held_until_the_sweep_then_the_connection_closes);
    tcase_add_test(t, a_reply_waits_for_the_journal_to_commit_its_records);
    tcase_add_test(t, a_malformed_frame_gets_proto_and_a_close);
    tcase_add_test(t, a_client_that_leaves_mid_payload_leaves_nothing_behind);
    suite_add_tcase(s, t);
    return s;
}
