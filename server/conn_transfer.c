/* conn_transfer.c: a connection's bytes: replies written in order, values sent out and SET
 * payloads received. Values up to GKV_BATCH_VALUE_MAX move in copy batches (batch.h); larger
 * ones chunk by chunk through staging buffers, each chunk a backend copy, except a SET's last
 * chunk, which joins a copy batch. Every backend takes
 * this one path: the host backend's copies are memcpys that report at once. */
#include "conn.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "error.h"
#include "log.h"

/* One uv_write: replies (owned bytes) or a piece of a chunk copied into c->tail. */
typedef struct {
    uv_write_t req;
    gkv_conn_t *c;
    char *owned;
    bool tail;
    size_t bytes;
    uv_buf_t buf;
} out_req_t;

#define GKV_SEND_TAIL (16u << 10)
/* Reply buffers up to this size are kept between flushes. */
#define GKV_OUT_KEEP (64u << 10)

static void push_chunk(gkv_conn_t *c);

/* Gives the staging buffer in *slot back, if any. */
static void put_back(gkv_conn_t *c, void **slot)
{
    void *p = *slot;
    *slot = NULL;
    if (p)
        gkv_staging_put(&c->srv->staging, p); /* may wake another connection: do it last */
}

/* Bytes of the payload not yet read into stage (or sent on in the flight). */
static uint64_t payload_pending(const gkv_conn_t *c)
{
    return c->recv->size - c->recv_got - c->flight_len - c->stage_fill;
}

void gkv_conn_release_stage(gkv_conn_t *c)
{
    c->stage_fill = 0;
    put_back(c, &c->stage);
}

void gkv_conn_release_ahead(gkv_conn_t *c)
{
    c->ahead_len = 0;
    put_back(c, &c->ahead);
}

static void on_write(uv_write_t *req, int status)
{
    out_req_t *r = (out_req_t *)req;
    gkv_conn_t *c = r->c;
    c->out_pending -= r->bytes;
    c->write_since = c->active_at = uv_now(c->srv->loop);
    if (status == 0)
        c->srv->stats.bytes_out += r->bytes;
    free(r->owned);
    bool tail = r->tail;
    free(r);
    if (tail)
        c->tail_busy = false;
    if (c->closing)
        return;
    if (status < 0) {
        GKV_DEBUG("conn %llu: write failed: %s", (unsigned long long)c->id, uv_strerror(status));
        gkv_conn_close(c, false);
        return;
    }
    if (tail && c->state == CONN_SEND && !c->copy_busy) {
        if (c->chunk) /* copied (no copy is busy), not all sent */
            push_chunk(c);
        else
            gkv_conn_send_step(c); /* the chunk went out, or the buffer was given back */
    } else if (c->out_pending <= c->srv->cfg.output_limit / 4 &&
               (!c->reading || (c->state == CONN_HEADER && c->in_pos < c->in_len))) {
        gkv_conn_drive(c); /* requests read while the output was full go on */
    }
}

/* Queues len bytes at base for writing (owned: freed once written); on failure closes the
 * connection. */
static void submit(gkv_conn_t *c, char *base, size_t len, char *owned, bool tail)
{
    out_req_t *r = calloc(1, sizeof(*r));
    if (!r) {
        free(owned);
        gkv_conn_close(c, false);
        return;
    }
    r->c = c;
    r->owned = owned;
    r->tail = tail;
    r->bytes = len;
    r->buf = uv_buf_init(base, (unsigned)len);
    if (!c->out_pending)
        c->write_since = uv_now(c->srv->loop);
    c->out_pending += len;
    if (uv_write(&r->req, &c->h.stream, &r->buf, 1, on_write)) {
        c->out_pending -= len;
        free(r->owned);
        free(r);
        gkv_conn_close(c, false);
    }
}

