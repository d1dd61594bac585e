/* members.h: a cluster's members as etcd holds them: one record per node under
 * /gpukv/<cluster>/members/<node>, a small JSON object attached to the node's lease, so that a
 * node that stops renewing it leaves the list by itself within the lease's TTL. */
#ifndef GKV_CLUSTER_MEMBERS_H
#define GKV_CLUSTER_MEMBERS_H

#include <stddef.h>
#include <stdint.h>

#include "etcd.h"

#define GKV_NODE_NAME_MAX 63  /* [A-Za-z0-9._-], 1..63 bytes */
#define GKV_ADVERTISE_MAX 127 /* host:port */

typedef struct {
    char name[GKV_NODE_NAME_MAX + 1];
    char advertise[GKV_ADVERTISE_MAX + 1]; /* where peers reach its TCP listener */
    uint32_t weight;                       /* its share of homes, relative (1..1000) */
    int64_t incarnation;                   /* its etcd lease: new each time it (re)joins */
    char token_id[17]; /* a fingerprint of its cluster token: nodes with another one are no
                          members of ours (they could not talk to us anyway) */
    uint64_t hash;                         /* of the name, for placement (placement.h) */
} gkv_member_t;

/* A member list, sorted by name. */
typedef struct {
    gkv_member_t *m; /* owned (free with gkv_members_fini) */
    size_t n;
    int64_t revision; /* etcd's revision it was read at */
} gkv_members_t;

/* True when name is a valid node or cluster name. */
int gkv_member_name_ok(const char *name);
/* The record stored in etcd for m (borrowed), as JSON into buf (cap bytes). Returns its length
 * or GKV_ENOSPACE. */
int gkv_member_encode(const gkv_member_t *m, char *buf, size_t cap);
/* Reads a record (json: len bytes, borrowed) into *m; the incarnation is the lease it is
 * attached to, given by the caller. Returns 0 or GKV_EPROTO (not a member record). */
int gkv_member_decode(const char *json, size_t len, int64_t lease, gkv_member_t *m);
/* The members in range r (borrowed) under prefix, sorted, into *out; records that do not
 * decode are skipped (and logged). Returns 0 or GKV_ENOMEM. */
int gkv_members_from_range(const gkv_etcd_range_t *r, gkv_members_t *out);
/* The member named name, or NULL. */
const gkv_member_t *gkv_members_find(const gkv_members_t *ms, const char *name);
/* Copies src into *dst (its own memory). Returns 0 or GKV_ENOMEM. */
int gkv_members_copy(gkv_members_t *dst, const gkv_members_t *src);
/* True when a and b name the same nodes at the same incarnations and addresses. */
int gkv_members_same(const gkv_members_t *a, const gkv_members_t *b);
void gkv_members_fini(gkv_members_t *ms);

#endif
