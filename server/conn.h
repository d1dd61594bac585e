/* conn.h: one client connection: reads frames and runs handlers (conn.c), moves values between
 * the socket and backend memory and writes replies in order (conn_transfer.c). Every value moves
 * through the backend's copies, on every backend: staging buffers for large ones, copy batches
 * for small ones. */
#ifndef GKV_SERVER_CONN_H
#define GKV_SERVER_CONN_H

#include <stdbool.h>
#include <uv.h>

#include "cmd.h"
#include "server.h"

/* Largest request header accepted before authentication. */
#define GKV_PREAUTH_HEADER (16u << 10)

/* Most requests one connection handles before the loop serves the others again. */
#define GKV_FRAMES_PER_TURN 16

/* A connection's lifetime. It is allocated at accept and freed only in its close callback
 * (on_closed), which runs after uv_close; uv_close is called only by gkv_conn_finish_close once
 * nobody else holds a pointer to it. Besides the server's list of connections (which it leaves
 * in the close callback), these hold a gkv_conn_t pointer, and each is counted or cancelled
 * before the close may start:
 *   - the backend and the server's completion queue, from the start of a copy or fence on
 *     c->copy until gkv_conn_copy_finished ran for it: counted in `copies`;
 *   - copy batches that owe a reply its bytes (gkv_batch_out), the fd store's commit list, and
 *     a failed HELLO's delay: counted in `held`;
 *   - the staging and batch waiter queues (c->waiter, c->bwaiter): cancelled by gkv_conn_close;
 *   - the server's yielded list: unlinked in the close callback.
 * Once `closing` is set nothing starts new work for c: a copy started on a closing connection
 * is refused (conn_transfer.c), so `copies` only falls. tests/integration/test_lifetime.c closes
 * connections at every stage of a transfer under ASan. */

typedef enum {
    CONN_HEADER,  /* waiting for / parsing request headers */
    CONN_PAYLOAD, /* receiving a SET payload into an entry */
    CONN_DISCARD, /* skipping the payload of a refused request */
    CONN_SEND,    /* sending values out through a staging buffer */
} gkv_conn_state_t;

