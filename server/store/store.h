/* store.h: entries (one stored value each), the index that names them, and memory accounting.
 * An entry and its index node (with the key) are one allocation. Entries are refcounted: +1
 * while linked in the index, +1 for each transfer or lease using it; the backend memory and the
 * entry itself are freed only when the count reaches zero, so a delete or overwrite never pulls
 * memory out from under a transfer in flight. */
#ifndef GKV_SERVER_STORE_H
#define GKV_SERVER_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "evict.h"
#include "hostcopy.h"
#include "index.h"
#include "ttl.h"

/* What few entries have: a deadline (TTL) and metadata. (Export data is the backend's to
 * remember: backend.h.) */
typedef struct {
    uint64_t expire_at; /* the store clock's millisecond the key expires at; 0: never */
    uint32_t heap_pos;  /* in the store's TTL heap, while linked with a deadline (ttl.h) */
    uint32_t meta_len;
    uint8_t meta[];
} gkv_extras_t;

/* 32 bytes, a key's whole cost in the store beside the index (S4 counts every byte per key):
 * the device shares size's word, since no value comes near 2^56 bytes (max-value-size is at most
 * a device's memory). */
typedef struct gkv_entry {
    uint32_t refs;
    uint32_t access;    /* when last read or written, for eviction (evict.h) */
    uint64_t size : 56; /* bytes */
    uint64_t dev : 8;   /* the store's device whose memory mem is (moves with mem) */
    gkv_devptr_t mem;   /* unset when size is 0 */
    gkv_extras_t *x;    /* owned, NULL without metadata */
} gkv_entry_t;
_Static_assert(sizeof(gkv_entry_t) == 32, "an entry stays 32 bytes (S4)");

/* One device's share: its backend and what its values may take. */
typedef struct {
    gkv_backend_t *be;     /* borrowed */
    uint64_t used;         /* bytes of values in its memory, published or being written */
    uint64_t limit;        /* its --maxmemory */
    uint64_t linked_bytes; /* of them, linked under keys */
    uint64_t keys;         /* keys whose value is on it */
    uint64_t oom_errors;   /* new values refused for want of room on it */
} gkv_store_dev_t;

/* Whether size bytes fit in d's free room now (nothing is made). */
static inline bool gkv_store_dev_fits(const gkv_store_dev_t *d, uint64_t size)
{
    return d->used <= d->limit && size <= d->limit - d->used;
}

typedef struct {
    uint64_t hits, misses, sets, dels, oom_errors;
    uint64_t evicted; /* keys evicted to make room (--maxmemory-policy) */
    uint64_t expired; /* keys gone at their deadline */
    uint64_t demoted, demoted_bytes;   /* values moved one tier down (device -> host -> disk) */
    uint64_t promoted, promoted_bytes; /* values moved one tier up (to a device, disk to host) */
    uint64_t promote_errors;           /* reads of a tier's value that found no room */
    uint64_t tier_dropped;             /* values whose disk copy could not be read back */
    uint64_t disk_reloaded;            /* values the disk tier brought back at start */
    /* The copies between a GPU and the host tier alone (tier.c): bytes and microseconds spent
     * copying down (GPU to host) and up (host to GPU), for their throughput (INFO); and the
     * copies to and from the disk tier (from either tier above it). */
    uint64_t down_host_bytes, down_host_us, up_host_bytes, up_host_us;
    uint64_t down_disk_bytes, down_disk_us, up_disk_bytes, up_disk_us;
} gkv_store_stats_t;

/* Tiers below the devices (docs/tiers.md): the host tier, then the disk tier, hold values that
 * had to leave a device (its policy chose them) instead of losing them. They live in the
 * store's dev[] after the devices, at these ordinals, which entries' dev names; device loops
 * (0..ndev) never see them. Their bytes are reachable only through gkv_store_promote: a value
 * in a tier is in no device's memory, copy lanes or exports. */
