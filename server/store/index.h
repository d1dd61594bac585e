/* index.h: the key index. A hash table (SipHash, open addressing) answers lookups in O(1) on
 * average; a radix tree over the same nodes (radix.h) keeps keys in byte order, so a prefix is
 * listed from one seek, each next key found in about as many steps as the key has distinguishing
 * bytes. Keys are binary-safe. One thread uses an index; the radix tree may be kept by a helper
 * thread of its own (gkv_index_start_helper).
 * Each node is one allocation: the caller's data (a fixed number of bytes chosen when the index
 * is made), then a header and the key. The caller owns nodes: the index links and unlinks them
 * but never frees one, so a node can outlive its place in the index. */
#ifndef GKV_SERVER_INDEX_H
#define GKV_SERVER_INDEX_H

#include <stddef.h>
#include <stdint.h>

typedef struct gkv_index gkv_index_t;
typedef struct gkv_inode gkv_inode_t;

/* Creates an empty index whose nodes carry `prefix` bytes of caller data (a multiple of 8).
 * The caller frees it with gkv_index_free. NULL when out of memory. */
gkv_index_t *gkv_index_alloc(size_t prefix);
/* Unlinks every node, calling drop(data, arg) for each (drop may free it), and frees the
 * index. drop may be NULL. */
void gkv_index_free(gkv_index_t *ix, void (*drop)(void *data, void *arg), void *arg);
/* Unlinks every node like gkv_index_free, keeping the index usable. */
void gkv_index_clear(gkv_index_t *ix, void (*drop)(void *data, void *arg), void *arg);

/* Allocates an unlinked node for key (copied) and returns its data (prefix bytes, zeroed), or
 * NULL when out of memory. The caller owns it: gkv_inode_free once it is no longer linked. */
void *gkv_inode_new(gkv_index_t *ix, const void *key, size_t klen);
void gkv_inode_free(gkv_index_t *ix, void *data);
/* The key of a node, from its data (borrowed, lives as long as the node). */
const uint8_t *gkv_inode_data_key(const gkv_index_t *ix, const void *data, size_t *len);

/* The data of the node linked under key, or NULL. */
void *gkv_index_get(const gkv_index_t *ix, const void *key, size_t len);
/* Links an unlinked node under its key. A node already linked under that key is unlinked and
 * its data stored in *old (else *old = NULL). Returns 0, or GKV_ENOMEM with nothing changed. */
int gkv_index_link(gkv_index_t *ix, void *data, void **old);
/* Unlinks the linked node whose data is data (found by address: no key comparisons); the node
 * stays the caller's. To unlink a key, gkv_index_get its node first. */
void gkv_index_unlink_node(gkv_index_t *ix, void *data);
size_t gkv_index_count(const gkv_index_t *ix);
/* Hands the key order to a helper thread (order.h; before, the caller's thread keeps it): then
 * changes are queued, the ordered walk below first waits for them, and a node given to
 * gkv_inode_free is freed once the helper no longer needs it. Returns 0 or an error number (and
 * the index goes on without a helper). */
int gkv_index_start_helper(gkv_index_t *ix);
/* With a helper: wakes it if changes wait. The loop calls this once per turn. */
void gkv_index_kick(gkv_index_t *ix);
/* Fills out with the data of up to n (at most 16) linked nodes picked at random, their memory
 * fetched in parallel; returns how many, 0 only when the index is empty. Each is the node in a
 * random slot or the next occupied one (close to uniform while the table is not sparse; in a
 * table far larger than its nodes, after 1024 empty slots, none; when none was found, the first
 * node in key order). */
size_t gkv_index_sample(gkv_index_t *ix, void **out, size_t n);
/* Host bytes the index uses: linked nodes (with their data) and the table. */
size_t gkv_index_memory(const gkv_index_t *ix);
/* Host bytes of the hash table alone. */
size_t gkv_index_table_memory(const gkv_index_t *ix);

/* Ordered walk. Nodes are borrowed and stay linked until their key is deleted or replaced. */
/* The first linked node whose key is >= key in byte order, or NULL. */
const gkv_inode_t *gkv_index_seek(const gkv_index_t *ix, const void *key, size_t len);
/* The first linked node whose key is > n's key (n need not be linked any more), or NULL. */
const gkv_inode_t *gkv_index_next(const gkv_index_t *ix, const gkv_inode_t *n);
const uint8_t *gkv_inode_key(const gkv_inode_t *n, size_t *len);
/* The data of a node. */
void *gkv_inode_val(const gkv_index_t *ix, const gkv_inode_t *n);

#endif
