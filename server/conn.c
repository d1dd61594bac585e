/* conn.c: the connection state machine. All of it runs on the loop thread; backend copies
 * complete on other threads and come back through the server's wake-up queue. */
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
#define OUT_LOW (1u << 20)
#define INLINE_MAX (16u << 10) /* values up to this size are copied into the reply buffer */

/* One uv_write: replies (owned bytes), values seen in place (references), or a staging chunk. */
typedef struct {
    uv_write_t req;
    gkv_conn_t *c;
    char *owned;
    gkv_segment_t *segs;
    uint32_t nsegs;
    bool segs_heap, job_chunk;
    size_t bytes;
    uv_buf_t bufs[];
} out_req_t;

static void drive(gkv_conn_t *c);
static void job_step(gkv_conn_t *c);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void release_segments(gkv_server_t *srv, gkv_segment_t *segs, uint32_t n, bool heap)
{
    for (uint32_t i = 0; i < n; i++)
        gkv_store_unref(&srv->store, segs[i].entry);
    if (heap)
        free(segs);
}

static void release_stage(gkv_conn_t *c)
{
    if (!c->stage)
        return;
    void *p = c->stage;
    c->stage = NULL;
    c->stage_fill = 0;
    gkv_staging_put(&c->srv->staging, p); /* may wake another connection: do it last */
}

static void on_closed(uv_handle_t *h)
{
    gkv_conn_t *c = h->data;
    gkv_server_t *srv = c->srv;
    /* A disconnect ends every lease and discards unsealed CREATEs. */
    gkv_leases_fini(&c->leases, &srv->store);
    if (c->recv)
        gkv_store_unref(&srv->store, c->recv);
    if (c->segs)
        release_segments(srv, c->segs + c->seg_i, c->nsegs - c->seg_i, false);
    if (c->segs && c->segs != &c->one)
        free(c->segs);
    free(c->in);
    gkv_wr_fini(&c->out);
    /* c left the staging queue when it began to close, so the buffer can only wake others. */
    release_stage(c);
    gkv_server_conn_closed(srv, c);
    free(c);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    (void)status;
    gkv_conn_t *c = req->data;
    uv_close(&c->h.handle, on_closed);
}

static void flush(gkv_conn_t *c);

