/* import_cuda.c: importing the daemon's CUDA memory pool and its values: the process's one
 * registry of imports (import.h). */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "gpu_uuid.h"
#include "hash.h"
#include "import.h"

/* An imported pool: one per server pool per process, whatever the number of connections. */
struct gkv_cuda_pool {
    cudaMemPool_t pool;
    int device;
    unsigned refs;           /* connections attached */
    gkv_import_t *values; /* imported from it, by export data */
    struct gkv_cuda_pool *next;
};

struct gkv_import {
    struct cudaMemPoolPtrExportData key;
    void *ptr;
    unsigned refs; /* mappings holding it, on any connection */
    gkv_cuda_pool_t *pool;
    bool shown;         /* a mapping of it left the library: never held */
    bool guarded;       /* GPU work the library cannot see may read it: its free waits for
                           the device (gkv_mapping_guard) */
    const void *holder; /* the connection holding it past its leases, or NULL */
    uint64_t hold_id;   /* ... the lease id its hold began with */
    bool dead;          /* held, then shown and unmapped: freed, out of the registry; the
                           holder's gkv__cuda_unhold frees what is left */
    UT_hash_handle hh;
};

/* The registry: every pool and value this process imported. Connections of one process may be
 * used from different threads. */
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static gkv_cuda_pool_t *pools;

/* Runs with `device` current and restores the caller's device afterwards. */
#define ON_DEVICE(dev, stmt)                                                                       \
    do {                                                                                           \
        int prev_ = -1;                                                                            \
        cudaGetDevice(&prev_);                                                                     \
        cudaSetDevice(dev);                                                                        \
        stmt;                                                                                      \
        if (prev_ >= 0)                                                                            \
            cudaSetDevice(prev_);                                                                  \
    } while (0)

/* Lets GPU `other` of this process read and write the imported pool of GPU dev directly (its
 * kernels may then use a mapping), where it reaches dev. */
static void grant_peer(cudaMemPool_t pool, int dev, int other)
{
    int can = 0;
    if (other == dev || cudaDeviceCanAccessPeer(&can, other, dev) != cudaSuccess || !can) {
        (void)cudaGetLastError();
        return;
    }
    struct cudaMemAccessDesc d = {.location = {.type = cudaMemLocationTypeDevice, .id = other},
                                  .flags = cudaMemAccessFlagsProtReadWrite};
    if (cudaMemPoolSetAccess(pool, &d, 1) != cudaSuccess)
        (void)cudaGetLastError(); /* not fatal: copies then go through host memory */
}

/* Whether an imported pool is granted to every other GPU that reaches its own
 * (GPUKV_PEER_MAPPINGS=1: for processes whose kernels on one GPU read mappings of another
 * directly). Not by default: once a pool is granted to another GPU, each import from it maps
 * the value for that GPU too, and after that GPU has run work of its own the mapping is made
 * anew every time (64 MiB: 9.2 ms against 0.2 ms on two H100s, bench/map_import.py). The
 * library's own copies need no grant: they run on the pool's GPU (gkv__cuda_mapping_copy), peer
 * to peer where the buffer is on another GPU (1 GiB at 386 GB/s on two H100s). */
static bool peers_at_once(void)
{
    const char *e = getenv("GPUKV_PEER_MAPPINGS");
    return e && !strcmp(e, "1");
}

int gkv__cuda_attach(int fd, const char *uuid, gkv_cuda_pool_t **out, int *device, char *why,
                     size_t cap)
{
    int n = 0, dev = -1;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(why, cap, "this process sees no GPU: %s", cudaGetErrorString(e));
        return GKV_ENOTSUP;
    }
    for (int i = 0; i < n && dev < 0; i++) {
        struct cudaDeviceProp p;
        char u[48];
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess)
            continue;
        gkv_gpu_uuid_format((const unsigned char *)p.uuid.bytes, u, sizeof(u));
        if (strcmp(u, uuid) == 0)
            dev = i;
    }
    if (dev < 0) {
        snprintf(why, cap, "the server's GPU %s is not visible to this process "
                 "(CUDA_VISIBLE_DEVICES, or a container without it?)", uuid);
        return GKV_ENOTSUP;
    }
    cudaMemPool_t pool;
    ON_DEVICE(dev, e = cudaMemPoolImportFromShareableHandle(&pool, (void *)(uintptr_t)fd,
                                                            cudaMemHandleTypePosixFileDescriptor,
                                                            0));
    if (e != cudaSuccess) {
        snprintf(why, cap, "importing the server's memory pool failed: %s", cudaGetErrorString(e));
        return GKV_ENOTSUP;
    }
    pthread_mutex_lock(&registry_lock);
    gkv_cuda_pool_t *z = pools;
    while (z && z->pool != pool)
        z = z->next;
    if (!z && (z = calloc(1, sizeof(*z)))) {
        z->pool = pool;
        z->device = dev;
        z->next = pools;
        pools = z;
        for (int i = 0; i < n && peers_at_once(); i++)
            grant_peer(pool, dev, i);
    }
    if (z)
        z->refs++;
    pthread_mutex_unlock(&registry_lock);
    if (!z) {
        ON_DEVICE(dev, cudaMemPoolDestroy(pool));
        return GKV_ENOMEM;
    }
    *device = dev;
    *out = z;
    return 0;
}

