/* backend_cuda.c: values in GPU memory, allocated stream-ordered from one exportable CUDA
 * memory pool (POSIX file descriptor handles, release threshold at maximum), so that neither
 * cudaMalloc nor cudaFree ever sits on the request path. Copies run on a few non-blocking
 * streams ("lanes"). A copy's completion is an event recorded after it, queried by the loop
 * (cuda_poll) while copies are in flight: no callback thread, no wake-up; fences of the shared
 * lane report through cudaLaunchHostFunc. Nothing on the request path synchronises. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_cuda.h"
#include "trace.h"
#include "backend_cuda_adopt.h"
#include "error.h"
#include "gpu_uuid.h"
#include "log.h"

_Thread_local int gkv__cuda_current_device = -1;

int gkv__cuda_fail(const char *what, cudaError_t e)
{
    (void)cudaGetLastError(); /* a later launch's check must not find this one */
    GKV_ERROR("cuda backend: %s failed: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
    return e == cudaErrorMemoryAllocation ? GKV_EOOM : GKV_EIO;
}

cudaError_t gkv__cuda_pool_create(int dev, cudaMemPool_t *pool)
{
    struct cudaMemPoolProps props;
    memset(&props, 0, sizeof(props));
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = dev;
    return cudaMemPoolCreate(pool, &props);
}

/* Up to this share of the memory limit stays allocated in kept exports. */
#define EXPORTS_SHARE 8

static void exports_stats(cuda_backend_t *c)
{
    c->base.kept_bytes = gkv_exports_bytes(c->exports);
    c->base.kept_reuses = gkv_exports_reuses(c->exports);
    c->base.held = gkv_exports_holds_now(c->exports);
}

/* Gives back a kept export for good (exports.h's release). */
static void exports_release(void *ctx, uint64_t addr, uint64_t size)
{
    (void)size;
    cuda_backend_t *c = ctx;
    cudaError_t e = cudaFreeAsync((void *)(uintptr_t)addr, c->shared);
    if (e != cudaSuccess)
        gkv__cuda_fail("cudaFreeAsync (kept export)", e);
}

/* Stream-ordered allocation from the pool. When the pool is full and make_room says so, kept
 * exports are given back and the allocation tried once more. Returns 0, GKV_EOOM or GKV_EIO. */
static int pool_alloc(cuda_backend_t *c, uint64_t size, cudaStream_t s, bool make_room,
                      uint64_t *out)
{
    if (size < CUDA_ALLOC_MIN) /* cleared whole by one copy on a copy engine (gkv__cuda_clear) */
        size = CUDA_ALLOC_MIN;
    for (int attempt = 0;; attempt++) {
        void *p = NULL;
        cudaError_t e = cudaMallocFromPoolAsync(&p, size, c->pool, s);
        if (e == cudaSuccess) {
            *out = (uint64_t)(uintptr_t)p;
            return 0;
        }
        if (e != cudaErrorMemoryAllocation)
            return gkv__cuda_fail("cudaMallocFromPoolAsync", e);
        (void)cudaGetLastError(); /* out of memory is not sticky: clear it */
        if (attempt || !make_room || gkv_exports_drain(c->exports) == 0)
            return GKV_EOOM;
        exports_stats(c);
        /* Other streams reuse the freed blocks once the frees have run. */
        if ((e = cudaStreamSynchronize(c->shared)) != cudaSuccess)
            return gkv__cuda_fail("giving back kept exports", e);
    }
}

/* 1 when clear number tag has run on the GPU, 0 when not yet, or GKV_EIO. */
static int clear_ran(cuda_backend_t *c, uint64_t tag)
{
    if (tag <= c->zero_done)
        return 1;
    unsigned slot = (unsigned)(tag % GKV_CUDA_ZERO_EVS);
    cudaError_t e = cudaEventQuery(c->zero_evs[slot]);
    if (e == cudaSuccess) {
        if (c->zero_slot_seq[slot] > c->zero_done)
            c->zero_done = c->zero_slot_seq[slot];
        return 1;
    }
    if (e != cudaErrorNotReady)
        return gkv__cuda_fail("cudaEventQuery (clear of a kept allocation)", e);
    (void)cudaGetLastError(); /* not ready is not an error to remember */
    return 0;
}

