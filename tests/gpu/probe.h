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
/* Copies len bytes of host memory at src to device (or host) memory dst; 0 on success. */
int gkv_test_gpu_write(void *dst, const void *src, size_t len);
/* A new stream (NULL when there is no GPU). */
void *gkv_test_stream_new(void);
void gkv_test_stream_free(void *stream);
/* Enqueues on stream: a host function that sleeps delay_ms, then a copy of len bytes of src
 * (host memory, kept by the caller until the stream is done) to dst. 0 on success. */
int gkv_test_stream_write_later(void *stream, int delay_ms, void *dst, const void *src,
                                size_t len);

#endif