int gkv__cuda_import(gkv_cuda_pool_t *z, const void *data, size_t len, gkv_import_t **out,
                     void **ptr)
{
    struct cudaMemPoolPtrExportData key;
    if (len != sizeof(key))
        return GKV_EPROTO;
    memcpy(&key, data, sizeof(key));
    int rc = 0;
    pthread_mutex_lock(&registry_lock);
    gkv_import_t *v = NULL;
    HASH_FIND(hh, z->values, &key, sizeof(key), v);
    if (!v) {
        cudaError_t e = cudaErrorMemoryAllocation;
        if ((v = calloc(1, sizeof(*v))))
            ON_DEVICE(z->device, e = cudaMemPoolImportPointer(&v->ptr, z->pool, &key));
        if (e != cudaSuccess) {
            rc = v ? GKV_EIO : GKV_ENOMEM;
            free(v);
            v = NULL;
        } else {
            v->key = key;
            v->pool = z;
            gkv__hash_oom = 0;
            HASH_ADD(hh, z->values, key, sizeof(key), v);
            if (gkv__hash_oom) {
                ON_DEVICE(z->device, cudaFree(v->ptr));
                free(v);
                v = NULL;
                rc = GKV_ENOMEM;
            }
        }
    }
    if (v) {
        v->refs++;
        *out = v;
        *ptr = v->ptr;
    }
    pthread_mutex_unlock(&registry_lock);
    return rc;
}

/* Frees the import of v, on its device. cudaFree of an imported pointer does not wait for
 * the work still reading it (CUDA 13 on an H100, session 43: it returned in 0.06 ms while a
 * kernel of the process read the mapping, and that kernel then read the zeros and the next
 * key's bytes the daemon wrote into the memory after the RELEASE). So a guarded import (a view
 * of it was given to a framework, which may still have work queued on any stream) waits for
 * the device first, as cudaFree of cudaMalloc memory does. Not every shown one: that sync cost
 * 16 processes MAPping and unmapping 64 MiB values on one H200 ~40% of their rate (a context
 * switch each, session 44), and a C caller finishes its own work first (gkv_unmap). */
static cudaError_t free_ptr(gkv_import_t *v)
{
    cudaError_t e = cudaSuccess;
    ON_DEVICE(v->pool->device, {
        if (v->guarded)
            e = cudaDeviceSynchronize();
        cudaError_t f = cudaFree(v->ptr);
        if (e == cudaSuccess)
            e = f;
    });
    return e;
}

/* Frees v (the registry lock held). The importer's free must come before the server may free
 * the memory (a lease or a hold keeps it until then). */
static cudaError_t free_import(gkv_import_t *v)
{
    gkv_cuda_pool_t *z = v->pool;
    HASH_DELETE(hh, z->values, v);
    cudaError_t e = free_ptr(v);
    free(v);
    return e;
}

void gkv__cuda_import_shown(gkv_import_t *v)
{
    if (!v)
        return;
    pthread_mutex_lock(&registry_lock);
    v->shown = true;
    pthread_mutex_unlock(&registry_lock);
}

void gkv__cuda_import_guard(gkv_import_t *v)
{
    pthread_mutex_lock(&registry_lock);
    v->guarded = true;
    pthread_mutex_unlock(&registry_lock);
}

bool gkv__cuda_hold(gkv_import_t *v, const void *holder, uint64_t lease)
{
    bool held = false;
    pthread_mutex_lock(&registry_lock);
    if (v->refs == 1 && !v->shown && !v->holder) {
        v->holder = holder;
        v->hold_id = lease;
        v->refs = 0;
        held = true;
    }
    pthread_mutex_unlock(&registry_lock);
    return held;
}

