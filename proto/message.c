/* message.c: request decoding and the frame writer. */
#include "message.h"

#include <gpukv/gpukv.h>
#include <string.h>

static int read_keys(gkv_reader_t *r, gkv_slice_t *raw, uint32_t *n, const char **why)
{
    const uint8_t *start = r->p;
    gkv_slice_t k;
    if (gkv_read_array(r, n)) {
        *why = "keys is not an array";
        return GKV_EPROTO;
    }
    for (uint32_t i = 0; i < *n; i++) {
        if (gkv_read_bin(r, &k)) {
            *why = "keys holds something other than byte strings";
            return GKV_EPROTO;
        }
    }
    raw->p = start;
    raw->len = (uint32_t)(r->p - start);
    return 0;
}

int gkv_req_items_next(gkv_reader_t *it, gkv_item_t *item)
{
    uint32_t n;
    if (gkv_read_array(it, &n) || n != 4 || gkv_read_bin(it, &item->key) ||
        gkv_read_uint(it, &item->offset) || gkv_read_uint(it, &item->length) ||
        gkv_read_uint(it, &item->suffix))
        return GKV_EPROTO;
    return 0;
}

int gkv_req_keys_next(gkv_reader_t *it, gkv_slice_t *key)
{
    return gkv_read_bin(it, key);
}

static int read_leases(gkv_reader_t *r, gkv_slice_t *raw, uint32_t *n, const char **why)
{
    const uint8_t *start = r->p;
    uint64_t id;
    if (gkv_read_array(r, n)) {
        *why = "leases is not an array";
        return GKV_EPROTO;
    }
    for (uint32_t i = 0; i < *n; i++) {
        if (gkv_read_uint(r, &id)) {
            *why = "leases holds something other than lease ids";
            return GKV_EPROTO;
        }
    }
    raw->p = start;
    raw->len = (uint32_t)(r->p - start);
    return 0;
}

static int read_items(gkv_reader_t *r, gkv_slice_t *raw, uint32_t *n, const char **why)
{
    const uint8_t *start = r->p;
    gkv_item_t item;
    if (gkv_read_array(r, n)) {
        *why = "items is not an array";
        return GKV_EPROTO;
    }
    for (uint32_t i = 0; i < *n; i++) {
        if (gkv_req_items_next(r, &item)) {
            *why = "an item is not [key, offset, length, suffix]";
            return GKV_EPROTO;
        }
    }
    raw->p = start;
    raw->len = (uint32_t)(r->p - start);
    return 0;
}

