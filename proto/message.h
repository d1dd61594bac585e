/* message.h: the header fields of requests and responses, the request decoder and the frame
 * writer. Plain buffers only: no sockets. */
#ifndef GKV_PROTO_MESSAGE_H
#define GKV_PROTO_MESSAGE_H

#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>

#include "frame.h"
#include "reader.h"

/* Header field ids (msgpack map keys). Stable: they are the wire format. */
enum {
    GKV_F_OP = 0,
    GKV_F_ID = 1,
    GKV_F_KEY = 2,
    GKV_F_PAYLOAD = 3,
    GKV_F_FLAGS = 4,
    GKV_F_OFFSET = 5,
    GKV_F_LENGTH = 6,
    GKV_F_SUFFIX = 7,
    GKV_F_META = 8,
    GKV_F_KEYS = 9,
    GKV_F_ITEMS = 10,
    GKV_F_PREFIX = 11,
    GKV_F_DELIM = 12,
    GKV_F_CURSOR = 13,
    GKV_F_LIMIT = 14,
    GKV_F_VERSION = 15,
    GKV_F_CLIENT = 16,
    /* response fields */
    GKV_F_STATUS = 20,
    GKV_F_MESSAGE = 21,
    GKV_F_SIZE = 22,
    GKV_F_COUNT = 23,
    GKV_F_ENTRIES = 24,
    GKV_F_DIRS = 25,
    GKV_F_RESULTS = 26,
    GKV_F_SERVER = 30,
    GKV_F_BACKEND = 31,
    GKV_F_DEVICE = 32,
    GKV_F_GPUS = 33,
    GKV_F_ZC = 34,
    GKV_F_ZC_WHY = 35,
    GKV_F_MAX_KEY = 36,
    GKV_F_MAX_VALUE = 37,
    GKV_F_MAX_META = 38,
    GKV_F_MAX_HEADER = 39,
    GKV_F_BYTES = 40,
    GKV_F_LEASE = 41,
    GKV_F_LEASES = 42,
    GKV_F_EXPORT = 43,
    GKV_F_ARENA_OFFSET = 44,
    GKV_F_ARENA_SIZE = 45,
    GKV_F_SPARE = 46,
    GKV_F_TOKEN = 47,
    GKV_F_TTL = 48,
    GKV_F_GPU = 49, /* request: a GPU by the daemon's ordinal (int) or UUID (str); reply: ordinal */
    /* Between cluster nodes (NODE, node.h). */
    GKV_F_NODE_OP = 50,     /* which node request */
    GKV_F_NODE = 51,        /* the sender's node name */
    GKV_F_INCARNATION = 52, /* the sender's incarnation (its etcd lease) */
    GKV_F_VVERSION = 53,    /* a value's version, as its home assigned it */
    GKV_F_OWNER = 54,       /* the node that owns a value (reply) */
    GKV_F_OWNER_INC = 55,   /* ... and its incarnation */
    GKV_F_HAVE = 56,        /* FETCH at the home: the version of the sender's replica */
    GKV_F_PLANE = 57,       /* PLANE: the sender's NIXL agent metadata (bin) */
    GKV_F_ARENAS = 58,      /* PLANE: the sender's transfer arenas (bin, node.h) */
    GKV_F_SLOTS = 59,       /* PUSH: offsets of the sender's arena slots (bin, u64 each) */
    GKV_F_XFER = 60,        /* PUSH: the transfer's id (its notifications name it) */
    GKV_F_TIER = 61,        /* reply (GETSIZE of a key): 1 in the host tier, 2 in the disk tier */
    GKV_F_WAIT = 62,        /* request (GET, MAP): wait this many ms for the key to exist */
    GKV_F_EVENT = 63,       /* event frame (WATCH): what happened to the key (GKV_EVENT_*) */
    GKV_F_SEQ = 64,    /* event frame, WATCH reply: the daemon's count of changes (its order) */
    GKV_F_FENCES = 65, /* HELLO: ask for (1) / the size of the fence region, its fd passed last */
    GKV_F_ASYNC = 66,  /* SEAL request: publish once the fence's counter is written (1) */
    GKV_F_FENCE = 67,  /* SEAL (async): the counter's byte offset in the fence page */
    GKV_F_TARGET = 68, /* SEAL (async): the value the counter reaches when the writes are done */
    GKV_F_LOCAL = 69,  /* WATCH request: 1 watches this node's own changes (a cluster node) */
    GKV_F_AFTER = 70,  /* GET, MAP with wait: wait for a value whose version is above this */
    GKV_F_EARLY = 71,  /* MAP with wait: 1 takes an early frame; reply: 1 marks that frame */
    GKV_F_HOLDS = 72,  /* HELLO reply: allocations a connection may hold (Held imports) */
    GKV_F_HOLD = 73,   /* RELEASE: leases whose allocations the connection holds after them */
    GKV_F_UNHOLD = 74, /* RELEASE: holds (by the lease id each began with) that end */
    GKV_F_HOLD_BYTES = 75, /* HELLO reply: the bytes a connection may hold */
    GKV_F_INTO = 76,       /* GET: the registered buffer the bytes go into; BUFFER: its id */
    GKV_F_INTO_AT = 77,    /* GET with into: where in that buffer (bytes from its start) */
};

