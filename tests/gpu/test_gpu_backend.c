/* test_gpu_backend.c: the cuda backend alone. What zeroed_now vouches for reads zeros: an early
 * frame names memory a cluster pull is still writing only then (PROTOCOL.md, "Early MAPs"), so
 * a client's import of it never shows an earlier value's bytes. Fresh pool memory, which may hold
 * a freed value's bytes, is never vouched for; a pull clears it and waits (shared_wait) first.
 * A mark of the shared lane (shared_mark) orders a pull's wait and copies after the clears
 * queued before it. A copy out of a value into a transfer arena waits for the batches started
 * before it. --prealloc's memory is taken at open. */
#include <check.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "probe.h"
#define GKV_CHECK_NO_MAIN
#include "../unit/check_main.h"

/* The cuda backend of device 0 with a limit of limit bytes and --prealloc's prealloc. */
static gkv_backend_t *open_cuda(uint64_t limit, uint64_t prealloc)
{
    gkv_backend_config_t bc = {GKV_BACKEND_CUDA, 0, limit, 0, prealloc};
    gkv_backend_t *be;
    char why[256];
    ck_assert_msg(gkv_backend_open(&bc, &be, why, sizeof(why)) == 0, "%s", why);
    return be;
}

START_TEST(only_a_kept_allocation_whose_clear_ran_is_vouched_zero)
{
    gkv_backend_t *be = open_cuda(1ull << 30, 0);
    char why[256];
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

/* shared_wait, from a worker thread as a cluster pull calls it, returns only after the clear
 * queued on the shared lane before it (or before its mark) has run: the memory then reads zeros
 * (read on the default stream, which does not wait for the backend's non-blocking streams). */
typedef struct {
    gkv_backend_t *be;
    gkv_devptr_t p;
    uint64_t n;
    void *mark;
    int rc;
    unsigned nonzero;
} wait_arg_t;

static void *wait_then_read(void *arg)
{
    wait_arg_t *w = arg;
    w->rc = w->be->ops->shared_wait(w->be, w->mark);
    if (cudaSetDevice(0) != cudaSuccess)
        return NULL;
    /* The end of the memory: cleared last. */
    enum { TAIL = 1 << 20 };
    uint8_t *host = malloc(TAIL);
    if (!host ||
        cudaMemcpy(host, (void *)(uintptr_t)(w->p.v + w->n - TAIL), TAIL,
                   cudaMemcpyDeviceToHost) != cudaSuccess) {
        w->nonzero = ~0u;
        free(host);
        return NULL;
    }
    for (unsigned i = 0; i < TAIL; i++)
        w->nonzero += host[i] != 0;
    free(host);
    return NULL;
}

START_TEST(shared_wait_sees_a_queued_clear_done)
{
    gkv_backend_t *be = open_cuda(2ull << 30, 0);
    ck_assert_ptr_nonnull(be->ops->shared_wait);
    ck_assert_ptr_nonnull(be->ops->shared_mark);
    for (int round = 0; round < 8; round++) {
        wait_arg_t w = {.be = be, .n = 512ull << 20};
        ck_assert_int_eq(be->ops->alloc(be, w.n, GKV_LANE_SHARED, &w.p), 0);
        ck_assert_int_eq(cudaMemset((void *)(uintptr_t)w.p.v, 0x5a, w.n), cudaSuccess);
        ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
        /* Several clears queued (each ~0.2 ms): a wait that did not wait reads 0x5a. Odd
         * rounds wait for a mark taken after them (as a pull does), even ones for the lane. */
        for (int i = 0; i < 4; i++)
            ck_assert_int_eq(be->ops->zero_shared(be, w.p, w.n), 0);
        if (round & 1)
            ck_assert_int_eq(be->ops->shared_mark(be, &w.mark), 0);
        pthread_t th;
        ck_assert_int_eq(pthread_create(&th, NULL, wait_then_read, &w), 0);
        pthread_join(th, NULL);
        ck_assert_int_eq(w.rc, 0);
        ck_assert_msg(w.nonzero == 0, "round %d: %u bytes not cleared after shared_wait", round,
                      w.nonzero);
        be->ops->mark_free(be, w.mark);
        be->ops->free(be, w.p, w.n, GKV_LANE_SHARED);
    }
    be->ops->close(be);
}
END_TEST

/* A copy into a value given a mark comes after the clears queued before the mark: had it run
 * first, the clears would have zeroed what it wrote. Later work on the lane (another value's
 * clears, queued after the mark) does not hold it back, and neither is disturbed. */
START_TEST(a_copy_after_a_mark_lands_after_the_clears_before_it)
{
    gkv_backend_t *be = open_cuda(3ull << 30, 0);
    const uint64_t n = 256ull << 20, tail = 1u << 20;
    void *arena;
    ck_assert_int_eq(be->ops->arena_alloc(be, n, &arena), 0);
    ck_assert_int_eq(cudaMemset(arena, 0x33, n), cudaSuccess);
    uint8_t *host = malloc(tail);
    ck_assert_ptr_nonnull(host);
    for (int round = 0; round < 8; round++) {
        gkv_devptr_t v, other;
        ck_assert_int_eq(be->ops->alloc(be, n, GKV_LANE_SHARED, &v), 0);
        ck_assert_int_eq(be->ops->alloc(be, 4 * n, GKV_LANE_SHARED, &other), 0);
        ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
        for (int i = 0; i < 4; i++)
            ck_assert_int_eq(be->ops->zero_shared(be, v, n), 0);
        void *mark = NULL;
        ck_assert_int_eq(be->ops->shared_mark(be, &mark), 0);
        ck_assert_ptr_nonnull(mark);
        ck_assert_int_eq(be->ops->zero_shared(be, other, 4 * n), 0);
        ck_assert_int_eq(be->ops->arena_copy(be, v, 0, arena, n, 1, mark), 0);
        ck_assert_int_eq(be->ops->shared_wait(be, NULL), 0); /* the later clear too */
        ck_assert_int_eq(
            cudaMemcpy(host, (void *)(uintptr_t)(v.v + n - tail), tail, cudaMemcpyDeviceToHost),
            cudaSuccess);
        unsigned wrong = 0;
        for (uint64_t i = 0; i < tail; i++)
            wrong += host[i] != 0x33;
        ck_assert_msg(wrong == 0, "round %d: %u bytes of the copy lost to the clears", round,
                      wrong);
        ck_assert_int_eq(cudaMemcpy(host, (void *)(uintptr_t)(other.v + 4 * n - tail), tail,
                                    cudaMemcpyDeviceToHost),
                         cudaSuccess);
        for (uint64_t i = 0; i < tail; i++)
            wrong += host[i] != 0;
        ck_assert_msg(wrong == 0, "round %d: the later clear left %u bytes", round, wrong);
        be->ops->mark_free(be, mark);
        be->ops->free(be, v, n, GKV_LANE_SHARED);
        be->ops->free(be, other, 4 * n, GKV_LANE_SHARED);
    }
    free(host);
    be->ops->arena_free(be, arena, n);
    be->ops->close(be);
}
END_TEST

static void batch_done(gkv_copy_t *op, int status)
{
    atomic_store((_Atomic int *)op->arg, status == 0 ? 1 : -1); /* any thread */
}

/* A copy out of a value into a transfer arena (an owner's STAGE) waits for the batches started
 * before it: a SET's last bytes may still be in one when its value is published and a STAGE
 * reads it (server/xfer/batch.h). The batch here writes 64 MiB from pinned host memory (about
 * a millisecond); a copy that did not wait reads the value's older bytes. */
START_TEST(a_copy_out_waits_for_the_batches_started_before_it)
{
    gkv_backend_t *be = open_cuda(1ull << 30, 0);
    const uint64_t n = 64ull << 20, tail = 1u << 20;
    void *arena;
    ck_assert_int_eq(be->ops->arena_alloc(be, n, &arena), 0);
    uint8_t *stage = be->ops->staging_alloc(be, (size_t)n);
    uint8_t *host = malloc(tail);
    ck_assert_ptr_nonnull(stage);
    ck_assert_ptr_nonnull(host);
    for (int round = 0; round < 8; round++) {
        gkv_devptr_t v;
        ck_assert_int_eq(be->ops->alloc(be, n, GKV_LANE_BATCH, &v), 0);
        ck_assert_int_eq(cudaMemset((void *)(uintptr_t)v.v, 0x11, n), cudaSuccess);
        ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
        uint8_t want = (uint8_t)(0x70 + round);
        memset(stage, want, n);
        _Atomic int done = 0;
        gkv_copy_t op = {.done = batch_done, .arg = &done};
        gkv_bulk_t bulk = {v.v, stage, n};
        ck_assert_int_eq(be->ops->copy_batch(be, stage, NULL, 0, NULL, 0, &bulk, 1, &op), 0);
        ck_assert_int_eq(be->ops->arena_copy(be, v, 0, arena, n, 0, NULL), 0);
        ck_assert_int_eq(
            cudaMemcpy(host, (uint8_t *)arena + n - tail, tail, cudaMemcpyDeviceToHost),
            cudaSuccess);
        unsigned wrong = 0;
        for (uint64_t i = 0; i < tail; i++)
            wrong += host[i] != want;
        ck_assert_msg(wrong == 0, "round %d: %u bytes copied out before the batch wrote them",
                      round, wrong);
        be->ops->batch_wait(be);
        while (!atomic_load(&done))
            gkv_backend_poll(be);
        ck_assert_int_eq(atomic_load(&done), 1);
        be->ops->free(be, v, n, GKV_LANE_BATCH);
    }
    free(host);
    be->ops->staging_free(be, stage, (size_t)n);
    be->ops->arena_free(be, arena, n);
    be->ops->close(be);
}
END_TEST

/* --prealloc: the pool takes the memory at open (the device's free memory drops by it), and a
 * value it covers then takes nothing more from the device. */
START_TEST(prealloc_takes_the_memory_at_open)
{
    size_t free0, free1, free2, total;
    ck_assert_int_eq(cudaSetDevice(0), cudaSuccess);
    ck_assert_int_eq(cudaMemGetInfo(&free0, &total), cudaSuccess);
    const uint64_t pre = 1ull << 30;
    gkv_backend_t *be = open_cuda(2ull << 30, pre);
    ck_assert_int_eq(cudaMemGetInfo(&free1, &total), cudaSuccess);
    ck_assert_msg(free0 >= free1 + pre, "free memory %zu before, %zu after a 1 GiB prealloc",
                  free0, free1);
    gkv_devptr_t p;
    const uint64_t n = 256ull << 20;
    ck_assert_int_eq(be->ops->alloc(be, n, GKV_LANE_SHARED, &p), 0);
    ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
    ck_assert_int_eq(cudaMemGetInfo(&free2, &total), cudaSuccess);
    /* Without the prealloc it takes 256 MiB; some slack for what the runtime loads lazily. */
    ck_assert_msg(free2 + (16u << 20) > free1, "a 256 MiB value took %zd bytes beyond the prealloc",
                  (ssize_t)free1 - (ssize_t)free2);
    be->ops->free(be, p, n, GKV_LANE_SHARED);
    be->ops->close(be);
    /* More than the device has: refused with the reason. */
    gkv_backend_config_t big = {GKV_BACKEND_CUDA, 0, total * 2, 0, total * 2};
    char why[256];
    ck_assert_int_ne(gkv_backend_open(&big, &be, why, sizeof(why)), 0);
    ck_assert_msg(strstr(why, "--prealloc") != NULL, "%s", why);
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
    tcase_add_test(t, shared_wait_sees_a_queued_clear_done);
    tcase_add_test(t, a_copy_after_a_mark_lands_after_the_clears_before_it);
    tcase_add_test(t, a_copy_out_waits_for_the_batches_started_before_it);
    tcase_add_test(t, prealloc_takes_the_memory_at_open);
    suite_add_tcase(s, t);
    return gkv_check_run(s);
}
