/* conn.c: the connection state machine: accepting, reading, parsing and dispatching requests,
 * fences, closing. All of it runs on the loop thread; backend copies complete on other threads
 * (or at once, on the host backend) and come back through the server's wake-up queue. */
#include "conn.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "error.h"
#include "fdpass.h"
#include "log.h"

#define IN_INITIAL (64u << 10)

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void refuse_pending(gkv_conn_t *c);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void on_closed(uv_handle_t *h)
{
    gkv_conn_t *c = h->data;
    gkv_server_t *srv = c->srv;
    assert(c->copies == 0 && c->held == 0); /* the lifetime rule (conn.h) */
    /* A disconnect ends every lease and discards unsealed CREATEs. */
    gkv_leases_fini(&c->leases, &srv->store);
    if (c->recv)
        gkv_store_unref(&srv->store, c->recv);
    for (uint32_t i = c->seg_i; i < c->nsegs; i++)
        gkv_store_unref(&srv->store, c->segs[i].entry);
    if (c->segs && c->segs != &c->one)
        free(c->segs);
    free(c->tail);
    free(c->in);
    gkv_wr_fini(&c->out);
    /* c left the staging queue when it began to close, so the buffer can only wake others. */
    gkv_conn_release_stage(c);
    gkv_conn_release_ahead(c);
    gkv_conn_narrow_sndbuf(c);
    gkv_server_conn_closed(srv, c);
    free(c);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    (void)status;
    gkv_conn_t *c = req->data;
    if (!uv_is_closing(&c->h.handle)) /* an abort may have closed it meanwhile */
        uv_close(&c->h.handle, on_closed);
}

void gkv_conn_finish_close(gkv_conn_t *c)
{
    if (c->copies || c->copy_busy || c->flight || c->ahead_busy || c->held || c->close_started)
        return;
    c->close_started = true;
    if (c->graceful) {
        gkv_conn_flush(c);
        c->shutdown_req.data = c;
        if (uv_shutdown(&c->shutdown_req, &c->h.stream, on_shutdown) == 0)
            return;
    }
    uv_close(&c->h.handle, on_closed);
}

/* A closing connection parses nothing more: its input buffer goes at once, not when the close
 * ends, which a failed HELLO's delay or a client that does not read puts off for seconds (a
 * flood of wrong tokens kept 64 KiB per connection so). Not while a request is handled: its
 * fields point into the buffer. */
static void drop_input(gkv_conn_t *c)
{
    if (c->handling || !c->in)
        return;
    free(c->in);
    c->in = NULL;
    c->in_cap = c->in_len = c->in_pos = 0;
}

void gkv_conn_close(gkv_conn_t *c, bool graceful)
{
    if (c->closing)
        return;
    c->closing = true;
    c->graceful = graceful;
    if (c->reading) {
        uv_read_stop(&c->h.stream);
        c->reading = false;
    }
    drop_input(c);
    gkv_staging_cancel(&c->srv->staging, &c->waiter);
    for (unsigned i = 0; i < c->srv->devs.n; i++) /* it waits on at most one */
        gkv_batch_cancel(&c->srv->devs.dev[i].batcher, &c->bwaiter);
    gkv_conn_finish_close(c);
}

void gkv_conn_abort(gkv_conn_t *c)
{
    gkv_conn_close(c, false);
    c->graceful = false;
    if (c->auth_hold_until) { /* a failed HELLO's delay: its reply is dropped with the rest */
        c->auth_hold_until = 0;
        c->held--;
        gkv_conn_finish_close(c);
    }
    if (c->close_started && !uv_is_closing(&c->h.handle))
        uv_close(&c->h.handle, on_closed); /* pending writes and the shutdown are cancelled */
}

void gkv_conn_stop_now(gkv_conn_t *c)
{
    if (!c->closing && c->state == CONN_PAYLOAD && !c->held && !c->out_pending) {
        /* One try, without waiting: the client may not be reading. */
        gkv_reply_error(&c->out, c->req_id, GKV_ESHUTDOWN,
                        "the server is shutting down; the value was not stored");
        uv_buf_t b = uv_buf_init(c->out.sb.data, (unsigned)c->out.sb.size);
        if (!c->out.failed)
            uv_try_write(&c->h.stream, &b, 1);
        gkv_wr_reset(&c->out);
    }
    gkv_conn_abort(c);
}

void gkv_conn_stop(gkv_conn_t *c)
{
    if (c->state == CONN_HEADER && !c->copy_busy && !c->closing) {
        refuse_pending(c);
        gkv_conn_close(c, true);
    }
    /* Otherwise drive() closes it when the request in flight is done. */
}