/* SEAL's flags field (SET and CREATE use 1 and 2: NX, XX): keep the lease, as a MAP lease on
 * the sealed value, instead of ending it. */
#define GKV_SEAL_KEEP 4u
/* LIST's flags field: each entry is [key, size, gpu] (the daemon's ordinal of the value's GPU)
 * instead of [key, size]. */
#define GKV_LIST_GPU 1u
/* ... and with GKV_LIST_GPU, [key, size, gpu, tier]: 0 on its GPU, 1 host tier, 2 disk tier. */
#define GKV_LIST_TIER 2u
/* HELLO's zero_copy field: 1 asks for zero-copy on the first GPU (one descriptor, MAP of values
 * elsewhere is NOTSUP); GKV_ZC_EVERY_GPU asks for one descriptor per GPU, in the order of gpus,
 * and MAP and CREATE replies then name the value's GPU (gpu). */
#define GKV_ZC_EVERY_GPU 2u

/* Which optional fields a decoded request carried. */
enum {
    GKV_HAS_KEY = 1u << 0,
    GKV_HAS_OFFSET = 1u << 1,
    GKV_HAS_LENGTH = 1u << 2,
    GKV_HAS_SUFFIX = 1u << 3,
    GKV_HAS_META = 1u << 4,
    GKV_HAS_KEYS = 1u << 5,
    GKV_HAS_ITEMS = 1u << 6,
    GKV_HAS_PREFIX = 1u << 7,
    GKV_HAS_CURSOR = 1u << 8,
    GKV_HAS_DELIM = 1u << 9,
    GKV_HAS_LEASES = 1u << 10,
    GKV_HAS_SIZE = 1u << 11,
    GKV_HAS_LEASE = 1u << 12,
    GKV_HAS_SPARE = 1u << 13,
    GKV_HAS_TTL = 1u << 14,
    GKV_HAS_GPU = 1u << 15,
    GKV_HAS_WAIT = 1u << 16,
    GKV_HAS_ASYNC = 1u << 17,
    GKV_HAS_FENCE = 1u << 18,
    GKV_HAS_AFTER = 1u << 19,
    GKV_HAS_HOLD = 1u << 20,
    GKV_HAS_UNHOLD = 1u << 21,
    GKV_HAS_INTO = 1u << 22,
    GKV_HAS_EXPORT = 1u << 23,
};
/* The longest wait a GET or MAP may ask for (wait field), in milliseconds: an hour. */
#define GKV_MAX_WAIT_MS 3600000u

/* A decoded request. Every slice borrows from the header buffer given to gkv_req_decode and is
 * valid as long as that buffer is. */
