/* nixl_xfer.c: NIXL alone between two processes, one per GPU (or host memory), through
 * gpukvd's own NIXL binding (server/plane/nixl_agent.h): aggregate GB/s of READs and WRITEs of
 * SIZE bytes, CONC at once from as many threads, so that the data plane's limits can be told
 * from NIXL's. Each thread moves its own buffer (registered once) ROUNDS times.
 *
 * Usage: nixl_xfer NIXL_PATH [--host] [--sizes 64M,256M] [--conc 1,2,4,8] [--rounds 8]
 *                  [--copy-duty PCT] [--staged PARTS] [--value-pool] [--local-pool]
 *                  [--gkv-backend] [--op read|write] [--random] [--pad BYTES]
 * --copy-duty PCT: meanwhile, in both processes, a thread copies 64 MiB device to device on
 * its GPU (copy engine) PCT% of the time, as the data plane's arena copies do beside its
 * writes: does local copying slow NVLink transfers down?
 * --staged PARTS: each transfer goes as gkv_plane_send sends a chunk: in PARTS parts, each
 * first copied into the registered buffer from memory of the thread's own (a value's, not
 * registered), its copy waited for, then posted; then every part waited for.
 * --value-pool: with --staged, the bytes each part is copied from come from a pool whose
 * memory exports POSIX file descriptors, as gpukvd's values do (else from cudaMalloc).
 * --local-pool: the initiator's buffers come from a pool whose memory exports POSIX file
 * descriptors (as gpukvd's values do), each registered with NIXL on its own (the time it takes
 * is printed; the first 4 threads only), the target's stay cudaMalloc'd: can UCX move a
 * value's memory on one side?
 * --gkv-backend: both processes first open gpukvd's cuda backend (common/mem/backend.h) on their
 * GPU, take the registered buffers from its arena_alloc and, with --staged, the bytes each part
 * is copied from from its alloc, copied in by its arena_copy: gpukvd's own process state and
 * copy path around NIXL's writes, without the data plane's protocol. Do the daemon's writes
 * run slower because of the process or because of the protocol (RESULTS.md, session 36)?
 * --op: only READs or only WRITEs (both by default).
 * --pad BYTES: the registered region is BYTES longer than the buffers (gpukvd's arena has a
 * 4 KiB probe area behind its slots). With --gkv-backend the backend rounds the region up to
 * whole 2 MiB pages (session 37: a 4 KiB tail slowed NVLink writes to 0.8x).
 * --random: the buffers hold pseudo-random bytes (as values do) instead of one repeated byte:
 * do the links move a value's bytes as fast as a constant pattern (RESULTS.md, session 37)?
 * Prints a Markdown table. Needs two GPUs without --host. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef GKV_HAVE_CUDA
#include <cuda_runtime.h>

#include "backend_cuda.h"
#endif

#include "backend.h"
#include "nixl_agent.h"

#define MAXC 16

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t size_arg(const char *s)
{
    char *end;
    uint64_t v = strtoull(s, &end, 10);
    return *end == 'G' ? v << 30 : *end == 'M' ? v << 20 : *end == 'K' ? v << 10 : v;
}

static int send_blob(int fd, const void *p, uint64_t n)
{
    if (write(fd, &n, sizeof(n)) != (ssize_t)sizeof(n))
        return -1;
    for (uint64_t off = 0; off < n;) {
        ssize_t w = write(fd, (const char *)p + off, n - off);
        if (w <= 0)
            return -1;
        off += (uint64_t)w;
    }
    return 0;
}

static void *recv_blob(int fd, uint64_t *n)
{
    if (read(fd, n, sizeof(*n)) != (ssize_t)sizeof(*n))
        return NULL;
    char *p = malloc(*n ? *n : 1);
    for (uint64_t off = 0; p && off < *n;) {
        ssize_t r = read(fd, p + off, *n - off);
        if (r <= 0) {
            free(p);
            return NULL;
        }
        off += (uint64_t)r;
    }
    return p;
}

#ifdef GKV_HAVE_CUDA
/* --value-pool: bytes from a new pool on gpu whose memory exports POSIX file descriptors. */
static cudaError_t pool_alloc(int gpu, uint64_t bytes, void **p)
{
    cudaMemPool_t pool;
    cudaError_t e = gkv__cuda_pool_create(gpu, &pool);
    if (e == cudaSuccess)
        e = cudaMallocFromPoolAsync(p, bytes, pool, 0);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(0);
    return e;
}

