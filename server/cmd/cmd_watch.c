/* cmd_watch.c: WATCH and UNWATCH (PROTOCOL.md, "Watching a prefix"): checked here; the
 * connection carries them out (net/watch.h), since only it knows its watch. */
#include "error.h"
#include "handlers.h"

int gkv_cmd_watch(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    if (req->prefix.len > ctx->lim.max_key)
        return gkv_reply_fail(rep, GKV_ETOOBIG, "the prefix is over --max-key-size (%llu)",
                              (unsigned long long)ctx->lim.max_key);
    rep->watch = true;
    rep->watch_span = ctx->clustered && !req->local;
    return 0;
}

int gkv_cmd_unwatch(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    (void)ctx;
    (void)req;
    rep->unwatch = true;
    return 0;
}
