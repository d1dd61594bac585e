/* cmd_move.c: MOVE, a value to another GPU of the daemon. The copy is made as MAP makes one of a
 * value carved from a slab (gkv_store_copy_begin on the target's shared lane, the reply's fence,
 * gkv_store_copy_end): readers see the old value or the moved one, never a mix, and a write to
 * the key while the copy runs wins over the move. */
#include "handlers.h"

#include "checks.h"
#include "error.h"

int gkv_cmd_move(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    int to;
    int rc = gkv_check_device(ctx, req, rep, &to);
    if (rc)
        return rc;
    if (to < 0)
        return gkv_reply_fail(rep, GKV_EINVAL, "MOVE needs a gpu (an ordinal or a UUID)");
    if ((rc = gkv_check_key(ctx, req->key, rep)))
        return rc;
    gkv_store_t *st = ctx->store;
    gkv_entry_t *e = gkv_store_get_here(st, req->key.p, req->key.len, &rc);
    if (!e)
        return rc;
    bool moving = e->dev != (unsigned)to;
    if (moving) {
        gkv_entry_t *copy;
        rc = gkv_store_copy_begin(st, e, (unsigned)to, &copy);
        if (rc == GKV_EOOM)
            return gkv_reply_oom(rep, st, (unsigned)to, e->size);
        if (rc)
            return rc;
        gkv_store_ref(e);
        rep->copied_from = e;
        rep->copied_to = copy;
        rep->fence = true; /* the reply goes once the copy has run and is published */
        rep->fence_dev = (uint8_t)to;
    }
    gkv_wr_t *w = rep->wr;
    gkv_reply_ok(w, req->id);
    gkv_wr_uint(w, GKV_F_GPU, (uint64_t)to);
    gkv_wr_uint(w, GKV_F_COUNT, moving);
    return gkv_wr_end(w);
}