void gkv_conn_flush(gkv_conn_t *c)
{
    if (c->held)
        return;
    if (c->out.failed) {
        GKV_ERROR("conn %llu: out of memory building replies", (unsigned long long)c->id);
        gkv_wr_reset(&c->out);
        gkv_conn_close(c, false);
        return;
    }
    if (c->out.sb.size == 0)
        return;
    size_t n = c->out.sb.size, done = 0;
    if (!c->out_pending) {
        /* Nothing queued: write now, without a request, a callback or the POLLOUT re-arm (one
         * epoll_ctl) that a finished uv_write costs. uv_try_write refuses while libuv still
         * queues anything, so replies keep their order. */
        uv_buf_t b = uv_buf_init(c->out.sb.data, (unsigned)n);
        int w = uv_try_write(&c->h.stream, &b, 1);
        if (w < 0 && w != UV_EAGAIN) {
            GKV_DEBUG("conn %llu: write failed: %s", (unsigned long long)c->id, uv_strerror(w));
            gkv_wr_reset(&c->out);
            gkv_conn_close(c, false);
            return;
        }
        if (w > 0) {
            done = (size_t)w;
            c->srv->stats.bytes_out += done;
            c->write_since = c->active_at = uv_now(c->srv->loop);
        }
        if (done == n) { /* keep the buffer for the next replies unless a big one grew it */
            if (c->out.sb.alloc > GKV_OUT_KEEP) {
                gkv_wr_fini(&c->out);
                gkv_wr_init(&c->out);
            }
            gkv_wr_reset(&c->out);
            return;
        }
    }
    char *bytes = msgpack_sbuffer_release(&c->out.sb);
    submit(c, bytes + done, n - done, bytes, false);
}

/* Gets a staging buffer or queues for one. False when the caller must wait (or c closes). */
static bool take_stage(gkv_conn_t *c)
{
    c->stage = gkv_staging_get(&c->srv->staging, &c->waiter);
    if (c->stage)
        return true;
    if (c->waiter.queued) {
        if (!c->waiting_stage)
            c->srv->stats.staging_waits++;
        c->waiting_stage = true;
        return false;
    }
    GKV_ERROR("conn %llu: no staging buffer could be allocated", (unsigned long long)c->id);
    gkv_conn_close(c, false);
    return false;
}

/* After starting a backend copy on device d (counted by gkv_conn_copy_begin, copy_busy set
 * before the call: its completion may be queued before the call returns): rc is what the start
 * returned (GKV_ECLOSED: c was closing, nothing started); on failure closes c. */
static void copy_started(gkv_conn_t *c, gkv_device_t *d, int rc)
{
    if (!rc) {
        gkv_poller_arm(&d->poller);
        return;
    }
    if (rc != GKV_ECLOSED)
        gkv_conn_copy_unbegin(c);
    c->copy_busy = false;
    gkv_conn_close(c, false);
}

/* While stage's chunk goes out, copies the segment's next chunk into spare (or a free staging
 * buffer) when there is one: the socket and the copy overlap (on the host backend the copy is a
 * memcpy done at once; the same path runs, so CI covers it). */
static void copy_ahead(gkv_conn_t *c, void *spare)
{
    gkv_server_t *srv = c->srv;
    gkv_segment_t *s = &c->segs[c->seg_i];
    uint64_t next = c->seg_pos + c->chunk;
    bool want = next < s->len && !c->closing;
    if (want && !spare)
        spare = gkv_staging_try(&srv->staging);
    if (!want || !spare) {
        if (spare)
            gkv_staging_put(&srv->staging, spare);
        return;
    }
    uint64_t left = s->len - next;
    c->ahead = spare;
    c->ahead_len = left < GKV_STAGING_CHUNK ? (size_t)left : GKV_STAGING_CHUNK;
    c->ahead_busy = true;
    gkv_device_t *d = gkv_devices_of(&srv->devs, s->entry);
    int rc = !gkv_conn_copy_begin(c)
                 ? GKV_ECLOSED
                 : d->be->ops->copy_out(d->be, spare, s->entry->mem, s->off + next, c->ahead_len,
                                        c->lane, &c->copy);
    if (rc) {
        c->ahead_busy = false;
        gkv_conn_release_ahead(c);
    }
    copy_started(c, d, rc);
}

