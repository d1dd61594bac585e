/* zc_kernels.h: kernels the zero-copy GPU tests and benchmarks run on mapped memory. */
#ifndef GKV_TESTS_ZC_KERNELS_H
#define GKV_TESTS_ZC_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Makes device dev current for the kernels after it (a mapping's `device`: a kernel on another
 * GPU reaches a mapping only with GPUKV_PEER_MAPPINGS=1). Returns 0 or -1. */
int zc_use_device(int dev);
/* Writes the pattern of seed over len bytes of device memory (len a multiple of 8) and waits.
 * Returns 0 or -1. */
int zc_fill_device(void *dptr, size_t len, uint64_t seed);
/* The same pattern in host memory. */
void zc_fill_host(void *p, size_t len, uint64_t seed);
/* Reads len bytes of device memory with 16-byte loads, n times; returns the seconds one read
 * took (median, timed with events), or -1. */
double zc_read_seconds(const void *dptr, size_t len, int n);

/* The hand-off benchmark's kernels (bench/handoff_bench.c), queued on stream (a cudaStream_t),
 * not waited for. Fills len bytes (a multiple of 8, at least 8) with seed's pattern, then
 * writes the GPU's global timer (ns) into the first 8 bytes: when the producer's work ended.
 * 0 or -1. */
int zc_fill_stamp_async(void *dptr, size_t len, uint64_t seed, void *stream);
/* Stores into out[0] (device or host-mapped memory, three words) the global timer minus the
 * stamp in dptr's first 8 bytes: the age of the value when the consumer first read it, and
 * into out[2] the global timer then; then reads len bytes (a multiple of 16) of dptr (out[1]
 * is the reader's sink). 0 or -1. */
int zc_read_age_async(const void *dptr, size_t len, uint64_t *out, void *stream);
/* A kernel that runs for ns nanoseconds (the GPU's global timer), queued on stream: a
 * producer's work of that length (bench/fence_watch.c). 0 or -1. */
int zc_spin_async(uint64_t ns, void *stream);
/* A kernel that stores v at dev (a mapped host page's device address) once the stream's work
 * before it is done. */
int zc_store_async(void *dev, uint64_t v, void *stream);
/* A kernel that watches the byte at dptr for ns nanoseconds, queued on stream: out (device
 * memory, n + 1 ints) gets each byte it saw change to, in order, then their count in out[n].
 * 0 or -1. */
int zc_watch_async(const void *dptr, int *out, int n, uint64_t ns, void *stream);

#ifdef __cplusplus
}
#endif
#endif
