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

#include "lease.h"
#include "members.h"
#include "membership.h"
#include "message.h"
#include "peer.h"
#include "plane.h"
#include "records.h"
#include "store.h"
#include "work.h"

typedef struct {
    const char *endpoints; /* etcd's "host:port,...", borrowed for the call */
    const char *cluster, *node, *advertise;
    uint32_t weight;
    int ttl_s;
    const char *token; /* the cluster's token (token_len bytes), borrowed for the call */
    size_t token_len;
    gkv_store_t *store; /* borrowed, outlives the cluster */
    uint64_t max_key, max_value;
    int timeout_ms; /* each request to another node */
    /* The data plane (plane.h): --nixl ("off", "auto" or a path), --nixl-arena (bytes per
     * device, 0: the default), and the store's devices. */
    const char *nixl;
    uint64_t nixl_arena;
    gkv_backend_t **bes;
    unsigned nbes;
} gkv_cluster_cfg_t;

/* What the cluster counts, for INFO and metrics. */
typedef struct {
    uint64_t remote_reads;   /* reads that asked another node (home or owner) */
    uint64_t bytes_pulled;   /* value bytes fetched from owners into replicas */
    uint64_t replica_hits;   /* reads served from a replica the home confirmed */
    uint64_t records;        /* writes recorded at a home (here or elsewhere) */
    uint64_t drops_sent;     /* previous owners told to drop their copy */
    uint64_t registered;     /* keys sent to a new home after the members changed */
    uint64_t dropped_dead;   /* home records forgotten because their owner left */
    uint64_t unavailable;    /* requests answered UNAVAILABLE */
    uint64_t node_requests;  /* NODE requests answered */
    uint64_t stale_senders;  /* NODE requests refused: the sender is not a current member */
    uint64_t fenced;         /* requests refused while this node could not confirm its lease */
    uint64_t vouch_rounds;   /* rounds in which every member vouched (etcd down for all) */
    uint64_t replicas_reclaimed; /* replicas dropped to make room for new values */
    /* Reads that found no value, by the path that decided it (route.c; INFO read_misses_*;
     * a GET with wait then waits): this node the key's home without a record of it (no_record); its
     * record naming this node, whose value is gone (evicted, expired: gone_here); this node's own
     * copy record without a value (owned_gone); the home, asked, said NOTFOUND (home_said); the
     * home named this node as owner round after round (rounds). The last three should be rare: a
     * count there explains an unexpected miss. */
    uint64_t miss_no_record, miss_gone_here, miss_owned_gone, miss_home_said, miss_rounds;
} gkv_cluster_stats_t;

struct cl_job;

/* One connection's request in the cluster's hands, kept in the connection. */
typedef struct gkv_route_ticket {
    void (*wake)(void *conn); /* set by the connection: a job for it finished (on the loop) */
    void *conn;
    struct cl_job *job; /* a job that runs, or ran, for the request (route takes its outcome) */
    bool defer;          /* the SET being received commits through gkv_cluster_commit */
    bool strip_nx_xx;    /* LOCAL: run the request without its NX/XX flags (decided at home) */
    uint64_t replica_version; /* the deferred payload is a replica of this version (REPLICA) */
    uint64_t fetch_version;   /* AS_GET of a FETCH at the home: the version it serves */
    gkv_wr_t *out;       /* a commit's reply goes here */
    /* A GET or MAP with wait: the milliseconds it has left (set by the connection before the
     * route; 0: no wait), and the cluster's notification count when its read asked the home
     * (gkv_cluster_wait_missed). */
    uint64_t wait_ms, wait_seq;
    /* Set by the connection before the route when its request may take an early frame (a MAP
     * of a whole value that asked for one: PROTOCOL.md, "Early MAPs"), else NULL: called on the
     * loop with the new memory a pull of its value lands in, before the pull runs (cleared
     * false), and again (cleared true, the same function kept by the pull: the connection is
     * still parked) once a clear the pull queued for that memory has run. Returns 1 when it
     * leased e (the client imports it while the pull runs: the replica is then published by
     * linking e itself, so the leased memory is the value's); 0 when it did not because e's
     * memory may still show an earlier value's bytes (cleared false only); -1 when the
     * connection takes no early frame now. */
    int (*early)(void *conn, gkv_entry_t *e, bool cleared);
    /* Set by the connection before the route for a GET of a whole value into a registered
     * buffer (PROTOCOL.md, "Reading into a registered buffer"): where the bytes go (memory of
     * the buffer's device tee_dev, tee_cap bytes from tee; tee.v 0: none). A pull of the value
     * through NIXL then lands each chunk there too, beside the replica, and names the replica
     * it so completed in teed (one reference, on the loop), which the connection takes after
     * the route: its GET then has nothing left to copy. */
    gkv_devptr_t tee;
    uint64_t tee_cap;
    unsigned tee_dev;
    gkv_entry_t *teed;
} gkv_route_ticket_t;