#define GKV_DEV_HOST_TIER GKV_MAX_DEVICES
#define GKV_DEV_DISK_TIER (GKV_MAX_DEVICES + 1)

typedef struct {
    gkv_index_t *ix;
    gkv_store_dev_t dev[GKV_MAX_DEVICES + 2]; /* the devices, then the two tiers */
    unsigned ndev;
    bool host_tier; /* dev[GKV_DEV_HOST_TIER] is set up (gkv_store_add_tier) */
    bool disk_tier; /* dev[GKV_DEV_DISK_TIER] is set up (gkv_store_add_disk_tier) */
    /* The host tier's memory being page-locked for the GPUs' copies (tier_pin.h), NULL where
     * the devices' backend needs none (host). */
    struct gkv_tier_pin *tier_pin;
    /* --tier-promote-on-get: a GET of a value in a tier brings it up to a device (true), or is
     * answered from the host tier (false, the default: gkv_store_get_readable). */
    bool promote_on_get;
    /* Totals over the devices. */
    uint64_t used;         /* bytes of values, published or being written */
    uint64_t limit;        /* --maxmemory */
    uint64_t entries;      /* entries alive, published or not */
    uint64_t linked_bytes; /* sizes of the values linked under keys: GETSIZE of all keys */
    /* Host memory of keys and metadata: what entries alive cost (an estimate per entry from
     * its key and metadata lengths, so that freeing subtracts what adding added) and the
     * index's table, against host_limit (--maxmemory-keys; 0: none). */
    uint64_t host_bytes;
    uint64_t host_limit;
    gkv_policy_t policy; /* --maxmemory-policy */
    /* NULL, or: asked before any eviction (under every policy, noeviction included) when a
     * new value needs room on device dev: frees one value the layer above holds only as a
     * cache (a cluster's replica) and returns true, or false when it has none to give. */
    bool (*reclaim)(void *arg, unsigned dev);
    void *reclaim_arg;
    /* NULL, or: asked when nothing on device dev could be moved down or evicted: starts the
     * copies of values already answered and lets go of the references that copies which have
     * run still hold (batch.h), returning true when it did (the store then looks again). Calls
     * nothing of the store's back. */
    bool (*release)(void *arg, unsigned dev);
    void *release_arg;
    /* Called while listeners > 0 (the net layer's watches, watch.h, and requests waiting for a
     * key to exist, keywait.h) after each change: kind GKV_EVENT_* (SET: a value was published,
     * so the key exists), the key (borrowed for the call; none for FLUSH), the value's size (0
     * when it went), the change's number (changes, below) and, with versions, the key's version
     * (of the value published, or of the one that went; else 0). Moves between devices and
     * tiers change no value and are no change. */
    void (*changed)(void *arg, unsigned kind, const uint8_t *key, size_t klen, uint64_t size,
                    uint64_t seq, uint64_t version);
    void *changed_arg;
    uint64_t listeners;
    uint64_t changes; /* values published, deleted, expired, evicted, and flushes, so far */
    /* --key-versions: each value published gets a version, version_base + changes at its
     * publication (8 bytes after its entry, in the index node); version_base is the wall
     * clock's milliseconds << 20 at start, so versions keep growing across restarts. */
    bool versions;
    uint64_t version_base;
    uint64_t now_ms;     /* the clock access stamps use: the server sets it per request */
    uint64_t rng;        /* xorshift64 for LFU's counter */
    gkv_ttl_heap_t ttl;  /* the linked entries that have a deadline */
    gkv_hostcopy_t hc;   /* host copies of small values (hostcopy.h); budget 0 until set */
    gkv_store_stats_t stats;
    /* The index log that a successor replays after a crash (journal.h), borrowed, or NULL:
     * every link, unlink, deadline change and flush is appended as it happens. */
    struct gkv_journal *journal;
    /* With a journal: value memory freed while the journal's last records wait to commit
     * (journal.h, pins). The committed journal may still name it (a key deleted or overwritten
     * by a record not yet committed), so it is not reused until the record past it commits:
     * a successor never finds another value's bytes under a key. In the order freed. */
    struct gkv_limbo *limbo;
    size_t nlimbo, limbo_head, limbo_cap;
    uint64_t limbo_bytes;
} gkv_store_t;