void gkv_conn_send_step(gkv_conn_t *c)
{
    gkv_server_t *srv = c->srv;
    while (c->seg_i < c->nsegs && c->seg_pos == c->segs[c->seg_i].len) {
        gkv_store_unref(&srv->store, c->segs[c->seg_i].entry);
        c->seg_i++;
        c->seg_pos = 0;
    }
    if (c->tail_busy)
        return; /* on_write comes back when the piece before is out */
    if (c->seg_i == c->nsegs) {
        if (c->segs != &c->one)
            free(c->segs);
        c->segs = NULL;
        c->nsegs = c->seg_i = 0;
        c->state = CONN_HEADER;
        gkv_conn_op_done(c, 0);
        gkv_conn_release_stage(c);
        gkv_conn_narrow_sndbuf(c);
        gkv_conn_drive(c);
        return;
    }
    if (c->held)
        return; /* replies before this one are held; gkv_conn_resume comes back here */
    gkv_conn_flush(c);
    if (c->closing)
        return;     /* the flush failed (the client went away): nothing more starts */
    if (c->ahead) { /* the next chunk was copied while the last one went out */
        if (c->ahead_busy) {
            c->copy_busy = true; /* its completion comes back here */
            return;
        }
        void *spare = c->stage;
        c->stage = c->ahead;
        c->chunk = c->ahead_len;
        c->sent = 0;
        c->ahead = NULL;
        c->ahead_len = 0;
        copy_ahead(c, spare);
        if (!c->closing)
            push_chunk(c);
        return;
    }
    if (!c->stage && !take_stage(c))
        return;
    gkv_segment_t *s = &c->segs[c->seg_i];
    gkv_device_t *d = gkv_devices_of(&srv->devs, s->entry);
    gkv_batch_start_writes(&d->batcher); /* the lane copy waits for them in the backend */
    uint64_t left = s->len - c->seg_pos;
    c->chunk = left < GKV_STAGING_CHUNK ? (size_t)left : GKV_STAGING_CHUNK;
    c->sent = 0;
    c->copy_busy = true;
    copy_started(c, d,
                 !gkv_conn_copy_begin(c)
                     ? GKV_ECLOSED
                     : d->be->ops->copy_out(d->be, c->stage, s->entry->mem, s->off + c->seg_pos,
                                            c->chunk, c->lane, &c->copy));
}

/* True when the copy batches of the devices rep's segments are on have room for them. */
static bool batch_room(gkv_server_t *srv, const gkv_reply_t *rep)
{
    uint32_t n[GKV_MAX_DEVICES] = {0};
    uint64_t bytes[GKV_MAX_DEVICES] = {0};
    for (uint32_t i = 0; i < rep->nsegs; i++) {
        n[rep->segs[i].entry->dev]++;
        bytes[rep->segs[i].entry->dev] += rep->segs[i].len;
    }
    for (unsigned d = 0; d < srv->devs.n; d++)
        if (n[d] && !gkv_batch_out_room(&srv->devs.dev[d].batcher, n[d], bytes[d]))
            return false;
    return true;
}

/* Small replies: the reply buffer keeps room for the bytes, which the next copy batches bring
 * (those of the devices the values are on). False when a batch is full. */
