/* zc_cuda.c: importing the daemon's CUDA memory pool and its values. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "zc.h"

struct gkv_zc_cuda {
    cudaMemPool_t pool;
    int device;
};

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

static void format_uuid(const unsigned char *u, char *buf, size_t cap)
{
    snprintf(buf, cap,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
             u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
             u[15]);
}

int gkv__cuda_attach(int fd, const char *uuid, gkv_zc_cuda_t **out, int *device, char *why,
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
        format_uuid((const unsigned char *)p.uuid.bytes, u, sizeof(u));
        if (strcmp(u, uuid) == 0)
            dev = i;
    }
    if (dev < 0) {
        snprintf(why, cap, "the server's GPU %s is not visible to this process "
                 "(CUDA_VISIBLE_DEVICES, or a container without it?)", uuid);
        return GKV_ENOTSUP;
    }
    gkv_zc_cuda_t *z = calloc(1, sizeof(*z));
    if (!z)
        return GKV_ENOMEM;
    ON_DEVICE(dev, e = cudaMemPoolImportFromShareableHandle(&z->pool, (void *)(uintptr_t)fd,
                                                            cudaMemHandleTypePosixFileDescriptor,
                                                            0));
    if (e != cudaSuccess) {
        snprintf(why, cap, "importing the server's memory pool failed: %s", cudaGetErrorString(e));
        free(z);
        return GKV_ENOTSUP;
    }
    z->device = dev;
    *device = dev;
    *out = z;
    return 0;
}

int gkv__cuda_import(gkv_zc_cuda_t *z, const void *data, size_t len, void **ptr)
{
    struct cudaMemPoolPtrExportData d;
    if (len != sizeof(d))
        return GKV_EPROTO;
    memcpy(&d, data, sizeof(d));
    cudaError_t e;
    ON_DEVICE(z->device, e = cudaMemPoolImportPointer(ptr, z->pool, &d));
    return e == cudaSuccess ? 0 : GKV_EIO;
}

int gkv__cuda_unimport(gkv_zc_cuda_t *z, void *ptr)
{
    /* The importer's free must come before the server may free the memory (the lease ends
     * after this returns): cudaFree waits for the device. */
    cudaError_t e;
    ON_DEVICE(z->device, e = cudaFree(ptr));
    return e == cudaSuccess ? 0 : GKV_EIO;
}

void gkv__cuda_detach(gkv_zc_cuda_t *z)
{
    if (!z)
        return;
    ON_DEVICE(z->device, cudaMemPoolDestroy(z->pool));
    free(z);
}

int gkv__cuda_copy(void *dst, const void *src, size_t len)
{
    /* cudaMemcpy returns before a device-to-device copy has finished: wait for it, since the
     * caller seals or releases right after. */
    cudaError_t e = cudaMemcpyAsync(dst, src, len, cudaMemcpyDefault, 0);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(0);
    return e == cudaSuccess ? 0 : GKV_EIO;
}