enum {
    GKV_ROUTE_LOCAL = 0, /* run it here as usual */
    GKV_ROUTE_PARK,      /* wait: route it again once t->wake was called */
    GKV_ROUTE_DONE,      /* answered: the reply is written */
    GKV_ROUTE_AS_GET,    /* run it as a GET (a FETCH from another node; its vversion becomes
                          * t->fetch_version when that is set) */
    GKV_ROUTE_WAIT_KEY,  /* a read with wait whose key's home (or owner) did not answer: it
                          * waits as for a missing key (asked again at the re-check, or when
                          * the members change) */
};

/* A WATCH spanning the cluster (watch.c): the streams of the other members' events. */
typedef struct gkv_cl_watch gkv_cl_watch_t;
/* An event another member sent for a watch (node: its name, borrowed for the call; version:
 * the key's cluster version, 0 for a FLUSH). */
typedef void (*gkv_cl_event_fn)(void *arg, unsigned kind, const uint8_t *key, size_t klen,
                                uint64_t size, uint64_t seq, uint64_t version, const char *node);

/* Waits across a cluster (waits.c; docs/handoff.md, "Waits across a cluster"): as a home, the
 * nodes waiting for keys it has no record of (interests); as a reader, the keys notified lately
 * (a ring of their hashes, each with its notification's sequence number). */
#define GKV_CL_INTERESTS_MAX 10000u
#define GKV_CL_NOTIFIED_RECENT 256u
typedef struct gkv_cl_interest gkv_cl_interest_t;
typedef struct {
    gkv_cl_interest_t *keys; /* by key (uthash) */
    uint64_t n;              /* interests (a key's nodes each count), <= GKV_CL_INTERESTS_MAX */
    uint64_t recent_hash[GKV_CL_NOTIFIED_RECENT], recent_seq[GKV_CL_NOTIFIED_RECENT];
    uint64_t seq; /* notifications taken (the last one's sequence number) */
    uint64_t full, sent, received;
} gkv_cl_waits_t;

typedef struct gkv_cluster {
    bool on;
    bool left; /* was on, and left (the daemon stops): cluster requests get UNAVAILABLE */
    uv_loop_t *loop;
    uv_async_t changed; /* a membership thread has published a new list */
    gkv_membership_t *ms;
    gkv_members_t members; /* the list in force on the loop */
    long self;             /* this node's index in members, -1 while it is not listed */
    char node[GKV_NODE_NAME_MAX + 1], name[GKV_NODE_NAME_MAX + 1];
    uint64_t member_changes; /* lists taken on the loop */
    /* Told on the loop: the members changed (on_members); a key was recorded here as its
     * home, or its home notified this node that it was (on_recorded: the node's requests
     * waiting for the key run again). Set by the caller after gkv_cluster_start. */
    void (*on_members)(void *arg);
    void (*on_recorded)(void *arg, const void *key, size_t klen);
    /* Asked on the loop before a worker copies a value of device dev out of its memory (an
     * owner's STAGE or PUSH): starts the copies of values answered before they were in place
     * (batch.h), which the backend's copies out then wait for. NULL: none to start. */
    void (*before_copy)(void *arg, unsigned dev);
    void *arg;
    gkv_cl_waits_t waits;
    /* The data path (route.c). */
    gkv_store_t *store; /* borrowed */
    uint64_t max_key, max_value;
    char self_addr[GKV_ADVERTISE_MAX + 1]; /* this node's advertised address */
    gkv_peers_t peers;
    gkv_workers_t origin, nested; /* jobs for this node's requests; a home's drops */
    gkv_workers_t stage;          /* an owner's chunks sent to readers through NIXL */
    /* Pulls that hold their slots already (a READ's head start) and the drops of head starts:
     * never behind pulls that wait for slots (origin), which those slots may be (pull_chunks.c). */
    gkv_workers_t pulls;
    gkv_workers_t spares;         /* dial connections to other nodes ahead (peer.h, spares) */
    gkv_plane_t plane;            /* the data plane between nodes (NIXL, or TCP alone) */
    gkv_records_t rec;
    gkv_cluster_stats_t stats;
    uint64_t settle_until;  /* uv_now: homes answer BUSY, not NOTFOUND, until then */
    int64_t last_self_inc;  /* our incarnation as of the last member list */
    char token_id[17];      /* our token's fingerprint (members.h) */
    size_t foreign;         /* registered nodes with another token, ignored */
    /* Fencing (docs/cluster.md, "Partitions"): this node serves while its lease surely lives
     * or, with etcd unreachable, while every member vouched for it lately. */
    uint64_t ttl_ms;
    uint64_t vouched_until; /* monotonic ms: every member vouched for us until then */
    bool vouching;          /* a vouch round is out */
    bool was_live;          /* for the log: fenced / serving again */
    bool departed;          /* the last member list lost a member (or an incarnation) */
    bool register_again;    /* a registration with a new home failed: try again next tick */
    bool quiet;             /* the store's changes now are no events (gkv_cluster_reports) */
    /* The version of the value being published now, for its event (0: its copy record's);
     * set around a publication whose record is written after it (write.c). */
    uint64_t publishing;
    uint64_t watch_stale; /* events of spanning watches dropped as older than one delivered */
    gkv_cl_watch_t *watches; /* WATCHes spanning the cluster (watch.c) */
    uv_timer_t tick;        /* every CL_VOUCH_PERIOD_MS: vouching, the log */
} gkv_cluster_t;

