/* probe_cuda.c: the GPU probe on builds with the CUDA toolkit. */
#include <cuda_runtime.h>

#include "probe.h"

int gkv_test_gpu_usable(void)
{
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

int gkv_test_gpu_meminfo(size_t *free_b, size_t *total_b)
{
    if (cudaSetDevice(0) != cudaSuccess || cudaFree(0) != cudaSuccess)
        return -1;
    return cudaMemGetInfo(free_b, total_b) == cudaSuccess ? 0 : -1;
}

int gkv_test_gpu_read(void *dst, const void *src, size_t len)
{
    return cudaMemcpy(dst, src, len, cudaMemcpyDefault) == cudaSuccess ? 0 : -1;
}
