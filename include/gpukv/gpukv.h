/* gpukv.h: the public C API of libgpukv, the client library of the gpukv daemon. */
#ifndef GPUKV_GPUKV_H
#define GPUKV_GPUKV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(GKV_BUILDING_LIBRARY)
#define GKV_EXPORT __attribute__((visibility("default")))
#else
#define GKV_EXPORT
#endif

/* Error codes. Every call returns 0 (or a documented non-negative count) on success and a
 * negative GKV_E* code on failure. The numbers travel on the wire (proto/PROTOCOL.md), so they
 * are never renumbered; new codes are appended. The list lives here because the codes are part
 * of the API; the daemon and the CLI are generated from the same list. */
#define GKV_ERRNO_MAP(X)                                                                           \
    X(PROTO, 1, "malformed frame or header")                                                       \
    X(NOTFOUND, 2, "key not found")                                                                \
    X(EXISTS, 3, "key already exists")                                                             \
    X(OOM, 4, "out of memory on the value backend")                                                \
    X(INVAL, 5, "invalid argument")                                                                \
    X(TOOBIG, 6, "size over the configured limit")                                                 \
    X(UNKNOWNCMD, 7, "unknown command")                                                            \
    X(RANGE, 8, "byte range outside the value")                                                    \
    X(BUSY, 9, "server busy (too many clients)")                                                   \
    X(IO, 10, "device or backend I/O error")                                                       \
    X(CONNECT, 11, "cannot connect to the server")                                                 \
    X(CLOSED, 12, "connection closed")                                                             \
    X(NOMEM, 13, "out of host memory")                                                             \
    X(NOTSUP, 14, "not supported")                                                                 \
    X(SHUTDOWN, 15, "server is shutting down")                                                     \
    X(SYS, 16, "system call failed")                                                               \
    X(VERSION, 17, "protocol version not supported")                                               \
    X(NOSPACE, 18, "destination buffer too small")                                                 \
    X(NOLEASE, 19, "no such lease on this connection")                                             \
    X(LEASELIMIT, 20, "too many leases or leased bytes on this connection")                        \
    X(TIMEDOUT, 21, "timed out waiting for the server")                                            \
    X(AUTH, 22, "authentication required or refused")                                              \
    X(UNAVAILABLE, 23, "a cluster node this request needs is unreachable")                         \
    X(OVERFLOW, 24, "the watcher fell too far behind: its watch was ended")

typedef enum {
    GKV_OK = 0,
#define GKV_ERR_ENUM(name, num, text) GKV_E##name = -(num),
    GKV_ERRNO_MAP(GKV_ERR_ENUM)
#undef GKV_ERR_ENUM
} gkv_errno_t;

/* Returns a static English sentence for an error code; never NULL. */
GKV_EXPORT const char *gkv_strerror(int err);
/* Returns the code's stable name ("NOTFOUND", "OOM", ...); never NULL. */
GKV_EXPORT const char *gkv_err_name(int err);

/* One connection to a gpukvd. Not thread-safe: use one per thread. */
typedef struct gkv_client gkv_client_t;

/* What the server said in HELLO. Strings are owned by the client and stay valid until
 * gkv_client_close. */
typedef struct {
    uint32_t protocol;        /* protocol version the server speaks */
    const char *server;       /* server version, e.g. "0.1.0" */
    const char *backend;      /* "cuda" or "host" */
    int device;               /* CUDA device ordinal, -1 on the host backend */
    const char *gpu_uuid;     /* "GPU-xxxxxxxx-..." or "" on the host backend */
    const char *zero_copy;    /* zero-copy mechanism for this connection, or "none" */
    const char *zero_copy_why;/* why zero-copy is unavailable, "" when it is available */
    uint64_t max_key;         /* longest key accepted, bytes */
    uint64_t max_value;       /* largest value accepted, bytes */
    uint64_t max_meta;        /* largest metadata blob accepted, bytes */
    /* Every GPU the daemon serves (gpukvd --devices), in the daemon's order: the daemon's
     * ordinal of a GPU (the `gpu` of the calls below) is its index here. device and gpu_uuid
     * above are the first's. On the host backend with several arenas: "HOST-0", ... */
    uint32_t gpus;
    const char *const *gpu_uuids;
} gkv_server_info_t;

/* Connects and exchanges HELLO. url: "unix:/path/to.sock" or "tcp:host:port"; NULL means the
 * GPUKV_URL environment variable, else the default socket (see gkv_default_socket). url is
 * borrowed. On success *out is owned by the caller, who frees it with gkv_client_close.
 * Returns 0, GKV_ECONNECT, GKV_EINVAL (bad URL), GKV_EVERSION or GKV_ENOMEM. */
GKV_EXPORT int gkv_client_connect(const char *url, gkv_client_t **out);
/* Like gkv_client_connect, with every wait bounded (see gkv_client_set_timeout), connecting and
 * HELLO included: a server that accepts but never answers gives GKV_ETIMEDOUT, not a hang. */
GKV_EXPORT int gkv_client_connect_timeout(const char *url, uint32_t timeout_ms,
                                          gkv_client_t **out);
