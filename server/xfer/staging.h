/* staging.h: a bounded pool of host staging buffers (pinned on the cuda backend) through which
 * values move between sockets and backend memory in chunks. When the pool is exhausted a
 * connection waits in line instead of allocating more. */
#ifndef GKV_SERVER_STAGING_H
#define GKV_SERVER_STAGING_H

#include <stddef.h>

#include "backend.h"
#include "waitq.h"

#define GKV_STAGING_CHUNK (4u << 20)
#define GKV_STAGING_MAX 32

typedef struct {
    gkv_backend_t *be; /* borrowed */
    void *free_bufs[GKV_STAGING_MAX];
    int nfree, ntotal;
    gkv_waitq_t waiters; /* ready: a buffer may be available, call gkv_staging_get again */
} gkv_staging_t;

void gkv_staging_init(gkv_staging_t *sp, gkv_backend_t *be);
/* Frees the idle buffers; every buffer must have been put back. */
void gkv_staging_fini(gkv_staging_t *sp);
/* A buffer of GKV_STAGING_CHUNK bytes, owned by the caller until gkv_staging_put; or NULL, in
 * which case w (borrowed until its ready runs or it is cancelled) is queued. */
void *gkv_staging_get(gkv_staging_t *sp, gkv_waiter_t *w);
/* A buffer like gkv_staging_get, but only when one is free (or can be made) and nobody waits
 * in line; never queues. */
void *gkv_staging_try(gkv_staging_t *sp);
void gkv_staging_put(gkv_staging_t *sp, void *buf);
/* Takes w out of the queue if it is there. */
void gkv_staging_cancel(gkv_staging_t *sp, gkv_waiter_t *w);

#endif