static void on_stage_ready(gkv_waiter_t *w)
{
    gkv_conn_t *c = (gkv_conn_t *)((char *)w - offsetof(gkv_conn_t, waiter));
    c->waiting_stage = false;
    if (c->closing)
        return;
    if (c->state == CONN_SEND)
        gkv_conn_send_step(c);
    else
        gkv_conn_drive(c);
}

void gkv_conn_resume(gkv_conn_t *c)
{
    if (c->held)
        return;
    if (c->closing)
        gkv_conn_finish_close(c);
    else if (c->state == CONN_SEND)
        gkv_conn_send_step(c);
    else
        gkv_conn_drive(c);
}

static void on_batch_room(gkv_waiter_t *w)
{
    gkv_conn_t *c = (gkv_conn_t *)((char *)w - offsetof(gkv_conn_t, bwaiter));
    c->waiting_batch = false;
    if (!c->closing)
        gkv_conn_drive(c);
}

/* The fence a reply waited for has run (or failed: status): its reply is released. */
static void fence_done(gkv_conn_t *c, int status)
{
    gkv_store_t *st = &c->srv->store;
    c->fencing = false;
    if (c->copied_from) {
        if (status == 0)
            (void)gkv_store_copy_end(st, c->copied_from, c->copied_to);
        gkv_store_unref(st, c->copied_from);
        gkv_store_unref(st, c->copied_to);
        c->copied_from = c->copied_to = NULL;
    }
    if (status) {
        GKV_ERROR("conn %llu: waiting for the backend failed: %s", (unsigned long long)c->id,
                  gkv_strerror(status));
        c->out.failed = true; /* the held reply must not go out: close instead */
    }
    c->held--;
}

/* The reply just written goes out once the backend's shared lane has run (reply.h). */
static void start_fence(gkv_conn_t *c, gkv_reply_t *rep)
{
    c->copied_from = rep->copied_from;
    c->copied_to = rep->copied_to;
    rep->copied_from = rep->copied_to = NULL;
    c->fencing = c->copy_busy = true;
    c->held++;
    gkv_backend_t *be = c->srv->devs.dev[rep->fence_dev].be;
    bool begun = gkv_conn_copy_begin(c);
    int rc = begun ? be->ops->fence_shared(be, rep->fence_batches, &c->copy) : GKV_ECLOSED;
    if (rc) {
        if (begun)
            gkv_conn_copy_unbegin(c);
        c->copy_busy = false;
        fence_done(c, rc < 0 ? rc : 0); /* 1: nothing to wait for; drive() goes on */
    }
}

bool gkv_conn_copy_begin(gkv_conn_t *c)
{
    if (c->closing)
        return false;
    c->copies++;
    return true;
}

void gkv_conn_copy_unbegin(gkv_conn_t *c)
{
    assert(c->copies > 0);
    c->copies--;
}

void gkv_conn_copy_finished(gkv_conn_t *c)
{
    assert(c->copies > 0);
    c->copies--;
    c->copy_busy = false;
    bool ahead = c->ahead_busy;
    c->ahead_busy = false;
    if (c->flight)
        gkv_conn_flight_landed(c);
    if (c->fencing) {
        fence_done(c, c->copy_status);
        gkv_conn_resume(c);
        return;
    }
    if (c->closing) {
        gkv_conn_finish_close(c);
        return;
    }
    if (c->copy_status) {
        GKV_ERROR("conn %llu: backend copy failed: %s", (unsigned long long)c->id,
                  gkv_strerror(c->copy_status));
        gkv_conn_close(c, false);
        return;
    }
    if (ahead) { /* the next chunk is ready; it goes out once the one before went */
        if (c->state == CONN_SEND && !c->chunk)
            gkv_conn_send_step(c);
        return;
    }
    gkv_conn_chunk_copied(c);
}

/* Requests. */

static void protocol_error(gkv_conn_t *c, const char *why)
{
    c->srv->stats.protocol_errors++;
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
    if (c->out_pending == 0 && uv_fileno(&c->h.handle, &sock) == 0)
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
    c->srv->stats.bytes_out += (uint64_t)n;
    /* A short send leaves the rest of the frame to the ordinary path. */
    memmove(c->out.sb.data, c->out.sb.data + n, c->out.sb.size - (size_t)n);
    c->out.sb.size -= (size_t)n;
}

/* A wrong token: the reply waits longer the more failures came lately (250 ms to 5 s, released
 * by the sweep), then the connection closes; guessing costs a connection and time each. */
