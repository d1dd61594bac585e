/* hostcopy.h: copies of small values in host memory, so that a GET of one is answered without a
 * GPU round trip. A lone 4 KiB GET on the cuda backend waited for a copy batch's launch, DMA and
 * completion (about 15 us) on top of the socket round trip that redis makes alone. The value
 * still lives in backend memory (MAP, eviction and accounting are unchanged); this is a cache in
 * front of it, bounded by a byte budget (--host-copy), its memory shown in INFO. Filled when a
 * SET's value of up to GKV_BATCH_VALUE_MAX arrives (write-through: the bytes are at hand, and
 * copying them costs well under a microsecond) and when a GET has read a whole value from
 * backend memory (read-through: larger values, CREATE/SEAL's).
 *
 * Keyed by entry. An entry's bytes do not change while GET can reach it: a new value moves into
 * a linked entry only when nothing but the index holds it (store.h), and the store drops the copy
 * then (publish), when an entry becomes a spare (gkv_store_entry_reset) and when it is freed. A
 * copy is therefore never stale.
 *
 * Only values of GKV_HOSTCOPY_MIN..max_value bytes are kept. Below, a copy's own overhead is
 * near the value's size (host memory per key is a target of its own) and a batch of small GETs
 * under load already shares one round trip; above, the transfer, not the round trip, is most
 * of a GET. When the budget is spent, copies picked at random make room: that needs no
 * per-entry stamp and costs a probe or two. */
#ifndef GKV_SERVER_HOSTCOPY_H
#define GKV_SERVER_HOSTCOPY_H

#include <stdbool.h>
#include <stdint.h>

#define GKV_HOSTCOPY_MIN 1024u
#define GKV_HOSTCOPY_OVERHEAD 16u /* counted per copy beside its bytes: the allocator's header */

typedef struct {
    const void *key; /* the entry; NULL: empty slot */
    uint8_t *bytes;  /* owned */
    uint64_t len;
} gkv_hostcopy_slot_t;

typedef struct {
    gkv_hostcopy_slot_t *slots; /* open addressing, linear probing; cap a power of two or 0 */
    uint32_t cap, count;
    uint64_t bytes;     /* copies' bytes and overhead, and the table: what the budget limits */
    uint64_t limit;     /* the budget; 0: keep nothing */
    uint64_t max_value; /* largest value kept */
    uint64_t hits;      /* GETs answered from a copy */
    uint64_t fills;     /* copies made */
    uint64_t evictions; /* copies dropped to make room */
    uint64_t rng;
} gkv_hostcopy_t;

/* An empty cache of at most limit bytes for values up to max_value bytes. Allocates nothing. */
void gkv_hostcopy_init(gkv_hostcopy_t *hc, uint64_t limit, uint64_t max_value);
/* Frees every copy and the table. */
void gkv_hostcopy_fini(gkv_hostcopy_t *hc);
/* Keeps a copy of bytes (len bytes, borrowed: the whole value of key) for key, replacing key's
 * copy if any, dropping others at random to stay within the budget. Without host memory, or for
 * a len it does not want, keeps nothing: a copy is an optimisation, never required. */
void gkv_hostcopy_put(gkv_hostcopy_t *hc, const void *key, const void *bytes, uint64_t len);
/* key's copy (borrowed until the next put or drop), *len its size; or NULL. Counts a hit. */
const uint8_t *gkv_hostcopy_get(gkv_hostcopy_t *hc, const void *key, uint64_t *len);
/* Drops key's copy if it has one. */
void gkv_hostcopy_drop(gkv_hostcopy_t *hc, const void *key);

#endif
