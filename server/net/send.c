/* conn_transfer.c: a connection's bytes: replies written in order, values sent out and SET
 * payloads received. Values up to GKV_BATCH_VALUE_MAX move in copy batches (batch.h); larger
 * ones chunk by chunk through staging buffers, each chunk a backend copy, except a SET's last
 * chunk, which joins a copy batch. Every backend takes
 * this one path: the host backend's copies are memcpys that report at once. */
#include "conn_impl.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "error.h"
#include "log.h"
#include "trace.h"

/* One uv_write: replies (owned bytes) or a piece of a chunk copied into c->snd.tail. */
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
void gkv_conn_put_stage(gkv_conn_t *c, void **slot)
{
    void *p = *slot;
    *slot = NULL;
    if (p)
        gkv_staging_put(c->net->staging, p); /* may wake another connection: do it last */
}

void gkv_conn_release_stage(gkv_conn_t *c)
{
    c->stage_fill = 0;
    gkv_conn_put_stage(c, &c->stage);
}

void gkv_conn_release_ahead(gkv_conn_t *c)
{
    c->snd.ahead_len = 0;
    gkv_conn_put_stage(c, &c->snd.ahead);
}

static void on_write(uv_write_t *req, int status)
{
    out_req_t *r = (out_req_t *)req;
    gkv_conn_t *c = r->c;
    c->snd.pending -= r->bytes;
    c->snd.write_since = c->active_at = uv_now(c->net->loop);
    if (status == 0)
        c->net->stats.bytes_out += r->bytes;
    free(r->owned);
    bool tail = r->tail;
    free(r);
    if (tail)
        c->snd.tail_busy = false;
    if (c->closing)
        return;
    if (status < 0) {
        GKV_DEBUG("conn %llu: write failed: %s", (unsigned long long)c->id, uv_strerror(status));
        gkv_conn_close(c, false);
        return;
    }
    if (tail && c->phase == CONN_SEND && !c->wait.copy) {
        if (c->snd.chunk) /* copied (no copy is busy), not all sent */
            push_chunk(c);
        else
            gkv_conn_send_step(c); /* the chunk went out, or the buffer was given back */
    } else if (c->snd.pending <= c->net->set.output_limit / 4 &&
               (!c->reading || (c->phase == CONN_HEADER && c->in_pos < c->in_len))) {
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
    if (!c->snd.pending)
        c->snd.write_since = uv_now(c->net->loop);
    c->snd.pending += len;
    if (uv_write(&r->req, &c->h.stream, &r->buf, 1, on_write)) {
        c->snd.pending -= len;
        free(r->owned);
        free(r);
        gkv_conn_close(c, false);
    }
}

void gkv_conn_flush(gkv_conn_t *c)
{
    if (gkv_conn_held(c))
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
    gkv_trace("d_flush", n, c->snd.pending); /* GPUKV_TRACE: replies going out */
    if (!c->snd.pending) {
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
            c->net->stats.bytes_out += done;
            c->snd.write_since = c->active_at = uv_now(c->net->loop);
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
bool gkv_conn_take_stage(gkv_conn_t *c)
{
    c->stage = gkv_staging_get(c->net->staging, &c->waiter);
    if (c->stage)
        return true;
    if (c->waiter.queued) {
        if (!c->wait.stage)
            c->net->stats.staging_waits++;
        c->wait.stage = true;
        return false;
    }
    GKV_ERROR("conn %llu: no staging buffer could be allocated", (unsigned long long)c->id);
    gkv_conn_close(c, false);
    return false;
}

/* After starting a backend copy on device d (counted by gkv_conn_copy_begin, copy_busy set
 * before the call: its completion may be queued before the call returns): rc is what the start
 * returned (GKV_ECLOSED: c was closing, nothing started); on failure closes c. */
void gkv_conn_copy_started(gkv_conn_t *c, gkv_device_t *d, int rc)
{
    if (!rc) {
        gkv_poller_arm(&d->poller);
        return;
    }
    if (rc != GKV_ECLOSED)
        gkv_conn_copy_unbegin(c);
    c->wait.copy = false;
    gkv_conn_close(c, false);
}

/* Starts copying len bytes of s's value (on device d) from off into dst (c->copy reports). A
 * value in the host tier never comes here: it goes to the socket directly (send_step). */
static int seg_copy_out(gkv_conn_t *c, gkv_device_t *d, const gkv_segment_t *s, void *dst,
                        uint64_t off, size_t len)
{
    return !gkv_conn_copy_begin(c) ? GKV_ECLOSED
                                   : d->be->ops->copy_out(d->be, dst, s->entry->mem, s->off + off,
                                                          len, c->lane, &c->copy);
}

/* While stage's chunk goes out, copies the segment's next chunk into spare (or a free staging
 * buffer) when there is one: the socket and the copy overlap (on the host backend the copy is a
 * memcpy done at once; the same path runs, so CI covers it). */
static void copy_ahead(gkv_conn_t *c, void *spare)
{
    gkv_net_t *net = c->net;
    gkv_segment_t *s = &c->snd.segs[c->snd.seg_i];
    uint64_t next = c->snd.seg_pos + c->snd.chunk;
    bool want = next < s->len && !c->closing;
    if (want && !spare)
        spare = gkv_staging_try(net->staging);
    if (!want || !spare) {
        if (spare)
            gkv_staging_put(net->staging, spare);
        return;
    }
    uint64_t left = s->len - next;
    c->snd.ahead = spare;
    c->snd.ahead_len = left < GKV_STAGING_CHUNK ? (size_t)left : GKV_STAGING_CHUNK;
    c->snd.ahead_busy = true;
    gkv_device_t *d = gkv_devices_of(net->devs, s->entry);
    int rc = seg_copy_out(c, d, s, spare, next, c->snd.ahead_len);
    if (rc) {
        c->snd.ahead_busy = false;
        gkv_conn_release_ahead(c);
    }
    gkv_conn_copy_started(c, d, rc);
}

void gkv_conn_send_step(gkv_conn_t *c)
{
    gkv_net_t *net = c->net;
    while (c->snd.seg_i < c->snd.nsegs && c->snd.seg_pos == c->snd.segs[c->snd.seg_i].len) {
        gkv_store_unref(net->store, c->snd.segs[c->snd.seg_i].entry);
        c->snd.seg_i++;
        c->snd.seg_pos = 0;
    }
    if (c->snd.tail_busy)
        return; /* on_write comes back when the piece before is out */
    if (c->snd.seg_i == c->snd.nsegs) {
        if (c->snd.segs != &c->snd.one)
            free(c->snd.segs);
        c->snd.segs = NULL;
        c->snd.nsegs = c->snd.seg_i = 0;
        c->phase = CONN_HEADER;
        gkv_conn_op_done(c, 0);
        gkv_conn_release_stage(c);
        gkv_conn_narrow_sndbuf(c);
        gkv_conn_drive(c);
        return;
    }
    if (gkv_conn_held(c))
        return; /* replies before this one are held; gkv_conn_resume comes back here */
    gkv_conn_flush(c);
    if (c->closing)
        return;         /* the flush failed (the client went away): nothing more starts */
    if (c->snd.ahead) { /* the next chunk was copied while the last one went out */
        if (c->snd.ahead_busy) {
            c->wait.copy = true; /* its completion comes back here */
            return;
        }
        void *spare = c->stage;
        c->stage = c->snd.ahead;
        c->snd.chunk = c->snd.ahead_len;
        c->snd.sent = 0;
        c->snd.ahead = NULL;
        c->snd.ahead_len = 0;
        copy_ahead(c, spare);
        if (!c->closing)
            push_chunk(c);
        return;
    }
    gkv_segment_t *s = &c->snd.segs[c->snd.seg_i];
    if (gkv_store_in_tier(s->entry)) { /* host memory: the rest of it straight to the socket */
        gkv_backend_t *be = gkv_store_be(net->store, s->entry);
        c->snd.direct = (const uint8_t *)be->ops->host_view(be, s->entry->mem) + s->off +
                        c->snd.seg_pos;
        c->snd.chunk = (size_t)(s->len - c->snd.seg_pos);
        c->snd.sent = 0;
        push_chunk(c);
        return;
    }
    if (!c->stage && !gkv_conn_take_stage(c))
        return;
    gkv_device_t *d = gkv_devices_of(net->devs, s->entry);
    gkv_batch_start_writes(&d->batcher); /* the lane copy waits for them in the backend */
    uint64_t left = s->len - c->snd.seg_pos;
    c->snd.chunk = left < GKV_STAGING_CHUNK ? (size_t)left : GKV_STAGING_CHUNK;
    c->snd.sent = 0;
    c->wait.copy = true;
    gkv_conn_copy_started(c, d, seg_copy_out(c, d, s, c->stage, c->snd.seg_pos, c->snd.chunk));
}

/* True when the copy batches of the devices rep's segments are on have room for them (false
 * when one is in the host tier, which has no batches: its bytes go to the socket directly). */
static bool batch_room(gkv_net_t *net, const gkv_reply_t *rep)
{
    uint32_t n[GKV_MAX_DEVICES] = {0};
    uint64_t bytes[GKV_MAX_DEVICES] = {0};
    for (uint32_t i = 0; i < rep->nsegs; i++) {
        if (gkv_store_in_tier(rep->segs[i].entry))
            return false;
        n[rep->segs[i].entry->dev]++;
        bytes[rep->segs[i].entry->dev] += rep->segs[i].len;
    }
    for (unsigned d = 0; d < net->devs->n; d++)
        if (n[d] && !gkv_batch_out_room(&net->devs->dev[d].batcher, n[d], bytes[d]))
            return false;
    return true;
}

/* Small replies: the reply buffer keeps room for the bytes, which the next copy batches bring
 * (those of the devices the values are on). False when a batch is full. */
static bool send_batched(gkv_conn_t *c, gkv_reply_t *rep, uint64_t total)
{
    static const char zeros[GKV_BATCH_VALUE_MAX];
    if (total > GKV_BATCH_VALUE_MAX || !batch_room(c->net, rep))
        return false;
    uint64_t at = c->out.sb.size;
    if (msgpack_sbuffer_write(&c->out.sb, zeros, (size_t)total))
        c->out.failed = true; /* the connection closes once the batch is done */
    for (uint32_t i = 0; i < rep->nsegs; i++) {
        gkv_segment_t *s = &rep->segs[i];
        gkv_batcher_t *b = &gkv_devices_of(c->net->devs, s->entry)->batcher;
        gkv_batch_out(b, s->entry, s->off, (uint32_t)s->len, c, at); /* takes the reference */
        at += s->len;
        c->hold.batch++;
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
    if (--c->hold.batch == 0 && !gkv_conn_held(c))
        gkv_conn_resume(c);
}

/* A GET of a value with a host copy (hostcopy.h): its bytes go into the reply at once. */
static bool send_copied(gkv_conn_t *c, gkv_reply_t *rep)
{
    gkv_store_t *st = c->net->store;
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
    gkv_net_t *net = c->net;
    int fd, was, want = GKV_STAGING_CHUNK;
    socklen_t len = sizeof(was);
    if (!c->local || total < WIDE_FROM || c->snd.narrow_sndbuf ||
        net->wide_sndbufs >= GKV_STAGING_MAX || uv_fileno(&c->h.handle, &fd) ||
        getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &was, &len) || was >= want ||
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &want, sizeof(want)))
        return;
    c->snd.narrow_sndbuf = was / 2 > 0 ? was / 2 : 1; /* getsockopt reports twice what was set */
    net->wide_sndbufs++;
}

void gkv_conn_narrow_sndbuf(gkv_conn_t *c)
{
    int fd;
    if (!c->snd.narrow_sndbuf)
        return;
    if (!uv_fileno(&c->h.handle, &fd))
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &c->snd.narrow_sndbuf, sizeof(c->snd.narrow_sndbuf));
    c->snd.narrow_sndbuf = 0;
    c->net->wide_sndbufs--;
}

void gkv_conn_send(gkv_conn_t *c, gkv_reply_t *rep)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < rep->nsegs; i++)
        total += rep->segs[i].len;
    if (send_copied(c, rep) || send_batched(c, rep, total))
        return;
    if (rep->segs == &rep->one) {
        c->snd.one = rep->one;
        c->snd.segs = &c->snd.one;
    } else {
        c->snd.segs = rep->segs;
    }
    c->snd.nsegs = rep->nsegs;
    c->snd.seg_i = 0;
    c->snd.seg_pos = 0;
    rep->segs = NULL;
    rep->nsegs = 0;
    c->phase = CONN_SEND;
    widen_sndbuf(c, total);
    gkv_conn_send_step(c);
}

