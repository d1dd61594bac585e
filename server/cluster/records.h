/* records.h: the two tables a cluster node keeps on its loop (docs/cluster.md):
 *   - homes: for each key this node is the home of, who owns its current value, at which
 *     version and size (busy while a change of it waits for the previous owner's drop);
 *   - copies: the values this node holds for the cluster: its own (owned, at the version their
 *     home recorded, and which home that was) and replicas (pulled from their owner, at the
 *     version they were pulled at). The bytes are in the store under the same key.
 * Both are bounded (GKV_RECORDS_MAX each): past it new records are refused (GKV_ENOMEM). */
#ifndef GKV_CLUSTER_RECORDS_H
#define GKV_CLUSTER_RECORDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uthash.h>

#include "members.h"

#define GKV_RECORDS_MAX (64u << 20)

typedef struct gkv_home_rec {
    UT_hash_handle hh;
    char owner[GKV_NODE_NAME_MAX + 1];
    int64_t owner_inc;
    uint64_t version, size;
    bool busy;
    uint32_t klen;
    uint8_t key[]; /* klen bytes */
} gkv_home_rec_t;

typedef struct gkv_copy_rec {
    UT_hash_handle hh;
    uint64_t version; /* 0: none yet (only pending writes) */
    bool replica;     /* pulled from the owner; else this node owns it */
    uint32_t pending; /* writes of the key on this node being recorded */
    /* The highest version a home told us to drop (or deleted) while writes were pending: a
     * pending write the home recorded at or below it was superseded before we could publish
     * it, and is not published. */
    uint64_t dropped_upto;
    char home[GKV_NODE_NAME_MAX + 1]; /* owned: the home that recorded it */
    /* Replicas (with a version) in the order they were kept: the first goes first when room
     * is needed (gkv_records_t.oldest). */
    struct gkv_copy_rec *rprev, *rnext;
    uint32_t klen;
    uint8_t key[];
} gkv_copy_rec_t;

typedef struct {
    gkv_home_rec_t *homes;
    gkv_copy_rec_t *copies;
    gkv_copy_rec_t *oldest, *newest; /* the replicas, oldest first */
    uint64_t nhomes, ncopies, nreplicas;
    uint64_t clock; /* the last version handed out */
} gkv_records_t;

void gkv_records_init(gkv_records_t *r);
void gkv_records_fini(gkv_records_t *r);

/* The home record of key (klen bytes, borrowed), or NULL. */
gkv_home_rec_t *gkv_home_find(gkv_records_t *r, const void *key, size_t klen);
/* The record of key, made (no owner, version 0) if there is none. NULL: GKV_RECORDS_MAX. */
gkv_home_rec_t *gkv_home_get(gkv_records_t *r, const void *key, size_t klen);
void gkv_home_del(gkv_records_t *r, gkv_home_rec_t *h);
/* A new version for a write of h: above every version handed out or recorded, and above the
 * wall clock's milliseconds << 20, so that a home taking over keys keeps versions rising. */
uint64_t gkv_home_next_version(gkv_records_t *r, const gkv_home_rec_t *h);

gkv_copy_rec_t *gkv_copy_find(gkv_records_t *r, const void *key, size_t klen);
gkv_copy_rec_t *gkv_copy_get(gkv_records_t *r, const void *key, size_t klen);
void gkv_copy_del(gkv_records_t *r, gkv_copy_rec_t *c);
/* c becomes this node's own value at version, recorded by home (or a replica: then it is the
 * newest replica). */
void gkv_copy_set(gkv_records_t *r, gkv_copy_rec_t *c, uint64_t version, bool replica,
                  const char *home);

#endif