static void hold_failed_auth(gkv_conn_t *c)
{
    gkv_server_t *srv = c->srv;
    uint64_t delay = 250 * (1 + srv->auth_recent);
    srv->auth_recent++;
    c->auth_hold_until = uv_now(srv->loop) + (delay < 5000 ? delay : 5000);
    c->held++;
    GKV_WARN("conn %llu: authentication failed (%llu lately)", (unsigned long long)c->id,
             (unsigned long long)srv->auth_recent);
    gkv_conn_close(c, true);
}

static void handle_request(gkv_conn_t *c, const gkv_request_t *req)
{
    gkv_reply_t rep;
    gkv_reply_init(&rep, &c->out, &c->leases);
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
    c->op = req->op;
    c->op_started = uv_hrtime();
    c->journal_mark = gkv_fdstore_mark(&c->srv->fdstore);
    c->srv->store.now_ms = c->op_started / 1000000; /* gkv_server_clock_ms, already read */
    int rc = gkv_dispatch(&c->srv->cmd, req, &rep);
    if (rc == 0 && req->op == GKV_OP_HELLO)
        c->version = rep.version;
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
        gkv_conn_op_done(c, rc);
        if (req->payload_len) {
            c->discard_left = req->payload_len;
            c->state = CONN_DISCARD;
            c->frame_since = uv_now(c->srv->loop);
            c->frame_bytes = 0;
        }
        return;
    }
    if (rep.recv) {
        c->recv = rep.recv;
        c->recv_cmd = rep.cmd;
        c->recv_flags = rep.recv_flags;
        c->recv_got = 0;
        c->req_id = req->id;
        c->state = CONN_PAYLOAD;
        c->frame_since = uv_now(c->srv->loop);
        c->frame_bytes = 0;
        return;
    }
    if (rep.fence)
        start_fence(c, &rep);
    if (rep.nsegs)
        gkv_conn_send(c, &rep);
    else
        gkv_reply_release(&c->srv->store, &rep);
    if (c->state != CONN_SEND)
        gkv_conn_op_done(c, 0); /* else when its last byte went to the socket */
}

void gkv_conn_op_done(gkv_conn_t *c, int rc)
{
    gkv_metrics_record(&c->srv->metrics, c->op, uv_hrtime() - c->op_started, rc != 0);
    if (gkv_fdstore_hold(&c->srv->fdstore, &c->commit, c->journal_mark))
        c->held++;
    gkv_server_schedule_expiry(c->srv);
}

/* Parses and handles one request. Returns 1 when one was handled, 0 when more bytes are
 * needed, -1 when the connection is closing. */
static int parse_one(gkv_conn_t *c)
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
    handle_request(c, &req);
    c->handling = false;
    if (c->closing) {
        drop_input(c);
        return -1;
    }
    return 1;
}

/* Requests are not read while the client leaves this much output untaken (--output-limit). */
static bool output_full(const gkv_conn_t *c)
{
    uint64_t limit = c->srv->cfg.output_limit;
    return c->out_pending > limit || c->out.sb.size > limit;
}

/* The server is stopping: every complete request still in the input is answered SHUTDOWN, up
 * to the first that carries a payload (what follows it cannot be told apart). */
static void refuse_pending(gkv_conn_t *c)
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

static void update_reading(gkv_conn_t *c)
{
    bool want = !c->closing && !c->copy_busy && !c->waiting_stage && !c->waiting_batch &&
                !c->yielded && c->state != CONN_SEND &&
                (c->state != CONN_HEADER || !output_full(c)) &&
                !(c->state == CONN_HEADER && gkv_takeover_refusing(c->srv, c));
    if (want && !c->reading) {
        if (uv_read_start(&c->h.stream, on_alloc, on_read) == 0)
            c->reading = true;
    } else if (!want && c->reading) {
        uv_read_stop(&c->h.stream);
        c->reading = false;
    }
}

/* Handles what input and state allow. True when it stopped only because the output was full
 * (--output-buffer-limit): requests may still wait in the input buffer. */
static bool drive_input(gkv_conn_t *c, unsigned *frames)
{
    while (!c->closing && !c->copy_busy && !c->waiting_stage && !c->waiting_batch) {
        if (c->state == CONN_SEND)
            break;
        if (c->state == CONN_PAYLOAD) {
            if (!gkv_conn_recv_step(c))
                break;
            continue;
        }
        if (c->state == CONN_DISCARD) {
            size_t avail = c->in_len - c->in_pos;
            size_t n = avail < c->discard_left ? avail : (size_t)c->discard_left;
            c->in_pos += n;
            c->discard_left -= n;
            if (c->discard_left)
                break;
            c->state = CONN_HEADER;
            c->frame_since = 0;
            continue;
        }
        if (gkv_takeover_refusing(c->srv, c)) {
            refuse_pending(c);
            gkv_conn_close(c, true);
            return false;
        }
        if (output_full(c))
            return true;
        if (*frames == GKV_FRAMES_PER_TURN) {
            gkv_server_yield(c->srv, c);
            break;
        }
        if (parse_one(c) <= 0)
            break;
        (*frames)++;
    }
    return false;
}