struct gkv_conn {
    union {
        uv_handle_t handle;
        uv_stream_t stream;
        uv_pipe_t pipe;
        uv_tcp_t tcp;
    } h;
    gkv_server_t *srv;
    gkv_conn_t *prev, *next; /* the server's list */
    gkv_conn_t *done_next;   /* the server's copy-completion queue */
    gkv_conn_t *yield_next;  /* the server's yielded list, while yielded */
    uint64_t id;
    int lane;
    bool local, reading, closing, close_started, graceful, copy_busy, waiting_stage;
    bool handling;     /* inside handle_request: the request's fields point into the input */
    bool zero_copy;    /* zero-copy granted: the shared-memory fds were passed */
    bool zc_every_gpu; /* ... one per device (HELLO zero_copy 2), else device 0's */
    bool yielded;      /* handled its share of frames this turn (server.h) */
    bool authed;       /* every command allowed: no token configured, or HELLO had it */
    uint8_t version;   /* the protocol version HELLO asked for (the newest until one does) */
    int peer_uid, peer_gid, peer_pid; /* a Unix peer's credentials, read at accept; else -1 */
    bool waiting_batch;               /* a small SET waits for room in a copy batch */
    bool fencing;                     /* copy is a fence_shared a reply waits for */
    gkv_waiter_t bwaiter;
    /* Replies held back in the reply buffer: GET replies whose bytes a copy batch has yet to
     * bring, a reply that waits for a fence. Nothing is written while any is held. */
    uint32_t held;
    /* --fd-store: the replies are held (one count of held, while commit is queued) until the
     * journal has committed what this connection's requests appended (commit.h). */
    gkv_commit_waiter_t commit;
    uint64_t journal_mark; /* the journal's length as the request began */
    gkv_entry_t *copied_from, *copied_to; /* the fence's MAP or MOVE copy (reply.h) */
    uint64_t requests;                    /* requests handled so far */
    uint64_t op, op_started; /* the request in progress: opcode, uv_hrtime at its header */
    /* Deadlines (conn_limits.c), in uv_now milliseconds. */
    uint64_t frame_since;     /* the frame in progress began (or last kept moving); 0: none */
    uint64_t frame_bytes;     /* input bytes since frame_since */
    uint64_t active_at;       /* last input or output */
    uint64_t write_since;     /* queued output last moved */
    uint64_t auth_hold_until; /* a failed HELLO's reply is held until then, then c closes */
    gkv_leases_t leases;
    gkv_conn_state_t state;
    /* Input: bytes [in_pos, in_len) of in are unprocessed. */
    uint8_t *in;
    size_t in_cap, in_len, in_pos;
    /* Replies produced since the last write, and bytes handed to libuv not yet written. */
    gkv_wr_t out;
    size_t out_pending;
    /* The one backend copy (or fence) this connection may have in flight, and how many were
     * started on it whose completion has not been handled yet (the lifetime rule above). */
    gkv_copy_t copy;
    uint32_t copies;
    int copy_status;
    gkv_waiter_t waiter;
    void *stage;
    size_t stage_fill;
    /* A payload chunk being copied into the value (recv's bytes [recv_got, recv_got +
     * flight_len)) while the next fills stage: the socket and the copy overlap. At most one;
     * copy_busy is set only while c must wait for it. */
    void *flight;
    size_t flight_len;
    /* A payload in progress (SET): it goes into recv (one reference), then recv_cmd's
     * on_payload finishes the command. recv_got: bytes copied in (the flight's not yet). */
    gkv_entry_t *recv;
    const gkv_command_t *recv_cmd;
    uint64_t recv_got, req_id;
    unsigned recv_flags;
    uint64_t discard_left;
    /* Values being sent through staging: segments (references held), position, chunk size.
     * A chunk goes to the socket with uv_try_write; what the socket cannot take at once goes
     * out in pieces through tail, a small copy, so that libuv never holds the staging buffer
     * and a client that stops reading can be made to give it back (gkv_conn_yield_stage). */
    gkv_segment_t one;
    gkv_segment_t *segs;
    uint32_t nsegs, seg_i;
    uint64_t seg_pos;
    size_t chunk, sent; /* the chunk in stage (0: none), and how much of it went out */
    /* The segment's next chunk (ahead_len bytes), copied into ahead while stage's goes out:
     * the copy and the socket overlap. ahead_busy while its copy runs (c->copy). */
    void *ahead;
    size_t ahead_len;
    bool ahead_busy;
    bool tail_busy;     /* tail is being written */
    bool read_to_stage; /* the read under way goes straight into stage (conn_read_target) */
    int narrow_sndbuf;  /* while a large reply goes out: the send buffer to restore, else 0 */
    uint8_t *tail;      /* GKV_SEND_TAIL bytes, allocated on first use */
    uv_shutdown_t shutdown_req;
};

/* Accepts a pending connection on listener (borrowed). local: a Unix socket. The connection is
 * owned by the server's list and frees itself when closed. Returns 0 or a negative code. */
int gkv_conn_accept(gkv_server_t *srv, uv_stream_t *listener, bool local);
/* A connection on fd, a socket already connected (socket activation, a test's socketpair: the
 * whole-daemon fuzzer drives one): owned by the call, closed on failure. local: a Unix socket.
 * Returns like gkv_conn_accept. */
int gkv_conn_open(gkv_server_t *srv, int fd, bool local);
/* Closes c: graceful waits for queued replies to be written. Freed in the close callback. */
void gkv_conn_close(gkv_conn_t *c, bool graceful);
/* Closes c without waiting for its queued output: at once, or when its backend copy in
 * flight completes. Also ends a graceful close that waits on a client that does not read. */
