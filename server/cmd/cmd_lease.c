/* cmd_lease.c: zero-copy leases: MAP and RELEASE (reading), CREATE, SEAL and ABORT (writing in
 * place). */
#include "handlers.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "error.h"
#include "log.h"
#include "trace.h"

static int lease_room(gkv_cmd_ctx_t *ctx, gkv_reply_t *rep, uint64_t size)
{
    if (rep->leases->count >= ctx->lim.max_leases)
        return gkv_reply_fail(rep, GKV_ELEASELIMIT,
                              "this connection holds %" PRIu64 " leases (max-leases)",
                              rep->leases->count);
    if (size > ctx->lim.max_leased_bytes - rep->leases->bytes)
        return gkv_reply_fail(rep, GKV_ELEASELIMIT,
                              "this connection has %" PRIu64 " bytes under lease; "
                              "%" PRIu64 " more exceed max-leased-bytes",
                              rep->leases->bytes, size);
    return 0;
}

/* Writes what an importer needs to reach e: export data or arena offset, and the device. */
static int write_export(gkv_cmd_ctx_t *ctx, gkv_wr_t *w, gkv_entry_t *e)
{
    uint8_t data[GKV_EXPORT_MAX];
    uint32_t len;
    int rc = gkv_store_export(ctx->store, e, data, sizeof(data), &len);
    if (rc)
        return rc;
    gkv_wr_bin(w, GKV_F_EXPORT, data, len);
    const gkv_backend_t *be = gkv_store_be(ctx->store, e);
    if (be->host_visible)
        gkv_wr_uint(w, GKV_F_ARENA_OFFSET, e->size ? e->mem.v : 0);
    gkv_wr_int(w, GKV_F_DEVICE, be->device);
    gkv_wr_uint(w, GKV_F_GPU, e->dev);
    return 0;
}

/* True when read lease s is a spare of key (klen bytes; NULL: its own key): its value is of
 * that key and nothing else holds it: no key names it and no other lease or transfer uses it
 * (refs == 1), so no other process has it imported and none can reach it again. Its memory may
 * then take the key's next value, written in place by this connection, whose import of it
 * stays good. */
static bool is_spare(gkv_cmd_ctx_t *ctx, const gkv_lease_t *s, const uint8_t *key, size_t klen)
{
    if (!s || s->writable || s->entry->refs != 1 || !s->entry->size)
        return false;
    size_t slen;
    const uint8_t *skey = gkv_store_key(ctx->store, s->entry, &slen);
    return !key || (slen == klen && memcmp(skey, key, klen) == 0);
}

/* Makes spare s writable (no metadata, deadline or NX/XX). False when the store cannot. */
static bool take_spare(gkv_cmd_ctx_t *ctx, gkv_reply_t *rep, gkv_lease_t *s)
{
    if (gkv_store_entry_reset(ctx->store, s->entry) != 0)
        return false;
    gkv_lease_to_write(rep->leases, s);
    return true;
}

/* The lease a MAP request offers for reuse (field lease) when it is this connection's MAP
 * lease on e, the value this MAP returns; else NULL. */
static gkv_lease_t *offered_lease(const gkv_request_t *req, gkv_reply_t *rep, gkv_entry_t *e)
{
    if (!(req->has & GKV_HAS_LEASE))
        return NULL;
    gkv_lease_t *l = gkv_lease_find(rep->leases, req->lease);
    return l && !l->writable && l->entry == e ? l : NULL;
}

