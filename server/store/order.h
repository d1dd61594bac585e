/* order.h: the key order of the index (index.h), a radix tree (radix.h) kept by a helper thread.
 * Keeping the tree costs about as much as the rest of a SET that evicts (its insert and its
 * removal walk a path of nodes that are rarely in cache: ~1.5 us of server CPU per evicting SET,
 * bench/RESULTS.md, session 12), and nothing but LIST-like commands reads it. So the loop only
 * queues what changes (insert, replace, remove: a pointer each into a ring) and the helper
 * applies it in order; a reader first waits until the queue is applied (gkv_order_read), which
 * takes as long as the queue's work (the ring holds at most GKV_ORDER_RING operations).
 *
 * Ownership: the leaves are the index's nodes, which the index's caller owns. A node that a
 * queued operation names must outlive its application, so nodes are given back through
 * gkv_order_free, which frees one once the helper has applied every operation queued before.
 * One thread (the loop) calls every function here; the helper touches only the tree.
 *
 * Until gkv_order_start (and where it fails) there is no helper: each operation is applied at
 * once and gkv_order_free frees at once, with the same results. A helper pays where a core is
 * free for it: on the 2-core CPU machine it took CPU from the benchmark's clients and lowered
 * throughput, on the 16-core GPU machine it raised evicting SETs by a fifth (RESULTS.md). */
#ifndef GKV_SERVER_ORDER_H
#define GKV_SERVER_ORDER_H

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "radix.h"

#define GKV_ORDER_RING 4096u /* queued operations at most; a power of two */

typedef struct {
    uint64_t seq; /* the operations queued before the free */
    void *block;  /* what to free once they are applied */
} gkv_order_dead_t;

/* Fields that one thread writes and the other reads sit on cache lines of their own: sharing one
 * cost the loop a miss per request (S1 SETs fell from 243k to 196k ops/s on the H100 with the
 * tree's counters beside the index's own fields). The loop publishes head once per turn (or
 * per 64 operations), not per operation, for the same reason. */
typedef struct {
    alignas(64) gkv_radix_t tree;      /* the helper's; the loop reads it through gkv_order_read */
    alignas(64) _Atomic uint64_t head; /* operations published to the helper (the loop writes) */
    alignas(64) _Atomic uint64_t tail; /* operations applied (the helper writes) */
    _Atomic int sleeping;              /* the helper waits on wake (the helper writes) */
    alignas(64) _Atomic int stop;      /* rarely written: */
    pthread_mutex_t mu;
    pthread_cond_t wake;
    pthread_t thread;
    /* The loop's alone. */
    alignas(64) bool helper; /* a helper thread runs (gkv_order_start) */
    uint64_t queued;         /* operations in the ring, published or not */
    uint64_t tail_seen;      /* tail when last read */
    /* Frees waiting for the helper, oldest first (a ring of cap entries, n used from first). */
    gkv_order_dead_t *dead;
    uint32_t dead_first, dead_n, dead_cap;
    alignas(64) uintptr_t ring[GKV_ORDER_RING]; /* the loop writes, the helper reads */
} gkv_order_t;

/* Sets up an empty order, without a helper, over leaves whose keys key_of gives. */
void gkv_order_init(gkv_order_t *o, gkv_radix_key_fn key_of);
/* Starts the helper thread (all signals blocked in it); from now on changes are queued.
 * Returns 0 or an error number, and then the order goes on without a helper. */
int gkv_order_start(gkv_order_t *o);
/* Applies what is queued, stops the helper and frees what gkv_order_free held. The tree's
 * leaves are the caller's: gkv_order_read(o) and gkv_radix_clear it first. */
void gkv_order_fini(gkv_order_t *o);

/* Queue the change of one leaf (a node whose key does not change while it lives). insert: the
 * key is in no leaf; replace: leaf takes the place of the leaf with its key; remove: leaf goes.
 * Out of memory in the tree, the helper retries (an insert is the only one that allocates). */
void gkv_order_insert(gkv_order_t *o, void *leaf);
void gkv_order_replace(gkv_order_t *o, void *leaf);
void gkv_order_remove(gkv_order_t *o, void *leaf);
/* Frees block (malloc'd; a leaf or anything a queued operation may name) once every operation
 * queued so far has been applied. */
void gkv_order_free(gkv_order_t *o, void *block);
/* Publishes what is queued and wakes the helper if it sleeps (the loop calls it once per turn:
 * queueing alone publishes every 64 operations and wakes the helper only when the ring fills). */
void gkv_order_kick(gkv_order_t *o);

/* Waits until everything queued is applied and returns the tree, to read (or clear) until the
 * next operation is queued. */
gkv_radix_t *gkv_order_read(gkv_order_t *o);

#endif