/* Sets up an empty store over be (borrowed, must outlive the store), its device 0, whose values
 * may take limit bytes. Returns 0 or GKV_ENOMEM. */
int gkv_store_init(gkv_store_t *st, gkv_backend_t *be, uint64_t limit);
/* Adds a device (be borrowed, must outlive the store) whose values may take limit bytes.
 * Returns its ordinal in the store, or GKV_EINVAL when GKV_MAX_DEVICES are there. */
int gkv_store_add_device(gkv_store_t *st, gkv_backend_t *be, uint64_t limit);
/* The backend of e's memory. */
gkv_backend_t *gkv_store_be(const gkv_store_t *st, const gkv_entry_t *e);
/* Where a new value of size bytes for key goes when the request names no device: the device of
 * the key's current value (not a tier's) when size fits there (within its limit, or with an evicting policy
 * up to its limit), else the device with the most room (limit - used), the lowest on ties. */
unsigned gkv_store_place(gkv_store_t *st, const void *key, size_t klen, uint64_t size);
/* Drops every key and frees the index; entries still referenced elsewhere must be unref'd
 * before the backend closes. */
void gkv_store_fini(gkv_store_t *st);
/* Appends a PUT to j (not the store's own journal: a rewrite) for every live linked key.
 * Returns 0, or GKV_ESYS when j broke. */
int gkv_store_journal_all(gkv_store_t *st, struct gkv_journal *j);
/* Frees the memory held back for the journal (limbo) that its committed length now covers,
 * all of it when no journal is attached. Call when the committed length advances. */
void gkv_store_journal_committed(gkv_store_t *st);

/* Makes an unpublished entry for key (copied) of size bytes (accounted at once) on device dev
 * (< ndev) with a copy of meta (borrowed), allocated on copy lane `lane` (GKV_LANE_SHARED for
 * memory handed to another process, usable once the backend's fence_shared has reported). When
 * size does not fit under dev's limit (or its backend is full), the policy may evict keys on dev
 * first (evict.h); nothing spills to another device. *out holds one
 * reference, the caller's. Returns 0, GKV_EOOM (over the limit or the backend is full and
 * nothing, or nothing more, could be evicted: nothing else stored is touched) or GKV_ENOMEM
 * (host memory, or keys and metadata over host_limit: see gkv_store_host_room). */
int gkv_store_entry_new(gkv_store_t *st, unsigned dev, const void *key, size_t klen, uint64_t size,
                        const void *meta, uint32_t meta_len, int lane, gkv_entry_t **out);
/* Gives the unpublished e a copy of meta (borrowed; none when meta_len is 0) in place of its
 * metadata (SEAL's), keeping its deadline. Value memory stays. Returns 0 or GKV_ENOMEM (no host
 * memory, or over host_limit: e unchanged). */
int gkv_store_entry_renew(gkv_store_t *st, gkv_entry_t *e, const void *meta, uint32_t meta_len);
/* Drops e's metadata and deadline (a spare: an older value that will take the key's next one).
 * Returns 0 or GKV_ENOMEM. */
int gkv_store_entry_reset(gkv_store_t *st, gkv_entry_t *e);
/* True when an entry with a klen-byte key and meta_len bytes of metadata fits host_limit. */
bool gkv_store_host_room(const gkv_store_t *st, size_t klen, uint32_t meta_len);
/* Host bytes of keys, metadata and the index (INFO key_memory). */
uint64_t gkv_store_host_memory(const gkv_store_t *st);
void gkv_store_ref(gkv_entry_t *e);
/* Drops a reference; the last one frees the memory, the accounting and the entry. */
void gkv_store_unref(gkv_store_t *st, gkv_entry_t *e);
/* The entry's key (borrowed, lives as long as the entry). */
const uint8_t *gkv_store_key(const gkv_store_t *st, const gkv_entry_t *e, size_t *len);
/* The entry's metadata, or NULL with *len = 0. */
const uint8_t *gkv_entry_meta(const gkv_entry_t *e, uint32_t *len);

