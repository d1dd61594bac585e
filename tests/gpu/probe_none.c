/* probe_none.c: the GPU probe on builds without CUDA: never a GPU. */
#include "probe.h"

int gkv_test_gpu_usable(void)
{
    return 0;
}

int gkv_test_gpu_meminfo(size_t *free_b, size_t *total_b)
{
    *free_b = *total_b = 0;
    return -1;
}

int gkv_test_gpu_read(void *dst, const void *src, size_t len)
{
    (void)dst, (void)src, (void)len;
    return -1;
}

int gkv_test_gpu_write(void *dst, const void *src, size_t len)
{
    (void)dst, (void)src, (void)len;
    return -1;
}

void *gkv_test_stream_new(void)
{
    return NULL;
}

void gkv_test_stream_free(void *stream)
{
    (void)stream;
}

int gkv_test_stream_write_later(void *stream, int delay_ms, void *dst, const void *src,
                                size_t len)
{
    (void)stream, (void)delay_ms, (void)dst, (void)src, (void)len;
    return -1;
}
