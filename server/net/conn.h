/* conn.h: one client connection: reads frames and runs handlers (conn.c, request.c), moves
 * values between the socket and backend memory and writes replies in order (send.c, recv.c),
 * keeps its deadlines (limits.c). Every value moves through the backend's copies, on every
 * backend: staging buffers for large ones, copy batches for small ones. */
#ifndef GKV_NET_CONN_H
#define GKV_NET_CONN_H

#include <stdbool.h>
#include <uv.h>

#include "cmd.h"
#include "commit.h"
#include "net.h"

/* Largest request header accepted before authentication. */
#define GKV_PREAUTH_HEADER (16u << 10)

/* Most requests one connection handles before the loop serves the others again. */
#define GKV_FRAMES_PER_TURN 16

/* A connection's lifetime. It is allocated at accept and freed only in its close callback
 * (on_closed), which runs after uv_close; uv_close is called only by gkv_conn_finish_close once
 * nobody else holds a pointer to it. Besides the net's list of connections (which it leaves
 * in the close callback), these hold a gkv_conn_t pointer, and each is counted or cancelled
 * before the close may start:
 *   - the backend and the completion queue, from the start of a copy or fence on c->copy until
 *     gkv_conn_copy_finished ran for it: counted in `copies`;
 *   - copy batches that owe a reply its bytes (gkv_batch_out), the fd store's commit queue, and
 *     a failed HELLO's delay: the holds (below);
 *   - the staging, batch and demoter's waiter queues (c->waiter, c->bwaiter, c->rwaiter):
 *     cancelled by gkv_conn_close;
 *   - the net's yielded list: unlinked in the close callback;
 *   - a cluster job running for its request (c->route): wait.cluster, cleared when it ends.
 * Once `closing` is set nothing starts new work for c: a copy started on a closing connection
 * is refused (gkv_conn_copy_begin), so `copies` only falls. tests/integration/test_lifetime.c
 * closes connections at every stage of a transfer under ASan.
 *
 * Its state: the phase of its request stream (gkv_conn_phase_t); what it waits for (wait: at
 * most one of a copy, a staging buffer, room in a copy batch stops it from reading); and its
 * holds, each a named reason why the replies written so far may not go out yet. Only the
 * connection's own code sets and clears them (the callbacks it registers included). */

typedef enum {
    CONN_HEADER,  /* waiting for / parsing request headers */
    CONN_PAYLOAD, /* receiving a SET payload into an entry (recv.c) */
    CONN_DISCARD, /* skipping the payload of a refused request */
    CONN_SEND,    /* sending values out through a staging buffer (send.c) */
} gkv_conn_phase_t;

/* Why replies are held back in the reply buffer. Nothing is written while any is held. */
typedef struct {
    uint32_t batch; /* GET replies whose bytes copy batches have yet to bring */
    bool fence;     /* a reply that waits for a fence (start_fence) */
    bool auth;      /* a failed HELLO's reply, until auth_hold_until */
    bool commit;    /* the journal has yet to commit what the requests appended (commit.h) */
} gkv_holds_t;

/* What stops the connection from going on until a callback comes. */
typedef struct {
    bool copy;  /* its copy (or fence) in flight must finish first */
    bool stage; /* queued for a staging buffer (c->waiter) */
    bool batch; /* a small SET waits for room in a copy batch (c->bwaiter) */
    bool cluster; /* the request waits for other cluster nodes (c->route, cluster.h) */
    bool room;    /* a SET waits for values to move down off its full GPU (c->rwaiter) */
    bool key;     /* a GET or MAP waits for its key to exist (keywait.h) */
    bool fence;   /* a SEAL waits for the connection's asynchronous seals (fence.h) */
} gkv_waits_t;

