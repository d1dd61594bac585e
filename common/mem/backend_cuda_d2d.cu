/* backend_cuda_d2d.cu: a device-to-device copy by the SMs (backend_cuda_d2d.h). */
#include <stdint.h>

#include "backend_cuda_d2d.h"

#define THREADS 256
#define BLOCKS 1024 /* a grid that fills any of our GPUs; each thread strides through */
#define UNROLL 4    /* loads in flight per thread before the stores */

__global__ static void copy16(uint4 *dst, const uint4 *src, size_t n16)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + (UNROLL - 1) * stride < n16; i += UNROLL * stride) {
        uint4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++)
            v[u] = src[i + u * stride];
#pragma unroll
        for (int u = 0; u < UNROLL; u++)
            dst[i + u * stride] = v[u];
    }
    for (; i < n16; i += stride)
        dst[i] = src[i];
}

__global__ static void copy_tail(uint8_t *dst, const uint8_t *src, size_t len)
{
    if (threadIdx.x < len)
        dst[threadIdx.x] = src[threadIdx.x];
}

extern "C" cudaError_t gkv_cuda_d2d_launch(void *dst, const void *src, size_t len,
                                           cudaStream_t s)
{
    if ((((uintptr_t)dst | (uintptr_t)src) & 15) != 0)
        return cudaErrorInvalidValue;
    size_t n16 = len / 16, tail = len % 16;
    if (n16) {
        size_t blocks = (n16 + THREADS - 1) / THREADS;
        copy16<<<blocks < BLOCKS ? (unsigned)blocks : BLOCKS, THREADS, 0, s>>>(
            (uint4 *)dst, (const uint4 *)src, n16);
    }
    if (tail)
        copy_tail<<<1, 16, 0, s>>>((uint8_t *)dst + n16 * 16, (const uint8_t *)src + n16 * 16,
                                   tail);
    return cudaGetLastError();
}