/* A kept allocation was cleared when it was kept (cuda_free), by clear number tag. Whoever
 * takes it must come after that clear: a lane's copies wait for it on the GPU; a CREATE (the
 * shared lane) has its reply's fence wait for it, unless it has already run, which is the
 * common case: then nothing waits. The event of tag's slot marks tag's clear or a later one
 * (the clears run in order on the shared lane): seen done, every clear up to it is; not yet,
 * waiting for it is waiting for tag's clear and perhaps a little more. */
static int after_clear(cuda_backend_t *c, int lane, uint64_t addr, uint64_t tag)
{
    c->zero_taken = addr;
    gkv_trace("d_kept", tag, c->zero_seq - tag); /* GPUKV_TRACE: clears queued after its own */
    int ran = clear_ran(c, tag);
    if (ran != 0)
        return ran < 0 ? ran : 0;
    GKV_DEBUG("a kept allocation taken before its clear ran (lane %d)", lane);
    gkv_trace("d_kept_unclear", tag, (uint64_t)lane);
    if (lane == GKV_LANE_SHARED) {
        c->shared_work++; /* the clear is on the shared lane: the next fence comes after it */
        return 0;
    }
    cudaError_t e =
        cudaStreamWaitEvent(gkv__cuda_lane(c, lane), c->zero_evs[tag % GKV_CUDA_ZERO_EVS], 0);
    return e == cudaSuccess ? 0
                            : gkv__cuda_fail("cudaStreamWaitEvent (clear of a kept allocation)", e);
}

/* backend.h zeroed_now: the kept allocation just taken, once its clear has run. */
static bool cuda_zeroed_now(gkv_backend_t *b, gkv_devptr_t p, uint64_t size)
{
    (void)size;
    cuda_backend_t *c = gkv__cuda_on(b);
    return p.v && p.v == c->zero_taken && !c->zero_broken &&
           clear_ran(c, gkv_exports_tag_of(c->exports, p.v)) == 1;
}

static void cuda_free(gkv_backend_t *b, gkv_devptr_t p, uint64_t size, int lane);
static int cuda_export_ptr(gkv_backend_t *b, gkv_devptr_t p, uint64_t size, uint8_t *out,
                           size_t cap, size_t *len);

/* The clear-ahead stock. A CREATE of a new value waits for its memory's clear (a copy engine
 * writing zeros: ~85 us for 4 MiB on the H200) and its export (12-22 us). Writers tend to
 * create values of one size after another (zarr chunks, KV blocks, tensors of one shape), often
 * many at once (gkv_set_many_from_device pipelines its CREATEs). So the backend keeps memory of
 * the size CREATEs last got fresh from the pool ready: made, exported, cleared and kept at a
 * loop turn (cuda_ahead), after the turn's replies, topped up to ahead_target allocations, which
 * doubles each time a CREATE of that size finds none ready (up to AHEAD_BURST; a CREATE of
 * another size starts over): a run of CREATEs of one size (a batch of zarr chunks) is covered
 * after a few misses instead of one more each run. A CREATE that takes one whose clear has run
 * has nothing to wait for, and its reply's fence does not hold the connection, so pipelined
 * CREATEs are answered in one turn. What is made is a kept export like any other (bounded by
 * the kept share of the limit, given back first when the pool is full), AHEAD_STEP a turn. Only
 * sizes whose clear is a copy on a copy engine (gkv__cuda_clear: up to 8 MiB): a larger clear
 * is a memset kernel of the daemon's context, and made ahead it lands between a client's GPU
 * work (measured on the H100: a 16 MiB get after a put went from 115 to 151-203 us). */
#define AHEAD_MAX (8ull << 20)
#define AHEAD_BURST 32u
#define AHEAD_STEP 2u

