/* cmd_buffer.c: registered buffers (PROTOCOL.md "Reading into a registered buffer"): BUFFER
 * registers a range of a client's GPU memory (or drops one), and GET with `into` copies a value
 * into it: on the connection's copy lane when the value is on the buffer's GPU, else on that
 * GPU's shared lane (cudaMemcpyPeerAsync); the reply goes once the copy has run, so the
 * client's work after it sees the bytes. The daemon writes only
 * inside a range the client registered, of memory the client exported itself. */
#include "handlers.h"

#include <inttypes.h>

#include "buffers.h"
#include "checks.h"
#include "error.h"

static int drop(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    gkv_buffer_t *b = gkv_buffers_find(rep->bufs, req->into);
    if (b)
        gkv_buffers_drop(rep->bufs, ctx, b);
    return gkv_reply_count(rep, req->id, b != NULL);
}

int gkv_cmd_buffer(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    if (!rep->bufs)
        return gkv_reply_fail(rep, GKV_ENOTSUP, "this connection cannot register buffers");
    if (!(req->has & GKV_HAS_EXPORT)) {
        if (req->has & GKV_HAS_INTO)
            return drop(ctx, req, rep);
        return gkv_reply_fail(rep, GKV_EINVAL,
                              "BUFFER needs export (a CUDA IPC memory handle) and length to "
                              "register a buffer, or into to drop one");
    }
    int dev;
    int rc = gkv_check_device(ctx, req, rep, &dev);
    if (rc)
        return rc;
    if (dev < 0)
        dev = 0;
    if (!(req->has & GKV_HAS_LENGTH) || req->length == 0)
        return gkv_reply_fail(rep, GKV_EINVAL, "BUFFER needs a length of 1 or more bytes");
    gkv_buffer_t *b;
    uint64_t size;
    rc = gkv_buffers_add(rep->bufs, ctx, (unsigned)dev, req->export_data.p, req->export_data.len,
                         req->offset, req->length, &b, &size);
    const gkv_backend_t *be = ctx->devs->dev[dev].be;
    switch (rc) {
    case 0: break;
    case GKV_ENOTSUP:
        return gkv_reply_fail(rep, rc,
                              "the %s backend writes into no client memory (BUFFER needs the "
                              "cuda backend)",
                              be->name);
    case GKV_ELEASELIMIT:
        return gkv_reply_fail(rep, rc, "this connection has %u buffers registered (at most %u)",
                              rep->bufs->n, GKV_MAX_BUFFERS);
    case GKV_EINVAL:
        return gkv_reply_fail(rep, rc,
                              "export is not a CUDA IPC handle of device memory (cudaMalloc) on "
                              "GPU %d (%s) that this daemon can open",
                              dev, be->gpu_uuid);
    case GKV_ERANGE:
        return gkv_reply_fail(rep, rc,
                              "offset %" PRIu64 " and length %" PRIu64
                              " lie outside the allocation of %" PRIu64 " bytes",
                              req->offset, req->length, size);
    default: return rc;
    }
    gkv_wr_t *w = rep->wr;
    gkv_reply_ok(w, req->id);
    gkv_wr_uint(w, GKV_F_INTO, b->id);
    gkv_wr_uint(w, GKV_F_LENGTH, b->len);
    gkv_wr_uint(w, GKV_F_GPU, b->dev);
    if ((rc = gkv_wr_end(w)))
        gkv_buffers_drop(rep->bufs, ctx, b);
    return rc;
}

int gkv_cmd_get_into(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    gkv_buffer_t *b = rep->bufs ? gkv_buffers_find(rep->bufs, req->into) : NULL;
    if (!b)
        return gkv_reply_fail(rep, GKV_EINVAL,
                              "no buffer %" PRIu64 " is registered on this connection (BUFFER)",
                              req->into);
    gkv_entry_t *e;
    uint64_t off = 0, len = 0;
    /* As MAP: a value in a tier comes up to a GPU first. */
    int rc = gkv_lookup_range(ctx, req, false, rep, &e, &off, &len);
    if (rc)
        return rc;
    if (req->into_at > b->len || len > b->len - req->into_at)
        return gkv_reply_fail(rep, GKV_ENOSPACE,
                              "%" PRIu64 " bytes at %" PRIu64 " do not fit in buffer %" PRIu64
                              " of %" PRIu64 " bytes",
                              len, req->into_at, b->id, b->len);
    gkv_wr_t *w = rep->wr;
    gkv_reply_ok(w, req->id);
    gkv_wr_uint(w, GKV_F_SIZE, e->size);
    gkv_wr_uint(w, GKV_F_OFFSET, off);
    gkv_wr_uint(w, GKV_F_LENGTH, len);
    gkv_wr_uint(w, GKV_F_PAYLOAD, 0);
    gkv_wr_uint(w, GKV_F_GPU, gkv_store_gpu(e));
    uint32_t meta_len;
    const uint8_t *meta = gkv_entry_meta(e, &meta_len);
    if (meta_len)
        gkv_wr_bin(w, GKV_F_META, meta, meta_len);
    gkv_wr_value_version(w, ctx->store, e, req->vversion);
    if ((rc = gkv_wr_end(w)))
        return rc;
    /* On a cluster node the pull may have landed this very value there already (cluster.h,
     * the ticket's tee): nothing is left to copy. */
    bool landed = rep->in.teed == e && off == 0 && len == e->size;
    if (len && !landed) {
        gkv_backend_t *to = ctx->devs->dev[b->dev].be;
        gkv_backend_t *from = gkv_devices_of(ctx->devs, e)->be;
        gkv_devptr_t dst = gkv_buffer_at(b, req->into_at), src = {e->mem.v + off};
        if (e->dev == b->dev && to->ops->copy_dev) {
            /* The connection's lane: not behind the clears and copies of the shared one. */
            rep->into_dst = dst;
            rep->into_src = src;
            rep->into_len = len;
        } else if ((rc = to->ops->copy_from(to, dst, from, src, len))) {
            return rc;
        }
        gkv_store_ref(e); /* the copy reads it until the reply goes */
        rep->fence_hold = e;
        rep->fence = true;
        rep->fence_dev = (uint8_t)b->dev;
    }
    ctx->gets_into++;
    ctx->get_into_bytes += len;
    return 0;
}