/* Bounds every wait of the calls on c: when sending or receiving makes no progress for
 * timeout_ms milliseconds, the call returns GKV_ETIMEDOUT and the connection is closed (a late
 * reply could not be told from the next one): later calls get GKV_ECLOSED. 0 waits forever (the
 * default). A large transfer that keeps moving never times out. Returns 0 or GKV_ESYS. */
GKV_EXPORT int gkv_client_set_timeout(gkv_client_t *c, uint32_t timeout_ms);
/* Closes the connection and frees the client, and every mapping of it still open (their
 * pointers become invalid: unmap, seal or abort them first). NULL is allowed. */
GKV_EXPORT void gkv_client_close(gkv_client_t *c);
/* The HELLO answer; borrowed, valid until gkv_client_close. */
GKV_EXPORT const gkv_server_info_t *gkv_client_info(const gkv_client_t *c);
/* The message of the last error reply from the server, or ""; borrowed, valid until the next
 * call on c. */
GKV_EXPORT const char *gkv_client_errmsg(const gkv_client_t *c);
/* Writes the default socket path (as gpukvd computes it) into buf; returns its length or
 * GKV_ENOSPACE. */
GKV_EXPORT int gkv_default_socket(char *buf, size_t cap);

/* Progress of value transfers on c: fn(arg, done, total) after each chunk of the streaming
 * calls (gkv_set_from_fd, gkv_get_to_fd). fn NULL turns it off. arg is borrowed. */
typedef void (*gkv_progress_fn)(void *arg, uint64_t done, uint64_t total);
GKV_EXPORT void gkv_client_set_progress(gkv_client_t *c, gkv_progress_fn fn, void *arg);

/* Returns 0 when the server answers. */
GKV_EXPORT int gkv_ping(gkv_client_t *c);

/* SET flags. */
#define GKV_SET_NX 1u /* only if the key does not exist (else GKV_EEXISTS) */
#define GKV_SET_XX 2u /* only if the key exists (else GKV_ENOTFOUND) */

typedef struct {
    uint32_t flags;   /* GKV_SET_* */
    const void *meta; /* optional opaque metadata stored with the value (borrowed), or NULL */
    size_t meta_len;  /* at most max_meta (4096) */
    uint64_t ttl_ms;  /* the key expires this many milliseconds after the write; 0: never */
    int gpu;          /* where the value goes: 0 the daemon's placement, GKV_GPU(n) its GPU n */
} gkv_set_opts_t;
/* gkv_set_opts_t.gpu naming the daemon's GPU n (an index of gkv_server_info_t.gpu_uuids). */
#define GKV_GPU(n) ((n) + 1)

/* Stores value (borrowed; len may be 0) under key (borrowed, 1..max_key bytes). opts may be
 * NULL. Replaces an existing value atomically: readers see the old or the new one. */
GKV_EXPORT int gkv_set(gkv_client_t *c, const void *key, size_t klen, const void *value,
                       size_t len, const gkv_set_opts_t *opts);
/* Like gkv_set, reading exactly len bytes from fd (borrowed, left open) and streaming them.
 * A short read is GKV_EIO; the connection is then closed (GKV_ECLOSED afterwards). */
GKV_EXPORT int gkv_set_from_fd(gkv_client_t *c, const void *key, size_t klen, int fd,
                               uint64_t len, const gkv_set_opts_t *opts);

/* A byte range of a value. */
typedef struct {
    uint64_t offset; /* first byte */
    uint64_t length; /* bytes from offset; GKV_TO_END for the rest of the value */
    uint64_t suffix; /* if non-zero, the last `suffix` bytes (offset and length ignored) */
} gkv_range_t;
#define GKV_TO_END UINT64_MAX

/* What a read reports about the value. meta is borrowed from the client, valid until the next
 * call on it. */
typedef struct {
    uint64_t size;     /* the whole value's size */
    uint64_t offset;   /* where the returned bytes start within the value */
    uint64_t length;   /* how many bytes were returned */
    const void *meta;  /* metadata given at SET, or NULL */
    size_t meta_len;
    int gpu; /* the daemon's ordinal of the GPU holding the value (0 from old servers) */
} gkv_value_info_t;

/* Reads key (or range, NULL for the whole value) into buf (borrowed, cap bytes). If the bytes
 * do not fit, nothing is stored in buf, info->length says what was needed, and the result is
 * GKV_ENOSPACE. info may be NULL. */
GKV_EXPORT int gkv_get(gkv_client_t *c, const void *key, size_t klen, const gkv_range_t *range,
                       void *buf, size_t cap, gkv_value_info_t *info);
/* Like gkv_get into a buffer the library allocates: *out is owned by the caller, who frees it
 * with gkv_free (a zero-length value gives a non-NULL 1-byte buffer). */
GKV_EXPORT int gkv_get_alloc(gkv_client_t *c, const void *key, size_t klen,
                             const gkv_range_t *range, void **out, gkv_value_info_t *info);
