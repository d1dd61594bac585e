/* zc_bench.c: zero-copy numbers on the cuda backend, each against its reference in the same run:
 *   - first MAP on a new connection (pool import included), median of 20
 *   - warm MAP+unmap round trip of one key (gkv_unmap parks the lease, the next MAP renews
 *     it), p50/p99 of 10,000; the same ending the lease each time (MAP+RELEASE: import,
 *     cudaFree, RELEASE); and over 16 keys in turn (more than the 8 parking slots)
 *   - kernel read bandwidth of a mapped 1 GiB value vs the same read of a private buffer
 *   - gkv_set_from_device of 1 GiB vs a plain device-to-device cudaMemcpy of 1 GiB, and where
 *     the time around the copy goes (CREATE+SEAL alone, a PING after the daemon idled)
 * Usage: zc_bench URL   (a gpukvd with the cuda backend on its Unix socket)
 * Prints a Markdown table. zc_bench URL --warm [KEY]: only the warm MAP+unmap of one value (KEY,
 * which must exist; default bench/small, set to 4 KiB) and the PING round trip, 10,000 each
 * after 1,000 warm-ups, as one line "warm_p50_us warm_p99_us ping_p50_us" (bench/py_bench.py
 * puts it beside the Python binding's figures). zc_bench URL --fresh: gkv_set_from_device of a
 * new key each time (CREATE clears the memory it hands out: a deleted value's, or new), per size,
 * next to a plain D2D copy of that size; one line per size, medians of 9 (--fresh GAP_US: that
 * long between each DEL and the next CREATE). */
#include <cuda_runtime.h>
#include <gpukv/gpukv.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "zc_kernels.h"

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