void gkv_conn_drive(gkv_conn_t *c)
{
    if (c->yielded)
        return; /* the server drives it again in its turn */
    unsigned frames = 0;
    /* Requests already read stay in the input buffer while the output is full; once a flush
     * drains it they are handled here, not only when more input comes (which a client that
     * waits for its replies never sends). on_write drives c again when queued output drains. */
    while (drive_input(c, &frames) && !c->closing && !c->held) {
        gkv_conn_flush(c);
        if (c->closing || output_full(c))
            break;
    }
    if (c->closing)
        return;
    /* A staging buffer is not held while waiting on the client. */
    if (c->state == CONN_PAYLOAD && c->stage && !c->stage_fill && !c->copy_busy && !c->flight)
        gkv_conn_release_stage(c);
    if (c->state == CONN_HEADER && c->in_pos == c->in_len)
        c->frame_since = 0;
    else if (c->state == CONN_HEADER && !c->frame_since)
        c->frame_since = uv_now(c->srv->loop); /* a header began: --frame-timeout runs */
    if (c->in_pos == c->in_len) {
        c->in_pos = c->in_len = 0;
        if (c->in_cap > IN_INITIAL) {
            uint8_t *smaller = realloc(c->in, IN_INITIAL);
            if (smaller) {
                c->in = smaller;
                c->in_cap = IN_INITIAL;
            }
        }
    }
    gkv_conn_flush(c);
    if (!c->closing)
        update_reading(c);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    gkv_conn_t *c = h->data;
    size_t len;
    uint8_t *direct = gkv_conn_read_target(c, &len);
    if (direct) {
        *buf = uv_buf_init((char *)direct, (unsigned)len);
        return;
    }
    if (c->in_pos && (c->in_pos == c->in_len || c->in_cap - c->in_len < 4096)) {
        memmove(c->in, c->in + c->in_pos, c->in_len - c->in_pos);
        c->in_len -= c->in_pos;
        c->in_pos = 0;
    }
    *buf = uv_buf_init((char *)c->in + c->in_len, (unsigned)(c->in_cap - c->in_len));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    (void)buf;
    gkv_conn_t *c = s->data;
    bool direct = c->read_to_stage;
    c->read_to_stage = false;
    if (nread < 0 && nread != UV_ENOBUFS) {
        if (nread != UV_EOF)
            GKV_DEBUG("conn %llu: read: %s", (unsigned long long)c->id, uv_strerror((int)nread));
        gkv_conn_close(c, false);
        return;
    }
    if (nread > 0) {
        if (direct)
            c->stage_fill += (size_t)nread;
        else
            c->in_len += (size_t)nread;
        c->frame_bytes += (uint64_t)nread;
        c->active_at = uv_now(c->srv->loop);
        c->srv->stats.bytes_in += (uint64_t)nread;
        gkv_server_input(c->srv);
    }
    gkv_conn_drive(c);
}

static void copy_done_any_thread(gkv_copy_t *op, int status)
{
    gkv_conn_t *c = op->arg;
    gkv_server_t *srv = c->srv;
    if (gkv_backend_polling()) { /* on the loop thread already */
        c->copy_status = status;
        gkv_conn_copy_finished(c);
        return;
    }
    pthread_mutex_lock(&srv->done_lock);
    c->copy_status = status;
    c->done_next = srv->done_head;
    srv->done_head = c;
    pthread_mutex_unlock(&srv->done_lock);
    uv_async_send(&srv->wake);
}

static bool listed(const uint32_t *ids, uint32_t n, uint32_t id)
{
    for (uint32_t i = 0; i < n; i++)
        if (ids[i] == id)
            return true;
    return false;
}

/* The Unix peer's credentials (SO_PEERCRED), read once as the connection begins: TAKEOVER and
 * --allow-uid/--allow-gid look at them. -1 where there are none (TCP) or they cannot be read. */
static void read_peer(gkv_conn_t *c)
{
    c->peer_uid = c->peer_gid = c->peer_pid = -1;
    uv_os_fd_t fd;
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (c->local && uv_fileno(&c->h.handle, &fd) == 0 &&
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
        c->peer_uid = (int)cred.uid;
        c->peer_gid = (int)cred.gid;
        c->peer_pid = (int)cred.pid;
    }
}

