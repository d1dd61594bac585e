/* cuda_bench.h: what the small CUDA benchmarks (cuda_costs, zc_probe, import_threads) share: a
 * check of each runtime call that ends the program with the call and its error, the monotonic
 * clock in microseconds, a median (sorts its input), and a pool exported as gpukvd's is. Header
 * only; needs _GNU_SOURCE. */
#ifndef GKV_BENCH_CUDA_BENCH_H
#define GKV_BENCH_CUDA_BENCH_H

#include <cuda_runtime.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s: %s: %s\n", program_invocation_short_name, #call,                  \
                    cudaGetErrorString(e_));                                                       \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static inline double bench_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n) (n >= 1), which is left sorted. */
static inline double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), bench_cmp_double);
    return v[n / 2];
}

/* A memory pool on GPU 0 made as gpukvd makes its own: pinned device memory, exportable with
 * POSIX file descriptors, exported (*fd) before its first allocation, keeping freed memory. */
static inline cudaMemPool_t bench_exported_pool(int *fd)
{
    CK(cudaSetDevice(0));
    struct cudaMemPoolProps props = {0};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t pool;
    CK(cudaMemPoolCreate(&pool, &props));
    CK(cudaMemPoolExportToShareableHandle(fd, pool, cudaMemHandleTypePosixFileDescriptor, 0));
    uint64_t thr = UINT64_MAX;
    CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &thr));
    return pool;
}

#endif