static void finish_close(gkv_conn_t *c)
{
    if (c->copy_busy || c->holes || c->close_started)
        return;
    c->close_started = true;
    if (c->graceful) {
        flush(c);
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
    if (c->srv->batch)
        gkv_batch_cancel(c->srv->batch, &c->bwaiter);
    finish_close(c);
}

void gkv_conn_stop(gkv_conn_t *c)
{
    if (c->state == CONN_HEADER && !c->copy_busy)
        gkv_conn_close(c, true);
    /* Otherwise drive() closes it when the request in flight is done. */
}

static void on_write(uv_write_t *req, int status)
{
    out_req_t *r = (out_req_t *)req;
    gkv_conn_t *c = r->c;
    c->out_pending -= r->bytes;
    if (status == 0)
        c->srv->stats.bytes_out += r->bytes;
    free(r->owned);
    release_segments(c->srv, r->segs, r->nsegs, r->segs_heap);
    bool job = r->job_chunk;
    free(r);
    if (c->closing)
        return;
    if (status < 0) {
        GKV_DEBUG("conn %llu: write failed: %s", (unsigned long long)c->id, uv_strerror(status));
        gkv_conn_close(c, false);
        return;
    }
    if (job) {
        c->seg_pos += c->chunk;
        job_step(c);
    } else if (!c->reading && c->out_pending <= OUT_LOW) {
        drive(c);
    }
}

/* Queues r for writing; on failure closes the connection (r is freed either way). */
static void submit(gkv_conn_t *c, out_req_t *r, unsigned nbufs)
{
    r->c = c;
    c->out_pending += r->bytes;
    int rc = uv_write(&r->req, &c->h.stream, r->bufs, nbufs, on_write);
    if (rc) {
        c->out_pending -= r->bytes;
        free(r->owned);
        release_segments(c->srv, r->segs, r->nsegs, r->segs_heap);
        free(r);
        gkv_conn_close(c, false);
    }
}

/* Writes the replies produced so far, once no copy batch still has bytes to put in them. */
static void flush(gkv_conn_t *c)
{
    if (c->holes)
        return;
    if (c->out.failed) {
        GKV_ERROR("conn %llu: out of memory building replies", (unsigned long long)c->id);
        gkv_wr_reset(&c->out);
        gkv_conn_close(c, false);
        return;
    }
    if (c->out.sb.size == 0)
        return;
    out_req_t *r = calloc(1, sizeof(*r) + sizeof(uv_buf_t));
    if (!r) {
        gkv_conn_close(c, false);
        return;
    }
    r->bytes = c->out.sb.size;
    r->owned = msgpack_sbuffer_release(&c->out.sb);
    r->bufs[0] = uv_buf_init(r->owned, (unsigned)r->bytes);
    submit(c, r, 1);
}

/* Values the host can see are written straight from backend memory: no copy at all. */
static void send_in_place(gkv_conn_t *c, gkv_reply_t *rep)
{
    gkv_backend_t *be = c->srv->be;
    flush(c);
    out_req_t *r = calloc(1, sizeof(*r) + sizeof(uv_buf_t) * rep->nsegs);
    if (!r || c->closing) {
        free(r);
        gkv_reply_release(c->srv, rep);
        gkv_conn_close(c, false);
        return;
    }
    for (uint32_t i = 0; i < rep->nsegs; i++) {
        gkv_segment_t *s = &rep->segs[i];
        /* Not uv_buf_init: it takes an unsigned int and would cut values of 4 GiB or more. */
        r->bufs[i].base = (char *)be->ops->host_view(be, s->entry->mem) + s->off;
        r->bufs[i].len = (size_t)s->len;
        r->bytes += s->len;
    }
    if (rep->segs == &rep->one) {
        r->segs = malloc(sizeof(gkv_segment_t));
        if (!r->segs) {
            free(r);
            gkv_reply_release(c->srv, rep);
            gkv_conn_close(c, false);
            return;
        }
        r->segs[0] = rep->one;
    } else {
        r->segs = rep->segs;
    }
    r->segs_heap = true;
    r->nsegs = rep->nsegs;
    rep->segs = NULL;
    rep->nsegs = 0;
    submit(c, r, r->nsegs);
}

/* Gets a staging buffer or queues for one. False when the caller must wait (or c closes). */
static bool take_stage(gkv_conn_t *c)
{
    c->stage = gkv_staging_get(&c->srv->staging, &c->waiter);
    if (c->stage)
        return true;
    if (c->waiter.queued) {
        c->waiting_stage = true;
        return false;
    }
    GKV_ERROR("conn %llu: no staging buffer could be allocated", (unsigned long long)c->id);
    gkv_conn_close(c, false);
    return false;
}

static void on_stage_ready(gkv_waiter_t *w)
{
    gkv_conn_t *c = (gkv_conn_t *)((char *)w - offsetof(gkv_conn_t, waiter));
    c->waiting_stage = false;
    if (c->closing)
        return;
    if (c->state == CONN_SEND)
        job_step(c);
    else
        drive(c);
}

/* Staging send: copy a chunk out of backend memory, write it, repeat. */
static void job_step(gkv_conn_t *c)
{
    gkv_server_t *srv = c->srv;
    while (c->seg_i < c->nsegs && c->seg_pos == c->segs[c->seg_i].len) {
        gkv_store_unref(&srv->store, c->segs[c->seg_i].entry);
        c->seg_i++;
        c->seg_pos = 0;
    }
    if (c->seg_i == c->nsegs) {
        if (c->segs != &c->one)
            free(c->segs);
        c->segs = NULL;
        c->nsegs = c->seg_i = 0;
        c->state = CONN_HEADER;
        release_stage(c);
        drive(c);
        return;
    }
    if (c->holes)
        return; /* replies before this one wait for a batch; gkv_conn_batch_deliver resumes */
    flush(c);
    if (!c->stage && !take_stage(c))
        return;
    if (srv->batch)
        gkv_batch_start_writes(srv->batch); /* the lane copy waits for them in the backend */
    gkv_segment_t *s = &c->segs[c->seg_i];
    uint64_t left = s->len - c->seg_pos;
    c->chunk = left < GKV_STAGING_CHUNK ? (size_t)left : GKV_STAGING_CHUNK;
    c->copy_busy = true;
    int rc = srv->be->ops->copy_out(srv->be, c->stage, s->entry->mem, s->off + c->seg_pos,
                                    c->chunk, c->lane, &c->copy);
    if (rc) {
        c->copy_busy = false;
        gkv_conn_close(c, false);
    }
}

static void job_chunk_copied(gkv_conn_t *c)
{
    out_req_t *r = calloc(1, sizeof(*r) + sizeof(uv_buf_t));
    if (!r) {
        gkv_conn_close(c, false);
        return;
    }
    r->bytes = c->chunk;
    r->job_chunk = true;
    r->bufs[0] = uv_buf_init(c->stage, (unsigned)c->chunk);
    submit(c, r, 1);
}

/* Small values the host can see are copied into the reply buffer: one write then carries
 * many pipelined replies, where a write per value would cost a system call each. */
static bool send_inline(gkv_conn_t *c, gkv_reply_t *rep, uint64_t total)
{
    gkv_backend_t *be = c->srv->be;
    if (total > INLINE_MAX)
        return false;
    for (uint32_t i = 0; i < rep->nsegs; i++) {
        gkv_segment_t *s = &rep->segs[i];
        if (msgpack_sbuffer_write(&c->out.sb, (const char *)be->ops->host_view(be, s->entry->mem) +
                                                  s->off, (size_t)s->len))
            c->out.failed = true;
    }
    gkv_reply_release(c->srv, rep);
    return true;
}

/* Small replies from memory the host cannot see: the reply buffer keeps a hole for the bytes,
 * which the next copy batch fills. False when the batch is full. */
static bool send_batched(gkv_conn_t *c, gkv_reply_t *rep, uint64_t total)
{
    static const char zeros[GKV_BATCH_VALUE_MAX];
    gkv_batcher_t *b = c->srv->batch;
    if (total > GKV_BATCH_VALUE_MAX || !gkv_batch_out_room(b, rep->nsegs, total))
        return false;
    uint64_t at = c->out.sb.size;
    if (msgpack_sbuffer_write(&c->out.sb, zeros, (size_t)total))
        c->out.failed = true; /* the connection closes once the batch is done */
    for (uint32_t i = 0; i < rep->nsegs; i++) {
        gkv_segment_t *s = &rep->segs[i];
        gkv_batch_out(b, s->entry, s->off, (uint32_t)s->len, c, at); /* takes the reference */
        at += s->len;
        c->holes++;
    }
    if (rep->segs != &rep->one)
        free(rep->segs);
    rep->segs = NULL;
    rep->nsegs = 0;
    return true;
}

void gkv_conn_batch_deliver(void *sink, uint64_t tag, const void *bytes, uint32_t len, int status)
{
    gkv_conn_t *c = sink;
    if (status)
        c->out.failed = true; /* a reply without its bytes must not go out: close instead */
    else if (!c->out.failed && tag + len <= c->out.sb.size)
        memcpy(c->out.sb.data + tag, bytes, len);
    if (--c->holes)
        return;
    if (c->closing)
        finish_close(c);
    else if (c->state == CONN_SEND)
        job_step(c);
    else
        drive(c);
}

/* Sends rep's segments after the reply header: inline, in place, in a copy batch, or through
 * staging (job_step writes the replies before it first). */
static void start_send(gkv_conn_t *c, gkv_reply_t *rep)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < rep->nsegs; i++)
        total += rep->segs[i].len;
    if (!c->srv->staging_only) {
        if (!send_inline(c, rep, total))
            send_in_place(c, rep);
        return;
    }
    if (c->srv->batch && send_batched(c, rep, total))
        return;
    if (rep->segs == &rep->one) {
        c->one = rep->one;
        c->segs = &c->one;
    } else {
        c->segs = rep->segs;
    }
    c->nsegs = rep->nsegs;
    c->seg_i = 0;
    c->seg_pos = 0;
    rep->segs = NULL;
    rep->nsegs = 0;
    c->state = CONN_SEND;
    job_step(c);
}