/* Gives a call the memory for bytes it is about to receive, once their length is known: returns
 * len writable bytes (len may be 0; then any non-NULL pointer), owned by the caller, or NULL to
 * refuse them (the library then reads and drops the bytes, and that value fails with
 * GKV_ENOMEM). index is the item's position for gkv_mget_with, 0 for gkv_get_with. Called from
 * the calling thread, at most once per value, before any of its bytes is stored; it must not
 * call libgpukv on the same client. */
typedef void *(*gkv_alloc_fn)(void *arg, size_t index, uint64_t len);
/* Like gkv_get, receiving into memory that fn (with arg, borrowed) allocates once the size is
 * known: one round trip and no intermediate copy, for callers that own their buffers (a
 * language binding, a pool). If fn is not called, nothing was allocated. */
GKV_EXPORT int gkv_get_with(gkv_client_t *c, const void *key, size_t klen,
                            const gkv_range_t *range, gkv_alloc_fn fn, void *arg,
                            gkv_value_info_t *info);
/* Like gkv_get, but a key that does not exist yet is waited for, up to wait_ms milliseconds
 * (1 .. 3,600,000): the call returns the value once another client's SET (or SEAL) has made the
 * key exist, or GKV_ETIMEDOUT when the time passed first (the server holds nothing for it).
 * The connection's next requests wait behind it. At most 10,000 requests wait in a daemon at
 * once (one more: GKV_EBUSY); a cluster node answers at once, as gkv_get. */
GKV_EXPORT int gkv_get_wait(gkv_client_t *c, const void *key, size_t klen,
                            const gkv_range_t *range, uint32_t wait_ms, void *buf, size_t cap,
                            gkv_value_info_t *info);
/* Arms a wait for the next GET or MAP that c sends (gkv_get and its variants, gkv_get_to_fd,
 * gkv_get_to_device, gkv_map; not gkv_mget or gkv_map_many): it waits up to wait_ms for a key
 * that does not exist yet, as gkv_get_wait does; the calls after it do not. 0 disarms it.
 * Returns 0, or GKV_EINVAL for wait_ms over 3,600,000. */
GKV_EXPORT int gkv_wait_next(gkv_client_t *c, uint32_t wait_ms);
/* gkv_wait_next for a newer value: the next GET or MAP waits up to wait_ms (1 .. 3,600,000)
 * until the key holds a value whose version is above `after` (a version a reply or an event
 * named: gkv_last_version, gkv_mapping_t.version, gkv_watch_version), whether the key exists
 * now or not; GKV_ETIMEDOUT when none came in time. Versions are kept by a daemon started
 * with --key-versions yes and by every cluster node (the keys' cluster versions; elsewhere the
 * request is GKV_ENOTSUP). Returns 0, or GKV_EINVAL for wait_ms 0 or over 3,600,000. */
GKV_EXPORT int gkv_wait_newer(gkv_client_t *c, uint32_t wait_ms, uint64_t after);
/* The version the last reply c received named: after gkv_get (and its variants), gkv_map or
 * gkv_getsize of a key, its value's version on a daemon started with --key-versions yes (on a
 * cluster node, after gkv_get and gkv_map: the value's cluster version); 0 where the daemon
 * keeps none. Versions grow with every value published under any key (a
 * key's next value has a higher one), across the daemon's restarts too. */
GKV_EXPORT uint64_t gkv_last_version(const gkv_client_t *c);
/* Like gkv_get, streaming the bytes to fd (borrowed, left open). */
GKV_EXPORT int gkv_get_to_fd(gkv_client_t *c, const void *key, size_t klen,
                             const gkv_range_t *range, int fd, gkv_value_info_t *info);
/* Frees memory the library allocated for the caller. NULL is allowed. */
GKV_EXPORT void gkv_free(void *p);

/* One item of a multi-get. key and buf are borrowed. The library fills status (0 or a negative
 * code such as GKV_ENOTFOUND or GKV_ENOSPACE) and len (bytes stored, or needed on
 * GKV_ENOSPACE). */
typedef struct {
    const void *key;
    size_t klen;
    gkv_range_t range; /* zero for the whole value */
    void *buf;
    size_t cap;
    int status;
    uint64_t len;
} gkv_mget_item_t;
/* Reads n items (1..4096) in one round trip. Returns 0 when the request itself succeeded, even
 * if some items failed: look at each item's status. */
GKV_EXPORT int gkv_mget(gkv_client_t *c, gkv_mget_item_t *items, size_t n);

/* Like gkv_mget for items whose sizes are not known in advance: for each item found, fn (with
 * arg) allocates its bytes; the item's buf and cap are set to fn's result and the length (buf
 * NULL and status GKV_ENOMEM where fn refused). Items' buf and cap are ignored on input. */
GKV_EXPORT int gkv_mget_with(gkv_client_t *c, gkv_mget_item_t *items, size_t n, gkv_alloc_fn fn,
                             void *arg);

/* Counts how many of n keys (1..4096) exist; returns the count (>= 0) or a negative code.
 * keys[i]/klens[i] are borrowed. */
GKV_EXPORT int64_t gkv_exists(gkv_client_t *c, const void *const *keys, const size_t *klens,
                              size_t n);
/* Deletes n keys (1..4096); returns how many existed (>= 0) or a negative code. */
GKV_EXPORT int64_t gkv_del(gkv_client_t *c, const void *const *keys, const size_t *klens,
                           size_t n);

