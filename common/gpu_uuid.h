/* gpu_uuid.h: a GPU's UUID as nvidia-smi and CUDA_VISIBLE_DEVICES write it ("GPU-xxxxxxxx-..."),
 * the name by which the daemon and its clients agree on a device. */
#ifndef GKV_COMMON_GPU_UUID_H
#define GKV_COMMON_GPU_UUID_H

#include <stddef.h>

/* Writes the 16 bytes at u as "GPU-8-4-4-4-12" hex into buf (cap >= 41 bytes, the caller's). */
void gkv_gpu_uuid_format(const unsigned char *u, char *buf, size_t cap);

#endif
