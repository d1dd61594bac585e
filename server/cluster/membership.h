/* membership.h: this node in etcd. Joining grants a lease (TTL ttl seconds), writes the node's
 * record under it (refused when a live node already has the name), and reads the member list;
 * then two threads keep it: one renews the lease every ttl/3 seconds (granting a new one, a new
 * incarnation, if etcd let it expire), one watches the list and republishes it on every change.
 * While etcd is unreachable the last list read stays in force and the state says since when.
 * Leaving revokes the lease, so the others see the node go at once. Nothing here runs on the
 * loop: on_change tells the layer above (from a membership thread) that a new list is there. */
#ifndef GKV_CLUSTER_MEMBERSHIP_H
#define GKV_CLUSTER_MEMBERSHIP_H

#include <stdbool.h>
#include <stdint.h>

#include "members.h"

typedef struct {
    const char *endpoints; /* "host:port,..." of etcd's client URLs */
    const char *cluster;   /* the cluster's name: its records live under /gpukv/<cluster>/ */
    gkv_member_t self;     /* name, advertise, weight (incarnation and hash are filled in) */
    int ttl_s;             /* the lease's TTL, 2..60 */
    long timeout_ms;       /* each etcd call's limit */
} gkv_membership_cfg_t;

/* What the node knows of etcd, for INFO and metrics. */
typedef struct {
    bool reachable;              /* the last call to etcd answered */
    uint64_t unreachable_since;  /* wall-clock ms of the first failed call in a row, else 0 */
    uint64_t lease_valid_until;  /* monotonic ms up to which our lease surely lives */
    int64_t incarnation;         /* the lease */
    uint64_t joins;              /* leases granted (1 + re-joins after the lease expired) */
    uint64_t list_updates;       /* member lists published */
} gkv_membership_state_t;

typedef struct gkv_membership gkv_membership_t;

/* Joins (blocking, bounded by the timeouts) and starts the threads. cfg is copied. on_change
 * (arg) is called from a membership thread after each new list. Returns 0 and *out (stop with
 * gkv_membership_stop), or GKV_EUNAVAILABLE (etcd did not answer), GKV_EEXISTS (a live node
 * has this name), GKV_EINVAL (a bad name or TTL), GKV_ENOMEM. */
int gkv_membership_start(const gkv_membership_cfg_t *cfg, void (*on_change)(void *arg),
                         void *arg, gkv_membership_t **out);
/* Leaves (revokes the lease, bounded by the timeout), joins the threads and frees ms. */
void gkv_membership_stop(gkv_membership_t *ms);
/* The current list, copied into *out (free with gkv_members_fini). Returns 0 or GKV_ENOMEM. */
int gkv_membership_members(gkv_membership_t *ms, gkv_members_t *out);
void gkv_membership_state(gkv_membership_t *ms, gkv_membership_state_t *out);
/* Renews the lease now rather than at the next period (others reach etcd again). */
void gkv_membership_poke(gkv_membership_t *ms);
/* Monotonic ms (CLOCK_MONOTONIC) up to which this node's lease surely lives: the send time of
 * the last renewal etcd answered plus the TTL it granted. Lock-free, for the request path. */
uint64_t gkv_membership_valid_until(const gkv_membership_t *ms);
/* The lease this node holds now (its incarnation). Lock-free. */
int64_t gkv_membership_incarnation(const gkv_membership_t *ms);

#endif
