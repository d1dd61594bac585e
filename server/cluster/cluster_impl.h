/* cluster_impl.h: what route.c (the loop's decisions), node.c (requests from other nodes) and
 * jobs.c (the waiting, on worker threads) share. Private to server/cluster/. */
#ifndef GKV_CLUSTER_IMPL_H
#define GKV_CLUSTER_IMPL_H

#include "cluster.h"
#include "node.h"

/* How long a request keeps trying a home that answers BUSY (a write of the key being recorded,
 * or the members changing) before it gives up with UNAVAILABLE. */
#define CL_BUSY_MS 2000
/* After the members change, a home that has no record of a key answers BUSY rather than
 * NOTFOUND for this long: owners are re-registering their keys with their new homes. */
#define CL_SETTLE_MS 1500
/* While etcd does not answer, a node asks every member to vouch for it this often; a round in
 * which all did lets it serve for CL_VOUCH_MS from when the round began. A member that
 * vouched acts on this node's departure only after settling (CL_SETTLE_MS > CL_VOUCH_MS), so
 * the two never overlap. */
#define CL_VOUCH_PERIOD_MS 500
#define CL_VOUCH_MS 1000
/* A read asks the home again when the value changed under it (a replica replaced, our own
 * write superseded); after this many rounds it gives up (UNAVAILABLE). */
#define CL_READ_ROUNDS 8
/* Relayed value bytes go through a buffer of this size (FETCH -> REPLICA). */
#define CL_RELAY_CHUNK (1u << 20)
/* A plain GET of a value at most this large is answered from the fetched bytes at once; the
 * replica is installed after the reply (JOB_INSTALL), off the read's path. */
#define CL_DIRECT_MAX (64u << 10)

enum {
    JOB_READ = 1,  /* make keys' current values local (replicas), or learn they are missing */
    JOB_EXISTS,    /* count which keys exist */
    JOB_GETSIZE,   /* a key's size */
    JOB_DEL,       /* delete keys at their homes */
    JOB_RECORD,    /* a SET's (or SEAL's) value: record this node as its owner at the home */
    JOB_LIST,      /* LIST: ask every home, merge */
    JOB_SIZES,     /* GETSIZE of a prefix: every home's records, summed */
    JOB_DEL_PREFIX,/* DEL of a prefix: every home's records, each deleted at its home */
    JOB_DROP,      /* a home tells the previous owner to drop its copy (nested pool) */
    JOB_REGISTER,  /* tell new homes which keys this node owns (after the members changed) */
    JOB_VOUCH,     /* ask every member to vouch for this node (etcd unreachable) */
    JOB_INSTALL,   /* keep fetched bytes (keys[0].bytes) as a replica here */
    JOB_PULL,      /* READ's keys with new memory (entry): their bytes through NIXL (pull.c) */
    JOB_PLANE,     /* send our PLANE to a member (keys[0]: its address), learn its answer */
    JOB_PLANE_IN,  /* a member's PLANE: load its agent, probe it, answer */
    JOB_STAGE,     /* an owner's STAGE: a chunk of a value (entry) into a reader's arena */
    JOB_NOTIFY,    /* a home tells waiting nodes (keys: one per node, its address) a key was
                    * recorded (waits.c) */
};

/* A READ key's status on its way back to the loop (not a GKV_E* code): pull it through NIXL
 * (the loop gives it memory, then JOB_PULL), or ask its home again. */
#define CL_PULL 1001
#define CL_AGAIN 1002

