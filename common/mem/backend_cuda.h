/* backend_cuda.h: what the cuda backend's two files share (not a public interface): its state,
 * and the functions of backend_cuda_copy.c (copies, their completions, the shared lane's fences)
 * that backend_cuda.c's ops table names. CUDA types appear only in these files. */
#ifndef GKV_MEM_BACKEND_CUDA_H
#define GKV_MEM_BACKEND_CUDA_H

#include <cuda_runtime.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "backend.h"
#include "exports.h"
#include "slab.h"

#define CUDA_LANES 8

/* Events that order a kept allocation's takers after its clear (after_clear). */
#define GKV_CUDA_ZERO_EVS 16

/* A started copy waiting for its event; kept for reuse (with its event) once reported. */
typedef struct done_rec {
    cudaEvent_t ev;
    cudaEvent_t t0, t1; /* timing events around a timed copy (made at its first use) */
    bool timed;         /* this one's copy is between t0 and t1 */
    gkv_copy_t *op;
    struct done_rec *next;
} done_rec_t;

/* The started copies of one stream, oldest first (a stream runs its work in order). */
typedef struct {
    done_rec_t *head, *tail;
} done_q_t;

typedef struct {
    gkv_backend_t base;
    cudaMemPool_t pool;
    cudaStream_t lanes[CUDA_LANES];
    /* The shared lane (GKV_LANE_SHARED): allocations and copies handed to other processes.
     * shared_work counts what was queued there, shared_fenced its value at the last fence;
     * fences_done (set by the fences' callbacks) trails fences until they have all run. */
    cudaStream_t shared;
    uint64_t shared_work, shared_fenced, fences, shared_batches;
    _Atomic uint64_t fences_done;
    /* Batched small copies: their stream, an event recorded after each batch, how many batches
     * were started, and up to which batch each lane already waits. */
    cudaStream_t batch;
    cudaEvent_t batch_ev;
    /* Recorded on the shared lane for another device's copy from this one (copy_from). */
    cudaEvent_t peer_ev;
    uint64_t batches, lane_seen[CUDA_LANES];
    /* Small values written by batches are carved from slab regions, allocated from the pool
     * on the batch stream: a pool allocation each would cost a driver call and ~1 KiB of
     * host memory per value. */
    gkv_slab_t *slab;
    uint64_t regions_made, regions_seen; /* slab regions allocated; as of the last adopt_copy */
    bool pool_exported; /* the pool's handle went out once (share): its pointers export */
    /* Exported allocations: their export data, and freed ones kept for the next allocation of
     * the same size (exports.h says why). */
    gkv_exports_t *exports;
    /* Kept allocations are cleared as they are kept, on the shared lane: clear number n (its
     * allocation's tag in the exports table) is followed by a record of zero_evs[n %
     * GKV_CUDA_ZERO_EVS], whose latest clear is zero_slot_seq[] of it; zero_seq clears were
     * queued, all up to zero_done are known to have run. A CREATE that takes one finds it
     * already zero, in the common case without waiting for the GPU, even while later clears
     * (of memory made ahead) are still running. zero_taken: the kept allocation just handed
     * out, which gkv_store_clear then need not clear again; zero_broken: a clear failed to
     * queue, so every CREATE clears its own. */
    cudaEvent_t zero_evs[GKV_CUDA_ZERO_EVS];
    uint64_t zero_slot_seq[GKV_CUDA_ZERO_EVS], zero_seq, zero_done;
    bool zero_broken;
    uint64_t zero_taken;
    /* The clear-ahead stock (backend_cuda.c): the size it is for (that of the last allocation
     * a CREATE got fresh from the pool), how many of that size to keep ready (doubled each time
     * a CREATE found none, up to AHEAD_BURST), and the size to top up at the next loop
     * turn (0: none). */
    uint64_t last_fresh, ahead_want;
    unsigned ahead_target;
    /* How clears run (gkv__cuda_clear): 1 + CLEAR_* (0: not chosen yet), and the zeros its
     * copies read (pinned host memory for CLEAR_H2D, device memory for CLEAR_D2D), made on
     * first use. */
    int clear_mode;
    void *zero_src;
    /* Copies waiting to be reported by cuda_poll: a queue per lane, then the batch stream's. */
    done_q_t done_q[CUDA_LANES + 1];
    done_rec_t *spare;
    int in_flight;
} cuda_backend_t;

/* The CUDA device each thread last made current (cudaSetDevice), -1 before any. */
extern _Thread_local int gkv__cuda_current_device;

/* b's backend with its device made current: a daemon with several devices (--devices) has a
 * backend per device, and the runtime's calls act on the thread's current device. Costs a
 * compare when it is current already. */
static inline cuda_backend_t *gkv__cuda_on(gkv_backend_t *b)
{
    if (gkv__cuda_current_device != b->device && cudaSetDevice(b->device) == cudaSuccess)
        gkv__cuda_current_device = b->device;
    return (cuda_backend_t *)b;
}