/* SET payload. */

static void recv_commit(gkv_conn_t *c)
{
    c->recv_cmd->on_payload(c->srv, c->req_id, c->recv, c->recv_flags, &c->out, NULL);
    gkv_store_unref(&c->srv->store, c->recv);
    c->recv = NULL;
    c->state = CONN_HEADER;
    release_stage(c);
}

/* A small SET on a batching backend: once the whole payload is in, its bytes go into the copy
 * batch and the value is published and answered at once; the batch copies it before anything
 * else can read it (batch.h). Returns like recv_step. */
static bool recv_batched(gkv_conn_t *c)
{
    gkv_server_t *srv = c->srv;
    gkv_entry_t *e = c->recv, *holder = NULL;
    uint32_t size = (uint32_t)e->size;
    if (c->in_len - c->in_pos < size)
        return false; /* the input buffer (64 KiB at least) holds a whole small payload */
    void *dst = gkv_batch_in_reserve(srv->batch, size, &c->bwaiter);
    if (!dst) {
        c->waiting_batch = true;
        return false;
    }
    memcpy(dst, c->in + c->in_pos, size);
    c->in_pos += size;
    if (c->recv_cmd->on_payload(srv, c->req_id, e, c->recv_flags, &c->out, &holder) == 0)
        gkv_batch_in_commit(srv->batch, holder);
    gkv_store_unref(&srv->store, e);
    c->recv = NULL;
    c->state = CONN_HEADER;
    return true;
}

