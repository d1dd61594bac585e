/* checks.c: the checks and lookups the data handlers share (checks.h). */
#include "checks.h"

#include <inttypes.h>
#include <stdio.h>

#include "error.h"
#include "frame.h"

int gkv_check_key(const gkv_cmd_ctx_t *ctx, gkv_slice_t key, gkv_reply_t *rep)
{
    if (key.len == 0)
        return gkv_reply_fail(rep, GKV_EINVAL, "keys must be at least 1 byte");
    if (key.len > ctx->lim.max_key)
        return gkv_reply_fail(rep, GKV_ETOOBIG, "key of %u bytes exceeds max-key-size %" PRIu64,
                              key.len, ctx->lim.max_key);
    return 0;
}

int gkv_range_resolve(uint64_t size, uint64_t offset, uint64_t length, uint64_t suffix,
                      uint64_t *off, uint64_t *len)
{
    if (suffix) {
        *len = suffix < size ? suffix : size;
        *off = size - *len;
        return 0;
    }
    if (offset > size)
        return GKV_ERANGE;
    uint64_t rest = size - offset;
    *off = offset;
    *len = (length == 0 || length > rest) ? rest : length;
    return 0;
}

int gkv_lookup_range(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, bool to_socket,
                     gkv_reply_t *rep, gkv_entry_t **e, uint64_t *off, uint64_t *len)
{
    int rc;
    bool waits_for_key = (req->has & GKV_HAS_WAIT) && req->wait;
    bool after = req->has & GKV_HAS_AFTER;
    if (waits_for_key && req->wait > GKV_MAX_WAIT_MS)
        return gkv_reply_fail(rep, GKV_EINVAL, "wait is 1..%u milliseconds", GKV_MAX_WAIT_MS);
    if (after && !waits_for_key)
        return gkv_reply_fail(rep, GKV_EINVAL, "after needs a wait");
    if (after && !ctx->store->versions && !ctx->clustered)
        return gkv_reply_fail(rep, GKV_ENOTSUP,
                              "this daemon keeps no versions (gpukvd --key-versions yes)");
    if (after) {
        /* The value's version: on a cluster node its cluster version, which the net layer put
         * in vversion (0: not known here), else the store's. */
        const gkv_entry_t *old = gkv_store_find(ctx->store, req->key.p, req->key.len);
        uint64_t v = !old                ? 0
                     : ctx->clustered ? req->vversion
                                      : gkv_store_version(ctx->store, old);
        if (v && v <= req->after) {
            /* Not the version asked for yet: waits as for a key that does not exist, before
             * any lookup that would count a read of it or bring it up from a tier. */
            if (rep->in.may_wait && !rep->in.wait_over) {
                rep->parked = rep->wait_key = true;
                return GKV_ENOTFOUND;
            }
            return gkv_reply_fail(rep, GKV_ETIMEDOUT,
                                  "no version above %" PRIu64 " within %" PRIu64 " ms",
                                  req->after, req->wait);
        }
    }
    gkv_entry_t *cur = rep->in.room ? gkv_store_get(ctx->store, req->key.p, req->key.len) : NULL;
    if (cur && gkv_store_in_tier(cur)) {
        /* A value in a tier comes up off the loop while the request waits: a GET's from the
         * disk to the host tier, a MAP's (and a promoting GET's) to its GPU, a step at a time. */
        bool waits;
        if (to_socket && !ctx->store->promote_on_get)
            waits = cur->dev == GKV_DEV_DISK_TIER &&
                    gkv_demoter_fetch(ctx->demoter, cur, rep->in.room);
        else
            waits = gkv_demoter_promote(
                ctx->demoter, cur,
                gkv_store_place(ctx->store, req->key.p, req->key.len, cur->size), rep->in.room);
        if (waits) {
            rep->parked = true; /* not answered: it runs again once the move ends */
            return GKV_EOOM;
        }
    }
    *e = to_socket ? gkv_store_get_readable(ctx->store, req->key.p, req->key.len, &rc)
                   : gkv_store_get_here(ctx->store, req->key.p, req->key.len, &rc);
    if (rc == GKV_EOOM)
        return gkv_reply_fail(rep, GKV_EOOM, "the value is in a tier below the GPUs and no room "
                                             "could be made for it above");
    if (!*e && rc == GKV_ENOTFOUND && waits_for_key) { /* wait for it, or the wait is over */
        if (rep->in.wait_over)
            return gkv_reply_fail(rep, GKV_ETIMEDOUT,
                                  "the key did not appear within %" PRIu64 " ms", req->wait);
        if (rep->in.may_wait) {
            rep->parked = rep->wait_key = true; /* not answered: runs again once it exists */
            return GKV_ENOTFOUND;
        }
    }
    if (!*e)
        return rc;
    if (gkv_range_resolve((*e)->size, req->offset, req->length, req->suffix, off, len))
        return gkv_reply_fail(rep, GKV_ERANGE,
                              "offset %" PRIu64 " is past the end of a %" PRIu64 "-byte value",
                              req->offset, (uint64_t)(*e)->size);
    return 0;
}