bool gkv__cuda_holdable(gkv_import_t *v)
{
    pthread_mutex_lock(&registry_lock);
    bool ok = v->refs == 1 && !v->shown && !v->holder;
    pthread_mutex_unlock(&registry_lock);
    return ok;
}

uint64_t gkv__cuda_unhold(gkv_import_t *v)
{
    pthread_mutex_lock(&registry_lock);
    uint64_t id = v->hold_id;
    v->holder = NULL;
    v->hold_id = 0;
    if (v->dead)
        free(v);
    else if (v->refs == 0)
        (void)free_import(v);
    pthread_mutex_unlock(&registry_lock);
    return id;
}

int gkv__cuda_unimport(gkv_import_t *v)
{
    cudaError_t e = cudaSuccess;
    pthread_mutex_lock(&registry_lock);
    /* The importer's free must come before the server may free the memory (the caller's
     * lease ends after this returns); a guarded one waits for the device first (free_ptr). */
    if (--v->refs == 0 && !v->holder) {
        e = free_import(v);
    } else if (v->refs == 0 && v->shown) {
        /* Held, but a mapping of it was shown since: its import goes now (a pointer kept past
         * that unmap must not reach whatever the memory holds later); the hold stays until its
         * holder ends it (the daemon keeps the memory meanwhile, which is safe). */
        HASH_DELETE(hh, v->pool->values, v);
        e = free_ptr(v);
        v->dead = true;
    }
    pthread_mutex_unlock(&registry_lock);
    return e == cudaSuccess ? 0 : GKV_EIO;
}

void gkv__cuda_detach(gkv_cuda_pool_t *z)
{
    if (!z)
        return;
    pthread_mutex_lock(&registry_lock);
    if (--z->refs == 0 && !z->values) {
        gkv_cuda_pool_t **pp = &pools;
        while (*pp != z)
            pp = &(*pp)->next;
        *pp = z->next;
        ON_DEVICE(z->device, cudaMemPoolDestroy(z->pool));
        free(z);
    }
    pthread_mutex_unlock(&registry_lock);
}

int gkv__cuda_ptr_uuid(const void *p, char *uuid, size_t cap)
{
    struct cudaPointerAttributes a;
    struct cudaDeviceProp prop;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess || a.type != cudaMemoryTypeDevice ||
        cudaGetDeviceProperties(&prop, a.device) != cudaSuccess) {
        (void)cudaGetLastError();
        return GKV_ENOTSUP;
    }
    gkv_gpu_uuid_format((const unsigned char *)prop.uuid.bytes, uuid, cap);
    return 0;
}

/* A driver API function, reached through the runtime (the driver's entry point, as of CUDA
 * 12.0's ABI), so that libgpukv links the CUDA runtime alone; NULL when the driver has none. */
static void *driver_entry(const char *name)
{
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
        return NULL;
    return fn;
}

/* cuMemGetAddressRange. */
typedef int (*address_range_fn)(unsigned long long *base, size_t *size, unsigned long long ptr);
static address_range_fn address_range;
static pthread_once_t address_range_once = PTHREAD_ONCE_INIT;

static void find_address_range(void)
{
    address_range = (address_range_fn)driver_entry("cuMemGetAddressRange");
}

int gkv__cuda_ipc_handle(const void *p, uint8_t *handle, uint64_t *off, uint64_t *size,
                         char *uuid, size_t cap)
{
    int rc = gkv__cuda_ptr_uuid(p, uuid, cap);
    struct cudaPointerAttributes a;
    if (rc || cudaPointerGetAttributes(&a, p) != cudaSuccess)
        return rc ? rc : GKV_ENOTSUP;
    pthread_once(&address_range_once, find_address_range);
    /* Both calls act in the context of p's GPU: made current for them, then given back. */
    int was = -1;
    if (cudaGetDevice(&was) != cudaSuccess || (was != a.device && cudaSetDevice(a.device)))
        return GKV_EIO;
    unsigned long long base = 0;
    size_t bytes = 0;
    cudaIpcMemHandle_t h;
    rc = GKV_EINVAL;
    if (address_range && address_range(&base, &bytes, (unsigned long long)(uintptr_t)p) == 0 &&
        cudaIpcGetMemHandle(&h, (void *)(uintptr_t)base) == cudaSuccess)
        rc = 0;
    (void)cudaGetLastError(); /* memory from a pool or the VMM API has no such handle */
    if (was != a.device)
        (void)cudaSetDevice(was);
    if (rc)
        return rc;
    _Static_assert(sizeof(h) == GKV_IPC_HANDLE_LEN, "a CUDA IPC handle is 64 bytes");
    memcpy(handle, &h, sizeof(h));
    *off = (uint64_t)(uintptr_t)p - base;
    *size = bytes;
    return 0;
}

