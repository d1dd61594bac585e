/* batch.c: gathering small copies into batches; see batch.h. Buffers form a ring: the open one
 * fills, started ones complete in the order they were started (one backend stream). */
#include "batch.h"

#include <string.h>
#include <time.h>

#include "error.h"
#include "journal.h"
#include "log.h"

#define ALIGN 16u /* pieces start 16-byte aligned: the copy kernel then moves 16 bytes a step */
#define BUF_SIZE (GKV_BATCH_BYTES + 2u * GKV_BATCH_PIECES * sizeof(gkv_piece_t))

static uint32_t align_up(uint32_t v)
{
    return (v + ALIGN - 1) & ~(ALIGN - 1);
}

static void on_wake(uv_async_t *a);

static void batch_finished_any_thread(gkv_copy_t *op, int status)
{
    gkv_batch_buf_t *bb = op->arg;
    gkv_batcher_t *b = bb->owner;
    bb->status = status;
    atomic_store(&bb->finished, 1);
    if (uv_is_closing((uv_handle_t *)&b->wake))
        return; /* shutting down: gkv_batcher_fini drops what is left */
    if (gkv_backend_polling())
        on_wake(&b->wake); /* on the loop thread already */
    else
        uv_async_send(&b->wake);
}

/* Drops the references bb holds on the values it writes (in pieces, bulk copies), once: each is
 * cleared as it goes. True when there was any. */
static bool drop_written(gkv_batcher_t *b, gkv_batch_buf_t *bb)
{
    bool any = false;
    for (uint32_t i = 0; i < bb->nin; i++)
        if (bb->in_refs[i].entry) {
            gkv_store_unref(b->st, bb->in_refs[i].entry);
            bb->in_refs[i].entry = NULL;
            any = true;
        }
    for (uint32_t i = 0; i < bb->nbulk; i++)
        if (bb->bulk_refs[i]) {
            gkv_store_unref(b->st, bb->bulk_refs[i]);
            bb->bulk_refs[i] = NULL;
            any = true;
        }
    return any;
}

/* Drops bb's references and, when deliver, hands out its out pieces (status: what the copy
 * reported). bb must still count as busy: deliveries may fill other buffers. */
static void finish_buf(gkv_batcher_t *b, gkv_batch_buf_t *bb, int status, bool deliver)
{
    for (uint32_t i = 0; i < bb->nout; i++) {
        gkv_batch_ref_t *r = &bb->out_refs[i];
        const uint8_t *bytes = bb->buf + bb->out[i].host_off;
        if (deliver)
            b->deliver(r->sink, r->tag, bytes, bb->out[i].len, status);
        if (deliver && !status && bb->out[i].dev == r->entry->mem.v &&
            bb->out[i].len == r->entry->size) /* a whole value read: keep a host copy */
            gkv_hostcopy_put(&b->st->hc, r->entry, bytes, bb->out[i].len);
        gkv_store_unref(b->st, r->entry);
    }
    (void)drop_written(b, bb);
    for (uint32_t i = 0; i < bb->nbulk; i++)
        gkv_staging_put(b->staging, (void *)bb->bulk[i].host);
    bb->nin = bb->nout = bb->nbulk = bb->fill = 0;
}

/* The open buffer takes a write: it holds the journal's commit back until its copies run. */
static void pin(gkv_batcher_t *b, gkv_batch_buf_t *bb)
{
    if (b->journal && !bb->pinned) {
        bb->pin = gkv_journal_pin(b->journal);
        bb->pinned = true;
    }
}

static void unpin(gkv_batcher_t *b, gkv_batch_buf_t *bb)
{
    if (!bb->pinned)
        return;
    bb->pinned = false;
    if (b->journal) {
        gkv_journal_unpin(b->journal, bb->pin);
        b->committed(b->committed_ctx);
    }
}

/* Starts the open batch and opens the next buffer of the ring if it is free. */
static void start_open(gkv_batcher_t *b)
{
    if (b->open < 0)
        return;
    gkv_batch_buf_t *bb = &b->bufs[b->open];
    if (!bb->nin && !bb->nout && !bb->nbulk) {
        unpin(b, bb); /* a write reserved room and then gave it up */
        return;
    }
    bb->busy = true;
    atomic_store(&bb->finished, 0);
    b->batches++;
    b->pieces += bb->nin + bb->nout + bb->nbulk;
    int rc = b->be->ops->copy_batch(b->be, bb->buf, bb->in, bb->nin, bb->out, bb->nout, bb->bulk,
                                    bb->nbulk, &bb->op);
    if (!rc) {
        gkv_poller_arm(b->poller);
    } else {
        /* Nothing was queued: report it as this batch's result, in order, from the loop. */
        GKV_ERROR("batch of %u copies could not start: %s", bb->nin + bb->nout + bb->nbulk,
                  gkv_strerror(rc));
        bb->status = rc;
        atomic_store(&bb->finished, 1);
        uv_async_send(&b->wake);
    }
    int next = (b->open + 1) % GKV_BATCH_BUFS;
    b->open = b->bufs[next].busy ? -1 : next;
}

