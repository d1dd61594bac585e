/* cmd_watch.c: WATCH and UNWATCH (PROTOCOL.md, "Watching a prefix"): checked here; the
 * connection carries them out (net/watch.h), since only it knows its watch. */
#include "error.h"
#include "handlers.h"

int gkv_cmd_watch(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    if (ctx->clustered && !req->local)
        return gkv_reply_fail(rep, GKV_ENOTSUP,
                              "watches across a cluster are not built yet: WATCH with local 1 "
                              "watches the values this node owns");
    if (req->prefix.len > ctx->lim.max_key)
        return gkv_reply_fail(rep, GKV_ETOOBIG, "the prefix is over --max-key-size (%llu)",
                              (unsigned long long)ctx->lim.max_key);
    rep->watch = true;
    return 0;
}

int gkv_cmd_unwatch(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    (void)ctx;
    (void)req;
    rep->unwatch = true;
    return 0;
}