/* publish's flag (beside GKV_SET_NX / GKV_SET_XX): e itself is linked, never moved into the
 * key's entry, so the value stays in the entry whose leases other connections hold (an early
 * MAP's, net/keywait.h). */
#define GKV_PUBLISH_LINK 0x100u
/* Publishes e's value under e's key. flags: GKV_SET_NX / GKV_SET_XX, GKV_PUBLISH_LINK. The
 * caller keeps its reference on e either way. If the key's current entry is used by nothing
 * but the index (and no GKV_PUBLISH_LINK), the
 * new value moves into it and e keeps the old value (freed with e); otherwise e is linked (the
 * index takes a reference) and the old entry's index reference is dropped. Readers see the old
 * value or the new one, never a mix. *holder (when not NULL) gets the entry that holds the new
 * value now (e or the key's old entry), borrowed. Returns 0, GKV_EEXISTS, GKV_ENOTFOUND or
 * GKV_ENOMEM. */
int gkv_store_publish(gkv_store_t *st, gkv_entry_t *e, unsigned flags, gkv_entry_t **holder);
/* The entry under key, borrowed (ref it to keep it past the current callback), or NULL; a read:
 * counted as a hit or miss and stamped for eviction. A key past its deadline is expired here
 * (every lookup does so: an expired key is gone for every command). */
gkv_entry_t *gkv_store_get(gkv_store_t *st, const void *key, size_t klen);
/* The same without counting or stamping (EXISTS, NX/XX, GETSIZE, TTL). */
gkv_entry_t *gkv_store_find(gkv_store_t *st, const void *key, size_t klen);
/* Gives every value published from now on a version (store fields versions, version_base;
 * gkv_store_version). Only on an empty store (the index is made anew with room for it).
 * Returns 0, GKV_EINVAL (keys there already) or GKV_ENOMEM (nothing changed). */
int gkv_store_keep_versions(gkv_store_t *st);
/* The version of e's value (published), or 0 without versions: 8 bytes after the entry in its
 * index node (gkv__store_set_version writes them). */
static inline uint64_t gkv_store_version(const gkv_store_t *st, const gkv_entry_t *e)
{
    return st->versions ? *(const uint64_t *)(const void *)(e + 1) : 0;
}
/* False for a linked entry past its deadline that is not expired yet (walks skip it). */
bool gkv_store_alive(const gkv_store_t *st, const gkv_entry_t *e);
/* Unlinks key; returns 1 if it existed, else 0. */
int gkv_store_del(gkv_store_t *st, const void *key, size_t klen);

/* TTLs: deadlines in the store clock (now_ms). */
/* e's deadline in Unix milliseconds (0: none), now_unix_ms being the wall clock now: deadlines
 * leave the process (snapshots, the journal) as wall-clock times. */
uint64_t gkv_store_deadline_unix(const gkv_store_t *st, const gkv_entry_t *e, uint64_t now_unix_ms);
/* Keys past their deadline that LIST and GETSIZE expire before they walk. */
#define GKV_REAP_BEFORE_WALK 4096u
/* Gives an unpublished entry a deadline ttl_ms (> 0) from now, kept when it is published.
 * Returns 0 or GKV_ENOMEM. */
int gkv_store_entry_ttl(gkv_store_t *st, gkv_entry_t *e, uint64_t ttl_ms);
/* EXPIRE: key's deadline becomes ttl_ms (> 0) from now. Returns 1, 0 (no such key) or
 * GKV_ENOMEM. */
