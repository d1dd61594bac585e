/* handoff_bench.c: a value handed from a producer process to a consumer process on one GPU
 * (issue 37), three ways in one run:
 *   today  the producer's kernels write the value, it synchronises its stream and SEALs; the
 *          consumer polls MAP until the key exists;
 *   wait   the same producer; the consumer's MAP waits for the key (wait field);
 *   async  the producer seals without synchronising (gkv_seal_async); the consumer's MAP waits.
 * Hand-off latency: the producer's last kernel stamps the value with the GPU's global timer; the
 * consumer's first kernel on the mapped value reads the timer again: the difference is the time
 * from the end of the producer's work to the consumer's first read, on one clock. A round
 * begins once the consumer waits (or polls); rounds use a new key each, deleted after.
 * Then a pipeline: LAYERS keys of LAYER_SIZE bytes written one after another by the producer
 * (kernels, then the seal), read by the consumer in order as they appear; the time from the
 * producer's start to the consumer's last read, with synchronous seals (and polling, today)
 * and with asynchronous seals (and waiting).
 * The age is split where the consumer's MAP returned: from the producer's kernel end to the
 * consumer holding the mapping (gpukv's part), and from there to the consumer's kernel reading
 * it (the consumer's launch). The GPU's global timer runs at a fixed offset from
 * CLOCK_REALTIME; the consumer measures it first (a kernel stamps host-mapped memory while the
 * host spins on it: the largest stamp minus the host's time of seeing it, 200 times). That
 * calibration proved good to about 10 us only under MPS (the launch part came out -9.5 us in
 * one call, 4-6 in another: bench/RESULTS.md); for the steps, GPUKV_TRACE's one host clock is
 * what to read.
 * Where the time goes, per path (host clocks, CLOCK_MONOTONIC, one for both processes): the
 * producer's CREATE, its kernels' launch and seal (with the stream's synchronisation for the
 * synchronous paths), the consumer's MAP returning after the seal returned, and the consumer's
 * kernel and copy back. HB_LEASE_CACHE=0 turns the consumer's lease cache off; HB_PRODUCER_CACHE=N
 * gives the producer's N slots (the default 8 end a cached lease, its import freed, per seal).
 * HB_WORK_US=N: the producer's work is a kernel of N microseconds before the fill (the value's
 * stamp still marks its end): a producer whose kernels outlast its own seal call, as a layer's
 * compute does, where the asynchronous seal's SEAL is on its way while the GPU works.
 * Usage: handoff_bench URL [ROUNDS [SIZE [LAYERS [LAYER_SIZE]]]]   (defaults 2000 4096 32 8M)
 * Prints Markdown tables. */
#include <cuda_runtime.h>
#include <gpukv/gpukv.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "zc_kernels.h"

enum { TODAY, WAIT, ASYNC, NMODES };
static const char *const mode_name[NMODES] = {"today", "wait", "async"};

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "handoff_bench: %s: %s\n", what, rc ? gkv_strerror(rc) : "failed");
    exit(1);
}

static void put(int fd, const void *p, size_t n)
{
    if (write(fd, p, n) != (ssize_t)n)
        die("pipe write", 0);
}

static void get(int fd, void *p, size_t n)
{
    if (read(fd, p, n) != (ssize_t)n)
        die("pipe read", 0);
}

/* A round's order to the consumer: mode, key, size; layers > 0: a pipeline of that many keys. */
typedef struct {
    int mode, layers;
    size_t size;
    char key[48];
} order_t;

/* What the consumer says of a round: the value's age when first read (ns), and when its MAP
 * returned and its kernel was done (host clock, us). */
typedef struct {
    double age, mapped, done;
    double to_map, launch; /* the age split where MAP returned (us; global timer as realtime) */
} seen_t;

static uint64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The global timer minus CLOCK_REALTIME (ns), as well as the top says it can be. */
static double timer_offset(cudaStream_t s)
{
    volatile uint64_t *h;
    void *d;
    if (cudaHostAlloc((void **)&h, 64, cudaHostAllocMapped) != cudaSuccess ||
        cudaHostGetDevicePointer(&d, (void *)h, 0) != cudaSuccess)
        die("offset memory", 0);
    double best = -1e30;
    for (int i = 0; i < 200; i++) {
        *h = 0;
        if (zc_fill_stamp_async(d, 8, 0, s))
            die("offset kernel", 0);
        uint64_t gt;
        while (!(gt = *h))
            ;
        double diff = (double)gt - (double)realtime_ns();
        if (diff > best)
            best = diff;
        if (cudaStreamSynchronize(s) != cudaSuccess)
            die("offset sync", 0);
    }
    cudaFreeHost((void *)h);
    return best;
}

static double gt_offset; /* the consumer's timer_offset */

