/* request.c: a connection's requests: frames parsed from the input, each handed to its
 * handler (cmd.h) with what the handler may know of the connection, and its reply's effects
 * applied: authentication, descriptors passed, a payload to receive, values to send, a fence to
 * wait for; a journal commit to wait for once it is answered. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conn_impl.h"
#include "error.h"
#include "fdpass.h"
#include "fence.h"
#include "keywait.h"
#include "log.h"
#include "trace.h"
#include "watch.h"

static void protocol_error(gkv_conn_t *c, const char *why)
{
    c->net->stats.protocol_errors++;
    GKV_INFO("conn %llu: protocol error: %s; closing", (unsigned long long)c->id, why);
    gkv_reply_error(&c->out, 0, GKV_EPROTO, why);
    gkv_conn_close(c, true);
}

/* Sends the replies written so far (the HELLO reply alone: it is the connection's first) with fds
 * attached, straight on the socket: libuv cannot pass arbitrary descriptors. Nothing else has
 * been written on this connection, so the bytes cannot overtake or split earlier output. */
static void send_with_fds(gkv_conn_t *c, const int *fds, unsigned nfds)
{
    uv_os_fd_t sock;
    ssize_t n = -1;
    if (c->snd.pending == 0 && uv_fileno(&c->h.handle, &sock) == 0)
        n = gkv_fds_send(sock, c->out.sb.data, c->out.sb.size, fds, nfds);
    for (unsigned i = 0; i < nfds; i++)
        close(fds[i]);
    if (n <= 0) {
        GKV_WARN("conn %llu: passing the shared-memory fd failed: %s", (unsigned long long)c->id,
                 n < 0 ? strerror(errno) : "output pending");
        gkv_wr_reset(&c->out);
        gkv_conn_close(c, false);
        return;
    }
    c->zero_copy = true;
    c->net->stats.bytes_out += (uint64_t)n;
    /* A short send leaves the rest of the frame to the ordinary path. */
    memmove(c->out.sb.data, c->out.sb.data + n, c->out.sb.size - (size_t)n);
    c->out.sb.size -= (size_t)n;
}

/* A wrong token: the reply waits longer the more failures came lately (250 ms to 5 s, released
 * by the sweep), then the connection closes; guessing costs a connection and time each. */
static void hold_failed_auth(gkv_conn_t *c)
{
    gkv_net_t *net = c->net;
    uint64_t delay = 250 * (1 + net->auth_recent);
    net->auth_recent++;
    net->stats.auth_failures++;
    c->auth_hold_until = uv_now(net->loop) + (delay < 5000 ? delay : 5000);
    c->hold.auth = true;
    GKV_WARN("conn %llu: authentication failed (%llu lately)", (unsigned long long)c->id,
             (unsigned long long)net->auth_recent);
    gkv_conn_close(c, true);
}

/* A request answered without its payload (an error, the cluster's answer): the payload that
 * follows it on the wire, if any, is read and dropped. */
static void skip_payload(gkv_conn_t *c, const gkv_request_t *req)
{
    if (!req->payload_len)
        return;
    c->rcv.discard_left = req->payload_len;
    c->phase = CONN_DISCARD;
    c->frame_since = uv_now(c->net->loop);
    c->frame_bytes = 0;
}

static bool park_for_key(gkv_conn_t *c, const gkv_request_t *req, int *rc);
static int pull_early(void *conn, gkv_entry_t *e, bool cleared);

/* The cluster's say on a request (cluster.h) before it runs here: false when it is answered or
 * waits (parked: its frame stays in the input, c waits); else *run is the request to run (req,
 * or a copy of it the cluster changed). SEAL's key, for the cluster's record after it ran, goes
 * into *key (free it). */
