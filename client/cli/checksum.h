/* checksum.h: a checksum that a GPU computes as easily as a CPU, so that bytes seen through a
 * mapping on the device can be compared with bytes read on the host.
 *   sum over 8-byte little-endian words w_i (the last one zero-padded) of
 *   (w_i XOR (i * 0x9E3779B97F4A7C15)), modulo 2^64. */
#ifndef GKV_CLI_CHECKSUM_H
#define GKV_CLI_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The checksum of len bytes at p (host memory, borrowed). */
uint64_t gkv_checksum_host(const void *p, size_t len);
/* The same, computed by a kernel on device memory (borrowed); 0 or -1 (no CUDA, or a CUDA
 * error: why, cap bytes, says which). */
int gkv_checksum_device(const void *dptr, size_t len, uint64_t *out, char *why, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