/* Maps key (waiting, or polling MAP for today), reads it with a kernel. */
static seen_t consume(gkv_client_t *c, const order_t *o, const char *key, cudaStream_t s,
                      uint64_t *age_dev)
{
    seen_t seen;
    gkv_mapping_t *m;
    int rc;
    if (o->mode == TODAY) {
        while ((rc = gkv_map(c, key, strlen(key), NULL, &m)) == GKV_ENOTFOUND)
            ;
    } else {
        rc = gkv_map_wait(c, key, strlen(key), NULL, 60000, &m);
    }
    if (rc)
        die("consumer map", rc);
    seen.mapped = now_us();
    uint64_t mapped_rt = realtime_ns();
    if (zc_read_age_async(m->ptr, m->length & ~(size_t)15, age_dev, s))
        die("age kernel", 0);
    uint64_t got[3];
    if (cudaMemcpyAsync(got, age_dev, sizeof(got), cudaMemcpyDeviceToHost, s) != cudaSuccess ||
        cudaStreamSynchronize(s) != cudaSuccess)
        die("consumer copy", 0);
    seen.done = now_us();
    seen.age = (double)got[0];
    uint64_t start = got[2], end = got[2] - got[0]; /* the reader's start, the producer's end */
    seen.to_map = ((double)mapped_rt - ((double)end - gt_offset)) / 1e3;
    seen.launch = (((double)start - gt_offset) - (double)mapped_rt) / 1e3;
    gkv_unmap(c, m);
    return seen;
}

static void consumer(const char *url, int in, int out)
{
    gkv_client_t *c;
    int rc = gkv_client_connect(url, &c);
    if (rc)
        die("consumer connect", rc);
    const char *lc = getenv("HB_LEASE_CACHE");
    if (lc && atoi(lc) == 0 && (rc = gkv_client_set_lease_cache(c, 0, 0, 0)))
        die("lease cache", rc);
    cudaStream_t s;
    uint64_t *age_dev;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
        cudaMalloc((void **)&age_dev, 4 * sizeof(uint64_t)) != cudaSuccess)
        die("consumer cuda", 0);
    gt_offset = timer_offset(s);
    order_t o;
    while (read(in, &o, sizeof(o)) == (ssize_t)sizeof(o)) {
        if (!o.layers) {
            seen_t seen = consume(c, &o, o.key, s, age_dev);
            put(out, &seen, sizeof(seen));
            continue;
        }
        char key[64];
        for (int i = 0; i < o.layers; i++) {
            snprintf(key, sizeof(key), "%s/%d", o.key, i);
            (void)consume(c, &o, key, s, age_dev);
        }
        double end = now_us();
        put(out, &end, sizeof(end));
    }
    gkv_client_close(c);
    exit(0);
}

static uint64_t work_ns; /* HB_WORK_US: the producer's kernel before the fill */

/* The producer's side of one value: create, kernels, seal as mode says. t (may be NULL) gets
 * when the CREATE returned and when the kernels were launched. */