typedef struct {
    uint64_t op, id, payload_len, flags, offset, length, suffix, limit, version;
    uint64_t zero_copy; /* HELLO: 1 asks for zero-copy on this connection */
    uint64_t size;      /* CREATE: the new value's size */
    uint64_t lease;     /* SEAL, ABORT, RELEASE of one lease */
    uint64_t spare;     /* SEAL: a MAP lease to be told about (is it a spare now?) */
    uint64_t ttl;       /* SET, CREATE, EXPIRE: milliseconds to the key's deadline */
    uint64_t wait;      /* GET, MAP: milliseconds to wait for the key to exist */
    uint64_t after;     /* GET, MAP with wait: ... or for a version above this one */
    uint64_t async;     /* SEAL: 1 publishes when the fence counter says the writes are done */
    uint64_t fence, target; /* SEAL with async: the counter (byte offset) and its target */
    uint64_t fences;    /* HELLO: 1 asks for the fence region */
    uint64_t local;     /* WATCH: 1 watches this node's own changes only */
    uint64_t early;     /* MAP with wait: 1 takes an early frame (PROTOCOL.md) */
    uint64_t gpu;       /* SET, CREATE, MOVE: the GPU's ordinal in the daemon, unless gpu_uuid */
    gkv_slice_t gpu_uuid; /* ... or its UUID (len > 0) */
    gkv_slice_t token;  /* HELLO: the authentication token (--auth-token-file) */
    uint64_t into, into_at;  /* GET: a registered buffer and where in it; BUFFER: one to drop */
    gkv_slice_t export_data; /* BUFFER: the memory's CUDA IPC handle */
    uint32_t has;       /* GKV_HAS_* */
    gkv_slice_t key, meta, prefix, cursor, delim;
    gkv_slice_t keys;  /* raw msgpack array of bin: iterate with gkv_req_keys_next */
    uint32_t nkeys;
    gkv_slice_t items; /* raw msgpack array of [key, offset, length, suffix] */
    uint32_t nitems;
    gkv_slice_t leases; /* raw msgpack array of uint lease ids (RELEASE) */
    uint32_t nleases;
    gkv_slice_t hold, unhold; /* RELEASE: raw msgpack arrays of uint ids (held imports) */
    uint32_t nhold, nunhold;
    /* NODE (node.h): the request, the sender and its incarnation, a value version, an owner. */
    uint64_t node_op, incarnation, vversion, owner_inc, have;
    gkv_slice_t node, owner;
    /* PLANE: NIXL metadata and arenas; STAGE: where in the sender's arena (arena_offset). */
    gkv_slice_t plane, arenas, slots;
    uint64_t arena_offset, xfer;
} gkv_request_t;

/* Decodes one request header (hdr, len bytes, borrowed) into *req. Checks structure and types
 * only; limits that depend on the server's configuration are the dispatcher's. Returns 0 or
 * GKV_EPROTO, with *why (static text) saying what was wrong. */
int gkv_req_decode(const uint8_t *hdr, size_t len, gkv_request_t *req, const char **why);

/* Iterates a validated keys array: start with gkv_read_init(it, keys.p, keys.len) and call
 * gkv_read_array once, then this n times. */
int gkv_req_keys_next(gkv_reader_t *it, gkv_slice_t *key);
/* Iterates a validated items array the same way. */
typedef struct {
    gkv_slice_t key;
    uint64_t offset, length, suffix;
} gkv_item_t;
int gkv_req_items_next(gkv_reader_t *it, gkv_item_t *item);

/* A decoded response header. Slices borrow from the header buffer. Arrays (entries, dirs,
 * results, gpus) stay raw: iterate them with gkv_read_* after gkv_read_array. */