void gkv_wr_value_version(gkv_wr_t *w, const gkv_store_t *st, const gkv_entry_t *e,
                          uint64_t known)
{
    if (known)
        gkv_wr_uint(w, GKV_F_VVERSION, known);
    else if (st->versions)
        gkv_wr_uint(w, GKV_F_VVERSION, gkv_store_version(st, e));
}

int gkv_check_meta(const gkv_request_t *req, gkv_reply_t *rep)
{
    if (req->meta.len > GKV_MAX_META)
        return gkv_reply_fail(rep, GKV_ETOOBIG, "metadata of %u bytes exceeds %u", req->meta.len,
                              GKV_MAX_META);
    return 0;
}

int gkv_check_ttl(const gkv_request_t *req, gkv_reply_t *rep)
{
    if ((req->has & GKV_HAS_TTL) && (req->ttl == 0 || req->ttl > GKV_MAX_TTL_MS))
        return gkv_reply_fail(rep, GKV_EINVAL, "ttl is 1..%" PRIu64 " milliseconds",
                              (uint64_t)GKV_MAX_TTL_MS);
    return 0;
}

int gkv_check_new_value(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, uint64_t size,
                        gkv_reply_t *rep)
{
    if (req->flags & ~(uint64_t)(GKV_SET_NX | GKV_SET_XX))
        return gkv_reply_fail(rep, GKV_EINVAL, "unknown flags 0x%" PRIx64, req->flags);
    if ((req->flags & GKV_SET_NX) && (req->flags & GKV_SET_XX))
        return gkv_reply_fail(rep, GKV_EINVAL, "NX and XX exclude each other");
    int rc = gkv_check_ttl(req, rep);
    if (rc)
        return rc;
    if (size > ctx->lim.max_value)
        return gkv_reply_fail(rep, GKV_ETOOBIG,
                              "value of %" PRIu64 " bytes exceeds max-value-size %" PRIu64, size,
                              ctx->lim.max_value);
    rc = gkv_check_meta(req, rep);
    if (rc)
        return rc;
    if (!(req->flags & (GKV_SET_NX | GKV_SET_XX)))
        return 0; /* the key is looked up only when a flag asks */
    bool exists = gkv_store_find(ctx->store, req->key.p, req->key.len) != NULL;
    if ((req->flags & GKV_SET_NX) && exists)
        return gkv_reply_fail(rep, GKV_EEXISTS, "key exists (NX)");
    if ((req->flags & GKV_SET_XX) && !exists)
        return gkv_reply_fail(rep, GKV_ENOTFOUND, "key does not exist (XX)");
    return 0;
}

