/* backend_cuda.c: values in GPU memory, allocated stream-ordered from one exportable CUDA
 * memory pool (POSIX file descriptor handles, release threshold at maximum), so that neither
 * cudaMalloc nor cudaFree ever sits on the request path. Copies run on a few non-blocking
 * streams ("lanes"). A copy's completion is an event recorded after it, queried by the loop
 * (cuda_poll) while copies are in flight: no callback thread, no wake-up; fences of the shared
 * lane report through cudaLaunchHostFunc. Nothing on the request path synchronises. */
#include <cuda_runtime.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "backend_cuda_adopt.h"
#include "backend_cuda_batch.h"
#include "error.h"
#include "exports.h"
#include "gpu_uuid.h"
#include "log.h"
#include "slab.h"

#define CUDA_LANES 8

/* A started copy waiting for its event; kept for reuse (with its event) once reported. */
typedef struct done_rec {
    cudaEvent_t ev;
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
    /* Kept allocations are cleared as they are kept, on the shared lane, and zero_ev is
     * recorded after the latest such clear (zero_pending until it has been seen complete): a
     * CREATE that takes one finds it already zero, in the common case without waiting for the
     * GPU. zero_taken: the kept allocation just handed out, which gkv_store_clear then need not
     * clear again; zero_broken: a clear failed to queue, so every CREATE clears its own. */
    cudaEvent_t zero_ev;
    bool zero_pending, zero_broken;
    uint64_t zero_taken;
    /* Copies waiting to be reported by cuda_poll: a queue per lane, then the batch stream's. */
    done_q_t done_q[CUDA_LANES + 1];
    done_rec_t *spare;
    int in_flight;
} cuda_backend_t;

/* Up to this share of the memory limit stays allocated in kept exports. */
#define EXPORTS_SHARE 8

static cudaStream_t lane_stream(cuda_backend_t *c, int lane)
{
    if (lane == GKV_LANE_SHARED)
        return c->shared;
    return lane == GKV_LANE_BATCH ? c->batch : c->lanes[lane % CUDA_LANES];
}