int gkv__cuda_host_register(void *p, size_t n, void **dev)
{
    *dev = NULL;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
        return GKV_ENOTSUP;
    if (cudaHostRegister(p, n, cudaHostRegisterMapped | cudaHostRegisterPortable) !=
        cudaSuccess)
        return GKV_EIO;
    if (cudaHostGetDevicePointer(dev, p, 0) != cudaSuccess) {
        (void)cudaHostUnregister(p);
        *dev = NULL;
        return GKV_EIO;
    }
    return 0;
}

void gkv__cuda_host_unregister(void *p)
{
    (void)cudaHostUnregister(p);
}

/* cuStreamWriteValue64 (driver_entry, above). */
typedef int (*write_value_fn)(cudaStream_t stream, unsigned long long addr,
                              unsigned long long value, unsigned int flags);
static write_value_fn write_value;
static pthread_once_t write_value_once = PTHREAD_ONCE_INIT;

static void find_write_value(void)
{
    write_value = (write_value_fn)driver_entry("cuStreamWriteValue64");
}

int gkv__cuda_write_value(void *stream, void *dev, uint64_t value)
{
    pthread_once(&write_value_once, find_write_value);
    if (!write_value)
        return GKV_ENOTSUP;
    /* Flags 0: the write follows a system-wide memory fence, so the producer's writes to the
     * value are visible before the counter says they are done. */
    return write_value((cudaStream_t)stream, (unsigned long long)(uintptr_t)dev, value, 0) == 0
               ? 0
               : GKV_EIO;
}

/* Whether this process has no usable GPU (cudaGetDeviceCount fails or finds none, as on a
 * machine with the toolkit and no GPU): no device pointer can exist then, so the copies below
 * are between host buffers and memcpy does them, and no stream has work to wait for. */
static bool no_gpu;
static pthread_once_t no_gpu_once = PTHREAD_ONCE_INIT;

static void find_gpu(void)
{
    int n = 0;
    no_gpu = cudaGetDeviceCount(&n) != cudaSuccess || n == 0;
    (void)cudaGetLastError(); /* "no device" is an answer here, not an error to keep */
}

static bool host_only(void)
{
    pthread_once(&no_gpu_once, find_gpu);
    return no_gpu;
}

int gkv__cuda_stream_sync(void *stream)
{
    if (host_only())
        return 0;
    return cudaStreamSynchronize((cudaStream_t)stream) == cudaSuccess ? 0 : GKV_EIO;
}

/* A copy on the legacy default stream of the current GPU, waited for when wait (cudaMemcpy
 * returns before a device-to-device copy has finished, and callers seal or release right
 * after); memcpy in a process with no usable GPU. 0 or GKV_EIO. */
static int legacy_copy(void *dst, const void *src, size_t len, bool wait)
{
    if (host_only()) {
        memcpy(dst, src, len);
        return 0;
    }
    cudaError_t e = cudaMemcpyAsync(dst, src, len, cudaMemcpyDefault, 0);
    if (e == cudaSuccess && wait)
        e = cudaStreamSynchronize(0);
    return e == cudaSuccess ? 0 : GKV_EIO;
}

int gkv__cuda_copy_async(void *dst, const void *src, size_t len)
{
    return legacy_copy(dst, src, len, false);
}

int gkv__cuda_copy(void *dst, const void *src, size_t len)
{
    return legacy_copy(dst, src, len, true);
}

int gkv__cuda_mapping_copy(gkv_import_t *v, void *mptr, void *buf, size_t len, bool into,
                           bool wait)
{
    void *dst = into ? mptr : buf;
    const void *src = into ? buf : mptr;
    if (!v)
        return legacy_copy(dst, src, len, wait);
    /* The copy used to be enqueued on the legacy stream of the caller's current device, after
     * the caller's work there: where that is another GPU, that work is waited for first. */
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess ||
        (cur != v->pool->device && cudaStreamSynchronize(0) != cudaSuccess))
        return GKV_EIO;
    int rc;
    ON_DEVICE(v->pool->device, rc = legacy_copy(dst, src, len, wait));
    return rc;
}

int gkv__cuda_import_device(const gkv_import_t *v)
{
    return v ? v->pool->device : -1;
}

int gkv__cuda_device_sync(int dev)
{
    if (dev < 0)
        return gkv__cuda_stream_sync(NULL);
    int rc;
    ON_DEVICE(dev, rc = gkv__cuda_stream_sync(NULL));
    return rc;
}