int gkv_store_expire(gkv_store_t *st, const void *key, size_t klen, uint64_t ttl_ms);
/* PERSIST: key keeps no deadline. Returns 1 (it had one), 0 (it had none) or GKV_ENOTFOUND. */
int gkv_store_persist(gkv_store_t *st, const void *key, size_t klen);
/* TTL: the milliseconds key has left in *left (UINT64_MAX: no deadline). Returns 0 or
 * GKV_ENOTFOUND. */
int gkv_store_ttl(gkv_store_t *st, const void *key, size_t klen, uint64_t *left);
/* Active expiry: expires up to limit keys whose deadline has passed, earliest first. Returns
 * how many. */
uint32_t gkv_store_reap(gkv_store_t *st, uint32_t limit);
/* The earliest deadline of any key, or 0 when none has one. */
uint64_t gkv_store_next_deadline(const gkv_store_t *st);
/* Unlinks every key. */
void gkv_store_flush(gkv_store_t *st);

/* Tiers (tier.c, docs/tiers.md). Without a tier the store evicts as evict.h says. With tiers, a
 * device that needs room (entry_new) moves values to the tier below it instead (the host tier,
 * else the disk tier), one at a time in the policy's order (LRU, or LFU under allkeys-lfu;
 * under noeviction and the volatile policies too, since nothing is lost): only values nothing
 * but the index holds (refs == 1), after the layer above's cache (reclaim). A tier makes room
 * the same way (the host tier into the disk tier); the last one evicts under an evicting policy
 * and refuses under noeviction: the write then gets OOM. A value too large for the tier below
 * is evicted as without it. Moves copy on the
 * loop (the device's read_sync/write_sync, or memcpy between host-visible memory): a write
 * waits for the bytes it displaces, a read for the bytes it promotes. The journal records a
 * value in the tier as gone (it does not survive a crash yet). */
/* Adds the host tier: values leaving the devices go to be's memory (borrowed, host-visible,
 * must outlive the store), up to limit bytes. Where the devices' backend page-locks host memory
 * (cuda), a thread locks the tier's (tier_pin.h) until gkv_store_fini unlocks it. While a read brings a value up, the tier holds
 * up to that value's size more (what goes down to make room on the device takes the room the
 * value leaves; never seen between requests): be should offer limit plus the largest value.
 * Returns 0, GKV_ENOMEM, GKV_ESYS (no thread), or GKV_EINVAL (one is there already, be is not
 * host-visible, or limit is 0). */
int gkv_store_add_tier(gkv_store_t *st, gkv_backend_t *be, uint64_t limit);
/* Adds the disk tier below the host tier (or below the devices without one): be is
 * gkv_backend_disk_open's (borrowed, not host-visible), limit bytes, with the same room for a
 * swap. Values move there from the host tier (or the devices) as to the host tier, and a value
 * whose bytes fail their checksum when read back is dropped, logged and counted (tier_dropped):
 * the read answers NOTFOUND. Returns 0 or GKV_EINVAL. */
int gkv_store_add_disk_tier(gkv_store_t *st, gkv_backend_t *be, uint64_t limit);
/* Links the values a disk tier reopened with reload found in its file (gkv_backend_disk_open),
 * after everything else came back (the fd store's journal, a snapshot: a key they brought is
 * newer than the disk's record of it): newest record of a key first, those past their deadline
 * or without room skipped; what is not linked is retired. */
void gkv_store_disk_reload(gkv_store_t *st);
/* True when e's value is in a tier: its bytes are no device's until gkv_store_promote. */
static inline bool gkv_store_in_tier(const gkv_entry_t *e)
{
    return e->dev >= GKV_MAX_DEVICES;
}
/* Where e's value is as the wire says it (GETSIZE's tier, LIST's fourth element, GKV_TIER_*):
 * 0 on a device, 1 the host tier, 2 the disk tier. */