/* The stream of a copy lane (GKV_LANE_SHARED, GKV_LANE_BATCH or a lane number). */
static inline cudaStream_t gkv__cuda_lane(cuda_backend_t *c, int lane)
{
    if (lane == GKV_LANE_SHARED)
        return c->shared;
    return lane == GKV_LANE_BATCH ? c->batch : c->lanes[lane % CUDA_LANES];
}

/* Logs a failed CUDA call once, where it happened, and gives the code to pass up. */
int gkv__cuda_fail(const char *what, cudaError_t e);

/* A new pool of pinned memory on device dev whose allocations export as POSIX file
 * descriptors: what the backend's values come from (bench/nixl_xfer makes its buffers alike).
 * The caller owns *pool (cudaMemPoolDestroy). */
cudaError_t gkv__cuda_pool_create(int dev, cudaMemPool_t *pool);

/* backend_cuda_copy.c: the ops of backend.h that move bytes and report their completion. */
int gkv__cuda_arena_alloc(gkv_backend_t *b, uint64_t size, void **addr);
void gkv__cuda_arena_free(gkv_backend_t *b, void *addr, uint64_t size);
int gkv__cuda_arena_copy(gkv_backend_t *b, gkv_devptr_t p, uint64_t off, void *arena, size_t len,
                         int to_value, void *after);
int gkv__cuda_shared_mark(gkv_backend_t *b, void **mark);
void gkv__cuda_mark_free(gkv_backend_t *b, void *mark);
int gkv__cuda_shared_wait(gkv_backend_t *b, void *mark);
int gkv__cuda_foreign_open(gkv_backend_t *b, const uint8_t *handle, size_t len, gkv_devptr_t *p,
                           uint64_t *size);
void gkv__cuda_foreign_close(gkv_backend_t *b, gkv_devptr_t p);
int gkv__cuda_poll(gkv_backend_t *b);
int gkv__cuda_copy_in(gkv_backend_t *b, gkv_devptr_t dst, uint64_t off, const void *src, size_t len,
                      int lane, gkv_copy_t *op);
int gkv__cuda_copy_out(gkv_backend_t *b, void *dst, gkv_devptr_t src, uint64_t off, size_t len,
                       int lane, gkv_copy_t *op);
int gkv__cuda_copy_batch(gkv_backend_t *b, void *buf, const gkv_piece_t *in, uint32_t nin,
                         const gkv_piece_t *out, uint32_t nout, const gkv_bulk_t *bulk,
                         uint32_t nbulk, gkv_copy_t *op);
void gkv__cuda_batch_wait(gkv_backend_t *b);
int gkv__cuda_copy_shared(gkv_backend_t *b, gkv_devptr_t dst, gkv_devptr_t src, uint64_t len);
int gkv__cuda_copy_dev(gkv_backend_t *b, gkv_devptr_t dst, gkv_devptr_t src, uint64_t len,
                       int lane, gkv_copy_t *op);
int gkv__cuda_copy_from(gkv_backend_t *b, gkv_devptr_t dst, gkv_backend_t *from, gkv_devptr_t src,
                        uint64_t len);
int gkv__cuda_read_sync(gkv_backend_t *b, void *dst, gkv_devptr_t src, size_t len);
int gkv__cuda_write_sync(gkv_backend_t *b, gkv_devptr_t dst, const void *src, size_t len);
int gkv__cuda_pin_host(gkv_backend_t *b, void *addr, size_t len);
void gkv__cuda_unpin_host(gkv_backend_t *b, void *addr);
int gkv__cuda_zero_shared(gkv_backend_t *b, gkv_devptr_t p, uint64_t size);
/* The smallest allocation made from the pool. Clears are copies of zeros on a copy engine
 * (gkv__cuda_clear), and the driver runs a host-to-device copy of 16 KiB or less as GPU work
 * of the daemon's context that makes the GPU switch from a client's context and back (measured
 * on the H200: a new 4-16 KiB value stored from a CUDA tensor in ~440 us, ~200 us without any
 * clear; 32 KiB cleared by a copy in 170 us): so a pool allocation is at least 32 KiB and a
 * smaller value's clear covers its whole allocation. Values of up to GKV_SLAB_MAX written by
 * SET come from slabs (never cleared: their bytes are written before anyone sees them). */
#define CUDA_ALLOC_MIN (32u << 10)
/* How clears run: copies from pinned zeros on a copy engine (the default), a memset kernel, or
 * device-to-device copies (backend_cuda_copy.c says why). */
enum { CLEAR_MEMSET, CLEAR_H2D, CLEAR_D2D };
/* Queues a clear of size bytes at p on the shared lane, as clear_mode says. */
cudaError_t gkv__cuda_clear(cuda_backend_t *c, void *p, uint64_t size);
int gkv__cuda_fence_shared(gkv_backend_t *b, int after_batches, gkv_copy_t *op);
/* Makes the shared lane wait for every batch started so far (one of them may write what the
 * shared lane reads or hands out). Returns 0 or GKV_EIO. */
int gkv__cuda_shared_after_batches(cuda_backend_t *c);

#endif
