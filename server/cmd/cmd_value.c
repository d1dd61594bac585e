/* cmd_value.c: values in and out through the socket: SET (and its payload's commit), GET, MGET. */
#include "handlers.h"

#include <inttypes.h>
#include <stdlib.h>

#include "checks.h"
#include "duration.h"
#include "error.h"
#include "node.h"

int gkv_cmd_set(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    int rc = gkv_check_new_value(ctx, req, req->payload_len, rep);
    /* Allocated in stream order on the lane that will copy into it. */
    if (rc || (rc = gkv_new_entry(ctx, req, req->payload_len, rep->in.lane, rep, &rep->recv)))
        return rc;
    rep->recv_flags = (unsigned)req->flags;
    return 0;
}

int gkv_cmd_set_commit(gkv_cmd_ctx_t *ctx, uint64_t id, gkv_entry_t *e, unsigned flags,
                       gkv_wr_t *wr, gkv_entry_t **holder)
{
    /* The payload may have taken long since the header's request set the store's clock. */
    ctx->store->now_ms = gkv_clock_ms();
    int rc = gkv_store_publish(ctx->store, e, flags, holder);
    if (rc == GKV_EEXISTS)
        gkv_reply_error(wr, id, rc, "key exists (NX)");
    else if (rc == GKV_ENOTFOUND)
        gkv_reply_error(wr, id, rc, "key does not exist (XX)");
    else if (rc)
        gkv_reply_error(wr, id, rc, NULL);
    else {
        gkv_reply_ok(wr, id);
        gkv_wr_end(wr);
    }
    return rc;
}

int gkv_cmd_get(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    if (req->has & GKV_HAS_INTO)
        return gkv_cmd_get_into(ctx, req, rep);
    gkv_entry_t *e;
    uint64_t off = 0, len = 0;
    int rc = gkv_lookup_range(ctx, req, true, rep, &e, &off, &len);
    if (rc)
        return rc;
    gkv_wr_t *w = rep->wr;
    gkv_reply_ok(w, req->id);
    gkv_wr_uint(w, GKV_F_SIZE, e->size);
    gkv_wr_uint(w, GKV_F_OFFSET, off);
    gkv_wr_uint(w, GKV_F_PAYLOAD, len);
    gkv_wr_uint(w, GKV_F_GPU, gkv_store_gpu(e));
    if (gkv_store_in_tier(e))
        gkv_wr_uint(w, GKV_F_TIER, gkv_store_tier(e));
    uint32_t meta_len;
    const uint8_t *meta = gkv_entry_meta(e, &meta_len);
    if (meta_len)
        gkv_wr_bin(w, GKV_F_META, meta, meta_len);
    gkv_wr_value_version(w, ctx->store, e, req->vversion); /* a FETCH's, a cluster version */
    rc = gkv_wr_end(w);
    if (rc)
        return rc;
    rep->segs = &rep->one;
    if (len)
        gkv_reply_add_segment(rep, e, off, len);
    return 0;
}

int gkv_cmd_mget(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    if (!(req->has & GKV_HAS_ITEMS) || req->nitems == 0)
        return gkv_reply_fail(rep, GKV_EINVAL, "MGET needs a non-empty items array");
    if (req->nitems > GKV_MAX_BATCH)
        return gkv_reply_fail(rep, GKV_ETOOBIG, "MGET of %u items exceeds %u", req->nitems,
                              GKV_MAX_BATCH);
    gkv_reader_t it;
    gkv_item_t item;
    uint32_t n;
    gkv_read_init(&it, req->items.p, req->items.len);
    gkv_read_array(&it, &n);
    for (uint32_t i = 0; i < n; i++) {
        gkv_req_items_next(&it, &item);
        int rc = gkv_check_key(ctx, item.key, rep);
        if (rc)
            return rc;
    }
    rep->segs = malloc(sizeof(gkv_segment_t) * n);
    if (!rep->segs)
        return GKV_ENOMEM;
    gkv_wr_t *w = rep->wr;
    gkv_reply_ok(w, req->id);
    size_t pos = gkv_wr_array_begin(w, GKV_F_RESULTS);
    uint64_t total = 0;
    gkv_read_init(&it, req->items.p, req->items.len);
    gkv_read_array(&it, &n);
    for (uint32_t i = 0; i < n; i++) {
        gkv_req_items_next(&it, &item);
        int status = 0;
        gkv_entry_t *e = gkv_store_get_readable(ctx->store, item.key.p, item.key.len, &status);
        uint64_t off = 0, len = 0;
        if (e)
            status = gkv_range_resolve(e->size, item.offset, item.length, item.suffix, &off, &len);
        msgpack_pack_array(&w->pk, 3);
        msgpack_pack_int(&w->pk, status);
        msgpack_pack_uint64(&w->pk, status ? 0 : len);
        msgpack_pack_uint64(&w->pk, e ? e->size : 0);
        if (status == 0 && len) {
            gkv_reply_add_segment(rep, e, off, len);
            total += len;
        }
    }
    gkv_wr_array_end(w, pos, n);
    gkv_wr_uint(w, GKV_F_PAYLOAD, total);
    return gkv_wr_end(w);
}