/* Logs a failed CUDA call once, where it happened, and gives the code to pass up. */
static int cuda_fail(const char *what, cudaError_t e)
{
    (void)cudaGetLastError(); /* a later launch's check must not find this one */
    GKV_ERROR("cuda backend: %s failed: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
    return e == cudaErrorMemoryAllocation ? GKV_EOOM : GKV_EIO;
}

static void exports_stats(cuda_backend_t *c)
{
    c->base.kept_bytes = gkv_exports_bytes(c->exports);
    c->base.kept_reuses = gkv_exports_reuses(c->exports);
}

/* Gives back a kept export for good (exports.h's release). */
static void exports_release(void *ctx, uint64_t addr, uint64_t size)
{
    (void)size;
    cuda_backend_t *c = ctx;
    cudaError_t e = cudaFreeAsync((void *)(uintptr_t)addr, c->shared);
    if (e != cudaSuccess)
        cuda_fail("cudaFreeAsync (kept export)", e);
}

/* Stream-ordered allocation from the pool. When the pool is full, kept exports are given back
 * and the allocation tried once more. Returns 0, GKV_EOOM or GKV_EIO. */
static int pool_alloc(cuda_backend_t *c, uint64_t size, cudaStream_t s, uint64_t *out)
{
    for (int attempt = 0;; attempt++) {
        void *p = NULL;
        cudaError_t e = cudaMallocFromPoolAsync(&p, size, c->pool, s);
        if (e == cudaSuccess) {
            *out = (uint64_t)(uintptr_t)p;
            return 0;
        }
        if (e != cudaErrorMemoryAllocation)
            return cuda_fail("cudaMallocFromPoolAsync", e);
        (void)cudaGetLastError(); /* out of memory is not sticky: clear it */
        if (attempt || gkv_exports_drain(c->exports) == 0)
            return GKV_EOOM;
        exports_stats(c);
        /* Other streams reuse the freed blocks once the frees have run. */
        if ((e = cudaStreamSynchronize(c->shared)) != cudaSuccess)
            return cuda_fail("giving back kept exports", e);
    }
}

/* A kept allocation was cleared when it was kept (cuda_free). Whoever takes it must come after
 * that clear: a lane's copies wait for it on the GPU; a CREATE (the shared lane) has its reply's
 * fence wait for it, unless it has already run, which is the common case: then nothing waits. */
static int after_clear(cuda_backend_t *c, int lane, uint64_t addr)
{
    c->zero_taken = addr;
    if (!c->zero_pending)
        return 0;
    cudaError_t e = cudaEventQuery(c->zero_ev);
    if (e == cudaSuccess) {
        c->zero_pending = false;
        return 0;
    }
    if (e != cudaErrorNotReady)
        return cuda_fail("cudaEventQuery (clear of a kept allocation)", e);
    (void)cudaGetLastError(); /* not ready is not an error to remember */
    GKV_DEBUG("a kept allocation taken before its clear ran (lane %d)", lane);
    if (lane == GKV_LANE_SHARED) {
        c->shared_work++; /* the clear is on the shared lane: the next fence comes after it */
        return 0;
    }
    e = cudaStreamWaitEvent(lane_stream(c, lane), c->zero_ev, 0);
    return e == cudaSuccess ? 0 : cuda_fail("cudaStreamWaitEvent (clear of a kept allocation)", e);
}

/* The CUDA device each thread last made current (cudaSetDevice), -1 before any. */
static _Thread_local int current_device = -1;

/* b's backend with its device made current: a daemon with several devices (--devices) has a
 * backend per device, and the runtime's calls act on the thread's current device. Costs a
 * compare when it is current already. */
static cuda_backend_t *on(gkv_backend_t *b)
{
    if (current_device != b->device && cudaSetDevice(b->device) == cudaSuccess)
        current_device = b->device;
    return (cuda_backend_t *)b;
}

static void cuda_free(gkv_backend_t *b, gkv_devptr_t p, uint64_t size, int lane);

static int cuda_alloc(gkv_backend_t *b, uint64_t size, int lane, gkv_devptr_t *out)
{
    cuda_backend_t *c = on(b);
    c->zero_taken = 0; /* only the allocation made last may skip its clear */
    if (lane == GKV_LANE_BATCH && size <= GKV_SLAB_MAX)
        return gkv_slab_get(c->slab, size, &out->v);
    if (gkv_exports_take(c->exports, size, &out->v)) {
        exports_stats(c);
        return after_clear(c, lane, out->v);
    }
    if (lane == GKV_LANE_SHARED)
        c->shared_work++;
    int rc = pool_alloc(c, size, lane_stream(c, lane), &out->v);
    if (rc == 0 && lane == GKV_LANE_BATCH) {
        /* A batch writes it, but a lane copy may too (a SET's chunk given up part way): lanes
         * wait for batch_ev, so it covers this allocation as well. */
        cudaError_t e = cudaEventRecord(c->batch_ev, c->batch);
        if (e != cudaSuccess) {
            cuda_free(b, *out, size, lane);
            return cuda_fail("cudaEventRecord (an allocation in batch order)", e);
        }
        c->batches++;
    }
    return rc;
}

static void cuda_free(gkv_backend_t *b, gkv_devptr_t p, uint64_t size, int lane)
{
    (void)lane;
    cuda_backend_t *c = on(b);
    if (size <= GKV_SLAB_MAX && gkv_slab_owns(c->slab, p.v)) {
        gkv_slab_put(c->slab, p.v, size);
        return;
    }
    bool kept = gkv_exports_freed(c->exports, p.v);
    exports_stats(c); /* kept, or older ones given back to make room */
    if (kept) {
        /* Cleared now, off any reply's path: the next CREATE of this size, for any key, is
         * handed memory that shows nothing of this value (after_clear orders its users). */
        cudaError_t e = cudaMemsetAsync((void *)(uintptr_t)p.v, 0, size, c->shared);
        if (e == cudaSuccess)
            e = cudaEventRecord(c->zero_ev, c->shared);
        if (e != cudaSuccess) {
            cuda_fail("clearing a kept allocation", e);
            c->zero_broken = true;
        }
        c->zero_pending = true;
        return;
    }
    /* Nothing uses the memory any more (refcounts), so any stream will do. The CREATE stream
     * lets the next CREATE reuse this block in stream order instead of growing the pool;
     * lanes reuse it once the free has completed (the pool's default reuse policies). */
    cudaError_t e = cudaFreeAsync((void *)(uintptr_t)p.v, c->shared);
    if (e != cudaSuccess)
        cuda_fail("cudaFreeAsync", e);
}

static void *cuda_host_view(gkv_backend_t *b, gkv_devptr_t p)
{
    (void)b;
    (void)p;
    return NULL;
}

/* Queues op's report (by cuda_poll) after the work queued on s so far (q: s's queue).
 * Returns 0, GKV_ENOMEM or GKV_EIO (op will then not be reported). */
static int report_after(cuda_backend_t *c, cudaStream_t s, done_q_t *q, gkv_copy_t *op)
{
    done_rec_t *r = c->spare;
    cudaError_t e;
    if (r) {
        c->spare = r->next;
    } else {
        if (!(r = calloc(1, sizeof(*r))))
            return GKV_ENOMEM;
        if ((e = cudaEventCreateWithFlags(&r->ev, cudaEventDisableTiming)) != cudaSuccess) {
            free(r);
            return cuda_fail("cudaEventCreate (copy completion)", e);
        }
    }
    if ((e = cudaEventRecord(r->ev, s)) != cudaSuccess) {
        r->next = c->spare;
        c->spare = r;
        return cuda_fail("cudaEventRecord (copy completion)", e);
    }
    r->op = op;
    r->next = NULL;
    if (q->tail)
        q->tail->next = r;
    else
        q->head = r;
    q->tail = r;
    c->in_flight++;
    return 0;
}

static int cuda_poll(gkv_backend_t *b)
{
    cuda_backend_t *c = on(b);
    for (int i = 0; i <= CUDA_LANES; i++) {
        done_q_t *q = &c->done_q[i];
        done_rec_t *r;
        /* done may start copies: they join the queues' tails and are looked at in turn. */
        while ((r = q->head)) {
            cudaError_t e = cudaEventQuery(r->ev);
            if (e == cudaErrorNotReady)
                break;
            if (!(q->head = r->next))
                q->tail = NULL;
            c->in_flight--;
            gkv_copy_t *op = r->op;
            r->next = c->spare;
            c->spare = r;
            op->done(op, e == cudaSuccess ? 0 : cuda_fail("a copy", e));
        }
    }
    return c->in_flight;
}

static int cuda_copy(cuda_backend_t *c, void *dst, const void *src, size_t len,
                     enum cudaMemcpyKind kind, int lane, gkv_copy_t *op)
{
    int l = lane % CUDA_LANES;
    cudaStream_t s = c->lanes[l];
    cudaError_t e;
    if (c->lane_seen[l] != c->batches) {
        /* A value a batch wrote may be published before the batch ran: wait for it. */
        if ((e = cudaStreamWaitEvent(s, c->batch_ev, 0)) != cudaSuccess)
            return cuda_fail("cudaStreamWaitEvent", e);
        c->lane_seen[l] = c->batches;
    }
    e = cudaMemcpyAsync(dst, src, len, kind, s);
    if (e != cudaSuccess)
        return cuda_fail("cudaMemcpyAsync", e);
    int rc = report_after(c, s, &c->done_q[l], op);
    if (rc) /* the copy is queued but nobody would hear of its end: wait for it here, once */
        cudaStreamSynchronize(s);
    return rc;
}

static int cuda_copy_in(gkv_backend_t *b, gkv_devptr_t dst, uint64_t off, const void *src,
                        size_t len, int lane, gkv_copy_t *op)
{
    return cuda_copy(on(b), (uint8_t *)(uintptr_t)dst.v + off, src, len, cudaMemcpyHostToDevice,
                     lane, op);
}

static int cuda_copy_out(gkv_backend_t *b, void *dst, gkv_devptr_t src, uint64_t off, size_t len,
                         int lane, gkv_copy_t *op)
{
    return cuda_copy(on(b), dst, (const uint8_t *)(uintptr_t)src.v + off, len,
                     cudaMemcpyDeviceToHost, lane, op);
}

static int cuda_copy_batch(gkv_backend_t *b, void *buf, const gkv_piece_t *in, uint32_t nin,
                           const gkv_piece_t *out, uint32_t nout, const gkv_bulk_t *bulk,
                           uint32_t nbulk, gkv_copy_t *op)
{
    cuda_backend_t *c = on(b);
    cudaError_t e = cudaSuccess;
    for (uint32_t i = 0; i < nbulk && e == cudaSuccess; i++)
        e = cudaMemcpyAsync((void *)(uintptr_t)bulk[i].dev, bulk[i].host, bulk[i].len,
                            cudaMemcpyHostToDevice, c->batch);
    if (e != cudaSuccess) {
        int rc = cuda_fail("cudaMemcpyAsync (a batch's bulk copy)", e);
        cudaStreamSynchronize(c->batch); /* those queued before must not outlive the buffers */
        return rc;
    }
    e = gkv_cuda_batch_launch(in, nin, out, nout, buf, c->batch);
    if (e != cudaSuccess) {
        int rc = cuda_fail("the batch copy kernel", e);
        cudaStreamSynchronize(c->batch);
        return rc;
    }
    if ((e = cudaEventRecord(c->batch_ev, c->batch)) != cudaSuccess) {
        int rc = cuda_fail("cudaEventRecord", e);
        cudaStreamSynchronize(c->batch);
        return rc;
    }
    c->batches++;
    int rc = report_after(c, c->batch, &c->done_q[CUDA_LANES], op);
    if (rc)
        cudaStreamSynchronize(c->batch);
    return rc;
}

static void cuda_batch_wait(gkv_backend_t *b)
{
    cuda_backend_t *c = on(b);
    cudaError_t e;
    if (c->batches && (e = cudaEventSynchronize(c->batch_ev)) != cudaSuccess)
        cuda_fail("waiting for a batch", e);
}

static int slab_region_new(void *ctx, uint64_t size, uint64_t *base)
{
    cuda_backend_t *c = ctx;
    c->regions_made++;
    return pool_alloc(c, size, c->batch, base);
}

static void slab_region_free(void *ctx, uint64_t base, uint64_t size)
{
    cuda_backend_t *c = ctx;
    (void)size;
    cudaError_t e = cudaFreeAsync((void *)(uintptr_t)base, c->shared);
    if (e != cudaSuccess)
        cuda_fail("cudaFreeAsync (slab region)", e);
}

static int cuda_exportable(gkv_backend_t *b, gkv_devptr_t p)
{
    return !gkv_slab_owns(((cuda_backend_t *)b)->slab, p.v);
}

/* Makes the shared lane wait for every batch started so far (one of them may write what the
 * shared lane reads or hands out). */
static int shared_after_batches(cuda_backend_t *c)
{
    if (c->shared_batches == c->batches)
        return 0;
    cudaError_t e = cudaStreamWaitEvent(c->shared, c->batch_ev, 0);
    if (e != cudaSuccess)
        return cuda_fail("cudaStreamWaitEvent (shared lane)", e);
    c->shared_batches = c->batches;
    c->shared_work++;
    return 0;
}

static int cuda_copy_shared(gkv_backend_t *b, gkv_devptr_t dst, gkv_devptr_t src, uint64_t len)
{
    cuda_backend_t *c = on(b);
    int rc = shared_after_batches(c);
    if (rc)
        return rc;
    cudaError_t e = cudaMemcpyAsync((void *)(uintptr_t)dst.v, (const void *)(uintptr_t)src.v, len,
                                    cudaMemcpyDeviceToDevice, c->shared);
    if (e != cudaSuccess)
        return cuda_fail("copying a value on the device", e);
    c->shared_work++;
    return 0;
}

/* The copy follows the source's shared lane (and its batches) through an event there, and runs
 * on this device's shared lane. cudaMemcpyPeerAsync copies directly when the GPUs reach each
 * other (NVLink or PCIe peer access) and through host memory otherwise; both are the driver's
 * choice. */
static int cuda_copy_from(gkv_backend_t *b, gkv_devptr_t dst, gkv_backend_t *from, gkv_devptr_t src,
                          uint64_t len)
{
    cuda_backend_t *s = on(from);
    int rc = shared_after_batches(s);
    if (rc)
        return rc;
    cudaError_t e = cudaEventRecord(s->peer_ev, s->shared);
    if (e != cudaSuccess)
        return cuda_fail("cudaEventRecord (copy between devices)", e);
    cuda_backend_t *c = on(b);
    if ((rc = shared_after_batches(c)))
        return rc;
    if ((e = cudaStreamWaitEvent(c->shared, s->peer_ev, 0)) != cudaSuccess)
        return cuda_fail("cudaStreamWaitEvent (copy between devices)", e);
    e = cudaMemcpyPeerAsync((void *)(uintptr_t)dst.v, b->device, (const void *)(uintptr_t)src.v,
                            from->device, len, c->shared);
    if (e != cudaSuccess)
        return cuda_fail("cudaMemcpyPeerAsync (copy between devices)", e);
    c->shared_work++;
    return 0;
}

/* On the legacy default stream of the calling thread: the value was written by work that has
 * run (batch_wait), and its allocation long before. */
static int cuda_read_sync(gkv_backend_t *b, void *dst, gkv_devptr_t src, size_t len)
{
    (void)on(b);
    cudaError_t e = cudaMemcpy(dst, (const void *)(uintptr_t)src.v, len, cudaMemcpyDeviceToHost);
    return e == cudaSuccess ? 0 : cuda_fail("reading a value for a snapshot", e);
}

/* On the shared lane, where dst was allocated (stream order), then waited for. */
static int cuda_write_sync(gkv_backend_t *b, gkv_devptr_t dst, const void *src, size_t len)
{
    cuda_backend_t *c = on(b);
    cudaError_t e =
        cudaMemcpyAsync((void *)(uintptr_t)dst.v, src, len, cudaMemcpyHostToDevice, c->shared);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(c->shared);
    return e == cudaSuccess ? 0 : cuda_fail("writing a value from a snapshot", e);
}

static int cuda_link(gkv_backend_t *b, gkv_backend_t *peer)
{
    cuda_backend_t *c = on(b);
    int can = 0;
    if (peer->device == b->device)
        return 1;
    cudaError_t e = cudaDeviceCanAccessPeer(&can, peer->device, b->device);
    if (e != cudaSuccess || !can)
        return 0;
    struct cudaMemAccessDesc d = {
        .location = {.type = cudaMemLocationTypeDevice, .id = peer->device},
        .flags = cudaMemAccessFlagsProtReadWrite};
    if ((e = cudaMemPoolSetAccess(c->pool, &d, 1)) != cudaSuccess)
        return cuda_fail("cudaMemPoolSetAccess (a peer GPU)", e);
    return 1;
}

/* On the GPU, in stream order: the loop only queues it (H100: about 0.4 ms per GiB), but the
 * reply's fence waits for it, and the daemon's GPU work waits for the GPU to switch from the
 * client's context (~0.35 ms on the H200 when the client has just used the GPU). A kept
 * allocation just taken was cleared when it was kept: nothing to queue. */
static int cuda_zero_shared(gkv_backend_t *b, gkv_devptr_t p, uint64_t size)
{
    cuda_backend_t *c = on(b);
    if (p.v == c->zero_taken && !c->zero_broken) {
        c->zero_taken = 0;
        return 0;
    }
    cudaError_t e = cudaMemsetAsync((void *)(uintptr_t)p.v, 0, size, c->shared);
    if (e != cudaSuccess)
        return cuda_fail("cudaMemsetAsync (clearing a new value)", e);
    c->shared_work++;
    return 0;
}

typedef struct {
    cuda_backend_t *c;
    gkv_copy_t *op;
} fence_t;

static void CUDART_CB fence_finished(void *arg)
{
    fence_t *f = arg;
    gkv_copy_t *op = f->op;
    atomic_fetch_add(&f->c->fences_done, 1);
    free(f);
    op->done(op, 0);
}

static int cuda_fence_shared(gkv_backend_t *b, int after_batches, gkv_copy_t *op)
{
    cuda_backend_t *c = on(b);
    int rc = after_batches ? shared_after_batches(c) : 0;
    if (rc)
        return rc;
    /* Nothing queued since the last fence, and that fence has run: nothing to wait for. */
    if (c->shared_fenced == c->shared_work && atomic_load(&c->fences_done) == c->fences)
        return 1;
    fence_t *f = malloc(sizeof(*f));
    if (!f)
        return GKV_ENOMEM;
    *f = (fence_t){c, op};
    cudaError_t e = cudaLaunchHostFunc(c->shared, fence_finished, f);
    if (e != cudaSuccess) {
        free(f);
        return cuda_fail("cudaLaunchHostFunc (shared lane)", e);
    }
    c->shared_fenced = c->shared_work;
    c->fences++;
    return 0;
}

static void *cuda_staging_alloc(gkv_backend_t *b, size_t size)
{
    (void)b;
    void *p = NULL;
    cudaError_t e = cudaHostAlloc(&p, size, cudaHostAllocPortable); /* every device's */
    if (e != cudaSuccess) {
        cuda_fail("cudaHostAlloc (staging)", e);
        return NULL;
    }
    return p;
}

static void cuda_staging_free(gkv_backend_t *b, void *p, size_t size)
{
    (void)b;
    (void)size;
    cudaFreeHost(p);
}

static int cuda_share(gkv_backend_t *b, int *fd, char *why, size_t cap)
{
    cuda_backend_t *c = on(b);
    int handle = -1;
    cudaError_t e = cudaMemPoolExportToShareableHandle(&handle, c->pool,
                                                       cudaMemHandleTypePosixFileDescriptor, 0);
    if (e != cudaSuccess) {
        snprintf(why, cap, "exporting the memory pool failed: %s", cudaGetErrorString(e));
        return GKV_ENOTSUP;
    }
    *fd = handle;
    c->pool_exported = true;
    return 0;
}

static int cuda_export_ptr(gkv_backend_t *b, gkv_devptr_t p, uint64_t size, uint8_t *out,
                           size_t cap, size_t *len)
{
    cuda_backend_t *c = on(b);
    const uint8_t *known;
    uint32_t known_len;
    if (gkv_exports_find(c->exports, p.v, &known, &known_len)) {
        if (cap < known_len)
            return GKV_EIO;
        memcpy(out, known, known_len);
        *len = known_len;
        return 0;
    }
    struct cudaMemPoolPtrExportData data;
    if (cap < sizeof(data))
        return GKV_EIO;
    cudaError_t e = cudaMemPoolExportPointer(&data, (void *)(uintptr_t)p.v);
    if (e != cudaSuccess)
        return cuda_fail("cudaMemPoolExportPointer", e);
    memcpy(out, &data, sizeof(data));
    *len = sizeof(data);
    (void)gkv_exports_add(c->exports, p.v, size, out, (uint32_t)*len);
    return 0;
}

static int cuda_origin(gkv_backend_t *b, gkv_devptr_t p, uint64_t size, uint64_t *base,
                       uint64_t *base_size, uint8_t *exp, size_t cap, size_t *len)
{
    cuda_backend_t *c = on(b);
    if (!c->pool_exported) {
        /* Pointers of a pool export only once the pool itself has been (measured on the H100:
         * cudaMemPoolExportPointer is an invalid argument before). */
        int fd;
        char why[128];
        if (cuda_share(b, &fd, why, sizeof(why)))
            return GKV_EIO;
        close(fd);
    }
    gkv_slab_note_t *note;
    if (size > GKV_SLAB_MAX || !gkv_slab_region(c->slab, p.v, base, &note)) {
        *base = p.v; /* an allocation of its own */
        *base_size = size;
        return cuda_export_ptr(b, p, size, exp, cap, len);
    }
    /* A slot of a slab region: the region's export data, made once per region. */
    *base_size = GKV_SLAB_REGION;
    if (!note->len) {
        struct cudaMemPoolPtrExportData data;
        cudaError_t e = cudaMemPoolExportPointer(&data, (void *)(uintptr_t)*base);
        if (e != cudaSuccess)
            return cuda_fail("cudaMemPoolExportPointer (slab region)", e);
        memcpy(note->data, &data, sizeof(data));
        note->len = sizeof(data);
    }
    if (cap < note->len)
        return GKV_EIO;
    memcpy(exp, note->data, note->len);
    *len = note->len;
    return 0;
}

static int cuda_adopt_open(gkv_backend_t *b, int fd, void **src, char *why, size_t cap)
{
    return gkv__cuda_adopt_open(on(b)->base.device, fd, src, why, cap);
}

static int cuda_adopt_copy(gkv_backend_t *b, void *src, uint64_t base, uint64_t base_size,
                           const uint8_t *exp, size_t exp_len, uint64_t addr, uint64_t len,
                           gkv_devptr_t dst)
{
    cuda_backend_t *c = on(b);
    if (c->regions_seen != c->regions_made) {
        /* dst may be a slot of a region just allocated on the batch stream: the shared lane
         * waits for that allocation. */
        cudaError_t e = cudaEventRecord(c->batch_ev, c->batch);
        if (e != cudaSuccess)
            return cuda_fail("cudaEventRecord (adopting)", e);
        c->batches++;
        int rc = shared_after_batches(c);
        if (rc)
            return rc;
        c->regions_seen = c->regions_made;
    }
    c->shared_work++;
    return gkv__cuda_adopt_copy(src, c->shared, base, base_size, exp, exp_len, addr, len, dst.v);
}

static int cuda_adopt_close(gkv_backend_t *b, void *src)
{
    return gkv__cuda_adopt_close(src, on(b)->shared);
}

static void cuda_close(gkv_backend_t *b)
{
    cuda_backend_t *c = on(b);
    if (c->batch) {
        cudaStreamSynchronize(c->batch);
        cudaStreamDestroy(c->batch);
    }
    if (c->batch_ev)
        cudaEventDestroy(c->batch_ev);
    if (c->peer_ev)
        cudaEventDestroy(c->peer_ev);
    if (c->zero_ev)
        cudaEventDestroy(c->zero_ev);
    gkv_slab_free_all(c->slab); /* frees regions on the shared lane: synchronised below */
    gkv_exports_fini(c->exports);     /* the same */
    if (c->shared) {
        cudaStreamSynchronize(c->shared);
        cudaStreamDestroy(c->shared);
    }
    for (int i = 0; i < CUDA_LANES; i++) {
        if (c->lanes[i]) {
            cudaStreamSynchronize(c->lanes[i]);
            cudaStreamDestroy(c->lanes[i]);
        }
    }
    /* Copies never reported: their callers are gone (the daemon is shutting down). */
    for (int i = 0; i <= CUDA_LANES; i++)
        while (c->done_q[i].head) {
            done_rec_t *r = c->done_q[i].head;
            c->done_q[i].head = r->next;
            r->next = c->spare;
            c->spare = r;
        }
    while (c->spare) {
        done_rec_t *r = c->spare;
        c->spare = r->next;
        cudaEventDestroy(r->ev);
        free(r);
    }
    if (c->pool)
        cudaMemPoolDestroy(c->pool);
    free(c);
}

static const gkv_backend_ops_t cuda_ops = {
    .alloc = cuda_alloc,
    .free = cuda_free,
    .host_view = cuda_host_view,
    .copy_in = cuda_copy_in,
    .copy_out = cuda_copy_out,
    .copy_batch = cuda_copy_batch,
    .poll = cuda_poll,
    .batch_wait = cuda_batch_wait,
    .exportable = cuda_exportable,
    .copy_shared = cuda_copy_shared,
    .copy_from = cuda_copy_from,
    .link = cuda_link,
    .read_sync = cuda_read_sync,
    .write_sync = cuda_write_sync,
    .zero_shared = cuda_zero_shared,
    .fence_shared = cuda_fence_shared,
    .staging_alloc = cuda_staging_alloc,
    .staging_free = cuda_staging_free,
    .share = cuda_share,
    .export_ptr = cuda_export_ptr,
    .origin = cuda_origin,
    .adopt_open = cuda_adopt_open,
    .adopt_copy = cuda_adopt_copy,
    .adopt_close = cuda_adopt_close,
    .close = cuda_close,
};

int gkv_backend_cuda_count(void)
{
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

int gkv_backend_cuda_open(const gkv_backend_config_t *cfg, gkv_backend_t **out, char *why,
                          size_t cap)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        /* No driver, an old driver or no device all mean the same here: no usable GPU. */
        snprintf(why, cap, "no usable GPU: %s",
                 e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device");
        return GKV_ENOTSUP;
    }
    if (cfg->device < 0 || cfg->device >= count) {
        snprintf(why, cap, "device %d does not exist (%d CUDA devices)", cfg->device, count);
        return GKV_EINVAL;
    }
    int dev = cfg->device, pools = 0, handles = 0;
    if ((e = cudaSetDevice(dev)) != cudaSuccess) {
        snprintf(why, cap, "cudaSetDevice(%d): %s", dev, cudaGetErrorString(e));
        return GKV_EIO;
    }
    current_device = dev;
    cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, dev);
    cudaDeviceGetAttribute(&handles, cudaDevAttrMemoryPoolSupportedHandleTypes, dev);
    if (!pools || !(handles & cudaMemHandleTypePosixFileDescriptor)) {
        snprintf(why, cap, "device %d lacks memory pools with POSIX file descriptor handles", dev);
        return GKV_ENOTSUP;
    }
    cuda_backend_t *c = calloc(1, sizeof(*c));
    if (!c) {
        snprintf(why, cap, "out of host memory");
        return GKV_ENOMEM;
    }
    struct cudaDeviceProp prop;
    size_t free_b = 0, total_b = 0;
    if ((e = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess ||
        (e = cudaMemGetInfo(&free_b, &total_b)) != cudaSuccess) {
        snprintf(why, cap, "querying device %d: %s", dev, cudaGetErrorString(e));
        goto fail;
    }
    struct cudaMemPoolProps props;
    memset(&props, 0, sizeof(props));
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = dev;
    if ((e = cudaMemPoolCreate(&c->pool, &props)) != cudaSuccess) {
        snprintf(why, cap, "cudaMemPoolCreate: %s", cudaGetErrorString(e));
        goto fail;
    }
    /* Keep freed memory in the pool: giving it back would put cudaFree-like costs on the
     * request path. */
    uint64_t threshold = UINT64_MAX;
    if ((e = cudaMemPoolSetAttribute(c->pool, cudaMemPoolAttrReleaseThreshold, &threshold)) !=
        cudaSuccess) {
        snprintf(why, cap, "setting the pool's release threshold: %s", cudaGetErrorString(e));
        goto fail;
    }
    for (int i = 0; i < CUDA_LANES; i++) {
        if ((e = cudaStreamCreateWithFlags(&c->lanes[i], cudaStreamNonBlocking)) != cudaSuccess) {
            snprintf(why, cap, "cudaStreamCreate: %s", cudaGetErrorString(e));
            goto fail;
        }
    }
    if ((e = cudaStreamCreateWithFlags(&c->shared, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&c->batch, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&c->batch_ev, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&c->peer_ev, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&c->zero_ev, cudaEventDisableTiming)) != cudaSuccess) {
        snprintf(why, cap, "creating streams: %s", cudaGetErrorString(e));
        goto fail;
    }
    c->base.capacity = cfg->limit ? cfg->limit : (uint64_t)free_b / 10 * 9;
    gkv_slab_backing_t backing = {slab_region_new, slab_region_free, c};
    if (gkv_slab_alloc_init(&c->slab, &backing) ||
        gkv_exports_init(&c->exports, c->base.capacity / EXPORTS_SHARE, exports_release, c)) {
        snprintf(why, cap, "out of host memory");
        goto fail;
    }
    c->base.ops = &cuda_ops;
    c->base.share_mechanism = "cuda-pool-fd";
    c->base.name = "cuda";
    c->base.device = dev;
    gkv_gpu_uuid_format((const unsigned char *)prop.uuid.bytes, c->base.gpu_uuid,
                sizeof(c->base.gpu_uuid));
    snprintf(c->base.gpu_name, sizeof(c->base.gpu_name), "%.63s", prop.name);
    c->base.lanes = CUDA_LANES;
    c->base.device_total = total_b;
    if (c->base.capacity > free_b)
        GKV_WARN("cuda backend: maxmemory %llu exceeds the device's free memory %zu",
                 (unsigned long long)c->base.capacity, free_b);
    *out = &c->base;
    return 0;
fail:
    cuda_close(&c->base);
    return GKV_EIO;
}