/* --random: bytes of an xorshift generator into device memory p, 64 MiB at a time. */
static cudaError_t fill_random(void *p, uint64_t bytes)
{
    const uint64_t step = 64ull << 20;
    uint64_t *h = malloc(step), x = 0x9e3779b97f4a7c15ull;
    cudaError_t e = h ? cudaSuccess : cudaErrorMemoryAllocation;
    for (uint64_t off = 0; e == cudaSuccess && off < bytes; off += step) {
        for (uint64_t i = 0; i < step / 8; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            h[i] = x;
        }
        e = cudaMemcpy((uint8_t *)p + off, h, bytes - off < step ? bytes - off : step,
                       cudaMemcpyHostToDevice);
    }
    free(h);
    return e;
}
#endif

/* Memory for CONC buffers of the largest size, on gpu (or host), registered with a; from be's
 * arena_alloc when be is not NULL (--gkv-backend). */
static uint8_t *region(gkv_nixl_agent_t *a, gkv_backend_t *be, int gpu, uint64_t bytes, int *mem,
                       int rnd, uint64_t pad)
{
    void *p = NULL;
    char why[256];
#ifdef GKV_HAVE_CUDA
    if (gpu >= 0) {
        cudaSetDevice(gpu);
        if (be ? be->ops->arena_alloc(be, bytes + pad, &p) != 0
               : cudaMalloc(&p, bytes + pad) != cudaSuccess)
            return NULL;
        cudaMemset(p, gpu + 1, bytes);
        if (rnd && fill_random(p, bytes) != cudaSuccess)
            return NULL;
        cudaDeviceSynchronize();
        *mem = GKV_NIXL_VRAM;
    }
#endif
    if (gpu < 0) {
        p = mmap(NULL, bytes + pad, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            return NULL;
        memset(p, 1, bytes);
        *mem = GKV_NIXL_DRAM;
    }
    if (gkv_nixl_agent_register(a, p, bytes + pad, *mem, gpu < 0 ? 0 : (uint64_t)gpu, why,
                                sizeof(why))) {
        fprintf(stderr, "%s\n", why);
        return NULL;
    }
    return p;
}

/* --copy-duty: device-to-device copies of 64 MiB on gpu, busy duty% of the time until stop. */
typedef struct {
    int gpu, duty;
    volatile int stop;
    double busy;
    long copies;
} copier_t;

#define COPY_BYTES (64ull << 20)

static void *copier(void *arg)
{
    copier_t *k = arg;
#ifdef GKV_HAVE_CUDA
    void *a = NULL, *b = NULL;
    cudaStream_t s;
    cudaSetDevice(k->gpu);
    if (cudaMalloc(&a, COPY_BYTES) != cudaSuccess || cudaMalloc(&b, COPY_BYTES) != cudaSuccess ||
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
        fprintf(stderr, "copier: no memory\n");
        return NULL;
    }
    while (!k->stop) {
        double t0 = now_s();
        cudaMemcpyAsync(b, a, COPY_BYTES, cudaMemcpyDeviceToDevice, s);
        cudaStreamSynchronize(s);
        double dt = now_s() - t0;
        k->busy += dt;
        k->copies++;
        if (k->duty < 100)
            usleep((useconds_t)(dt * 1e6 * (100 - k->duty) / k->duty));
    }
    cudaFree(a);
    cudaFree(b);
    cudaStreamDestroy(s);
#endif
    return NULL;
}

typedef struct {
    gkv_nixl_agent_t *a;
    const char *peer;
    int op, mem, rmem, rounds, fails;
    uint64_t dev, rdev, size;
    uint8_t *local;
    uint64_t remote;
    int staged;
    void *value;       /* --staged: the bytes each part is copied from */
    gkv_backend_t *be; /* --gkv-backend: copy in with its arena_copy from vp */
    gkv_devptr_t vp;
} job_t;

#define PARTS_MAX 8

/* One transfer as the data plane's owner sends a chunk (--staged). */
static int staged_xfer(job_t *j, char *why, size_t cap)
{
#ifdef GKV_HAVE_CUDA
    static _Thread_local cudaStream_t s;
    if (!s && cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
        return -1;
    gkv_nixl_xfer_t xs[PARTS_MAX];
    int parts = j->staged > PARTS_MAX ? PARTS_MAX : j->staged, rc = 0;
    uint64_t plen = (j->size + (uint64_t)parts - 1) / (uint64_t)parts;
    int n = 0;
    for (uint64_t o = 0; o < j->size; o += plen) {
        uint64_t len = j->size - o < plen ? j->size - o : plen;
        if (j->be) {
            if (j->be->ops->arena_copy(j->be, j->vp, o, j->local + o, (size_t)len, 0, NULL))
                rc = -1;
        } else {
            cudaMemcpyAsync(j->local + o, (uint8_t *)j->value + o, len, cudaMemcpyDeviceToDevice,
                            s);
            cudaStreamSynchronize(s);
        }
        if (gkv_nixl_agent_post(j->a, j->op, j->peer, j->local + o, len, j->mem, j->dev,
                                j->remote + o, j->rmem, j->rdev, &xs[n++], why, cap))
            rc = -1;
    }
    for (int i = 0; i < n; i++) {
        bool stuck;
        if (gkv_nixl_agent_wait(j->a, &xs[i], j->peer, 10000, &stuck, why, cap))
            rc = -1;
    }
    return rc;
#else
    (void)j;
    snprintf(why, cap, "--staged needs CUDA");
    return -1;
#endif
}

static void *run(void *arg)
{
    job_t *j = arg;
    char why[256];
    bool stuck;
    for (int r = 0; r < j->rounds; r++)
        if (j->staged) {
            if (staged_xfer(j, why, sizeof(why))) {
                fprintf(stderr, "transfer failed: %s\n", why);
                j->fails++;
                break;
            }
        } else
        if (gkv_nixl_agent_xfer(j->a, j->op, j->peer, j->local, j->size, j->mem, j->dev,
                                j->remote, j->rmem, j->rdev, 10000, &stuck, why, sizeof(why))) {
            fprintf(stderr, "transfer failed: %s\n", why);
            j->fails++;
            break;
        }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: nixl_xfer NIXL_PATH [--host] [--sizes 64M,256M] [--conc 1,2,4,8]\n"
                        "                 [--rounds 8] [--copy-duty PCT] [--staged PARTS]\n"
                        "                 [--value-pool] [--local-pool] [--gkv-backend]\n"
                        "                 [--op read|write] [--random] [--pad BYTES]\n");
        return 2;
    }
    const char *sizes = "64M,256M", *concs = "1,2,4,8";
    int rounds = 8, host = 0, duty = 0, staged = 0, vpool = 0, lpool = 0, gbe = 0, ops = 3;
    int rnd = 0;
    uint64_t pad = 0;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--host"))
            host = 1;
        else if (!strcmp(argv[i], "--sizes") && i + 1 < argc)
            sizes = argv[++i];
        else if (!strcmp(argv[i], "--conc") && i + 1 < argc)
            concs = argv[++i];
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--copy-duty") && i + 1 < argc)
            duty = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--staged") && i + 1 < argc)
            staged = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--value-pool"))
            vpool = 1;
        else if (!strcmp(argv[i], "--local-pool"))
            lpool = 1;
        else if (!strcmp(argv[i], "--gkv-backend"))
            gbe = 1;
        else if (!strcmp(argv[i], "--random"))
            rnd = 1;
        else if (!strcmp(argv[i], "--pad") && i + 1 < argc)
            pad = size_arg(argv[++i]);
        else if (!strcmp(argv[i], "--op") && i + 1 < argc)
            ops = !strcmp(argv[++i], "read") ? 1 : !strcmp(argv[i], "write") ? 2 : 3;
    }
    uint64_t maxsize = 0;
    char tmp[256];
    snprintf(tmp, sizeof(tmp), "%s", sizes);
    for (char *t = strtok(tmp, ","); t; t = strtok(NULL, ","))
        if (size_arg(t) > maxsize)
            maxsize = size_arg(t);
    uint64_t bytes = maxsize * MAXC;
    int sv[2];
    socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    gkv_nixl_api_t api;
    char why[512];
    if (gkv_nixl_load(argv[1], &api, why, sizeof(why))) {
        fprintf(stderr, "%s\n", why);
        return 1;
    }
    pid_t child = fork();
    int me = child == 0 ? 1 : 0, fd = sv[me];
    gkv_nixl_agent_t a;
    if (gkv_nixl_agent_open(&a, &api, me ? "xfer-target" : "xfer-initiator", !host, why,
                            sizeof(why))) {
        fprintf(stderr, "%s\n", why);
        return 1;
    }
    gkv_backend_t *be = NULL;
    if (gbe && !host) {
        gkv_backend_config_t bc = {GKV_BACKEND_CUDA, me, 24ull << 30, 0};
        if (gkv_backend_open(&bc, &be, why, sizeof(why))) {
            fprintf(stderr, "--gkv-backend: %s\n", why);
            return 1;
        }
    }
    int mem;
    uint8_t *buf = region(&a, be, host ? -1 : me, bytes, &mem, rnd, pad);
    if (!buf)
        return 1;
    void *md;
    size_t mdlen;
    gkv_nixl_agent_md(&a, &md, &mdlen);
    uint64_t addr = (uint64_t)(uintptr_t)buf, n;
    send_blob(fd, md, mdlen);
    send_blob(fd, &addr, sizeof(addr));
    void *pmd = recv_blob(fd, &n);
    char peer[128];
    if (!pmd || gkv_nixl_agent_load(&a, pmd, n, peer, sizeof(peer))) {
        fprintf(stderr, "loading the peer's metadata failed\n");
        return 1;
    }
    uint64_t *raddr = recv_blob(fd, &n);
    copier_t cp = {.gpu = me, .duty = duty > 100 ? 100 : duty};
    pthread_t cpt;
    if (duty > 0 && !host)
        pthread_create(&cpt, NULL, copier, &cp);
    if (me == 1) { /* the target: wait for the end */
        char c;
        int rc = read(fd, &c, 1) < 0;
        if (duty > 0 && !host) {
            cp.stop = 1;
            pthread_join(cpt, NULL);
        }
        gkv_nixl_agent_close(&a);
        if (be)
            be->ops->close(be);
        free(md);
        free(pmd);
        free(raddr);
        return rc;
    }
    void *values[MAXC] = {NULL};
    gkv_devptr_t vps[MAXC] = {{0}};
