/* admin.c: the daemon's own commands on a connection: HELLO (version, token, zero-copy
 * descriptors), PING and SAVE. INFO is info.c's, TAKEOVER takeover.c's. */
#include "admin.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "fence.h"
#include "prometheus.h"
#include "server.h"
#include "token.h"
#include "version.h"

/* The descriptors of the first n devices' memory into rep->fds, all or none (why says why). */
static void share_devices(gkv_server_t *srv, unsigned n, gkv_reply_t *rep, char *why, size_t cap)
{
    for (unsigned i = 0; i < n; i++) {
        gkv_backend_t *be = srv->devs.dev[i].be;
        if (be->ops->share(be, &rep->fds[i], why, cap) != 0) {
            while (i)
                close(rep->fds[--i]);
            return;
        }
    }
    rep->nfds = n;
    rep->zc_every_gpu = n == srv->devs.n;
}

int gkv_cmd_hello(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    gkv_server_t *srv = ctx->owner;
    if (req->version && (req->version < GKV_PROTOCOL_MIN || req->version > GKV_PROTOCOL_VERSION))
        return gkv_reply_fail(rep, GKV_EVERSION,
                              "protocol version %" PRIu64 " not supported (server: %d to %d)",
                              req->version, GKV_PROTOCOL_MIN, GKV_PROTOCOL_VERSION);
    if (srv->token_len) {
        if (!gkv_token_equal(req->token.p, req->token.len, srv->token, srv->token_len)) {
            rep->auth_failed = true; /* counted by the connection */
            return gkv_reply_fail(rep, GKV_EAUTH,
                                  req->token.len ? "wrong token" : "this server needs a token");
        }
        rep->auth_ok = true;
    }
    /* The connection speaks the version asked for (a client of protocol 1 gets its meaning of
     * RELEASE, CREATE and SEAL: PROTOCOL.md, Changelog), the newest when none was named. */
    rep->version = (uint8_t)(req->version ? req->version : GKV_PROTOCOL_VERSION);
    gkv_wr_t *w = rep->wr;
    gkv_reply_ok(w, req->id);
    gkv_wr_uint(w, GKV_F_VERSION, rep->version);
    gkv_wr_str(w, GKV_F_SERVER, GKV_VERSION_STRING);
    gkv_backend_t *be =
        srv->devs.dev[0].be; /* the first GPU stands for all in the one-GPU fields */
    gkv_wr_str(w, GKV_F_BACKEND, be->name);
    gkv_wr_int(w, GKV_F_DEVICE, be->device);
    size_t pos = gkv_wr_array_begin(w, GKV_F_GPUS);
    uint32_t n = 0;
    for (unsigned i = 0; i < srv->devs.n; i++) {
        const char *uuid = srv->devs.dev[i].be->gpu_uuid;
        if (!uuid[0])
            continue;
        msgpack_pack_str(&w->pk, strlen(uuid));
        msgpack_pack_str_body(&w->pk, uuid, strlen(uuid));
        n++;
    }
    gkv_wr_array_end(w, pos, n);
    char why[192] = "";
    if (!rep->in.local)
        snprintf(why, sizeof(why), "zero-copy needs a Unix socket connection on the same machine");
    else if (!req->zero_copy)
        snprintf(why, sizeof(why), "not asked for (HELLO zero_copy = 1)");
    else if (!rep->in.first)
        snprintf(why, sizeof(why), "zero-copy must be asked for in the connection's first request");
    else if (be->host_visible && !srv->cfg.host_zero_copy)
        snprintf(why, sizeof(why),
                 "the host backend would share its whole arena; start gpukvd "
                 "with --host-zero-copy yes to allow it");
    else
        share_devices(srv, req->zero_copy == GKV_ZC_EVERY_GPU ? srv->devs.n : 1, rep, why,
                      sizeof(why));
    gkv_wr_str(w, GKV_F_ZC, rep->nfds ? be->share_mechanism : "none");
    gkv_wr_str(w, GKV_F_ZC_WHY, why);
    /* A fence page for asynchronous seals (net/fence.h), its descriptor after the memory's. */
    if (req->fences == 1 && rep->nfds && rep->nfds < GKV_REPLY_FDS && !ctx->clustered) {
        rep->fence_page = true;
        gkv_wr_uint(w, GKV_F_FENCES, GKV_FENCE_PAGE);
    }
    if (rep->nfds && be->host_visible)
        gkv_wr_uint(w, GKV_F_ARENA_SIZE, be->capacity);
    /* Held imports (PROTOCOL.md): as many as the connection may hold leases. */
    if (rep->nfds && be->ops->hold && rep->version >= 2) {
        gkv_wr_uint(w, GKV_F_HOLDS, srv->cfg.max_leases);
        gkv_wr_uint(w, GKV_F_HOLD_BYTES, gkv_hold_cap(&srv->store));
    }
    gkv_wr_uint(w, GKV_F_MAX_KEY, srv->cfg.max_key);
    gkv_wr_uint(w, GKV_F_MAX_VALUE, srv->cfg.max_value);
    gkv_wr_uint(w, GKV_F_MAX_META, GKV_MAX_META);
    gkv_wr_uint(w, GKV_F_MAX_HEADER, GKV_MAX_HEADER);
    return gkv_wr_end(w);
}

int gkv_cmd_save(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    gkv_server_t *srv = ctx->owner;
    char why[192] = "";
    int rc = gkv_snapshot_start(&srv->snapshots, why, sizeof(why));
    if (rc)
        return gkv_reply_fail(rep, rc, "%s", why[0] ? why : gkv_strerror(rc));
    return gkv_reply_count(rep, req->id, 1);
}

int gkv_cmd_ping(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    (void)ctx;
    gkv_reply_ok(rep->wr, req->id);
    return gkv_wr_end(rep->wr);
}
