/* fence_watch.c: two ways for the daemon to notice that a producer's stream reached an
 * asynchronous seal (issue 37: "its own stream wait plus a host callback, or polling the slot:
 * measure both"), side by side on one GPU in one run.
 *
 * The fence counter lives as the daemon's does: a page of a memfd, mapped and registered with
 * CUDA. Each round a producer stream runs a kernel of a given length, then writes the round's
 * target into the counter (cuStreamWriteValue64, as libgpukv's gkv_seal_async). Two observers
 * watch the same write:
 *   poll    a thread that does what gpukvd's loop does (server/net/fence.c): it reads the
 *           counter in a spin for 5 ms after the seal, then every 50 us (FW_TICK_US; 0: once a
 *           millisecond, the schedule before session 31) up to a second, then once a ms;
 *   stream  a stream of the observer's own waits for the counter (cuStreamWaitValue64, >=) and
 *           then runs a host function (cudaLaunchHostFunc) that writes an eventfd, which wakes
 *           a thread blocked reading it (as uv_async wakes the loop).
 * Reported per kernel length, over the rounds: when each observer saw the counter, from the
 * producer's seal call (host clock), p50/p99; and how much later the woken thread ran than the
 * poll saw it. Then each observer alone: the process's CPU time per seal.
 * Usage: fence_watch [ROUNDS]   (default 1000; the 20 ms rounds are a tenth of it)
 * Prints Markdown tables. */
#include <cuda_runtime.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "zc_kernels.h"

typedef int (*write_value_fn)(cudaStream_t, unsigned long long, unsigned long long, unsigned);
typedef int (*wait_value_fn)(cudaStream_t, unsigned long long, unsigned long long, unsigned);
#define WAIT_GEQ 0u /* CU_STREAM_WAIT_VALUE_GEQ */

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static uint64_t cpu_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void die(const char *what)
{
    fprintf(stderr, "fence_watch: %s\n", what);
    exit(1);
}

static volatile uint64_t *counter; /* the fence page's first counter (host view) */
static void *counter_dev;          /* its device address */
static _Atomic uint64_t armed;     /* the target the poll thread looks for (0: none) */
static _Atomic uint64_t poll_seen, loop_seen; /* when each observer saw it (ns, 0: not yet) */
static _Atomic uint64_t seal_at;   /* when the seal was made (ns) */
static _Atomic bool stop;
static int efd;
static sem_t go; /* posted when a seal is armed for the poll thread */

/* gpukvd's schedule (server/net/fence.c): spin 5 ms from the seal, then look once a ms; idle
 * (blocked) between seals. */
static unsigned tick_us = 50; /* FENCE_TICK_US; FW_TICK_US=0: the schedule before (1 ms) */

static void *poll_thread(void *arg)
{
    (void)arg;
    for (;;) {
        while (sem_wait(&go) != 0)
            ;
        if (atomic_load(&stop))
            return NULL;
        uint64_t target = atomic_load(&armed);
        while (*counter < target) { /* gpukvd's schedule (server/net/fence.c) */
            uint64_t since = now_ns() - atomic_load(&seal_at);
            if (since > 1005000000ull)
                usleep(1000);
            else if (since > 5000000ull)
                usleep(tick_us);
        }
        atomic_store(&poll_seen, now_ns());
    }
}

/* The loop woken by the host function's eventfd write. */
static void *loop_thread(void *arg)
{
    (void)arg;
    uint64_t v;
    while (read(efd, &v, sizeof(v)) == (ssize_t)sizeof(v) && !atomic_load(&stop))
        atomic_store(&loop_seen, now_ns());
    return NULL;
}

static void CUDART_CB on_reached(void *arg)
{
    (void)arg;
    uint64_t one = 1;
    if (write(efd, &one, sizeof(one)) != (ssize_t)sizeof(one))
        die("eventfd write");
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double pct(uint64_t *v, int n, double p)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_u64);
    int i = (int)(p * (n - 1) + 0.5);
    return (double)v[i] / 1000.0;
}

enum { POLL = 1, STREAM = 2 };

