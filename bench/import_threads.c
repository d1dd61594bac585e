/* import_threads.c: what a writer's CREATE pays for each new value's memory (issue 38: zarr's
 * GPU chunk writes, where most of a CREATE's ~40-60 us was the client's import of the new
 * allocation), and whether imports from several threads at once go faster.
 *
 * A parent process makes an exportable CUDA memory pool (POSIX file descriptor handles, as
 * gpukvd's), allocates N values of SIZE bytes from it and exports each pointer; a child that
 * received the pool's descriptor (SCM_RIGHTS) imports the pool once, then every value's pointer
 * (cudaMemPoolImportPointer) and frees it again (as libgpukv's unmap does), on T threads at once
 * (each taking the next value), each pass on values it never imported; a last pass imports the
 * first pass's values again (memory imported before). Reports the microseconds per import
 * and per free, and the wall time per value for each thread count. Needs one GPU.
 *
 * With IT_COPY=1 each imported value also gets a copy of SIZE bytes from the child's own
 * buffer (synchronised), as a writer's: its first use after the import.
 * Usage: import_threads [N [SIZE [THREADS...]]]   (defaults 256 4194304 1 2 4 8) */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cuda_bench.h"
#include "fdpass.h"

static int n_values;
static struct cudaMemPoolPtrExportData *exports;
static cudaMemPool_t imported;
static atomic_int next_value;
static int base; /* the set of values this pass imports: fresh memory for each pass */
static double *import_us, *free_us, *copy_us;
static void *local_src; /* the child's own buffer, copied into each imported value once */
static size_t copy_len;

static void *importer(void *arg)
{
    (void)arg;
    CK(cudaSetDevice(0));
    for (;;) {
        int i = atomic_fetch_add(&next_value, 1);
        if (i >= n_values)
            return NULL;
        void *p;
        double t0 = bench_now_us();
        CK(cudaMemPoolImportPointer(&p, imported, &exports[base + i]));
        double t1 = bench_now_us();
        if (local_src) { /* a writer's copy into it, enqueued (as libgpukv's set_many) */
            CK(cudaMemcpyAsync(p, local_src, copy_len, cudaMemcpyDeviceToDevice, 0));
            CK(cudaStreamSynchronize(0));
        }
        double t2 = bench_now_us();
        CK(cudaFree(p));
        import_us[i] = t1 - t0;
        copy_us[i] = t2 - t1;
        free_us[i] = bench_now_us() - t2;
    }
}

int main(int argc, char **argv)
{
    n_values = argc > 1 ? atoi(argv[1]) : 256;
    size_t size = argc > 2 ? strtoull(argv[2], NULL, 10) : 4u << 20;
    int threads[16] = {1, 2, 4, 8}, nthreads = 4;
    if (argc > 3) {
        nthreads = 0;
        for (int i = 3; i < argc && nthreads < 16; i++)
            threads[nthreads++] = atoi(argv[i]);
    }
    int sv[2];
    if (n_values < 1 || socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
        return 2;
    exports = calloc((size_t)n_values * (size_t)(nthreads + 1), sizeof(*exports));
    import_us = calloc((size_t)n_values, sizeof(double));
    free_us = calloc((size_t)n_values, sizeof(double));
    copy_us = calloc((size_t)n_values, sizeof(double));
    pid_t child = fork();
    if (child == 0) { /* the importer: no CUDA before the fork */
        close(sv[0]);
        int fd = -1;
        unsigned nfd = 0;
        size_t want = (size_t)n_values * (size_t)(nthreads + 1) * sizeof(*exports), got = 0;
        while (got < want) {
            int more[GKV_FDPASS_MAX];
            ssize_t r = gkv_fds_recv(sv[1], (char *)exports + got, want - got, got ? more : &fd,
                                     got ? 0 : 1, &nfd);
            if (r <= 0)
                return 3;
            got += (size_t)r;
        }
        CK(cudaSetDevice(0));
        CK(cudaMemPoolImportFromShareableHandle(&imported, (void *)(uintptr_t)fd,
                                                cudaMemHandleTypePosixFileDescriptor, 0));
        struct cudaMemAccessDesc acc = {{cudaMemLocationTypeDevice, 0},
                                        cudaMemAccessFlagsProtReadWrite};
        CK(cudaMemPoolSetAccess(imported, &acc, 1));
        next_value = 0; /* a first pass (its own values) warms the driver's paths */
        base = nthreads * n_values;
        importer(NULL);
        copy_len = size;
        if (getenv("IT_COPY"))
            CK(cudaMalloc(&local_src, size));
        printf("| threads | import us (median) | a copy into it, synchronised (median) | free us "
               "(median) | wall us per value |\n|---|---|---|---|---|\n");
        for (int t = 0; t < nthreads; t++) {
            pthread_t th[64];
            int k = threads[t] < 64 ? threads[t] : 64;
            next_value = 0;
            base = t * n_values; /* memory this process never imported */
            double t0 = bench_now_us();
            for (int i = 0; i < k; i++)
                pthread_create(&th[i], NULL, importer, NULL);
            for (int i = 0; i < k; i++)
                pthread_join(th[i], NULL);
            double wall = (bench_now_us() - t0) / n_values;
            printf("| %d | %.1f | %.1f | %.1f | %.1f |\n", k, bench_median(import_us, n_values),
                   bench_median(copy_us, n_values), bench_median(free_us, n_values), wall);
        }
        next_value = 0; /* the first pass's values again: memory this process imported before */
        base = 0;
        double t0 = bench_now_us();
        importer(NULL);
        double wall = (bench_now_us() - t0) / n_values;
        printf("| 1, imported before | %.1f | %.1f | %.1f | %.1f |\n",
               bench_median(import_us, n_values), bench_median(copy_us, n_values),
               bench_median(free_us, n_values), wall);
        char done = 1;
        if (write(sv[1], &done, 1) != 1)
            return 4;
        return 0;
    }
    close(sv[1]);
    int fd;
    cudaMemPool_t pool = bench_exported_pool(&fd);
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    int total = n_values * (nthreads + 1);
    void **ptrs = calloc((size_t)total, sizeof(*ptrs));
    for (int i = 0; i < total; i++)
        CK(cudaMallocFromPoolAsync(&ptrs[i], size, pool, st));
    CK(cudaStreamSynchronize(st));
    for (int i = 0; i < total; i++)
        CK(cudaMemPoolExportPointer(&exports[i], ptrs[i]));
    printf("%d values of %zu bytes, one GPU\n\n", n_values, size);
    fflush(stdout);
    size_t len = (size_t)total * sizeof(*exports);
    ssize_t sent = gkv_fds_send(sv[0], exports, len, &fd, 1);
    if (sent < 0)
        return 5;
    while ((size_t)sent < len) {
        ssize_t w = write(sv[0], (char *)exports + sent, len - (size_t)sent);
        if (w <= 0)
            return 5;
        sent += w;
    }
    char done;
    if (read(sv[0], &done, 1) != 1)
        return 6;
    int status;
    waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 7;
}