int gkv_cmd_map(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    gkv_entry_t *e;
    uint64_t off = 0, len = 0;
    int rc = gkv_lookup_range(ctx, req, false, rep, &e, &off, &len);
    if (rc)
        return rc;
    gkv_trace("d_map", e->size, e->mem.v);
    /* The value may have been answered before a batch copied it: the reply waits for that. */
    if (e->dev != 0 && !rep->in.zc_every_gpu) /* HELLO passed device 0's memory only */
        return gkv_reply_fail(rep, GKV_ENOTSUP,
                              "the value is on GPU %u (%s); this connection's zero-copy reaches "
                              "GPU 0 only (HELLO zero_copy 2 asks for every GPU)",
                              e->dev, gkv_store_be(ctx->store, e)->gpu_uuid);
    rep->fence_dev = e->dev;
    rep->fence_batches = gkv_batch_writes_pending(&gkv_devices_of(ctx->devs, e)->batcher);
    rep->fence = rep->fence_batches;
    if (!gkv_store_exportable(ctx->store, e)) {
        gkv_entry_t *copy;
        if ((rc = gkv_store_copy_begin(ctx->store, e, e->dev, &copy)))
            return rc;
        gkv_store_ref(e);
        rep->copied_from = e;
        rep->copied_to = e = copy;
        rep->fence = true;
    }
    /* A lease the client still holds on this very value is named again: no lease is added. */
    gkv_lease_t *l = offered_lease(req, rep, e);
    if (!l && (rc = lease_room(ctx, rep, e->size)))
        return rc;
    gkv_wr_t *w = rep->wr;
    gkv_reply_ok(w, req->id);
    if ((rc = write_export(ctx, w, e)))
        return rc;
    bool added = !l;
    if (added) {
        gkv_store_ref(e);
        if ((rc = gkv_lease_add(rep->leases, e, false, 0, &l))) {
            gkv_store_unref(ctx->store, e);
            return rc;
        }
    }
    gkv_wr_uint(w, GKV_F_LEASE, l->id);
    gkv_wr_uint(w, GKV_F_SIZE, e->size);
    gkv_wr_uint(w, GKV_F_OFFSET, off);
    gkv_wr_uint(w, GKV_F_LENGTH, len);
    gkv_wr_value_version(w, ctx->store, e, req->vversion); /* a cluster version (net/request.c) */
    uint32_t meta_len;
    const uint8_t *meta = gkv_entry_meta(e, &meta_len);
    if (meta_len)
        gkv_wr_bin(w, GKV_F_META, meta, meta_len);
    if ((rc = gkv_wr_end(w)) && added)
        gkv_lease_drop(rep->leases, ctx->store, l);
    return rc;
}

int gkv_cmd_map_early(gkv_cmd_ctx_t *ctx, gkv_reply_t *rep, uint64_t id, gkv_entry_t *e,
                      uint64_t *lease)
{
    if ((e->dev != 0 && !rep->in.zc_every_gpu) || !e->size ||
        !gkv_store_exportable(ctx->store, e))
        return GKV_ENOTSUP;
    if (rep->leases->count >= ctx->lim.max_leases ||
        e->size > ctx->lim.max_leased_bytes - rep->leases->bytes)
        return GKV_ELEASELIMIT;
    gkv_wr_t *w = rep->wr;
    size_t mark = w->sb.size;
    gkv_reply_ok(w, id);
    gkv_wr_uint(w, GKV_F_EARLY, 1);
    int rc = write_export(ctx, w, e);
    gkv_lease_t *l = NULL;
    if (rc == 0) {
        gkv_store_ref(e);
        if ((rc = gkv_lease_add(rep->leases, e, false, 0, &l)))
            gkv_store_unref(ctx->store, e);
    }
    if (rc == 0) {
        gkv_wr_uint(w, GKV_F_LEASE, l->id);
        gkv_wr_uint(w, GKV_F_SIZE, e->size);
        gkv_wr_uint(w, GKV_F_OFFSET, 0);
        gkv_wr_uint(w, GKV_F_LENGTH, e->size);
        if ((rc = gkv_wr_end(w)) == 0) {
            *lease = l->id;
            return 0;
        }
        gkv_lease_drop(rep->leases, ctx->store, l);
    }
    w->sb.size = mark; /* the frame begun is taken back: nothing was written */
    return rc;
}

/* Protocol 1's CREATE offering a spare (`lease`): when it is this connection's spare of the
 * same key and size, the reply names the same lease, now writable, on the same memory (not
 * cleared: it holds this key's older value, which this connection mapped). Returns 1 when the
 * offer does not qualify (CREATE allocates as usual and the offered lease is untouched), else
 * what the request returns. */