static bool send_batched(gkv_conn_t *c, gkv_reply_t *rep, uint64_t total)
{
    static const char zeros[GKV_BATCH_VALUE_MAX];
    if (total > GKV_BATCH_VALUE_MAX || !batch_room(c->srv, rep))
        return false;
    uint64_t at = c->out.sb.size;
    if (msgpack_sbuffer_write(&c->out.sb, zeros, (size_t)total))
        c->out.failed = true; /* the connection closes once the batch is done */
    for (uint32_t i = 0; i < rep->nsegs; i++) {
        gkv_segment_t *s = &rep->segs[i];
        gkv_batcher_t *b = &gkv_devices_of(&c->srv->devs, s->entry)->batcher;
        gkv_batch_out(b, s->entry, s->off, (uint32_t)s->len, c, at); /* takes the reference */
        at += s->len;
        c->held++;
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
    if (--c->held == 0)
        gkv_conn_resume(c);
}

/* A GET of a value with a host copy (hostcopy.h): its bytes go into the reply at once. */
static bool send_copied(gkv_conn_t *c, gkv_reply_t *rep)
{
    gkv_store_t *st = &c->srv->store;
    uint64_t len;
    const uint8_t *bytes;
    if (rep->nsegs != 1 || !(bytes = gkv_hostcopy_get(&st->hc, rep->one.entry, &len)))
        return false;
    if (msgpack_sbuffer_write(&c->out.sb, (const char *)bytes + rep->one.off, (size_t)rep->one.len))
        c->out.failed = true; /* gkv_conn_flush closes the connection */
    gkv_store_unref(st, rep->one.entry);
    rep->segs = NULL;
    rep->nsegs = 0;
    return true;
}

/* A Unix socket's writer has only its send buffer in flight (208 KiB by default), so a reply
 * of megabytes went out one buffer per loop turn and client wake-up. While a connection sends
 * a value of WIDE_FROM or more through staging its buffer is raised to one staging chunk. At
 * most GKV_STAGING_MAX connections at once have it raised, so the kernel memory this can add
 * is bounded (128 MiB); the buffer is restored when the reply is out. TCP sockets keep the
 * kernel's autotuning, which setting SO_SNDBUF would turn off. */
#define WIDE_FROM (1u << 20)

static void widen_sndbuf(gkv_conn_t *c, uint64_t total)
{
    gkv_server_t *srv = c->srv;
    int fd, was, want = GKV_STAGING_CHUNK;
    socklen_t len = sizeof(was);
    if (!c->local || total < WIDE_FROM || c->narrow_sndbuf ||
        srv->wide_sndbufs >= GKV_STAGING_MAX || uv_fileno(&c->h.handle, &fd) ||
        getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &was, &len) || was >= want ||
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &want, sizeof(want)))
        return;
    c->narrow_sndbuf = was / 2 > 0 ? was / 2 : 1; /* getsockopt reports twice what was set */
    srv->wide_sndbufs++;
}

void gkv_conn_narrow_sndbuf(gkv_conn_t *c)
{
    int fd;
    if (!c->narrow_sndbuf)
        return;
    if (!uv_fileno(&c->h.handle, &fd))
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &c->narrow_sndbuf, sizeof(c->narrow_sndbuf));
    c->narrow_sndbuf = 0;
    c->srv->wide_sndbufs--;
}

void gkv_conn_send(gkv_conn_t *c, gkv_reply_t *rep)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < rep->nsegs; i++)
        total += rep->segs[i].len;
    if (send_copied(c, rep) || send_batched(c, rep, total))
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
    widen_sndbuf(c, total);
    gkv_conn_send_step(c);
}

/* Hands the copied chunk to the socket: as much as it takes now, then one piece at a time
 * through tail. Goes on with the next chunk once all of it went out. */
static void push_chunk(gkv_conn_t *c)
{
    uint8_t *stage = c->stage;
    while (c->sent < c->chunk && !c->tail_busy) {
        uv_buf_t b = uv_buf_init((char *)stage + c->sent, (unsigned)(c->chunk - c->sent));
        int n = uv_try_write(&c->h.stream, &b, 1);
        if (n > 0) {
            c->sent += (size_t)n;
            c->srv->stats.bytes_out += (uint64_t)n;
            c->write_since = c->active_at = uv_now(c->srv->loop);
            continue;
        }
        if (n != UV_EAGAIN && n != 0) {
            GKV_DEBUG("conn %llu: write failed: %s", (unsigned long long)c->id, uv_strerror(n));
            gkv_conn_close(c, false);
            return;
        }
        if (!c->tail && !(c->tail = malloc(GKV_SEND_TAIL))) {
            gkv_conn_close(c, false);
            return;
        }
        size_t t = c->chunk - c->sent < GKV_SEND_TAIL ? c->chunk - c->sent : GKV_SEND_TAIL;
        memcpy(c->tail, stage + c->sent, t);
        c->sent += t;
        c->tail_busy = true;
        submit(c, (char *)c->tail, t, NULL, true);
    }
    if (c->sent < c->chunk || c->closing)
        return; /* on_write comes back */
    c->seg_pos += c->chunk;
    c->chunk = c->sent = 0;
    gkv_conn_send_step(c);
}

static void start_flight(gkv_conn_t *c, bool overlap);

