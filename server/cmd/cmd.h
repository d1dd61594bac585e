/* cmd.h: commands: what a handler may reach (its context), the table of commands, and
 * dispatch. A handler reads a decoded request and fills a gkv_reply_t (reply.h); it never
 * touches a socket, nor anything of the daemon but what the context gives it, so handlers are
 * testable without libuv. The data handlers are this layer's (handlers.h); the daemon adds its
 * own (HELLO, PING, INFO, SAVE, TAKEOVER) and fills the table (daemon/table.c). */
#ifndef GKV_CMD_CMD_H
#define GKV_CMD_CMD_H

#include "commands.h"
#include "demoter.h"
#include "device.h"
#include "lease.h"
#include "reply.h"
#include "store.h"

/* The limits requests are checked against (the daemon's settings, kept up to date on reload). */
typedef struct {
    uint64_t max_key, max_value;           /* --max-key-size, --max-value-size */
    uint64_t max_leases, max_leased_bytes; /* per connection */
} gkv_cmd_limits_t;

typedef struct gkv_command gkv_command_t;

/* What every handler gets. */
typedef struct gkv_cmd_ctx {
    gkv_store_t *store;               /* borrowed */
    gkv_devices_t *devs;              /* borrowed */
    gkv_lease_totals_t *lease_totals; /* borrowed: every connection's leases, counted */
    gkv_cmd_limits_t lim;
    const gkv_command_t *table; /* GKV_OP_MAX entries by opcode (the daemon's), borrowed */
    uint64_t commands;          /* requests dispatched */
    bool clustered;             /* --cluster: NODE requests are routed before dispatch */
    gkv_demoter_t *demoter;     /* moves off a full GPU a SET may wait for (demoter.h); NULL */
    /* Registered buffers (buffers.h): open now in every connection, GETs into them so far and
     * their bytes (INFO). */
    uint64_t buffers_open, gets_into, get_into_bytes;
    void *owner; /* the daemon: what its own handlers, and only they, reach through */
} gkv_cmd_ctx_t;

typedef int (*gkv_handler_fn)(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep);
/* Finishes a command whose payload has arrived in e: writes the reply into wr. The caller keeps
 * (and later drops) its own reference on e. *holder (when not NULL) gets the entry now holding
 * the value, borrowed. Returns 0, or the error code the reply carries. */
typedef int (*gkv_payload_fn)(gkv_cmd_ctx_t *ctx, uint64_t id, gkv_entry_t *e, unsigned flags,
                              gkv_wr_t *wr, gkv_entry_t **holder);

struct gkv_command {
    const char *name;
    unsigned flags; /* GKV_CMD_*, checked by gkv_dispatch */
    gkv_handler_fn run;
    gkv_payload_fn on_payload; /* GKV_CMD_PAYLOAD commands only */
};

/* The table entry for an opcode, or NULL. */
const gkv_command_t *gkv_command_lookup(const gkv_cmd_ctx_t *ctx, uint64_t op);

/* Runs the generic checks (known command, authentication, payload, zero-copy, key) and the
 * handler; sets rep->cmd. On error (negative return) nothing but an error frame is left in
 * rep->wr and no reference is held. */
int gkv_dispatch(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep);

/* The early frame of waiting MAP request id (net/keywait.h, PROTOCOL.md): a read lease of the
 * connection (rep->leases) on e, an asynchronous seal's value that waits for its fence, and
 * what an import of e needs, written into rep->wr with early = 1; *lease is its id. Nothing is
 * written (GKV_ENOTSUP, GKV_ELEASELIMIT, or the export's or writer's error) when e cannot be
 * handed out to this connection now: on a GPU its zero-copy does not reach, carved from a
 * slab, or past its lease limits. */
int gkv_cmd_map_early(gkv_cmd_ctx_t *ctx, gkv_reply_t *rep, uint64_t id, gkv_entry_t *e,
                      uint64_t *lease);

#endif
