/* plane.h: the data plane between cluster nodes through NIXL (docs/cluster.md, "Data plane"):
 * this node's agent, its transfer arenas (one per device of the store, registered with NIXL
 * once at start) and what it knows of every other node's plane: whether NIXL reaches it, its
 * agent and its arenas. Values never leave their pools for NIXL: an owner copies a chunk of
 * the value into a slot of its arena and writes it into a slot of the reader's arena, and the
 * reader copies it into the value's new memory (backend.h arena_copy), while the next chunks
 * are on their way. Where NIXL is missing or no zero-copy path joins two nodes, the cluster's
 * TCP path is used, and the reason is kept for INFO and the log. Thread-safe. */
#ifndef GKV_PLANE_PLANE_H
#define GKV_PLANE_PLANE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "nixl_agent.h"
#include "node.h"
#include "slots.h"

/* A chunk (an arena slot) is the arena's 1/16th, within these bounds (measured on two H200s
 * over NVLink: 32 MiB to 128 MiB chunks all ran at 0.37-0.44x the peer copy, 16 MiB at 0.22x;
 * 1/16th of the default 1 GiB arena leaves 16 slots for concurrent reads). */
#define GKV_PLANE_SLOT_MIN (1u << 20)
#define GKV_PLANE_SLOT_MAX (256u << 20)
/* How many chunks one read keeps in flight: at most GKV_PLANE_DEPTH_MAX (and at most a fair
 * share of the arena); the default is plane.depth. */
#define GKV_PLANE_DEPTH_MAX 32
#define GKV_PLANE_DEPTH 4
/* An owner sends a chunk in this many parts at most (plane.parts, 1 by default: GPUKV_NIXL_PARTS
 * for measurements): the copy of each part into its slot overlaps the write of the one before. */
#define GKV_PLANE_PARTS_MAX 8
#define GKV_PLANE_PEER_NAME 64

typedef struct {
    gkv_backend_t *be; /* borrowed: the store's device */
    void *addr;
    uint64_t size;
    int mem;      /* GKV_NIXL_DRAM / GKV_NIXL_VRAM */
    uint64_t dev; /* NIXL's device id: the CUDA ordinal, 0 for host memory */
    gkv_slots_t slots;
} gkv_plane_arena_t;

/* Slot i's offset in arena a (what another node's transfers into that slot name). */
static inline uint64_t gkv_plane_slot_off(const gkv_plane_arena_t *a, uint32_t i)
{
    return (uint64_t)(gkv_slot_addr(&a->slots, i) - (uint8_t *)a->addr);
}

/* Another node's arena, as its PLANE said. */
typedef struct {
    uint64_t addr, size, slot_size, dev;
    int mem;
} gkv_plane_remote_t;

enum { GKV_PLANE_UNKNOWN = 0, GKV_PLANE_NIXL, GKV_PLANE_TCP };

typedef struct {
    char node[GKV_PLANE_PEER_NAME + 1];
    int64_t inc;
    int state;            /* for reads from this node (it writes to us): GKV_PLANE_* */
    char agent[128];      /* its agent, loaded here ("" until its PLANE came) */
    gkv_plane_remote_t arenas[GKV_MAX_DEVICES];
    unsigned narenas;
    char why[192];        /* TCP: why */
    bool asked;           /* our PLANE to it is out or done */
} gkv_plane_peer_t;

typedef struct {
    const char *nixl;     /* --nixl: "off", "auto" or a path */
    uint64_t arena_size;  /* per device; 0: 1 GiB on GPUs, 64 MiB on the host backend */
    gkv_backend_t **bes;  /* the store's devices, borrowed */
    unsigned nbes;
    const char *agent;    /* this node's agent name (unique: node name and a random number) */
} gkv_plane_cfg_t;

/* One side of a PUSH (an owner streaming a value into a reader's slots): what the other side's
 * notifications said so far. */
typedef struct gkv_plane_box {
    uint64_t id;     /* the transfer's id (the reader's) */
    uint64_t n;      /* chunks */
    uint8_t *landed; /* reader: chunk i is in its slot */
    uint64_t freed;  /* owner: chunks the reader copied out of its slots (in order) */
    struct gkv_plane_box *next;
} gkv_plane_box_t;

