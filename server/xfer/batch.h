/* batch.h: small-value copies gathered per loop iteration (the host backend runs the same
 * batches, done at once). The bytes that one iteration's requests
 * move, small SET payloads in and small GET replies out, go into one pinned buffer and move with
 * one backend call and one completion, where a copy per request would cost a driver call and a
 * completion each. A SET is answered as soon as its bytes are in the batch: later batches run
 * after it, lane copies wait for it (backend), and a MAP's reply waits for it
 * (gkv_batch_writes_pending). The last chunk of a larger SET joins a batch too, as a bulk copy
 * from its own staging buffer (gkv_batch_in_bulk), and is answered the same way: its reply does
 * not wait for a GPU round trip either. */
#ifndef GKV_SERVER_BATCH_H
#define GKV_SERVER_BATCH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "backend.h"
#include "poller.h"
#include "staging.h"
#include "store.h"
#include "waitq.h"

#define GKV_BATCH_VALUE_MAX (16u << 10) /* values and GET replies up to this size go here */
#define GKV_BATCH_BYTES (2u << 20)      /* payload bytes per batch */
#define GKV_BATCH_PIECES 1024           /* copies per direction per batch */
#define GKV_BATCH_BUFS 4                /* one filling, up to three in flight */
#define GKV_BATCH_BULK 16               /* bulk copies (staging buffers) per batch */

/* Where an out piece's bytes go, called on the loop thread once its batch is done. tag is the
 * caller's; status 0 or a negative code (bytes then undefined). */
typedef void (*gkv_batch_deliver_fn)(void *sink, uint64_t tag, const void *bytes, uint32_t len,
                                     int status);

typedef struct {
    gkv_entry_t *entry; /* one reference, dropped when the batch is done */
    void *sink;         /* out pieces: who gets the bytes; NULL for in pieces */
    uint64_t tag;
} gkv_batch_ref_t;

typedef struct gkv_batch_buf {
    struct gkv_batcher *owner;
    uint8_t *buf;          /* staging memory: payload, then the in and out piece arrays */
    gkv_piece_t *in, *out; /* inside buf */
    gkv_batch_ref_t in_refs[GKV_BATCH_PIECES], out_refs[GKV_BATCH_PIECES];
    gkv_bulk_t bulk[GKV_BATCH_BULK];        /* host: a staging buffer, given back when done */
    gkv_entry_t *bulk_refs[GKV_BATCH_BULK]; /* one reference each */
    uint32_t nin, nout, nbulk, fill;
    gkv_copy_t op;
    atomic_int finished; /* set by the completion (any thread) */
    int status;
    bool busy;   /* started, not yet finished on the loop */
    bool pinned; /* holds the journal's pin (a write joined it) */
    uint64_t pin;
} gkv_batch_buf_t;

typedef struct gkv_batcher {
    gkv_backend_t *be;      /* borrowed */
    gkv_store_t *st;        /* borrowed */
    gkv_poller_t *poller;   /* borrowed: armed as each batch starts */
    gkv_staging_t *staging; /* borrowed: where bulk copies' buffers go back */
    gkv_batch_deliver_fn deliver;
    gkv_batch_buf_t bufs[GKV_BATCH_BUFS];
    int open;                 /* the buffer being filled, -1 when all are busy */
    int next_done;            /* the oldest busy buffer (completions come in order) */
    uint32_t reserved;        /* gkv_batch_in_reserve: bytes promised to the next in_commit */
    uv_prepare_t prepare;     /* starts the filled batch before the loop blocks */
    uv_async_t wake;          /* completions */
    gkv_waitq_t waiters;      /* ready: room may be free, reserve again */
    uint64_t batches, pieces; /* INFO */
    bool ready;
    /* With the fd store (fdstore.h): the journal, borrowed, or NULL. A buffer pins it when its
     * first write is reserved (before that SET's record is appended) and unpins it once its
     * copies have run; committed(ctx) is called after each unpin. */
    struct gkv_journal *journal;
    void (*committed)(void *ctx);
    void *committed_ctx;
} gkv_batcher_t;

/* Sets b up over be, st, poller and staging (borrowed, must outlive b) with handles on loop.
 * deliver receives the bytes of out pieces. Returns 0, or GKV_ENOMEM when staging memory cannot
 * be had. */
int gkv_batcher_init(gkv_batcher_t *b, gkv_backend_t *be, gkv_store_t *st, uv_loop_t *loop,
                     gkv_poller_t *poller, gkv_staging_t *staging, gkv_batch_deliver_fn deliver);
/* Starts closing b's handles (the loop must then run out). */
void gkv_batcher_close(gkv_batcher_t *b);
/* After the loop ran out: waits for the backend, drops what is left, frees the buffers. */
void gkv_batcher_fini(gkv_batcher_t *b);

/* True when the open batch has room for `pieces` more out pieces and `bytes` more bytes (a full
 * open batch is started and the next buffer tried). */
bool gkv_batch_out_room(gkv_batcher_t *b, uint32_t pieces, uint64_t bytes);
/* Queues a copy of len bytes of e's value at off to sink/tag. Takes over the caller's
 * reference on e. Call only after gkv_batch_out_room said yes for it. */
void gkv_batch_out(gkv_batcher_t *b, gkv_entry_t *e, uint64_t off, uint32_t len, void *sink,
                   uint64_t tag);
/* Room for an in piece of len bytes: where to put the bytes (valid until gkv_batch_in_commit or
 * the end of this callback), or NULL when full: then w (borrowed until its ready runs or
 * gkv_batch_cancel) is queued. */
void *gkv_batch_in_reserve(gkv_batcher_t *b, uint32_t len, gkv_waiter_t *w);
/* Makes the reserved bytes e's value (copied to e's memory at offset 0). Holds its own
 * reference on e until done. Without a commit the reservation is simply dropped. */
void gkv_batch_in_commit(gkv_batcher_t *b, gkv_entry_t *e);
void gkv_batch_cancel(gkv_batcher_t *b, gkv_waiter_t *w);
/* True when the open batch can take one more bulk copy (gkv_batch_in_bulk); else w (borrowed
 * until its ready runs or gkv_batch_cancel) is queued. */
bool gkv_batch_bulk_room(gkv_batcher_t *b, gkv_waiter_t *w);
/* Makes len bytes at stage (a buffer from b's staging pool, handed over: put back once the
 * batch is done) e's bytes at off. Holds its own reference on e until done. Call only after
 * gkv_batch_bulk_room said yes, in the same callback. */
void gkv_batch_in_bulk(gkv_batcher_t *b, gkv_entry_t *e, uint64_t off, void *stage, uint64_t len);
/* Drops the references that batches whose copies have run but whose completion the loop has
 * not taken yet (it comes through an async wake-up, a later turn) hold on the values they
 * wrote: those values may be evicted or moved to a tier now. Delivering read pieces, staging
 * buffers and waiters stay for the completion, so this runs nothing else (safe inside the
 * store's make_room). True when it let go of any. */
bool gkv_batch_release_written(gkv_batcher_t *b);
/* Starts the open batch now if it has writes: before a copy outside batches reads a value. */
void gkv_batch_start_writes(gkv_batcher_t *b);
/* Starts the open batch if it has writes; true when a started batch with writes has not yet
 * finished. A MAP then has its reply wait for the batches (backend fence_shared): the value may
 * have been answered before it was copied. */
bool gkv_batch_writes_pending(gkv_batcher_t *b);

#endif