static void want_ahead(cuda_backend_t *c, uint64_t size)
{
    if (size <= AHEAD_MAX && c->pool_exported && !c->zero_broken)
        c->ahead_want = size;
}

static int cuda_alloc(gkv_backend_t *b, uint64_t size, int lane, gkv_devptr_t *out)
{
    cuda_backend_t *c = gkv__cuda_on(b);
    c->zero_taken = 0; /* only the allocation made last may skip its clear */
    if (lane == GKV_LANE_BATCH && size <= GKV_SLAB_MAX)
        return gkv_slab_get(c->slab, size, &out->v);
    if (gkv_exports_take(c->exports, size, &out->v)) {
        exports_stats(c);
        if (lane == GKV_LANE_SHARED && size == c->last_fresh) {
            want_ahead(c, size); /* topped up to the target */
        } else if (lane == GKV_LANE_SHARED && !gkv_exports_holds(c->exports, size)) {
            c->last_fresh = size; /* the last of a size: one more made */
            c->ahead_target = 1;
            want_ahead(c, size);
        }
        return after_clear(c, lane, out->v, gkv_exports_tag_of(c->exports, out->v));
    }
    if (lane == GKV_LANE_SHARED)
        c->shared_work++;
    gkv_trace("d_fresh", size, (uint64_t)lane); /* GPUKV_TRACE: none kept of this size */
    int rc = pool_alloc(c, size, gkv__cuda_lane(c, lane), true, &out->v);
    gkv_trace("d_pooled", size, (uint64_t)rc); /* GPUKV_TRACE: the pool's allocation returned */
    if (rc == 0 && lane == GKV_LANE_SHARED) {
        if (size == c->last_fresh) { /* none was ready: keep twice as many ready */
            c->ahead_target = c->ahead_target ? 2 * c->ahead_target : 1;
            if (c->ahead_target > AHEAD_BURST)
                c->ahead_target = AHEAD_BURST;
            want_ahead(c, size);
        } else {
            c->last_fresh = size;
            c->ahead_target = 0;
        }
    }
    if (rc == 0 && lane == GKV_LANE_BATCH) {
        /* A batch writes it, but a lane copy may too (a SET's chunk given up part way): lanes
         * wait for batch_ev, so it covers this allocation as well. */
        cudaError_t e = cudaEventRecord(c->batch_ev, c->batch);
        if (e != cudaSuccess) {
            cuda_free(b, *out, size, lane);
            return gkv__cuda_fail("cudaEventRecord (an allocation in batch order)", e);
        }
        c->batches++;
    }
    return rc;
}

static void cuda_free(gkv_backend_t *b, gkv_devptr_t p, uint64_t size, int lane)
{
    (void)lane;
    cuda_backend_t *c = gkv__cuda_on(b);
    if (size <= GKV_SLAB_MAX && gkv_slab_owns(c->slab, p.v)) {
        gkv_slab_put(c->slab, p.v, size);
        return;
    }
    bool kept = gkv_exports_freed(c->exports, p.v);
    exports_stats(c); /* kept, or older ones given back to make room */
    if (kept) {
        /* Cleared now, off any reply's path: the next CREATE of this size, for any key, is
         * handed memory that shows nothing of this value (after_clear orders its users). */
        uint64_t seq = ++c->zero_seq;
        unsigned slot = (unsigned)(seq % GKV_CUDA_ZERO_EVS);
        cudaError_t e = gkv__cuda_clear(c, (void *)(uintptr_t)p.v, size);
        if (e == cudaSuccess)
            e = cudaEventRecord(c->zero_evs[slot], c->shared);
        if (e != cudaSuccess) {
            gkv__cuda_fail("clearing a kept allocation", e);
            c->zero_broken = true;
        }
        c->zero_slot_seq[slot] = seq;
        gkv_exports_tag(c->exports, p.v, seq);
        return;
    }
    /* Nothing uses the memory any more (refcounts), so any stream will do. The CREATE stream
     * lets the next CREATE reuse this block in stream order instead of growing the pool;
     * lanes reuse it once the free has completed (the pool's default reuse policies). */
    cudaError_t e = cudaFreeAsync((void *)(uintptr_t)p.v, c->shared);
    if (e != cudaSuccess)
        gkv__cuda_fail("cudaFreeAsync", e);
}

