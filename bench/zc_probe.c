/* zc_probe.c: what the CUDA memory-pool IPC primitives cost on this machine, measured between
 * two processes the way gpukvd (exporter) and libgpukv (importer) use them. The design choices
 * of the zero-copy path rest on these numbers (BRIEF.md's table; bench/RESULTS.md).
 *   zc_probe            prints one line per measurement
 * The parent exports a pool (release threshold at maximum, like the cuda backend) and passes its
 * fd over a socketpair; the child imports it and answers requests to import, free and copy. */
#include <cuda_runtime.h>
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

enum {
    OP_IMPORT,
    OP_FREE,
    OP_FREE_ASYNC,
    OP_FREE_ASYNC_NOSYNC,
    OP_COPY_IN,
    OP_REIMPORT_POOL,
    OP_IMPORT_TWICE,
    OP_QUIT
};

typedef struct {
    int op;
    int slot; /* which imported pointer (child keeps 8) */
    size_t size;
    struct cudaMemPoolPtrExportData data;
} req_t;

typedef struct {
    int err;
    double us;
    uintptr_t addr;
    char note[96];
} rep_t;

static void send_fd(int sock, int fd)
{
    char byte = 0;
    if (gkv_fd_send(sock, &byte, 1, fd) != 1)
        exit(1);
}

static int recv_fd(int sock)
{
    char byte;
    int fd = -1;
    if (gkv_fd_recv(sock, &byte, 1, &fd) != 1 || fd < 0)
        exit(1);
    return fd;
}

static void xfer(int sock, void *p, size_t n, int out)
{
    for (size_t d = 0; d < n;) {
        ssize_t k = out ? write(sock, (char *)p + d, n - d) : read(sock, (char *)p + d, n - d);
        if (k <= 0)
            exit(out ? 1 : 0);
        d += (size_t)k;
    }
}

/* The importer. */
static void child(int sock)
{
    int fd = recv_fd(sock);
    CK(cudaSetDevice(0));
    cudaMemPool_t pool, pool2 = NULL;
    CK(cudaMemPoolImportFromShareableHandle(&pool, (void *)(uintptr_t)fd,
                                            cudaMemHandleTypePosixFileDescriptor, 0));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void *ptr[8] = {0}, *priv = NULL;
    size_t priv_size = 0;
    for (;;) {
        req_t q;
        rep_t r = {0};
        xfer(sock, &q, sizeof(q), 0);
        double t0 = bench_now_us();
        cudaError_t e = cudaSuccess;
        switch (q.op) {
        case OP_IMPORT:
            e = cudaMemPoolImportPointer(&ptr[q.slot], pool, &q.data);
            r.addr = (uintptr_t)ptr[q.slot];
            break;
        case OP_FREE:
            e = cudaFree(ptr[q.slot]);
            break;
        case OP_FREE_ASYNC:
            e = cudaFreeAsync(ptr[q.slot], s);
            if (e == cudaSuccess)
                e = cudaStreamSynchronize(s);
            break;
        case OP_FREE_ASYNC_NOSYNC:
            e = cudaFreeAsync(ptr[q.slot], s);
            r.us = bench_now_us() - t0;
            cudaStreamSynchronize(s);
            break;
        case OP_COPY_IN: /* private -> imported, and private -> private, D2D, waited for */
            if (priv_size < q.size) {
                cudaFree(priv);
                CK(cudaMalloc(&priv, 2 * q.size));
                CK(cudaMemset(priv, 1, 2 * q.size));
                CK(cudaDeviceSynchronize());
                priv_size = q.size;
            }
            t0 = bench_now_us();
            e = cudaMemcpyAsync(ptr[q.slot], priv, q.size, cudaMemcpyDefault, s);
            if (e == cudaSuccess)
                e = cudaStreamSynchronize(s);
            r.us = bench_now_us() - t0;
            t0 = bench_now_us();
            cudaMemcpyAsync((char *)priv + q.size, priv, q.size, cudaMemcpyDefault, s);
            cudaStreamSynchronize(s);
            snprintf(r.note, sizeof(r.note), "private copy %.0f us", bench_now_us() - t0);
            break;
        case OP_REIMPORT_POOL: { /* the same pool again, from a dup of its fd */
            int fd2 = dup(fd);
            e = cudaMemPoolImportFromShareableHandle(&pool2, (void *)(uintptr_t)fd2,
                                                     cudaMemHandleTypePosixFileDescriptor, 0);
            snprintf(r.note, sizeof(r.note), "second pool import: %s, %s handle",
                     cudaGetErrorString(e), pool2 == pool ? "same" : "different");
            if (e == cudaSuccess && pool2 != pool) {
                void *p2 = NULL;
                cudaError_t e2 = cudaMemPoolImportPointer(&p2, pool2, &q.data);
                snprintf(r.note + strlen(r.note), sizeof(r.note) - strlen(r.note),
                         "; ptr via it: %s%s", cudaGetErrorString(e2),
                         e2 == cudaSuccess ? (p2 == ptr[q.slot] ? " same addr" : " other addr")
                                           : "");
                if (e2 == cudaSuccess)
                    cudaFree(p2);
            }
            e = cudaSuccess;
            break;
        }
        case OP_IMPORT_TWICE: { /* a pointer already imported, imported again */
            void *p2 = NULL;
            cudaError_t e2 = cudaMemPoolImportPointer(&p2, pool, &q.data);
            snprintf(r.note, sizeof(r.note), "second import of one pointer: %s%s",
                     cudaGetErrorString(e2),
                     e2 == cudaSuccess ? (p2 == ptr[q.slot] ? ", same addr" : ", other addr") : "");
            if (e2 == cudaSuccess && p2 != ptr[q.slot])
                cudaFree(p2);
            (void)cudaGetLastError();
            break;
        }
        case OP_QUIT:
            xfer(sock, &r, sizeof(r), 1);
            _exit(0);
        }
        if (!r.us)
            r.us = bench_now_us() - t0;
        r.err = e;
        if (e != cudaSuccess)
            snprintf(r.note, sizeof(r.note), "%s", cudaGetErrorString(e));
        xfer(sock, &r, sizeof(r), 1);
    }
}

