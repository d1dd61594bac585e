/* backend_cuda_foreign.c: a client process's memory opened for the daemon's copies into it
 * (BUFFER, GET with into; backend.h foreign_open). The client exports a cudaMalloc allocation
 * with cudaIpcGetMemHandle; the daemon opens it once, on the device the client named, and
 * learns the allocation's extent from the driver (cuMemGetAddressRange), so that no request can
 * make it write outside what the client exported. */
#include <cuda_runtime.h>
#include <pthread.h>
#include <string.h>

#include "backend_cuda.h"
#include "error.h"
#include "log.h"

/* cuMemGetAddressRange, reached through the runtime (the driver's entry point). */
typedef int (*address_range_fn)(unsigned long long *base, size_t *size, unsigned long long ptr);
static address_range_fn address_range;
static pthread_once_t address_range_once = PTHREAD_ONCE_INIT;

static void find_address_range(void)
{
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault,
                                         &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
        address_range = (address_range_fn)fn;
}

int gkv__cuda_foreign_open(gkv_backend_t *b, const uint8_t *handle, size_t len, gkv_devptr_t *p,
                           uint64_t *size)
{
    cudaIpcMemHandle_t h;
    if (len != sizeof(h))
        return GKV_EINVAL;
    pthread_once(&address_range_once, find_address_range);
    if (!address_range)
        return GKV_EIO;
    (void)gkv__cuda_on(b);
    memcpy(&h, handle, sizeof(h));
    void *ptr = NULL;
    cudaError_t e = cudaIpcOpenMemHandle(&ptr, h, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* a refused handle is the client's error, not the device's */
        GKV_INFO("cuda backend: a client's memory handle did not open: %s", cudaGetErrorName(e));
        return GKV_EINVAL;
    }
    struct cudaPointerAttributes a;
    unsigned long long base = 0;
    size_t bytes = 0;
    if (cudaPointerGetAttributes(&a, ptr) != cudaSuccess || a.type != cudaMemoryTypeDevice ||
        a.device != b->device ||
        address_range(&base, &bytes, (unsigned long long)(uintptr_t)ptr) != 0 ||
        base != (unsigned long long)(uintptr_t)ptr) {
        (void)cudaGetLastError();
        (void)cudaIpcCloseMemHandle(ptr);
        return GKV_EINVAL; /* memory on another GPU, or not what the handle should name */
    }
    p->v = (uint64_t)(uintptr_t)ptr;
    *size = bytes;
    return 0;
}

void gkv__cuda_foreign_close(gkv_backend_t *b, gkv_devptr_t p)
{
    (void)gkv__cuda_on(b);
    cudaError_t e = cudaIpcCloseMemHandle((void *)(uintptr_t)p.v);
    if (e != cudaSuccess)
        gkv__cuda_fail("cudaIpcCloseMemHandle (a client's buffer)", e);
}