/* One key a job works on, and what it learned. */
typedef struct {
    uint8_t *key; /* owned by the job */
    uint32_t klen;
    char home_addr[GKV_ADVERTISE_MAX + 1];
    int status; /* 0: found (owner, version, size below), or a GKV_E* code */
    char owner[GKV_NODE_NAME_MAX + 1];
    int64_t owner_inc;
    uint64_t version, size;
    uint64_t have; /* the version of a replica here already (no fetch when it is the one) */
    uint64_t have_size; /* ... and its size (a pull guessed while the home answers) */
    bool known;    /* owner and version came from this node's own records (no LOOKUP) */
    /* READ with direct: the value's bytes and metadata as fetched (owned by the job). */
    bool direct;
    uint8_t *bytes, *meta;
    uint32_t meta_len;
    /* PULL: the new value's memory (one reference, unpublished) and its device; pulled: the
     * bytes came through NIXL (the loop publishes entry as the replica). */
    gkv_entry_t *entry;
    unsigned dev;
    gkv_devptr_t mem;
    bool pulled;
    bool early; /* entry went out in an early frame (ticket's early): publish it by linking */
    bool clearing; /* PULL: entry's clear is queued; the worker tells the loop when it ran */
    /* PULL: the shared lane's mark once entry was allocated and its clear queued (backend.h
     * shared_mark; owned, given back by gkv_cl_job_free), or NULL: the worker's copies and
     * wait then take the whole lane. */
    void *mark;
    /* PULL: bytes landed in the ticket's registered buffer too (j->tee), on the worker. */
    uint64_t teed;
    bool tee_failed;
} cl_key_t;

typedef struct cl_job {
    gkv_job_t job;
    gkv_cluster_t *cl;
    gkv_route_ticket_t *t; /* the connection's ticket; NULL once it went away */
    bool finished;         /* done ran: the ticket's next route takes the outcome */
    int kind, status;
    char msg[192];
    /* The last reply a call had (its slices point here until the job's next call): the
     * connection it came on goes back to others at once (gkv_peer_reply_keep). */
    uint8_t *rhdr;
    size_t rhdr_cap;
    /* Who we are, and the members, as the loop knew them at submit. */
    char self[GKV_NODE_NAME_MAX + 1];
    int64_t self_inc;
    char self_addr[GKV_ADVERTISE_MAX + 1];
    gkv_member_t *members;
    size_t nmembers;
    cl_key_t *keys;
    uint32_t nkeys;
    uint32_t attempts; /* READ: rounds so far (a replica may be replaced meanwhile) */
    uint64_t started_ms; /* VOUCH: monotonic ms when the round began */
    bool direct;         /* READ: a small value may come back as bytes (CL_DIRECT_MAX) */
    bool etcd_seen;      /* VOUCH: a member reaches etcd (so must we, soon) */
    /* RECORD: the value (one reference) and its request; the version the home gave it. */
    gkv_entry_t *entry;
    uint64_t id;
    unsigned flags;
    bool publish; /* a SET: publish entry when recorded; else (SEAL) the request runs on */
    /* DROP: the home's request waiting for it (its key is keys[0]). */
    /* LIST, sizes, prefix deletes: the request, copied. */
    uint8_t *prefix, *cursor;
    uint32_t prefix_len, cursor_len;
    int delim;
    uint64_t limit, req_flags;
    uint64_t count, bytes;
    gkv_wr_t reply; /* the reply a fan-out built (its id is the request's) */
    bool has_reply;
    bool no_nixl; /* READ: a pull through NIXL failed this request: TCP from now on */
    /* PLANE, PLANE_IN, STAGE: the other node (its name and incarnation); STAGE: the chunk
     * (offset, length of the value) and where in the reader's arena it goes. */
    char peer[GKV_NODE_NAME_MAX + 1];
    int64_t peer_inc;
    uint64_t offset, length, arena_off;
    uint64_t staged; /* STAGE: the version sent (asked for, or the one owned: a guess's) */
    unsigned arena_idx;
    uint64_t t_us; /* when made (READ, PULL: the read's start); STAGE: when the loop queued
                    * it, then when its worker ended */
    uint64_t xfer; /* PUSH: the transfer's id (the reader's) */
    uint64_t pull_us; /* PULL: when it was handed to the workers */
    /* PULL of one key for a GET into a registered buffer: the ticket's tee, copied at start. */
    gkv_devptr_t tee;
    uint64_t tee_cap;
    unsigned tee_dev;
    /* PULL: the ticket's early, kept for the message (cleared) its worker posts to the loop
     * once keys[0]'s memory is cleared (pull.c, gkv_cl_offer_cleared). */
    int (*early)(void *conn, gkv_entry_t *e, bool cleared);
    gkv_job_t cleared;
    gkv_workers_t *pool; /* PULL: the workers it runs on (cleared goes there too) */
    /* READ then PULL: the pull's first chunks, asked for by the READ's worker as soon as it
     * knew the owner (gkv_cl_pull_head), taken over by the pull; dropped with the job. */
    struct cl_pull *head;
    uint64_t wait_ms; /* READ: the request waits this long for a missing key (its home notes it) */
    uint64_t wait_after; /* ... or for a version above this one (0: any) */
} cl_job_t;