int gkv_req_decode(const uint8_t *hdr, size_t len, gkv_request_t *req, const char **why)
{
    gkv_reader_t r;
    uint32_t n;
    memset(req, 0, sizeof(*req));
    req->limit = 0;
    gkv_read_init(&r, hdr, len);
    *why = "header is not a map";
    if (gkv_read_map(&r, &n))
        return GKV_EPROTO;
    bool have_op = false;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t field;
        int rc = 0;
        if (gkv_read_uint(&r, &field)) {
            *why = "a field id is not a non-negative integer";
            return GKV_EPROTO;
        }
        *why = "a field has the wrong type";
        switch (field) {
        case GKV_F_OP:
            rc = gkv_read_uint(&r, &req->op);
            have_op = true;
            break;
        case GKV_F_ID:
            rc = gkv_read_uint(&r, &req->id);
            break;
        case GKV_F_KEY:
            rc = gkv_read_bin(&r, &req->key);
            req->has |= GKV_HAS_KEY;
            break;
        case GKV_F_PAYLOAD:
            rc = gkv_read_uint(&r, &req->payload_len);
            break;
        case GKV_F_FLAGS:
            rc = gkv_read_uint(&r, &req->flags);
            break;
        case GKV_F_OFFSET:
            rc = gkv_read_uint(&r, &req->offset);
            req->has |= GKV_HAS_OFFSET;
            break;
        case GKV_F_LENGTH:
            rc = gkv_read_uint(&r, &req->length);
            req->has |= GKV_HAS_LENGTH;
            break;
        case GKV_F_SUFFIX:
            rc = gkv_read_uint(&r, &req->suffix);
            req->has |= GKV_HAS_SUFFIX;
            break;
        case GKV_F_META:
            rc = gkv_read_bin(&r, &req->meta);
            req->has |= GKV_HAS_META;
            break;
        case GKV_F_KEYS:
            rc = read_keys(&r, &req->keys, &req->nkeys, why);
            req->has |= GKV_HAS_KEYS;
            break;
        case GKV_F_ITEMS:
            rc = read_items(&r, &req->items, &req->nitems, why);
            req->has |= GKV_HAS_ITEMS;
            break;
        case GKV_F_PREFIX:
            rc = gkv_read_bin(&r, &req->prefix);
            req->has |= GKV_HAS_PREFIX;
            break;
        case GKV_F_DELIM:
            rc = gkv_read_bin(&r, &req->delim);
            req->has |= GKV_HAS_DELIM;
            break;
        case GKV_F_CURSOR:
            rc = gkv_read_bin(&r, &req->cursor);
            req->has |= GKV_HAS_CURSOR;
            break;
        case GKV_F_LIMIT:
            rc = gkv_read_uint(&r, &req->limit);
            break;
        case GKV_F_VERSION:
            rc = gkv_read_uint(&r, &req->version);
            break;
        case GKV_F_ZC:
            rc = gkv_read_uint(&r, &req->zero_copy);
            break;
        case GKV_F_SIZE:
            rc = gkv_read_uint(&r, &req->size);
            req->has |= GKV_HAS_SIZE;
            break;
        case GKV_F_LEASE:
            rc = gkv_read_uint(&r, &req->lease);
            req->has |= GKV_HAS_LEASE;
            break;
        case GKV_F_SPARE:
            rc = gkv_read_uint(&r, &req->spare);
            req->has |= GKV_HAS_SPARE;
            break;
        case GKV_F_TTL:
            rc = gkv_read_uint(&r, &req->ttl);
            req->has |= GKV_HAS_TTL;
            break;
        case GKV_F_WAIT:
            rc = gkv_read_uint(&r, &req->wait);
            req->has |= GKV_HAS_WAIT;
            break;
        case GKV_F_ASYNC:
            rc = gkv_read_uint(&r, &req->async);
            req->has |= GKV_HAS_ASYNC;
            break;
        case GKV_F_FENCES:
            rc = gkv_read_uint(&r, &req->fences);
            break;
        case GKV_F_LOCAL:
            rc = gkv_read_uint(&r, &req->local);
            break;
        case GKV_F_EARLY:
            rc = gkv_read_uint(&r, &req->early);
            break;
        case GKV_F_AFTER:
            rc = gkv_read_uint(&r, &req->after);
            req->has |= GKV_HAS_AFTER;
            break;
        case GKV_F_FENCE:
            rc = gkv_read_uint(&r, &req->fence);
            req->has |= GKV_HAS_FENCE;
            break;
        case GKV_F_TARGET:
            rc = gkv_read_uint(&r, &req->target);
            break;
        case GKV_F_TOKEN:
            rc = gkv_read_bin(&r, &req->token);
            break;
        case GKV_F_INTO:
            rc = gkv_read_uint(&r, &req->into);
            req->has |= GKV_HAS_INTO;
            break;
        case GKV_F_INTO_AT:
            rc = gkv_read_uint(&r, &req->into_at);
            break;
        case GKV_F_EXPORT:
            rc = gkv_read_bin(&r, &req->export_data);
            req->has |= GKV_HAS_EXPORT;
            break;
        case GKV_F_GPU: /* an ordinal, or a UUID string */
            if (gkv_read_uint(&r, &req->gpu) != 0 &&
                (gkv_read_bin(&r, &req->gpu_uuid) != 0 || req->gpu_uuid.len == 0))
                rc = GKV_EPROTO;
            req->has |= GKV_HAS_GPU;
            *why = "gpu is neither an ordinal nor a UUID";
            break;
        case GKV_F_LEASES:
            rc = read_leases(&r, &req->leases, &req->nleases, why);
            req->has |= GKV_HAS_LEASES;
            break;
        case GKV_F_HOLD:
            rc = read_leases(&r, &req->hold, &req->nhold, why);
            req->has |= GKV_HAS_HOLD;
            break;
        case GKV_F_UNHOLD:
            rc = read_leases(&r, &req->unhold, &req->nunhold, why);
            req->has |= GKV_HAS_UNHOLD;
            break;
        case GKV_F_NODE_OP:
            rc = gkv_read_uint(&r, &req->node_op);
            break;
        case GKV_F_NODE:
            rc = gkv_read_bin(&r, &req->node);
            break;
        case GKV_F_INCARNATION:
            rc = gkv_read_uint(&r, &req->incarnation);
            break;
        case GKV_F_VVERSION:
            rc = gkv_read_uint(&r, &req->vversion);
            break;
        case GKV_F_OWNER:
            rc = gkv_read_bin(&r, &req->owner);
            break;
        case GKV_F_OWNER_INC:
            rc = gkv_read_uint(&r, &req->owner_inc);
            break;
        case GKV_F_HAVE:
            rc = gkv_read_uint(&r, &req->have);
            break;
        case GKV_F_PLANE:
            rc = gkv_read_bin(&r, &req->plane);
            break;
        case GKV_F_ARENAS:
            rc = gkv_read_bin(&r, &req->arenas);
            break;
        case GKV_F_ARENA_OFFSET:
            rc = gkv_read_uint(&r, &req->arena_offset);
            break;
        case GKV_F_SLOTS:
            rc = gkv_read_bin(&r, &req->slots);
            break;
        case GKV_F_XFER:
            rc = gkv_read_uint(&r, &req->xfer);
            break;
        default:
            /* Unknown fields are skipped so that newer clients can add optional ones. */
            rc = gkv_read_skip(&r);
            *why = "an unknown field holds malformed msgpack";
            break;
        }
        if (rc)
            return GKV_EPROTO;
    }
    if (!have_op) {
        *why = "header has no op field";
        return GKV_EPROTO;
    }
    if (gkv_read_left(&r) != 0) {
        *why = "trailing bytes after the header map";
        return GKV_EPROTO;
    }
    *why = "";
    return 0;
}

