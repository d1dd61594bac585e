/* test_gpu_devices.c: one gpukvd over several pools on the cuda backend (--devices): GPUs 0 and 1
 * when the machine has two, else two pools on GPU 0 (--devices 0,0), which runs every path of
 * several devices but peer access and CUDA_VISIBLE_DEVICES (the test says which it ran).
 * Values on both, bit-exact; zero-copy from another process on both (a kernel writes through
 * CREATE on device 1, another checks through MAP); MOVE under concurrent readers; OOM on one
 * device while the other has room; gkv_get_to_device of a value on either; the library's copies
 * between a mapping and a buffer on the other GPU. Prints MOVE's GB/s beside cudaMemcpyPeer's
 * for the same bytes. */
#include <check.h>
#include <cuda_runtime.h>
#include <gpukv/gpukv.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "probe.h"
#define GKV_CHECK_NO_MAIN
#include "../unit/check_main.h"

static gkv_daemon_t d;
static int ngpus; /* CUDA devices this process sees */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void start(const char *maxmemory)
{
    const char *const args[] = {"--devices", ngpus > 1 ? "0,1" : "0,0", "--maxmemory", maxmemory,
                                NULL};
    ck_assert_int_eq(harness_start(&d, args), 0);
}

/* Runs zc_helper with the environment variable env (NAME=VALUE, or NULL); its exit status. */
static int helper(const char *env, const char *mode, const char *key, uint64_t n, uint64_t seed,
                  const char *gpu)
{
    char ns[32], ss[32];
    snprintf(ns, sizeof(ns), "%llu", (unsigned long long)n);
    snprintf(ss, sizeof(ss), "%llu", (unsigned long long)seed);
    pid_t pid = fork();
    if (pid == 0) {
        if (env)
            putenv((char *)env);
        execl(ZC_HELPER_PATH, "zc_helper", mode, d.url, key, ns, ss, gpu, (char *)NULL);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void set_on(gkv_client_t *c, const char *key, size_t n, uint64_t seed, int gpu)
{
    uint8_t *v = malloc(n);
    harness_fill(v, n, seed);
    gkv_set_opts_t o = {.gpu = GKV_GPU(gpu)};
    ck_assert_int_eq(gkv_set(c, key, strlen(key), v, n, &o), 0);
    free(v);
}

static void check_on(gkv_client_t *c, const char *key, size_t n, uint64_t seed, int gpu)
{
    uint8_t *v = malloc(n), *got = malloc(n);
    harness_fill(v, n, seed);
    gkv_value_info_t vi;
    ck_assert_int_eq(gkv_get(c, key, strlen(key), NULL, got, n, &vi), 0);
    ck_assert_uint_eq(vi.length, n);
    ck_assert_int_eq(vi.gpu, gpu);
    ck_assert_msg(memcmp(v, got, n) == 0, "%s read back other bytes", key);
    free(v);
    free(got);
}

START_TEST(values_on_both_devices_reach_other_processes)
{
    fprintf(stderr, "devices: %s\n",
            ngpus > 1 ? "GPUs 0 and 1" : "two pools on GPU 0 (one GPU on this machine)");
    start("4G,4G");
    gkv_client_t *c;
    ck_assert_int_eq(gkv_client_connect(d.url, &c), 0);
    ck_assert_uint_eq(gkv_client_info(c)->gpus, 2);
    ck_assert_str_eq(gkv_client_info(c)->zero_copy, "cuda-pool-fd");
    size_t sizes[] = {100, 64u << 10, 3u << 20, 64u << 20};
    for (int g = 0; g < 2; g++)
        for (int i = 0; i < 4; i++) {
            char key[32];
            snprintf(key, sizeof(key), "v/%d/%d", g, i);
            set_on(c, key, sizes[i], (uint64_t)(10 * g + i), g);
        }
    for (int g = 0; g < 2; g++)
        for (int i = 0; i < 4; i++) {
            char key[32];
            snprintf(key, sizeof(key), "v/%d/%d", g, i);
            check_on(c, key, sizes[i], (uint64_t)(10 * g + i), g);
        }
    /* Another process writes on device 1 with a kernel (CREATE) and checks through MAP. */
    ck_assert_int_eq(helper(NULL, "write", "zc/1", 256u << 20, 21, "1"), 0);
    ck_assert_int_eq(helper(NULL, "check", "zc/1", 256u << 20, 21, NULL), 0);
    ck_assert_int_ne(helper(NULL, "check", "zc/1", 256u << 20, 22, NULL), 0);
    uint64_t size;
    int gpu;
    ck_assert_int_eq(gkv_locate(c, "zc/1", 4, &size, &gpu), 0);
    ck_assert_int_eq(gpu, 1);
    /* Slab-carved small values of device 1 map too (MAP's copy on that device). */
    ck_assert_int_eq(helper(NULL, "write", "zc/small", 4096, 23, "1"), 0);
    ck_assert_int_eq(helper(NULL, "check", "zc/small", 4096, 23, NULL), 0);
    if (ngpus > 1) {
        /* A process that sees only GPU 0 gets NOTSUP for device 1's values, not a pointer. */
        ck_assert_int_eq(helper("CUDA_VISIBLE_DEVICES=0", "check", "zc/1", 256u << 20, 21, NULL),
                         3);
        ck_assert_int_eq(helper("CUDA_VISIBLE_DEVICES=1", "check", "zc/1", 256u << 20, 21, NULL),
                         0);
    }
    /* gkv_get_to_device of a value on each device into a buffer on GPU 0. */
    void *dbuf;
    ck_assert_int_eq(cudaMalloc(&dbuf, 64u << 20), cudaSuccess);
    uint8_t *host = malloc(64u << 20), *want = malloc(64u << 20);
    for (int g = 0; g < 2; g++) {
        char key[32];
        snprintf(key, sizeof(key), "v/%d/3", g);
        gkv_value_info_t vi;
        ck_assert_int_eq(gkv_get_to_device(c, key, strlen(key), NULL, dbuf, 64u << 20, &vi), 0);
        ck_assert_int_eq(vi.gpu, g);
        ck_assert_int_eq(cudaMemcpy(host, dbuf, 64u << 20, cudaMemcpyDeviceToHost), cudaSuccess);
        harness_fill(want, 64u << 20, (uint64_t)(10 * g + 3));
        ck_assert_int_eq(memcmp(host, want, 64u << 20), 0);
    }
    /* gkv_set_from_device puts the value on the daemon's GPU that holds the buffer. */
    int src = ngpus > 1 ? 1 : 0;
    void *sbuf;
    ck_assert_int_eq(cudaSetDevice(src), cudaSuccess);
    ck_assert_int_eq(cudaMalloc(&sbuf, 1u << 20), cudaSuccess);
    harness_fill(want, 1u << 20, 77);
    ck_assert_int_eq(cudaMemcpy(sbuf, want, 1u << 20, cudaMemcpyHostToDevice), cudaSuccess);
    ck_assert_int_eq(gkv_set_from_device(c, "from/dev", 8, sbuf, 1u << 20, NULL), 0);
    ck_assert_int_eq(gkv_locate(c, "from/dev", 8, &size, &gpu), 0);
    ck_assert_int_eq(gpu, src);
    check_on(c, "from/dev", 1u << 20, 77, src);
    cudaFree(sbuf);
    ck_assert_int_eq(cudaSetDevice(0), cudaSuccess);
    free(host);
    free(want);
    cudaFree(dbuf);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

START_TEST(move_under_readers_and_oom_per_device)
{
    start("2G,6G");
    gkv_client_t *c;
    ck_assert_int_eq(gkv_client_connect(d.url, &c), 0);
    set_on(c, "m", 16u << 20, 31, 0);
    /* The moves start once both readers read, and go on (an even number of them) until the
     * readers have read 100 times more. */
    harness_readers_t rd = {
        .url = d.url, .keys = {"m"}, .sizes = {16u << 20}, .seeds = {31}, .nkeys = 1};
    ck_assert_int_eq(harness_readers_start(&rd, 2), 0);
    int moves = 0, until = atomic_load(&rd.reads) + 100;
    while (moves < 40 || (moves & 1) ||
           (atomic_load(&rd.reads) < until && !atomic_load(&rd.wrong))) {
        ck_assert_int_eq(gkv_move(c, "m", 1, (moves & 1) ? 0 : 1), 1);
        moves++;
    }
    harness_readers_stop(&rd);
    fprintf(stderr, "move under readers: %d moves, %d reads, %d wrong\n", moves,
            atomic_load(&rd.reads), atomic_load(&rd.wrong));
    ck_assert_int_ge(atomic_load(&rd.reads), 100);
    ck_assert_int_eq(atomic_load(&rd.wrong), 0);
    check_on(c, "m", 16u << 20, 31, 0);
    /* OOM on device 0 while device 1 has room; the value is stored where it fits. */
    size_t big = 3ull << 30;
    uint8_t *v = calloc(1, big);
    gkv_set_opts_t on0 = {.gpu = GKV_GPU(0)}, on1 = {.gpu = GKV_GPU(1)};
    ck_assert_int_eq(gkv_set(c, "big", 3, v, big, &on0), GKV_EOOM);
    ck_assert_ptr_nonnull(strstr(gkv_client_errmsg(c), "on device 0"));
    ck_assert_int_eq(gkv_set(c, "big", 3, v, big, &on1), 0);
    ck_assert_int_eq(gkv_move(c, "big", 3, 0), GKV_EOOM);
    /* MOVE's rate against cudaMemcpyPeer's for the same bytes (1 GiB). */
    size_t g = 1ull << 30;
    ck_assert_int_eq(gkv_set(c, "g", 1, v, g, &on0), 0);
    double best = 1e9;
    for (int i = 0; i < 4; i++) {
        double t0 = now_s();
        ck_assert_int_eq(gkv_move(c, "g", 1, (i & 1) ? 0 : 1), 1);
        double t = now_s() - t0;
        best = t < best ? t : best;
    }
    int peer = ngpus > 1 ? 1 : 0, direct = 0;
    if (peer && cudaDeviceCanAccessPeer(&direct, peer, 0) == cudaSuccess && direct) {
        /* The daemon's copies go over the direct path (its pools grant each other access):
         * so does the reference. */
        cudaSetDevice(peer);
        (void)cudaDeviceEnablePeerAccess(0, 0);
        cudaSetDevice(0);
        (void)cudaDeviceEnablePeerAccess(peer, 0);
        (void)cudaGetLastError(); /* "already enabled" is fine */
    }
    void *a, *b;
    ck_assert_int_eq(cudaSetDevice(0), cudaSuccess);
    ck_assert_int_eq(cudaMalloc(&a, g), cudaSuccess);
    ck_assert_int_eq(cudaSetDevice(peer), cudaSuccess);
    ck_assert_int_eq(cudaMalloc(&b, g), cudaSuccess);
    double raw = 1e9;
    for (int i = 0; i < 4; i++) {
        double t0 = now_s();
        ck_assert_int_eq(cudaMemcpyPeer(b, peer, a, 0, g), cudaSuccess);
        ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
        double t = now_s() - t0;
        raw = t < raw ? t : raw;
    }
    /* gkv_get_to_device of the value on device 1 into a buffer on GPU 0: a copy out of the
     * imported pool, peer to peer where the GPUs reach each other. */
    int moved = gkv_move(c, "g", 1, 1);
    ck_assert(moved == 0 || moved == 1);
    double fetch = 1e9;
    for (int i = 0; i < 4; i++) {
        gkv_value_info_t vi;
        double t0 = now_s();
        ck_assert_int_eq(gkv_get_to_device(c, "g", 1, NULL, a, g, &vi), 0);
        double t = now_s() - t0;
        ck_assert_int_eq(vi.gpu, 1);
        fetch = t < fetch ? t : fetch;
    }
    fprintf(stderr, "gkv_get_to_device of 1 GiB on device 1 into GPU 0: %.1f GB/s\n",
            (double)g / fetch / 1e9);
    cudaFree(b);
    cudaSetDevice(0);
    cudaFree(a);
    fprintf(stderr, "MOVE of 1 GiB (%s): %.1f GB/s, cudaMemcpyPeer alone %.1f GB/s%s\n",
            ngpus > 1 ? "GPU 0 <-> GPU 1" : "two pools of GPU 0", (double)g / best / 1e9,
            (double)g / raw / 1e9,
            peer ? (direct ? " (peer access on)" : " (no peer access)") : "");
    free(v);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* Copies of the library between a mapping on one GPU and a buffer on the other, both ways: the
 * other GPU is given access to the imported pool only then (import_cuda.c gkv__cuda_reach), and
 * the bytes arrive whole: gkv_get_to_device of a value on device 1 into a buffer on GPU 0,
 * gkv_set_from_device and gkv_set_many_from_device of a buffer on GPU 0 into values on device 1
 * (and the other way round). */
START_TEST(copies_between_a_mapping_and_another_gpus_buffer)
{
    start("2G,2G");
    gkv_client_t *c;
    ck_assert_int_eq(gkv_client_connect(d.url, &c), 0);
    int other = ngpus > 1 ? 1 : 0; /* the process's ordinal of the daemon's device 1 */
    size_t n = (4u << 20) + 123;
    uint8_t *want = malloc(n), *got = malloc(n);
    for (int dev = 0; dev < 2; dev++) {
        int here = dev ? 0 : other; /* the buffer's GPU: not the value's */
        void *buf;
        ck_assert_int_eq(cudaSetDevice(here), cudaSuccess);
        ck_assert_int_eq(cudaMalloc(&buf, n), cudaSuccess);
        /* Out of a mapping on device dev into the buffer. */
        set_on(c, "x", n, 40 + (uint64_t)dev, dev);
        gkv_value_info_t vi;
        ck_assert_int_eq(gkv_get_to_device(c, "x", 1, NULL, buf, n, &vi), 0);
        ck_assert_int_eq(vi.gpu, dev);
        ck_assert_int_eq(cudaMemcpy(got, buf, n, cudaMemcpyDeviceToHost), cudaSuccess);
        harness_fill(want, n, 40 + (uint64_t)dev);
        ck_assert_msg(memcmp(want, got, n) == 0, "get_to_device from device %d: other bytes", dev);
        /* From the buffer into new values on device dev: one, then two together. */
        harness_fill(want, n, 50 + (uint64_t)dev);
        ck_assert_int_eq(cudaMemcpy(buf, want, n, cudaMemcpyHostToDevice), cudaSuccess);
        gkv_set_opts_t on = {.gpu = GKV_GPU(dev)};
        ck_assert_int_eq(gkv_set_from_device(c, "y", 1, buf, n, &on), 0);
        check_on(c, "y", n, 50 + (uint64_t)dev, dev);
        gkv_set_item_t items[2] = {{.key = "z1", .klen = 2, .dptr = buf, .len = n},
                                   {.key = "z2", .klen = 2, .dptr = buf, .len = n / 2}};
        ck_assert_int_eq(gkv_set_many_from_device(c, items, 2, &on), 0);
        ck_assert_int_eq(items[0].status, 0);
        ck_assert_int_eq(items[1].status, 0);
        check_on(c, "z1", n, 50 + (uint64_t)dev, dev);
        ck_assert_int_eq(gkv_get(c, "z2", 2, NULL, got, n, &vi), 0);
        ck_assert_uint_eq(vi.length, n / 2);
        ck_assert_msg(memcmp(want, got, n / 2) == 0, "set_many from another GPU: other bytes");
        cudaFree(buf);
    }
    free(want);
    free(got);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

int main(void)
{
    if (!gkv_test_gpu_usable()) {
        fprintf(stderr, "no usable GPU: skipped\n");
        return 77;
    }
    if (cudaGetDeviceCount(&ngpus) != cudaSuccess)
        return 77;
    Suite *s = suite_create("gpu_devices");
    TCase *t = tcase_create("cuda");
    tcase_set_timeout(t, 600);
    tcase_add_test(t, values_on_both_devices_reach_other_processes);
    tcase_add_test(t, move_under_readers_and_oom_per_device);
    tcase_add_test(t, copies_between_a_mapping_and_another_gpus_buffer);
    suite_add_tcase(s, t);
    return harness_run_end(gkv_check_run(s));
}
