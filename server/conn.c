/* conn.c: the connection state machine: accepting, reading, parsing and dispatching requests,
 * fences, closing. All of it runs on the loop thread; backend copies complete on other threads
 * (or at once, on the host backend) and come back through the server's wake-up queue. */
#include "conn.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "fdpass.h"
#include "log.h"

#define IN_INITIAL (64u << 10)
#define OUT_HIGH (4u << 20) /* stop reading requests while this much output is queued */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void on_closed(uv_handle_t *h)
{
    gkv_conn_t *c = h->data;
    gkv_server_t *srv = c->srv;
    /* A disconnect ends every lease and discards unsealed CREATEs. */
    gkv_leases_fini(&c->leases, &srv->store);
    if (c->recv)
        gkv_store_unref(&srv->store, c->recv);
    for (uint32_t i = c->seg_i; i < c->nsegs; i++)
        gkv_store_unref(&srv->store, c->segs[i].entry);
    if (c->segs && c->segs != &c->one)
        free(c->segs);
    free(c->in);
    gkv_wr_fini(&c->out);
    /* c left the staging queue when it began to close, so the buffer can only wake others. */
    gkv_conn_release_stage(c);
    gkv_server_conn_closed(srv, c);
    free(c);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    (void)status;
    gkv_conn_t *c = req->data;
    uv_close(&c->h.handle, on_closed);
}

void gkv_conn_finish_close(gkv_conn_t *c)
{
    if (c->copy_busy || c->held || c->close_started)
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
    gkv_staging_cancel(&c->srv->staging, &c->waiter);
    gkv_batch_cancel(&c->srv->batcher, &c->bwaiter);
    gkv_conn_finish_close(c);
}