static bool route_request(gkv_conn_t *c, const gkv_request_t *req, gkv_request_t *run, bool *parked,
                          uint8_t **key, size_t *klen)
{
    gkv_net_t *net = c->net;
    *run = *req;
    *parked = false;
    if (!net->cluster || !c->authed)
        return true;
    int rc;
    c->op = req->op;
    c->op_started = uv_hrtime();
    /* A read that waits for its key tells the key's home how long (it notifies us). */
    c->route.wait_ms = 0;
    if ((req->op == GKV_OP_GET || req->op == GKV_OP_MAP) && (req->has & GKV_HAS_WAIT) &&
        req->wait && !c->kw_timed_out) {
        uint64_t now = uv_now(net->loop);
        c->route.wait_ms = !c->kw_deadline          ? req->wait
                           : c->kw_deadline > now ? c->kw_deadline - now
                                                  : 0;
    }
    /* A whole value's MAP may take an early frame for the memory a pull brings its value into
     * (the early frame's lease, when the MAP offers a cached one too, is the one renewed). */
    if (req->op == GKV_OP_MAP && req->early == 1 && c->zero_copy &&
        !(req->has & (GKV_HAS_OFFSET | GKV_HAS_LENGTH | GKV_HAS_SUFFIX))) {
        c->kw_req_id = req->id;
        c->route.early = pull_early;
    }
    /* A GET of a whole value into a registered buffer: a pull lands it there too. */
    c->route.tee.v = 0;
    if (req->op == GKV_OP_GET && (req->has & GKV_HAS_INTO) && c->local &&
        !(req->has & (GKV_HAS_OFFSET | GKV_HAS_LENGTH | GKV_HAS_SUFFIX))) {
        gkv_buffer_t *b = gkv_buffers_find(&c->bufs, req->into);
        if (b && req->into_at < b->len) {
            c->route.tee = gkv_buffer_at(b, req->into_at);
            c->route.tee_cap = b->len - req->into_at;
            c->route.tee_dev = b->dev;
        }
    }
    int r = gkv_cluster_route(net->cluster, &c->route, req, &c->leases, &c->out, &rc);
    c->route.early = NULL;
    c->route.tee.v = 0;
    if (c->route.teed) { /* the value a pull landed in the buffer: the GET's, when it runs here */
        if (r == GKV_ROUTE_LOCAL && !c->teed)
            c->teed = c->route.teed;
        else
            gkv_store_unref(net->store, c->route.teed);
        c->route.teed = NULL;
    }
    if (r == GKV_ROUTE_PARK) {
        *parked = true;
        c->wait.cluster = true;
        return false;
    }
    if (r == GKV_ROUTE_WAIT_KEY) { /* as a missing key (c->route.wait_ms: time is left) */
        if (park_for_key(c, req, &rc)) {
            *parked = true;
            return false;
        }
        r = GKV_ROUTE_DONE; /* answered BUSY or NOMEM */
    }
    if (r == GKV_ROUTE_DONE) {
        gkv_conn_op_done(c, rc);
        skip_payload(c, req);
        return false;
    }
    if (r == GKV_ROUTE_AS_GET) {
        run->op = GKV_OP_GET;
        if (c->route.fetch_version) /* the reply names the version it carries */
            run->vversion = c->route.fetch_version;
        c->route.fetch_version = 0;
    }
    /* NX/XX are the home's to decide (docs/cluster.md): a SET's go to its commit (below),
     * not to the checks against this node's own keys. */
    uint64_t nx_xx = GKV_SET_NX | GKV_SET_XX;
    if ((c->route.strip_nx_xx || c->route.defer) && (run->flags & nx_xx) != nx_xx)
        run->flags &= ~nx_xx; /* both: the handler refuses them */
    if (req->op == GKV_OP_SEAL) {
        gkv_lease_t *l = gkv_lease_find(&c->leases, req->lease);
        const uint8_t *k = l && l->writable ? gkv_store_key(net->store, l->entry, klen) : NULL;
        if (k && (*key = malloc(*klen ? *klen : 1)))
            memcpy(*key, k, *klen);
    }
    return true;
}

/* A GET or MAP whose key does not exist, with a wait (the cmd layer parked it: wait_key):
 * parks c on the key (keywait.h) until its deadline (set at its first wait); on a cluster node
 * also until its re-check, or it runs again at once when its key was notified since its read
 * asked the home (docs/handoff.md, "Waits across a cluster"). True when it waits; false with
 * the error reply written (BUSY, NOMEM) and *rc its code. */
static bool park_for_key(gkv_conn_t *c, const gkv_request_t *req, int *rc)
{
    uint64_t now = uv_now(c->net->loop);
    if (!c->kw_deadline)
        c->kw_deadline = now + req->wait;
    uint64_t recheck = 0;
    if (c->net->cluster) {
        if (gkv_cluster_wait_missed(c->net->cluster, &c->route, req->key.p, req->key.len)) {
            if (!c->yielded)
                gkv_net_yield(c->net, c); /* its frame stays in the input: it runs again */
            return true;
        }
        recheck = now + GKV_CL_WAIT_RECHECK_MS;
    }
    int e = gkv_keywait_park(c, req->key.p, req->key.len, c->kw_deadline, recheck);
    if (!e) {
        /* A whole value's MAP may take an early frame: at once when a seal of its key waits
         * already, else when one comes (gkv_keywaits_sealing). */
        c->kw_early = req->op == GKV_OP_MAP && req->early == 1 && c->zero_copy &&
                      !(req->has & (GKV_HAS_OFFSET | GKV_HAS_LENGTH | GKV_HAS_SUFFIX |
                                    GKV_HAS_AFTER | GKV_HAS_LEASE));
        c->kw_req_id = req->id;
        bool *linked;
        gkv_entry_t *pending =
            c->kw_early ? gkv_fence_pending(c->net, req->key.p, req->key.len, &linked) : NULL;
        if (pending && gkv_conn_early(c, pending))
            *linked = true;
        return true;
    }
    c->kw_deadline = 0;
    *rc = e;
    gkv_reply_error(&c->out, req->id, e,
                    e == GKV_EBUSY ? "too many requests wait for keys" : "out of host memory");
    return false;
}

