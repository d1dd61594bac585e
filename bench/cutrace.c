/* cutrace.c: an LD_PRELOAD library, for measurements: the GPU-side timeline of the copies UCX
 * makes for NIXL over CUDA IPC (NVLink), and of the process's own device-to-device copies
 * beside them. Each cuMemcpyDtoDAsync_v2 of 1 MiB or more (UCX's cuda_ipc puts and gets) and
 * each cudaMemcpyAsync between device memory of 1 MiB or more (gpukvd's copies into and out of
 * its transfer arena; the runtime's, when the program links libcudart.so) is bracketed by two
 * timing events on its stream; once both have run (checked at a later copy), a line
 * "post_us start_us end_us bytes stream" (UCX's) or "post_us start_us end_us bytes stream L"
 * (the runtime's) goes to $CUTRACE.PID (default /tmp/cutrace.PID).
 * Each host callback put on a stream (cuStreamAddCallback: UCX's wake-up when its worker is
 * armed, which holds the stream until the callback ran) adds a line "cb post_us stream".
 * post_us is the host's CLOCK_MONOTONIC; start and end are on the GPU's clock, placed on the
 * host's by the first copy (so offset by its queueing). The last copies of a run are not
 * written. The events add a little time between copies: pauses are an upper bound, the rate
 * while a copy runs is the copy's own. bench/cutrace.py sums a timeline up: how busy the link
 * was, how fast while busy, and how the local copies overlapped UCX's.
 *
 * Usage: LD_PRELOAD=build/bench/libgkv_cutrace.so CUTRACE=/tmp/ct COMMAND...;
 *        bench/cutrace.py /tmp/ct */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

typedef CUresult (*copy_fn)(CUdeviceptr, CUdeviceptr, size_t, CUstream);

typedef struct {
    CUevent a, b;
    size_t n;
    CUstream s;
    double post;
    int local; /* the runtime's copy (cudaMemcpyAsync), not UCX's */
} ent_t;

#define RING 8192
static ent_t ring[RING];
static unsigned head, tail;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static CUevent ref; /* the first copy's start: time zero of the GPU's clock */
static double ref_us;
static FILE *out;

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* Writes the copies that have run, oldest first (under mu). */
static void drain(void)
{
    while (tail != head) {
        ent_t *e = &ring[tail % RING];
        if (cuEventQuery(e->b) != CUDA_SUCCESS || cuEventQuery(ref) != CUDA_SUCCESS)
            break;
        float a = 0, b = 0;
        cuEventElapsedTime(&a, ref, e->a);
        cuEventElapsedTime(&b, ref, e->b);
        fprintf(out, "%.1f %.1f %.1f %zu %p%s\n", e->post, ref_us + a * 1e3, ref_us + b * 1e3,
                e->n, (void *)e->s, e->local ? " L" : "");
        fflush(out);
        cuEventDestroy(e->a);
        cuEventDestroy(e->b);
        tail++;
    }
}

typedef CUresult (*callback_fn)(CUstream, CUstreamCallback, void *, unsigned int);

__attribute__((visibility("default"))) CUresult cuStreamAddCallback(CUstream s, CUstreamCallback fn,
                                                                     void *arg, unsigned int flags)
{
    static callback_fn real;
    if (!real)
        real = (callback_fn)dlsym(RTLD_NEXT, "cuStreamAddCallback");
    pthread_mutex_lock(&mu);
    if (out) {
        fprintf(out, "cb %.1f %p\n", now_us(), (void *)s);
        fflush(out);
    }
    pthread_mutex_unlock(&mu);
    return real(s, fn, arg, flags);
}

/* Starts timing a copy of n bytes about to be queued on s: takes mu (end gives it back),
 * opens the file at the first copy, writes what has run. Returns the entry, or NULL when the
 * ring is full or the file could not be opened. */
static ent_t *begin(size_t n, CUstream s, int local)
{
    pthread_mutex_lock(&mu);
    if (!out) {
        char path[256];
        const char *base = getenv("CUTRACE");
        snprintf(path, sizeof(path), "%s.%d", base ? base : "/tmp/cutrace", (int)getpid());
        if ((out = fopen(path, "w"))) {
            cuEventCreate(&ref, CU_EVENT_DEFAULT);
            cuEventRecord(ref, s);
            ref_us = now_us();
        }
    }
    if (!out)
        return NULL;
    drain();
    if (head - tail >= RING)
        return NULL;
    ent_t *e = &ring[head % RING];
    cuEventCreate(&e->a, CU_EVENT_DEFAULT);
    cuEventCreate(&e->b, CU_EVENT_DEFAULT);
    e->n = n;
    e->s = s;
    e->local = local;
    e->post = now_us();
    cuEventRecord(e->a, s);
    return e;
}

/* The copy of begin's entry e (NULL: not timed) is queued on s. */
static void end(ent_t *e, CUstream s)
{
    if (e) {
        cuEventRecord(e->b, s);
        head++;
    }
    pthread_mutex_unlock(&mu);
}

/* Exported over the driver's own (the project builds with hidden visibility). */
__attribute__((visibility("default"))) CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst,
                                                                      CUdeviceptr src, size_t n,
                                                                      CUstream s)
{
    static copy_fn real;
    if (!real)
        real = (copy_fn)dlsym(RTLD_NEXT, "cuMemcpyDtoDAsync_v2");
    if (n < (1u << 20))
        return real(dst, src, n, s);
    ent_t *e = begin(n, s, 0);
    CUresult r = real(dst, src, n, s);
    end(e, s);
    return r;
}

/* The runtime's cudaMemcpyAsync, declared here without cuda_runtime.h (an enum is an int, a
 * stream the driver's CUstream): 3 is cudaMemcpyDeviceToDevice, 4 cudaMemcpyDefault. */
typedef int (*rt_copy_fn)(void *, const void *, size_t, int, CUstream);
int cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, CUstream s);

static int on_device(const void *p)
{
    CUmemorytype t = 0;
    return cuPointerGetAttribute(&t, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)p) ==
               CUDA_SUCCESS &&
           t == CU_MEMORYTYPE_DEVICE;
}

__attribute__((visibility("default"))) int cudaMemcpyAsync(void *dst, const void *src, size_t n,
                                                           int kind, CUstream s)
{
    static rt_copy_fn real;
    if (!real)
        real = (rt_copy_fn)dlsym(RTLD_NEXT, "cudaMemcpyAsync");
    CUcontext ctx = NULL;
    if (n < (1u << 20) || (kind != 3 && !(kind == 4 && on_device(dst) && on_device(src))) ||
        cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx)
        return real(dst, src, n, kind, s); /* not a copy between device memory, or no context yet */
    ent_t *e = begin(n, s, 1);
    int r = real(dst, src, n, kind, s);
    end(e, s);
    return r;
}