/* Makes one allocation of size ahead: from the pool on the shared lane, exported, then kept
 * through cuda_free, which clears it and records its event (after_clear orders whoever takes
 * it). Never makes room: false when the pool is full (or the export failed). */
static bool make_ahead(gkv_backend_t *b, cuda_backend_t *c, uint64_t size)
{
    gkv_devptr_t v;
    if (pool_alloc(c, size, c->shared, false, &v.v))
        return false;
    uint8_t data[GKV_EXPORT_MAX];
    size_t len;
    const uint8_t *known;
    uint32_t known_len;
    /* Exported as a CREATE's reply would export it; only a remembered export can be kept. */
    if (cuda_export_ptr(b, v, size, data, sizeof(data), &len) ||
        !gkv_exports_find(c->exports, v.v, &known, &known_len)) {
        cudaError_t e = cudaFreeAsync((void *)(uintptr_t)v.v, c->shared);
        if (e != cudaSuccess)
            gkv__cuda_fail("cudaFreeAsync (ahead)", e);
        return false;
    }
    c->base.kept_ahead++;
    cuda_free(b, v, size, GKV_LANE_SHARED);
    return true;
}

/* Tops the stock of the size want_ahead asked for up to its target (at least one),
 * AHEAD_STEP allocations a turn (~30 us each with its export: what a request arriving
 * meanwhile, such as the SEALs of the CREATEs just answered, may wait). True while more is
 * left for the next turn. */
static bool cuda_ahead(gkv_backend_t *b)
{
    cuda_backend_t *c = gkv__cuda_on(b);
    uint64_t size = c->ahead_want;
    if (!size)
        return false;
    unsigned want = size == c->last_fresh && c->ahead_target ? c->ahead_target : 1;
    unsigned have = gkv_exports_count(c->exports, size);
    gkv_trace("d_ahead", have, want); /* GPUKV_TRACE: the stock topped up from here */
    for (unsigned made = 0; have < want && made < AHEAD_STEP; made++) {
        /* Stopped when the pool is full, and when the kept share cannot hold one more (what
         * was made was given back, or pushed out one kept before it): never a loop that
         * allocates and gives back for ever. */
        unsigned before = have;
        if (!make_ahead(b, c, size) || (have = gkv_exports_count(c->exports, size)) <= before) {
            c->ahead_want = 0;
            return false;
        }
    }
    if (have >= want)
        c->ahead_want = 0;
    gkv_trace("d_ahead_done", have, want);
    return c->ahead_want != 0;
}

static void *cuda_host_view(gkv_backend_t *b, gkv_devptr_t p)
{
    (void)b;
    (void)p;
    return NULL;
}

static int slab_region_new(void *ctx, uint64_t size, uint64_t *base)
{
    cuda_backend_t *c = ctx;
    c->regions_made++;
    return pool_alloc(c, size, c->batch, true, base);
}

static void slab_region_free(void *ctx, uint64_t base, uint64_t size)
{
    cuda_backend_t *c = ctx;
    (void)size;
    cudaError_t e = cudaFreeAsync((void *)(uintptr_t)base, c->shared);
    if (e != cudaSuccess)
        gkv__cuda_fail("cudaFreeAsync (slab region)", e);
}

static int cuda_hold(gkv_backend_t *b, gkv_devptr_t p, int delta)
{
    cuda_backend_t *c = gkv__cuda_on(b);
    bool ok = gkv_exports_hold(c->exports, p.v, delta);
    exports_stats(c); /* kept bytes past the cap may have been given back */
    return ok ? 0 : GKV_ENOTSUP;
}