static int sock;

static rep_t ask(int op, int slot, size_t size, const struct cudaMemPoolPtrExportData *d)
{
    req_t q = {op, slot, size, {{0}}};
    if (d)
        q.data = *d;
    rep_t r;
    xfer(sock, &q, sizeof(q), 1);
    xfer(sock, &r, sizeof(r), 0);
    if (r.err)
        fprintf(stderr, "zc_probe: child op %d: %s\n", op, r.note);
    return r;
}

typedef struct {
    cudaMemPool_t pool;
    cudaStream_t zc;
} exporter_t;

static void *ex_alloc(exporter_t *x, size_t size, struct cudaMemPoolPtrExportData *d, double *us)
{
    void *p;
    double t0 = bench_now_us();
    CK(cudaMallocFromPoolAsync(&p, size, x->pool, x->zc));
    CK(cudaStreamSynchronize(x->zc));
    CK(cudaMemPoolExportPointer(d, p));
    if (us)
        *us = bench_now_us() - t0;
    return p;
}

/* set_from_device's pattern, n times: the exporter allocates a new value while the old (*p)
 * lives, the child imports and frees the new one, then the old one is freed. */
static void beside_old(exporter_t *x, size_t size, int n, void **p, double *alloc_us,
                       double *import_us, double *free_us)
{
    for (int i = 0; i < n; i++) {
        struct cudaMemPoolPtrExportData d;
        void *q = ex_alloc(x, size, &d, &alloc_us[i]);
        import_us[i] = ask(OP_IMPORT, 0, 0, &d).us;
        free_us[i] = ask(OP_FREE, 0, 0, NULL).us;
        CK(cudaFreeAsync(*p, x->zc));
        *p = q;
    }
}