/* Replies and values going out (send.c). */
typedef struct {
    size_t pending;       /* bytes handed to libuv not yet written */
    uint64_t write_since; /* queued output last moved */
    /* Values being sent through staging: segments (references held), position, chunk size.
     * A chunk goes to the socket with uv_try_write; what the socket cannot take at once goes
     * out in pieces through tail, a small copy, so that libuv never holds the staging buffer
     * and a client that stops reading can be made to give it back (gkv_conn_yield_stage). */
    gkv_segment_t one;
    gkv_segment_t *segs;
    uint32_t nsegs, seg_i;
    uint64_t seg_pos;
    size_t chunk, sent; /* the chunk in stage (0: none), and how much of it went out */
    /* Or the chunk is the host tier's memory itself (a value there goes to the socket with no
     * copy; the segment's reference keeps it), NULL otherwise. */
    const uint8_t *direct;
    /* The segment's next chunk (ahead_len bytes), copied into ahead while stage's goes out:
     * the copy and the socket overlap. ahead_busy while its copy runs (c->copy). */
    void *ahead;
    size_t ahead_len;
    bool ahead_busy;
    bool tail_busy;    /* tail is being written */
    int narrow_sndbuf; /* while a large reply goes out: the send buffer to restore, else 0 */
    uint8_t *tail;     /* GKV_SEND_TAIL bytes, allocated on first use */
} gkv_sender_t;

/* A SET's payload coming in (recv.c): it goes into entry (one reference), then cmd's on_payload
 * finishes the command. */
typedef struct {
    gkv_entry_t *entry;
    const gkv_command_t *cmd;
    uint64_t got; /* bytes copied in (the flight's not yet) */
    uint64_t req_id;
    unsigned flags;
    uint64_t discard_left; /* CONN_DISCARD: payload bytes still to skip */
    /* A payload chunk being copied into the value (bytes [got, got + flight_len)) while the
     * next fills stage: the socket and the copy overlap. At most one; wait.copy is set only
     * while c must wait for it. */
    void *flight;
    size_t flight_len;
    bool to_stage; /* the read under way goes straight into stage (gkv_conn_read_target) */
} gkv_receiver_t;

struct gkv_conn {
    union {
        uv_handle_t handle;
        uv_stream_t stream;
        uv_pipe_t pipe;
        uv_tcp_t tcp;
    } h;
    gkv_net_t *net;
    gkv_conn_t *prev, *next; /* the net's list */
    gkv_conn_t *done_next;   /* the completion queue (turns.c) */
    gkv_conn_t *yield_next;  /* the net's yielded list, while yielded */
    uint64_t id;
    int lane;
    gkv_conn_phase_t phase;
    gkv_waits_t wait;
    gkv_holds_t hold;
    bool local, reading, closing, close_started, graceful;
    bool handling;     /* inside handle_request: the request's fields point into the input */
    bool zero_copy;    /* zero-copy granted: the shared-memory fds were passed */
    bool zc_every_gpu; /* ... one per device (HELLO zero_copy 2), else device 0's */
    bool yielded;      /* handled its share of frames this turn (net.h) */
    bool authed;       /* every command allowed: no token configured, or HELLO had it */
    uint8_t version;   /* the protocol version HELLO asked for (the newest until one does) */
    int peer_uid, peer_gid, peer_pid;     /* a Unix peer's credentials, read at accept; else -1 */
    gkv_waiter_t bwaiter;                 /* room in a copy batch (wait.batch) */
    gkv_waiter_t rwaiter;                 /* moves off a full GPU (wait.room, demoter.h) */
    unsigned room_waits;                  /* times the request in hand waited for moves */
    /* A GET or MAP waiting for its key (keywait.h): the key's queue and c's next in it, when
     * the wait ends (uv_now ms; 0: the request in hand has not waited), and whether it did. */
    struct kw_bucket *kw_bucket;
    gkv_conn_t *kw_next;
    uint64_t kw_deadline;
    uint64_t kw_recheck; /* a cluster node's: when it asks the key's home again (0: never) */
    bool kw_timed_out;
    /* An early MAP (keywait.h): the waiting request takes an early frame (kw_early, request
     * kw_req_id), or one whose value a cluster pull brings here (route.early set while it is
     * routed); early_lease, the lease that frame granted, is offered for renewal when request
     * early_req_id runs again. */
    bool kw_early;
    uint64_t kw_req_id, early_lease, early_req_id;
    struct gkv_watch *watch; /* its watch of a prefix (watch.h), NULL when it watches none */
    struct gkv_fence *fence; /* its fence page and asynchronous seals (fence.h), or NULL */
    gkv_route_ticket_t route;             /* the request in the cluster's hands (wait.cluster) */
    gkv_commit_waiter_t commit;           /* the journal's commit (hold.commit) */
    uint64_t journal_mark;                /* the journal's length as the request began */
    gkv_entry_t *copied_from, *copied_to; /* the fence's MAP or MOVE copy (reply.h) */
    gkv_entry_t *fence_hold;              /* the fence's GET into: the value read (reply.h) */
    gkv_entry_t *teed; /* the cluster's pull landed this value in the GET into's buffer */
    uint64_t requests;                    /* requests handled so far */
    uint64_t op, op_started; /* the request in progress: opcode, uv_hrtime at its header */
    /* Deadlines (limits.c), in uv_now milliseconds. */
    uint64_t frame_since;     /* the frame in progress began (or last kept moving); 0: none */
    uint64_t frame_bytes;     /* input bytes since frame_since */
    uint64_t active_at;       /* last input or output */
    uint64_t auth_hold_until; /* hold.auth: the failed HELLO's reply goes out then, c closes */
    gkv_leases_t leases;
    gkv_buffers_t bufs; /* its registered buffers (BUFFER), closed when it ends */
    /* Input: bytes [in_pos, in_len) of in are unprocessed. */
    uint8_t *in;
    size_t in_cap, in_len, in_pos;
    gkv_wr_t out; /* replies produced since the last write */
    gkv_sender_t snd;
    gkv_receiver_t rcv;
    /* The one backend copy (or fence) this connection may have in flight, and how many were
     * started on it whose completion has not been handled yet (the lifetime rule above). */
    gkv_copy_t copy;
    uint32_t copies;
    int copy_status;
    bool fencing; /* copy is a fence_shared a reply waits for */
    /* The staging buffer (GKV_STAGING_CHUNK bytes) the send or the payload is using, and the
     * payload bytes in it; c->waiter queues for one. */
    gkv_waiter_t waiter;
    void *stage;
    size_t stage_fill;
    uv_shutdown_t shutdown_req;
};

