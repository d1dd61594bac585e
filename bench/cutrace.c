/* cutrace.c: an LD_PRELOAD library, for measurements: the GPU-side timeline of the copies UCX
 * makes for NIXL over CUDA IPC (NVLink). Each cuMemcpyDtoDAsync_v2 of 1 MiB or more (UCX's
 * cuda_ipc puts and gets; gpukvd's own copies go through the runtime and are not seen) is
 * bracketed by two timing events on its stream; once both have run (checked at a later copy),
 * a line "post_us start_us end_us bytes stream" goes to $CUTRACE.PID (default /tmp/cutrace.PID).
 * Each host callback put on a stream (cuStreamAddCallback: UCX's wake-up when its worker is
 * armed, which holds the stream until the callback ran) adds a line "cb post_us stream".
 * post_us is the host's CLOCK_MONOTONIC; start and end are on the GPU's clock, placed on the
 * host's by the first copy (so offset by its queueing). The last copies of a run are not
 * written. The events add a little time between copies: pauses are an upper bound, the rate
 * while a copy runs is the copy's own. bench/cutrace.py sums a timeline up: how busy the link was, and how fast while busy.
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
        fprintf(out, "%.1f %.1f %.1f %zu %p\n", e->post, ref_us + a * 1e3, ref_us + b * 1e3, e->n,
                (void *)e->s);
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
    if (out)
        drain();
    ent_t *e = &ring[head % RING];
    int timed = out && head - tail < RING;
    if (timed) {
        cuEventCreate(&e->a, CU_EVENT_DEFAULT);
        cuEventCreate(&e->b, CU_EVENT_DEFAULT);
        e->n = n;
        e->s = s;
        e->post = now_us();
        cuEventRecord(e->a, s);
    }
    CUresult r = real(dst, src, n, s);
    if (timed) {
        cuEventRecord(e->b, s);
        head++;
    }
    pthread_mutex_unlock(&mu);
    return r;
}