/* A round that does not end within 10 s: say where it stands and stop (never hang a run). */
static _Atomic uint64_t round_started;
static cudaStream_t watched[2];
static void *watchdog(void *arg)
{
    (void)arg;
    for (;;) {
        sleep(1);
        uint64_t t = atomic_load(&round_started);
        if (t && now_ns() - t > 10000000000ull) {
            fprintf(stderr,
                    "fence_watch: a round did not end in 10 s: counter %llu, armed %llu, poll "
                    "seen %d, woken %d, producer stream %s, observer stream %s\n",
                    (unsigned long long)*counter, (unsigned long long)atomic_load(&armed),
                    atomic_load(&poll_seen) != 0, atomic_load(&loop_seen) != 0,
                    cudaGetErrorName(cudaStreamQuery(watched[0])),
                    cudaGetErrorName(cudaStreamQuery(watched[1])));
            _exit(3);
        }
    }
    return NULL;
}

static bool by_kernel; /* the counter written by a kernel (zc_store_async), not the memop */

/* n rounds with a producer kernel of spin_ns; the observers in `who`. Fills the per-round
 * times (ns from the seal call) of those that ran; returns the process CPU ns per round. */
static double rounds(int n, uint64_t spin_ns, int who, cudaStream_t prod, cudaStream_t obs,
                     write_value_fn write_value, wait_value_fn wait_value, uint64_t *t_poll,
                     uint64_t *t_loop, uint64_t *target)
{
    uint64_t c0 = cpu_ns();
    for (int r = 0; r < n; r++) {
        uint64_t want = ++*target;
        atomic_store(&round_started, now_ns());
        atomic_store(&poll_seen, 0);
        atomic_store(&loop_seen, 0);
        if (zc_spin_async(spin_ns, prod))
            die("kernel");
        uint64_t t0 = now_ns();
        atomic_store(&seal_at, t0);
        if (who & POLL) {
            atomic_store(&armed, want);
            sem_post(&go);
        }
        if (by_kernel ? zc_store_async(counter_dev, want, prod)
                      : write_value(prod, (unsigned long long)(uintptr_t)counter_dev, want, 0))
            die("write value");
        /* The daemon's wait would be queued once the SEAL came, after the producer queued its
         * write (and a wait queued first could block the producer's work behind it, should
         * the two streams share a hardware queue: CUDA warns such waits may deadlock). */
        if (who & STREAM) {
            if (wait_value(obs, (unsigned long long)(uintptr_t)counter_dev, want, WAIT_GEQ) ||
                cudaLaunchHostFunc(obs, on_reached, NULL) != cudaSuccess)
                die("stream wait");
        }
        while (((who & POLL) && !atomic_load(&poll_seen)) ||
               ((who & STREAM) && !atomic_load(&loop_seen)))
            usleep(20); /* the main thread stays out of the observers' way */
        atomic_store(&armed, 0);
        if (t_poll && (who & POLL))
            t_poll[r] = atomic_load(&poll_seen) - t0;
        if (t_loop && (who & STREAM))
            t_loop[r] = atomic_load(&loop_seen) - t0;
        if (cudaStreamSynchronize(prod) != cudaSuccess || cudaStreamSynchronize(obs) != cudaSuccess)
            die("synchronize");
    }
    atomic_store(&round_started, 0);
    return (double)(cpu_ns() - c0) / n;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 1000;
    if (getenv("FW_TICK_US"))
        tick_us = (unsigned)atoi(getenv("FW_TICK_US"));
    if (!tick_us)
        tick_us = 1000;
    if (n < 10)
        n = 10;
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q;
    write_value_fn write_value;
    wait_value_fn wait_value;
    if (cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", &fn, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess || q != cudaDriverEntryPointSuccess)
        die("no cuStreamWriteValue64");
    write_value = (write_value_fn)fn;
    if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue64", &fn, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess || q != cudaDriverEntryPointSuccess)
        die("no cuStreamWaitValue64");
    wait_value = (wait_value_fn)fn;
    int mfd = memfd_create("gkv-fence-bench", MFD_CLOEXEC);
    if (mfd < 0 || ftruncate(mfd, 4096))
        die("memfd");
    void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    if (page == MAP_FAILED)
        die("mmap");
    memset(page, 0, 4096);
    if (cudaHostRegister(page, 4096, cudaHostRegisterMapped | cudaHostRegisterPortable) !=
            cudaSuccess ||
        cudaHostGetDevicePointer(&counter_dev, page, 0) != cudaSuccess)
        die("host register");
    counter = page;
    cudaStream_t prod, obs;
    if (cudaStreamCreateWithFlags(&prod, cudaStreamNonBlocking) != cudaSuccess ||
        cudaStreamCreateWithFlags(&obs, cudaStreamNonBlocking) != cudaSuccess)
        die("streams");
    if ((efd = eventfd(0, EFD_CLOEXEC)) < 0 || sem_init(&go, 0, 0))
        die("eventfd");
    pthread_t pt, lt, wt;
    watched[0] = prod;
    watched[1] = obs;
    if (pthread_create(&pt, NULL, poll_thread, NULL) ||
        pthread_create(&lt, NULL, loop_thread, NULL) || pthread_create(&wt, NULL, watchdog, NULL))
        die("threads");
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    printf("GPU: %s; %d rounds (20 ms rounds: %d)\n\n", prop.name, n, n / 10);
    uint64_t target = 0;
    uint64_t *tp = calloc((size_t)n, sizeof(*tp)), *tl = calloc((size_t)n, sizeof(*tl));
    uint64_t *d = calloc((size_t)n, sizeof(*d));
    if (!tp || !tl || !d)
        die("memory");
    (void)rounds(20, 0, POLL | STREAM, prod, obs, write_value, wait_value, NULL, NULL, &target);
    printf("Both observers on each seal: when each saw the counter, from the seal call (us)\n\n");
    printf("| producer kernel | poll p50 / p99 | stream wait + host function + wake p50 / p99 "
           "| stream minus poll p50 / p99 |\n|---|---|---|---|\n");
    static const uint64_t spins[] = {0, 2000000, 20000000};
    for (size_t i = 0; i < sizeof(spins) / sizeof(spins[0]); i++) {
        int m = spins[i] >= 20000000 ? n / 10 : n;
        (void)rounds(m, spins[i], POLL | STREAM, prod, obs, write_value, wait_value, tp, tl,
                     &target);
        for (int r = 0; r < m; r++)
            d[r] = tl[r] > tp[r] ? tl[r] - tp[r] : 0;
        double d50 = pct(d, m, 0.5), d99 = pct(d, m, 0.99);
        printf("| %.0f us | %.1f / %.1f | %.1f / %.1f | %.1f / %.1f |\n", spins[i] / 1000.0,
               pct(tp, m, 0.5), pct(tp, m, 0.99), pct(tl, m, 0.5), pct(tl, m, 0.99), d50, d99);
    }
    printf("\nEach observer alone, 2 ms kernels: the process's CPU time per seal (us)\n\n");
    int m = n / 4 > 10 ? n / 4 : 10;
    double cp = rounds(m, 2000000, POLL, prod, obs, write_value, wait_value, tp, NULL, &target);
    double cs = rounds(m, 2000000, STREAM, prod, obs, write_value, wait_value, NULL, tl, &target);
    printf("| observer | CPU per seal | seen after p50 |\n|---|---|---|\n");
    printf("| poll | %.0f | %.1f |\n| stream wait | %.0f | %.1f |\n", cp / 1000.0,
           pct(tp, m, 0.5), cs / 1000.0, pct(tl, m, 0.5));
    /* Who writes the counter: the stream memory operation (libgpukv today) or a one-thread
     * kernel queued behind the producer's work; polled, in alternating blocks of 50 rounds. */
    printf("\nThe counter's writer, polled (us from the seal call; the producer kernel's length "
           "included), alternating blocks of 50 rounds\n\n| producer kernel | memop p50 / p99 "
           "| kernel p50 / p99 |\n|---|---|---|\n");
    static const uint64_t wspins[] = {0, 100000};
    for (size_t i = 0; i < 2; i++) {
        uint64_t *a = calloc((size_t)n, sizeof(*a)), *b = calloc((size_t)n, sizeof(*b));
        if (!a || !b)
            die("memory");
        int na = 0, nb = 0;
        for (int blk = 0; na + nb + 100 <= 2 * n; blk++) {
            by_kernel = blk % 2;
            uint64_t *dst = by_kernel ? b + nb : a + na;
            (void)rounds(50, wspins[i], POLL, prod, obs, write_value, wait_value, dst, NULL,
                         &target);
            if (by_kernel)
                nb += 50;
            else
                na += 50;
        }
        by_kernel = false;
        printf("| %.0f us | %.1f / %.1f | %.1f / %.1f |\n", wspins[i] / 1000.0, pct(a, na, 0.5),
               pct(a, na, 0.99), pct(b, nb, 0.5), pct(b, nb, 0.99));
        free(a);
        free(b);
    }
    atomic_store(&stop, true);
    uint64_t one = 1;
    sem_post(&go);
    (void)!write(efd, &one, sizeof(one));
    pthread_join(pt, NULL);
    pthread_join(lt, NULL);
    return 0;
}
