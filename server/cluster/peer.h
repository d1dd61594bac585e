/* peer.h: blocking connections to other nodes (and to this node itself), for the cluster's
 * worker threads, never the loop. A connection is opened (TCP "host:port", or "unix:PATH"),
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

typedef struct {
    pthread_mutex_t lock;
    gkv_peer_conn_t *idle; /* connections kept for reuse, any address */
    unsigned nidle;
    char token[GKV_TOKEN_MAX + 1];
    size_t token_len;
    int timeout_ms;
    uint64_t opened; /* connections made (counted for INFO) */
} gkv_peers_t;

/* One connection, owned by whoever took it (gkv_peer_take) until gkv_peer_give. */
struct gkv_peer_conn {
    int fd;
    char addr[160];
    uint64_t next_id;
    gkv_peer_conn_t *next;
    uint8_t *hdr; /* the last reply's header (its slices point here), grown as needed */
    size_t hdr_cap;
    gkv_wr_t wr; /* requests are written here */
    /* The last read failed because the peer stayed silent until the timeout (its process may
     * still be working), not because the connection broke (it closed, or its process died). */
    bool timed_out;
};

void gkv_peers_init(gkv_peers_t *p, const char *token, size_t token_len, int timeout_ms);
/* Closes the idle connections. */
void gkv_peers_fini(gkv_peers_t *p);

/* A connection to addr (borrowed): an idle one, or a new one that said HELLO. Returns 0 and
 * *out, or GKV_EUNAVAILABLE (no answer in time), GKV_EAUTH (the token was refused), GKV_ENOMEM. */
int gkv_peer_take(gkv_peers_t *p, const char *addr, gkv_peer_conn_t **out);
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
/* Reads the next reply's header into *resp. */
int gkv_peer_recv(gkv_peer_conn_t *c, gkv_response_t *resp);
/* Exactly len bytes from / to c. 0 or GKV_EUNAVAILABLE. */
int gkv_peer_read(gkv_peer_conn_t *c, void *buf, size_t len);
int gkv_peer_write(gkv_peer_conn_t *c, const void *buf, size_t len);

#endif