/* Deletes every key under prefix (plen may be 0: every key), 2048 keys per request until none
 * is left; *count (may be NULL) gets how many existed. Returns 0 or a negative code (then some
 * may have been deleted). */
GKV_EXPORT int gkv_del_prefix(gkv_client_t *c, const void *prefix, size_t plen, uint64_t *count);
/* Size of one value in *size. */
GKV_EXPORT int gkv_getsize(gkv_client_t *c, const void *key, size_t klen, uint64_t *size);
/* Size of one value in *size and the daemon's ordinal of the GPU holding it in *gpu. */
GKV_EXPORT int gkv_locate(gkv_client_t *c, const void *key, size_t klen, uint64_t *size, int *gpu);
/* Where a value is: on a GPU, or in the daemon's host or disk tier (--tier-host, --tier-disk),
 * where values that had to leave the GPUs wait until they are read. */
#define GKV_TIER_GPU 0
#define GKV_TIER_HOST 1
#define GKV_TIER_DISK 2
/* gkv_locate, and in *tier where the value is (GKV_TIER_*; *gpu is 0 in a tier). In a
 * cluster the tier is known when this node owns the value (GKV_TIER_GPU otherwise). */
GKV_EXPORT int gkv_locate_tier(gkv_client_t *c, const void *key, size_t klen, uint64_t *size,
                               int *gpu, int *tier);
/* The cluster node that owns the key's value (gpukvd --cluster), its name into node (cap bytes,
 * NUL-terminated; "" from a daemon that is not in a cluster), and its size in *size (may be
 * NULL). Returns 0, GKV_ENOTFOUND, GKV_ENOSPACE (cap too small) or another negative code. */
GKV_EXPORT int gkv_locate_node(gkv_client_t *c, const void *key, size_t klen, char *node,
                               size_t cap, uint64_t *size);
/* MOVE: copies the key's value to the daemon's GPU gpu and puts the copy in its place once it is
 * complete (readers see the old value or the moved one; a write to the key meanwhile wins).
 * Returns 1 (moved), 0 (it was there already), or a negative code: GKV_ENOTFOUND, GKV_EINVAL
 * (no such GPU), GKV_EOOM (no room there). */
GKV_EXPORT int gkv_move(gkv_client_t *c, const void *key, size_t klen, int gpu);
/* Total bytes and number of keys under a prefix (prefix may be empty: everything). */
GKV_EXPORT int gkv_getsize_prefix(gkv_client_t *c, const void *prefix, size_t plen,
                                  uint64_t *bytes, uint64_t *count);
/* Deletes every key. */
GKV_EXPORT int gkv_flush(gkv_client_t *c);
/* SAVE: starts writing a snapshot of every key to the daemon's --snapshot-dir (it goes on in
 * the background; INFO's # Persistence shows its progress and result). Returns 0 when started,
 * GKV_ENOTSUP (no --snapshot-dir) or GKV_EBUSY (a save is running). */
GKV_EXPORT int gkv_save(gkv_client_t *c);
/* Server information as "name:value" lines grouped under "# Section" headings. *text is owned
 * by the caller (gkv_free), NUL-terminated. */
GKV_EXPORT int gkv_info(gkv_client_t *c, char **text);
/* Deadlines (TTLs), in milliseconds. A key past its deadline is gone for every command; a
 * write without ttl_ms leaves the key without one (as Redis's SET). */
#define GKV_NO_TTL UINT64_MAX
/* EXPIRE: the key expires ttl_ms (1 .. 100 years) from now. Returns 1, 0 (no such key) or a
 * negative code. */
GKV_EXPORT int gkv_expire(gkv_client_t *c, const void *key, size_t klen, uint64_t ttl_ms);
/* PERSIST: the key keeps no deadline. Returns 1 (it had one), 0 (it had none) or a negative
 * code (GKV_ENOTFOUND). */
GKV_EXPORT int gkv_persist(gkv_client_t *c, const void *key, size_t klen);
/* TTL: the milliseconds the key has left in *ttl_ms (GKV_NO_TTL: none). Returns 0 or a
 * negative code (GKV_ENOTFOUND). */
GKV_EXPORT int gkv_ttl(gkv_client_t *c, const void *key, size_t klen, uint64_t *ttl_ms);
/* INFO flags. */
#define GKV_INFO_PROMETHEUS 1u /* the Prometheus text that gpukvd --metrics-listen serves */
/* The server's metrics in the Prometheus text format (what GET /metrics on --metrics-listen
 * answers): per-command counts, errors and latency histograms, bytes, memory, keys, leases,
 * connections. *text as for gkv_info. */
GKV_EXPORT int gkv_metrics(gkv_client_t *c, char **text);

/* LIST iterator: walks the keys under a prefix in byte order, fetching pages from the server
 * as it goes. With a delimiter (e.g. '/'), keys that continue past the next delimiter are
 * folded into one directory entry ("a/b/") the way a file listing would show them. */
