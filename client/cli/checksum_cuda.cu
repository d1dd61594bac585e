/* checksum_cuda.cu: the device half of the checksum: a grid-stride kernel, one atomic add per
 * thread. Unaligned starts (range mappings) are read byte by byte. */
#include <cuda_runtime.h>
#include <stdio.h>

#include "checksum.h"

#define GOLDEN 0x9E3779B97F4A7C15ULL

__global__ static void checksum_kernel(const unsigned char *p, size_t len,
                                       unsigned long long *out)
{
    size_t words = (len + 7) / 8;
    unsigned long long sum = 0;
    bool aligned = ((uintptr_t)p & 7) == 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < words;
         i += (size_t)gridDim.x * blockDim.x) {
        unsigned long long w = 0;
        if (aligned && i * 8 + 8 <= len) {
            w = ((const unsigned long long *)p)[i];
        } else {
            for (int k = 0; k < 8 && i * 8 + k < len; k++)
                w |= (unsigned long long)p[i * 8 + k] << (8 * k);
        }
        sum += w ^ (i * GOLDEN);
    }
    atomicAdd(out, sum);
}

extern "C" int gkv_checksum_device(const void *dptr, size_t len, uint64_t *out, char *why,
                                   size_t cap)
{
    unsigned long long *d = NULL, h = 0;
    cudaError_t e = cudaMalloc(&d, sizeof(*d));
    if (e == cudaSuccess)
        e = cudaMemset(d, 0, sizeof(*d));
    if (e == cudaSuccess && len) {
        checksum_kernel<<<1024, 256>>>((const unsigned char *)dptr, len, d);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess)
        e = cudaMemcpy(&h, d, sizeof(h), cudaMemcpyDeviceToHost);
    if (d)
        cudaFree(d);
    if (e != cudaSuccess) {
        snprintf(why, cap, "checksum kernel: %s", cudaGetErrorString(e));
        return -1;
    }
    *out = h;
    return 0;
}
