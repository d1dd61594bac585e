/* net.h: the client connections as a whole: what every connection reaches (the layers below,
 * the settings it goes by, hooks up to the daemon), the list of connections, their counters,
 * and the loop turns they share: yielding to one another, busy-polling while input comes, and
 * the completion queue through which copies finished on other threads come back to the loop.
 * The daemon owns one gkv_net_t and wires it up; nothing here knows the daemon. */
#ifndef GKV_NET_NET_H
#define GKV_NET_NET_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "cluster.h"
#include "cmd.h"
#include "demoter.h"
#include "device.h"
#include "fdstore.h"
#include "lease.h"
#include "metrics.h"
#include "staging.h"
#include "store.h"

typedef struct gkv_conn gkv_conn_t;
typedef struct gkv_net gkv_net_t;

/* What connections count (INFO # Stats, metrics). Written by the connections only. */
typedef struct {
    uint64_t total_connections, rejected_connections, protocol_errors;
    uint64_t bytes_in, bytes_out;
    uint64_t frame_timeouts, idle_timeouts, write_timeouts; /* connections closed for each */
    uint64_t staging_yields; /* staging buffers taken from stalled clients for waiting ones */
    uint64_t auth_failures;  /* HELLOs with a wrong or missing token */
    uint64_t rejected_peers; /* Unix connections refused by --allow-uid / --allow-gid */
    uint64_t staging_waits;  /* transfers that queued for a staging buffer */
    uint64_t early_maps;     /* early frames sent to waiting MAPs (keywait.h) */
} gkv_net_stats_t;

/* The settings connections go by: written by the daemon (gkv_net_apply) at start and when a
 * reload changes them; the arrays are borrowed from its configuration. */
typedef struct {
    uint64_t output_limit; /* requests wait while this much output is untaken */
    uint64_t frame_timeout_ms, idle_timeout_ms, write_timeout_ms; /* 0: none */
    uint64_t maxclients;
    uint64_t busy_poll_us; /* keep the loop polling this long after input; 0: never */
    uint64_t watch_buffer; /* a watcher's untaken events past which its watch ends (watch.h) */
    const uint32_t *allow_uids, *allow_gids; /* Unix peers allowed; none listed: everyone */
    unsigned n_allow_uids, n_allow_gids;
    bool token; /* a token is configured: connections begin unauthenticated */
} gkv_net_settings_t;

/* Calls up to the daemon. */
typedef struct {
    void *owner;
    /* True when c must take no new request (stopping, or a takeover draining the others). */
    bool (*refusing)(void *owner, const gkv_conn_t *c);
    /* c has left the list and is about to be freed. */
    void (*closed)(void *owner, gkv_conn_t *c);
    /* A request ended (a deadline may have been set: the daemon's expiry timer). */
    void (*request_done)(void *owner);
} gkv_net_hooks_t;

struct gkv_net {
    /* The layers below, borrowed (the daemon's; they outlive every connection). */
    uv_loop_t *loop;
    gkv_store_t *store;
    gkv_devices_t *devs;
    gkv_staging_t *staging;
    gkv_cmd_ctx_t *cmd;
    gkv_fdstore_t *fdstore;
    gkv_cluster_t *cluster; /* --cluster: routes requests first (cluster.h); NULL: one node */
    gkv_demoter_t *demoter; /* moves off a full GPU a SET may wait for; NULL: no host tier */
    gkv_net_settings_t set;
    gkv_net_hooks_t hooks;
    bool stopping; /* the daemon stops: no busy-polling */
    /* The connections (each frees itself in its close callback, leaving the list). */
    gkv_conn_t *conns;
    uint64_t nconns, next_conn_id;
    unsigned wide_sndbufs; /* connections with a raised send buffer (send.c) */
    gkv_net_stats_t stats;
    gkv_metrics_t metrics; /* per-command counts and latencies */
    /* Failed HELLOs lately: they slow the next ones down (halved every 10 s by the sweep). */
    uint64_t auth_recent, auth_decay_at;
    /* Connections closed since the heap was last trimmed, and when that was (uv_now ms). */
    uint64_t closed_since_trim, trimmed_at;
    bool trim_wave; /* the last trim was for TRIM_CLOSED closes: the wave's tail gets one more */
    /* The completion queue: connections whose copy finished on another thread, under
     * done_lock, drained on the loop by wake (turns.c). */
    uv_async_t wake;
    pthread_mutex_t done_lock;
    gkv_conn_t *done_head;
    /* --busy-poll: while spin is active the loop polls without sleeping. */
    uv_idle_t spin;
    uint64_t spin_until_ns;
    /* Connections that handled GKV_FRAMES_PER_TURN frames and yielded to the others: driven
     * again from an idle callback, after the loop has polled every socket once more. */
    uv_idle_t turns;
    gkv_conn_t *yielded;
    struct gkv_keywaits *keywaits; /* requests waiting for a key to exist (keywait.h) */
    struct gkv_watches *watches;   /* connections watching a prefix (watch.h) */
    struct gkv_fences *fences;     /* asynchronous seals waiting for their fences (fence.h) */
    bool open; /* the handles are initialised (gkv_net_init) and not closing */
};

/* Sets net up on loop: its handles, its lock, and with net->store already set the waits for
 * keys (keywait.h) and the watches (watch.h), which the store's changes reach (store.h). The caller fills the layers, settings and hooks (before the first
 * connection). */
void gkv_net_init(gkv_net_t *net, uv_loop_t *loop);
/* Starts closing the handles (every connection is gone; the loop must then run out). */
void gkv_net_close(gkv_net_t *net);
/* After the loop ran out. */
void gkv_net_fini(gkv_net_t *net);

/* Asks every connection but the one whose id is except (0: none) to close after its request in
 * flight (gkv_conn_stop), or at once (now: gkv_conn_stop_now). */
void gkv_net_stop_conns(gkv_net_t *net, uint64_t except, bool now);
/* Every 250 ms: each connection's deadlines (limits.c), the failed-HELLO count's decay, and the
 * heap trimmed after many connections came and went. */
void gkv_net_sweep(gkv_net_t *net, uint64_t now);
/* Connections waiting for a staging buffer now (a gauge). */
uint64_t gkv_net_waiting_stage(const gkv_net_t *net);

/* Between the connections and turns.c. */
/* A connection received input: with --busy-poll, keep the loop polling for a while. */
void gkv_net_input(gkv_net_t *net);
/* c handled its share of frames: it goes on in a later loop iteration (c->yielded set). */
void gkv_net_yield(gkv_net_t *net, gkv_conn_t *c);
/* Drives the connections that yielded, now (each may yield again for the next turn). Only
 * from the loop's own callbacks, never from inside a request: what gkv_net_yield's turn does,
 * sooner (the fences' poll, after it published, so that a request waiting for the key runs
 * in the same turn). */
void gkv_net_run_yielded(gkv_net_t *net);
/* c's copy finished (status) on any thread: gkv_conn_copy_finished runs on the loop for it. */
void gkv_net_copy_done(gkv_net_t *net, gkv_conn_t *c, int status);
/* c is being freed: it leaves the list and the yielded list. */
void gkv_net_remove(gkv_net_t *net, gkv_conn_t *c);

#endif