/* Sends c's request kw_req_id an early frame leasing e (PROTOCOL.md, "Early MAPs"); false
 * when it has one already or none can go (limits, a GPU its zero-copy does not reach). */
static bool send_early(gkv_conn_t *c, gkv_entry_t *e)
{
    if (c->early_lease || c->closing)
        return false;
    gkv_reply_t rep;
    gkv_reply_init(&rep, &c->out, &c->leases);
    rep.in.zc_every_gpu = c->zc_every_gpu;
    uint64_t lease;
    if (gkv_cmd_map_early(c->net->cmd, &rep, c->kw_req_id, e, &lease) != 0)
        return false;
    c->early_lease = lease;
    c->early_req_id = c->kw_req_id;
    c->net->stats.early_maps++;
    gkv_trace("d_early", e->size, lease); /* GPUKV_TRACE: an early frame out */
    gkv_conn_flush(c);
    return true;
}

bool gkv_conn_early(gkv_conn_t *c, gkv_entry_t *e)
{
    return c->kw_early && c->kw_bucket && send_early(c, e);
}

/* gkv_route_ticket_t's early: the memory a pull of the MAP's value lands in, leased to it in an
 * early frame while the pull runs, once that memory holds no earlier value's bytes: at once for
 * a kept allocation whose clear has run, else (0) after the clear the pull then queues (its
 * worker waits for it and the loop offers the memory again, cleared). */
static int pull_early(void *conn, gkv_entry_t *e, bool cleared)
{
    gkv_conn_t *c = conn;
    if (c->early_lease || c->closing)
        return -1;
    if (!cleared && !gkv_store_zeroed_now(c->net->store, e))
        return 0;
    return send_early(c, e) ? 1 : -1;
}

/* A request a watching connection may not make (watch.h) is answered INVAL; its payload, if
 * any, is skipped. */
static void refuse_while_watching(gkv_conn_t *c, const gkv_request_t *req)
{
    c->op = req->op;
    c->op_started = uv_hrtime();
    gkv_reply_error(&c->out, req->id, GKV_EINVAL,
                    "this connection watches a prefix: it takes only UNWATCH and PING");
    gkv_conn_op_done(c, GKV_EINVAL);
    skip_payload(c, req);
}