void gkv_conn_abort(gkv_conn_t *c);
/* The server is stopping: close c once its request in flight is answered. */
void gkv_conn_stop(gkv_conn_t *c);
/* The server is stopping and its grace period is over: a SET still receiving gets a SHUTDOWN
 * error, then c is aborted. */
void gkv_conn_stop_now(gkv_conn_t *c);
/* Checks c's deadlines at now (uv_now): a frame that stalls, an idle connection, output the
 * client does not take (conn_limits.c). */
void gkv_conn_sweep(gkv_conn_t *c, uint64_t now);
/* Runs on the loop thread after c's backend copy reported completion. */
void gkv_conn_copy_finished(gkv_conn_t *c);
/* A copy batch brought len bytes (borrowed for the call) for the reply-buffer offset tag of
 * connection sink; a gkv_batch_deliver_fn. */
void gkv_conn_batch_deliver(void *sink, uint64_t tag, const void *bytes, uint32_t len, int status);

/* Between conn.c and conn_transfer.c. */
/* Handles what input and state allow, then writes replies and starts or stops reading. */
void gkv_conn_drive(gkv_conn_t *c);
/* Goes on after the last held reply was released: close, send or drive. */
void gkv_conn_resume(gkv_conn_t *c);
/* The request in progress ended (rc: 0 or the error it was answered with): its time goes into
 * the server's metrics. */
void gkv_conn_op_done(gkv_conn_t *c, int rc);
/* Closes once nothing is in flight or held. */
void gkv_conn_finish_close(gkv_conn_t *c);
/* Writes the replies produced so far unless one is held. */
void gkv_conn_flush(gkv_conn_t *c);
/* Sends rep's segments after the reply header: in a copy batch or through staging. */
void gkv_conn_send(gkv_conn_t *c, gkv_reply_t *rep);
/* CONN_SEND: copies the next chunk out, or finishes the send. */
void gkv_conn_send_step(gkv_conn_t *c);
/* CONN_PAYLOAD: moves input into the value. True when it can go on, false when it must wait
 * for input, a staging buffer, room in a batch or a copy. */
bool gkv_conn_recv_step(gkv_conn_t *c);
/* Where the next socket read goes: a large SET payload's bytes straight into the staging
 * buffer when nothing is buffered before them (sets c->read_to_stage), else NULL (the input
 * buffer). */
uint8_t *gkv_conn_read_target(gkv_conn_t *c, size_t *len);
/* Counts a backend copy or fence about to start on c->copy. False when c is closing: then
 * nothing may start. */
bool gkv_conn_copy_begin(gkv_conn_t *c);
/* A start that gkv_conn_copy_begin counted failed: its completion will not come. */
void gkv_conn_copy_unbegin(gkv_conn_t *c);
/* The copy in flight (not a fence) finished without error. */
void gkv_conn_chunk_copied(gkv_conn_t *c);
/* The payload chunk in flight was copied (or failed: c then closes): counts it and keeps its
 * buffer as stage when c has none, else gives it back. */
void gkv_conn_flight_landed(gkv_conn_t *c);
/* Gives the staging buffer back, if c holds one. */
void gkv_conn_release_stage(gkv_conn_t *c);
/* Gives the buffer of the chunk copied ahead back, if c holds one (its copy must be done). */
void gkv_conn_release_ahead(gkv_conn_t *c);
/* Others wait for staging and c's client has stalled: c gives its buffer back (a send goes on
 * from where the socket stopped, a partly filled payload chunk is copied in first). True when
 * it did; false when c holds no buffer it can give now (a copy is busy, the socket is not full). */
bool gkv_conn_yield_stage(gkv_conn_t *c);
/* Restores the send buffer a large reply raised (conn_transfer.c); also when c closes. */
void gkv_conn_narrow_sndbuf(gkv_conn_t *c);

#endif