typedef struct {
    bool on;          /* NIXL loaded, agent and arenas registered */
    bool opened;      /* gkv_plane_open ran (gkv_plane_close undoes it once) */
    unsigned depth;   /* chunks one read keeps in flight */
    unsigned parts;   /* parts an owner sends a chunk in */
    char why[256];    /* off: why */
    gkv_nixl_api_t api;
    gkv_nixl_agent_t agent;
    gkv_plane_arena_t arena[GKV_MAX_DEVICES];
    unsigned narenas;
    pthread_mutex_t lock; /* peers */
    gkv_plane_peer_t *peers;
    size_t npeers, cap;
    _Atomic uint64_t reads, read_bytes;   /* remote reads that came through NIXL, bytes */
    _Atomic uint64_t fallbacks;           /* reads that fell back to TCP after NIXL failed */
    /* Pulls whose first chunks their READ asked for (gkv_cl_pull_head), and of them those
     * whose pull never ran (the requests awaited and the slots given back). */
    _Atomic uint64_t head_starts, heads_dropped;
    /* Head starts asked of a key's home before it answered (gkv_cl_pull_guess: a replica of
     * it here), and chunks of such a guess asked again (the owner held another version). */
    _Atomic uint64_t head_guesses, guesses_missed;
    /* Of the head starts and guesses, those the loop asked for as it queued the READ
     * (gkv_cl_pull_ahead). */
    _Atomic uint64_t heads_ahead;
    /* Pulls that landed their value in a GET's registered buffer too (gkv_cl_land). */
    _Atomic uint64_t tees;
    _Atomic uint64_t chunks_sent, bytes_sent; /* chunks written to readers through NIXL */
    _Atomic uint64_t probes_failed;
    /* Where the time goes (microseconds, summed over threads): an owner's copies into its
     * arena and its NIXL writes; a reader's waits for chunks and its copies out of its arena. */
    _Atomic uint64_t send_copy_us, send_write_us, pull_wait_us, pull_copy_us;
    _Atomic uint64_t pull_us; /* a reader's pulls, first request to last byte in its memory */
    /* An owner's STAGE: waiting for a worker after the loop took it, and from the worker's end
     * to the reply being written on the loop. */
    _Atomic uint64_t stage_queue_us, stage_reply_us;
    /* A reader's reads through NIXL: from the request's READ job to the replica kept (LOOKUP,
     * memory, the pull, publishing), and a pull's wait for a worker. */
    _Atomic uint64_t read_us, pull_queue_us;
    /* PUSH: the transfers in flight here, and the notifications that arrive for them. */
    pthread_mutex_t box_lock;
    gkv_plane_box_t *boxes;
    uint64_t id_salt;
    _Atomic uint64_t next_id;
    bool push;        /* pulls ask owners to PUSH (GPUKV_NIXL_MODE=push), else STAGE per chunk */
    bool head_start;  /* a READ asks for a pull's first chunks (GPUKV_NIXL_HEAD=0: not) */
    bool guess;       /* ... even before the home answered (GPUKV_NIXL_GUESS=0: not) */
    bool ahead;       /* ... the loop asks for them as it queues the READ (GPUKV_NIXL_AHEAD=0) */
    unsigned guess_lead_ms; /* a guess's READ waits this long before asking the home (0; for
                             * tests: GPUKV_NIXL_GUESS_LEAD_MS, so a write lands in between) */
    unsigned own;     /* PUSH: an owner's slots per transfer (its writes in flight) */
} gkv_plane_t;

