/* test_gpu_memory.c: values really live in device memory: while gpukvd (cuda backend) holds
 * 4 GiB of values, the device's used memory seen from this process has grown by >= 4 GiB, and
 * the values read back intact. Also prints 1 GiB set/get throughput (not asserted). */
#include <check.h>
#include <gpukv/gpukv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "probe.h"
#define GKV_CHECK_NO_MAIN
#include "../unit/check_main.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

START_TEST(four_gib_of_values_occupy_device_memory)
{
    static const char *const args[] = {"--maxmemory", "8G", NULL};
    const size_t gib = 1ull << 30;
    size_t free0, free1, total;
    ck_assert_int_eq(gkv_test_gpu_meminfo(&free0, &total), 0);
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, args), 0);
    gkv_client_t *c;
    ck_assert_int_eq(gkv_client_connect(d.url, &c), 0);
    ck_assert_str_eq(gkv_client_info(c)->backend, "cuda");
    ck_assert_str_ne(gkv_client_info(c)->gpu_uuid, "");
    uint8_t *v = malloc(gib), *got = malloc(gib);
    ck_assert_ptr_nonnull(v);
    ck_assert_ptr_nonnull(got);
    uint64_t sums[4];
    char key[8];
    for (int i = 0; i < 4; i++) {
        harness_fill(v, gib, (uint64_t)i + 1);
        sums[i] = harness_fnv(HARNESS_FNV_INIT, v, gib);
        snprintf(key, sizeof(key), "g%d", i);
        double t0 = now_s();
        ck_assert_int_eq(gkv_set(c, key, strlen(key), v, gib, NULL), 0);
        fprintf(stderr, "cuda: set 1 GiB over unix socket: %.2f GB/s\n",
                (double)gib / (now_s() - t0) / 1e9);
    }
    ck_assert_int_eq(gkv_test_gpu_meminfo(&free1, &total), 0);
    fprintf(stderr, "cuda: device free %zu MiB -> %zu MiB (%zu MiB used by 4 GiB of values)\n",
            free0 >> 20, free1 >> 20, (free0 - free1) >> 20);
    ck_assert_uint_ge(free0 - free1, 4 * gib);
    gkv_value_info_t vi;
    for (int i = 0; i < 4; i++) {
        snprintf(key, sizeof(key), "g%d", i);
        memset(got, 0, gib);
        double t0 = now_s();
        ck_assert_int_eq(gkv_get(c, key, strlen(key), NULL, got, gib, &vi), 0);
        fprintf(stderr, "cuda: get 1 GiB over unix socket: %.2f GB/s\n",
                (double)gib / (now_s() - t0) / 1e9);
        ck_assert_uint_eq(harness_fnv(HARNESS_FNV_INIT, got, gib), sums[i]);
    }
    gkv_client_close(c);
    free(v);
    free(got);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

int main(void)
{
    if (!gkv_test_gpu_usable()) {
        fprintf(stderr, "no usable GPU: skipped\n");
        return 77;
    }
    setenv("GKV_TEST_BACKEND", "cuda", 1);
    Suite *s = suite_create("gpu_memory");
    TCase *t = tcase_create("device memory");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, four_gib_of_values_occupy_device_memory);
    suite_add_tcase(s, t);
    return harness_run_end(gkv_check_run_as(s, CK_NOFORK)); /* CUDA does not survive fork */
}
