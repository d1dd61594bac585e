/* handlers.h: the data commands' handlers, gkv_cmd_<name>, by family: values through the socket
 * (cmd_value.c: SET and its payload's commit, GET, MGET), keys (cmd_keys.c: EXISTS, DEL, LIST,
 * GETSIZE, FLUSH), deadlines (cmd_ttl.c: EXPIRE, PERSIST, TTL), zero-copy leases (cmd_lease.c:
 * MAP, RELEASE, CREATE, SEAL, ABORT), placement (cmd_move.c: MOVE) and what reaches a handler
 * of a request between cluster nodes (cmd_node.c: a REPLICA's payload), watches (cmd_watch.c:
 * WATCH, UNWATCH, which the connection carries out), registered buffers (cmd_buffer.c: BUFFER,
 * and GET with into, which gkv_cmd_get hands to gkv_cmd_get_into). The daemon's own
 * commands (HELLO, PING, INFO, SAVE, TAKEOVER) are daemon/admin.c's; the table that names them
 * all is the daemon's (daemon/table.c). */
#ifndef GKV_CMD_HANDLERS_H
#define GKV_CMD_HANDLERS_H

#include "cmd.h"

#define GKV_HANDLER(name)                                                                          \
    int gkv_cmd_##name(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
GKV_HANDLER(set);
GKV_HANDLER(get);
GKV_HANDLER(mget);
GKV_HANDLER(exists);
GKV_HANDLER(del);
GKV_HANDLER(list);
GKV_HANDLER(getsize);
GKV_HANDLER(flush);
GKV_HANDLER(expire);
GKV_HANDLER(persist);
GKV_HANDLER(ttl);
GKV_HANDLER(map);
GKV_HANDLER(release);
GKV_HANDLER(create);
GKV_HANDLER(seal);
GKV_HANDLER(abort);
GKV_HANDLER(move);
GKV_HANDLER(node);
GKV_HANDLER(watch);
GKV_HANDLER(unwatch);
GKV_HANDLER(buffer);
#undef GKV_HANDLER

/* SET's payload continuation (a gkv_payload_fn): publishes e, whose payload has arrived (or is
 * on its way there in a copy batch), under its key and writes the reply. */
int gkv_cmd_set_commit(gkv_cmd_ctx_t *ctx, uint64_t id, gkv_entry_t *e, unsigned flags,
                       gkv_wr_t *wr, gkv_entry_t **holder);

/* GET with into (cmd_buffer.c): the value's bytes copied into a registered buffer. */
int gkv_cmd_get_into(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep);

#endif
