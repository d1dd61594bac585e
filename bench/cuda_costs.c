/* cuda_costs.c: what the CUDA runtime calls on a SET's or GET's path cost the calling thread,
 * each timed alone over many calls (medians in us): the stream-ordered allocation and free of
 * a value, an event record, a host-to-device copy's launch from pinned memory and its whole
 * round trip (launch, DMA, event polled done), and a host memcpy of the same bytes for scale.
 *   cuda_costs [SIZE ...]   (default: 4096 65536 1048576) */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_bench.h"

#define N 2001

int main(int argc, char **argv)
{
    static double alloc[N], freed[N], rec[N], launch[N], trip[N], host[N];
    size_t sizes[8] = {4096, 65536, 1048576};
    int nsizes = 3;
    if (argc > 1) {
        nsizes = 0;
        for (int i = 1; i < argc && nsizes < 8; i++)
            sizes[nsizes++] = strtoull(argv[i], NULL, 0);
    }
    cudaStream_t s;
    cudaEvent_t ev;
    cudaMemPool_t pool;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CK(cudaDeviceGetDefaultMemPool(&pool, 0));
    uint64_t keep = UINT64_MAX;
    CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    printf("| size | cudaMallocFromPoolAsync | cudaFreeAsync | cudaEventRecord | H2D launch "
           "(pinned) | H2D round trip (launch, DMA, polled) | host memcpy "
           "|\n|---|---|---|---|---|---|---|\n");
    for (int k = 0; k < nsizes; k++) {
        size_t size = sizes[k];
        void *pinned, *pageable = malloc(size), *pageable2 = malloc(size), *dev;
        CK(cudaMallocHost(&pinned, size));
        memset(pinned, 1, size);
        memset(pageable, 1, size);
        memset(pageable2, 2, size);
        for (int i = 0; i < N; i++) {
            double t0 = bench_now_us();
            CK(cudaMallocFromPoolAsync(&dev, size, pool, s));
            double t1 = bench_now_us();
            CK(cudaEventRecord(ev, s));
            double t2 = bench_now_us();
            CK(cudaMemcpyAsync(dev, pinned, size, cudaMemcpyHostToDevice, s));
            double t3 = bench_now_us();
            CK(cudaEventRecord(ev, s));
            while (cudaEventQuery(ev) == cudaErrorNotReady)
                ;
            double t4 = bench_now_us();
            CK(cudaFreeAsync(dev, s));
            double t5 = bench_now_us();
            memcpy(pageable2, pageable, size);
            double t6 = bench_now_us();
            alloc[i] = t1 - t0, rec[i] = t2 - t1, launch[i] = t3 - t2, trip[i] = t4 - t2;
            freed[i] = t5 - t4, host[i] = t6 - t5;
        }
        CK(cudaStreamSynchronize(s));
        printf("| %zu B | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", size,
               bench_median(alloc, N), bench_median(freed, N), bench_median(rec, N),
               bench_median(launch, N), bench_median(trip, N), bench_median(host, N));
        cudaFreeHost(pinned);
        free(pageable);
        free(pageable2);
    }
    return 0;
}
