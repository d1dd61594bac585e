/* cmd_fixture.h: a server without sockets or loop (host backend, 1 MiB) for driving command
 * handlers directly through its command context, and helpers to build requests and read replies.
 * Included by one test file each. */
#ifndef GKV_TESTS_CMD_FIXTURE_H
#define GKV_TESTS_CMD_FIXTURE_H

#include <check.h>
#include <gpukv/gpukv.h>
#include <string.h>

#include "admin.h"
#include "cmd.h"
#include "commands.h"
#include "server.h"

static gkv_server_t srv;
static gkv_wr_t wr;
static gkv_leases_t leases; /* the one connection's, granted zero-copy */

static inline void setup(void)
{
    memset(&srv, 0, sizeof(srv));
    gkv_backend_config_t bc = {GKV_BACKEND_HOST, 0, 1 << 20};
    char why[256];
    ck_assert_int_eq(gkv_backend_open(&bc, &srv.devs.dev[0].be, why, sizeof(why)), 0);
    srv.devs.n = 1;
    gkv_config_defaults(&srv.cfg);
    srv.cfg.maxmemory = srv.cfg.max_value = srv.cfg.max_leased_bytes = 1 << 20;
    ck_assert_int_eq(gkv_store_init(&srv.store, srv.devs.dev[0].be, 1 << 20), 0);
    srv.cmd = (gkv_cmd_ctx_t){.store = &srv.store,
                              .devs = &srv.devs,
                              .lease_totals = &srv.lease_totals,
                              .table = gkv_command_table,
                              .owner = &srv};
    gkv_server_apply_settings(&srv);
    gkv_wr_init(&wr);
    gkv_leases_init(&leases, &srv.lease_totals);
}

static inline void teardown(void)
{
    gkv_leases_fini(&leases, &srv.store);
    gkv_wr_fini(&wr);
    gkv_store_fini(&srv.store);
    srv.devs.dev[0].be->ops->close(srv.devs.dev[0].be);
}

/* Builds a request header with the given fields, decodes it, dispatches it. */
static inline int run(gkv_reply_t *rep, gkv_request_t *req)
{
    gkv_reply_init(rep, &wr, &leases);
    rep->in.zero_copy = true;
    rep->in.authed = true;
    gkv_wr_reset(&wr);
    return gkv_dispatch(&srv.cmd, req, rep);
}

static inline gkv_response_t last_response(void)
{
    gkv_response_t r;
    uint32_t len = gkv_frame_get_len((const uint8_t *)wr.sb.data);
    ck_assert_int_eq(gkv_resp_decode((const uint8_t *)wr.sb.data + 4, len, &r), 0);
    return r;
}

static inline gkv_request_t req_key(unsigned op, const char *key)
{
    gkv_request_t q;
    memset(&q, 0, sizeof(q));
    q.op = op;
    q.id = 5;
    q.key = (gkv_slice_t){(const uint8_t *)key, (uint32_t)strlen(key)};
    q.has = GKV_HAS_KEY;
    return q;
}

/* A SET as the connection performs it: dispatch, fill the entry in place, commit. */
static inline int put(const char *key, const char *value, unsigned flags)
{
    gkv_request_t q = req_key(GKV_OP_SET, key);
    q.payload_len = strlen(value);
    q.flags = flags;
    gkv_reply_t rep;
    int rc = run(&rep, &q);
    if (rc)
        return rc;
    if (q.payload_len)
        memcpy(srv.devs.dev[0].be->ops->host_view(srv.devs.dev[0].be, rep.recv->mem), value,
               q.payload_len);
    gkv_wr_reset(&wr);
    rep.cmd->on_payload(&srv.cmd, q.id, rep.recv, flags, &wr, NULL);
    gkv_store_unref(&srv.store, rep.recv);
    return (int)last_response().status;
}

#endif
