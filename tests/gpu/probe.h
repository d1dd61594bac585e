/* probe.h: whether this machine has a GPU the tests can use. */
#ifndef GKV_TESTS_PROBE_H
#define GKV_TESTS_PROBE_H

#include <stddef.h>

/* 1 when a CUDA device is usable (driver and device present), else 0. */
int gkv_test_gpu_usable(void);
/* Free and total device memory of device 0 in bytes; 0 on success. */
int gkv_test_gpu_meminfo(size_t *free_b, size_t *total_b);

/* Copies len bytes of device (or host) memory at src to host memory dst; 0 on success. */
int gkv_test_gpu_read(void *dst, const void *src, size_t len);

#endif
