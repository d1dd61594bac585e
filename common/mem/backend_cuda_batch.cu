/* backend_cuda_batch.cu: many small copies between pinned host memory and device memory in one
 * kernel launch. A cudaMemcpyAsync per value costs a driver call and a DMA set-up each (about
 * 8 us for 64 bytes, BRIEF.md); here one block per piece reads or writes the pinned buffer over
 * PCIe directly, so a batch of hundreds of values costs one launch. */
#include "backend_cuda_batch.h"

#define THREADS 128

/* Copies len bytes, 16 at a time when both ends allow it. */
__device__ static void copy_bytes(uint8_t *dst, const uint8_t *src, uint32_t len)
{
    uint32_t i = threadIdx.x, done = 0;
    if ((((uintptr_t)dst | (uintptr_t)src) & 15) == 0) {
        uint32_t n16 = len / 16;
        for (; i < n16; i += THREADS)
            ((uint4 *)dst)[i] = ((const uint4 *)src)[i];
        done = n16 * 16;
        i = done + threadIdx.x;
    }
    for (; i < len; i += THREADS)
        dst[i] = src[i];
}

__global__ static void copy_pieces(const gkv_piece_t *pieces, uint8_t *buf, int to_device)
{
    __shared__ gkv_piece_t p;
    if (threadIdx.x == 0)
        p = pieces[blockIdx.x]; /* one read over PCIe for the block */
    __syncthreads();
    uint8_t *dev = (uint8_t *)(uintptr_t)p.dev, *host = buf + p.host_off;
    if (to_device)
        copy_bytes(dev, host, p.len);
    else
        copy_bytes(host, dev, p.len);
}

extern "C" cudaError_t gkv_cuda_batch_launch(const gkv_piece_t *in, uint32_t nin,
                                             const gkv_piece_t *out, uint32_t nout, uint8_t *buf,
                                             cudaStream_t s)
{
    /* Two launches in stream order: a GET in the batch reads what a SET in it wrote. */
    if (nin)
        copy_pieces<<<nin, THREADS, 0, s>>>(in, buf, 1);
    if (nout)
        copy_pieces<<<nout, THREADS, 0, s>>>(out, buf, 0);
    return cudaGetLastError();
}
