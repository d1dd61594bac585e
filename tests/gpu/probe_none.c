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
