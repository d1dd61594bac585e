/* cmd.h: the command table and its handlers. A handler reads a decoded request, writes its
 * reply header into a frame writer and, for values, says what payload to stream or receive;
 * it never touches a socket, so handlers are testable without libuv. */
#ifndef GKV_SERVER_CMD_H
#define GKV_SERVER_CMD_H

#include "message.h"
#include "server.h"
#include "store.h"

/* A byte range of an entry to send after the reply header; holds one reference on entry. */
typedef struct {
    gkv_entry_t *entry;
    uint64_t off, len;
} gkv_segment_t;

typedef struct {
    gkv_wr_t *wr;        /* borrowed: where the reply frame goes */
    uint64_t id;
    bool local;          /* the connection is a Unix socket */
    int lane;            /* the connection's copy lane: its values are allocated there too */
    bool first;          /* this is the connection's first request */
    bool zc;             /* zero-copy was granted on this connection */
    gkv_leases_t *leases; /* the connection's leases */
    int fd;              /* HELLO: the shared-memory fd to pass with the reply, or -1 */
    const char *msg;     /* message for an error return (static or msgbuf) */
    char msgbuf[192];
    /* Payload to stream after the header, in order: segs points at one or at a heap array. */
    gkv_segment_t one;
    gkv_segment_t *segs;
    uint32_t nsegs;
    /* SET: receive the request's payload into recv (one reference), then commit. */
    gkv_entry_t *recv;
    unsigned recv_flags;
} gkv_reply_t;

typedef int (*gkv_handler_fn)(gkv_server_t *srv, const gkv_request_t *req, gkv_reply_t *rep);

typedef struct {
    const char *name;
    gkv_handler_fn fn;
    unsigned flags; /* GKV_CMD_* */
} gkv_command_t;

/* The table entry for an opcode, or NULL. */
const gkv_command_t *gkv_command_lookup(uint64_t op);

/* Runs the generic checks (known command, key and payload rules) and the handler. On error
 * (negative return) nothing but an error frame is left in rep->wr and no reference is held. */
int gkv_dispatch(gkv_server_t *srv, const gkv_request_t *req, gkv_reply_t *rep);

/* Writes an error frame {id, status, message}. msg is borrowed (NULL: the code's text). */
void gkv_reply_error(gkv_wr_t *wr, uint64_t id, int code, const char *msg);
/* Starts a success frame {id, status 0}; the caller adds fields and calls gkv_wr_end. */
void gkv_reply_ok(gkv_wr_t *wr, uint64_t id);
/* Drops the references and memory rep holds (segments, recv). */
void gkv_reply_release(gkv_server_t *srv, gkv_reply_t *rep);

/* Finishes a SET whose payload has arrived in e (or is on its way there in a batch): publishes
 * it under its key and writes the reply. The caller keeps (and later drops) its own reference
 * on e. *holder (when not NULL) gets the entry now holding the value (see gkv_store_publish).
 * Returns 0 when published, else the code the reply carries. */
int gkv_cmd_set_commit(gkv_server_t *srv, uint64_t id, gkv_entry_t *e, unsigned flags,
                       gkv_wr_t *wr, gkv_entry_t **holder);

#endif
