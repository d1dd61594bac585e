/* client.h: libgpukv internals shared by its source files (not installed): the connection,
 * and the frame I/O of transport.c that every call is built on. */
#ifndef GKV_CLIENT_CLIENT_H
#define GKV_CLIENT_CLIENT_H

#include <gpukv/gpukv.h>
#include <stdbool.h>

#include "fdpass.h"
#include "lease_cache.h"
#include "message.h"

/* How long the answer of a request waiting for its key is polled for before the thread sleeps:
 * a hand-off answered within it costs no wake-up (a thread's wake-up is ~10 us). */
#define GKV_WAIT_SPIN_NS 2000000
/* SO_SNDBUF asked for on Unix sockets (connect.c): large SETs move in fewer rounds. */
#define GKV_CLIENT_SNDBUF (4 << 20)

struct gkv_client {
    int fd;
    bool broken; /* the byte stream lost sync: every call is GKV_ECLOSED */
    uint64_t next_id;
    gkv_wr_t wr;  /* request being built */
    uint8_t *hdr; /* last response header */
    size_t hdr_cap;
    gkv_response_t resp; /* decoded from hdr */
    char errmsg[256];
    gkv_server_info_t info;
    char s_server[32], s_backend[16], s_zero_copy[32], s_zero_copy_why[160];
    char s_uuids[GKV_FDPASS_MAX][48]; /* HELLO's gpus, in the daemon's order */
    const char *uuid_ptrs[GKV_FDPASS_MAX];
    uint8_t *meta; /* copy of the last value's metadata */
    gkv_progress_fn progress;
    void *progress_arg;
    /* Zero-copy: the fds passed with HELLO (one per GPU, or the first GPU's only), what they
     * are, and this connection's imports. */
    bool local;
    uint32_t deferred;    /* replies to read and drop before the next one (RELEASE) */
    uint64_t deferred_id; /* the id of the oldest of them; the others follow it */
    int shared_fds[GKV_FDPASS_MAX];
    unsigned nshared;
    uint64_t arena_size; /* the first GPU's arena (host backend); the others' from fstat */
    /* Each GPU's pool or arena, attached at the first mapping of a value there. */
    struct gkv_attach *attach[GKV_FDPASS_MAX];
    struct mapping *mappings; /* every live mapping of this connection (mapping.c) */
    gkv_lease_cache_t lc;     /* what is kept after the caller is done, and later ends */
    uint32_t wait_ms; /* the next GET or MAP waits this long for its key (gkv_wait_next; 0: not) */
    uint64_t wait_after; /* ... for a version above this one (gkv_wait_newer; 0: any) */
    bool wait_newer;     /* wait_after is armed */
    bool internal;       /* a mapping call inside the library (its mapping is not shown) */
    /* Held imports (PROTOCOL.md): how many this connection may hold (HELLO holds, capped), and
     * the imports it holds, oldest first, with their bytes. */
    uint64_t holds_max, hold_bytes_max;
    struct gkv_held *held;
    size_t nheld, held_cap;
    uint64_t held_bytes;
    uint64_t last_version; /* the last reply's version (gkv_last_version) */
    /* How long a receive polls before it sleeps (0: GKV_SPIN_NS): longer while a request waits
     * for its key, whose answer is a hand-off that should not pay a thread's wake-up. */
    uint64_t spin_ns;
    /* The WATCH's id while c watches (gkv_watch), else 0: c takes no other request; the key of
     * the last event read (gkv_watch_next), owned. */
    uint64_t watch_id;
    uint8_t *ev_key;
    size_t ev_key_cap;
    char ev_node[64]; /* the last event's member (a watch spanning a cluster), or "" */
    uint64_t ev_version; /* the last event's cluster version of its key, or 0 */
    /* The fence page HELLO passed (fence.c): its descriptor (-1: none) and size, mapped at
     * the first asynchronous seal, and its device address once registered with CUDA. */
    int fence_fd;
    uint64_t fence_size;
    uint64_t *fence_map;
    void *fence_dev;
    uint64_t fence_last[64]; /* each counter's last target (it is free again once reached) */
};

/* Starts a request frame with op and a fresh id. */
void gkv__begin(gkv_client_t *c, unsigned op);
/* Starts another frame after the one being built (ended with gkv__end_frame), for requests
 * pipelined in one send: gkv__send sends every frame in the buffer. */