static double pct(double *v, int n, double p)
{
    qsort(v, (size_t)n, sizeof(double), cmp);
    int i = (int)(p * (n - 1) + 0.5);
    return v[i];
}

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        int rc_ = (x);                                                                             \
        if (rc_) {                                                                                 \
            fprintf(stderr, "zc_bench: %s failed: %d\n", #x, rc_);                              \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* --warm: the warm MAP+unmap and PING round trips alone (see the top of the file). */
static int warm_only(gkv_client_t *c, const char *key)
{
    enum { N = 10000 };
    static double rt[N], ping[N];
    gkv_mapping_t *m;
    size_t klen = strlen(key);
    for (int i = 0; i < 1000; i++) {
        CHECK(gkv_map(c, key, klen, NULL, &m));
        CHECK(gkv_unmap(c, m));
        CHECK(gkv_ping(c));
    }
    for (int i = 0; i < N; i++) {
        double t0 = now_us();
        CHECK(gkv_map(c, key, klen, NULL, &m));
        CHECK(gkv_unmap(c, m));
        rt[i] = now_us() - t0;
    }
    for (int i = 0; i < N; i++) {
        double t0 = now_us();
        CHECK(gkv_ping(c));
        ping[i] = now_us() - t0;
    }
    printf("%.2f %.2f %.2f\n", pct(rt, N, 0.5), pct(rt, N, 0.99), pct(ping, N, 0.5));
    gkv_client_close(c);
    return 0;
}

/* --fresh [GAP_US] (see the top of the file): GAP_US microseconds pass between a DEL and the
 * next CREATE, as in a cache whose frees do not come right before its writes. */
static int fresh_only(gkv_client_t *c, unsigned gap_us)
{
    static const size_t sizes[] = {64u << 10, 1u << 20, 16u << 20, 256u << 20, 1u << 30};
    enum { R = 9 };
    void *src, *dst;
    CHECK(cudaMalloc(&src, 1u << 30));
    CHECK(cudaMalloc(&dst, 1u << 30));
    CHECK(zc_fill_device(src, 1u << 30, 1));
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        double sfd[R], d2d[R];
        for (int r = -1; r < R; r++) { /* r = -1: a warm-up */
            char key[64];
            snprintf(key, sizeof(key), "fresh/%zu/%d", sizes[i], r + 1);
            const void *k = key;
            size_t kl = strlen(key);
            double t0 = now_us();
            CHECK(gkv_set_from_device(c, key, kl, src, sizes[i], NULL));
            double t1 = now_us();
            CHECK(cudaMemcpy(dst, src, sizes[i], cudaMemcpyDeviceToDevice));
            CHECK(cudaDeviceSynchronize());
            double t2 = now_us();
            if (gkv_del(c, &k, &kl, 1) != 1)
                exit(1);
            if (gap_us)
                usleep(gap_us);
            if (r >= 0) {
                sfd[r] = t1 - t0;
                d2d[r] = t2 - t1;
            }
        }
        printf("fresh %zu B (gap %u us): set_from_device p50 %.1f us, plain D2D copy p50 %.1f us\n",
               sizes[i], gap_us, pct(sfd, R, 0.5), pct(d2d, R, 0.5));
    }
    cudaFree(src);
    cudaFree(dst);
    gkv_client_close(c);
    return 0;
}

int main(int argc, char **argv)
{
    bool fresh = argc >= 3 && strcmp(argv[2], "--fresh") == 0;
    if (argc < 2 || (argc > 2 && !fresh && strcmp(argv[2], "--warm") != 0) || argc > 4) {
        fprintf(stderr, "usage: zc_bench URL [--warm [KEY] | --fresh [GAP_US]]\n");
        return 2;
    }
    const char *url = argv[1];
    const size_t gib = 1ull << 30;
    gkv_client_t *c;
    CHECK(gkv_client_connect(url, &c));
    if (fresh)
        return fresh_only(c, argc == 4 ? (unsigned)atoi(argv[3]) : 0);
    if (argc > 2) {
        if (argc == 3) {
            static char small[4096];
            CHECK(gkv_set(c, "bench/small", 11, small, sizeof(small), NULL));
        }
        return warm_only(c, argc == 4 ? argv[3] : "bench/small");
    }
    if (strcmp(gkv_client_info(c)->zero_copy, "cuda-pool-fd") != 0) {
        fprintf(stderr, "zc_bench: no cuda zero-copy: %s\n", gkv_client_info(c)->zero_copy_why);
        return 1;
    }
    void *src, *priv;
    CHECK(cudaMalloc(&src, gib));
    CHECK(cudaMalloc(&priv, gib));
    CHECK(zc_fill_device(src, gib, 1));
    CHECK(zc_fill_device(priv, gib, 2));
    CHECK(gkv_set_from_device(c, "bench/small", 11, src, 4096, NULL));

    /* Each alone first: R plain copies in a row, then R set_from_device of one key in a row. */
    enum { R = 15 };
    double alone_d2d[R], alone_sfd[R];
    for (int i = 0; i < R; i++) {
        double t0 = now_us();
        CHECK(cudaMemcpyAsync(priv, src, gib, cudaMemcpyDeviceToDevice, 0));
        CHECK(cudaStreamSynchronize(0));
        alone_d2d[i] = now_us() - t0;
    }
    for (int i = 0; i < R; i++) {
        double t0 = now_us();
        CHECK(gkv_set_from_device(c, "bench/gib", 9, src, gib, NULL));
        alone_sfd[i] = now_us() - t0;
    }

    /* set_from_device 1 GiB vs a plain device-to-device copy (both waited for: cudaMemcpy
     * returns before a device-to-device copy ends), then the same steps one by one. */
    double sfd[R], d2d[R], cr[R], cp[R], se[R];
    for (int i = 0; i < R; i++) {
        double t0 = now_us();
        CHECK(gkv_set_from_device(c, "bench/gib", 9, src, gib, NULL));
        sfd[i] = now_us() - t0;
        /* The reference: the same copy as the library's (gkv__cuda_copy). */
        t0 = now_us();
        CHECK(cudaMemcpyAsync(priv, src, gib, cudaMemcpyDeviceToDevice, 0));
        CHECK(cudaStreamSynchronize(0));
        d2d[i] = now_us() - t0;
        gkv_mapping_t *w;
        t0 = now_us();
        CHECK(gkv_create(c, "bench/gib2", 10, gib, NULL, &w));
        double t1 = now_us();
        CHECK(cudaMemcpyAsync(w->ptr, src, gib, cudaMemcpyDeviceToDevice, 0));
        CHECK(cudaStreamSynchronize(0));
        double t2 = now_us();
        CHECK(gkv_seal(c, w));
        double t3 = now_us();
        cr[i] = t1 - t0;
        cp[i] = t2 - t1;
        se[i] = t3 - t2;
    }
    double sfd_s = pct(sfd, R, 0.5) / 1e6, d2d_s = pct(d2d, R, 0.5) / 1e6;

    /* Where the time around the copy goes: CREATE+SEAL of the same 1 GiB key with no copy
     * between (the spare reused each time), and a PING after the client has spun for 0.5 ms
     * (the daemon idle meanwhile, as during a copy). */
    double cs[R], idle_ping[R];
    for (int i = 0; i < R; i++) {
        gkv_mapping_t *w;
        double t0 = now_us();
        CHECK(gkv_create(c, "bench/gib2", 10, gib, NULL, &w));
        CHECK(gkv_seal(c, w));
        cs[i] = now_us() - t0;
    }
    double copy_ping[R];
    for (int i = 0; i < R; i++) {
        double t0 = now_us();
        while (now_us() - t0 < 500)
            ;
        t0 = now_us();
        CHECK(gkv_ping(c));
        idle_ping[i] = now_us() - t0;
        CHECK(cudaMemcpyAsync(priv, src, gib, cudaMemcpyDeviceToDevice, 0));
        CHECK(cudaStreamSynchronize(0));
        t0 = now_us();
        CHECK(gkv_ping(c));
        copy_ping[i] = now_us() - t0;
    }

    /* First MAP on a fresh connection. */
    double first[20];
    for (int i = 0; i < 20; i++) {
        gkv_client_t *f;
        CHECK(gkv_client_connect(url, &f));
        gkv_mapping_t *m;
        double t0 = now_us();
        CHECK(gkv_map(f, "bench/small", 11, NULL, &m));
        first[i] = now_us() - t0;
        CHECK(gkv_unmap(f, m));
        gkv_client_close(f);
    }

    /* The protocol's own round trip, for scale. */
    static double ping[10000];
    for (int i = 0; i < 10000; i++) {
        double t0 = now_us();
        CHECK(gkv_ping(c));
        ping[i] = now_us() - t0;
    }

    /* Warm MAP+unmap of one key: the lease is parked and renewed. */
    enum { N = 10000 };
    static double rt[N], map_only[N], rel[N], rel_held[N], cyc[N];
    gkv_mapping_t *m;
    for (int i = 0; i < 1000; i++) {
        CHECK(gkv_map(c, "bench/small", 11, NULL, &m));
        CHECK(gkv_unmap(c, m));
    }
    for (int i = 0; i < N; i++) {
        double t0 = now_us();
        CHECK(gkv_map(c, "bench/small", 11, NULL, &m));
        double t1 = now_us();
        CHECK(gkv_unmap(c, m));
        rt[i] = now_us() - t0;
        map_only[i] = t1 - t0;
    }
    /* Ending the lease each time: import, cudaFree of the import, RELEASE. */
    for (int i = 0; i < N; i++) {
        double t0 = now_us();
        CHECK(gkv_map(c, "bench/small", 11, NULL, &m));
        CHECK(gkv_unmap_batch(c, &m, 1));
        rel[i] = now_us() - t0;
    }
    /* The same with the value's import kept alive by a second, long-lived mapping. */
    gkv_mapping_t *keep;
    CHECK(gkv_map(c, "bench/small", 11, NULL, &keep));
    for (int i = 0; i < N; i++) {
        double t0 = now_us();
        CHECK(gkv_map(c, "bench/small", 11, NULL, &m));
        CHECK(gkv_unmap_batch(c, &m, 1));
        rel_held[i] = now_us() - t0;
    }
    CHECK(gkv_unmap_batch(c, &keep, 1));
    /* 16 keys in turn with gkv_unmap: each MAP finds its key's lease evicted from the 8 slots,
     * so it imports, and the eviction frees an import and sends a RELEASE. */
    char ck[16][16];
    for (int k = 0; k < 16; k++) {
        snprintf(ck[k], sizeof(ck[k]), "bench/c%02d", k);
        CHECK(gkv_set_from_device(c, ck[k], strlen(ck[k]), src, 4096, NULL));
    }
    for (int i = 0; i < N; i++) {
        const char *k = ck[i % 16];
        double t0 = now_us();
        CHECK(gkv_map(c, k, strlen(k), NULL, &m));
        CHECK(gkv_unmap(c, m));
        cyc[i] = now_us() - t0;
    }

    cudaError_t pending = cudaGetLastError();
    if (pending != cudaSuccess)
        fprintf(stderr, "zc_bench: CUDA error left by earlier calls: %s\n",
                cudaGetErrorString(pending));
    /* MAP of an existing 1 GiB value: with this process importing (mapping) the allocation,
     * and with the import already held by another mapping (the request alone). */
    double mg[7], mgh[7];
    for (int i = 0; i < 7; i++) {
        double t0 = now_us();
        CHECK(gkv_map(c, "bench/gib", 9, NULL, &m));
        mg[i] = now_us() - t0;
        CHECK(gkv_unmap(c, m));
    }
    CHECK(gkv_map(c, "bench/gib", 9, NULL, &keep));
    for (int i = 0; i < 7; i++) {
        double t0 = now_us();
        CHECK(gkv_map(c, "bench/gib", 9, NULL, &m));
        mgh[i] = now_us() - t0;
        CHECK(gkv_unmap(c, m));
    }
    CHECK(gkv_unmap(c, keep));

    /* Read bandwidth through a mapping vs a private buffer. */
    CHECK(gkv_map(c, "bench/gib", 9, NULL, &m));
    double mapped_s = zc_read_seconds(m->ptr, gib, 20);
    double priv_s = zc_read_seconds(priv, gib, 20);
    double mapped2_s = zc_read_seconds(m->ptr, gib, 20);
    CHECK(gkv_unmap(c, m));

    printf("| measurement | gpukv | reference | ratio | target |\n|---|---|---|---|---|\n");
    printf("| warm MAP+unmap of one 4 KiB value (lease parked, renewed by the next MAP), p50 / "
           "p99 | %.1f / %.1f us | — | — | p50 <= 10 us |\n",
           pct(rt, N, 0.5), pct(rt, N, 0.99));
    printf("| — of which MAP, p50 | %.1f us | — | — | — |\n", pct(map_only, N, 0.5));
    printf("| MAP+RELEASE ending the lease each time (import, cudaFree, RELEASE), p50 / p99 | "
           "%.1f / %.1f us | — | — | — |\n",
           pct(rel, N, 0.5), pct(rel, N, 0.99));
    printf("| — the same with the import held by another mapping, p50 / p99 | %.1f / %.1f us | — "
           "| — | — |\n",
           pct(rel_held, N, 0.5), pct(rel_held, N, 0.99));
    printf("| MAP+unmap over 16 keys in turn (more than the 8 parking slots), p50 / p99 | %.1f / "
           "%.1f us | — | — | — |\n",
           pct(cyc, N, 0.5), pct(cyc, N, 0.99));
    printf("| PING round trip on the same connection, p50 / p99 | %.1f / %.1f us | — | — | — |\n",
           pct(ping, 10000, 0.5), pct(ping, 10000, 0.99));
    printf("| first MAP on a new connection (pool import), median of 20 | %.0f us | — | — | — |\n",
           pct(first, 20, 0.5));
    printf("| MAP of a 1 GiB value: importing it / import already held, medians | %.0f us / %.0f us "
           "| — | — | — |\n",
           pct(mg, 7, 0.5), pct(mgh, 7, 0.5));
    printf("| kernel read of a mapped 1 GiB value vs a private 1 GiB buffer | %.0f GB/s | %.0f "
           "GB/s | %.3f (again: %.3f) | >= 0.95 |\n",
           (double)gib / mapped_s / 1e9, (double)gib / priv_s / 1e9, priv_s / mapped_s,
           priv_s / mapped2_s);
    printf("| gkv_set_from_device 1 GiB vs a plain D2D copy of 1 GiB (cudaMemcpyAsync + "
           "cudaStreamSynchronize, as the library's copy), median of 15 | %.2f ms (%.0f GB/s) "
           "| %.2f ms (%.0f GB/s) | %.3f | >= 0.90 |\n",
           sfd_s * 1e3, (double)gib / sfd_s / 1e9, d2d_s * 1e3, (double)gib / d2d_s / 1e9,
           d2d_s / sfd_s);
    printf("| — fastest of %d: set_from_device / plain copy | %.2f ms / %.2f ms | — | %.3f | — |\n",
           R, pct(sfd, R, 0) / 1e3, pct(d2d, R, 0) / 1e3, pct(d2d, R, 0) / pct(sfd, R, 0));
    printf("| the same, each alone (%d in a row), medians | %.2f ms | %.2f ms | %.3f | >= 0.90 |\n",
           R, pct(alone_sfd, R, 0.5) / 1e3, pct(alone_d2d, R, 0.5) / 1e3,
           pct(alone_d2d, R, 0.5) / pct(alone_sfd, R, 0.5));
    printf("| — CREATE 1 GiB / copy into the mapping / SEAL, medians | %.0f us / %.0f us / %.0f us "
           "| — | — | — |\n",
           pct(cr, R, 0.5), pct(cp, R, 0.5), pct(se, R, 0.5));
    printf("| — CREATE+SEAL of 1 GiB with no copy between (spare reused), median | %.0f us | — | — "
           "| — |\n",
           pct(cs, R, 0.5));
    printf("| — PING after the client spun 0.5 ms (the daemon idle, as during a copy), median | "
           "%.0f us | — | — | — |\n",
           pct(idle_ping, R, 0.5));
    printf("| — PING right after a 1 GiB copy of the client's own (the daemon idle), median | "
           "%.0f us | — | — | — |\n",
           pct(copy_ping, R, 0.5));
    cudaFree(src);
    cudaFree(priv);
    gkv_client_close(c);
    return 0;
}
