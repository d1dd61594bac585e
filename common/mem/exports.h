/* exports.h: exported allocations, their export data, and freed ones kept for reuse.
 *
 * Exporting a pool pointer to another process costs a driver call that grows with the
 * allocation (on the H200: 12 us at 4 KiB, 22 us at 64 MiB, 315 us at 1 GiB; bench/zc_probe),
 * while a process imports an allocation it has imported before in about a microsecond. So the
 * cuda backend remembers the export data of every allocation it exported (this table is the one
 * record of it: the store keeps none) and, when one is freed, holds it (up to a byte cap, oldest
 * given back first) for the next allocation of exactly its size: a value replaced by one of the
 * same size through SET (fixed-size chunks and tensors, read through MAP) then costs no
 * allocation and no export. docs/zero-copy.md places this among the other reuse layers.
 * CUDA-free and not thread-safe; addresses are opaque numbers here. */
#ifndef GKV_COMMON_EXPORTS_H
#define GKV_COMMON_EXPORTS_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"

typedef struct gkv_exports gkv_exports_t;

/* Gives memory back for good (the backend's free). */
typedef void (*gkv_exports_release_fn)(void *ctx, uint64_t addr, uint64_t size);

/* An empty table keeping at most cap bytes of freed allocations; release (with ctx) gives
 * back what it stops keeping. *out is the caller's: gkv_exports_fini. Returns 0 or GKV_ENOMEM. */
int gkv_exports_init(gkv_exports_t **out, uint64_t cap, gkv_exports_release_fn release, void *ctx);
/* Gives back everything kept and frees the table; records of live allocations are dropped
 * (their memory is the caller's). NULL is allowed. */
void gkv_exports_fini(gkv_exports_t *k);

/* Remembers the export data (len <= GKV_EXPORT_MAX bytes) of the live allocation at addr.
 * Returns 0 or GKV_ENOMEM (then nothing is remembered: harmless). */
int gkv_exports_add(gkv_exports_t *k, uint64_t addr, uint64_t size, const uint8_t *data,
                      uint32_t len);
/* The remembered export data of the live allocation at addr: true with *data (valid while the
 * allocation lives) and *len, or false. */
bool gkv_exports_find(const gkv_exports_t *k, uint64_t addr, const uint8_t **data,
                          uint32_t *len);

/* The allocation at addr is freed. Returns true when it was exported and is now kept (the
 * caller must not free it); false when the caller frees it as usual. Keeping it may give back
 * older kept allocations to stay under the cap. */
bool gkv_exports_freed(gkv_exports_t *k, uint64_t addr);
/* A kept allocation of exactly size bytes, live again (its export data still remembered):
 * true with *addr, or false. The one kept longest: the cuda backend clears an allocation as it
 * keeps it, so the oldest is the likeliest to be clear already. */
bool gkv_exports_take(gkv_exports_t *k, uint64_t size, uint64_t *addr);
/* A number the caller keeps with the allocation at addr (the cuda backend: which clear of its
 * kept allocations cleared it), and the one kept (0 if none, or no such allocation). */
void gkv_exports_tag(gkv_exports_t *k, uint64_t addr, uint64_t tag);
uint64_t gkv_exports_tag_of(const gkv_exports_t *k, uint64_t addr);
/* Whether an allocation of exactly size bytes is kept now; how many are. */
bool gkv_exports_holds(const gkv_exports_t *k, uint64_t size);
unsigned gkv_exports_count(const gkv_exports_t *k, uint64_t size);
/* Gives back every kept allocation (before an allocation is retried after OOM). Returns how
 * many bytes it gave back. */
uint64_t gkv_exports_drain(gkv_exports_t *k);

/* Held imports (PROTOCOL.md "Held imports"): a client process keeps its import of the
 * allocation at addr past its lease, so the allocation is never given back while held: kept
 * when freed whatever the cap, passed over by the cap's trimming and by drain (it may still be
 * taken for another value: the holder reads it only under a lease). delta +1 / -1; an
 * allocation no longer held that is kept past the cap is given back. False (nothing changed)
 * when addr is no remembered export (its holder could not have imported it here). */
bool gkv_exports_hold(gkv_exports_t *k, uint64_t addr, int delta);
/* Holds now, summed over the allocations. */
uint64_t gkv_exports_holds_now(const gkv_exports_t *k);

/* Bytes kept now; allocations served from what was kept, so far. */
uint64_t gkv_exports_bytes(const gkv_exports_t *k);
uint64_t gkv_exports_reuses(const gkv_exports_t *k);

#endif
