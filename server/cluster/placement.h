/* placement.h: where a key lives in a cluster. Its home is chosen by weighted rendezvous
 * (highest random weight) hashing over the live members: each member scores the key, scaled by
 * its weight, and the highest score wins. Nothing but the member list is needed, every node
 * computes the same answer, and a member joining or leaving moves only the keys whose winner
 * changes (about 1/N of them). A key holding "{tag}" (Redis Cluster's rule: the first '{', the
 * first '}' after it, at least one byte between) hashes only the tag, so related keys share a
 * home. */
#ifndef GKV_CLUSTER_PLACEMENT_H
#define GKV_CLUSTER_PLACEMENT_H

#include <stddef.h>
#include <stdint.h>

#include "members.h"

/* The bytes of key (len bytes, borrowed) placement hashes: *off, *n. */
void gkv_place_hashed_part(const void *key, size_t len, size_t *off, size_t *n);
/* The placement hash of a key (of its tag, if it has one). The same on every node. */
uint64_t gkv_place_key_hash(const void *key, size_t len);
/* The placement hash of a node's name. */
uint64_t gkv_place_node_hash(const char *name);
/* The home among the n members m (borrowed) of a key with hash key_hash: its index, or -1 when
 * n is 0. */
long gkv_place_home(const gkv_member_t *m, size_t n, uint64_t key_hash);

#endif