static int reuse_spare(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    gkv_lease_t *s = gkv_lease_find(rep->leases, req->lease);
    if (!is_spare(ctx, s, req->key.p, req->key.len) || s->entry->size != req->size ||
        !take_spare(ctx, rep, s))
        return 1;
    gkv_entry_t *e = s->entry;
    s->flags = (unsigned)req->flags;
    int rc = 0;
    if ((req->has & GKV_HAS_META) &&
        (rc = gkv_store_entry_renew(ctx->store, e, req->meta.p, req->meta.len)))
        return rc;
    if ((req->has & GKV_HAS_TTL) && (rc = gkv_store_entry_ttl(ctx->store, e, req->ttl)))
        return rc;
    gkv_wr_t *w = rep->wr;
    gkv_reply_ok(w, req->id);
    if ((rc = write_export(ctx, w, e)))
        return rc;
    gkv_wr_uint(w, GKV_F_LEASE, s->id);
    gkv_wr_uint(w, GKV_F_SIZE, e->size);
    gkv_wr_uint(w, GKV_F_OFFSET, 0);
    gkv_wr_uint(w, GKV_F_LENGTH, e->size);
    return gkv_wr_end(w);
}

static int create_value(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    if (!(req->has & GKV_HAS_SIZE))
        return gkv_reply_fail(rep, GKV_EINVAL, "CREATE needs a size");
    /* A `lease` offered for reuse is protocol 1's: protocol 2 ignores it (spares are writable
     * leases the client takes without a CREATE). */
    int rc = gkv_check_new_value(ctx, req, req->size, rep);
    if (rc)
        return rc;
    if (rep->in.version < 2 && (req->has & GKV_HAS_LEASE))
        if ((rc = reuse_spare(ctx, req, rep)) != 1)
            return rc;
    if ((rc = lease_room(ctx, rep, req->size)))
        return rc;
    gkv_entry_t *e;
    uint64_t t0 = uv_hrtime();
    rc = gkv_new_entry(ctx, req, req->size, GKV_LANE_SHARED, rep, &e);
    GKV_DEBUG("CREATE of %" PRIu64 " bytes: allocation took %.1f us", req->size,
              (double)(uv_hrtime() - t0) / 1e3);
    if (rc)
        return rc;
    /* The memory may have held another key's value: it is cleared before the reply goes out
     * (stream-ordered on the GPU, waited for by the reply's fence). */
    if ((rc = gkv_store_clear(ctx->store, e))) {
        gkv_store_unref(ctx->store, e);
        return rc;
    }
    gkv_wr_t *w = rep->wr;
    gkv_lease_t *l;
    gkv_reply_ok(w, req->id);
    if ((rc = write_export(ctx, w, e)) ||
        (rc = gkv_lease_add(rep->leases, e, true, (unsigned)req->flags, &l))) {
        gkv_store_unref(ctx->store, e);
        return rc;
    }
    gkv_wr_uint(w, GKV_F_LEASE, l->id);
    gkv_wr_uint(w, GKV_F_SIZE, e->size);
    gkv_wr_uint(w, GKV_F_OFFSET, 0);
    gkv_wr_uint(w, GKV_F_LENGTH, e->size);
    rep->fence = true; /* the memory is another process's once its allocation has run */
    rep->fence_dev = e->dev;
    if ((rc = gkv_wr_end(w)))
        gkv_lease_drop(rep->leases, ctx->store, l);
    return rc;
}

/* The writable lease a SEAL or ABORT names (field lease), held by this connection. Protocol 1
 * also SEALs a spare that is still a read lease (seal: true): it is taken here. */
static int named_lease(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep, bool seal,
                       gkv_lease_t **out)
{
    if (!(req->has & GKV_HAS_LEASE))
        return gkv_reply_fail(rep, GKV_EINVAL, "needs a lease");
    *out = gkv_lease_find(rep->leases, req->lease);
    if (!*out)
        return gkv_reply_fail(rep, GKV_ENOLEASE, "lease %" PRIu64 " is not held by this connection",
                              req->lease);
    if (!(*out)->writable && !(seal && rep->in.version < 2 && is_spare(ctx, *out, NULL, 0) &&
                               take_spare(ctx, rep, *out)))
        return gkv_reply_fail(rep, GKV_EINVAL, "lease %" PRIu64 " is a MAP lease: RELEASE it",
                              req->lease);
    return 0;
}