/* Handles one request; false when the cluster parked it (its frame is to be read again). */
static bool handle_request(gkv_conn_t *c, const gkv_request_t *routed)
{
    if (c->watch && routed->op != GKV_OP_UNWATCH && routed->op != GKV_OP_PING) {
        refuse_while_watching(c, routed);
        return true;
    }
    /* A SEAL publishes after the connection's asynchronous seals (fence.h): it waits for them,
     * its frame kept in the input. */
    if (routed->op == GKV_OP_SEAL && !(routed->has & GKV_HAS_ASYNC) && gkv_fence_waiting(c)) {
        c->wait.fence = true;
        return false;
    }
    gkv_request_t run;
    bool parked;
    uint8_t *seal_key = NULL;
    size_t seal_klen = 0;
    if (!route_request(c, routed, &run, &parked, &seal_key, &seal_klen))
        return !parked;
    /* A client's GET or MAP names no version of its own: on a cluster node the reply names the
     * cluster version of the value read here. */
    if (routed->op == GKV_OP_GET || routed->op == GKV_OP_MAP)
        run.vversion = c->net->cluster && c->authed && (run.has & GKV_HAS_KEY)
                           ? gkv_cluster_value_version(c->net->cluster, run.key.p, run.key.len)
                           : 0;
    /* A MAP that took an early frame offers that frame's lease: when its value is the one
     * returned, the answer renews it and the client's import of it stands. */
    if (c->early_lease && routed->id == c->early_req_id && routed->op == GKV_OP_MAP) {
        run.lease = c->early_lease;
        run.has |= GKV_HAS_LEASE;
    }
    const gkv_request_t *req = &run;
    gkv_reply_t rep;
    gkv_reply_init(&rep, &c->out, &c->leases);
    rep.bufs = c->local ? &c->bufs : NULL;
    rep.in.teed = c->teed;
    rep.in.local = c->local;
    rep.in.conn_id = c->id;
    rep.in.peer_uid = c->peer_uid;
    rep.in.peer_pid = c->peer_pid;
    /* A SET's value of one chunk is written by a copy batch: allocate it in the batches'
     * order. */
    rep.in.lane =
        req->payload_len && req->payload_len <= GKV_STAGING_CHUNK ? GKV_LANE_BATCH : c->lane;
    rep.in.first = c->requests++ == 0;
    rep.in.zero_copy = c->zero_copy;
    rep.in.zc_every_gpu = c->zc_every_gpu;
    rep.in.authed = c->authed;
    rep.in.version = c->version;
    /* A SET on a full GPU, a GET of a disk value and a MAP of a value in a tier may wait for
     * moves off the request path, a few times (demoter.h); a cluster node's are routed, and
     * run to the end. */
    rep.in.room = (req->op == GKV_OP_SET || req->op == GKV_OP_GET || req->op == GKV_OP_MAP) &&
                          c->room_waits < GKV_DEMOTE_WAITS && !c->net->cluster && c->net->demoter
                      ? &c->rwaiter
                      : NULL;
    c->op = req->op;
    c->op_started = uv_hrtime();
    c->journal_mark = gkv_fdstore_mark(c->net->fdstore);
    c->net->store->now_ms = c->op_started / 1000000; /* the store clock, already read */
    rep.in.may_wait = (req->op == GKV_OP_GET || req->op == GKV_OP_MAP) && c->net->keywaits;
    rep.in.wait_over =
        c->kw_timed_out || (c->kw_deadline && uv_now(c->net->loop) >= c->kw_deadline);
    int rc = gkv_dispatch(c->net->cmd, req, &rep);
    if (c->teed && !rep.parked) {
        gkv_store_unref(c->net->store, c->teed);
        c->teed = NULL;
    }
    if (rep.parked && rep.wait_key) {
        if (park_for_key(c, req, &rc)) /* its frame stays in the input until key or deadline */
            return false;
    } else if (rep.parked) { /* its frame stays in the input; on_moved drives c again */
        c->wait.room = true;
        c->room_waits++;
        return false;
    }
    c->room_waits = 0;
    c->kw_deadline = 0;
    c->kw_early = false;
    c->early_lease = 0; /* the client releases it unless the answer renewed it */
    c->kw_timed_out = false;
    /* Every SEAL the cluster routed comes back to it (its key NULL if it could not be
     * copied): what the route reserved for it ends there. */
    if (req->op == GKV_OP_SEAL && c->net->cluster && c->authed) {
        gkv_cluster_after(c->net->cluster, req, &c->leases, rc, seal_key, seal_klen);
        free(seal_key);
    }
    if (rc == 0 && req->op == GKV_OP_HELLO)
        c->version = rep.version;
    if (rc == 0 && rep.fence_page && rep.nfds < GKV_REPLY_FDS) {
        int fd;
        if (gkv_fence_open(c, &fd) == 0) {
            rep.fds[rep.nfds++] = fd;
        } else { /* the reply promised it: this connection cannot go on */
            for (unsigned i = 0; i < rep.nfds; i++)
                close(rep.fds[i]);
            rep.nfds = 0;
            gkv_wr_reset(&c->out);
            gkv_conn_close(c, false);
            return true;
        }
    }
    if (rep.auth_ok)
        c->authed = true;
    if (rep.auth_failed)
        hold_failed_auth(c);
    if (rep.nfds) {
        if (rc == 0) {
            c->zc_every_gpu = rep.zc_every_gpu;
            send_with_fds(c, rep.fds, rep.nfds);
        } else {
            for (unsigned i = 0; i < rep.nfds; i++)
                close(rep.fds[i]);
        }
    }
    if (rc < 0) {
        c->route.defer = false;
        gkv_conn_op_done(c, rc);
        skip_payload(c, req);
        return true;
    }
    if (rep.seal_async && (rc = gkv_fence_seal(c, req, rep.seal_async)) != 0) {
        gkv_conn_op_done(c, rc);
        return true;
    }
    if (rep.watch && (rc = gkv_watch_start(c, req, rep.watch_span)) != 0) {
        gkv_conn_op_done(c, rc);
        return true;
    }
    if (rep.unwatch)
        gkv_watch_stop(c, req->id);
    if (rep.recv) {
        c->rcv.entry = rep.recv;
        c->rcv.cmd = rep.cmd;
        c->rcv.flags =
            c->route.defer ? (unsigned)(routed->flags & (GKV_SET_NX | GKV_SET_XX)) : rep.recv_flags;
        c->rcv.got = 0;
        c->rcv.req_id = req->id;
        c->phase = CONN_PAYLOAD;
        c->frame_since = uv_now(c->net->loop);
        c->frame_bytes = 0;
        return true;
    }
    if (rep.fence)
        gkv_conn_start_fence(c, &rep);
    if (rep.nsegs)
        gkv_conn_send(c, &rep);
    else
        gkv_reply_release(c->net->store, &rep);
    if (c->phase != CONN_SEND)
        gkv_conn_op_done(c, 0); /* else when its last byte went to the socket */
    return true;
}

