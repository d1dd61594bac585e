/* cmd_ttl.c: deadlines: EXPIRE, PERSIST, TTL (SET and CREATE take a ttl field too). */
#include "handlers.h"

#include "checks.h"
#include "error.h"

int gkv_cmd_expire(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    if (!(req->has & GKV_HAS_TTL))
        return gkv_reply_fail(rep, GKV_EINVAL, "EXPIRE needs a ttl");
    int rc = gkv_check_ttl(req, rep);
    if (rc == 0)
        rc = gkv_store_expire(ctx->store, req->key.p, req->key.len, req->ttl);
    return rc < 0 ? rc : gkv_reply_count(rep, req->id, (uint64_t)rc);
}

int gkv_cmd_persist(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    int rc = gkv_store_persist(ctx->store, req->key.p, req->key.len);
    return rc < 0 ? rc : gkv_reply_count(rep, req->id, (uint64_t)rc);
}

int gkv_cmd_ttl(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    uint64_t left;
    int rc = gkv_store_ttl(ctx->store, req->key.p, req->key.len, &left);
    if (rc)
        return rc;
    gkv_wr_t *w = rep->wr;
    gkv_reply_ok(w, req->id);
    if (left != UINT64_MAX)
        gkv_wr_uint(w, GKV_F_TTL, left);
    return gkv_wr_end(w);
}