/* Joins the cluster (blocking: etcd's timeouts bound it) and starts following its members.
 * cfg is borrowed; loop is borrowed and must outlive the cluster. Returns 0, or a code with a
 * sentence in err (cap bytes): GKV_EUNAVAILABLE (etcd did not answer), GKV_EEXISTS (the node
 * name is taken by a live node), GKV_EINVAL. */
int gkv_cluster_start(gkv_cluster_t *cl, uv_loop_t *loop, const gkv_cluster_cfg_t *cfg,
                      char *err, size_t cap);
/* Leaves the cluster (revokes the lease: the others see this node go at once). Jobs already
 * queued still run. */
void gkv_cluster_stop(gkv_cluster_t *cl);
/* Once no connection is left: joins the workers and closes the handles. */
void gkv_cluster_close(gkv_cluster_t *cl);
/* After the loop has run out. */
void gkv_cluster_fini(gkv_cluster_t *cl);

/* Before a request of a connection runs (t: its ticket, out: its replies, leases: its leases):
 * whether it runs here as usual, waits for a job, was answered (*rc: its status), or runs as a
 * GET. With no cluster every request is LOCAL. */
int gkv_cluster_route(gkv_cluster_t *cl, gkv_route_ticket_t *t, const gkv_request_t *req,
                      gkv_leases_t *leases, gkv_wr_t *out, int *rc);
/* A SET routed with t->defer has its value in e (unpublished; the caller keeps its own
 * reference). Publishes it and writes the reply into out at once (DONE, *rc its status), or
 * once its home has recorded it (PARK: the reply goes into out, then t->wake). *holder gets the
 * entry that holds e's memory now (publishing may move it into the key's old entry). */
int gkv_cluster_commit(gkv_cluster_t *cl, gkv_route_ticket_t *t, uint64_t id, gkv_entry_t *e,
                       unsigned flags, gkv_wr_t *out, int *rc, gkv_entry_t **holder);
/* A SEAL routed LOCAL ran (status rc; key NULL when it could not be kept): its value is
 * recorded as this node's, at the version the route reserved for its event. */
void gkv_cluster_after(gkv_cluster_t *cl, const gkv_request_t *req, gkv_leases_t *leases,
                       int rc, const void *key, size_t klen);
/* Whether a GET or MAP with wait (its route ticket t) must run again rather than park on key
 * (klen bytes): the key was notified (or recorded here) since its read asked the home, or too
 * many keys were to tell. Always false without a cluster. */
bool gkv_cluster_wait_missed(const gkv_cluster_t *cl, const gkv_route_ticket_t *t,
                             const void *key, size_t klen);
/* The cluster version of key's value held here (this node's own, at the version its home
 * recorded, or a replica, at the version it was pulled at), or 0 when none is in the store.
 * GET and MAP replies of a cluster node name it (vversion). 0 without a cluster. */