/* Reads a field that must be an array, keeping its raw bytes. */
static int raw_array(gkv_reader_t *r, gkv_slice_t *raw)
{
    const uint8_t *start = r->p;
    uint32_t n;
    if (gkv_read_array(r, &n))
        return GKV_EPROTO;
    r->p = start;
    if (gkv_read_skip(r))
        return GKV_EPROTO;
    raw->p = start;
    raw->len = (uint32_t)(r->p - start);
    return 0;
}

int gkv_resp_decode(const uint8_t *hdr, size_t len, gkv_response_t *resp)
{
    gkv_reader_t r;
    uint32_t n;
    memset(resp, 0, sizeof(*resp));
    resp->device = -1;
    resp->gpu = -1;
    gkv_read_init(&r, hdr, len);
    if (gkv_read_map(&r, &n))
        return GKV_EPROTO;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t f;
        int rc;
        if (gkv_read_uint(&r, &f))
            return GKV_EPROTO;
        switch (f) {
        case GKV_F_ID: rc = gkv_read_uint(&r, &resp->id); break;
        case GKV_F_STATUS: rc = gkv_read_int(&r, &resp->status); break;
        case GKV_F_MESSAGE: rc = gkv_read_bin(&r, &resp->message); break;
        case GKV_F_PAYLOAD: rc = gkv_read_uint(&r, &resp->payload_len); break;
        case GKV_F_SIZE: rc = gkv_read_uint(&r, &resp->size); break;
        case GKV_F_OFFSET: rc = gkv_read_uint(&r, &resp->offset); break;
        case GKV_F_COUNT: rc = gkv_read_uint(&r, &resp->count); break;
        case GKV_F_BYTES: rc = gkv_read_uint(&r, &resp->bytes); break;
        case GKV_F_VERSION: rc = gkv_read_uint(&r, &resp->version); break;
        case GKV_F_MAX_KEY: rc = gkv_read_uint(&r, &resp->max_key); break;
        case GKV_F_MAX_VALUE: rc = gkv_read_uint(&r, &resp->max_value); break;
        case GKV_F_MAX_META: rc = gkv_read_uint(&r, &resp->max_meta); break;
        case GKV_F_DEVICE: rc = gkv_read_int(&r, &resp->device); break;
        case GKV_F_GPU:
            rc = gkv_read_int(&r, &resp->gpu);
            break;
        case GKV_F_LENGTH: rc = gkv_read_uint(&r, &resp->length); break;
        case GKV_F_TIER: rc = gkv_read_uint(&r, &resp->tier); break;
        case GKV_F_EVENT: rc = gkv_read_uint(&r, &resp->event); break;
        case GKV_F_SEQ: rc = gkv_read_uint(&r, &resp->seq); break;
        case GKV_F_FENCES: rc = gkv_read_uint(&r, &resp->fences); break;
        case GKV_F_EARLY: rc = gkv_read_uint(&r, &resp->early); break;
        case GKV_F_HOLDS: rc = gkv_read_uint(&r, &resp->holds); break;
        case GKV_F_HOLD_BYTES: rc = gkv_read_uint(&r, &resp->hold_bytes); break;
        case GKV_F_INTO:
            rc = gkv_read_uint(&r, &resp->into);
            break;
        case GKV_F_KEY: rc = gkv_read_bin(&r, &resp->key); break;
        case GKV_F_LEASE: rc = gkv_read_uint(&r, &resp->lease); break;
        case GKV_F_SPARE: rc = gkv_read_uint(&r, &resp->spare); break;
        case GKV_F_TTL:
            rc = gkv_read_uint(&r, &resp->ttl);
            resp->has_ttl = true;
            break;
        case GKV_F_ARENA_OFFSET: rc = gkv_read_uint(&r, &resp->arena_offset); break;
        case GKV_F_ARENA_SIZE: rc = gkv_read_uint(&r, &resp->arena_size); break;
        case GKV_F_EXPORT: rc = gkv_read_bin(&r, &resp->export_data); break;
        case GKV_F_META:
            rc = gkv_read_bin(&r, &resp->meta);
            resp->has_meta = true;
            break;
        case GKV_F_CURSOR:
            rc = gkv_read_bin(&r, &resp->cursor);
            resp->has_cursor = true;
            break;
        case GKV_F_SERVER: rc = gkv_read_bin(&r, &resp->server); break;
        case GKV_F_BACKEND: rc = gkv_read_bin(&r, &resp->backend); break;
        case GKV_F_ZC: rc = gkv_read_bin(&r, &resp->zc); break;
        case GKV_F_ZC_WHY: rc = gkv_read_bin(&r, &resp->zc_why); break;
        case GKV_F_ENTRIES: rc = raw_array(&r, &resp->entries); break;
        case GKV_F_DIRS: rc = raw_array(&r, &resp->dirs); break;
        case GKV_F_RESULTS: rc = raw_array(&r, &resp->results); break;
        case GKV_F_GPUS: rc = raw_array(&r, &resp->gpus); break;
        case GKV_F_VVERSION: rc = gkv_read_uint(&r, &resp->vversion); break;
        case GKV_F_OWNER_INC: rc = gkv_read_uint(&r, &resp->owner_inc); break;
        case GKV_F_OWNER: rc = gkv_read_bin(&r, &resp->owner); break;
        case GKV_F_NODE: rc = gkv_read_bin(&r, &resp->node); break;
        default: rc = gkv_read_skip(&r); break;
        }
        if (rc)
            return GKV_EPROTO;
    }
    return gkv_read_left(&r) ? GKV_EPROTO : 0;
}