/* Hands the copied chunk to the socket: as much as it takes now, then one piece at a time
 * through tail. Goes on with the next chunk once all of it went out. */
static void push_chunk(gkv_conn_t *c)
{
    const uint8_t *stage = c->snd.direct ? c->snd.direct : c->stage;
    while (c->snd.sent < c->snd.chunk && !c->snd.tail_busy) {
        uv_buf_t b =
            uv_buf_init((char *)stage + c->snd.sent, (unsigned)(c->snd.chunk - c->snd.sent));
        int n = uv_try_write(&c->h.stream, &b, 1);
        if (n > 0) {
            c->snd.sent += (size_t)n;
            c->net->stats.bytes_out += (uint64_t)n;
            c->snd.write_since = c->active_at = uv_now(c->net->loop);
            continue;
        }
        if (n != UV_EAGAIN && n != 0) {
            GKV_DEBUG("conn %llu: write failed: %s", (unsigned long long)c->id, uv_strerror(n));
            gkv_conn_close(c, false);
            return;
        }
        if (!c->snd.tail && !(c->snd.tail = malloc(GKV_SEND_TAIL))) {
            gkv_conn_close(c, false);
            return;
        }
        size_t t =
            c->snd.chunk - c->snd.sent < GKV_SEND_TAIL ? c->snd.chunk - c->snd.sent : GKV_SEND_TAIL;
        memcpy(c->snd.tail, stage + c->snd.sent, t);
        c->snd.sent += t;
        c->snd.tail_busy = true;
        submit(c, (char *)c->snd.tail, t, NULL, true);
    }
    if (c->snd.sent < c->snd.chunk || c->closing)
        return; /* on_write comes back */
    c->snd.seg_pos += c->snd.chunk;
    c->snd.chunk = c->snd.sent = 0;
    c->snd.direct = NULL;
    gkv_conn_send_step(c);
}

