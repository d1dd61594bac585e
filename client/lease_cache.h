/* lease_cache.h: one connection's lease cache, and the one place that decides when a lease
 * ends (docs/zero-copy.md tells the whole reuse model).
 *
 * The cache keeps, after the caller is done with them, up to `slots` leases with their imports:
 * read leases of values up to max_value bytes after gkv_unmap (the next MAP of the key offers
 * the lease and the server names it again while the key still has that value: one round trip,
 * no import), of what gkv_seal published (any size), and spares (writable leases the server
 * made of such a read lease once the value was replaced; gkv_create of the same key and size
 * takes one without a request). At most GKV_CACHE_PER_KEY entries per key, max_bytes of values
 * in all (0: no total). What the cache lets go is handed to an end function (the caller frees
 * the import, then sends one RELEASE for all of them).
 *
 * It also queues ends asked for where no request may be made (gkv__end_later: the Python
 * binding's mappings deallocated by the garbage collector, perhaps while another thread is in a
 * call on the same connection): they are ended before the next call that is not a mapping call,
 * by a mapping call once GKV_LATER_MAX of them or GKV_LATER_BYTES are waiting, and at close.
 *
 * The cache holds pointers only: it never frees a mapping, never sends anything. A mapping's
 * key is borrowed (it lives as long as the mapping). Not thread-safe, except the queue of later
 * ends, which has a lock of its own. tests/unit/test_lease_cache.c drives it alone. */
#ifndef GKV_CLIENT_LEASE_CACHE_H
#define GKV_CLIENT_LEASE_CACHE_H

#include <gpukv/gpukv.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GKV_CACHE_SLOTS 8 /* the defaults (gkv_client_set_lease_cache changes them) */
#define GKV_CACHE_SLOTS_MAX 4096
#define GKV_CACHE_PER_KEY 2 /* a key's value and its spare */
#define GKV_CACHE_MAX_BYTES (1u << 20)
#define GKV_LATER_MAX 32 /* later ends waiting before a mapping call ends them */
#define GKV_LATER_BYTES (64u << 20)

typedef struct {
    gkv_mapping_t *m;
    const void *key; /* borrowed from the mapping */
    size_t klen;
} gkv_lc_slot_t;

typedef struct gkv_lease_cache {
    gkv_lc_slot_t *slot; /* oldest first */
    int n, cap;
    struct gkv_lc_key *index; /* each cached key's slots, for lookups by key */
    uint32_t slots;           /* the settings (GKV_CACHE_* until gkv_lc_configure) */
    uint64_t max_value, max_bytes;
    uint64_t bytes; /* value bytes under the cached leases */
    /* Later ends (gkv_lc_later), under later_lock. */
    pthread_mutex_t later_lock;
    gkv_mapping_t **later;
    size_t nlater, later_cap;
    uint64_t later_bytes;
} gkv_lease_cache_t;

/* Ends (or queues for one RELEASE) mapping m, which the cache let go: 0 or a code. */
typedef int (*gkv_lc_end_fn)(void *arg, gkv_mapping_t *m);

void gkv_lc_init(gkv_lease_cache_t *lc);
/* Forgets everything (the mappings are the caller's to free: at close). */
void gkv_lc_fini(gkv_lease_cache_t *lc);
/* New settings; what no longer fits is handed to end. Returns 0 or the first end's code. */
int gkv_lc_configure(gkv_lease_cache_t *lc, uint32_t slots, uint64_t max_value, uint64_t max_bytes,
                     gkv_lc_end_fn end, void *arg);

/* Whether gkv_unmap keeps read mapping m (the cache is on and m is small enough). */
bool gkv_lc_wants(const gkv_lease_cache_t *lc, const gkv_mapping_t *m);
/* Caches m (key: klen bytes) as its key's newest; the key's oldest past GKV_CACHE_PER_KEY and
 * the oldest past the slots or bytes go to end. m itself goes to end when the cache is off or m
 * is larger than max_bytes (the cached ones stay), or memory runs out. Returns 0 or the first
 * end's code. */
int gkv_lc_put(gkv_lease_cache_t *lc, gkv_mapping_t *m, const void *key, size_t klen,
               gkv_lc_end_fn end, void *arg);
/* The newest cached read lease of key (the likeliest to be on its value now), or NULL. */
gkv_mapping_t *gkv_lc_read(const gkv_lease_cache_t *lc, const void *key, size_t klen);
/* A cached spare of key for a value of size bytes on GPU gpu (-1: any), or NULL. */
gkv_mapping_t *gkv_lc_spare(const gkv_lease_cache_t *lc, const void *key, size_t klen,
                            uint64_t size, int gpu);
/* Takes cached m out of the cache (it is the caller's again). False when m is not cached. */
bool gkv_lc_take(gkv_lease_cache_t *lc, gkv_mapping_t *m);
/* Hands every cached lease of key to end (a MAP or CREATE of it failed). */
int gkv_lc_end_key(gkv_lease_cache_t *lc, const void *key, size_t klen, gkv_lc_end_fn end,
                   void *arg);
/* Empties the cache, handing every lease to end, oldest first (before any request that is not
 * a mapping call). */
int gkv_lc_end_all(gkv_lease_cache_t *lc, gkv_lc_end_fn end, void *arg);

/* Queues m's end (any thread). Returns 0 or GKV_ENOMEM (then the lease ends with the
 * connection). */
int gkv_lc_later(gkv_lease_cache_t *lc, gkv_mapping_t *m);
/* True when enough later ends wait that a mapping call should end them now. */
bool gkv_lc_later_due(gkv_lease_cache_t *lc);
/* Takes the queued ends: *out (the caller frees it with free()), their count. */
size_t gkv_lc_take_later(gkv_lease_cache_t *lc, gkv_mapping_t ***out);

/* libgpukv's entry to the later ends, for its bindings (not in gpukv.h): ends mapping m of
 * connection c (read: as gkv_unmap; writable: as gkv_abort) at the next call that may make a
 * request, for callers that may not block or make one now (the Python binding's garbage
 * collection). Any thread. Returns 0 or GKV_ENOMEM (the lease then ends with the connection). */
int gkv__end_later(gkv_client_t *c, gkv_mapping_t *m);

#endif