/* Writer. */

void gkv_wr_init(gkv_wr_t *w)
{
    msgpack_sbuffer_init(&w->sb);
    msgpack_packer_init(&w->pk, &w->sb, msgpack_sbuffer_write);
    w->frame_start = 0;
    w->fields = 0;
    w->failed = false;
}

void gkv_wr_fini(gkv_wr_t *w)
{
    msgpack_sbuffer_destroy(&w->sb);
}

void gkv_wr_reset(gkv_wr_t *w)
{
    w->sb.size = 0;
    w->failed = false;
}

static void put(gkv_wr_t *w, const void *p, size_t n)
{
    if (msgpack_sbuffer_write(&w->sb, p, n) != 0)
        w->failed = true;
}

void gkv_wr_begin(gkv_wr_t *w)
{
    static const uint8_t reserve[GKV_FRAME_PREFIX + 5] = {0, 0, 0, 0, 0xdf, 0, 0, 0, 0};
    w->frame_start = w->sb.size;
    w->fields = 0;
    put(w, reserve, sizeof(reserve));
}

static void field(gkv_wr_t *w, unsigned f)
{
    w->fields++;
    if (msgpack_pack_unsigned_int(&w->pk, f))
        w->failed = true;
}

void gkv_wr_uint(gkv_wr_t *w, unsigned f, uint64_t v)
{
    field(w, f);
    if (msgpack_pack_uint64(&w->pk, v))
        w->failed = true;
}