void gkv__begin_more(gkv_client_t *c, unsigned op);
/* Ends the frame being built. Returns 0, GKV_ETOOBIG or GKV_ENOMEM. */
int gkv__end_frame(gkv_client_t *c);
/* Ends the frame and sends it, then payload (borrowed, may be NULL/0). Returns 0 or a code. */
int gkv__send(gkv_client_t *c, const void *payload, size_t len);
/* 0 when key is 1..max_key bytes, else GKV_EINVAL or GKV_ETOOBIG (no round trip). */
int gkv__check_key(const gkv_client_t *c, const void *key, size_t klen);
/* Adds the key and a byte range (NULL: the whole value) to the request being built. */
void gkv__put_key_range(gkv_client_t *c, const void *key, size_t klen, const gkv_range_t *range);
/* Fills info from a GET reply just read (c->resp), length bytes returned, its metadata copied
 * into c->meta (the previous value's freed). 0, or GKV_ENOMEM with the connection broken. */
int gkv__read_info(gkv_client_t *c, uint64_t length, gkv_value_info_t *info);
/* Adds SET/CREATE options (flags, metadata, ttl) to the request being built; opts may be NULL. */
void gkv__put_set_opts(gkv_client_t *c, const gkv_set_opts_t *opts);
/* Checks key and opts, then sends the header of a SET of len payload bytes (the payload follows
 * with gkv__send_raw, then gkv__recv reads the reply). Returns 0 or a code. */
int gkv__set_begin(gkv_client_t *c, const void *key, size_t klen, uint64_t len,
                   const gkv_set_opts_t *opts);
/* Ends the last frame and sends every frame built since gkv__begin (payload_len must already
 * be in it; the payload, if any, follows with gkv__send_raw). */
int gkv__send_frame(gkv_client_t *c);
/* Sends raw bytes. */
int gkv__send_raw(gkv_client_t *c, const void *p, size_t len);
/* Reads the next response into c->resp. Returns its status (0 or negative), or a transport
 * code; on a server error c->errmsg holds its message. */
int gkv__recv(gkv_client_t *c);
/* Reads the next frame's header into c->resp, whichever request it answers (a watch's events
 * carry the WATCH's id): 0 or a transport code; the frame's own status is c->resp.status (its
 * message in c->errmsg). */
int gkv__recv_any(gkv_client_t *c);
/* Reads the replies of requests sent without waiting (RELEASE). Returns 0 or a transport
 * code. */
int gkv__read_deferred(gkv_client_t *c);
/* Reads exactly len payload bytes into buf. */
int gkv__recv_raw(gkv_client_t *c, void *buf, size_t len);
/* Reads and drops len payload bytes. */
int gkv__drain(gkv_client_t *c, uint64_t len);
/* Ends the leases of the lease cache: frees their imports, then sends one RELEASE. Every call
 * that is not a mapping call runs it first, so that what its request sees (INFO's leases, the
 * memory a DEL frees) is what the caller's unmaps and seals left. Returns 0 or a code. */
int gkv__cache_flush(gkv_client_t *c);

/* At close: frees every mapping of c still alive (cached or the caller's: their pointers become
 * invalid) and detaches from the server's memory. The socket's end ends the leases. */
void gkv__mappings_close(gkv_client_t *c);
/* Sends the GET or MAP being built (no payload) and reads its reply, as gkv__send and gkv__recv
 * do, with the wait gkv_wait_next armed, if any: its field in the request, the socket's receive
 * timeout raised by as much for the reply. Returns 0 or a code. */
int gkv__send_waiting(gkv_client_t *c);
/* At most this many imports, and bytes of them, held per connection (HELLO's holds caps the
 * count too). */
#define GKV_HOLDS_MAX 1024
#define GKV_HOLD_BYTES (2ull << 30)
/* An import c holds past its lease (mapping.c). */
struct gkv_held {
    struct gkv_import *imp;
    uint64_t bytes;
};
/* gkv__send_waiting for a MAP that asked for an early frame (`early`, with a wait or not):
 * each early frame read before the answer goes to fn (with arg), which returns 0 to read on or
 * a code to stop with. An early frame when fn is NULL is a protocol error. */
typedef int (*gkv_early_fn)(gkv_client_t *c, void *arg);
int gkv__send_waiting_early(gkv_client_t *c, gkv_early_fn fn, void *arg);
/* At close: the fence page unregistered, unmapped and closed (fence.c). */
void gkv__fence_close(gkv_client_t *c);
/* Marks the connection unusable and returns code. */
int gkv__break(gkv_client_t *c, int code);

#endif
