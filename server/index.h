/* index.h: the key index. A hash table (SipHash, open addressing) answers lookups in O(1) on
 * average; a skip list over the same nodes keeps keys in byte order, so a prefix is listed in
 * O(log N + matches). Keys are binary-safe. Values are opaque pointers the caller owns. */
#ifndef GKV_SERVER_INDEX_H
#define GKV_SERVER_INDEX_H

#include <stddef.h>
#include <stdint.h>

typedef struct gkv_index gkv_index_t;
typedef struct gkv_inode gkv_inode_t;

/* Creates an empty index; the caller frees it with gkv_index_free. NULL when out of memory. */
gkv_index_t *gkv_index_alloc(void);
/* Frees the index; calls drop(val, arg) for every value still stored (drop may be NULL). */
void gkv_index_free(gkv_index_t *ix, void (*drop)(void *val, void *arg), void *arg);
/* Removes every key, calling drop for each value, keeping the index usable. */
void gkv_index_clear(gkv_index_t *ix, void (*drop)(void *val, void *arg), void *arg);

/* The value stored under key (borrowed), or NULL. */
void *gkv_index_get(const gkv_index_t *ix, const void *key, size_t len);
/* Stores val under key (key is copied). If the key existed its value is replaced and the old one
 * is stored in *old (else *old = NULL); the caller owns it again. Returns 0 or GKV_ENOMEM. */
int gkv_index_put(gkv_index_t *ix, const void *key, size_t len, void *val, void **old);
/* Removes key and returns its value (now the caller's), or NULL if it was absent. */
void *gkv_index_del(gkv_index_t *ix, const void *key, size_t len);
size_t gkv_index_count(const gkv_index_t *ix);
/* Host bytes the index itself uses (nodes, keys and table). */
size_t gkv_index_memory(const gkv_index_t *ix);

/* Ordered walk. Nodes are borrowed and stay valid until their key is deleted or replaced. */
/* The first node whose key is >= key in byte order, or NULL. */
const gkv_inode_t *gkv_index_seek(const gkv_index_t *ix, const void *key, size_t len);
const gkv_inode_t *gkv_index_next(const gkv_inode_t *n);
const uint8_t *gkv_inode_key(const gkv_inode_t *n, size_t *len);
void *gkv_inode_val(const gkv_inode_t *n);

#endif
