/* arena.h: an allocator of byte ranges inside one fixed-size region, with its bookkeeping kept
 * outside the region (the region is shared with other processes and cannot be trusted). */
#ifndef GKV_COMMON_ARENA_H
#define GKV_COMMON_ARENA_H

#include <stdint.h>

typedef struct gkv_arena gkv_arena_t;

/* Creates an allocator for offsets [0, capacity), each allocation aligned to align bytes (a
 * power of two). *out is owned by the caller: gkv_arena_free_all. Returns 0, GKV_EINVAL or
 * GKV_ENOMEM. */
int gkv_arena_alloc_init(gkv_arena_t **out, uint64_t capacity, uint64_t align);
/* Frees the allocator itself (not the region). NULL is allowed. */
void gkv_arena_free_all(gkv_arena_t *a);
/* Reserves size (> 0) bytes and stores their offset in *off. Best fit within a size class.
 * Returns 0, GKV_EOOM when no free range is large enough, or GKV_ENOMEM. */
int gkv_arena_alloc(gkv_arena_t *a, uint64_t size, uint64_t *off);
/* Reserves [off, off + size) itself (a reload: ranges that a file's records already hold),
 * which must lie in the free range that ends at the arena's end: reservations go in ascending
 * order before any gkv_arena_alloc. Freed like an allocation. Returns 0, GKV_EINVAL (not
 * aligned, or not in that range) or GKV_ENOMEM. */
int gkv_arena_reserve(gkv_arena_t *a, uint64_t off, uint64_t size);
/* Returns a range that gkv_arena_alloc gave out, with the same size; neighbours merge. */
void gkv_arena_free(gkv_arena_t *a, uint64_t off, uint64_t size);
/* Bytes handed out (after alignment), and the number of free ranges (fragmentation). */
uint64_t gkv_arena_used(const gkv_arena_t *a);
uint64_t gkv_arena_free_ranges(const gkv_arena_t *a);

#endif