typedef struct gkv_list gkv_list_t;
typedef struct {
    const void *key; /* borrowed, valid until the next gkv_list_next or gkv_list_close */
    size_t klen;
    uint64_t size; /* value size; 0 for a directory */
    int is_dir;    /* 1 for a folded directory prefix */
    int gpu;       /* the daemon's ordinal of the value's GPU (0 for a directory, old servers) */
} gkv_list_entry_t;
/* Opens an iterator; prefix is copied. delimiter is 0 for a flat listing or a byte such as
 * '/'. page is the number of entries fetched per round trip (0: 1000). *out is owned by the
 * caller: gkv_list_close. Each page is a whole request, so other calls on c may come between
 * two gkv_list_next calls; the iterator borrows c and must be closed before c is. */
GKV_EXPORT int gkv_list_open(gkv_client_t *c, const void *prefix, size_t plen, int delimiter,
                             uint32_t page, gkv_list_t **out);
/* Stores the next entry in *e and returns 1, returns 0 at the end, or a negative code. */
GKV_EXPORT int gkv_list_next(gkv_list_t *it, gkv_list_entry_t *e);
/* Where the value of the entry gkv_list_next returned last is: GKV_TIER_GPU (on its GPU, also
 * for a directory and from servers without tiers), GKV_TIER_HOST or GKV_TIER_DISK (the daemon's
 * host or disk tier: brought back to a GPU when read). */
GKV_EXPORT int gkv_list_tier(const gkv_list_t *it);
GKV_EXPORT void gkv_list_close(gkv_list_t *it);

/* Zero-copy, for processes on the daemon's machine connected over its Unix socket. The
 * library asks for it in HELLO; gkv_client_info says whether it was granted ("zero_copy") or
 * why not. On the cuda backend a mapping is a CUDA device pointer into the daemon's memory
 * pool on the GPU named by gpu_uuid; on the host backend, a host pointer into its arena. A
 * daemon with several GPUs passes one pool per GPU; the library imports a GPU's pool (or maps
 * its arena) at the connection's first mapping of a value there, and each value once per
 * process (shared by all its connections, refcounted, thread-safe), and frees its import
 * before it tells the server to end a lease. A value on a GPU this process cannot see
 * (CUDA_VISIBLE_DEVICES) is GKV_ENOTSUP, the message naming the GPU. */
typedef struct {
    void *ptr;            /* the bytes; NULL when length is 0 */
    uint64_t length;      /* bytes at ptr */
    uint64_t offset;      /* where ptr starts within the value */
    uint64_t value_size;  /* the whole value */
    int on_device;        /* 1: ptr is device memory, usable by CUDA code on `device` (on
                           * other GPUs too only with GPUKV_PEER_MAPPINGS=1: README) */
    int device;           /* this process's CUDA ordinal of that GPU, or -1 (host memory) */
    const char *gpu_uuid; /* "GPU-..." or "" */
    const void *meta;     /* the value's metadata, or NULL */
    size_t meta_len;
    uint64_t lease;       /* the server's lease id */
    int writable;         /* 1 for gkv_create mappings */
    int gpu;              /* the daemon's ordinal of that GPU (gkv_server_info_t.gpu_uuids) */
    uint64_t version;     /* the value's version (gpukvd --key-versions), else 0 */
} gkv_mapping_t;

/* Watching a prefix (PROTOCOL.md, "Watching a prefix"). What happened to a key: */
typedef enum {
    GKV_EVENT_SET = 1,    /* a value was published under it (SET, SEAL, MSET's items) */
    GKV_EVENT_DELETE = 2, /* deleted (DEL, a prefix delete) */
    GKV_EVENT_EXPIRE = 3, /* its deadline passed */
    GKV_EVENT_EVICT = 4,  /* the daemon dropped it for room (or could not read it back) */
    GKV_EVENT_FLUSH = 5,  /* every key went (FLUSH): key is empty */
} gkv_event_kind_t;

typedef struct {
    gkv_event_kind_t kind;
    const void *key; /* owned by the client, valid until its next call */
    size_t klen;
    uint64_t size; /* the value's size for SET, else 0 */
    /* The daemon's count of changes at this one: it grows with every change, so a key's
     * events come in the order of their seq, and a gap-free stream of one daemon says
     * nothing was missed. */
    uint64_t seq;
} gkv_event_t;

/* Makes c a watcher of every key under prefix (plen 0: every key): from now on the daemon sends
 * c an event for each change of such a key, in the order it made them, until gkv_unwatch. While
 * it watches, c takes only gkv_watch_next, gkv_unwatch and gkv_client_close (others:
 * GKV_EINVAL); use another connection for requests. *seq (may be NULL) gets the daemon's count
 * of changes when the watch began: the first event's seq is above it. On a cluster node the
 * watch spans the cluster: the changes of the values every member owns (not replicas), each
 * member's in its order with its own seq, from when that member's stream opened (a member
 * joining later is watched from then on), and a key's events in the order of its cluster
 * version (gkv_watch_version; a superseded owner's late event is not delivered);
 * gkv_watch_node says which member. Returns 0,
 * GKV_EINVAL (already watching), GKV_ETOOBIG (a prefix over the key limit), GKV_ENOMEM. */
