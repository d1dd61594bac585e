/* conn.h: one client connection: reads frames, runs handlers, streams values between the
 * socket and backend memory, and writes replies in order. */
#ifndef GKV_SERVER_CONN_H
#define GKV_SERVER_CONN_H

#include <stdbool.h>
#include <uv.h>

#include "cmd.h"
#include "server.h"

typedef enum {
    CONN_HEADER,  /* waiting for / parsing request headers */
    CONN_PAYLOAD, /* receiving a SET payload into an entry */
    CONN_DISCARD, /* skipping the payload of a refused request */
    CONN_SEND,    /* streaming values out through a staging buffer */
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
    uint64_t id;
    int lane;
    bool local, reading, closing, close_started, graceful, copy_busy, waiting_stage;
    bool zc;                 /* zero-copy granted: the shared-memory fd was passed */
    bool waiting_batch;      /* a small SET waits for room in a copy batch */
    gkv_waiter_t bwaiter;
    /* GET replies in the reply buffer whose bytes a copy batch has yet to fill: nothing is
     * written to the socket until they are all in. */
    uint32_t holes;
    uint64_t requests;       /* requests handled so far */
    gkv_leases_t leases;
    gkv_conn_state_t state;
    /* Input: bytes [in_pos, in_len) of in are unprocessed. */
    uint8_t *in;
    size_t in_cap, in_len, in_pos;
    /* Replies produced since the last write, and bytes handed to libuv not yet written. */
    gkv_wr_t out;
    size_t out_pending;
    /* The one backend copy this connection may have in flight. */
    gkv_copy_t copy;
    int copy_status;
    gkv_waiter_t waiter;
    void *stage;
    size_t stage_fill;
    /* A payload in progress (SET): it goes into recv (one reference), then recv_cmd's
     * on_payload finishes the command. */
    gkv_entry_t *recv;
    const gkv_command_t *recv_cmd;
    uint64_t recv_got, req_id;
    unsigned recv_flags;
    uint64_t discard_left;
    /* Values being sent through staging: segments (references held), position, chunk size. */
    gkv_segment_t one;
    gkv_segment_t *segs;
    uint32_t nsegs, seg_i;
    uint64_t seg_pos;
    size_t chunk;
    uv_shutdown_t shutdown_req;
};

/* Accepts a pending connection on listener (borrowed). local: a Unix socket. The connection is
 * owned by the server's list and frees itself when closed. Returns 0 or a negative code. */
int gkv_conn_accept(gkv_server_t *srv, uv_stream_t *listener, bool local);
/* Closes c: graceful waits for queued replies to be written. Freed in the close callback. */
void gkv_conn_close(gkv_conn_t *c, bool graceful);
/* The server is stopping: close c once its request in flight is answered. */
void gkv_conn_stop(gkv_conn_t *c);
/* Runs on the loop thread after c's backend copy reported completion. */
void gkv_conn_copy_finished(gkv_conn_t *c);
/* A copy batch brought len bytes (borrowed for the call) for the reply-buffer offset tag of
 * connection sink; a gkv_batch_deliver_fn. */
void gkv_conn_batch_deliver(void *sink, uint64_t tag, const void *bytes, uint32_t len, int status);

#endif