/* --allow-uid / --allow-gid: the Unix peer's credentials, checked before it can send anything,
 * so no descriptor ever reaches a process that is not allowed. The daemon's own user is always
 * allowed. */
static bool peer_allowed(gkv_conn_t *c, char *why, size_t cap)
{
    const gkv_config_t *cfg = &c->srv->cfg;
    if (!cfg->n_allow_uids && !cfg->n_allow_gids)
        return true;
    if (c->peer_uid < 0) {
        snprintf(why, cap, "the peer's credentials cannot be read");
        return false;
    }
    uint32_t uid = (uint32_t)c->peer_uid, gid = (uint32_t)c->peer_gid;
    if (uid == getuid() || listed(cfg->allow_uids, cfg->n_allow_uids, uid) ||
        listed(cfg->allow_gids, cfg->n_allow_gids, gid))
        return true;
    snprintf(why, cap, "uid %u (gid %u) is not in --allow-uid or --allow-gid", (unsigned)uid,
             (unsigned)gid);
    return false;
}

/* The journal has committed what c's requests appended (commit.h): its replies may go. */
static void on_committed(gkv_commit_waiter_t *w, bool resume)
{
    gkv_conn_t *c = (gkv_conn_t *)((char *)w - offsetof(gkv_conn_t, commit));
    c->held--;
    if (resume)
        gkv_conn_resume(c);
}

/* A connection's start, from a listener's pending connection (listener) or a connected socket
 * (fd, listener NULL). */
static int conn_start(gkv_server_t *srv, uv_stream_t *listener, int fd, bool local)
{
    gkv_conn_t *c = calloc(1, sizeof(*c));
    if (!c) {
        if (!listener)
            close(fd);
        return GKV_ENOMEM;
    }
    int rc = local ? uv_pipe_init(srv->loop, &c->h.pipe, 0) : uv_tcp_init(srv->loop, &c->h.tcp);
    if (rc) {
        free(c);
        if (!listener)
            close(fd);
        return GKV_ESYS;
    }
    c->h.handle.data = c;
    c->srv = srv;
    c->local = local;
    c->id = ++srv->next_conn_id;
    c->lane = (int)(c->id % (uint64_t)srv->devs.dev[0].be->lanes); /* every device has as many */
    c->copy.done = copy_done_any_thread;
    c->copy.arg = c;
    c->waiter.ready = on_stage_ready;
    c->bwaiter.ready = on_batch_room;
    c->commit.ready = on_committed;
    gkv_leases_init(&c->leases, &srv->lease_totals);
    gkv_wr_init(&c->out);
    c->next = srv->conns;
    if (srv->conns)
        srv->conns->prev = c;
    srv->conns = c;
    srv->nconns++;
    srv->stats.total_connections++;
    c->in = malloc(IN_INITIAL);
    if (listener)
        rc = uv_accept(listener, &c->h.stream);
    else
        rc = local ? uv_pipe_open(&c->h.pipe, fd) : uv_tcp_open(&c->h.tcp, fd);
    if (rc && !listener)
        close(fd);
    if (!c->in || rc != 0) {
        gkv_conn_close(c, false);
        return GKV_ESYS;
    }
    c->in_cap = IN_INITIAL;
    c->active_at = uv_now(srv->loop);
    read_peer(c);
    if (!local)
        uv_tcp_nodelay(&c->h.tcp, 1);
    if (srv->nconns > srv->cfg.maxclients) {
        srv->stats.rejected_connections++;
        gkv_reply_error(&c->out, 0, GKV_EBUSY, "max number of clients reached");
        gkv_conn_close(c, true);
        return GKV_EBUSY;
    }
    char why[128];
    if (local && !peer_allowed(c, why, sizeof(why))) {
        srv->stats.rejected_peers++;
        GKV_WARN("conn %llu: refused: %s", (unsigned long long)c->id, why);
        gkv_reply_error(&c->out, 0, GKV_EAUTH, why);
        gkv_conn_close(c, true);
        return GKV_EAUTH;
    }
    c->authed = srv->token_len == 0;
    c->version = GKV_PROTOCOL_VERSION;
    gkv_conn_drive(c);
    return 0;
}

int gkv_conn_accept(gkv_server_t *srv, uv_stream_t *listener, bool local)
{
    return conn_start(srv, listener, -1, local);
}

int gkv_conn_open(gkv_server_t *srv, int fd, bool local)
{
    return conn_start(srv, NULL, fd, local);
}