GKV_EXPORT int gkv_watch(gkv_client_t *c, const void *prefix, size_t plen, uint64_t *seq);
/* gkv_watch of this daemon's own changes only: on a cluster node, the values it owns (a SET
 * published there, its copy deleted, expired or evicted, a FLUSH there; not replicas coming
 * and going, nor its copy dropped because the key was written on another node, whose owner
 * reports that write); on a daemon alone, the same as gkv_watch. A watch spanning a cluster
 * is this on every member. */
GKV_EXPORT int gkv_watch_local(gkv_client_t *c, const void *prefix, size_t plen, uint64_t *seq);
/* The next event of c's watch, waiting up to timeout_ms for it (-1: as long as it takes; 0: only
 * one already there). Returns 0 (*ev filled), GKV_ETIMEDOUT (none came in time; the watch goes
 * on), GKV_EOVERFLOW (c read too slowly: the daemon ended the watch, c is usable again and may
 * watch anew), GKV_EINVAL (c does not watch), or a transport code. */
GKV_EXPORT int gkv_watch_next(gkv_client_t *c, gkv_event_t *ev, int timeout_ms);
/* The member of a cluster the last event gkv_watch_next returned happened on, for a watch
 * spanning the cluster: its node name, or "" when it happened on the node c is connected to
 * (always "" on a daemon alone). Valid until c's next call. */
GKV_EXPORT const char *gkv_watch_node(const gkv_client_t *c);
/* The cluster version of the key in the last event gkv_watch_next returned, on a cluster node
 * (a local watch or one spanning the cluster): the version its home gave the value published
 * (a set) or the one that went (delete, expire, evict); it grows with every write of the key,
 * wherever it is written, and a spanning watch delivers a key's events in its order. 0 for a
 * flush and on a daemon alone (whose seq orders a key's events). */
GKV_EXPORT uint64_t gkv_watch_version(const gkv_client_t *c);
/* Ends c's watch; events still on the way are dropped. Returns 0 (also when c did not watch,
 * or its watch was ended by GKV_EOVERFLOW) or a transport code. */
GKV_EXPORT int gkv_unwatch(gkv_client_t *c);

/* Leases key (or a range of it) for reading in place. *out (owned by the caller) stays valid,
 * with the bytes it shows unchanged, until gkv_unmap, even if the key is deleted or
 * overwritten meanwhile. Returns 0, GKV_ENOTSUP (no zero-copy on this connection:
 * gkv_client_errmsg says why), GKV_ENOTFOUND, GKV_ERANGE, GKV_ELEASELIMIT, ... */
GKV_EXPORT int gkv_map(gkv_client_t *c, const void *key, size_t klen, const gkv_range_t *range,
                       gkv_mapping_t **out);
/* Like gkv_map, waiting for a key that does not exist yet as gkv_get_wait does. A MAP of the
 * whole value imports the memory of a value an asynchronous seal of the key is about to publish
 * while it waits (an early frame, PROTOCOL.md "Early MAPs"), so that its answer needs no
 * import then. */
GKV_EXPORT int gkv_map_wait(gkv_client_t *c, const void *key, size_t klen,
                            const gkv_range_t *range, uint32_t wait_ms, gkv_mapping_t **out);
/* One item of gkv_map_many. key is borrowed; the library fills status (0 or a negative code,
 * e.g. GKV_ENOTFOUND, GKV_ERANGE, GKV_ENOTSUP when this process cannot use the value) and, when
 * it is 0, mapping (owned by the caller: gkv_unmap or gkv_unmap_batch). */
typedef struct {
    const void *key;
    size_t klen;
    gkv_range_t range; /* zero for the whole value */
    int status;
    gkv_mapping_t *mapping;
} gkv_map_item_t;
/* Maps n (1..4096) keys with pipelined MAP requests: all of them go out before the first reply
 * is read, so n leases cost about one round trip. Each item is a gkv_map of its own, a cached
 * lease of its key offered for renewal as gkv_map does. Returns 0 when the requests went through
 * (look at each item's status) or a code for the whole call (a bad key, before anything is sent; a
 * broken connection, and then no item is mapped). */
GKV_EXPORT int gkv_map_many(gkv_client_t *c, gkv_map_item_t *items, size_t n);
/* Ends a mapping and frees m. The caller's GPU work reading m->ptr must have finished (or m be
 * guarded: gkv_mapping_guard). For a
 * value of up to 1 MiB the library keeps the lease and the import in the connection's lease
 * cache for the next gkv_map of the same key, which the server then renews without a new lease
 * or import while the key still has that value. The cache holds at most 8 leases per connection
 * and 2 per key; they end (import freed, then RELEASE) when evicted, when a MAP or CREATE of the
 * key fails, before any request on c that is not a mapping call, and at gkv_client_close. Until
 * then the server counts them as leases and keeps their memory. Otherwise: frees the import,
 * then releases the lease. docs/zero-copy.md tells the whole model. */