/* Every waiter tries again; those that find no room queue anew, after the rest. */
static void wake_waiters(gkv_batcher_t *b)
{
    gkv_waitq_t q = b->waiters;
    b->waiters = (gkv_waitq_t){NULL, NULL};
    gkv_waiter_t *w;
    while ((w = gkv_waitq_pop(&q)))
        w->ready(w);
}

static void on_wake(uv_async_t *a)
{
    gkv_batcher_t *b = a->data;
    bool freed = false;
    for (;;) {
        gkv_batch_buf_t *bb = &b->bufs[b->next_done];
        if (!bb->busy || !atomic_load(&bb->finished))
            break;
        if (bb->status)
            GKV_ERROR("batch copy failed: %s", gkv_strerror(bb->status));
        finish_buf(b, bb, bb->status, true);
        bb->busy = false;
        if (bb->status && bb->pinned && b->journal)
            gkv_journal_break(b->journal); /* its records would name bytes never written */
        unpin(b, bb); /* its writes are in place: the records naming them commit */
        if (b->open < 0)
            b->open = b->next_done;
        b->next_done = (b->next_done + 1) % GKV_BATCH_BUFS;
        freed = true;
    }
    if (freed)
        wake_waiters(b);
}

static void on_prepare(uv_prepare_t *p)
{
    start_open(p->data);
}

int gkv_batcher_init(gkv_batcher_t *b, gkv_backend_t *be, gkv_store_t *st, uv_loop_t *loop,
                     gkv_poller_t *poller, gkv_staging_t *staging, gkv_batch_deliver_fn deliver)
{
    memset(b, 0, sizeof(*b));
    b->be = be;
    b->st = st;
    b->poller = poller;
    b->staging = staging;
    b->deliver = deliver;
    for (int i = 0; i < GKV_BATCH_BUFS; i++) {
        gkv_batch_buf_t *bb = &b->bufs[i];
        bb->owner = b;
        bb->buf = be->ops->staging_alloc(be, BUF_SIZE);
        if (!bb->buf) {
            gkv_batcher_fini(b);
            return GKV_ENOMEM;
        }
        bb->in = (gkv_piece_t *)(bb->buf + GKV_BATCH_BYTES);
        bb->out = bb->in + GKV_BATCH_PIECES;
        bb->op.done = batch_finished_any_thread;
        bb->op.arg = bb;
    }
    uv_prepare_init(loop, &b->prepare);
    b->prepare.data = b;
    uv_prepare_start(&b->prepare, on_prepare);
    uv_async_init(loop, &b->wake, on_wake);
    b->wake.data = b;
    b->ready = true;
    return 0;
}

void gkv_batcher_close(gkv_batcher_t *b)
{
    if (!b->ready || uv_is_closing((uv_handle_t *)&b->wake))
        return;
    uv_close((uv_handle_t *)&b->prepare, NULL);
    uv_close((uv_handle_t *)&b->wake, NULL);
}

void gkv_batcher_fini(gkv_batcher_t *b)
{
    if (b->ready)
        b->be->ops->batch_wait(b->be);
    for (int i = 0; i < GKV_BATCH_BUFS; i++) {
        gkv_batch_buf_t *bb = &b->bufs[i];
        if (!bb->buf)
            continue;
        /* A completion may still be on its way from the backend's thread. */
        while (bb->busy && !atomic_load(&bb->finished)) {
            gkv_backend_poll(b->be);
            if (!atomic_load(&bb->finished))
                nanosleep(&(struct timespec){0, 100000}, NULL);
        }
        finish_buf(b, bb, GKV_EIO, false); /* no connection is left to deliver to */
        unpin(b, bb);
        b->be->ops->staging_free(b->be, bb->buf, BUF_SIZE);
        bb->buf = NULL;
    }
    b->ready = false;
}

