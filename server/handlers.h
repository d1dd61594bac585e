/* handlers.h: every command's handler, gkv_cmd_<name> (declared from the one command list), and
 * payload continuations. Defined by family: cmd_admin.c, cmd_value.c, cmd_keys.c, cmd_lease.c;
 * the table that names them is cmd.c's. */
#ifndef GKV_SERVER_HANDLERS_H
#define GKV_SERVER_HANDLERS_H

#include "commands.h"
#include "reply.h"

#define GKV_HANDLER_DECL(NAME, name, num, flags, help)                                             \
    int gkv_cmd_##name(gkv_server_t *srv, const gkv_request_t *req, gkv_reply_t *rep);
GKV_COMMAND_LIST(GKV_HANDLER_DECL)
#undef GKV_HANDLER_DECL

/* SET's payload continuation (a gkv_payload_fn): publishes e, whose payload has arrived (or is
 * on its way there in a copy batch), under its key and writes the reply. */
int gkv_cmd_set_commit(gkv_server_t *srv, uint64_t id, gkv_entry_t *e, unsigned flags, gkv_wr_t *wr,
                       gkv_entry_t **holder);

#endif