/* True while any hold keeps c's replies back. */
static inline bool gkv_conn_held(const gkv_conn_t *c)
{
    return c->hold.batch || c->hold.fence || c->hold.auth || c->hold.commit;
}

/* Accepts a pending connection on listener (borrowed). local: a Unix socket. The connection is
 * owned by the net's list and frees itself when closed. Returns 0 or a negative code. */
int gkv_conn_accept(gkv_net_t *net, uv_stream_t *listener, bool local);
/* A connection on fd, a socket already connected (socket activation, a test's socketpair: the
 * whole-daemon fuzzer drives one): owned by the call, closed on failure. local: a Unix socket.
 * Returns like gkv_conn_accept. */
int gkv_conn_open(gkv_net_t *net, int fd, bool local);
/* Closes c: graceful waits for queued replies to be written. Freed in the close callback. */
void gkv_conn_close(gkv_conn_t *c, bool graceful);
/* Closes c without waiting for its queued output: at once, or when its backend copy in
 * flight completes. Also ends a graceful close that waits on a client that does not read. */
void gkv_conn_abort(gkv_conn_t *c);
/* The daemon is stopping: close c once its request in flight is answered. */
void gkv_conn_stop(gkv_conn_t *c);
/* The daemon is stopping and its grace period is over: a SET still receiving gets a SHUTDOWN
 * error, then c is aborted. */
void gkv_conn_stop_now(gkv_conn_t *c);
/* Checks c's deadlines at now (uv_now): a frame that stalls, an idle connection, output the
 * client does not take (limits.c). */
void gkv_conn_sweep(gkv_conn_t *c, uint64_t now);
/* A cluster job for c's request finished (a gkv_route_ticket_t wake, on the loop). */
void gkv_conn_cluster_wake(void *conn);
/* Runs on the loop thread after c's backend copy reported completion. */
void gkv_conn_copy_finished(gkv_conn_t *c);
/* A copy batch brought len bytes (borrowed for the call) for the reply-buffer offset tag of
 * connection sink; a gkv_batch_deliver_fn. */
void gkv_conn_batch_deliver(void *sink, uint64_t tag, const void *bytes, uint32_t len, int status);

#endif
