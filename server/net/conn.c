/* conn.c: the connection state machine: accepting, reading, driving requests through their
 * phases, holds and fences, closing. All of it runs on the loop thread; backend copies complete
 * on other threads (or at once, on the host backend) and come back through the completion
 * queue (turns.c). */
#include "conn_impl.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "error.h"
#include "fdpass.h"
#include "keywait.h"
#include "fence.h"
#include "watch.h"
#include "log.h"
#include "trace.h"

#define IN_INITIAL (64u << 10)

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void on_closed(uv_handle_t *h)
{
    gkv_conn_t *c = h->data;
    gkv_net_t *net = c->net;
    assert(c->copies == 0 && !gkv_conn_held(c)); /* the lifetime rule (conn.h) */
    /* A disconnect ends every lease and discards unsealed CREATEs. */
    gkv_leases_fini(&c->leases, net->store);
    if (c->teed)
        gkv_store_unref(net->store, c->teed);
    gkv_buffers_fini(&c->bufs, net->cmd); /* its copies ran: no fence is pending (copies 0) */
    if (net->cluster)
        gkv_cluster_ticket_fini(net->cluster, &c->route);
    if (c->rcv.entry)
        gkv_store_unref(net->store, c->rcv.entry);
    for (uint32_t i = c->snd.seg_i; i < c->snd.nsegs; i++)
        gkv_store_unref(net->store, c->snd.segs[i].entry);
    if (c->snd.segs && c->snd.segs != &c->snd.one)
        free(c->snd.segs);
    free(c->snd.tail);
    free(c->in);
    gkv_wr_fini(&c->out);
    /* c left the staging queue when it began to close, so the buffer can only wake others. */
    gkv_conn_release_stage(c);
    gkv_conn_release_ahead(c);
    gkv_conn_narrow_sndbuf(c);
    gkv_net_remove(net, c);
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
    if (c->copies || c->wait.copy || c->rcv.flight || c->snd.ahead_busy || gkv_conn_held(c) ||
        c->wait.cluster || c->close_started)
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
void gkv_conn_drop_input(gkv_conn_t *c)
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
    gkv_conn_drop_input(c);
    gkv_staging_cancel(c->net->staging, &c->waiter);
    for (unsigned i = 0; i < c->net->devs->n; i++) /* it waits on at most one */
        gkv_batch_cancel(&c->net->devs->dev[i].batcher, &c->bwaiter);
    gkv_demoter_cancel(c->net->demoter, &c->rwaiter);
    c->wait.room = false;
    gkv_keywait_cancel(c);
    gkv_watch_cancel(c);
    gkv_fence_cancel(c);
    gkv_conn_finish_close(c);
}

void gkv_conn_abort(gkv_conn_t *c)
{
    gkv_conn_close(c, false);
    c->graceful = false;
    if (c->auth_hold_until) { /* a failed HELLO's delay: its reply is dropped with the rest */
        c->auth_hold_until = 0;
        c->hold.auth = false;
        gkv_conn_finish_close(c);
    }
    if (c->close_started && !uv_is_closing(&c->h.handle))
        uv_close(&c->h.handle, on_closed); /* pending writes and the shutdown are cancelled */
}