/* The read lease the SEAL names in `spare` (typically this connection's lease on the value the
 * seal just replaced), when it is a spare of key: made writable (protocol 2), or left a read
 * lease that a later CREATE or SEAL may take (protocol 1). Returns the lease or NULL. */
static gkv_lease_t *make_spare(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep,
                               const uint8_t *key, size_t klen)
{
    gkv_lease_t *s = req->has & GKV_HAS_SPARE ? gkv_lease_find(rep->leases, req->spare) : NULL;
    if (!is_spare(ctx, s, key, klen))
        return NULL;
    if (rep->in.version < 2)
        return s;
    return take_spare(ctx, rep, s) ? s : NULL;
}

/* CREATE, timed for GPUKV_TRACE (d_create at its start, d_created at its end). */
int gkv_cmd_create(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    gkv_trace("d_create", req->size, 0);
    int rc = create_value(ctx, req, rep);
    gkv_trace("d_created", req->size, (uint64_t)-rc);
    return rc;
}

static int seal_value(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    gkv_lease_t *l = NULL;
    int rc = named_lease(ctx, req, rep, true, &l);
    if (rc)
        return rc;
    if (req->flags & ~(uint64_t)(GKV_SEAL_KEEP | GKV_SET_NX | GKV_SET_XX))
        return gkv_reply_fail(rep, GKV_EINVAL, "unknown SEAL flags 0x%" PRIx64, req->flags);
    unsigned flags = l->flags | (unsigned)(req->flags & (GKV_SET_NX | GKV_SET_XX));
    if ((flags & GKV_SET_NX) && (flags & GKV_SET_XX))
        return gkv_reply_fail(rep, GKV_EINVAL, "NX and XX exclude each other");
    bool async = req->has & GKV_HAS_ASYNC;
    if (async && req->async != 1)
        return gkv_reply_fail(rep, GKV_EINVAL, "async is 1 (or absent)");
    if (async && (ctx->clustered || rep->in.version < 2))
        return gkv_reply_fail(rep, GKV_ENOTSUP,
                              ctx->clustered
                                  ? "asynchronous seals are not built for a cluster node"
                                  : "an asynchronous SEAL needs protocol version 2");
    if (async && (flags & (GKV_SET_NX | GKV_SET_XX)))
        return gkv_reply_fail(rep, GKV_EINVAL,
                              "an asynchronous SEAL takes no NX or XX (its reply comes before "
                              "the value is published)");
    if ((rc = gkv_check_meta(req, rep)) || (rc = gkv_check_ttl(req, rep)))
        return rc;
    if ((req->has & GKV_HAS_META) &&
        (rc = gkv_store_entry_renew(ctx->store, l->entry, req->meta.p, req->meta.len)))
        return rc;
    if ((req->has & GKV_HAS_TTL) && (rc = gkv_store_entry_ttl(ctx->store, l->entry, req->ttl)))
        return rc;
    if (async) { /* the connection publishes it once its fence says so (net/fence.h) */
        rep->seal_async = l;
        return 0;
    }
    gkv_entry_t *holder = NULL;
    rc = gkv_store_publish(ctx->store, l->entry, flags, &holder);
    /* With keep, the lease goes on: on the published value as a read lease, or (NX/XX refused
     * it) still writable on the discarded one, which is then a spare with no flags. */
    if (!(req->flags & GKV_SEAL_KEEP))
        gkv_lease_drop(rep->leases, ctx->store, l);
    else if (rc == 0)
        gkv_lease_to_read(rep->leases, ctx->store, l, holder);
    else
        l->flags = 0;
    if (rc == GKV_EEXISTS)
        return gkv_reply_fail(rep, rc, "key exists (NX): the new value was discarded");
    if (rc == GKV_ENOTFOUND)
        return gkv_reply_fail(rep, rc, "key does not exist (XX): the new value was discarded");
    if (rc)
        return rc;
    gkv_reply_ok(rep->wr, req->id);
    size_t klen;
    const uint8_t *key = gkv_store_key(ctx->store, holder, &klen);
    gkv_lease_t *s = make_spare(ctx, req, rep, key, klen);
    if (s)
        gkv_wr_uint(rep->wr, GKV_F_SPARE, s->id);
    return gkv_wr_end(rep->wr);
}

