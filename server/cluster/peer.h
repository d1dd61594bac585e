/* peer.h: blocking connections to other nodes (and to this node itself), for the cluster's
 * worker threads; the loop only takes an idle one (gkv_peer_take_idle) to send a short request
 * whose answer a worker reads. A connection is opened (TCP "host:port", or "unix:PATH"),
 * says HELLO with the cluster's token and is kept for reuse; every read and write is bounded
 * by the timeout, and anything that fails or times out is GKV_EUNAVAILABLE (the connection is
 * then closed: a late reply could not be told from the next one). Thread-safe. */
#ifndef GKV_CLUSTER_PEER_H
#define GKV_CLUSTER_PEER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "message.h"
#include "token.h"

typedef struct gkv_peer_conn gkv_peer_conn_t;
typedef struct gkv_peer_addr gkv_peer_addr_t; /* peer.c: one address's idle connections */

/* Spare connections: a request that must dial first waits for the handshake, which took 11 to
 * 22 ms on a busy GPU machine (bench/RESULTS.md, session 48). So when a take leaves fewer than
 * GKV_PEER_SPARE idle connections to an address, the owner's want callback is asked (once,
 * until that fill ends) to run gkv_peer_fill on a thread of its own, which dials ahead of the
 * requests. */
#define GKV_PEER_SPARE 8

typedef struct {
    pthread_mutex_t lock;
    gkv_peer_addr_t *addrs; /* addresses with idle connections, or a fill asked for */
    unsigned nidle;         /* idle connections, every address */
    char token[GKV_TOKEN_MAX + 1];
    size_t token_len;
    int timeout_ms;
    /* Set by the owner after init (none: no spares): queues gkv_peer_fill(addr) on a thread
     * that may block; false when it cannot (the fill is then asked for again later). Called
     * without the lock, from whichever thread took a connection. */
    bool (*want)(void *arg, const char *addr);
    void *want_arg;
    bool closing;    /* gkv_peers_close: no more wants, fills end */
    uint64_t opened; /* connections made (counted for INFO) */
    uint64_t ahead;  /* of them, by fills (dialed before a request needed them) */
    uint64_t waited; /* takes that found no idle connection and dialed first */
    uint64_t refused; /* replies under another id than the request sent (gkv_peer_recv) */
} gkv_peers_t;

/* One connection, owned by whoever took it (gkv_peer_take) until gkv_peer_give. */
struct gkv_peer_conn {
    int fd;
    char addr[160];
    uint64_t next_id;
    gkv_peer_conn_t *next;
    /* The last reply's header (its slices point here), grown as needed: valid only while
     * the connection is held (gkv_peer_reply_keep makes a reply outlive the give). */
    uint8_t *hdr;
    size_t hdr_cap, hdr_len;
    gkv_wr_t wr; /* requests are written here */
    /* The last read failed because the peer stayed silent until the timeout (its process may
     * still be working), not because the connection broke (it closed, or its process died). */
    bool timed_out;
    /* A reply came under this id, not next_id's (0: none): refused, and the connection is
     * closed, counted and logged when it is given back. */
    uint64_t stray_id;
};

void gkv_peers_init(gkv_peers_t *p, const char *token, size_t token_len, int timeout_ms);
/* From now on no fill is asked for and a fill running ends after its dial (the owner stops
 * the threads that run them next). */
void gkv_peers_close(gkv_peers_t *p);
/* Closes the idle connections. */
void gkv_peers_fini(gkv_peers_t *p);

/* Asks for a fill of addr's spares (want) unless one is asked for already: ahead of a first
 * request (a new member). Any thread. */
void gkv_peer_want(gkv_peers_t *p, const char *addr);
/* The fill want asked for: dials addr until GKV_PEER_SPARE connections to it are idle (or a
 * dial fails, or the peers close); then addr may be wanted again. Blocks; returns how many
 * connections it made. */
unsigned gkv_peer_fill(gkv_peers_t *p, const char *addr);

/* A connection to addr (borrowed): an idle one, or a new one that said HELLO (counted in
 * waited); either way a fill is asked for when fewer than GKV_PEER_SPARE stay idle. Returns 0
 * and *out, or GKV_EUNAVAILABLE (no answer in time), GKV_EAUTH (the token was refused),
 * GKV_ENOMEM. */
int gkv_peer_take(gkv_peers_t *p, const char *addr, gkv_peer_conn_t **out);
/* An idle connection to addr only, never a new one (a fill is asked for as by gkv_peer_take):
 * for the loop, which must not dial. Returns 0 and *out, or GKV_EUNAVAILABLE when none is
 * idle. */
int gkv_peer_take_idle(gkv_peers_t *p, const char *addr, gkv_peer_conn_t **out);
/* Gives c back: kept for reuse when ok, else closed. */
void gkv_peer_give(gkv_peers_t *p, gkv_peer_conn_t *c, bool ok);

/* Starts a request on c: a NODE frame (node_op, the sender's name and incarnation) or, with
 * node_op 0, a plain one of opcode op. Add fields with gkv_wr_* on c->wr, then gkv_peer_call. */
void gkv_peer_begin(gkv_peer_conn_t *c, unsigned op, unsigned node_op, const char *node,
                    uint64_t incarnation);
/* Sends the request (and payload, len bytes, borrowed; none when len is 0 and payload NULL:
 * the caller may also stream it with gkv_peer_write) and reads the reply's header into *resp
 * (its slices valid until c's next call). A reply with a payload leaves it to gkv_peer_read.
 * Returns 0 (resp->status may still be an error) or GKV_EUNAVAILABLE / GKV_EPROTO. */
int gkv_peer_call(gkv_peer_conn_t *c, const void *payload, size_t len, gkv_response_t *resp);
/* Sends the request without waiting for the reply (a payload follows with gkv_peer_write). */
int gkv_peer_send(gkv_peer_conn_t *c);
/* Reads the next reply's header into *resp: the reply to the request sent last on c (another
 * request's is GKV_EPROTO). */
int gkv_peer_recv(gkv_peer_conn_t *c, gkv_response_t *resp);
/* Exactly len bytes from / to c. 0 or GKV_EUNAVAILABLE. */
int gkv_peer_read(gkv_peer_conn_t *c, void *buf, size_t len);
int gkv_peer_write(gkv_peer_conn_t *c, const void *buf, size_t len);

/* r, the last reply read on c, made to outlive giving c back (another thread may take c at
 * once and read its next reply into c's buffer, where r's slices point): the header is copied
 * into *buf (the caller's, grown as needed; free() it) and r decoded again from there. 0, or
 * GKV_ENOMEM (r is then unchanged: give c back as not ok). */
int gkv_peer_reply_keep(const gkv_peer_conn_t *c, gkv_response_t *r, uint8_t **buf, size_t *cap);

#endif