static int cuda_exportable(gkv_backend_t *b, gkv_devptr_t p)
{
    return !gkv_slab_owns(((cuda_backend_t *)b)->slab, p.v);
}

static int cuda_link(gkv_backend_t *b, gkv_backend_t *peer)
{
    cuda_backend_t *c = gkv__cuda_on(b);
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
        return gkv__cuda_fail("cudaMemPoolSetAccess (a peer GPU)", e);
    return 1;
}

static void *cuda_staging_alloc(gkv_backend_t *b, size_t size)
{
    (void)b;
    void *p = NULL;
    cudaError_t e = cudaHostAlloc(&p, size, cudaHostAllocPortable); /* every device's */
    if (e != cudaSuccess) {
        gkv__cuda_fail("cudaHostAlloc (staging)", e);
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
    cuda_backend_t *c = gkv__cuda_on(b);
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
    cuda_backend_t *c = gkv__cuda_on(b);
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
        return gkv__cuda_fail("cudaMemPoolExportPointer", e);
    memcpy(out, &data, sizeof(data));
    *len = sizeof(data);
    (void)gkv_exports_add(c->exports, p.v, size, out, (uint32_t)*len);
    return 0;
}

static int cuda_origin(gkv_backend_t *b, gkv_devptr_t p, uint64_t size, uint64_t *base,
                       uint64_t *base_size, uint8_t *exp, size_t cap, size_t *len)
{
    cuda_backend_t *c = gkv__cuda_on(b);
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
            return gkv__cuda_fail("cudaMemPoolExportPointer (slab region)", e);
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
    return gkv__cuda_adopt_open(gkv__cuda_on(b)->base.device, fd, src, why, cap);
}

static int cuda_adopt_copy(gkv_backend_t *b, void *src, uint64_t base, uint64_t base_size,
                           const uint8_t *exp, size_t exp_len, uint64_t addr, uint64_t len,
                           gkv_devptr_t dst)
{
    cuda_backend_t *c = gkv__cuda_on(b);
    if (c->regions_seen != c->regions_made) {
        /* dst may be a slot of a region just allocated on the batch stream: the shared lane
         * waits for that allocation. */
        cudaError_t e = cudaEventRecord(c->batch_ev, c->batch);
        if (e != cudaSuccess)
            return gkv__cuda_fail("cudaEventRecord (adopting)", e);
        c->batches++;
        int rc = gkv__cuda_shared_after_batches(c);
        if (rc)
            return rc;
        c->regions_seen = c->regions_made;
    }
    c->shared_work++;
    return gkv__cuda_adopt_copy(src, c->shared, base, base_size, exp, exp_len, addr, len, dst.v);
}

static int cuda_adopt_close(gkv_backend_t *b, void *src)
{
    return gkv__cuda_adopt_close(src, gkv__cuda_on(b)->shared);
}

static void cuda_close(gkv_backend_t *b)
{
    cuda_backend_t *c = gkv__cuda_on(b);
    if (c->batch) {
        cudaStreamSynchronize(c->batch);
        cudaStreamDestroy(c->batch);
    }
    if (c->batch_ev)
        cudaEventDestroy(c->batch_ev);
    if (c->peer_ev)
        cudaEventDestroy(c->peer_ev);
    for (int i = 0; i < GKV_CUDA_ZERO_EVS; i++)
        if (c->zero_evs[i])
            cudaEventDestroy(c->zero_evs[i]);

    gkv_slab_free_all(c->slab);   /* frees regions on the shared lane: synchronised below */
    gkv_exports_fini(c->exports); /* the same */
    if (c->shared) {
        cudaStreamSynchronize(c->shared);
        cudaStreamDestroy(c->shared);
    }
    if (c->zero_src && c->clear_mode - 1 == CLEAR_H2D)
        cudaFreeHost(c->zero_src);
    else if (c->zero_src)
        cudaFree(c->zero_src);
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
        if (r->t0)
            cudaEventDestroy(r->t0);
        if (r->t1)
            cudaEventDestroy(r->t1);
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
    .copy_in = gkv__cuda_copy_in,
    .copy_out = gkv__cuda_copy_out,
    .copy_batch = gkv__cuda_copy_batch,
    .poll = gkv__cuda_poll,
    .batch_wait = gkv__cuda_batch_wait,
    .exportable = cuda_exportable,
    .hold = cuda_hold,
    .copy_shared = gkv__cuda_copy_shared,
    .copy_dev = gkv__cuda_copy_dev,
    .copy_from = gkv__cuda_copy_from,
    .link = cuda_link,
    .read_sync = gkv__cuda_read_sync,
    .write_sync = gkv__cuda_write_sync,
    .pin_host = gkv__cuda_pin_host,
    .unpin_host = gkv__cuda_unpin_host,
    .zero_shared = gkv__cuda_zero_shared,
    .zeroed_now = cuda_zeroed_now,
    .fence_shared = gkv__cuda_fence_shared,
    .ahead = cuda_ahead,
    .staging_alloc = cuda_staging_alloc,
    .staging_free = cuda_staging_free,
    .share = cuda_share,
    .export_ptr = cuda_export_ptr,
    .origin = cuda_origin,
    .adopt_open = cuda_adopt_open,
    .adopt_copy = cuda_adopt_copy,
    .adopt_close = cuda_adopt_close,
    .arena_alloc = gkv__cuda_arena_alloc,
    .arena_free = gkv__cuda_arena_free,
    .arena_copy = gkv__cuda_arena_copy,
    .shared_mark = gkv__cuda_shared_mark,
    .mark_free = gkv__cuda_mark_free,
    .shared_wait = gkv__cuda_shared_wait,
    .foreign_open = gkv__cuda_foreign_open,
    .foreign_close = gkv__cuda_foreign_close,
    .close = cuda_close,
};

/* --prealloc: the pool takes size bytes (at most the limit) from the driver now and keeps them
 * (its release threshold is never reached): values that memory covers are carved from it
 * instead of mapping new memory on a request's path (~0.3 ms for a 64 MiB value's first read
 * from another node, measured on the H100). Nothing is exported or handed out. */
static cudaError_t pool_keep(cuda_backend_t *c, uint64_t size)
{
    if (size > c->base.capacity)
        size = c->base.capacity;
    void *p = NULL;
    cudaError_t e = cudaMallocFromPoolAsync(&p, size, c->pool, c->shared);
    if (e == cudaSuccess)
        e = cudaFreeAsync(p, c->shared);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(c->shared);
    return e;
}

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
    gkv__cuda_current_device = dev;
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
    if ((e = gkv__cuda_pool_create(dev, &c->pool)) != cudaSuccess) {
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
        (e = cudaEventCreateWithFlags(&c->peer_ev, cudaEventDisableTiming)) != cudaSuccess) {
        snprintf(why, cap, "creating streams: %s", cudaGetErrorString(e));
        goto fail;
    }
    for (int i = 0; i < GKV_CUDA_ZERO_EVS; i++)
        if ((e = cudaEventCreateWithFlags(&c->zero_evs[i], cudaEventDisableTiming)) !=
            cudaSuccess) {
            snprintf(why, cap, "creating events: %s", cudaGetErrorString(e));
            goto fail;
        }
    c->base.capacity = cfg->limit ? cfg->limit : (uint64_t)free_b / 10 * 9;
    gkv_slab_backing_t backing = {slab_region_new, slab_region_free, c};
    if (gkv_slab_alloc_init(&c->slab, &backing) ||
        gkv_exports_init(&c->exports, c->base.capacity / EXPORTS_SHARE, exports_release, c)) {
        snprintf(why, cap, "out of host memory");
        goto fail;
    }
    if (cfg->prealloc && (e = pool_keep(c, cfg->prealloc)) != cudaSuccess) {
        snprintf(why, cap, "--prealloc: the pool of device %d could not take %llu bytes: %s", dev,
                 (unsigned long long)cfg->prealloc, cudaGetErrorString(e));
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