/* jobs.c: each job kind's run (on a worker) and the shared plumbing. */
void gkv_cl_job_run(gkv_job_t *j);
/* route.c: a job's done (on the loop): hands it to its ticket, or frees it. */
void gkv_cl_job_done(gkv_job_t *j);
/* A job of kind for ticket t (NULL: none), with self and members copied. NULL on no memory. */
cl_job_t *gkv_cl_job_new(gkv_cluster_t *cl, gkv_route_ticket_t *t, int kind);
/* Adds a key (copied) and its home's address. Returns 0 or GKV_ENOMEM. */
int gkv_cl_job_key(cl_job_t *j, const void *key, size_t klen, const gkv_member_t *home);
void gkv_cl_job_free(cl_job_t *j);
/* The member named name (len bytes), or NULL: in the members in force (on the loop), or in
 * a job's copy of them (on its worker). */
const gkv_member_t *gkv_cl_member(const gkv_cluster_t *cl, const void *name, size_t len);
const gkv_member_t *gkv_cl_job_member(const cl_job_t *j, const void *name, size_t len);
/* Drops this node's copy of key (store and copies) as of version upto (the home's record that
 * is dropped or deleted; 0: none known): a write of ours pending at or below it is not
 * published. Returns 1 if it had one. */
int gkv_cl_unlink(gkv_cluster_t *cl, const void *key, size_t klen, uint64_t upto);
/* The same, reporting no event to watchers: the key's value lives on elsewhere (written on
 * another node, or registered newer there). */
int gkv_cl_unlink_quietly(gkv_cluster_t *cl, const void *key, size_t klen, uint64_t upto);
/* The members changed: each WATCH spanning the cluster opens streams to new members and ends
 * those of departed ones (watch.c). */
void gkv_cl_watches_follow(gkv_cluster_t *cl);
/* True when this node's own incarnation is inc (a request naming it as owner). */
int64_t gkv_cl_self_inc(const gkv_cluster_t *cl);
/* route.c's helpers the others share: a count reply, a job queued for ticket t (nested: the
 * home's pool), the members changed lately (records may be on their way), a value owned here. */
void gkv_cl_reply_count(gkv_wr_t *out, uint64_t id, uint64_t count);
void gkv_cl_submit(gkv_cluster_t *cl, gkv_route_ticket_t *t, cl_job_t *j, bool nested);
bool gkv_cl_settling(const gkv_cluster_t *cl);
bool gkv_cl_owned_here(gkv_cluster_t *cl, const void *key, size_t klen);
/* The home record h (of a key homed here) gets owner (a member's name, at incarnation inc) and
 * size, at version v (one gkv_home_next_version gave for h since h last changed), or at a new
 * version when v is 0; returns the version. */
uint64_t gkv_cl_record(gkv_cluster_t *cl, gkv_home_rec_t *h, const char *owner, int64_t inc,
                       uint64_t size, uint64_t v);
/* The version of the replica of key here whose bytes are in the store, or 0 (a record whose
 * bytes went is forgotten); *size (when not NULL) its bytes, 0 with no replica. */
uint64_t gkv_cl_replica_version(gkv_cluster_t *cl, const void *key, size_t klen, uint64_t *size);
/* The store's reclaim hook (store.h): the oldest replica on dev that nothing holds goes
 * (replicas are evicted before anything else, under every policy). */
bool gkv_cl_reclaim(void *arg, unsigned dev);
/* cluster.c: a value of ours was just published, recorded at the home named recorded_at: when
 * the members changed meanwhile and the key's home is another node now, that node learns it
 * now (register_moved), not at the next member change. */
void gkv_cl_published(gkv_cluster_t *cl, const void *key, size_t klen, const char *recorded_at);
/* write.c: a record job's end (publish, reply), and SEAL's routing. */
void gkv_cl_commit_done(cl_job_t *j);
int gkv_cl_route_seal(gkv_cluster_t *cl, gkv_route_ticket_t *t, const gkv_request_t *req,
                      gkv_leases_t *leases, gkv_wr_t *out, int *rc);