GKV_EXPORT int gkv_unmap(gkv_client_t *c, gkv_mapping_t *m);
/* Marks m's memory as read by GPU work the caller may not wait for (a framework's view of it,
 * with operations still queued when it is dropped): the free of its import, at gkv_unmap or
 * later (the lease cache, another mapping of the same value), then waits for the device first
 * (cudaDeviceSynchronize on m's GPU: all of the process's queued work there), so that work ends
 * before the server may give the memory to another key. cudaFree of an imported pointer does
 * not wait (CUDA 13, an H100: a kernel reading a mapping unmapped meanwhile went on to read
 * another key's bytes). The Python package guards a mapping once its pointer or a view of it is
 * taken. Costs a device synchronisation per import freed (with 16 processes sharing a GPU, a
 * context switch each). No effect on a mapping of host memory. */
GKV_EXPORT void gkv_mapping_guard(gkv_mapping_t *m);
/* Sizes the connection's lease cache (see gkv_unmap): up to slots (0..4096; 0 turns it off)
 * leases, of values up to max_value bytes each and max_bytes in all, stay with their imports
 * after gkv_unmap, so that mapping the key again (gkv_map or gkv_map_many) while it still has
 * that value costs one round trip and no import. Defaults: 8 leases of values up to 1 MiB, no
 * total. A cached lease keeps its value's memory in the server after the key is overwritten
 * (counted against --max-leased-bytes) until the key is mapped again, the lease is evicted, or
 * a request that is not a mapping call ends the cache. Meant for readers that map the same
 * values again and again (a zarr array read repeatedly: gpukv.zarr.GpukvStore). Returns 0,
 * GKV_EINVAL or GKV_ENOMEM. */
GKV_EXPORT int gkv_client_set_lease_cache(gkv_client_t *c, uint32_t slots, uint64_t max_value,
                                          uint64_t max_bytes);
/* Ends n (1..4096) read mappings with one RELEASE (never cached); frees them all. */
GKV_EXPORT int gkv_unmap_batch(gkv_client_t *c, gkv_mapping_t **m, size_t n);
/* Unmaps n (1..4096) read mappings as gkv_unmap does each: the lease cache keeps those it
 * takes, and the rest end with one RELEASE. Frees them all. */
GKV_EXPORT int gkv_unmap_many(gkv_client_t *c, gkv_mapping_t **m, size_t n);
/* Reserves a value of size bytes, writable in place through (*out)->ptr and invisible to
 * readers until gkv_seal. opts: NX/XX (checked at seal, and at CREATE when one is sent) and
 * metadata. A new value reads as zeros (never another value's bytes). When the cache holds the
 * key's spare of this size (see gkv_seal), the value goes into it without a request; it then
 * holds the key's older value, which this process had mapped. */
GKV_EXPORT int gkv_create(gkv_client_t *c, const void *key, size_t klen, uint64_t size,
                          const gkv_set_opts_t *opts, gkv_mapping_t **out);
/* Publishes a created value atomically, replacing any older one, and frees m. The caller must
 * have finished its writes first: synchronise the stream or device that wrote through m->ptr
 * (cudaStreamSynchronize / cudaDeviceSynchronize) before calling this. The library keeps the
 * sealed value's lease and import in the lease cache (any size), and asks the server to make
 * its lease on the value this seal replaced a spare: writable, on memory this process has
 * imported, for the key's next value. So a rewritten key costs two values of memory and one
 * round trip per write. If the seal fails NX/XX, the discarded value becomes the spare. */
GKV_EXPORT int gkv_seal(gkv_client_t *c, gkv_mapping_t *m);
/* Publishes a created value once the work on stream has finished, without waiting for it: the
 * library enqueues on stream (a cudaStream_t; NULL: the legacy default stream) a write of a
 * counter the daemon watches, sends SEAL at once and returns; the daemon publishes the value when
 * it sees the counter written, so readers only ever see it complete (a reader waiting for the
 * key, gkv_get_wait or gkv_watch, gets it then). Seals of one connection are published in the
 * order they were made, and a gkv_seal after them waits for them. If this connection closes (or
 * the process dies) before the stream got there, the value is discarded, never published. A
 * value in host memory (the host backend) is published at once: stream is not used. frees m as
 * gkv_seal does (the lease stays in the lease cache). Returns 0, GKV_ENOTSUP (a daemon without
 * fences, a cluster node, or no CUDA to write the counter with), GKV_EINVAL (m was created with
 * NX or XX: an asynchronous seal cannot say it failed), GKV_EBUSY (64 seals of this connection
 * wait already, or every fence counter still waits for its stream), or a transport code. After
 * GKV_ENOTSUP, GKV_EINVAL or GKV_EBUSY m is still the caller's, writable (gkv_seal or gkv_abort
 * it); after any other return it is freed. */
GKV_EXPORT int gkv_seal_async(gkv_client_t *c, gkv_mapping_t *m, void *stream);
/* Where an asynchronous seal's counter is and what it must become. */
typedef struct {
    volatile uint64_t *counter; /* in this process's memory, shared with the daemon */
    void *device_counter;       /* the same counter as a device address; NULL without CUDA */
    uint64_t target;            /* the value that publishes the seal */
} gkv_fence_t;
/* Like gkv_seal_async, but nothing is enqueued: the caller makes *f->counter equal f->target
 * (a store from the host, or from its own kernel through f->device_counter) once its writes
 * through m are done and visible; the daemon publishes the value then. */
