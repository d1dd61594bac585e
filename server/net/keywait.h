/* keywait.h: requests that wait for a key to exist (GET and MAP with the wait field,
 * PROTOCOL.md). A request for a missing key parks its connection (its frame stays in the input,
 * as a SET waiting for room does) on the key's queue; a publication under that key (the store's
 * change, handed on by the net) wakes the queue's connections in the order they began waiting,
 * on the next loop turn (gkv_net_yield),
 * and each runs its request again; the wait's deadline, if it comes first, makes the request
 * answer TIMEDOUT. A waiting request holds nothing (no lease, no staging). At most
 * GKV_KEYWAIT_MAX connections wait at once; one more is answered BUSY. On a cluster node a
 * request also runs again at its re-check time (its key's home is asked again: a lost
 * notification) and when the members change (docs/handoff.md, "Waits across a cluster").
 * Early MAPs (docs/handoff.md, "Early MAPs"): a waiting MAP of a whole value that asked for it
 * (early) gets, while it waits, one early frame naming the memory of a value an asynchronous
 * seal of its key is waiting to publish, with a lease on it, so that its client imports that
 * memory while the producer's GPU work runs; its answer then renews that lease when that value
 * is the one it returns. */
#ifndef GKV_NET_KEYWAIT_H
#define GKV_NET_KEYWAIT_H

#include <stddef.h>
#include <stdint.h>

typedef struct gkv_conn gkv_conn_t;
typedef struct gkv_net gkv_net_t;
typedef struct gkv_keywaits gkv_keywaits_t;
struct gkv_entry;

#define GKV_KEYWAIT_MAX 10000u

/* Sets up net's waits (its timer on net->loop). 0 or GKV_ENOMEM. */
int gkv_keywaits_init(gkv_net_t *net);
/* Starts closing the timer (no connection waits any more); then, once the loop ran out, free. */
void gkv_keywaits_close(gkv_net_t *net);
void gkv_keywaits_free(gkv_net_t *net);
/* c's request (key, klen bytes, borrowed) waits until the key is linked or until deadline
 * (uv_now milliseconds), or runs again (without timing out) at recheck when that is earlier
 * and not 0. 0 (c->wait.key set), GKV_EBUSY (too many wait) or GKV_ENOMEM. */
int gkv_keywait_park(gkv_conn_t *c, const uint8_t *key, size_t klen, uint64_t deadline,
                     uint64_t recheck);
/* Every waiting request runs again on the next turn (the cluster's members changed). */
void gkv_keywaits_wake_all(gkv_net_t *net);
/* A value was published under key (the store's change, through the net): its waiters run
 * again, in order, on the next turn. */
void gkv_keywaits_published(gkv_net_t *net, const uint8_t *key, size_t klen);
/* An asynchronous seal of e's key waits for its fence (fence.h): each MAP waiting for that
 * key that asked for an early frame and has none gets one now, on e (gkv_conn_early). Returns
 * how many did: then e must be published by linking (store.h GKV_PUBLISH_LINK). */
unsigned gkv_keywaits_sealing(gkv_net_t *net, struct gkv_entry *e);
/* c stops waiting (it closes). Nothing when it does not wait. */
void gkv_keywait_cancel(gkv_conn_t *c);
/* Connections waiting now, and in all: wakes by a link, timeouts, re-checks (a cluster
 * node's, and the wakes of gkv_keywaits_wake_all). */
void gkv_keywaits_stats(const gkv_net_t *net, uint64_t *waiting, uint64_t *woken,
                        uint64_t *timed_out, uint64_t *rechecks);

#endif