/* pull.c: the data plane's NODE requests (PLANE, STAGE, on the loop) and telling new members
 * our plane (after the members changed). Its jobs run functions of its own (job.run). */
int gkv_cl_node_plane(gkv_cluster_t *cl, gkv_route_ticket_t *t, const gkv_request_t *req,
                      const gkv_member_t *from, gkv_wr_t *out, int *rc);
int gkv_cl_node_stage(gkv_cluster_t *cl, gkv_route_ticket_t *t, const gkv_request_t *req,
                      const gkv_member_t *from, gkv_wr_t *out, int *rc);
void gkv_cl_plane_members(gkv_cluster_t *cl);
/* READ's keys to pull (status CL_PULL) get new memory and j becomes a JOB_PULL (submitted for
 * ticket t): true; false when none could (those keys go over TCP: j->no_nixl). */
bool gkv_cl_pull_start(gkv_cluster_t *cl, gkv_route_ticket_t *t, cl_job_t *j);
/* A JOB_PULL ended: the keys pulled become replicas here. */
void gkv_cl_pull_done(gkv_cluster_t *cl, cl_job_t *j);
/* pull_chunks.c: n bytes at p (borrowed) in new memory (the caller frees it; at least one byte
 * is allocated), or NULL when out of memory. Any thread. */
uint8_t *gkv_cl_dup_bytes(const void *p, size_t n);
/* pull_chunks.c, on a pull's worker: the value's metadata in the owner's answer r (borrowed),
 * copied into k (the replica gets it). */
void gkv_cl_keep_meta(cl_key_t *k, const gkv_response_t *r);
/* pull_chunks.c, on a pull's worker once its first requests are out: when gkv_cl_pull_start
 * queued a clear of k's memory (k->clearing), waits for it (be: the backend of k's device; the
 * owner meanwhile stages the first chunks) and tells the loop, which offers the memory to the
 * MAP waiting for it (before the job's done). */
void gkv_cl_offer_cleared(cl_job_t *j, cl_key_t *k, gkv_backend_t *be);
/* pull_chunks.c, on a pull's worker: len bytes of k's value at off, landed in the arena at src
 * (backend be's), copied into k->mem (after k->mark) and, for a GET into a registered buffer,
 * into the buffer too (j->tee; a failure there only stops the tee: the GET copies instead).
 * Returns 0 or GKV_EIO. */
int gkv_cl_land(cl_job_t *j, cl_key_t *k, gkv_backend_t *be, uint64_t off, void *src, size_t len);
/* pull_chunks.c, on a pull's worker: k's value through NIXL into k->mem, chunk by chunk
 * (STAGE), taking over the READ's head start (j->head) when there is one. owner borrowed.
 * Returns 0, CL_AGAIN (the owner does not hold that version now), or another code with j->msg
 * (the caller falls back to TCP). */
int gkv_cl_pull_chunks(cl_job_t *j, cl_key_t *k, const gkv_member_t *owner);
/* On a READ's worker, k (of j's one key) just found to be pulled from owner: asks owner for
 * the first chunks now, into slots free at once, so that they come while the loop gives the
 * value its memory (j->head, owned by j: the pull takes it over, gkv_cl_job_free drops it).
 * Only a node of one device, STAGE mode, and unless GPUKV_NIXL_HEAD=0; nothing when no slot
 * is free. j, k and owner are borrowed for the call. */
void gkv_cl_pull_head(cl_job_t *j, cl_key_t *k, const gkv_member_t *owner);
/* On the loop, as a READ of one key is submitted: what its worker would ask first, asked now
 * so that the owner stages while the worker wakes (100-250 us on the GPU machines, RESULTS.md
 * session 44): the head start from owner m (guess false: the loop's own record named it) or
 * the guess asked of home m, with idle connections only (none: the worker makes it as
 * before). j, k and m borrowed. */