typedef struct {
    uint64_t id, payload_len, size, offset, count, bytes, version, max_key, max_value, max_meta;
    uint64_t length, lease, arena_offset, arena_size, spare;
    uint64_t ttl; /* TTL: milliseconds left (has_ttl; absent: the key has no deadline) */
    int64_t status, device;
    int64_t gpu; /* the daemon's ordinal of the value's GPU; -1 when the reply has none */
    uint64_t tier; /* GETSIZE: 1 host tier, 2 disk tier, 0 on its GPU (or no tier field) */
    uint64_t event; /* a WATCH's event frame: GKV_EVENT_* (0: not an event) */
    uint64_t seq;   /* an event's, or WATCH's reply: the daemon's count of changes */
    uint64_t fences; /* HELLO: the fence region's size (its fd is the last passed), 0: none */
    uint64_t early;  /* MAP: 1 in the early frame of a waiting MAP (PROTOCOL.md) */
    uint64_t holds;  /* HELLO: allocations the connection may hold (0: holds not offered) */
    uint64_t hold_bytes; /* HELLO: ... and their bytes */
    uint64_t into;       /* BUFFER: the registered buffer's id */

    gkv_slice_t key; /* an event's key */
    gkv_slice_t message, meta, cursor, server, backend, zc, zc_why, export_data;
    gkv_slice_t entries, dirs, results, gpus;
    bool has_meta, has_cursor, has_ttl;
    /* NODE replies (node.h). */
    uint64_t vversion, owner_inc;
    gkv_slice_t owner;
    gkv_slice_t node; /* an event frame of a WATCH spanning a cluster: the member it came from */
} gkv_response_t;

/* Decodes a response header (hdr, len bytes, borrowed). Returns 0 or GKV_EPROTO. */
int gkv_resp_decode(const uint8_t *hdr, size_t len, gkv_response_t *resp);

/* A frame writer: headers are msgpack maps whose count and the frame's length prefix are
 * patched in when the frame ends, so fields need not be counted in advance. Several frames can
 * be written one after another into one buffer (one socket write for many replies). */
typedef struct {
    msgpack_sbuffer sb;
    msgpack_packer pk;
    size_t frame_start; /* offset of the current frame's length prefix */
    uint32_t fields;
    bool failed;        /* an allocation failed: the buffer is unusable until reset */
} gkv_wr_t;

void gkv_wr_init(gkv_wr_t *w);
void gkv_wr_fini(gkv_wr_t *w);
/* Forgets the written bytes, keeps the allocation. */
void gkv_wr_reset(gkv_wr_t *w);
/* Starts a frame: reserves the prefix and a map32 header. */
void gkv_wr_begin(gkv_wr_t *w);
void gkv_wr_uint(gkv_wr_t *w, unsigned field, uint64_t v);
void gkv_wr_int(gkv_wr_t *w, unsigned field, int64_t v);
void gkv_wr_bin(gkv_wr_t *w, unsigned field, const void *p, size_t len);
void gkv_wr_str(gkv_wr_t *w, unsigned field, const char *s);
/* Starts an array-valued field; pack its elements with w->pk, then gkv_wr_array_end with the
 * number of elements. Returns the position to patch. */
size_t gkv_wr_array_begin(gkv_wr_t *w, unsigned field);
void gkv_wr_array_end(gkv_wr_t *w, size_t pos, uint32_t n);
/* Ends the frame. Returns 0, GKV_ETOOBIG when the header outgrew GKV_MAX_HEADER (the frame is
 * then removed), or GKV_ENOMEM. */
int gkv_wr_end(gkv_wr_t *w);
/* Begins a reply frame of request id with status 0 (add fields, then gkv_wr_end). */
void gkv_wr_ok(gkv_wr_t *w, uint64_t id);
/* Writes a whole error reply {id, status, message}; msg is borrowed (NULL: the code's text). */
void gkv_wr_error(gkv_wr_t *w, uint64_t id, int code, const char *msg);
/* Bytes of the current (unfinished) frame's header so far. */
size_t gkv_wr_frame_size(const gkv_wr_t *w);

#endif
