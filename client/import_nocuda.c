/* import_nocuda.c: the CUDA half of zero-copy in a libgpukv built without CUDA. */
#include <stdio.h>

#include "error.h"
#include "import.h"

int gkv__cuda_attach(int fd, const char *uuid, gkv_cuda_pool_t **out, int *device, char *why,
                     size_t cap)
{
    (void)fd;
    (void)uuid;
    (void)out;
    (void)device;
    snprintf(why, cap, "this libgpukv was built without CUDA");
    return GKV_ENOTSUP;
}

int gkv__cuda_import(gkv_cuda_pool_t *z, const void *data, size_t len, gkv_import_t **out,
                     void **ptr)
{
    (void)z;
    (void)data;
    (void)len;
    (void)out;
    (void)ptr;
    return GKV_ENOTSUP;
}

int gkv__cuda_unimport(gkv_import_t *v)
{
    (void)v;
    return GKV_ENOTSUP;
}

void gkv__cuda_import_shown(gkv_import_t *v)
{
    (void)v;
}

void gkv__cuda_import_guard(gkv_import_t *v)
{
    (void)v;
}

bool gkv__cuda_hold(gkv_import_t *v, const void *holder, uint64_t lease)
{
    (void)v;
    (void)holder;
    (void)lease;
    return false;
}

bool gkv__cuda_holdable(gkv_import_t *v)
{
    (void)v;
    return false;
}

uint64_t gkv__cuda_unhold(gkv_import_t *v)
{
    (void)v;
    return 0;
}

void gkv__cuda_detach(gkv_cuda_pool_t *z)
{
    (void)z;
}

int gkv__cuda_mapping_copy(gkv_import_t *v, void *mptr, void *buf, size_t len, bool into,
                           bool wait)
{
    (void)v;
    (void)wait;
    return into ? gkv__cuda_copy(mptr, buf, len) : gkv__cuda_copy(buf, mptr, len);
}

int gkv__cuda_import_device(const gkv_import_t *v)
{
    (void)v;
    return -1;
}

int gkv__cuda_device_sync(int dev)
{
    (void)dev;
    return gkv__cuda_stream_sync(NULL);
}

int gkv__cuda_ptr_uuid(const void *p, char *uuid, size_t cap)
{
    (void)p;
    (void)uuid;
    (void)cap;
    return GKV_ENOTSUP;
}

int gkv__cuda_ipc_handle(const void *p, uint8_t *handle, uint64_t *off, uint64_t *size, char *uuid,
                         size_t cap)
{
    (void)p;
    (void)handle;
    (void)off;
    (void)size;
    (void)uuid;
    (void)cap;
    return GKV_ENOTSUP;
}

int gkv__cuda_copy_async(void *dst, const void *src, size_t len)
{
    (void)dst;
    (void)src;
    (void)len;
    return GKV_ENOTSUP;
}

int gkv__cuda_copy(void *dst, const void *src, size_t len)
{
    (void)dst;
    (void)src;
    (void)len;
    return GKV_ENOTSUP;
}

int gkv__cuda_host_register(void *p, size_t n, void **dev)
{
    (void)p;
    (void)n;
    *dev = NULL;
    return GKV_ENOTSUP;
}

void gkv__cuda_host_unregister(void *p)
{
    (void)p;
}

int gkv__cuda_write_value(void *stream, void *dev, uint64_t value)
{
    (void)stream;
    (void)dev;
    (void)value;
    return GKV_ENOTSUP;
}

int gkv__cuda_stream_sync(void *stream)
{
    (void)stream;
    return GKV_ENOTSUP;
}
