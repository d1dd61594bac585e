/* reply.h: one request's reply as a handler builds it: what the connection tells the handler
 * (in), the reply frame, and what the handler asks the connection to do besides writing it
 * (effects: values to stream, a payload to receive, a fence to wait for, descriptors to pass,
 * authentication and the protocol version decided). Nothing here touches a socket. */
#ifndef GKV_CMD_REPLY_H
#define GKV_CMD_REPLY_H

#include <stdbool.h>
#include <stdint.h>

#include "buffers.h"
#include "lease.h"
#include "message.h"
#include "store.h"
#include "waitq.h"

struct gkv_command;

/* A byte range of an entry to send after the reply header; holds one reference on entry. */
typedef struct {
    gkv_entry_t *entry;
    uint64_t off, len;
} gkv_segment_t;

#define GKV_REPLY_FDS 16 /* GKV_FDPASS_MAX */

/* What a connection says of itself to a handler: set before dispatch, read-only for handlers
 * (except version, which HELLO decides). */
typedef struct {
    bool local;        /* a Unix socket */
    int lane;          /* the connection's copy lane: its values are allocated there too */
    bool first;        /* this is the connection's first request */
    bool zero_copy;    /* zero-copy was granted on this connection */
    bool zc_every_gpu; /* ... for every device (HELLO zero_copy 2), else device 0's */
    bool authed;       /* the connection may run every command (auth.md) */
    /* Not NULL: a SET that finds its GPU full may wait for moves down off the request path
     * (gkv_demoter_room, with this waiter) instead of making the room itself, and a GET of a
     * value on the disk for its read (gkv_demoter_fetch): parked below. */
    gkv_waiter_t *room;
    /* The protocol version the connection speaks (GKV_PROTOCOL_VERSION until a HELLO says
     * otherwise). */
    uint8_t version;
    /* The Unix peer's credentials (SO_PEERCRED), read once at accept; -1 when unknown (TCP). */
    int peer_uid, peer_pid;
    uint64_t conn_id; /* which connection asks (TAKEOVER exempts it from the drain) */
    /* A GET or MAP with a wait (PROTOCOL.md) for a key that does not exist may park to wait
     * for it (may_wait: the connection can), or its wait is over (wait_over: TIMEDOUT). */
    bool may_wait, wait_over;
    /* A GET into a registered buffer on a cluster node: the value whose bytes the pull landed
     * in the buffer already (borrowed; NULL: none): a GET that finds it has nothing to copy. */
    gkv_entry_t *teed;
} gkv_reply_in_t;

typedef struct {
    gkv_wr_t *wr; /* borrowed: where the reply frame goes */
    gkv_reply_in_t in;
    gkv_leases_t *leases;          /* the connection's leases */
    gkv_buffers_t *bufs;           /* the connection's registered buffers (NULL: none) */
    const struct gkv_command *cmd; /* set by gkv_dispatch: the command being run */
    const char *msg;               /* message for an error return (static or msgbuf) */
    char msgbuf[192];
    /* Effects, which the connection carries out in this order once the handler returned. */
    /* HELLO: the token was right (auth_ok) or wrong or missing (auth_failed), and the version
     * the connection speaks from now on (version, set by HELLO). */
    bool auth_ok, auth_failed;
    /* The request waits for moves (in.room), or for its key to exist (wait_key, in.may_wait):
     * nothing is answered; it runs again later. */
    bool parked, wait_key;
    /* WATCH, UNWATCH: the connection starts or ends its watch and writes the reply itself
     * (net/watch.h); the handler wrote nothing. */
    bool watch, unwatch;
    bool watch_span; /* WATCH on a cluster node without local: it spans the cluster */
    /* SEAL with async: the connection gives the seal a fence counter and writes the reply
     * (net/fence.h); the lease (writable, the connection's) is the one sealed. */
    gkv_lease_t *seal_async;
    /* HELLO: the connection gets a fence page, its descriptor passed last (the reply says
     * fences). */
    bool fence_page;
    uint8_t version;
    /* HELLO: the shared-memory fds to pass with the reply (one per device with zc_every_gpu,
     * else device 0's), and whether they reach every device; TAKEOVER: listeners, memory and
     * journal. Owned until passed. */
    int fds[GKV_REPLY_FDS];
    unsigned nfds;
    bool zc_every_gpu;
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
    /* GET into a registered buffer: the value the copy reads, until the fence. One reference. */
    gkv_entry_t *fence_hold;
    /* ... on the value's own GPU: the connection makes the copy itself, on its lane (backend
     * copy_dev), and the reply goes once it has run, in place of a fence of the shared lane. */
    gkv_devptr_t into_dst, into_src;
    uint64_t into_len;
    /* Payload to stream after the header, in order: segs points at one or at a heap array. */
    gkv_segment_t one;
    gkv_segment_t *segs;
    uint32_t nsegs;
} gkv_reply_t;

/* Sets rep up for one request of a connection (wr and leases borrowed; fds -1). */
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
/* Drops the references and memory rep holds (segments, recv, copied) into st. */
void gkv_reply_release(gkv_store_t *st, gkv_reply_t *rep);

#endif