GKV_EXPORT int gkv_seal_deferred(gkv_client_t *c, gkv_mapping_t *m, gkv_fence_t *f);
/* Discards a created value (its lease ends with a RELEASE sent without waiting) and frees m. */
GKV_EXPORT int gkv_abort(gkv_client_t *c, gkv_mapping_t *m);
/* Stores len bytes of device memory dptr (borrowed). Locally: CREATE, a device-to-device copy
 * on the value's GPU (peer to peer when dptr is on another one), SEAL: the caller's GPU work
 * writing dptr must have finished. Otherwise through host memory. Needs a libgpukv built with CUDA (else GKV_ENOTSUP). In
 * a process with no usable GPU (cudaGetDeviceCount fails) dptr is host memory, copied as such:
 * the same calls then work against a host-backend daemon, zero-copy or not.
 * With a daemon of several GPUs and opts naming none, the value goes on the GPU that holds
 * dptr when the daemon serves it. */
GKV_EXPORT int gkv_set_from_device(gkv_client_t *c, const void *key, size_t klen,
                                   const void *dptr, size_t len, const gkv_set_opts_t *opts);
/* One value of gkv_set_many_from_device: key, the device memory dptr of len bytes to store,
 * and (out) the item's status, 0 or a code. */
typedef struct {
    const void *key;
    size_t klen;
    const void *dptr;
    size_t len;
    int status;
} gkv_set_item_t;
/* Stores n (1..4096) device buffers under their keys, each as gkv_set_from_device would, with
 * opts (may be NULL) for all. Locally with zero-copy the requests are pipelined: every CREATE
 * goes out before the first reply is read, each value's copy is enqueued on the legacy default
 * stream of the value's GPU as soon as its memory is there, one wait for all (one per GPU),
 * then every SEAL goes out before the first reply: about two round trips and one wait for n
 * values. Otherwise one gkv_set_from_device each. An item
 * that fails (its status) stores nothing and does not stop the others. Returns 0 when the
 * requests went through (look at each status) or a code for the whole call (a bad key or
 * options, before anything is sent; a broken connection, and then the items not yet sealed
 * say so). The caller's GPU work writing the buffers must have finished. Every value holds a
 * writable lease from its CREATE to its SEAL, so the items past the daemon's --max-leases or
 * --max-leased-bytes for one connection fail with GKV_ELEASELIMIT (the others are stored). */
GKV_EXPORT int gkv_set_many_from_device(gkv_client_t *c, gkv_set_item_t *items, size_t n,
                                        const gkv_set_opts_t *opts);
/* Reads key (or a range) into device memory dptr (cap bytes). Locally: MAP, a device-to-device
 * copy on the value's GPU (peer to peer when dptr is on another one), unmap. Otherwise GET into
 * host memory and a host-to-device copy. */
GKV_EXPORT int gkv_get_to_device(gkv_client_t *c, const void *key, size_t klen,
                                 const gkv_range_t *range, void *dptr, size_t cap,
                                 gkv_value_info_t *info);

/* Registered buffers (PROTOCOL.md "Reading into a registered buffer"): device memory of this
 * process that the daemon writes values into itself, with its own copies, so that a read costs
 * the reader no import, no copy and no GPU work of its own. Registers len bytes at dptr
 * (memory from cudaMalloc, or a part of such an allocation: CuPy's and PyTorch's default
 * allocators; not from a memory pool, cudaMallocAsync or the VMM API) on a local zero-copy
 * connection; *id names it in gkv_get_into. The daemon opens the allocation once and closes it
 * at gkv_buffer_drop or when the connection ends: the memory must stay allocated until then
 * (freeing it before is undefined behaviour in CUDA's terms). At most 16 per connection
 * (GKV_ELEASELIMIT). Returns 0, GKV_ENOTSUP (no zero-copy on this connection, a daemon without
 * GPUs or older than protocol 2's BUFFER, or dptr not device memory), GKV_EINVAL (memory with
 * no CUDA IPC handle, on a GPU the daemon does not serve, or len 0) or a transport error. */
GKV_EXPORT int gkv_buffer_register(gkv_client_t *c, void *dptr, size_t len, uint64_t *id);
/* Ends a registration (the daemon closes its handle). 1 when id was registered, 0 when not. */
GKV_EXPORT int gkv_buffer_drop(gkv_client_t *c, uint64_t id);
/* Reads key (or range, NULL for the whole value) into registered buffer id at byte `at`: the
 * daemon copies the bytes on the buffer's GPU (peer to peer from another of its GPUs; a value in
 * a tier comes up to a GPU first) and answers once the copy has run, so that work this process
 * starts after the call sees them. info->length says how many bytes were written. GKV_ENOSPACE
 * (nothing written) when they do not fit between `at` and the buffer's end; GKV_EINVAL when id
 * is not registered on c. On a cluster node a value another node owns is pulled first. */
GKV_EXPORT int gkv_get_into(gkv_client_t *c, const void *key, size_t klen, const gkv_range_t *range,
                            uint64_t id, uint64_t at, gkv_value_info_t *info);

#ifdef __cplusplus
}
#endif
#endif