/* SEAL, timed for GPUKV_TRACE (d_seal at its start, d_seal_done at its end). */
int gkv_cmd_seal(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    gkv_trace("d_seal", req->lease, 0);
    int rc = seal_value(ctx, req, rep);
    gkv_trace("d_seal_done", req->lease, (uint64_t)-rc);
    return rc;
}

int gkv_cmd_abort(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    gkv_lease_t *l = NULL;
    int rc = named_lease(ctx, req, rep, false, &l);
    if (rc)
        return rc;
    gkv_lease_drop(rep->leases, ctx->store, l);
    gkv_reply_ok(rep->wr, req->id);
    return gkv_wr_end(rep->wr);
}

/* RELEASE's holds (PROTOCOL.md "Held imports"): each id in `hold` must be a read lease this
 * RELEASE ends (marked), the connection must have been offered holds, and the holds must fit its
 * limits once the `unhold` ones are gone. Then each lease's allocation is held, all or none.
 * Returns 0 or the error written. */
static int add_holds(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep,
                     uint64_t unheld_bytes, uint32_t unheld)
{
    gkv_leases_t *ls = rep->leases;
    const gkv_backend_t *be0 = ctx->store->dev[0].be;
    if (!rep->in.zero_copy || !be0->ops->hold || rep->in.version < 2)
        return gkv_reply_fail(rep, GKV_ENOTSUP, "this connection was offered no holds (HELLO "
                                                "holds: a cuda daemon's zero-copy connection)");
    if (req->nhold > GKV_MAX_BATCH)
        return gkv_reply_fail(rep, GKV_ETOOBIG, "RELEASE holds at most %u leases",
                              GKV_MAX_BATCH);
    gkv_reader_t it;
    uint32_t n, seen = 0;
    uint64_t id, bytes = 0;
    gkv_read_init(&it, req->hold.p, req->hold.len);
    gkv_read_array(&it, &n);
    gkv_lease_t **ls_seen = malloc(sizeof(*ls_seen) * (n ? n : 1));
    if (!ls_seen)
        return GKV_ENOMEM;
    int rc = 0;
    for (uint32_t i = 0; i < n && !rc; i++) {
        gkv_read_uint(&it, &id);
        gkv_lease_t *l = gkv_lease_find(ls, id);
        if (!l || !l->marked || l->writable) /* unmarked: not ended here, or named twice */
            rc = gkv_reply_fail(rep, GKV_EINVAL,
                                "hold %" PRIu64 " is not a read lease this RELEASE ends (once)",
                                id);
        else {
            l->marked = false;
            ls_seen[seen++] = l;
            bytes += l->entry->size;
        }
    }
    for (uint32_t i = 0; i < seen; i++)
        ls_seen[i]->marked = true;
    free(ls_seen);
    if (rc)
        return rc;
    uint64_t cap = gkv_hold_cap(ctx->store);
    if (ls->nholds - unheld + n > ctx->lim.max_leases ||
        ls->held_bytes - unheld_bytes + bytes > cap)
        return gkv_reply_fail(rep, GKV_ELEASELIMIT,
                              "holds past this connection's max-leases, or past %" PRIu64
                              " bytes (HELLO hold_bytes)", cap);
    gkv_read_init(&it, req->hold.p, req->hold.len);
    gkv_read_array(&it, &n);
    for (uint32_t i = 0; i < n; i++) {
        gkv_read_uint(&it, &id);
        rc = gkv_hold_add(ls, ctx->store, gkv_lease_find(ls, id));
        if (rc) { /* none then: the ones added go again */
            gkv_read_init(&it, req->hold.p, req->hold.len);
            gkv_read_array(&it, &n);
            for (uint32_t j = 0; j < i; j++) {
                gkv_read_uint(&it, &id);
                gkv_hold_drop(ls, ctx->store, gkv_hold_find(ls, id));
            }
            return gkv_reply_fail(rep, rc, "lease %" PRIu64 "'s memory cannot be held", id);
        }
    }
    return 0;
}

