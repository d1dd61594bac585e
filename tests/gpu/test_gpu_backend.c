/* test_gpu_backend.c: the cuda backend alone. What zeroed_now vouches for reads zeros: an early
 * frame names memory a cluster pull is still writing only then (PROTOCOL.md, "Early MAPs"), so
 * a client's import of it never shows an earlier value's bytes. Fresh pool memory, which may hold
 * a freed value's bytes, is never vouched for. */
#include <check.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "backend.h"
#include "probe.h"
#define GKV_CHECK_NO_MAIN
#include "../unit/check_main.h"

START_TEST(only_a_kept_allocation_whose_clear_ran_is_vouched_zero)
{
    gkv_backend_config_t bc = {GKV_BACKEND_CUDA, 0, 1ull << 30, 0};
    gkv_backend_t *be;
    char why[256];
    ck_assert_int_eq(gkv_backend_open(&bc, &be, why, sizeof(why)), 0);
    ck_assert_ptr_nonnull(be->ops->zeroed_now);
    int fd; /* the pool's handle goes out first, as at a client's HELLO: then pointers export */
    ck_assert_int_eq(be->ops->share(be, &fd, why, sizeof(why)), 0);
    close(fd);
    const uint64_t n = 4u << 20;
    uint8_t *host = malloc(n);
    ck_assert_ptr_nonnull(host);
    gkv_devptr_t a, b, c;
    ck_assert_int_eq(be->ops->alloc(be, n, GKV_LANE_SHARED, &a), 0);
    ck_assert(!be->ops->zeroed_now(be, a, n)); /* fresh from the pool */
    /* Exported as a MAP's reply exports it: only exported allocations are kept when freed. */
    uint8_t data[GKV_EXPORT_MAX];
    size_t len;
    ck_assert_int_eq(be->ops->export_ptr(be, a, n, data, sizeof(data), &len), 0);
    ck_assert_int_eq(cudaMemset((void *)(uintptr_t)a.v, 0xa5, n), cudaSuccess);
    ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
    be->ops->free(be, a, n, GKV_LANE_SHARED); /* an exported allocation: kept, cleared */
    ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
    ck_assert_int_eq(be->ops->alloc(be, n, GKV_LANE_SHARED, &b), 0);
    ck_assert_uint_eq(b.v, a.v); /* the kept one */
    ck_assert(be->ops->zeroed_now(be, b, n));
    ck_assert_int_eq(cudaMemcpy(host, (void *)(uintptr_t)b.v, n, cudaMemcpyDeviceToHost),
                     cudaSuccess);
    for (uint64_t i = 0; i < n; i++)
        if (host[i])
            ck_abort_msg("byte %llu of vouched memory is %u", (unsigned long long)i, host[i]);
    /* Only the allocation taken last is vouched for: another one since, b no longer. */
    ck_assert_int_eq(be->ops->alloc(be, n, GKV_LANE_SHARED, &c), 0);
    ck_assert(!be->ops->zeroed_now(be, c, n));
    ck_assert(!be->ops->zeroed_now(be, b, n));
    be->ops->free(be, b, n, GKV_LANE_SHARED);
    be->ops->free(be, c, n, GKV_LANE_SHARED);
    be->ops->close(be);
    free(host);
}
END_TEST

int main(void)
{
    if (!gkv_test_gpu_usable()) {
        fprintf(stderr, "no usable GPU: skipped\n");
        return 77;
    }
    Suite *s = suite_create("gpu_backend");
    TCase *t = tcase_create("cuda backend");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, only_a_kept_allocation_whose_clear_ran_is_vouched_zero);
    suite_add_tcase(s, t);
    return gkv_check_run(s);
}
