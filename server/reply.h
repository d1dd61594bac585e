/* reply.h: what a handler fills (the reply frame, values to stream, a payload to receive) and
 * the checks and lookups the handlers share. Nothing here touches a socket. */
#ifndef GKV_SERVER_REPLY_H
#define GKV_SERVER_REPLY_H

#include "message.h"
#include "server.h"
#include "store.h"

struct gkv_command;

/* A byte range of an entry to send after the reply header; holds one reference on entry. */
typedef struct {
    gkv_entry_t *entry;
    uint64_t off, len;
} gkv_segment_t;

#define GKV_REPLY_FDS 16 /* GKV_FDPASS_MAX */

typedef struct {
    gkv_wr_t *wr;          /* borrowed: where the reply frame goes */
    struct gkv_conn *conn; /* borrowed: the connection asking (TAKEOVER checks its peer) */
    uint64_t id;
    bool local;        /* the connection is a Unix socket */
    int lane;          /* the connection's copy lane: its values are allocated there too */
    bool first;        /* this is the connection's first request */
    bool zero_copy;    /* zero-copy was granted on this connection */
    bool zc_every_gpu; /* ... for every device (HELLO zero_copy 2), else device 0's */
    bool authed;       /* in: the connection may run every command (auth.md) */
    /* in: the protocol version the connection speaks (GKV_PROTOCOL_VERSION until a HELLO says
     * otherwise); out (HELLO): the version it asked for. */
    uint8_t version;
    bool auth_ok, auth_failed;     /* out (HELLO): the token was right, or wrong or missing */
    gkv_leases_t *leases;          /* the connection's leases */
    const struct gkv_command *cmd; /* set by gkv_dispatch: the command being run */
    /* HELLO: the shared-memory fds to pass with the reply (one per device with zc_every_gpu,
     * else device 0's); TAKEOVER: listeners, memory and journal. Owned until passed. */
    int fds[GKV_REPLY_FDS];
    unsigned nfds;
    const char *msg; /* message for an error return (static or msgbuf) */
    char msgbuf[192];
    /* Payload to stream after the header, in order: segs points at one or at a heap array. */
    gkv_segment_t one;
    gkv_segment_t *segs;
    uint32_t nsegs;
    /* A payload to receive into recv (one reference); cmd->on_payload finishes the command. */
    gkv_entry_t *recv;
    unsigned recv_flags;
    /* The reply goes out only once the backend's shared lane has run (fence_shared): memory a
     * CREATE allocated, or a MAP's copy of a value, is then usable by another process. With
     * fence_batches the batches started so far are waited for too (MAP). */
    bool fence, fence_batches;
    uint8_t fence_dev; /* the device whose shared lane (and batches) the fence waits for */
    /* MAP of a value carved from a slab, or MOVE: after the fence, gkv_store_copy_end(copied_from,
     * copied_to). One reference on each. */
    gkv_entry_t *copied_from, *copied_to;
} gkv_reply_t;

/* Sets rep up for one request of a connection (wr and leases borrowed; fd -1). */
void gkv_reply_init(gkv_reply_t *rep, gkv_wr_t *wr, gkv_leases_t *leases);
/* Writes an error frame {id, status, message}. msg is borrowed (NULL: the code's text). */
void gkv_reply_error(gkv_wr_t *wr, uint64_t id, int code, const char *msg);
/* Starts a success frame {id, status 0}; the caller adds fields and calls gkv_wr_end. */
void gkv_reply_ok(gkv_wr_t *wr, uint64_t id);
/* Writes a success frame {id, status 0, count}. Returns gkv_wr_end's code. */
int gkv_reply_count(gkv_reply_t *rep, uint64_t id, uint64_t count);
/* Sets the error message of rep (printf format) and returns code, for `return fail(...)`. */
int gkv_reply_fail(gkv_reply_t *rep, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Appends a segment of e (taking a reference) to rep's segments, which have room for it. */
void gkv_reply_add_segment(gkv_reply_t *rep, gkv_entry_t *e, uint64_t off, uint64_t len);
/* Drops the references and memory rep holds (segments, recv, copied). */
void gkv_reply_release(gkv_server_t *srv, gkv_reply_t *rep);

/* 0 when key is 1..max-key-size bytes, else the error (message in rep). */
int gkv_cmd_check_key(gkv_server_t *srv, gkv_slice_t key, gkv_reply_t *rep);
/* Turns a requested range into (off, len) within a value of size bytes. A suffix takes the last
 * bytes; otherwise length 0 means "to the end" and a length past the end is clamped. Returns 0
 * or GKV_ERANGE (offset past the end). */
int gkv_range_resolve(uint64_t size, uint64_t offset, uint64_t length, uint64_t suffix,
                      uint64_t *off, uint64_t *len);
/* The entry under the request's key (*e borrowed) and the byte range it asks for (GET, MAP).
 * Returns 0, GKV_ENOTFOUND or GKV_ERANGE. */
int gkv_cmd_lookup_range(gkv_server_t *srv, const gkv_request_t *req, gkv_reply_t *rep,
                         gkv_entry_t **e, uint64_t *off, uint64_t *len);
/* The request's metadata within GKV_MAX_META (SET, CREATE, SEAL). */
int gkv_cmd_check_meta(const gkv_request_t *req, gkv_reply_t *rep);
/* A ttl field, if the request has one, is 1..GKV_MAX_TTL_MS: 0 or an INVALID error. */
int gkv_cmd_check_ttl(const gkv_request_t *req, gkv_reply_t *rep);
/* Checks a new value of `size` bytes for SET or CREATE: flags, size and metadata limits, and
 * NX/XX against the key's current state (checked again when the value is published: another
 * client may change the key meanwhile). */
int gkv_cmd_check_new_value(gkv_server_t *srv, const gkv_request_t *req, uint64_t size,
                            gkv_reply_t *rep);
/* An OOM for a value of size bytes that does not fit on device dev: its figures, and with
 * several devices its ordinal and UUID, in the message. Returns GKV_EOOM. */
int gkv_reply_oom(gkv_reply_t *rep, const gkv_store_t *st, unsigned dev, uint64_t size);
/* The device a request names with gpu (the daemon's ordinal, or a UUID: the first device with
 * it) in *dev; *dev = -1 when it names none. Returns 0 or GKV_EINVAL (the message names it). */
int gkv_cmd_named_device(gkv_server_t *srv, const gkv_request_t *req, gkv_reply_t *rep, int *dev);
/* Makes the entry for a new value of the request's key (lane GKV_LANE_SHARED for CREATE), with
 * OOM explained, on the device the request names (gpu) or else the one the store's placement
 * picks (gkv_store_place). A CREATE on a connection whose zero-copy reaches device 0 only goes
 * there (naming another is NOTSUP). *out holds the caller's reference. */
int gkv_cmd_new_entry(gkv_server_t *srv, const gkv_request_t *req, uint64_t size, int lane,
                      gkv_reply_t *rep, gkv_entry_t **out);

#endif