int gkv_cmd_release(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    bool batch = req->has & GKV_HAS_LEASES;
    if (batch && req->nleases > GKV_MAX_BATCH)
        return gkv_reply_fail(rep, GKV_ETOOBIG, "RELEASE takes at most %u leases, not %" PRIu32,
                              GKV_MAX_BATCH, req->nleases);
    if (batch && req->nleases == 0)
        return gkv_reply_fail(rep, GKV_EINVAL, "RELEASE takes 1..%u leases", GKV_MAX_BATCH);
    if (!batch && !(req->has & GKV_HAS_LEASE) && !(req->has & GKV_HAS_UNHOLD))
        return gkv_reply_fail(rep, GKV_EINVAL, "RELEASE needs a lease or a leases array");
    if ((req->has & GKV_HAS_UNHOLD) && req->nunhold > GKV_MAX_BATCH)
        return gkv_reply_fail(rep, GKV_ETOOBIG, "RELEASE ends at most %u holds", GKV_MAX_BATCH);
    bool any = batch || (req->has & GKV_HAS_LEASE);
    uint32_t n = batch ? req->nleases : any ? 1 : 0, nfound = 0;
    gkv_lease_t **found = malloc(sizeof(*found) * (n ? n : 1));
    if (!found)
        return GKV_ENOMEM;
    gkv_reader_t it;
    uint64_t id = req->lease;
    if (batch) {
        gkv_read_init(&it, req->leases.p, req->leases.len);
        gkv_read_array(&it, &n);
    }
    /* Check every id before ending any lease, so that a bad batch changes nothing. */
    int rc = 0;
    for (uint32_t i = 0; i < n && !rc; i++) {
        if (batch)
            gkv_read_uint(&it, &id);
        gkv_lease_t *l = gkv_lease_find(rep->leases, id);
        if (!l)
            rc = gkv_reply_fail(rep, GKV_ENOLEASE,
                                "lease %" PRIu64 " is not held by this connection", id);
        else if (l->marked)
            rc = gkv_reply_fail(rep, GKV_ENOLEASE, "lease %" PRIu64 " is named twice", id);
        else if (l->writable && rep->in.version < 2) /* protocol 1: SEAL or ABORT it */
            rc = gkv_reply_fail(rep, GKV_EINVAL,
                                "lease %" PRIu64 " is a CREATE lease: SEAL or ABORT it", id);
        else {
            l->marked = true;
            found[nfound++] = l;
        }
    }
    /* The holds that end (ids not held are passed over: the importer freed its import before
     * asking), then the ones that begin. */
    uint64_t unheld_bytes = 0;
    uint32_t unheld = 0;
    if (!rc && (req->has & GKV_HAS_UNHOLD)) {
        uint32_t m;
        gkv_read_init(&it, req->unhold.p, req->unhold.len);
        gkv_read_array(&it, &m);
        for (uint32_t i = 0; i < m; i++) {
            gkv_read_uint(&it, &id);
            gkv_hold_t *h = gkv_hold_find(rep->leases, id);
            if (h && !h->marked) {
                h->marked = true;
                unheld_bytes += h->bytes;
                unheld++;
            }
        }
    }
    if (!rc && (req->has & GKV_HAS_HOLD))
        rc = add_holds(ctx, req, rep, unheld_bytes, unheld);
    if (req->has & GKV_HAS_UNHOLD) {
        uint32_t m;
        gkv_read_init(&it, req->unhold.p, req->unhold.len);
        gkv_read_array(&it, &m);
        for (uint32_t i = 0; i < m; i++) {
            gkv_read_uint(&it, &id);
            gkv_hold_t *h = gkv_hold_find(rep->leases, id);
            if (h && h->marked) {
                h->marked = false;
                if (!rc)
                    gkv_hold_drop(rep->leases, ctx->store, h);
            }
        }
    }
    for (uint32_t i = 0; i < nfound; i++) {
        if (rc)
            found[i]->marked = false;
        else
            gkv_lease_drop(rep->leases, ctx->store, found[i]);
    }
    free(found);
    return rc ? rc : gkv_reply_count(rep, req->id, n);
}