/* The open buffer once it has room for nin more in pieces, nout more out pieces with bytes more
 * payload bytes, and nbulk more bulk copies; a full open batch is started and the next buffer
 * tried. NULL when none has room. */
static gkv_batch_buf_t *open_room(gkv_batcher_t *b, uint32_t nin, uint32_t nout, uint64_t bytes,
                                  uint32_t nbulk)
{
    for (int tries = 0; tries < 2; tries++) {
        if (b->open < 0)
            return NULL;
        gkv_batch_buf_t *bb = &b->bufs[b->open];
        if (bb->nin + nin <= GKV_BATCH_PIECES && bb->nout + nout <= GKV_BATCH_PIECES &&
            bb->nbulk + nbulk <= GKV_BATCH_BULK &&
            align_up(bb->fill) + bytes + (uint64_t)ALIGN * nout <= GKV_BATCH_BYTES)
            return bb;
        start_open(b); /* full: send it on and try the next buffer */
    }
    return NULL;
}

bool gkv_batch_out_room(gkv_batcher_t *b, uint32_t pieces, uint64_t bytes)
{
    return open_room(b, 0, pieces, bytes, 0) != NULL;
}

void gkv_batch_out(gkv_batcher_t *b, gkv_entry_t *e, uint64_t off, uint32_t len, void *sink,
                   uint64_t tag)
{
    gkv_batch_buf_t *bb = &b->bufs[b->open];
    uint32_t at = align_up(bb->fill);
    bb->out[bb->nout] = (gkv_piece_t){e->mem.v + off, at, len};
    bb->out_refs[bb->nout++] = (gkv_batch_ref_t){e, sink, tag};
    bb->fill = at + len;
}

void *gkv_batch_in_reserve(gkv_batcher_t *b, uint32_t len, gkv_waiter_t *w)
{
    gkv_batch_buf_t *bb = open_room(b, 1, 0, len, 0);
    if (!bb) {
        gkv_waitq_push(&b->waiters, w);
        return NULL;
    }
    b->reserved = len;
    pin(b, bb);
    return bb->buf + align_up(bb->fill);
}

void gkv_batch_in_commit(gkv_batcher_t *b, gkv_entry_t *e)
{
    gkv_batch_buf_t *bb = &b->bufs[b->open];
    uint32_t at = align_up(bb->fill);
    gkv_store_ref(e);
    bb->in[bb->nin] = (gkv_piece_t){e->mem.v, at, b->reserved};
    bb->in_refs[bb->nin++] = (gkv_batch_ref_t){e, NULL, 0};
    bb->fill = at + b->reserved;
    b->reserved = 0;
}

void gkv_batch_cancel(gkv_batcher_t *b, gkv_waiter_t *w)
{
    gkv_waitq_remove(&b->waiters, w);
}

bool gkv_batch_bulk_room(gkv_batcher_t *b, gkv_waiter_t *w)
{
    gkv_batch_buf_t *bb = open_room(b, 0, 0, 0, 1);
    if (bb) {
        pin(b, bb);
        return true;
    }
    gkv_waitq_push(&b->waiters, w);
    return false;
}

void gkv_batch_in_bulk(gkv_batcher_t *b, gkv_entry_t *e, uint64_t off, void *stage, uint64_t len)
{
    gkv_batch_buf_t *bb = &b->bufs[b->open];
    gkv_store_ref(e);
    bb->bulk[bb->nbulk] = (gkv_bulk_t){e->mem.v + off, stage, len};
    bb->bulk_refs[bb->nbulk++] = e;
}

static bool has_writes(const gkv_batch_buf_t *bb)
{
    return bb->nin || bb->nbulk;
}

void gkv_batch_start_writes(gkv_batcher_t *b)
{
    if (b->open >= 0 && has_writes(&b->bufs[b->open]))
        start_open(b);
}

bool gkv_batch_writes_pending(gkv_batcher_t *b)
{
    gkv_batch_start_writes(b);
    for (int i = 0; i < GKV_BATCH_BUFS; i++) {
        gkv_batch_buf_t *bb = &b->bufs[i];
        if (bb->busy && has_writes(bb) && !atomic_load(&bb->finished))
            return true;
    }
    return false;
}

bool gkv_batch_release_written(gkv_batcher_t *b)
{
    bool any = false;
    for (int i = 0; i < GKV_BATCH_BUFS; i++) {
        gkv_batch_buf_t *bb = &b->bufs[i];
        if (bb->busy && atomic_load(&bb->finished) && !bb->status && drop_written(b, bb))
            any = true;
    }
    return any;
}
