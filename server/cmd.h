/* cmd.h: the command table and dispatch. The table carries, for each opcode, its name, flags,
 * handler and (for commands with a payload) the continuation that finishes it once the payload
 * has arrived. A handler reads a decoded request and fills a gkv_reply_t (reply.h); it never
 * touches a socket, so handlers are testable without libuv. */
#ifndef GKV_SERVER_CMD_H
#define GKV_SERVER_CMD_H

#include "reply.h"

typedef int (*gkv_handler_fn)(gkv_server_t *srv, const gkv_request_t *req, gkv_reply_t *rep);
/* Finishes a command whose payload has arrived in e: writes the reply into wr. The caller keeps
 * (and later drops) its own reference on e. *holder (when not NULL) gets the entry now holding
 * the value, borrowed. Returns 0, or the error code the reply carries. */
typedef int (*gkv_payload_fn)(gkv_server_t *srv, uint64_t id, gkv_entry_t *e, unsigned flags,
                              gkv_wr_t *wr, gkv_entry_t **holder);

typedef struct gkv_command {
    const char *name;
    unsigned flags;            /* GKV_CMD_*, checked by gkv_dispatch */
    gkv_handler_fn run;
    gkv_payload_fn on_payload; /* GKV_CMD_PAYLOAD commands only */
} gkv_command_t;

/* The table entry for an opcode, or NULL. */
const gkv_command_t *gkv_command_lookup(uint64_t op);

/* Runs the generic checks (known command, payload, zero-copy, key) and the handler; sets
 * rep->cmd. On error (negative return) nothing but an error frame is left in rep->wr and no
 * reference is held. */
int gkv_dispatch(gkv_server_t *srv, const gkv_request_t *req, gkv_reply_t *rep);

#endif
