/* zc_kernels.cu: a pattern writer and a bandwidth reader for mapped device memory. */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "zc_kernels.h"

__host__ __device__ static inline unsigned long long pattern(unsigned long long seed,
                                                             unsigned long long i)
{
    unsigned long long z = seed * 0x9E3779B97F4A7C15ULL + i + 1;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

__global__ static void fill_kernel(unsigned long long *p, size_t words, unsigned long long seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < words;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = pattern(seed, i);
}

extern "C" int zc_use_device(int dev)
{
    return cudaSetDevice(dev) == cudaSuccess ? 0 : -1;
}

int zc_fill_device(void *dptr, size_t len, uint64_t seed)
{
    fill_kernel<<<2048, 256>>>((unsigned long long *)dptr, len / 8, seed);
    return cudaGetLastError() == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess ? 0 : -1;
}

extern "C" void zc_fill_host(void *p, size_t len, uint64_t seed)
{
    unsigned long long *w = (unsigned long long *)p;
    for (size_t i = 0; i < len / 8; i++)
        w[i] = pattern(seed, i);
}

/* Sums 16-byte loads so the compiler cannot drop them; the result lands in *sink. */
__global__ static void read_kernel(const uint4 *p, size_t n, unsigned int *sink)
{
    unsigned int acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint4 v = p[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x12345678u)
        *sink = acc;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

extern "C" double zc_read_seconds(const void *dptr, size_t len, int n)
{
    int sms = 132;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    unsigned int *sink;
    cudaEvent_t a, b;
    if (cudaMalloc(&sink, sizeof(*sink)) != cudaSuccess)
        return -1;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    double *t = (double *)malloc(sizeof(double) * (size_t)n);
    (void)cudaGetLastError(); /* start from a clean error state */
    read_kernel<<<sms * 8, 512>>>((const uint4 *)dptr, len / 16, sink); /* warm-up */
    for (int i = 0; i < n; i++) {
        cudaEventRecord(a);
        read_kernel<<<sms * 8, 512>>>((const uint4 *)dptr, len / 16, sink);
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float ms = 0;
        cudaEventElapsedTime(&ms, a, b);
        t[i] = ms / 1e3;
    }
    int ok = cudaGetLastError() == cudaSuccess;
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    double med = ok ? t[n / 2] : -1;
    free(t);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaFree(sink);
    return med;
}

__device__ static inline unsigned long long global_ns(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ static void stamp_kernel(unsigned long long *p)
{
    __threadfence_system();
    *p = global_ns();
}

extern "C" int zc_fill_stamp_async(void *dptr, size_t len, uint64_t seed, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    if (len > 8)
        fill_kernel<<<len >= (1u << 20) ? 1024 : 64, 256, 0, s>>>((unsigned long long *)dptr,
                                                                     len / 8, seed);
    stamp_kernel<<<1, 1, 0, s>>>((unsigned long long *)dptr);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

__global__ static void spin_kernel(unsigned long long ns)
{
    unsigned long long end = global_ns() + ns;
    while (global_ns() < end)
        ;
}

extern "C" int zc_spin_async(uint64_t ns, void *stream)
{
    spin_kernel<<<1, 1, 0, (cudaStream_t)stream>>>((unsigned long long)ns);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

/* One thread stores v at p (a mapped host page's device address) after everything before it in
 * the stream: the counter write of an asynchronous seal done by a kernel instead of the
 * stream memory operation (bench/fence_watch.c compares the two). */
__global__ static void store_kernel(unsigned long long *p, unsigned long long v)
{
    __threadfence_system();
    *(volatile unsigned long long *)p = v;
    __threadfence_system();
}

extern "C" int zc_store_async(void *dev, uint64_t v, void *stream)
{
    store_kernel<<<1, 1, 0, (cudaStream_t)stream>>>((unsigned long long *)dev,
                                                     (unsigned long long)v);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

/* The value's age when its first byte is read; the rest is read after (a consumer's work). */
__global__ static void age_kernel(const unsigned long long *p, unsigned long long *out)
{
    unsigned long long now = global_ns();
    out[0] = now - *(volatile const unsigned long long *)p;
    out[2] = now;
}

extern "C" int zc_read_age_async(const void *dptr, size_t len, uint64_t *out, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    age_kernel<<<1, 1, 0, s>>>((const unsigned long long *)dptr, (unsigned long long *)out);
    if (len >= 16)
        read_kernel<<<len >= (1u << 20) ? 1024 : 64, 256, 0, s>>>(
            (const uint4 *)dptr, len / 16, (unsigned int *)(out + 1));
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

/* For ns nanoseconds, notes each change of the byte at v (out[0..n-1], the count in out[n]). */
__global__ static void watch_kernel(const volatile unsigned char *v, int *out, int n,
                                    unsigned long long ns)
{
    unsigned long long end = global_ns() + ns;
    int last = -1, cnt = 0;
    while (global_ns() < end) {
        int x = v[0];
        if (x != last && cnt < n) {
            out[cnt++] = x;
            last = x;
        }
        __nanosleep(2000);
    }
    out[n] = cnt;
}

extern "C" int zc_watch_async(const void *dptr, int *out, int n, uint64_t ns, void *stream)
{
    watch_kernel<<<1, 1, 0, (cudaStream_t)stream>>>((const volatile unsigned char *)dptr, out, n,
                                                    (unsigned long long)ns);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}