bool gkv_conn_yield_stage(gkv_conn_t *c)
{
    if (!c->stage || c->copy_busy || c->flight || c->ahead_busy || c->closing)
        return false;
    if (c->state == CONN_SEND && c->tail_busy) {
        /* The socket is full: what was not sent yet is copied out again later. */
        c->seg_pos += c->sent;
        c->chunk = c->sent = 0;
        gkv_conn_release_stage(c);
        gkv_conn_release_ahead(c);
        return true;
    }
    if (c->state == CONN_PAYLOAD && c->stage_fill) {
        /* The bytes that came go into the value now; drive() then gives the buffer back. */
        start_flight(c, false);
        return true;
    }
    return false;
}

void gkv_conn_chunk_copied(gkv_conn_t *c)
{
    if (c->state == CONN_SEND) {
        gkv_segment_t *s = &c->segs[c->seg_i];
        if (s->off == 0 && c->seg_pos == 0 && c->chunk == s->entry->size) /* the whole value */
            gkv_hostcopy_put(&c->srv->store.hc, s->entry, c->stage, c->chunk);
        copy_ahead(c, NULL);
        if (!c->closing)
            push_chunk(c);
        return;
    }
    gkv_conn_drive(c); /* gkv_conn_flight_landed counted the chunk */
}

void gkv_conn_flight_landed(gkv_conn_t *c)
{
    c->recv_got += c->flight_len;
    c->flight_len = 0;
    if (c->stage || c->closing || c->state != CONN_PAYLOAD) {
        put_back(c, &c->flight);
        return;
    }
    if (c->waiting_stage) { /* this one will do */
        gkv_staging_cancel(&c->srv->staging, &c->waiter);
        c->waiting_stage = false;
    }
    c->stage = c->flight;
    c->flight = NULL;
}

/* Starts copying stage's bytes into the value as the flight. With overlap, reading goes on into
 * a second buffer meanwhile when one is free; otherwise c waits for the copy (copy_busy). */
static void start_flight(gkv_conn_t *c, bool overlap)
{
    gkv_server_t *srv = c->srv;
    c->flight = c->stage;
    c->flight_len = c->stage_fill;
    c->stage = NULL;
    c->stage_fill = 0;
    if (overlap && payload_pending(c))
        c->stage = gkv_staging_try(&srv->staging);
    c->copy_busy = !c->stage;
    gkv_device_t *d = gkv_devices_of(&srv->devs, c->recv);
    int rc = !gkv_conn_copy_begin(c)
                 ? GKV_ECLOSED
                 : d->be->ops->copy_in(d->be, c->recv->mem, c->recv_got, c->flight, c->flight_len,
                                       c->lane, &c->copy);
    if (rc) { /* nothing is in flight after all */
        c->flight_len = 0;
        put_back(c, &c->flight);
    }
    copy_started(c, d, rc);
}

/* SET payload. */

/* The payload's command has answered (rc): c drops the entry and reads the next header. */
static void recv_end(gkv_conn_t *c, int rc)
{
    gkv_conn_op_done(c, rc);
    gkv_store_unref(&c->srv->store, c->recv);
    c->recv = NULL;
    c->state = CONN_HEADER;
    c->frame_since = 0;
}

static void recv_commit(gkv_conn_t *c)
{
    recv_end(
        c, c->recv_cmd->on_payload(&c->srv->cmd, c->req_id, c->recv, c->recv_flags, &c->out, NULL));
    gkv_conn_release_stage(c);
}

/* A small SET: once the whole payload is in, its bytes go into the copy batch and the value is
 * published and answered at once; the batch copies it before anything else can read it
 * (batch.h). Returns like gkv_conn_recv_step. */
static bool recv_batched(gkv_conn_t *c)
{
    gkv_server_t *srv = c->srv;
    gkv_entry_t *e = c->recv, *holder = NULL;
    uint32_t size = (uint32_t)e->size;
    if (c->in_len - c->in_pos < size)
        return false; /* the input buffer (64 KiB at least) holds a whole small payload */
    gkv_batcher_t *b = &gkv_devices_of(&srv->devs, e)->batcher; /* holder's too: e's value moves */
    void *dst = gkv_batch_in_reserve(b, size, &c->bwaiter);
    if (!dst) {
        c->waiting_batch = true;
        return false;
    }
    memcpy(dst, c->in + c->in_pos, size);
    c->in_pos += size;
    int rc = c->recv_cmd->on_payload(&srv->cmd, c->req_id, e, c->recv_flags, &c->out, &holder);
    if (rc == 0) {
        gkv_batch_in_commit(b, holder);
        gkv_hostcopy_put(&srv->store.hc, holder, dst, size);
    }
    recv_end(c, rc);
    return true;
}