/* The little-endian u64s of PLANE's arenas, PUSH's slots and notifications. */
static inline void gkv_le64_put(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint64_t gkv_le64_get(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Monotonic microseconds, for the counters above. */
uint64_t gkv_plane_now_us(void);

/* Loads NIXL (unless cfg->nixl is "off"), creates the agent and registers an arena per
 * device. Never fails the daemon: p->on says whether the plane runs, p->why why not.
 * Returns 0 or GKV_ENOMEM. */
int gkv_plane_open(gkv_plane_t *p, const gkv_plane_cfg_t *cfg);
void gkv_plane_close(gkv_plane_t *p);

/* This node's PLANE fields: the agent's metadata and the arenas. Returns 0 or GKV_EIO. md is
 * malloc'd (the caller frees it); arenas holds GKV_PLANE_ARENA_REC bytes per arena. */
int gkv_plane_hello(gkv_plane_t *p, void **md, size_t *md_len, uint8_t *arenas, size_t *alen);
/* A PLANE from node (inc): loads its agent, keeps its arenas and probes a NIXL write into
 * its first arena. Returns 0 (NIXL works towards it) or a code with why (cap bytes). On a
 * worker thread. */
int gkv_plane_take_hello(gkv_plane_t *p, const char *node, int64_t inc, const void *md,
                         size_t md_len, const uint8_t *arenas, size_t alen, char *why,
                         size_t cap);
/* Our PLANE to node was answered: reads from it go through NIXL (ok) or TCP (why). */
void gkv_plane_set_state(gkv_plane_t *p, const char *node, int64_t inc, bool ok, const char *why);
/* True the first time it is called for node at inc: our PLANE should go to it. On the loop,
 * when members change. */
bool gkv_plane_ask(gkv_plane_t *p, const char *node, int64_t inc);
/* True when reads from node at inc take NIXL (its PLANE answered so). Any thread. */
bool gkv_plane_reads_nixl(gkv_plane_t *p, const char *node, int64_t inc);
/* Forgets the nodes that are not in names/incs (n of them): they left. */
void gkv_plane_keep_only(gkv_plane_t *p, const char *const *names, const int64_t *incs, size_t n);
/* Where a STAGE from node writes (its arena idx, at off, len bytes): *raddr etc. Returns 0, or
 * GKV_EINVAL when that is not inside an arena it told us of, or GKV_EUNAVAILABLE when its
 * agent is not loaded here. agent (cap bytes) gets its agent's name. */
int gkv_plane_dest(gkv_plane_t *p, const char *node, int64_t inc, unsigned idx, uint64_t off,
                   uint64_t len, gkv_plane_remote_t *dst, char *agent, size_t cap);
/* The chunk size reads from node use: the smaller of its arenas' slot and ours (dev). */
uint64_t gkv_plane_chunk(gkv_plane_t *p, const char *node, unsigned dev);
/* Owner side, on a worker: copies len bytes of value memory (be, v, off) into a slot of our
 * arena dev and writes them to agent's memory at dst + doff. Returns 0, GKV_EUNAVAILABLE
 * (no slot or the transfer did not finish in time) or GKV_EIO, with why. */
int gkv_plane_send(gkv_plane_t *p, unsigned dev, gkv_devptr_t v, uint64_t off, uint64_t len,
                   const char *agent, const gkv_plane_remote_t *dst, uint64_t doff,
                   int timeout_ms, char *why, size_t cap);
/* PUSH. A reader opens a box for a new transfer id (n chunks), waits for chunk i to land in its
 * slot (wait_landed: 0, or GKV_EUNAVAILABLE after timeout_ms or when stop(arg) says so), and
 * tells the owner each chunk it copied out (gkv_plane_freed). An owner sends a whole value
 * (gkv_plane_push). Boxes: NULL on no memory. */
uint64_t gkv_plane_new_id(gkv_plane_t *p);
gkv_plane_box_t *gkv_plane_box_open(gkv_plane_t *p, uint64_t id, uint64_t n);
void gkv_plane_box_close(gkv_plane_t *p, gkv_plane_box_t *b);
int gkv_plane_wait_landed(gkv_plane_t *p, gkv_plane_box_t *b, uint64_t i, int timeout_ms,
                          bool (*stop)(void *arg), void *arg);
int gkv_plane_freed(gkv_plane_t *p, const char *agent, uint64_t id, uint64_t i);
/* Owner side, on a worker: the len bytes of value memory (be of arena dev, v) into the reader's
 * slots (dst's arena at offsets slot_offs[nslots], chunk bytes each, chunk i into slot i %
 * nslots), a slot reused once the reader said it copied the chunk before out. Each chunk is
 * staged in one of two slots of our arena, its copy overlapping the write before it. Returns
 * 0, GKV_EUNAVAILABLE (a wait ran past timeout_ms) or GKV_EIO, with why. */
int gkv_plane_push(gkv_plane_t *p, unsigned dev, gkv_devptr_t v, uint64_t len, uint64_t chunk,
                   const char *agent, const gkv_plane_remote_t *dst, const uint64_t *slot_offs,
                   uint32_t nslots, uint64_t id, int timeout_ms, char *why, size_t cap);
/* Writes INFO lines (data_plane, nixl, arenas, counters) into buf. Returns its length or -1. */
int gkv_plane_info(gkv_plane_t *p, char *buf, size_t cap);
/* How many other nodes reads take NIXL from, and TCP; the arenas' slots in use and retired. */
void gkv_plane_counts(gkv_plane_t *p, uint64_t *nixl, uint64_t *tcp, uint64_t *in_use,
                      uint64_t *retired);
/* A member's plane in a word, for INFO's member lines: "nixl", "tcp" or "unknown". */
const char *gkv_plane_word(gkv_plane_t *p, const char *node, int64_t inc);

#endif