void gkv_wr_int(gkv_wr_t *w, unsigned f, int64_t v)
{
    field(w, f);
    if (msgpack_pack_int64(&w->pk, v))
        w->failed = true;
}

void gkv_wr_bin(gkv_wr_t *w, unsigned f, const void *p, size_t len)
{
    field(w, f);
    if (msgpack_pack_bin(&w->pk, len) || msgpack_pack_bin_body(&w->pk, p, len))
        w->failed = true;
}

void gkv_wr_str(gkv_wr_t *w, unsigned f, const char *s)
{
    size_t len = strlen(s);
    field(w, f);
    if (msgpack_pack_str(&w->pk, len) || msgpack_pack_str_body(&w->pk, s, len))
        w->failed = true;
}

size_t gkv_wr_array_begin(gkv_wr_t *w, unsigned f)
{
    static const uint8_t a32[5] = {0xdd, 0, 0, 0, 0};
    field(w, f);
    size_t pos = w->sb.size;
    put(w, a32, sizeof(a32));
    return pos;
}

static void patch32(gkv_wr_t *w, size_t pos, uint32_t n)
{
    if (!w->failed)
        gkv_frame_put_len((uint8_t *)w->sb.data + pos, n);
}

void gkv_wr_array_end(gkv_wr_t *w, size_t pos, uint32_t n)
{
    patch32(w, pos + 1, n);
}

size_t gkv_wr_frame_size(const gkv_wr_t *w)
{
    return w->sb.size - w->frame_start - GKV_FRAME_PREFIX;
}

int gkv_wr_end(gkv_wr_t *w)
{
    if (w->failed)
        return GKV_ENOMEM;
    size_t hlen = gkv_wr_frame_size(w);
    if (hlen > GKV_MAX_HEADER) {
        w->sb.size = w->frame_start;
        return GKV_ETOOBIG;
    }
    patch32(w, w->frame_start, (uint32_t)hlen);
    patch32(w, w->frame_start + GKV_FRAME_PREFIX + 1, w->fields);
    return 0;
}

void gkv_wr_ok(gkv_wr_t *w, uint64_t id)
{
    gkv_wr_begin(w);
    gkv_wr_uint(w, GKV_F_ID, id);
    gkv_wr_int(w, GKV_F_STATUS, 0);
}

void gkv_wr_error(gkv_wr_t *w, uint64_t id, int code, const char *msg)
{
    gkv_wr_begin(w);
    gkv_wr_uint(w, GKV_F_ID, id);
    gkv_wr_int(w, GKV_F_STATUS, code);
    gkv_wr_str(w, GKV_F_MESSAGE, msg ? msg : gkv_strerror(code));
    gkv_wr_end(w);
}