static void on_batch_room(gkv_waiter_t *w)
{
    gkv_conn_t *c = (gkv_conn_t *)((char *)w - offsetof(gkv_conn_t, bwaiter));
    c->waiting_batch = false;
    if (!c->closing)
        drive(c);
}

/* Moves available input into the value. Returns true when it can go on, false when it must
 * wait for input, a staging buffer or a copy. */
static bool recv_step(gkv_conn_t *c)
{
    gkv_server_t *srv = c->srv;
    gkv_entry_t *e = c->recv;
    uint64_t pending = e->size - c->recv_got - c->stage_fill;
    size_t avail = c->in_len - c->in_pos;
    size_t n = avail < pending ? avail : (size_t)pending;
    if (!srv->staging_only) {
        if (n)
            memcpy((uint8_t *)srv->be->ops->host_view(srv->be, e->mem) + c->recv_got,
                   c->in + c->in_pos, n);
        c->in_pos += n;
        c->recv_got += n;
        if (c->recv_got < e->size)
            return false;
        recv_commit(c);
        return true;
    }
    if (srv->batch && e->size <= GKV_BATCH_VALUE_MAX)
        return recv_batched(c);
    if (pending && !avail)
        return false;
    if (pending) {
        if (!c->stage && !take_stage(c))
            return false;
        size_t room = GKV_STAGING_CHUNK - c->stage_fill;
        if (n > room)
            n = room;
        memcpy((uint8_t *)c->stage + c->stage_fill, c->in + c->in_pos, n);
        c->stage_fill += n;
        c->in_pos += n;
        pending -= n;
    }
    if (c->stage_fill == GKV_STAGING_CHUNK || (!pending && c->stage_fill)) {
        c->copy_busy = true;
        int rc = srv->be->ops->copy_in(srv->be, e->mem, c->recv_got, c->stage, c->stage_fill,
                                       c->lane, &c->copy);
        if (rc) {
            c->copy_busy = false;
            gkv_conn_close(c, false);
        }
        return false;
    }
    if (!pending) {
        recv_commit(c);
        return true;
    }
    return true;
}

void gkv_conn_copy_finished(gkv_conn_t *c)
{
    c->copy_busy = false;
    if (c->closing) {
        finish_close(c);
        return;
    }
    if (c->copy_status) {
        GKV_ERROR("conn %llu: backend copy failed: %s", (unsigned long long)c->id,
                  gkv_strerror(c->copy_status));
        gkv_conn_close(c, false);
        return;
    }
    if (c->state == CONN_SEND) {
        job_chunk_copied(c);
    } else {
        c->recv_got += c->stage_fill;
        c->stage_fill = 0;
        drive(c);
    }
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
    c->zc = true;
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
    rep.lane = c->srv->batch && req->payload_len && req->payload_len <= GKV_BATCH_VALUE_MAX
                   ? GKV_LANE_BATCH
                   : c->lane;
    rep.first = c->requests++ == 0;
    rep.zc = c->zc;
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
    if (rep.nsegs)
        start_send(c, &rep);
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

static void drive(gkv_conn_t *c)
{
    while (!c->closing && !c->copy_busy && !c->waiting_stage && !c->waiting_batch) {
        if (c->state == CONN_SEND)
            break;
        if (c->state == CONN_PAYLOAD) {
            if (!recv_step(c))
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
        release_stage(c);
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
    flush(c);
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
    drive(c);
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
    drive(c);
    return 0;
}
