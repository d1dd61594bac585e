/* slab.h: small values carved from large backend allocations, as memcached carves items: size
 * classes growing by about 1.25x from 64 bytes to GKV_SLAB_MAX, 1 MiB pages cut into equal
 * slots, pages taken from 64 MiB regions that the backend allocates through a callback. The
 * bookkeeping lives in host memory: a bit per slot, a few words per page, a region table. One
 * allocation and free per small value would cost the cuda pool's driver call and ~1 KiB of
 * host-side tracking each; a slot costs a bit. Not thread-safe. */
#ifndef GKV_COMMON_SLAB_H
#define GKV_COMMON_SLAB_H

#include <stdbool.h>
#include <stdint.h>

#define GKV_SLAB_MAX (16u << 10)    /* largest value carved from slabs */
#define GKV_SLAB_PAGE (1u << 20)    /* bytes of one page: all slots of one class */
#define GKV_SLAB_REGION (64u << 20) /* bytes the backend allocates at a time: 64 pages */

typedef struct gkv_slab gkv_slab_t;

/* The backend's side: reserve a region of size bytes (*base: its address, 16-byte aligned),
 * or return one. region_new returns 0 or a negative code (GKV_EOOM when memory is full). */
typedef struct {
    int (*region_new)(void *ctx, uint64_t size, uint64_t *base);
    void (*region_free)(void *ctx, uint64_t base, uint64_t size);
    void *ctx;
} gkv_slab_backing_t;

/* An empty allocator over backing (copied). *out is the caller's: gkv_slab_free_all. Returns 0
 * or GKV_ENOMEM. */
int gkv_slab_alloc_init(gkv_slab_t **out, const gkv_slab_backing_t *backing);
/* Returns every region to the backing and frees the allocator. NULL is allowed. */
void gkv_slab_free_all(gkv_slab_t *s);
/* A slot for size bytes (1..GKV_SLAB_MAX), 16-byte aligned, in *addr. Returns 0, GKV_EINVAL,
 * GKV_EOOM (the backing refused a region) or GKV_ENOMEM (host memory). */
int gkv_slab_get(gkv_slab_t *s, uint64_t size, uint64_t *addr);
/* Gives back a slot that gkv_slab_get returned for the same size. A region whose pages are all
 * free goes back to the backing, except the last one left. */
void gkv_slab_put(gkv_slab_t *s, uint64_t addr, uint64_t size);
/* Bytes the backend keeps with a region (its export data, for a successor process to import
 * it: server/fdstore.h): len 0 until the backend fills it; it goes with the region. */
typedef struct {
    uint8_t data[64];
    uint32_t len;
} gkv_slab_note_t;
/* The region addr lies in: true with its base address and its note (valid while the region
 * is held), or false. */
bool gkv_slab_region(const gkv_slab_t *s, uint64_t addr, uint64_t *base, gkv_slab_note_t **note);
/* True when addr lies in one of s's regions. */
bool gkv_slab_owns(const gkv_slab_t *s, uint64_t addr);
/* Bytes of regions held, and bytes of slots handed out (their class sizes). */
uint64_t gkv_slab_held(const gkv_slab_t *s);
uint64_t gkv_slab_used(const gkv_slab_t *s);

#endif