void gkv_conn_stop(gkv_conn_t *c)
{
    if (c->state == CONN_HEADER && !c->copy_busy)
        gkv_conn_close(c, true);
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
    if (c->unshared_from) {
        if (status == 0)
            gkv_store_unshare_end(st, c->unshared_from, c->unshared_to);
        gkv_store_unref(st, c->unshared_from);
        gkv_store_unref(st, c->unshared_to);
        c->unshared_from = c->unshared_to = NULL;
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
    c->unshared_from = rep->unshared_from;
    c->unshared_to = rep->unshared_to;
    rep->unshared_from = rep->unshared_to = NULL;
    c->fencing = c->copy_busy = true;
    c->held++;
    gkv_backend_t *be = c->srv->be;
    int rc = be->ops->fence_shared(be, rep->fence_batches, &c->copy);
    if (rc) {
        c->copy_busy = false;
        fence_done(c, rc < 0 ? rc : 0); /* 1: nothing to wait for; drive() goes on */
    }
}

void gkv_conn_copy_finished(gkv_conn_t *c)
{
    c->copy_busy = false;
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

/* Sends the replies written so far (the HELLO reply alone: it is the connection's first) with fd
 * attached, straight on the socket: libuv cannot pass arbitrary descriptors. Nothing else has
 * been written on this connection, so the bytes cannot overtake or split earlier output. */
static void send_with_fd(gkv_conn_t *c, int fd)
{
    uv_os_fd_t sock;
    ssize_t n = -1;
    if (c->out_pending == 0 && uv_fileno(&c->h.handle, &sock) == 0)
        n = gkv_fd_send(sock, c->out.sb.data, c->out.sb.size, fd);
    close(fd);
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

static void handle_request(gkv_conn_t *c, const gkv_request_t *req)
{
    gkv_reply_t rep;
    gkv_reply_init(&rep, &c->out, &c->leases);
    rep.local = c->local;
    /* A small SET's value is written by a copy batch: allocate it in the batches' order. */
    rep.lane = req->payload_len && req->payload_len <= GKV_BATCH_VALUE_MAX ? GKV_LANE_BATCH
                                                                          : c->lane;
    rep.first = c->requests++ == 0;
    rep.zero_copy = c->zero_copy;
    int rc = gkv_dispatch(c->srv, req, &rep);
    if (rep.fd >= 0) {
        if (rc == 0)
            send_with_fd(c, rep.fd);
        else
            close(rep.fd);
    }
    if (rc < 0) {
        if (req->payload_len) {
            c->discard_left = req->payload_len;
            c->state = CONN_DISCARD;
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
        return;
    }
    if (rep.fence)
        start_fence(c, &rep);
    if (rep.nsegs)
        gkv_conn_send(c, &rep);
    else
        gkv_reply_release(c->srv, &rep);
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
    size_t need = GKV_FRAME_PREFIX + (size_t)len;
    if (avail < need) {
        if (need > c->in_cap) { /* bounded by GKV_MAX_HEADER, checked above */
            memmove(c->in, c->in + c->in_pos, avail);
            c->in_len = avail;
            c->in_pos = 0;
            uint8_t *bigger = realloc(c->in, need);
            if (!bigger) {
                gkv_conn_close(c, false);
                return -1;
            }
            c->in = bigger;
            c->in_cap = need;
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
    handle_request(c, &req);
    return c->closing ? -1 : 1;
}

static void update_reading(gkv_conn_t *c)
{
    bool want = !c->closing && !c->copy_busy && !c->waiting_stage && !c->waiting_batch &&
                c->state != CONN_SEND &&
                (c->state != CONN_HEADER ||
                 (c->out_pending <= OUT_HIGH && c->out.sb.size <= OUT_HIGH)) &&
                !(c->state == CONN_HEADER && c->srv->shutting_down);
    if (want && !c->reading) {
        if (uv_read_start(&c->h.stream, on_alloc, on_read) == 0)
            c->reading = true;
    } else if (!want && c->reading) {
        uv_read_stop(&c->h.stream);
        c->reading = false;
    }
}

void gkv_conn_drive(gkv_conn_t *c)
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
            continue;
        }
        if (c->srv->shutting_down) {
            gkv_conn_close(c, true);
            return;
        }
        if (c->out_pending > OUT_HIGH || c->out.sb.size > OUT_HIGH || parse_one(c) <= 0)
            break;
    }
    if (c->closing)
        return;
    /* A staging buffer is not held while waiting on the client. */
    if (c->state == CONN_PAYLOAD && c->stage && !c->stage_fill && !c->copy_busy)
        gkv_conn_release_stage(c);
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
    if (nread < 0 && nread != UV_ENOBUFS) {
        if (nread != UV_EOF)
            GKV_DEBUG("conn %llu: read: %s", (unsigned long long)c->id, uv_strerror((int)nread));
        gkv_conn_close(c, false);
        return;
    }
    if (nread > 0) {
        c->in_len += (size_t)nread;
        c->srv->stats.bytes_in += (uint64_t)nread;
        gkv_server_input(c->srv);
    }
    gkv_conn_drive(c);
}

static void copy_done_any_thread(gkv_copy_t *op, int status)
{
    gkv_conn_t *c = op->arg;
    gkv_server_t *srv = c->srv;
    pthread_mutex_lock(&srv->done_lock);
    c->copy_status = status;
    c->done_next = srv->done_head;
    srv->done_head = c;
    pthread_mutex_unlock(&srv->done_lock);
    uv_async_send(&srv->wake);
}

int gkv_conn_accept(gkv_server_t *srv, uv_stream_t *listener, bool local)
{
    gkv_conn_t *c = calloc(1, sizeof(*c));
    if (!c)
        return GKV_ENOMEM;
    int rc = local ? uv_pipe_init(srv->loop, &c->h.pipe, 0) : uv_tcp_init(srv->loop, &c->h.tcp);
    if (rc) {
        free(c);
        return GKV_ESYS;
    }
    c->h.handle.data = c;
    c->srv = srv;
    c->local = local;
    c->id = ++srv->next_conn_id;
    c->lane = (int)(c->id % (uint64_t)srv->be->lanes);
    c->copy.done = copy_done_any_thread;
    c->copy.arg = c;
    c->waiter.ready = on_stage_ready;
    c->bwaiter.ready = on_batch_room;
    gkv_leases_init(&c->leases, &srv->lease_totals);
    gkv_wr_init(&c->out);
    c->next = srv->conns;
    if (srv->conns)
        srv->conns->prev = c;
    srv->conns = c;
    srv->nconns++;
    srv->stats.total_connections++;
    c->in = malloc(IN_INITIAL);
    if (!c->in || uv_accept(listener, &c->h.stream) != 0) {
        gkv_conn_close(c, false);
        return GKV_ESYS;
    }
    c->in_cap = IN_INITIAL;
    if (!local)
        uv_tcp_nodelay(&c->h.tcp, 1);
    if (srv->nconns > srv->cfg.maxclients) {
        srv->stats.rejected_connections++;
        gkv_reply_error(&c->out, 0, GKV_EBUSY, "max number of clients reached");
        gkv_conn_close(c, true);
        return GKV_EBUSY;
    }
    gkv_conn_drive(c);
    return 0;
}