static void produce(gkv_client_t *c, int mode, const char *key, size_t size, cudaStream_t s,
                    uint64_t seed, double *t)
{
    gkv_mapping_t *w;
    int rc = gkv_create(c, key, strlen(key), size, NULL, &w);
    if (rc)
        die("create", rc);
    if (t)
        t[0] = now_us();
    if ((work_ns && zc_spin_async(work_ns, s)) || zc_fill_stamp_async(w->ptr, size, seed, s))
        die("fill kernel", 0);
    if (t)
        t[1] = now_us();
    if (mode == ASYNC) {
        rc = gkv_seal_async(c, w, s);
    } else {
        if (cudaStreamSynchronize(s) != cudaSuccess)
            die("stream", 0);
        rc = gkv_seal(c, w);
    }
    if (rc)
        die("seal", rc);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: handoff_bench URL [ROUNDS [SIZE [LAYERS [LAYER_SIZE]]]]\n");
        return 2;
    }
    const char *url = argv[1];
    int rounds = argc > 2 ? atoi(argv[2]) : 2000;
    size_t size = argc > 3 ? strtoull(argv[3], NULL, 0) : 4096;
    int layers = argc > 4 ? atoi(argv[4]) : 32;
    size_t layer_size = argc > 5 ? strtoull(argv[5], NULL, 0) : 8u << 20;
    const char *work = getenv("HB_WORK_US");
    work_ns = work ? strtoull(work, NULL, 10) * 1000 : 0;
    int to_c[2], from_c[2];
    if (pipe(to_c) || pipe(from_c))
        return 1;
    pid_t pid = fork(); /* before any CUDA call: each process has its own context */
    if (pid == 0) {
        close(to_c[1]);
        close(from_c[0]);
        consumer(url, to_c[0], from_c[1]);
    }
    close(to_c[0]);
    close(from_c[1]);
    gkv_client_t *c;
    int rc = gkv_client_connect(url, &c);
    if (rc)
        die("producer connect", rc);
    const char *pc = getenv("HB_PRODUCER_CACHE"); /* slots: a cache that never evicts */
    if (pc && (rc = gkv_client_set_lease_cache(c, (uint32_t)atoi(pc), 1ull << 40, 1ull << 40)))
        die("producer lease cache", rc);
    cudaStream_t s;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
        die("producer stream", 0);
    /* Per mode and round: the age, then the host-clock steps (us). */
    enum { AGE, CREATE, LAUNCH, SEAL, LAG, READ, TO_MAP, TO_READ, NSTEPS };
    static const char *const step_name[NSTEPS] = {
        "age", "CREATE", "kernels launched", "sealed (synchronised first: today, wait)",
        "consumer's MAP back after the seal", "consumer's kernel and copy",
        "the age, part 1: producer's kernel end to consumer's MAP returned (global timer)",
        "the age, part 2: MAP returned to the consumer's kernel reading (global timer)"};
    double *st[NMODES][NSTEPS];
    for (int m = 0; m < NMODES; m++)
        for (int k = 0; k < NSTEPS; k++)
            st[m][k] = calloc((size_t)rounds, sizeof(double));
    /* The modes interleave round by round, so that drift hits each alike; 50 warm-up rounds. */
    for (int r = -50; r < rounds; r++)
        for (int m = 0; m < NMODES; m++) {
            order_t o = {.mode = m, .size = size};
            snprintf(o.key, sizeof(o.key), "hb/%s/%d", mode_name[m], r + 50);
            put(to_c[1], &o, sizeof(o));
            usleep(200); /* the consumer waits (or polls) by now */
            double t0 = now_us(), tp[2];
            produce(c, m, o.key, size, s, (uint64_t)r, tp);
            double sealed = now_us();
            seen_t seen;
            get(from_c[0], &seen, sizeof(seen));
            if (r >= 0) {
                st[m][AGE][r] = seen.age / 1e3;
                st[m][CREATE][r] = tp[0] - t0;
                st[m][LAUNCH][r] = tp[1] - tp[0];
                st[m][SEAL][r] = sealed - tp[1];
                st[m][LAG][r] = seen.mapped - sealed;
                st[m][READ][r] = seen.done - seen.mapped;
                st[m][TO_MAP][r] = seen.to_map;
                st[m][TO_READ][r] = seen.launch;
            }
            const void *k[] = {o.key};
            size_t kl[] = {strlen(o.key)};
            (void)gkv_del(c, k, kl, 1);
        }
    printf("## hand-off of a %zu-byte value between two processes, %d rounds, producer work "
           "%.0f us\n\n",
           size, rounds, work_ns / 1e3);
    printf("| path | p50 us | p99 us | mean us |\n|---|---|---|---|\n");
    double p50[NMODES];
    for (int m = 0; m < NMODES; m++) {
        double sum = 0;
        for (int r = 0; r < rounds; r++)
            sum += st[m][AGE][r];
        for (int k = 0; k < NSTEPS; k++)
            qsort(st[m][k], (size_t)rounds, sizeof(double), cmp);
        p50[m] = st[m][AGE][rounds / 2];
        printf("| %s | %.1f | %.1f | %.1f |\n", mode_name[m], p50[m],
               st[m][AGE][(size_t)(rounds * 0.99)], sum / rounds);
    }
    printf("\nasync p50 / today p50: %.2fx faster\n\n", p50[TODAY] / p50[ASYNC]);
    printf("Where the time goes (host clocks, p50 us):\n\n| step |");
    for (int m = 0; m < NMODES; m++)
        printf(" %s |", mode_name[m]);
    printf("\n|---|---|---|---|\n");
    for (int k = CREATE; k < NSTEPS; k++) {
        printf("| %s |", step_name[k]);
        for (int m = 0; m < NMODES; m++)
            printf(" %.1f |", st[m][k][rounds / 2]);
        printf("\n");
    }
    printf("\n");

    printf("## pipeline: %d layers of %zu bytes\n\n| path | total ms (median of 5) |\n|---|---|\n",
           layers, layer_size);
    for (int m = 0; m < NMODES; m += 2) { /* today and async */
        double t[5];
        for (int rep = 0; rep < 5; rep++) {
            order_t o = {.mode = m, .layers = layers, .size = layer_size};
            snprintf(o.key, sizeof(o.key), "pl/%s/%d", mode_name[m], rep);
            put(to_c[1], &o, sizeof(o));
            usleep(1000);
            double t0 = now_us();
            char key[64];
            for (int i = 0; i < layers; i++) {
                snprintf(key, sizeof(key), "%s/%d", o.key, i);
                produce(c, m, key, layer_size, s, (uint64_t)i, NULL);
            }
            double end;
            get(from_c[0], &end, sizeof(end));
            t[rep] = (end - t0) / 1e3;
            uint64_t count;
            (void)gkv_del_prefix(c, o.key, strlen(o.key), &count);
        }
        qsort(t, 5, sizeof(double), cmp);
        printf("| %s | %.2f |\n", m == TODAY ? "synchronous seals, polling MAP" :
                                                 "asynchronous seals, waiting MAP", t[2]);
    }
    close(to_c[1]);
    waitpid(pid, NULL, 0);
    gkv_client_close(c);
    return 0;
}
