/* conn_impl.h: between the files of a connection (conn.c: lifetime, holds, driving; request.c:
 * parsing and handling requests; send.c: replies and values out; recv.c: payloads in; limits.c:
 * deadlines). Private to server/net. */
#ifndef GKV_NET_CONN_IMPL_H
#define GKV_NET_CONN_IMPL_H

#include "conn.h"

/* Handles what input and state allow, then writes replies and starts or stops reading. */
void gkv_conn_drive(gkv_conn_t *c);
/* Goes on after the last held reply was released: close, send or drive. */
void gkv_conn_resume(gkv_conn_t *c);
/* The request in progress ended (rc: 0 or the error it was answered with): its time goes into
 * the net's metrics. */
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
 * buffer when nothing is buffered before them (sets c->rcv.to_stage), else NULL (the input
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
/* A MAP of c that waits for its key and asked for an early frame (c->kw_early) gets one now on
 * e, the unpublished value of an asynchronous seal of that key (keywait.h): a lease on e and
 * what its import needs, written and flushed. False when c has one already, may not (a GPU its
 * zero-copy does not reach, its lease limits) or is closing: it then just waits. */
bool gkv_conn_early(gkv_conn_t *c, gkv_entry_t *e);
/* Restores the send buffer a large reply raised (send.c); also when c closes. */
void gkv_conn_narrow_sndbuf(gkv_conn_t *c);

/* Gives the staging buffer in *slot back, if any (may wake another connection: do it last). */
void gkv_conn_put_stage(gkv_conn_t *c, void **slot);
/* Gets a staging buffer into c->stage or queues for one (wait.stage). False when the caller
 * must wait (or c closes). */
bool gkv_conn_take_stage(gkv_conn_t *c);
/* After starting a backend copy on device d (counted by gkv_conn_copy_begin, wait.copy set
 * before the call: its completion may be queued before the call returns): rc is what the start
 * returned (GKV_ECLOSED: c was closing, nothing started); on failure closes c. */
void gkv_conn_copy_started(gkv_conn_t *c, gkv_device_t *d, int rc);
/* Starts copying stage's bytes into the value as the flight. With overlap, reading goes on into
 * a second buffer meanwhile when one is free; otherwise c waits for the copy (wait.copy). */
void gkv_conn_start_flight(gkv_conn_t *c, bool overlap);
/* The reply just written goes out once the backend's shared lane has run (reply.h): a fence
 * (hold.fence until it has). */
void gkv_conn_start_fence(gkv_conn_t *c, gkv_reply_t *rep);
/* True when c must take no new request (the daemon stops, or a takeover drains the others). */
static inline bool gkv_conn_refused(const gkv_conn_t *c)
{
    const gkv_net_hooks_t *h = &c->net->hooks;
    return h->refusing && h->refusing(h->owner, c);
}
/* Parses and handles one request from the input. Returns 1 when one was handled, 0 when more
 * bytes are needed, -1 when the connection is closing (request.c). */
int gkv_conn_parse_one(gkv_conn_t *c);
/* The daemon is stopping: every complete request still in the input is answered SHUTDOWN, up
 * to the first that carries a payload (what follows it cannot be told apart). */
void gkv_conn_refuse_pending(gkv_conn_t *c);
/* A closing connection parses nothing more: its input buffer goes at once (not while a request
 * is handled: its fields point into the buffer). */
void gkv_conn_drop_input(gkv_conn_t *c);
/* Requests are not read while the client leaves this much output untaken (--output-limit). */
static inline bool gkv_conn_output_full(const gkv_conn_t *c)
{
    uint64_t limit = c->net->set.output_limit;
    return c->snd.pending > limit || c->out.sb.size > limit;
}

#endif
