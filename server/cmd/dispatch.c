/* dispatch.c: the generic checks every request passes before its handler, and the handler. */
#include <inttypes.h>
#include <stdio.h>

#include "checks.h"
#include "cmd.h"
#include "error.h"

const gkv_command_t *gkv_command_lookup(const gkv_cmd_ctx_t *ctx, uint64_t op)
{
    if (op == 0 || op >= GKV_OP_MAX || !ctx->table[op].name)
        return NULL;
    return &ctx->table[op];
}

/* NOTFOUND names the key (printable bytes as they are, others as \xNN, at most 40 bytes of it),
 * so that a client's error says which of its keys was missing. */
static void not_found(gkv_reply_t *rep, gkv_slice_t key)
{
    char shown[40 * 4 + 4];
    size_t n = 0;
    for (uint32_t i = 0; i < key.len && i < 40; i++) {
        uint8_t b = ((const uint8_t *)key.p)[i];
        if (b >= 0x20 && b < 0x7f && b != '\\' && b != '\'')
            shown[n++] = (char)b;
        else
            n += (size_t)snprintf(shown + n, sizeof(shown) - n, "\\x%02x", b);
    }
    shown[n] = 0;
    gkv_reply_fail(rep, GKV_ENOTFOUND, "no such key '%s'%s", shown, key.len > 40 ? "..." : "");
}

int gkv_dispatch(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    ctx->commands++;
    const gkv_command_t *cmd = gkv_command_lookup(ctx, req->op);
    size_t mark = rep->wr->sb.size;
    int rc;
    rep->msg = NULL;
    rep->cmd = cmd;
    if (!cmd)
        rc = gkv_reply_fail(rep, GKV_EUNKNOWNCMD, "unknown command %" PRIu64, req->op);
    else if (!rep->in.authed && req->op != GKV_OP_HELLO && req->op != GKV_OP_PING)
        rc = gkv_reply_fail(rep, GKV_EAUTH,
                            "authentication required: send HELLO with the token first "
                            "(GPUKV_TOKEN or GPUKV_TOKEN_FILE)");
    else if (req->payload_len && !(cmd->flags & GKV_CMD_PAYLOAD))
        rc = gkv_reply_fail(rep, GKV_EINVAL, "%s takes no payload", cmd->name);
    else if ((cmd->flags & GKV_CMD_LOCAL) && !rep->in.zero_copy)
        rc = gkv_reply_fail(rep, GKV_ENOTSUP,
                            "%s needs zero-copy: a Unix socket connection whose first "
                            "request was HELLO with zero_copy = 1 (see its zero_copy_why)",
                            cmd->name);
    else if ((cmd->flags & GKV_CMD_KEY) && !(req->has & GKV_HAS_KEY))
        rc = gkv_reply_fail(rep, GKV_EINVAL, "%s needs a key", cmd->name);
    else if ((cmd->flags & GKV_CMD_KEY) && (rc = gkv_check_key(ctx, req->key, rep)) != 0)
        ;
    else
        rc = cmd->run(ctx, req, rep);
    if (rep->parked) { /* it runs again once the moves it waits for end */
        gkv_reply_release(ctx->store, rep);
        rep->wr->sb.size = mark;
        rep->wr->failed = false;
        return rc;
    }
    if (rc == GKV_ENOTFOUND && !rep->msg && (req->has & GKV_HAS_KEY))
        not_found(rep, req->key);
    if (rc < 0) {
        gkv_reply_release(ctx->store, rep);
        rep->wr->sb.size = mark;
        rep->wr->failed = false;
        gkv_reply_error(rep->wr, req->id, rc, rep->msg);
    }
    return rc;
}