int gkv_reply_oom(gkv_reply_t *rep, const gkv_store_t *st, unsigned dev, uint64_t size)
{
    const gkv_store_dev_t *d = &st->dev[dev]; /* with one device, the store's figures */
    char where[96] = "";
    if (st->ndev > 1)
        snprintf(where, sizeof(where), " on device %u (%s)", dev, d->be->gpu_uuid);
    /* With tiers, what stopped them taking more: full, or a disk that refuses writes. */
    char tiers[192] = "";
    const gkv_store_dev_t *h = &st->dev[GKV_DEV_HOST_TIER], *k = &st->dev[GKV_DEV_DISK_TIER];
    uint64_t disk_errors = st->disk_tier ? gkv_backend_disk_errors(k->be) : 0;
    if (st->host_tier || st->disk_tier)
        snprintf(tiers, sizeof(tiers), "; host tier %" PRIu64 " of %" PRIu64 ", disk tier %" PRIu64
                 " of %" PRIu64 " bytes used%s",
                 h->used, h->limit, k->used, k->limit,
                 disk_errors ? ", and the disk tier refuses writes (full or failing: "
                               "tier_disk_io_errors, the log)"
                             : "");
    return gkv_reply_fail(rep, GKV_EOOM,
                          "value of %" PRIu64 " bytes does not fit%s: %" PRIu64 " of %" PRIu64
                          " bytes used%s",
                          size, where, d->used, d->limit, tiers);
}

int gkv_check_device(const gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep, int *dev)
{
    *dev = -1;
    if (!(req->has & GKV_HAS_GPU))
        return 0;
    if (!req->gpu_uuid.len) {
        if (req->gpu >= ctx->devs->n)
            return gkv_reply_fail(rep, GKV_EINVAL, "no GPU %" PRIu64 ": this server has %u",
                                  req->gpu, ctx->devs->n);
        *dev = (int)req->gpu;
        return 0;
    }
    *dev = gkv_devices_find_gpu(ctx->devs, (const char *)req->gpu_uuid.p, req->gpu_uuid.len);
    if (*dev >= 0)
        return 0;
    return gkv_reply_fail(rep, GKV_EINVAL, "no GPU %.*s on this server",
                          (int)(req->gpu_uuid.len < 64 ? req->gpu_uuid.len : 64),
                          (const char *)req->gpu_uuid.p);
}

int gkv_new_entry(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, uint64_t size, int lane,
                  gkv_reply_t *rep, gkv_entry_t **out)
{
    gkv_store_t *st = ctx->store;
    int named;
    int rc = gkv_check_device(ctx, req, rep, &named);
    if (rc)
        return rc;
    if (lane == GKV_LANE_SHARED && !rep->in.zc_every_gpu) {
        if (named > 0)
            return gkv_reply_fail(rep, GKV_ENOTSUP,
                                  "this connection's zero-copy reaches GPU 0 only "
                                  "(HELLO zero_copy 2 asks for every GPU)");
        named = 0;
    }
    unsigned dev =
        named >= 0 ? (unsigned)named : gkv_store_place(st, req->key.p, req->key.len, size);
    const gkv_store_dev_t *d = &st->dev[dev];
    if (rep->in.room && size <= d->limit && size > d->limit - d->used &&
        gkv_demoter_room(ctx->demoter, dev, size, rep->in.room)) {
        rep->parked = true; /* not answered: it runs again once the moves end */
        return GKV_EOOM;
    }
    rc = gkv_store_entry_new(st, dev, req->key.p, req->key.len, size, req->meta.p, req->meta.len,
                             lane, out);
    if (rc == 0 && (req->has & GKV_HAS_TTL) &&
        (rc = gkv_store_entry_ttl(ctx->store, *out, req->ttl))) {
        gkv_store_unref(ctx->store, *out);
        *out = NULL;
    }
    if (rc == GKV_EOOM)
        return gkv_reply_oom(rep, st, dev, size);
    if (rc == GKV_ENOMEM && !gkv_store_host_room(ctx->store, req->key.len, (uint32_t)req->meta.len))
        return gkv_reply_fail(rep, rc,
                              "keys and metadata are over --maxmemory-keys: %" PRIu64 " of %" PRIu64
                              " host bytes used",
                              gkv_store_host_memory(ctx->store), ctx->store->host_limit);
    return rc;
}