static inline unsigned gkv_store_tier(const gkv_entry_t *e)
{
    return gkv_store_in_tier(e) ? e->dev - GKV_DEV_HOST_TIER + 1u : 0;
}
/* The device ordinal the wire names for e (GETSIZE's and LIST's gpu): 0 for a value in a tier,
 * which goes to the daemon's placement when read. */
static inline unsigned gkv_store_gpu(const gkv_entry_t *e)
{
    return gkv_store_in_tier(e) ? 0 : e->dev;
}
/* A move down off the request path (server/xfer/demoter.h), in two steps around an
 * asynchronous copy. Begin: device dev's best candidate (as a move made room for a write
 * would pick, refs == 1) in *e, one reference taken (so no other move picks it and it stays
 * readable while copied), and in *n its new unpublished entry in the host tier (key, metadata,
 * deadline; one reference): the caller copies e's bytes into n's memory. False when there is
 * no host tier, no candidate, or no room in the tier; then *tier_full says when that was
 * because the tier has a disk below and no room for the candidate now (a move down off the
 * loop, gkv_store_disk_move_begin, makes it). End (ok: the copy ran; us: how long it
 * took): n takes e's place under the key as gkv_store_copy_end says, when e's deadline is n's
 * (an overwrite, delete, expiry or deadline change meanwhile wins: n goes); both references
 * are dropped, and e's GPU memory goes with its last reader. Returns true when n took it. */
bool gkv_store_demote_begin(gkv_store_t *st, unsigned dev, gkv_entry_t **e, gkv_entry_t **n,
                            bool *tier_full);
bool gkv_store_demote_end(gkv_store_t *st, gkv_entry_t *e, gkv_entry_t *n, bool ok,
                          uint64_t us);
/* A move up off the request path (a MAP of a value in the host tier), the same way: begin makes
 * e's entry on device dev (*n, one reference, its memory in lane's order: the caller copies
 * e's bytes into it on that lane) and takes a reference on e, when e is in the host tier and
 * dev has room for it now (none is made here); false otherwise, or out of memory. End:
 * gkv_store_demote_end (counted as a promotion: n is the higher). */
bool gkv_store_promote_begin(gkv_store_t *st, gkv_entry_t *e, unsigned dev, int lane,
                             gkv_entry_t **n);
/* A move from the host tier to the disk tier whose write runs off the loop (the demoter's):
 * begin picks the host tier's best candidate (one reference taken, *e), makes its entry on the
 * disk (*n, one reference, not linked) and the record's write (*w, gkv_backend_disk_write_run
 * runs it on any thread; e's bytes stay put meanwhile). False when there is no disk tier, no
 * candidate, or no room on the disk (without may_evict: no room without evicting there), or
 * out of memory. End (on the loop, rc: the write's):
 * n's record is made live and n takes e's place under the key as gkv_store_demote_end says,
 * unless the key changed meanwhile or the write failed (n goes then: its record, never live,
 * is not reloaded); w and both references are dropped. Returns true when n took it. */
bool gkv_store_disk_move_begin(gkv_store_t *st, bool may_evict, gkv_entry_t **e, gkv_entry_t **n,
                               gkv_disk_write_t **w);
/* The linked e (on the disk) brought up to the host tier with its read off the loop, the same
 * way: begin makes its host tier entry (*n) and the read (*r); false when e is not on the disk,
 * the host tier has no room for it now (nothing is moved to make it), or out of memory. End:
 * n takes e's place unless the key changed meanwhile; a value that cannot be read back is
 * dropped, loudly (as a read on the loop drops it). Returns true when n took it. */
bool gkv_store_disk_fetch_begin(gkv_store_t *st, gkv_entry_t *e, gkv_entry_t **n,
                                gkv_disk_read_t **r);
bool gkv_store_disk_fetch_end(gkv_store_t *st, gkv_entry_t *e, gkv_entry_t *n, gkv_disk_read_t *r,
                              int rc, uint64_t us);