void gkv_conn_stop_now(gkv_conn_t *c)
{
    if (!c->closing && c->phase == CONN_PAYLOAD && !gkv_conn_held(c) && !c->snd.pending) {
        /* One try, without waiting: the client may not be reading. */
        gkv_reply_error(&c->out, c->rcv.req_id, GKV_ESHUTDOWN,
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
    if (c->phase == CONN_HEADER && !c->wait.copy && !c->closing) {
        gkv_conn_refuse_pending(c);
        gkv_conn_close(c, true);
    }
    /* Otherwise drive() closes it when the request in flight is done. */
}

static void on_stage_ready(gkv_waiter_t *w)
{
    gkv_conn_t *c = (gkv_conn_t *)((char *)w - offsetof(gkv_conn_t, waiter));
    c->wait.stage = false;
    if (c->closing)
        return;
    if (c->phase == CONN_SEND)
        gkv_conn_send_step(c);
    else
        gkv_conn_drive(c);
}

void gkv_conn_resume(gkv_conn_t *c)
{
    if (gkv_conn_held(c))
        return;
    if (c->closing)
        gkv_conn_finish_close(c);
    else if (c->phase == CONN_SEND)
        gkv_conn_send_step(c);
    else
        gkv_conn_drive(c);
}

void gkv_conn_cluster_wake(void *conn)
{
    gkv_conn_t *c = conn;
    c->wait.cluster = false;
    gkv_conn_resume(c);
}

/* Moves off the GPU a SET waited for have ended: the SET runs again (its frame is still in
 * the input), and makes any room still missing itself. */
static void on_moved(gkv_waiter_t *w)
{
    gkv_conn_t *c = (gkv_conn_t *)((char *)w - offsetof(gkv_conn_t, rwaiter));
    c->wait.room = false;
    if (!c->closing)
        gkv_conn_drive(c);
}

static void on_batch_room(gkv_waiter_t *w)
{
    gkv_conn_t *c = (gkv_conn_t *)((char *)w - offsetof(gkv_conn_t, bwaiter));
    c->wait.batch = false;
    if (!c->closing)
        gkv_conn_drive(c);
}

/* The fence a reply waited for has run (or failed: status): its reply is released. */
static void fence_done(gkv_conn_t *c, int status)
{
    gkv_store_t *st = c->net->store;
    gkv_trace("d_fence_done", c->id, (uint64_t)status); /* GPUKV_TRACE */
    c->fencing = false;
    if (c->copied_from) {
        if (status == 0)
            (void)gkv_store_copy_end(st, c->copied_from, c->copied_to);
        gkv_store_unref(st, c->copied_from);
        gkv_store_unref(st, c->copied_to);
        c->copied_from = c->copied_to = NULL;
    }
    if (c->fence_hold)
        gkv_store_unref(st, c->fence_hold);
    c->fence_hold = NULL;
    if (status) {
        GKV_ERROR("conn %llu: waiting for the backend failed: %s", (unsigned long long)c->id,
                  gkv_strerror(status));
        c->out.failed = true; /* the held reply must not go out: close instead */
    }
    c->hold.fence = false;
}

/* The reply just written goes out once the backend's shared lane has run, or a GET into's copy
 * on the connection's lane (reply.h). */
void gkv_conn_start_fence(gkv_conn_t *c, gkv_reply_t *rep)
{
    c->copied_from = rep->copied_from;
    c->copied_to = rep->copied_to;
    rep->copied_from = rep->copied_to = NULL;
    c->fence_hold = rep->fence_hold;
    rep->fence_hold = NULL;
    c->fencing = c->wait.copy = true;
    c->hold.fence = true;
    gkv_backend_t *be = c->net->devs->dev[rep->fence_dev].be;
    bool begun = gkv_conn_copy_begin(c);
    int rc = !begun          ? GKV_ECLOSED
             : rep->into_len ? be->ops->copy_dev(be, rep->into_dst, rep->into_src, rep->into_len,
                                                 c->lane, &c->copy)
                             : be->ops->fence_shared(be, rep->fence_batches, &c->copy);
    gkv_trace("d_fence", c->id, (uint64_t)rc); /* GPUKV_TRACE: 0 waits, 1 nothing to wait for */
    if (rc == 0 && rep->into_len) /* a copy on a lane: reported through the device's polling */
        gkv_poller_arm(&c->net->devs->dev[rep->fence_dev].poller);
    if (rc) {
        if (begun)
            gkv_conn_copy_unbegin(c);
        c->wait.copy = false;
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
    c->wait.copy = false;
    bool ahead = c->snd.ahead_busy;
    c->snd.ahead_busy = false;
    if (c->rcv.flight)
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
        if (c->phase == CONN_SEND && !c->snd.chunk)
            gkv_conn_send_step(c);
        return;
    }
    gkv_conn_chunk_copied(c);
}

/* Requests. */

static void update_reading(gkv_conn_t *c)
{
    bool want = !c->closing && !c->wait.copy && !c->wait.stage && !c->wait.batch &&
                !c->wait.cluster && !c->wait.room && !c->wait.key && !c->wait.fence &&
                !c->yielded &&
                c->phase != CONN_SEND && (c->phase != CONN_HEADER || !gkv_conn_output_full(c)) &&
                !(c->phase == CONN_HEADER && gkv_conn_refused(c));
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
    while (!c->closing && !c->wait.copy && !c->wait.stage && !c->wait.batch && !c->wait.cluster &&
           !c->wait.room && !c->wait.key) {
        if (c->phase == CONN_SEND)
            break;
        if (c->phase == CONN_PAYLOAD) {
            if (!gkv_conn_recv_step(c))
                break;
            continue;
        }
        if (c->phase == CONN_DISCARD) {
            size_t avail = c->in_len - c->in_pos;
            size_t n = avail < c->rcv.discard_left ? avail : (size_t)c->rcv.discard_left;
            c->in_pos += n;
            c->rcv.discard_left -= n;
            if (c->rcv.discard_left)
                break;
            c->phase = CONN_HEADER;
            c->frame_since = 0;
            continue;
        }
        if (gkv_conn_refused(c)) {
            gkv_conn_refuse_pending(c);
            gkv_conn_close(c, true);
            return false;
        }
        if (gkv_conn_output_full(c))
            return true;
        if (*frames == GKV_FRAMES_PER_TURN) {
            gkv_net_yield(c->net, c);
            break;
        }
        if (gkv_conn_parse_one(c) <= 0)
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
    while (drive_input(c, &frames) && !c->closing && !gkv_conn_held(c)) {
        gkv_conn_flush(c);
        if (c->closing || gkv_conn_output_full(c))
            break;
    }
    if (c->closing)
        return;
    /* A staging buffer is not held while waiting on the client. */
    if (c->phase == CONN_PAYLOAD && c->stage && !c->stage_fill && !c->wait.copy && !c->rcv.flight)
        gkv_conn_release_stage(c);
    if (c->phase == CONN_HEADER && c->in_pos == c->in_len)
        c->frame_since = 0;
    else if (c->phase == CONN_HEADER && !c->frame_since)
        c->frame_since = uv_now(c->net->loop); /* a header began: --frame-timeout runs */
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
    bool direct = c->rcv.to_stage;
    c->rcv.to_stage = false;
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
        c->active_at = uv_now(c->net->loop);
        c->net->stats.bytes_in += (uint64_t)nread;
        gkv_net_input(c->net);
    }
    gkv_conn_drive(c);
}

static void copy_done_any_thread(gkv_copy_t *op, int status)
{
    gkv_conn_t *c = op->arg;
    gkv_net_copy_done(c->net, c, status);
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
    const gkv_net_settings_t *cfg = &c->net->set;
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
    c->hold.commit = false;
    if (resume)
        gkv_conn_resume(c);
}

/* A connection's start, from a listener's pending connection (listener) or a connected socket
 * (fd, listener NULL). */
static int conn_start(gkv_net_t *net, uv_stream_t *listener, int fd, bool local)
{
    gkv_conn_t *c = calloc(1, sizeof(*c));
    if (!c) {
        if (!listener)
            close(fd);
        return GKV_ENOMEM;
    }
    int rc = local ? uv_pipe_init(net->loop, &c->h.pipe, 0) : uv_tcp_init(net->loop, &c->h.tcp);
    if (rc) {
        free(c);
        if (!listener)
            close(fd);
        return GKV_ESYS;
    }
    c->h.handle.data = c;
    c->net = net;
    c->local = local;
    c->id = ++net->next_conn_id;
    c->lane = (int)(c->id % (uint64_t)net->devs->dev[0].be->lanes); /* every device has as many */
    c->copy.done = copy_done_any_thread;
    c->copy.arg = c;
    c->waiter.ready = on_stage_ready;
    c->bwaiter.ready = on_batch_room;
    c->rwaiter.ready = on_moved;
    c->commit.ready = on_committed;
    c->route.wake = gkv_conn_cluster_wake;
    c->route.conn = c;
    gkv_leases_init(&c->leases, net->cmd->lease_totals);
    gkv_buffers_init(&c->bufs);
    gkv_wr_init(&c->out);
    c->next = net->conns;
    if (net->conns)
        net->conns->prev = c;
    net->conns = c;
    net->nconns++;
    net->stats.total_connections++;
    c->in = malloc(IN_INITIAL);
    gkv_trace("d_accept", (uint64_t)local, 0); /* GPUKV_TRACE */
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
    c->active_at = uv_now(net->loop);
    read_peer(c);
    if (!local)
        uv_tcp_nodelay(&c->h.tcp, 1);
    if (net->nconns > net->set.maxclients) {
        net->stats.rejected_connections++;
        gkv_reply_error(&c->out, 0, GKV_EBUSY, "max number of clients reached");
        gkv_conn_close(c, true);
        return GKV_EBUSY;
    }
    char why[128];
    if (local && !peer_allowed(c, why, sizeof(why))) {
        net->stats.rejected_peers++;
        GKV_WARN("conn %llu: refused: %s", (unsigned long long)c->id, why);
        gkv_reply_error(&c->out, 0, GKV_EAUTH, why);
        gkv_conn_close(c, true);
        return GKV_EAUTH;
    }
    c->authed = !net->set.token;
    c->version = GKV_PROTOCOL_VERSION;
    gkv_conn_drive(c);
    return 0;
}

int gkv_conn_accept(gkv_net_t *net, uv_stream_t *listener, bool local)
{
    return conn_start(net, listener, -1, local);
}

int gkv_conn_open(gkv_net_t *net, int fd, bool local)
{
    return conn_start(net, NULL, fd, local);
}