#ifdef GKV_HAVE_CUDA
    for (int k = 0; staged && !host && k < MAXC; k++)
        if (be) { /* a value of gpukvd's, its bytes copied in from the registered buffer */
            if (be->ops->alloc(be, maxsize, GKV_LANE_SHARED, &vps[k]) ||
                be->ops->arena_copy(be, vps[k], 0, buf, (size_t)maxsize, 1, NULL)) {
                fprintf(stderr, "--gkv-backend: no value memory\n");
                return 1;
            }
        } else if ((vpool ? pool_alloc(0, maxsize, &values[k])
                          : cudaMalloc(&values[k], maxsize)) != cudaSuccess ||
                   (rnd && fill_random(values[k], maxsize) != cudaSuccess)) {
            fprintf(stderr, "--staged: no memory\n");
            return 1;
        }
#endif
    if (be)
        printf("in gpukvd's cuda backend: buffers from arena_alloc%s\n\n",
               staged ? ", parts copied in by arena_copy from its values" : "");
    uint8_t *locals[MAXC] = {NULL};
#ifdef GKV_HAVE_CUDA
    for (int k = 0; lpool && !host && k < 4; k++) { /* the agent keeps 8 registrations */
        double t0 = now_s();
        if (pool_alloc(0, maxsize, (void **)&locals[k]) != cudaSuccess) {
            fprintf(stderr, "--local-pool: no memory\n");
            return 1;
        }
        cudaMemset(locals[k], 7, maxsize);
        cudaDeviceSynchronize();
        double t1 = now_s();
        if (gkv_nixl_agent_register(&a, locals[k], maxsize, GKV_NIXL_VRAM, 0, why, sizeof(why))) {
            fprintf(stderr, "--local-pool: %s\n", why);
            return 1;
        }
        if (k < 2)
            printf("pool buffer %d: allocated in %.3f ms, registered in %.3f ms\n", k,
                   (t1 - t0) * 1e3, (now_s() - t1) * 1e3);
    }
