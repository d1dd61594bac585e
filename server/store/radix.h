/* radix.h: a set of leaves kept in the byte order of their keys, as an adaptive radix tree
 * (Leis, Kemper, Neumann, ICDE 2013: inner nodes of 4, 16, 48 or 256 children, compressed
 * paths). The key index uses it for prefix walks. Keys are binary-safe and one may be a prefix of
 * another. Finding a key's place visits about one node per distinguishing byte of the key, so it
 * costs a few cache misses where a comparison structure (a skip list) costs one per comparison.
 * The tree owns its inner nodes only. A leaf is the caller's, any pointer aligned to 2 bytes,
 * whose key key_of returns (borrowed, unchanged while the leaf is in the tree). */
#ifndef GKV_SERVER_RADIX_H
#define GKV_SERVER_RADIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef const uint8_t *(*gkv_radix_key_fn)(const void *leaf, size_t *len);

typedef struct {
    uintptr_t root; /* 0, a leaf (low bit set) or an inner node */
    size_t bytes;   /* memory of the inner nodes */
    size_t nodes;   /* inner nodes */
    gkv_radix_key_fn key_of;
} gkv_radix_t;

void gkv_radix_init(gkv_radix_t *t, gkv_radix_key_fn key_of);
/* Adds leaf, whose key must not be in the tree yet. Returns 0, or GKV_ENOMEM with the tree
 * unchanged (at most one node is allocated, before anything changes). */
int gkv_radix_insert(gkv_radix_t *t, void *leaf);
/* Puts leaf in the place of the leaf that has the same key and returns that one; NULL (nothing
 * changed) when no leaf has that key. Allocates nothing. */
void *gkv_radix_replace(gkv_radix_t *t, void *leaf);
/* Removes the leaf whose key this is and returns it, or NULL. Never fails (a node that would
 * shrink to a smaller kind stays as it is when memory is short). */
void *gkv_radix_remove(gkv_radix_t *t, const uint8_t *key, size_t len);
/* The leaf with the smallest key >= key (> key when after is true), or NULL. */
void *gkv_radix_seek(const gkv_radix_t *t, const uint8_t *key, size_t len, bool after);
/* Empties the tree: frees every inner node and calls drop(leaf, arg) for each leaf (drop may
 * be NULL), in no particular order. */
void gkv_radix_clear(gkv_radix_t *t, void (*drop)(void *leaf, void *arg), void *arg);

#endif