int main(void)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
        return 1;
    pid_t pid = fork(); /* before any CUDA call */
    if (pid == 0) {
        close(sv[0]);
        child(sv[1]);
    }
    close(sv[1]);
    sock = sv[0];
    exporter_t x;
    int fd;
    x.pool = bench_exported_pool(&fd);
    CK(cudaStreamCreateWithFlags(&x.zc, cudaStreamNonBlocking));
    send_fd(sock, fd);

    enum { R = 9 };
    const size_t sizes[] = {4096, 1u << 20, 64u << 20, 1u << 30};
    for (int si = 0; si < 4; si++) {
        size_t size = sizes[si];
        double a[R], imp[R], fr[R];
        struct cudaMemPoolPtrExportData d;
        /* 1. One allocation, imported and freed by the child R times. */
        void *p = ex_alloc(&x, size, &d, NULL);
        for (int i = 0; i < R; i++) {
            imp[i] = ask(OP_IMPORT, 0, 0, &d).us;
            fr[i] = ask(OP_FREE, 0, 0, NULL).us;
        }
        printf("size %zu: same allocation: import first %.1f us, then median %.1f us; cudaFree "
               "first %.1f, median %.1f us\n",
               size, imp[0], bench_median(imp + 1, R - 1), fr[0], bench_median(fr + 1, R - 1));
        /* 2. Freed and allocated again by the exporter each time (same size). */
        uintptr_t prev = (uintptr_t)p, same = 0;
        for (int i = 0; i < R; i++) {
            CK(cudaFreeAsync(p, x.zc));
            p = ex_alloc(&x, size, &d, &a[i]);
            same += (uintptr_t)p == prev;
            prev = (uintptr_t)p;
            imp[i] = ask(OP_IMPORT, 0, 0, &d).us;
            fr[i] = ask(OP_FREE, 0, 0, NULL).us;
        }
        printf("size %zu: re-allocated each time (%d/%d at the same address): alloc+export median "
               "%.1f us; import median %.1f us; cudaFree median %.1f us\n",
               size, (int)same, R, bench_median(a, R), bench_median(imp, R), bench_median(fr, R));
        /* 2b. Where an exporter's re-allocation spends its time. */
        double tf[R], tm[R], ts[R], te[R], te2[R];
        for (int i = 0; i < R; i++) {
            double t = bench_now_us();
            CK(cudaFreeAsync(p, x.zc));
            tf[i] = bench_now_us() - t;
            t = bench_now_us();
            CK(cudaMallocFromPoolAsync(&p, size, x.pool, x.zc));
            tm[i] = bench_now_us() - t;
            t = bench_now_us();
            CK(cudaStreamSynchronize(x.zc));
            ts[i] = bench_now_us() - t;
            t = bench_now_us();
            CK(cudaMemPoolExportPointer(&d, p));
            te[i] = bench_now_us() - t;
            t = bench_now_us();
            CK(cudaMemPoolExportPointer(&d, p));
            te2[i] = bench_now_us() - t;
        }
        printf(
            "size %zu: exporter medians: cudaFreeAsync %.1f us, cudaMallocFromPoolAsync %.1f us, "
            "cudaStreamSynchronize %.1f us, cudaMemPoolExportPointer %.1f us (again %.1f us)\n",
            size, bench_median(tf, R), bench_median(tm, R), bench_median(ts, R),
            bench_median(te, R), bench_median(te2, R));
        /* 3. set_from_device's pattern: a new allocation while the old value lives, then the
         *    old one freed. */
        beside_old(&x, size, R, &p, a, imp, fr);
        printf("size %zu: new allocation beside the old: alloc+export median %.1f us; import "
               "median %.1f us; cudaFree median %.1f us\n",
               size, bench_median(a, R), bench_median(imp, R), bench_median(fr, R));
        /* 4. The same, with the child keeping an import of a third, long-lived allocation. */
        struct cudaMemPoolPtrExportData dk;
        void *keep = ex_alloc(&x, size, &dk, NULL);
        ask(OP_IMPORT, 1, 0, &dk);
        beside_old(&x, size, R, &p, a, imp, fr);
        ask(OP_FREE, 1, 0, NULL);
        CK(cudaFreeAsync(keep, x.zc));
        printf("size %zu: same, another import held: import median %.1f us; cudaFree median "
               "%.1f us\n",
               size, bench_median(imp, R), bench_median(fr, R));
        /* 5. Free variants, and copy bandwidth into an imported allocation. */
        double fa[R], fn[R], cp[R];
        char note[96] = "";
        for (int i = 0; i < R; i++) {
            ask(OP_IMPORT, 0, 0, &d);
            fa[i] = ask(OP_FREE_ASYNC, 0, 0, NULL).us;
            ask(OP_IMPORT, 0, 0, &d);
            fn[i] = ask(OP_FREE_ASYNC_NOSYNC, 0, 0, NULL).us;
        }
        ask(OP_IMPORT, 0, 0, &d);
        for (int i = 0; i < R && size >= (1u << 20); i++) {
            rep_t r = ask(OP_COPY_IN, 0, size, NULL);
            cp[i] = r.us;
            memcpy(note, r.note, sizeof(note));
        }
        if (si == 0) {
            printf("pool: %s\n", ask(OP_REIMPORT_POOL, 0, 0, &d).note);
            printf("pointer: %s\n", ask(OP_IMPORT_TWICE, 0, 0, &d).note);
        }
        ask(OP_FREE, 0, 0, NULL);
        printf("size %zu: cudaFreeAsync+cudaStreamSynchronize median %.1f us; cudaFreeAsync alone "
               "%.1f us\n",
               size, bench_median(fa, R), bench_median(fn, R));
        if (size >= (1u << 20))
            printf("size %zu: copy private -> imported median %.0f us (last: %s)\n", size,
                   bench_median(cp, R), note);
        CK(cudaFreeAsync(p, x.zc));
        CK(cudaStreamSynchronize(x.zc));
    }
    /* 7. Two live allocations imported in turn (each import freed before the next): does the
     *    importer keep more than the last mapping? */
    for (int si = 1; si < 4; si++) {
        size_t size = sizes[si];
        struct cudaMemPoolPtrExportData da, db;
        void *pa = ex_alloc(&x, size, &da, NULL), *pb = ex_alloc(&x, size, &db, NULL);
        double ia[R], ib[R];
        for (int i = 0; i < R; i++) {
            ia[i] = ask(OP_IMPORT, 0, 0, &da).us;
            ask(OP_FREE, 0, 0, NULL);
            ib[i] = ask(OP_IMPORT, 0, 0, &db).us;
            ask(OP_FREE, 0, 0, NULL);
        }
        printf("size %zu: two allocations imported in turn: import A median %.1f us, B median "
               "%.1f us (first %.1f / %.1f)\n",
               size, bench_median(ia + 1, R - 1), bench_median(ib + 1, R - 1), ia[0], ib[0]);
        CK(cudaFreeAsync(pa, x.zc));
        CK(cudaFreeAsync(pb, x.zc));
        CK(cudaStreamSynchronize(x.zc));
    }
    /* 8. Three 1 GiB allocations imported in turn. */
    {
        struct cudaMemPoolPtrExportData d3[3];
        void *p3[3];
        double t3[3][R];
        for (int j = 0; j < 3; j++)
            p3[j] = ex_alloc(&x, 1u << 30, &d3[j], NULL);
        for (int i = 0; i < R; i++)
            for (int j = 0; j < 3; j++) {
                t3[j][i] = ask(OP_IMPORT, 0, 0, &d3[j]).us;
                ask(OP_FREE, 0, 0, NULL);
            }
        printf("1 GiB: three allocations imported in turn: medians %.1f / %.1f / %.1f us\n",
               bench_median(t3[0] + 1, R - 1), bench_median(t3[1] + 1, R - 1),
               bench_median(t3[2] + 1, R - 1));
        for (int j = 0; j < 3; j++)
            CK(cudaFreeAsync(p3[j], x.zc));
        CK(cudaStreamSynchronize(x.zc));
    }
    /* 9. set_from_device's importer side: import, copy into it, free, and the next import. */
    {
        struct cudaMemPoolPtrExportData d9[2];
        void *p9[2];
        double ti[2 * R], tc[2 * R], tf[2 * R];
        for (int j = 0; j < 2; j++)
            p9[j] = ex_alloc(&x, 1u << 30, &d9[j], NULL);
        for (int i = 0; i < 2 * R; i++) {
            ti[i] = ask(OP_IMPORT, 0, 0, &d9[i % 2]).us;
            tc[i] = ask(OP_COPY_IN, 0, 1u << 30, NULL).us;
            tf[i] = ask(OP_FREE, 0, 0, NULL).us;
        }
        printf("1 GiB: import, copy into it, free, in turn over two allocations: import median "
               "%.1f us, copy %.0f us, cudaFree %.1f us\n",
               bench_median(ti + 2, 2 * R - 2), bench_median(tc + 2, 2 * R - 2),
               bench_median(tf + 2, 2 * R - 2));
        for (int j = 0; j < 2; j++)
            CK(cudaFreeAsync(p9[j], x.zc));
        CK(cudaStreamSynchronize(x.zc));
    }
    /* 6. Many imports: per-import cost when N are alive at once, and the frees. */
    enum { N = 2000 };
    static void *ps[N];
    static struct cudaMemPoolPtrExportData ds[N];
    for (int i = 0; i < N; i++)
        ps[i] = ex_alloc(&x, 4096, &ds[i], NULL);
    double t0 = bench_now_us(), tot = 0;
    for (int i = 0; i < N; i++) {
        tot += ask(OP_IMPORT, 0, 0, &ds[i]).us;
        ask(OP_FREE, 0, 0, NULL);
    }
    printf("2000 distinct 4 KiB allocations: import median-free mean %.2f us (loop %.0f us)\n",
           tot / N, bench_now_us() - t0);
    for (int i = 0; i < N; i++)
        cudaFreeAsync(ps[i], x.zc);
    ask(OP_QUIT, 0, 0, NULL);
    waitpid(pid, NULL, 0);
    return 0;
}
