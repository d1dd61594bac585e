/* buffers.h: a connection's registered buffers (BUFFER; PROTOCOL.md "Reading into a registered
 * buffer"): ranges of a client process's GPU memory, opened once in the daemon, that GET with
 * `into` writes values into with the daemon's own copies, so that a reader needs no import or
 * copy of its own per read. The connection owns the table; its handles close when a buffer is
 * dropped or the connection ends. */
#ifndef GKV_CMD_BUFFERS_H
#define GKV_CMD_BUFFERS_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"

/* Buffers one connection may register at once (more: LEASELIMIT). */
#define GKV_MAX_BUFFERS 16u

typedef struct {
    uint64_t id;       /* 0: a free slot */
    unsigned dev;      /* the daemon's device the memory is on (and was opened on) */
    gkv_devptr_t base; /* the client's allocation, opened here (backend foreign_open) */
    uint64_t off, len; /* the registered range: [base + off, base + off + len) */
} gkv_buffer_t;

typedef struct {
    gkv_buffer_t b[GKV_MAX_BUFFERS];
    unsigned n;       /* slots in use */
    uint64_t next_id; /* ids are never reused on a connection */
} gkv_buffers_t;

struct gkv_cmd_ctx;

void gkv_buffers_init(gkv_buffers_t *bs);
/* The connection's buffer with that id, or NULL. */
gkv_buffer_t *gkv_buffers_find(gkv_buffers_t *bs, uint64_t id);
/* Where byte `at` of b's range is, in the daemon's address space (at <= b->len). */
static inline gkv_devptr_t gkv_buffer_at(const gkv_buffer_t *b, uint64_t at)
{
    return (gkv_devptr_t){b->base.v + b->off + at};
}
/* Opens the CUDA IPC handle (len bytes) on device dev and registers [off, off + len) of it.
 * Returns 0 with *out the new buffer, or an error with rep's message set by the caller's
 * checks: GKV_ENOTSUP (the device's backend opens none), GKV_ELEASELIMIT (the table is full),
 * GKV_EINVAL (not a handle of memory on that device), GKV_ERANGE (the range lies outside the
 * allocation) or GKV_EIO. Nothing stays open on failure. */
int gkv_buffers_add(gkv_buffers_t *bs, struct gkv_cmd_ctx *ctx, unsigned dev, const uint8_t *handle,
                    uint32_t hlen, uint64_t off, uint64_t len, gkv_buffer_t **out,
                    uint64_t *alloc_size);
/* Drops b: its handle closes. Only when no copy into it is queued that has not run (a
 * connection runs its next request once the fence of a GET into has reported). */
void gkv_buffers_drop(gkv_buffers_t *bs, struct gkv_cmd_ctx *ctx, gkv_buffer_t *b);
/* Drops every buffer (the connection ends). */
void gkv_buffers_fini(gkv_buffers_t *bs, struct gkv_cmd_ctx *ctx);

#endif