bool gkv_store_disk_move_end(gkv_store_t *st, gkv_entry_t *e, gkv_entry_t *n, gkv_disk_write_t *w,
                             int rc, uint64_t us);
/* The linked e's value on a device: e itself when it is on one; else its bytes are copied to a
 * device (gkv_store_place's, making room there as entry_new does) and the new entry, under the
 * key now and borrowed like gkv_store_get's, is returned. NULL with *rc GKV_EOOM (no device
 * could make room: e stays in the tier, counted in promote_errors), GKV_ENOTFOUND (e's disk
 * copy could not be read back: e is dropped), GKV_ENOMEM or GKV_EIO. */
gkv_entry_t *gkv_store_promote(gkv_store_t *st, gkv_entry_t *e, int *rc);
/* gkv_store_get, then gkv_store_promote: the entry for reading or writing its bytes, or NULL
 * with *rc GKV_ENOTFOUND (also: its disk copy was unreadable and dropped) or promote's code. */
gkv_entry_t *gkv_store_get_here(gkv_store_t *st, const void *key, size_t klen, int *rc);
/* For a read whose bytes go to the socket (GET, MGET, a cluster's FETCH): like
 * gkv_store_get_here, but under promote_on_get false a value in the host tier stays there (its
 * bytes are host memory already: no round trip through a GPU) and one on the disk comes up to
 * the host tier only (to a device where there is no host tier). The entry is on a device or in
 * the host tier (gkv_store_be's memory is host-visible then). */
gkv_entry_t *gkv_store_get_readable(gkv_store_t *st, const void *key, size_t klen, int *rc);
/* Where e's value is, as logs and docs say it: "device", "host" or "disk". */
const char *gkv_store_tier_name(const gkv_entry_t *e);

/* Zero-copy. */
/* Queues clearing e's memory on the shared lane (fence_shared says when it is done): a CREATE's
 * new value never shows what the memory held before. Returns 0 or GKV_EIO. */
int gkv_store_clear(gkv_store_t *st, gkv_entry_t *e);
/* True when e's memory, just allocated (gkv_store_entry_new on the shared lane), shows no
 * earlier value's bytes to a process that imports it from now on, with nothing to wait for
 * (backend.h zeroed_now); false when that cannot be said without waiting. */
bool gkv_store_zeroed_now(gkv_store_t *st, gkv_entry_t *e);
/* What another process needs to import e's value, copied into buf (cap bytes, the caller's):
 * the backend's export data, *len = 0 when there is none (the host backend, where the arena
 * offset is enough, or a value of 0 bytes). The backend remembers export data per allocation,
 * so only the first export of an allocation costs a driver call. Returns 0 or GKV_EIO. */
int gkv_store_export(gkv_store_t *st, const gkv_entry_t *e, uint8_t *buf, size_t cap,
                     uint32_t *len);
/* True when e's memory may be handed to another process: a small value carved from a slab
 * shares its allocation with other values, which no other process may reach. */
bool gkv_store_exportable(const gkv_store_t *st, const gkv_entry_t *e);
/* Starts copying e's value to new memory on device dev: for a MAP of a value that is not
 * exportable (dev = e->dev), or for MOVE (another device). *copy (the caller's reference) gets a
 * new unpublished entry of the same key, size, metadata and deadline whose bytes are being
 * copied on dev's shared lane; they are there once dev's backend's fence_shared reports. Then
 * gkv_store_copy_end publishes it. Returns 0, GKV_EOOM (dev is full), GKV_ENOMEM or GKV_EIO. */
int gkv_store_copy_begin(gkv_store_t *st, gkv_entry_t *e, unsigned dev, gkv_entry_t **copy);
/* After the copy has run: copy takes e's place under the key if the key still names e (like an
 * overwrite with the same bytes), else it is left alone, the key having moved on. The caller
 * keeps its references. Returns true when copy took e's place. */
bool gkv_store_copy_end(gkv_store_t *st, gkv_entry_t *e, gkv_entry_t *copy);

#endif
