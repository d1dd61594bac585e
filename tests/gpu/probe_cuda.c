/* probe_cuda.c: the GPU probe on builds with the CUDA toolkit. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <unistd.h>

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

int gkv_test_gpu_write(void *dst, const void *src, size_t len)
{
    if (cudaMemcpy(dst, src, len, cudaMemcpyDefault) != cudaSuccess)
        return -1;
    return cudaDeviceSynchronize() == cudaSuccess ? 0 : -1;
}

void *gkv_test_stream_new(void)
{
    cudaStream_t s;
    return cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess ? (void *)s : NULL;
}

void gkv_test_stream_free(void *stream)
{
    (void)cudaStreamSynchronize((cudaStream_t)stream);
    (void)cudaStreamDestroy((cudaStream_t)stream);
}

static void CUDART_CB sleep_ms(void *arg)
{
    usleep((useconds_t)(uintptr_t)arg * 1000);
}

int gkv_test_stream_write_later(void *stream, int delay_ms, void *dst, const void *src,
                                size_t len)
{
    cudaStream_t s = (cudaStream_t)stream;
    if (cudaLaunchHostFunc(s, sleep_ms, (void *)(uintptr_t)delay_ms) != cudaSuccess)
        return -1;
    return cudaMemcpyAsync(dst, src, len, cudaMemcpyDefault, s) == cudaSuccess ? 0 : -1;
}
