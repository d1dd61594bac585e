/* backend_cuda_d2d.h: a copy within one GPU's memory by its SMs rather than a copy engine.
 * The transfer arenas' copies (plane.c) run beside NIXL's writes over NVLink, which the copy
 * engines carry; a kernel leaves them to the link. Included by backend_cuda_copy.c only. */
#ifndef GKV_COMMON_BACKEND_CUDA_D2D_H
#define GKV_COMMON_BACKEND_CUDA_D2D_H

#include <stddef.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Queues on s a copy of len bytes from src to dst (device memory of the stream's device, not
 * overlapping). Both must be 16-byte aligned (else returns cudaErrorInvalidValue and queues
 * nothing: the caller uses cudaMemcpyAsync). Returns the launch's error. */
cudaError_t gkv_cuda_d2d_launch(void *dst, const void *src, size_t len, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