/* A larger SET's last chunk, in stage, every chunk before it copied: like a small SET, the
 * value is published and answered at once and the chunk joins the copy batch (batch.h) as a
 * bulk copy that takes the buffer over. The value was allocated in the batches' order when it
 * is one chunk (conn.c); earlier chunks' copies have finished. Returns like gkv_conn_recv_step. */
static bool recv_bulk(gkv_conn_t *c)
{
    gkv_server_t *srv = c->srv;
    gkv_batcher_t *b =
        &gkv_devices_of(&srv->devs, c->recv)->batcher; /* holder's too: the value moves */
    if (!gkv_batch_bulk_room(b, &c->bwaiter)) {
        c->waiting_batch = true;
        return false;
    }
    gkv_entry_t *e = c->recv, *holder = NULL;
    void *stage = c->stage;
    uint64_t off = c->recv_got, len = c->stage_fill;
    c->stage = NULL;
    c->stage_fill = 0;
    int rc = c->recv_cmd->on_payload(&srv->cmd, c->req_id, e, c->recv_flags, &c->out, &holder);
    /* No host copy here: copying 64 KiB cost a SET more (3-6 us on the H100) than the first
     * GET's read-through costs; small values' copies (recv_batched) cost well under 1 us. */
    if (rc == 0) /* holder holds the memory the chunks before went to (store.h) */
        gkv_batch_in_bulk(b, holder, off, stage, len);
    else
        gkv_staging_put(&srv->staging, stage);
    recv_end(c, rc);
    return true;
}

uint8_t *gkv_conn_read_target(gkv_conn_t *c, size_t *len)
{
    c->read_to_stage = false;
    gkv_entry_t *e = c->recv;
    if (c->state != CONN_PAYLOAD || !e || e->size <= GKV_BATCH_VALUE_MAX || c->copy_busy ||
        c->in_pos != c->in_len)
        return NULL;
    uint64_t pending = payload_pending(c);
    if (!pending || c->stage_fill == GKV_STAGING_CHUNK)
        return NULL;
    if (!c->stage && !(c->stage = gkv_staging_try(&c->srv->staging)))
        return NULL; /* the input buffer takes it; a buffer is waited for in line later */
    size_t room = GKV_STAGING_CHUNK - c->stage_fill;
    *len = pending < room ? (size_t)pending : room;
    c->read_to_stage = true;
    return (uint8_t *)c->stage + c->stage_fill;
}

bool gkv_conn_recv_step(gkv_conn_t *c)
{
    gkv_entry_t *e = c->recv;
    if (e->size <= GKV_BATCH_VALUE_MAX)
        return recv_batched(c);
    uint64_t pending = payload_pending(c);
    size_t avail = c->in_len - c->in_pos;
    if (pending && avail && c->stage_fill < GKV_STAGING_CHUNK) {
        if (!c->stage && !take_stage(c))
            return false;
        size_t n = avail < pending ? avail : (size_t)pending;
        size_t room = GKV_STAGING_CHUNK - c->stage_fill;
        if (n > room)
            n = room;
        memcpy((uint8_t *)c->stage + c->stage_fill, c->in + c->in_pos, n);
        c->stage_fill += n;
        c->in_pos += n;
        pending -= n;
    }
    if (c->stage_fill == GKV_STAGING_CHUNK || (!pending && c->stage_fill)) {
        if (c->flight) { /* one copy at a time, in order: wait for the one before */
            c->copy_busy = true;
            return false;
        }
        if (!pending)
            return recv_bulk(c);
        start_flight(c, true);
        return !c->copy_busy && !c->closing;
    }
    if (!pending) {
        if (c->flight) {
            c->copy_busy = true;
            return false;
        }
        recv_commit(c);
        return true;
    }
    return false; /* all the input went into stage, which has room: wait for more */
}
