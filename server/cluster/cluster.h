/* cluster.h: this node's view of its cluster, on the loop (docs/cluster.md). The membership
 * threads (membership.h) keep the member list from etcd; each new list reaches the loop
 * through an async handle, and from then on placement answers from it (placement.h), so that
 * nothing on the request path waits for etcd. With no cluster configured nothing here runs and
 * every key is this node's. */
#ifndef GKV_CLUSTER_CLUSTER_H
#define GKV_CLUSTER_CLUSTER_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "members.h"
#include "membership.h"

typedef struct {
    const char *endpoints; /* etcd's "host:port,...", borrowed for the call */
    const char *cluster, *node, *advertise;
    uint32_t weight;
    int ttl_s;
} gkv_cluster_cfg_t;

typedef struct gkv_cluster {
    bool on;
    uv_loop_t *loop;
    uv_async_t changed; /* a membership thread has published a new list */
    gkv_membership_t *ms;
    gkv_members_t members; /* the list in force on the loop */
    long self;             /* this node's index in members, -1 while it is not listed */
    char node[GKV_NODE_NAME_MAX + 1], name[GKV_NODE_NAME_MAX + 1];
    uint64_t member_changes; /* lists taken on the loop */
    /* Told on the loop after members changed (the daemon's hook: rebalancing homes). */
    void (*on_members)(void *arg);
    void *arg;
} gkv_cluster_t;

/* Joins the cluster (blocking: etcd's timeouts bound it) and starts following its members.
 * cfg is borrowed; loop is borrowed and must outlive the cluster. Returns 0, or a code with a
 * sentence in err (cap bytes): GKV_EUNAVAILABLE (etcd did not answer), GKV_EEXISTS (the node
 * name is taken by a live node), GKV_EINVAL. */
int gkv_cluster_start(gkv_cluster_t *cl, uv_loop_t *loop, const gkv_cluster_cfg_t *cfg,
                      char *err, size_t cap);
/* Leaves the cluster (revokes the lease: the others see this node go at once) and closes the
 * handle. The memory is released by gkv_cluster_fini after the loop has run out. */
void gkv_cluster_stop(gkv_cluster_t *cl);
void gkv_cluster_fini(gkv_cluster_t *cl);

/* The home of key (len bytes, borrowed) among the members in force, or NULL with no cluster
 * or no members. Borrowed from cl until the members next change (on the loop). */
const gkv_member_t *gkv_cluster_home(const gkv_cluster_t *cl, const void *key, size_t len);
/* True when m is this node. */
bool gkv_cluster_is_self(const gkv_cluster_t *cl, const gkv_member_t *m);
/* INFO's "# Cluster" section into buf (cap bytes). Returns its length or -1 if it does not fit. */
int gkv_cluster_info(const gkv_cluster_t *cl, char *buf, size_t cap);

#endif