#endif
    if (lpool)
        printf("the initiator's buffers come from a pool (POSIX fd handles)\n\n");
    if (staged)
        printf("WRITEs staged as the data plane sends a chunk: %d parts, each copied in first "
               "from %s\n\n", staged, vpool ? "a pool's memory" : "cudaMalloc's");
    printf("| op | size | at once | aggregate GB/s | per transfer ms |\n|---|---|---|---|---|\n");
    for (int op = 0; op < 2; op++) {
        if (!(ops & (1 << op)))
            continue;
        snprintf(tmp, sizeof(tmp), "%s", sizes);
        char *save = NULL;
        for (char *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            uint64_t size = size_arg(t);
            char ctmp[64];
            snprintf(ctmp, sizeof(ctmp), "%s", concs);
            char *save2 = NULL;
            for (char *c = strtok_r(ctmp, ",", &save2); c; c = strtok_r(NULL, ",", &save2)) {
                int conc = atoi(c) > MAXC ? MAXC : atoi(c);
                job_t jobs[MAXC];
                pthread_t th[MAXC];
                for (int k = 0; k < conc; k++)
                    jobs[k] = (job_t){&a, peer, op == 0 ? GKV_NIXL_READ : GKV_NIXL_WRITE, mem,
                                      mem, 1, 0, host ? 0 : 0, host ? 0 : 1, size,
                                      locals[k] ? locals[k] : buf + (uint64_t)k * maxsize,
                                      *raddr + (uint64_t)k * maxsize,
                                      op == 1 && !host ? staged : 0, values[k],
                                      staged && be ? be : NULL, vps[k]};
                job_t warm = jobs[0];
                run(&warm); /* first transfers open the mappings */
                for (int k = 0; k < conc; k++)
                    jobs[k].rounds = rounds;
                double t0 = now_s();
                for (int k = 0; k < conc; k++)
                    pthread_create(&th[k], NULL, run, &jobs[k]);
                int fails = 0;
                for (int k = 0; k < conc; k++) {
                    pthread_join(th[k], NULL);
                    fails += jobs[k].fails;
                }
                double dt = now_s() - t0;
                printf("| %s | %s | %d | %.1f | %.3f |%s\n", op == 0 ? "READ" : "WRITE", t, conc,
                       (double)size * conc * rounds / dt / 1e9, dt / rounds * 1e3,
                       fails ? " FAILED" : "");
                fflush(stdout);
            }
        }
    }
    if (duty > 0 && !host) {
        cp.stop = 1;
        pthread_join(cpt, NULL);
        printf("\nmeanwhile, each GPU copied 64 MiB device to device %.0f%% of the time: initiator "
               "%ld copies at %.1f GB/s\n", (double)cp.duty, cp.copies,
               cp.busy > 0 ? (double)COPY_BYTES * (double)cp.copies / cp.busy / 1e9 : 0.0);
    }
    if (write(fd, "x", 1) < 0)
        return 1;
    waitpid(child, NULL, 0);
    gkv_nixl_agent_close(&a);
    if (be)
        be->ops->close(be);
    free(md);
    free(pmd);
    free(raddr);
    return 0;
}
