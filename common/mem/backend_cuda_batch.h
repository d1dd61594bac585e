/* backend_cuda_batch.h: the kernel behind the cuda backend's batched small copies. Included by
 * backend_cuda.c only. */
#ifndef GKV_COMMON_BACKEND_CUDA_BATCH_H
#define GKV_COMMON_BACKEND_CUDA_BATCH_H

#include <cuda_runtime.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Queues on s the copies of one batch: every `in` piece (buf -> device), then every `out` piece
 * (device -> buf). buf is pinned host memory, reachable from the device under the same address,
 * and holds the piece arrays (in, out) too; all of it is borrowed until the work on s is done.
 * One kernel launch per direction. Returns the launch's error. */
cudaError_t gkv_cuda_batch_launch(const gkv_piece_t *in, uint32_t nin, const gkv_piece_t *out,
                                  uint32_t nout, uint8_t *buf, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