void gkv_conn_start_flight(gkv_conn_t *c, bool overlap);

bool gkv_conn_yield_stage(gkv_conn_t *c)
{
    if (!c->stage || c->wait.copy || c->rcv.flight || c->snd.ahead_busy || c->closing)
        return false;
    if (c->phase == CONN_SEND && c->snd.tail_busy) {
        /* The socket is full: what was not sent yet is copied out again later. */
        c->snd.seg_pos += c->snd.sent;
        c->snd.chunk = c->snd.sent = 0;
        gkv_conn_release_stage(c);
        gkv_conn_release_ahead(c);
        return true;
    }
    if (c->phase == CONN_PAYLOAD && c->stage_fill) {
        /* The bytes that came go into the value now; drive() then gives the buffer back. */
        gkv_conn_start_flight(c, false);
        return true;
    }
    return false;
}

void gkv_conn_chunk_copied(gkv_conn_t *c)
{
    if (c->phase == CONN_SEND) {
        gkv_segment_t *s = &c->snd.segs[c->snd.seg_i];
        if (s->off == 0 && c->snd.seg_pos == 0 &&
            c->snd.chunk == s->entry->size) /* the whole value */
            gkv_hostcopy_put(&c->net->store->hc, s->entry, c->stage, c->snd.chunk);
        copy_ahead(c, NULL);
        if (!c->closing)
            push_chunk(c);
        return;
    }
    gkv_conn_drive(c); /* gkv_conn_flight_landed counted the chunk */
}

/* SET payload. */
