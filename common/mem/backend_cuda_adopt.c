/* backend_cuda_adopt.c: a predecessor's pool imported and drained; see backend_cuda_adopt.h. */
#include "backend_cuda_adopt.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "error.h"
#include "log.h"

/* One allocation of the predecessor, imported. */
typedef struct {
    uint64_t base;
    void *ptr;
    UT_hash_handle hh;
} imported_t;

typedef struct {
    int device;
    cudaMemPool_t pool;
    imported_t *allocs;
    cudaError_t failed; /* the first copy that could not be queued */
} adopted_t;

int gkv__cuda_adopt_open(int device, int fd, void **src, char *why, size_t cap)
{
    adopted_t *a = calloc(1, sizeof(*a));
    if (!a) {
        snprintf(why, cap, "out of host memory");
        return GKV_EIO;
    }
    a->device = device;
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess)
        e = cudaMemPoolImportFromShareableHandle(&a->pool, (void *)(uintptr_t)fd,
                                                 cudaMemHandleTypePosixFileDescriptor, 0);
    if (e != cudaSuccess) {
        snprintf(why, cap, "importing the stored memory pool failed: %s", cudaGetErrorString(e));
        free(a);
        return GKV_EIO;
    }
    *src = a;
    return 0;
}

int gkv__cuda_adopt_copy(void *src, void *stream, uint64_t base, uint64_t base_size,
                         const uint8_t *exp, size_t exp_len, uint64_t addr, uint64_t len,
                         uint64_t dst)
{
    adopted_t *a = src;
    struct cudaMemPoolPtrExportData data;
    if (exp_len != sizeof(data) || addr < base || addr - base > base_size ||
        len > base_size - (addr - base))
        return GKV_EINVAL;
    imported_t *im;
    HASH_FIND(hh, a->allocs, &base, sizeof(base), im);
    if (!im) {
        if (!(im = calloc(1, sizeof(*im))))
            return GKV_EIO;
        memcpy(&data, exp, sizeof(data));
        cudaError_t e = cudaMemPoolImportPointer(&im->ptr, a->pool, &data);
        if (e != cudaSuccess) {
            GKV_WARN("adopting: importing the allocation at 0x%llx failed: %s",
                     (unsigned long long)base, cudaGetErrorString(e));
            free(im);
            return GKV_EIO;
        }
        im->base = base;
        HASH_ADD(hh, a->allocs, base, sizeof(im->base), im);
    }
    cudaError_t e = cudaMemcpyAsync((void *)(uintptr_t)dst, (uint8_t *)im->ptr + (addr - base), len,
                                    cudaMemcpyDefault, (cudaStream_t)stream);
    if (e != cudaSuccess) {
        if (a->failed == cudaSuccess)
            a->failed = e;
        return GKV_EIO;
    }
    return 0;
}

int gkv__cuda_adopt_close(void *src, void *stream)
{
    adopted_t *a = src;
    cudaError_t e = cudaStreamSynchronize((cudaStream_t)stream);
    if (e == cudaSuccess)
        e = a->failed;
    if (e != cudaSuccess)
        GKV_ERROR("adopting: copying from the stored pool failed: %s", cudaGetErrorString(e));
    imported_t *im, *tmp;
    HASH_ITER(hh, a->allocs, im, tmp)
    {
        HASH_DEL(a->allocs, im);
        cudaFree(im->ptr);
        free(im);
    }
    cudaMemPoolDestroy(a->pool);
    free(a);
    return e == cudaSuccess ? 0 : GKV_EIO;
}
