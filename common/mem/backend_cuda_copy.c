/* backend_cuda_copy.c: the cuda backend's copies (lanes, batches, the shared lane, between
 * devices), their completions (an event after each, queried by the loop through poll) and the
 * shared lane's fences (cudaLaunchHostFunc). backend_cuda.c has the rest. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cuda.h"
#include "backend_cuda_batch.h"
#include "error.h"
#include "log.h"

/* A completion record, kept or new (NULL without memory, or when its event cannot be made). */
static done_rec_t *take_rec(cuda_backend_t *c)
{
    done_rec_t *r = c->spare;
    if (r) {
        c->spare = r->next;
        r->timed = false;
        return r;
    }
    if (!(r = calloc(1, sizeof(*r))))
        return NULL;
    cudaError_t e = cudaEventCreateWithFlags(&r->ev, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        gkv__cuda_fail("cudaEventCreate (copy completion)", e);
        free(r);
        return NULL;
    }
    return r;
}

/* For a timed copy about to be queued on s: r's start event recorded (its timing events made
 * at first use). False when that failed: the copy goes untimed. */
static bool time_from(done_rec_t *r, cudaStream_t s)
{
    if ((!r->t0 && cudaEventCreate(&r->t0) != cudaSuccess) ||
        (!r->t1 && cudaEventCreate(&r->t1) != cudaSuccess) ||
        cudaEventRecord(r->t0, s) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return true;
}

/* Queues op's report (by cuda_poll) after the work queued on s so far (q: s's queue), through
 * r (taken here when NULL; a timed one gets its end event too). Returns 0, GKV_ENOMEM or
 * GKV_EIO (op will then not be reported). */
static int report_after(cuda_backend_t *c, cudaStream_t s, done_q_t *q, gkv_copy_t *op,
                        done_rec_t *r)
{
    cudaError_t e;
    if (!r && !(r = take_rec(c)))
        return GKV_ENOMEM;
    if (r->timed && cudaEventRecord(r->t1, s) != cudaSuccess) {
        (void)cudaGetLastError();
        r->timed = false;
    }
    if ((e = cudaEventRecord(r->ev, s)) != cudaSuccess) {
        r->next = c->spare;
        c->spare = r;
        return gkv__cuda_fail("cudaEventRecord (copy completion)", e);
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

int gkv__cuda_poll(gkv_backend_t *b)
{
    cuda_backend_t *c = gkv__cuda_on(b);
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
            float ms;
            if (r->timed && e == cudaSuccess &&
                cudaEventElapsedTime(&ms, r->t0, r->t1) == cudaSuccess)
                op->run_us = (uint64_t)(ms * 1000.0f);
            r->next = c->spare;
            c->spare = r;
            op->done(op, e == cudaSuccess ? 0 : gkv__cuda_fail("a copy", e));
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
            return gkv__cuda_fail("cudaStreamWaitEvent", e);
        c->lane_seen[l] = c->batches;
    }
    done_rec_t *r = NULL;
    if (op->timed) { /* its record taken now: the start event goes before the copy */
        op->run_us = 0;
        if (!(r = take_rec(c)))
            return GKV_ENOMEM;
        r->timed = time_from(r, s);
    }
    e = cudaMemcpyAsync(dst, src, len, kind, s);
    if (e != cudaSuccess) {
        if (r) {
            r->next = c->spare;
            c->spare = r;
        }
        return gkv__cuda_fail("cudaMemcpyAsync", e);
    }
    int rc = report_after(c, s, &c->done_q[l], op, r);
    if (rc) /* the copy is queued but nobody would hear of its end: wait for it here, once */
        cudaStreamSynchronize(s);
    return rc;
}

int gkv__cuda_copy_in(gkv_backend_t *b, gkv_devptr_t dst, uint64_t off, const void *src, size_t len,
                      int lane, gkv_copy_t *op)
{
    return cuda_copy(gkv__cuda_on(b), (uint8_t *)(uintptr_t)dst.v + off, src, len,
                     cudaMemcpyHostToDevice, lane, op);
}

int gkv__cuda_copy_out(gkv_backend_t *b, void *dst, gkv_devptr_t src, uint64_t off, size_t len,
                       int lane, gkv_copy_t *op)
{
    return cuda_copy(gkv__cuda_on(b), dst, (const uint8_t *)(uintptr_t)src.v + off, len,
                     cudaMemcpyDeviceToHost, lane, op);
}

int gkv__cuda_copy_dev(gkv_backend_t *b, gkv_devptr_t dst, gkv_devptr_t src, uint64_t len,
                       int lane, gkv_copy_t *op)
{
    return cuda_copy(gkv__cuda_on(b), (void *)(uintptr_t)dst.v, (const void *)(uintptr_t)src.v,
                     len, cudaMemcpyDeviceToDevice, lane, op);
}

int gkv__cuda_copy_batch(gkv_backend_t *b, void *buf, const gkv_piece_t *in, uint32_t nin,
                         const gkv_piece_t *out, uint32_t nout, const gkv_bulk_t *bulk,
                         uint32_t nbulk, gkv_copy_t *op)
{
    cuda_backend_t *c = gkv__cuda_on(b);
    cudaError_t e = cudaSuccess;
    for (uint32_t i = 0; i < nbulk && e == cudaSuccess; i++)
        e = cudaMemcpyAsync((void *)(uintptr_t)bulk[i].dev, bulk[i].host, bulk[i].len,
                            cudaMemcpyHostToDevice, c->batch);
    if (e != cudaSuccess) {
        int rc = gkv__cuda_fail("cudaMemcpyAsync (a batch's bulk copy)", e);
        cudaStreamSynchronize(c->batch); /* those queued before must not outlive the buffers */
        return rc;
    }
    e = gkv_cuda_batch_launch(in, nin, out, nout, buf, c->batch);
    if (e != cudaSuccess) {
        int rc = gkv__cuda_fail("the batch copy kernel", e);
        cudaStreamSynchronize(c->batch);
        return rc;
    }
    if ((e = cudaEventRecord(c->batch_ev, c->batch)) != cudaSuccess) {
        int rc = gkv__cuda_fail("cudaEventRecord", e);
        cudaStreamSynchronize(c->batch);
        return rc;
    }
    c->batches++;
    int rc = report_after(c, c->batch, &c->done_q[CUDA_LANES], op, NULL);
    if (rc)
        cudaStreamSynchronize(c->batch);
    return rc;
}

void gkv__cuda_batch_wait(gkv_backend_t *b)
{
    cuda_backend_t *c = gkv__cuda_on(b);
    cudaError_t e;
    if (c->batches && (e = cudaEventSynchronize(c->batch_ev)) != cudaSuccess)
        gkv__cuda_fail("waiting for a batch", e);
}

/* Makes the shared lane wait for every batch started so far (one of them may write what the
 * shared lane reads or hands out). */
int gkv__cuda_shared_after_batches(cuda_backend_t *c)
{
    if (c->shared_batches == c->batches)
        return 0;
    cudaError_t e = cudaStreamWaitEvent(c->shared, c->batch_ev, 0);
    if (e != cudaSuccess)
        return gkv__cuda_fail("cudaStreamWaitEvent (shared lane)", e);
    c->shared_batches = c->batches;
    c->shared_work++;
    return 0;
}

int gkv__cuda_copy_shared(gkv_backend_t *b, gkv_devptr_t dst, gkv_devptr_t src, uint64_t len)
{
    cuda_backend_t *c = gkv__cuda_on(b);
    int rc = gkv__cuda_shared_after_batches(c);
    if (rc)
        return rc;
    cudaError_t e = cudaMemcpyAsync((void *)(uintptr_t)dst.v, (const void *)(uintptr_t)src.v, len,
                                    cudaMemcpyDeviceToDevice, c->shared);
    if (e != cudaSuccess)
        return gkv__cuda_fail("copying a value on the device", e);
    c->shared_work++;
    return 0;
}

/* The copy follows the source's shared lane (and its batches) through an event there, and runs
 * on this device's shared lane. cudaMemcpyPeerAsync copies directly when the GPUs reach each
 * other (NVLink or PCIe peer access) and through host memory otherwise; both are the driver's
 * choice. */
int gkv__cuda_copy_from(gkv_backend_t *b, gkv_devptr_t dst, gkv_backend_t *from, gkv_devptr_t src,
                        uint64_t len)
{
    cuda_backend_t *s = gkv__cuda_on(from);
    int rc = gkv__cuda_shared_after_batches(s);
    if (rc)
        return rc;
    cudaError_t e = cudaEventRecord(s->peer_ev, s->shared);
    if (e != cudaSuccess)
        return gkv__cuda_fail("cudaEventRecord (copy between devices)", e);
    cuda_backend_t *c = gkv__cuda_on(b);
    if ((rc = gkv__cuda_shared_after_batches(c)))
        return rc;
    if ((e = cudaStreamWaitEvent(c->shared, s->peer_ev, 0)) != cudaSuccess)
        return gkv__cuda_fail("cudaStreamWaitEvent (copy between devices)", e);
    e = cudaMemcpyPeerAsync((void *)(uintptr_t)dst.v, b->device, (const void *)(uintptr_t)src.v,
                            from->device, len, c->shared);
    if (e != cudaSuccess)
        return gkv__cuda_fail("cudaMemcpyPeerAsync (copy between devices)", e);
    c->shared_work++;
    return 0;
}

/* On the legacy default stream of the calling thread: the value was written by work that has
 * run (batch_wait), and its allocation long before. */
int gkv__cuda_read_sync(gkv_backend_t *b, void *dst, gkv_devptr_t src, size_t len)
{
    (void)gkv__cuda_on(b);
    cudaError_t e = cudaMemcpy(dst, (const void *)(uintptr_t)src.v, len, cudaMemcpyDeviceToHost);
    return e == cudaSuccess ? 0 : gkv__cuda_fail("reading a value for a snapshot", e);
}

int gkv__cuda_pin_host(gkv_backend_t *b, void *addr, size_t len)
{
    (void)gkv__cuda_on(b);
    cudaError_t e = cudaHostRegister(addr, len, cudaHostRegisterPortable);
    return e == cudaSuccess ? 0 : gkv__cuda_fail("page-locking the host tier's memory", e);
}

void gkv__cuda_unpin_host(gkv_backend_t *b, void *addr)
{
    (void)gkv__cuda_on(b);
    (void)cudaHostUnregister(addr);
}

/* On the shared lane, where dst was allocated (stream order), then waited for. */
int gkv__cuda_write_sync(gkv_backend_t *b, gkv_devptr_t dst, const void *src, size_t len)
{
    cuda_backend_t *c = gkv__cuda_on(b);
    cudaError_t e =
        cudaMemcpyAsync((void *)(uintptr_t)dst.v, src, len, cudaMemcpyHostToDevice, c->shared);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(c->shared);
    return e == cudaSuccess ? 0 : gkv__cuda_fail("writing a value from a snapshot", e);
}

#define CUDA_ZERO_SRC (1u << 20)
#define CLEAR_COPY_MAX (8u << 20) /* larger clears are a memset kernel whatever the mode */

/* Clears up to CLEAR_COPY_MAX run as copies of a pinned zero buffer on a copy engine: a memset
 * (or a device-to-device copy) is a kernel, and a kernel of the daemon's context between two of
 * a client's makes the GPU switch contexts twice (~0.15-0.2 ms each on the H100 without MPS);
 * the copy engines take the daemon's copy beside the client's work. Measured (bench/peers, H100):
 * a new 64 KiB value stored from a CUDA tensor in 132-176 us instead of 424, 1 MiB in 202-208
 * instead of 421-464. Larger clears stay a memset (0.4 ms per GiB, where the switch is small
 * beside it). GPUKV_CLEAR=memset|h2d|d2d chooses (for measuring). */
cudaError_t gkv__cuda_clear(cuda_backend_t *c, void *p, uint64_t size)
{
    if (!c->clear_mode) {
        const char *m = getenv("GPUKV_CLEAR");
        c->clear_mode = 1 + (!m || !strcmp(m, "h2d") ? CLEAR_H2D
                             : !strcmp(m, "d2d")     ? CLEAR_D2D
                                                     : CLEAR_MEMSET);
        if (m)
            GKV_INFO("clears of new values: %s (GPUKV_CLEAR)", m);
    }
    int mode = c->clear_mode - 1;
    if (mode != CLEAR_MEMSET && size <= CLEAR_COPY_MAX && !c->zero_src) {
        cudaError_t e = mode == CLEAR_H2D ? cudaHostAlloc(&c->zero_src, CUDA_ZERO_SRC, 0)
                                          : cudaMalloc(&c->zero_src, CUDA_ZERO_SRC);
        if (e == cudaSuccess)
            e = mode == CLEAR_H2D ? (memset(c->zero_src, 0, CUDA_ZERO_SRC), cudaSuccess)
                                  : cudaMemset(c->zero_src, 0, CUDA_ZERO_SRC);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            c->zero_src = NULL;
            c->clear_mode = 1 + CLEAR_MEMSET;
            mode = CLEAR_MEMSET;
        }
    }
    if (mode == CLEAR_MEMSET || size > CLEAR_COPY_MAX)
        return cudaMemsetAsync(p, 0, size, c->shared);
    /* A pool allocation is at least CUDA_ALLOC_MIN: clear it whole, one copy large enough for
     * the copy engine (slab slots are never cleared here, but never widen one). */
    if (size < CUDA_ALLOC_MIN && !gkv_slab_owns(c->slab, (uint64_t)(uintptr_t)p))
        size = CUDA_ALLOC_MIN;
    for (uint64_t off = 0; off < size; off += CUDA_ZERO_SRC) {
        size_t n = size - off < CUDA_ZERO_SRC ? (size_t)(size - off) : CUDA_ZERO_SRC;
        cudaError_t e = cudaMemcpyAsync((uint8_t *)p + off, c->zero_src, n,
                                        mode == CLEAR_H2D ? cudaMemcpyHostToDevice
                                                          : cudaMemcpyDeviceToDevice,
                                        c->shared);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

/* On the GPU, in stream order: the loop only queues it (H100: about 0.4 ms per GiB), but the
 * reply's fence waits for it, and the daemon's GPU work waits for the GPU to switch from the
 * client's context (~0.35 ms on the H200 when the client has just used the GPU). A kept
 * allocation just taken was cleared when it was kept: nothing to queue. */
int gkv__cuda_zero_shared(gkv_backend_t *b, gkv_devptr_t p, uint64_t size)
{
    cuda_backend_t *c = gkv__cuda_on(b);
    if (p.v == c->zero_taken && !c->zero_broken) {
        c->zero_taken = 0;
        return 0;
    }
    cudaError_t e = gkv__cuda_clear(c, (void *)(uintptr_t)p.v, size);
    if (e != cudaSuccess)
        return gkv__cuda_fail("clearing a new value", e);
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

int gkv__cuda_fence_shared(gkv_backend_t *b, int after_batches, gkv_copy_t *op)
{
    cuda_backend_t *c = gkv__cuda_on(b);
    int rc = after_batches ? gkv__cuda_shared_after_batches(c) : 0;
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
        return gkv__cuda_fail("cudaLaunchHostFunc (shared lane)", e);
    }
    c->shared_fenced = c->shared_work;
    c->fences++;
    return 0;
}

/* Transfer arenas: plain device memory (NIXL's CUDA IPC and RDMA paths reach only cudaMalloc
 * memory, not a pool's: cluster-notes.md), in whole 2 MiB pages: NVLink writes into (and from)
 * an allocation of 1 GiB + 4 KiB ran at 0.83x those of 1 GiB (H100, RESULTS.md session 37). */
#define ARENA_PAGE (2ull << 20)

int gkv__cuda_arena_alloc(gkv_backend_t *b, uint64_t size, void **addr)
{
    (void)gkv__cuda_on(b);
    cudaError_t e = cudaMalloc(addr, (size + ARENA_PAGE - 1) & ~(ARENA_PAGE - 1));
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        return GKV_EOOM;
    }
    return e == cudaSuccess ? 0 : gkv__cuda_fail("cudaMalloc (a transfer arena)", e);
}

void gkv__cuda_arena_free(gkv_backend_t *b, void *addr, uint64_t size)
{
    (void)size;
    (void)gkv__cuda_on(b);
    cudaFree(addr);
}

/* Each worker thread copies on a stream of its own per device, and orders copies into new
 * values after the shared lane (where they were allocated) with an event of its own. */
static _Thread_local cudaStream_t arena_stream[GKV_MAX_DEVICES];
static _Thread_local cudaEvent_t arena_ev[GKV_MAX_DEVICES];

/* This thread's stream and event for device d, made on first use. Returns 0 or GKV_EIO. */
static int worker_stream(int d)
{
    if (arena_stream[d])
        return 0;
    cudaError_t e = cudaStreamCreateWithFlags(&arena_stream[d], cudaStreamNonBlocking);
    if (e == cudaSuccess)
        e = cudaEventCreateWithFlags(&arena_ev[d], cudaEventDisableTiming);
    return e == cudaSuccess ? 0 : gkv__cuda_fail("a worker's arena stream", e);
}

int gkv__cuda_arena_copy(gkv_backend_t *b, gkv_devptr_t p, uint64_t off, void *arena, size_t len,
                         int to_value, void *after)
{
    cuda_backend_t *c = gkv__cuda_on(b);
    int d = b->device >= 0 && b->device < GKV_MAX_DEVICES ? b->device : 0;
    cudaError_t e = cudaSuccess;
    if (worker_stream(d))
        return GKV_EIO;
    cudaStream_t s = arena_stream[d];
    void *v = (void *)(uintptr_t)(p.v + off);
    void *dst = to_value ? v : arena;
    const void *src = to_value ? arena : v;
    if (!to_value) {
        /* A value a batch wrote may be published before the batch ran (server/xfer/batch.h): wait
         * for every batch started so far, as lane copies do. */
        e = cudaStreamWaitEvent(s, c->batch_ev, 0);
    } else if (after) {
        e = cudaStreamWaitEvent(s, (cudaEvent_t)after, 0);
    } else {
        e = cudaEventRecord(arena_ev[d], c->shared);
        if (e == cudaSuccess)
            e = cudaStreamWaitEvent(s, arena_ev[d], 0);
    }
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(dst, src, len, cudaMemcpyDeviceToDevice, s);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(s);
    return e == cudaSuccess ? 0 : gkv__cuda_fail("a copy between a value and a transfer arena", e);
}

/* A mark is an event of its own recorded on the shared lane (made per pull: a few us on the
 * loop, against the hundreds a wait for later clears cost). */
int gkv__cuda_shared_mark(gkv_backend_t *b, void **mark)
{
    cuda_backend_t *c = gkv__cuda_on(b);
    cudaEvent_t ev = NULL;
    *mark = NULL;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e == cudaSuccess && (e = cudaEventRecord(ev, c->shared)) != cudaSuccess)
        cudaEventDestroy(ev);
    if (e != cudaSuccess)
        return gkv__cuda_fail("marking the shared lane", e);
    *mark = ev;
    return 0;
}

void gkv__cuda_mark_free(gkv_backend_t *b, void *mark)
{
    (void)gkv__cuda_on(b);
    if (mark)
        cudaEventDestroy((cudaEvent_t)mark);
}

int gkv__cuda_shared_wait(gkv_backend_t *b, void *mark)
{
    cuda_backend_t *c = gkv__cuda_on(b);
    int d = b->device >= 0 && b->device < GKV_MAX_DEVICES ? b->device : 0;
    if (mark) {
        cudaError_t e = cudaEventSynchronize((cudaEvent_t)mark);
        return e == cudaSuccess ? 0 : gkv__cuda_fail("waiting for the shared lane's mark", e);
    }
    if (worker_stream(d))
        return GKV_EIO;
    cudaError_t e = cudaEventRecord(arena_ev[d], c->shared);
    if (e == cudaSuccess)
        e = cudaEventSynchronize(arena_ev[d]);
    return e == cudaSuccess ? 0 : gkv__cuda_fail("waiting for the shared lane", e);
}