void gkv_conn_op_done(gkv_conn_t *c, int rc)
{
    gkv_metrics_record(&c->net->metrics, c->op, uv_hrtime() - c->op_started, rc != 0);
    if (gkv_fdstore_hold(c->net->fdstore, &c->commit, c->journal_mark))
        c->hold.commit = true;
    if (c->net->hooks.request_done)
        c->net->hooks.request_done(c->net->hooks.owner);
}

/* Parses and handles one request. Returns 1 when one was handled, 0 when more bytes are
 * needed, -1 when the connection is closing. */
int gkv_conn_parse_one(gkv_conn_t *c)
{
    size_t avail = c->in_len - c->in_pos;
    if (avail < GKV_FRAME_PREFIX)
        return 0;
    uint32_t len = gkv_frame_get_len(c->in + c->in_pos);
    if (gkv_frame_check_len(len, GKV_MAX_HEADER)) {
        protocol_error(c, "header length is 0 or over the 1 MiB limit");
        return -1;
    }
    if (!c->authed && len > GKV_PREAUTH_HEADER) {
        protocol_error(c, "headers over 16 KiB need authentication first");
        return -1;
    }
    size_t need = GKV_FRAME_PREFIX + (size_t)len;
    if (avail < need) {
        /* The buffer grows with the bytes that came (at most twice them), not with the length
         * the prefix declares: a client that announces 1 MiB and sends little costs little. */
        if (need > c->in_cap && avail >= c->in_cap / 2) { /* need <= GKV_MAX_HEADER + 4 */
            memmove(c->in, c->in + c->in_pos, avail);
            c->in_len = avail;
            c->in_pos = 0;
            size_t cap = c->in_cap * 2 < need ? c->in_cap * 2 : need;
            uint8_t *bigger = realloc(c->in, cap);
            if (!bigger) {
                gkv_conn_close(c, false);
                return -1;
            }
            c->in = bigger;
            c->in_cap = cap;
        }
        return 0;
    }
    gkv_request_t req;
    const char *why;
    if (gkv_req_decode(c->in + c->in_pos + GKV_FRAME_PREFIX, len, &req, &why)) {
        protocol_error(c, why);
        return -1;
    }
    c->in_pos += need;
    c->handling = true;
    bool handled = handle_request(c, &req);
    c->handling = false;
    if (!handled) { /* parked: the same frame is handled again once the cluster, or the moves
                     * it waits for, are done */
        c->in_pos -= need;
        return 0;
    }
    if (c->closing) {
        gkv_conn_drop_input(c);
        return -1;
    }
    return 1;
}

/* The server is stopping: every complete request still in the input is answered SHUTDOWN, up
 * to the first that carries a payload (what follows it cannot be told apart). */
void gkv_conn_refuse_pending(gkv_conn_t *c)
{
    for (;;) {
        size_t avail = c->in_len - c->in_pos;
        if (avail < GKV_FRAME_PREFIX)
            return;
        uint32_t len = gkv_frame_get_len(c->in + c->in_pos);
        gkv_request_t req;
        const char *why;
        if (gkv_frame_check_len(len, GKV_MAX_HEADER) || avail < GKV_FRAME_PREFIX + (size_t)len ||
            gkv_req_decode(c->in + c->in_pos + GKV_FRAME_PREFIX, len, &req, &why))
            return;
        c->in_pos += GKV_FRAME_PREFIX + (size_t)len;
        gkv_reply_error(&c->out, req.id, GKV_ESHUTDOWN, "the server is shutting down");
        if (req.payload_len)
            return;
    }
}
