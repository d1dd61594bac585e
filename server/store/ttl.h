/* ttl.h: the keys that have a deadline (a TTL), in a binary min-heap by deadline, so that
 * active expiry finds the next key due in O(1) and removes it in O(log n). Each member's heap
 * position lives in its extras (store.h), so PERSIST, DEL and overwrites take a key out in
 * O(log n) too. The heap holds borrowed entry pointers: the store keeps it exact (a member is
 * an entry linked under its key whose extras carry a deadline). */
#ifndef GKV_SERVER_TTL_H
#define GKV_SERVER_TTL_H

#include <stdint.h>

struct gkv_entry;

typedef struct {
    struct gkv_entry **v;
    uint32_t n, cap;
} gkv_ttl_heap_t;

/* Makes room for one more member, so that the next gkv_ttl_add cannot fail. Returns 0 or
 * GKV_ENOMEM. */
int gkv_ttl_reserve(gkv_ttl_heap_t *h);
/* Adds e (its extras hold the deadline). Returns 0 or GKV_ENOMEM (e not added). */
int gkv_ttl_add(gkv_ttl_heap_t *h, struct gkv_entry *e);
/* Takes e out (it must be a member). */
void gkv_ttl_remove(gkv_ttl_heap_t *h, struct gkv_entry *e);
/* The member with the earliest deadline, or NULL. */
struct gkv_entry *gkv_ttl_top(const gkv_ttl_heap_t *h);
/* A member picked at random by r, or NULL (volatile-* eviction samples these). */
struct gkv_entry *gkv_ttl_random(const gkv_ttl_heap_t *h, uint32_t r);
void gkv_ttl_free(gkv_ttl_heap_t *h);

#endif