uint64_t gkv_cluster_value_version(gkv_cluster_t *cl, const void *key, size_t klen);
/* How often a waiting GET or MAP on a cluster node asks the key's home again (a lost
 * notification delays it by at most this much). */
#define GKV_CL_WAIT_RECHECK_MS 1000

/* The connection is closing: forgets what its ticket holds (a job still running finishes
 * without it; the connection waits for that). */
void gkv_cluster_ticket_fini(gkv_cluster_t *cl, gkv_route_ticket_t *t);

/* The home of key (len bytes, borrowed) among the members in force, or NULL with no cluster
 * or no members. Borrowed from cl until the members next change (on the loop). */
const gkv_member_t *gkv_cluster_home(const gkv_cluster_t *cl, const void *key, size_t len);
/* True when this node may serve cluster data now: its lease surely lives, or every member
 * vouched for it lately (etcd unreachable for all of them), and the members in force list it
 * at its current incarnation. */
bool gkv_cluster_live(const gkv_cluster_t *cl);
/* True when m is this node. */
bool gkv_cluster_is_self(const gkv_cluster_t *cl, const gkv_member_t *m);
/* Whether a change of key (klen bytes; kind GKV_EVENT_*) that the store reports now is an event
 * for this node's watchers (docs/handoff.md, "Watches across a cluster"): a change of a value
 * this node owns. Replicas kept, dropped or evicted, and a copy dropped because the key was
 * written on another node, are not. *version gets the key's cluster version of the change (the
 * value published, or the one that went; 0 for a FLUSH and without a cluster). Always true
 * without a cluster. On the loop. */
bool gkv_cluster_reports(const gkv_cluster_t *cl, unsigned kind, const void *key, size_t klen,
                         uint64_t *version);
/* A WATCH of prefix (plen bytes, copied) spanning the cluster: every other member's events
 * (of the values it owns) come to fn(arg, ...) on the loop, from a stream per member that
 * follows the members in force (docs/handoff.md, "Watches across a cluster"). This node's own
 * events are the caller's (as on one node). NULL without a cluster or memory. */
gkv_cl_watch_t *gkv_cluster_watch_open(gkv_cluster_t *cl, const uint8_t *prefix, size_t plen,
                                       gkv_cl_event_fn fn, void *arg);
/* Whether an event of key at version (kind GKV_EVENT_*), this node's or a member's, keeps w's
 * order (guarantee 2 of "Watches across a cluster"): false for one older than an event of the
 * key w delivered (a superseded owner's late event: counted, not delivered). w remembers the
 * versions of the last GKV_CL_WATCH_RECENT keys it delivered versioned events of (by their
 * 64-bit hash, the oldest leaving first; 40 bytes a key, up to 160 KiB): a key that left may
 * have one late event delivered. Version 0 (a FLUSH) is always delivered. */
bool gkv_cluster_watch_fresh(gkv_cl_watch_t *w, unsigned kind, const uint8_t *key, size_t klen,
                             uint64_t version);
#define GKV_CL_WATCH_RECENT 4096
/* Ends w's streams (none calls fn after this) and frees w. NULL allowed. */
void gkv_cluster_watch_close(gkv_cluster_t *cl, gkv_cl_watch_t *w);
/* WATCHes spanning the cluster now, and their streams reading. */
void gkv_cluster_watch_counts(const gkv_cluster_t *cl, uint64_t *watches, uint64_t *streams);
/* INFO's "# Cluster" section into buf (cap bytes). Returns its length or -1 if it does not fit. */
int gkv_cluster_info(const gkv_cluster_t *cl, char *buf, size_t cap);
/* --busy-poll (after gkv_cluster_start, and on reload): each worker pool's idle workers take turns
 * watching their queue for us microseconds after a job before they sleep (work.h), so a job's
 * hand-off costs no thread wake-up (50-150 us on the GPU machines): a 1 GiB remote read 0.72-0.81x
 * -> 0.80-0.83x the peer copy on 2x H200, at the cost of one core per pool while the cluster is
 * busy (RESULTS.md, session 44). A cluster that is not running ignores it. */
void gkv_cluster_set_busy_poll(gkv_cluster_t *cl, uint64_t us);
/* Jobs the worker pools took while watching for them (--busy-poll): INFO and metrics. */
uint64_t gkv_cluster_jobs_watched(gkv_cluster_t *cl);

#endif
