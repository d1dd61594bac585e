/* zc_kernels.h: kernels the zero-copy GPU tests and benchmarks run on mapped memory. */
#ifndef GKV_TESTS_ZC_KERNELS_H
#define GKV_TESTS_ZC_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Writes the pattern of seed over len bytes of device memory (len a multiple of 8) and waits.
 * Returns 0 or -1. */
int zc_fill_device(void *dptr, size_t len, uint64_t seed);
/* The same pattern in host memory. */
void zc_fill_host(void *p, size_t len, uint64_t seed);
/* Reads len bytes of device memory with 16-byte loads, n times; returns the seconds one read
 * took (median, timed with events), or -1. */
double zc_read_seconds(const void *dptr, size_t len, int n);

#ifdef __cplusplus
}
#endif
#endif