void gkv_cl_pull_ahead(cl_job_t *j, cl_key_t *k, const gkv_member_t *m, bool guess);
/* jobs.c, on the loop: gkv_cl_pull_ahead for j (submitted next) when its one key is read
 * through NIXL, under the conditions its worker's read_key checks, and no other pull is under
 * way. GPUKV_NIXL_AHEAD=0 turns it off (measurements). */
void gkv_cl_read_ahead(cl_job_t *j);
/* On a READ's worker, before its home is asked where k is: when this node holds a replica of
 * k larger than CL_DIRECT_MAX, asks the home, guessed to be the owner, for the first chunks
 * of whatever version it owns now (STAGE with vversion 0), sized as that replica (j->head, a
 * guess). The home's answer then confirms it (gkv_cl_pull_confirm); a chunk of another
 * version is asked again (pull_chunks.c). Same conditions as gkv_cl_pull_head, and never for
 * a read that may wait at the home (its slots would be held while it waits). */
void gkv_cl_pull_guess(cl_job_t *j, cl_key_t *k, const gkv_member_t *home);
/* On a READ's worker, k to be pulled from owner (k->version, k->size from the home): a guessed
 * head start that went to another node is ended here (its answer awaited: a node that owns
 * no version refuses at once) and a head start made as gkv_cl_pull_head does; one from the
 * owner is kept (a size other than the guess's: the pull ends it). */
void gkv_cl_pull_confirm(cl_job_t *j, cl_key_t *k, const gkv_member_t *owner);
/* A head start the pull never took over (the job went another way): its answers awaited and
 * its slots given back on a worker of cl->pulls (at once, on the loop, once those workers are
 * stopping: shutdown only). On the loop; u is owned by the callee (freed when done). */
void gkv_cl_pull_drop(gkv_cluster_t *cl, struct cl_pull *u);
/* e (unpublished, of key) kept as the replica of key at version v, unless a value of this
 * node's took the key meanwhile; flags: 0 or GKV_PUBLISH_LINK (store.h). Returns true when
 * kept. */
bool gkv_cl_keep_replica(gkv_cluster_t *cl, gkv_entry_t *e, const void *key, size_t klen,
                         uint64_t v, unsigned flags, gkv_entry_t **holder);
/* jobs.c's TCP fetch of k's value (version k->version) from owner, relayed into a replica:
 * the fallback of a pull. Returns 0, CL_AGAIN (the owner moved on) or a code. */
int gkv_cl_fetch_tcp(cl_job_t *j, cl_key_t *k, const gkv_member_t *owner);

/* waits.c: waits across a cluster (docs/handoff.md). A home notes that from waits wait_ms
 * for key (no record of it now); a record of key made here (version) notifies the nodes that
 * wait and this node's own waiters; a NOTIFY from a home (or a record here) wakes this node's
 * waiters of key and is remembered for gkv_cluster_wait_missed; the tick drops expired
 * interests; fini frees them. */
void gkv_cl_waits_note(gkv_cluster_t *cl, const void *key, size_t klen, const gkv_member_t *from,
                       uint64_t wait_ms);
void gkv_cl_waits_recorded(gkv_cluster_t *cl, const void *key, size_t klen, uint64_t version);
void gkv_cl_waits_notified(gkv_cluster_t *cl, const void *key, size_t klen);
void gkv_cl_waits_expire(gkv_cluster_t *cl);
void gkv_cl_waits_fini(gkv_cluster_t *cl);

/* Answers a NODE request (node.c). */
int gkv_cl_node(gkv_cluster_t *cl, gkv_route_ticket_t *t, const gkv_request_t *req,
                gkv_wr_t *out, int *rc);
/* LIST over sorted (key, size) pairs with LIST's rules (prefix, delimiter, cursor, limit):
 * writes entries, dirs and cursor into w (a started reply frame). */
typedef struct {
    const uint8_t *key;
    uint32_t klen;
    uint64_t size;
    bool dir;
} cl_item_t;
void gkv_cl_list_write(gkv_wr_t *w, cl_item_t *items, size_t n, const uint8_t *prefix,
                       size_t plen, int delim, const uint8_t *cursor, size_t clen,
                       uint64_t limit, bool more_elsewhere);
/* Sorts items by key. */
void gkv_cl_items_sort(cl_item_t *items, size_t n);

#endif
