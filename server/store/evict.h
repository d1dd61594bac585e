/* evict.h: --maxmemory-policy, what the store does when a new value does not fit.
 *
 * noeviction (the default, as Redis): the SET or CREATE gets OOM. allkeys-lru / allkeys-lfu: the
 * store evicts keys until the value fits, Redis's way: sample GKV_EVICT_SAMPLES linked entries
 * at random, evict the best candidate of the sample (the least recently used, or the least
 * frequently used), repeat. volatile-lru / volatile-ttl sample only keys that have a deadline
 * (the TTL heap, ttl.h) and evict the least recently used, or the one due first. Only an entry that
 * nothing but the index holds is a candidate (refs
 * == 1: no lease, no transfer, no open copy batch), so evicting it frees its memory at once and
 * nobody loses bytes they are reading or writing; when no candidate turns up the reply is OOM.
 *
 * Each entry keeps one 32-bit access stamp, in the field the entry already had spare (no host
 * memory per key beyond today's): LRU, the store clock in milliseconds at the last read or write
 * (wraps after 49 days: a key idle that long looks recent); LFU, Redis's logarithmic 8-bit
 * counter (factor 10, new keys start at 5) under a 24-bit minute stamp of its last decay (one
 * point per idle minute). The stamps are kept under every policy, so the policy can change on
 * SIGHUP. */
#ifndef GKV_SERVER_EVICT_H
#define GKV_SERVER_EVICT_H

#include <stdbool.h>
#include <stdint.h>

#define GKV_EVICT_SAMPLES 5 /* Redis's maxmemory-samples default */

typedef enum {
    GKV_POLICY_NOEVICTION = 0,
    GKV_POLICY_ALLKEYS_LRU,
    GKV_POLICY_ALLKEYS_LFU,
    GKV_POLICY_VOLATILE_LRU, /* only keys with a deadline, least recently used first */
    GKV_POLICY_VOLATILE_TTL, /* only keys with a deadline, nearest deadline first */
} gkv_policy_t;

/* True for the policies that evict only keys with a deadline (TTL). */
static inline bool gkv_policy_volatile(gkv_policy_t p)
{
    return p == GKV_POLICY_VOLATILE_LRU || p == GKV_POLICY_VOLATILE_TTL;
}

/* The policy's name as the flag and INFO write it. */
const char *gkv_policy_name(gkv_policy_t p);
/* Parses a policy name. Returns 0 or -1. */
int gkv_policy_parse(const char *s, gkv_policy_t *out);

/* Access stamps (evict.c). now_ms: the store clock. rnd: a uniform 32-bit random number. */
/* The stamp of a value just written, for the policy. */
uint32_t gkv_access_new(gkv_policy_t p, uint64_t now_ms);
/* The stamp after a read or write of a value that had stamp s. */
uint32_t gkv_access_touch(gkv_policy_t p, uint32_t s, uint64_t now_ms, uint32_t rnd);
/* How evictable a value with stamp s is now: higher goes first (LRU: idle milliseconds; LFU:
 * 255 less the decayed counter). */
uint64_t gkv_access_score(gkv_policy_t p, uint32_t s, uint64_t now_ms);

#endif
