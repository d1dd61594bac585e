/* backend_cuda_adopt.h: the cuda backend's side of adopting a predecessor's memory (server/
 * fdstore.h): its pool imported from the descriptor the fd store kept, each allocation the
 * journal names imported by its export data (once), and values copied device to device on the
 * adopting backend's shared stream into memory of its own. CUDA types stay in the .c files. */
#ifndef GKV_COMMON_BACKEND_CUDA_ADOPT_H
#define GKV_COMMON_BACKEND_CUDA_ADOPT_H

#include <stddef.h>
#include <stdint.h>

/* Imports the pool fd (borrowed) on CUDA device `device`. *src is the caller's until
 * gkv__cuda_adopt_close. Returns 0 or GKV_EIO with why. */
int gkv__cuda_adopt_open(int device, int fd, void **src, char *why, size_t cap);
/* Queues on stream (a cudaStream_t) a copy of len bytes at the predecessor's address addr,
 * inside its allocation at base (base_size bytes, export data exp), to dst. Returns 0,
 * GKV_EINVAL (the range is outside the allocation, or exp is not export data) or GKV_EIO. */
int gkv__cuda_adopt_copy(void *src, void *stream, uint64_t base, uint64_t base_size,
                         const uint8_t *exp, size_t exp_len, uint64_t addr, uint64_t len,
                         uint64_t dst);
/* Waits for stream, frees the imports and the imported pool. Returns 0 or GKV_EIO (a copy
 * failed). */
int gkv__cuda_adopt_close(void *src, void *stream);

#endif
