/* admin.h: the daemon's own commands (HELLO, PING, INFO, SAVE, TAKEOVER), which reach the whole
 * server through the command context's owner, and the table that wires them and the data
 * handlers (cmd/handlers.h) by opcode. */
#ifndef GKV_SERVER_ADMIN_H
#define GKV_SERVER_ADMIN_H

#include "cmd.h"

int gkv_cmd_hello(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep);
int gkv_cmd_ping(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep);
int gkv_cmd_info(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep);
int gkv_cmd_save(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep);
int gkv_cmd_takeover(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep);

/* Every command by opcode (GKV_OP_MAX entries): what gkv_cmd_ctx_t.table points at. */
extern const gkv_command_t gkv_command_table[GKV_OP_MAX];

#endif
