/* cmd_keys.c: the keyspace: EXISTS, DEL, LIST (prefix, directories, cursor), GETSIZE. */
#include "handlers.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "error.h"

/* Calls fn on each key of a KEYS array, or on the single KEY field. */
static int each_key(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep,
                    int (*fn)(gkv_cmd_ctx_t *, gkv_slice_t), uint64_t *count)
{
    gkv_slice_t k;
    *count = 0;
    if (req->has & GKV_HAS_KEYS) {
        if (req->nkeys == 0)
            return gkv_reply_fail(rep, GKV_EINVAL, "keys array is empty");
        if (req->nkeys > GKV_MAX_BATCH)
            return gkv_reply_fail(rep, GKV_ETOOBIG, "%u keys exceed the batch limit %u", req->nkeys,
                                  GKV_MAX_BATCH);
        gkv_reader_t it;
        uint32_t n;
        for (int pass = 0; pass < 2; pass++) { /* check every key before acting on any */
            gkv_read_init(&it, req->keys.p, req->keys.len);
            gkv_read_array(&it, &n);
            for (uint32_t i = 0; i < n; i++) {
                gkv_req_keys_next(&it, &k);
                if (pass == 0) {
                    int rc = gkv_check_key(ctx, k, rep);
                    if (rc)
                        return rc;
                } else {
                    *count += (uint64_t)fn(ctx, k);
                }
            }
        }
        return 0;
    }
    if (!(req->has & GKV_HAS_KEY))
        return gkv_reply_fail(rep, GKV_EINVAL, "needs a key or a keys array");
    int rc = gkv_check_key(ctx, req->key, rep);
    if (rc)
        return rc;
    *count = (uint64_t)fn(ctx, req->key);
    return 0;
}

static int key_exists(gkv_cmd_ctx_t *ctx, gkv_slice_t k)
{
    return gkv_store_find(ctx->store, k.p, k.len) != NULL;
}

static int key_delete(gkv_cmd_ctx_t *ctx, gkv_slice_t k)
{
    return gkv_store_del(ctx->store, k.p, k.len);
}

int gkv_cmd_exists(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    uint64_t count;
    int rc = each_key(ctx, req, rep, key_exists, &count);
    return rc ? rc : gkv_reply_count(rep, req->id, count);
}

static bool has_prefix_node(const gkv_inode_t *n, gkv_slice_t prefix);

/* DEL of a prefix: the first GKV_SIZE_WALK keys under it go; a cursor in the reply says that
 * more may be left (the client asks again: the keys deleted are gone, so the next request
 * starts over at the prefix). */
static int del_prefix(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    if (req->prefix.len > ctx->lim.max_key)
        return gkv_reply_fail(rep, GKV_ETOOBIG, "prefix longer than max-key-size");
    gkv_store_t *st = ctx->store;
    const gkv_inode_t *n = gkv_index_seek(st->ix, req->prefix.p, req->prefix.len);
    uint64_t count = 0;
    bool more = false;
    for (uint32_t walked = 0; n && has_prefix_node(n, req->prefix); walked++) {
        if (walked == GKV_SIZE_WALK) {
            more = true;
            break;
        }
        const gkv_inode_t *next = gkv_index_next(st->ix, n);
        size_t kl;
        const uint8_t *k = gkv_inode_key(n, &kl);
        count += (uint64_t)gkv_store_del(st, k, kl); /* an expired key goes uncounted */
        n = next;
    }
    gkv_wr_t *w = rep->wr;
    gkv_reply_ok(w, req->id);
    gkv_wr_uint(w, GKV_F_COUNT, count);
    if (more)
        gkv_wr_bin(w, GKV_F_CURSOR, req->prefix.p, req->prefix.len);
    return gkv_wr_end(w);
}

int gkv_cmd_del(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    if (req->has & GKV_HAS_PREFIX) {
        if (req->has & (GKV_HAS_KEY | GKV_HAS_KEYS))
            return gkv_reply_fail(rep, GKV_EINVAL, "DEL takes keys or a prefix, not both");
        return del_prefix(ctx, req, rep);
    }
    uint64_t count;
    int rc = each_key(ctx, req, rep, key_delete, &count);
    return rc ? rc : gkv_reply_count(rep, req->id, count);
}

static bool has_prefix(const uint8_t *k, size_t klen, gkv_slice_t prefix)
{
    return klen >= prefix.len && memcmp(k, prefix.p, prefix.len) == 0;
}

static bool has_prefix_node(const gkv_inode_t *n, gkv_slice_t prefix)
{
    size_t kl;
    const uint8_t *k = gkv_inode_key(n, &kl);
    return has_prefix(k, kl, prefix);
}

/* The first key after cursor (a key counted or listed last; it may be gone by now). */
static const gkv_inode_t *seek_after(const gkv_index_t *ix, gkv_slice_t cursor)
{
    const gkv_inode_t *n = gkv_index_seek(ix, cursor.p, cursor.len);
    size_t kl;
    const uint8_t *k = n ? gkv_inode_key(n, &kl) : NULL;
    if (k && kl == cursor.len && memcmp(k, cursor.p, kl) == 0)
        n = gkv_index_next(ix, n);
    return n;
}

/* The smallest key greater than every key starting with s (s has len bytes, buf holds len):
 * drop trailing 0xff bytes and add one to the last byte. Returns the new length, 0 if none. */
static size_t prefix_successor(const uint8_t *s, size_t len, uint8_t *buf)
{
    memcpy(buf, s, len);
    while (len && buf[len - 1] == 0xff)
        len--;
    if (len)
        buf[len - 1]++;
    return len;
}

int gkv_cmd_list(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    gkv_slice_t prefix = req->prefix;
    if (!(req->has & GKV_HAS_PREFIX))
        prefix = (gkv_slice_t){(const uint8_t *)"", 0};
    if (prefix.len > ctx->lim.max_key || req->cursor.len > ctx->lim.max_key)
        return gkv_reply_fail(rep, GKV_ETOOBIG, "prefix or cursor longer than max-key-size");
    if ((req->has & GKV_HAS_DELIM) && req->delim.len > 1)
        return gkv_reply_fail(rep, GKV_EINVAL, "the delimiter is a single byte");
    int delim = (req->has & GKV_HAS_DELIM) && req->delim.len == 1 ? req->delim.p[0] : -1;
    uint64_t limit = req->limit ? req->limit : 1000;
    bool with_gpu = req->flags & GKV_LIST_GPU;
    bool with_tier = with_gpu && (req->flags & GKV_LIST_TIER);
    if (limit > GKV_MAX_LIST)
        return gkv_reply_fail(rep, GKV_ETOOBIG, "limit %" PRIu64 " exceeds %u", limit,
                              GKV_MAX_LIST);
    uint8_t *succ = malloc(ctx->lim.max_key + 1);
    if (!succ)
        return GKV_ENOMEM;
    gkv_store_reap(ctx->store, GKV_REAP_BEFORE_WALK); /* keys past their deadline go first */
    const gkv_inode_t *n;
    if (req->cursor.len) {
        bool dir_cursor = delim >= 0 && req->cursor.p[req->cursor.len - 1] == delim;
        if (dir_cursor) {
            size_t sl = prefix_successor(req->cursor.p, req->cursor.len, succ);
            n = sl ? gkv_index_seek(ctx->store->ix, succ, sl) : NULL;
        } else {
            n = seek_after(ctx->store->ix, req->cursor);
        }
    } else {
        n = gkv_index_seek(ctx->store->ix, prefix.p, prefix.len);
    }
    gkv_wr_t *w = rep->wr;
    gkv_reply_ok(w, req->id);
    size_t epos = gkv_wr_array_begin(w, GKV_F_ENTRIES);
    uint32_t nentries = 0, ndirs = 0;
    /* Directories are collected in a second array; remember them in the first pass. */
    msgpack_sbuffer dirs;
    msgpack_packer dpk;
    msgpack_sbuffer_init(&dirs);
    msgpack_packer_init(&dpk, &dirs, msgpack_sbuffer_write);
    const uint8_t *last = NULL;
    size_t last_len = 0;
    bool more = false;
    while (n) {
        size_t kl;
        const uint8_t *k = gkv_inode_key(n, &kl);
        if (!has_prefix(k, kl, prefix))
            break;
        if (nentries + ndirs == limit || gkv_wr_frame_size(w) + dirs.size > GKV_MAX_HEADER / 2) {
            more = true;
            break;
        }
        const uint8_t *d = delim >= 0 ? memchr(k + prefix.len, delim, kl - prefix.len) : NULL;
        if (d) {
            size_t dl = (size_t)(d - k) + 1;
            msgpack_pack_bin(&dpk, dl);
            msgpack_pack_bin_body(&dpk, k, dl);
            ndirs++;
            last = k;
            last_len = dl;
            size_t sl = prefix_successor(k, dl, succ);
            n = sl ? gkv_index_seek(ctx->store->ix, succ, sl) : NULL;
            continue;
        }
        gkv_entry_t *e = gkv_inode_val(ctx->store->ix, n);
        if (!gkv_store_alive(ctx->store, e)) { /* due, not reaped yet: already gone */
            n = gkv_index_next(ctx->store->ix, n);
            continue;
        }
        msgpack_pack_array(&w->pk, with_tier ? 4 : with_gpu ? 3 : 2);
        msgpack_pack_bin(&w->pk, kl);
        msgpack_pack_bin_body(&w->pk, k, kl);
        msgpack_pack_uint64(&w->pk, e->size);
        if (with_gpu)
            msgpack_pack_uint8(&w->pk, (uint8_t)gkv_store_gpu(e));
        if (with_tier)
            msgpack_pack_uint8(&w->pk, (uint8_t)gkv_store_tier(e));
        nentries++;
        last = k;
        last_len = kl;
        n = gkv_index_next(ctx->store->ix, n);
    }
    gkv_wr_array_end(w, epos, nentries);
    size_t dpos = gkv_wr_array_begin(w, GKV_F_DIRS);
    if (msgpack_sbuffer_write(&w->sb, dirs.data, dirs.size))
        w->failed = true;
    gkv_wr_array_end(w, dpos, ndirs);
    if (more)
        gkv_wr_bin(w, GKV_F_CURSOR, last, last_len);
    msgpack_sbuffer_destroy(&dirs);
    free(succ);
    return gkv_wr_end(w);
}

int gkv_cmd_getsize(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    gkv_wr_t *w = rep->wr;
    if (req->has & GKV_HAS_KEY) {
        int rc = gkv_check_key(ctx, req->key, rep);
        if (rc)
            return rc;
        gkv_entry_t *e = gkv_store_find(ctx->store, req->key.p, req->key.len);
        if (!e)
            return GKV_ENOTFOUND;
        gkv_reply_ok(w, req->id);
        gkv_wr_uint(w, GKV_F_SIZE, e->size);
        gkv_wr_uint(w, GKV_F_GPU, gkv_store_gpu(e));
        if (gkv_store_tier(e))
            gkv_wr_uint(w, GKV_F_TIER, gkv_store_tier(e));
        gkv_wr_value_version(w, ctx->store, e, 0);
        return gkv_wr_end(w);
    }
    if (!(req->has & GKV_HAS_PREFIX))
        return gkv_reply_fail(rep, GKV_EINVAL, "GETSIZE needs a key or a prefix");
    if (req->prefix.len > ctx->lim.max_key || req->cursor.len > ctx->lim.max_key)
        return gkv_reply_fail(rep, GKV_ETOOBIG, "prefix or cursor longer than max-key-size");
    uint64_t bytes = 0, count = 0;
    const gkv_inode_t *n = NULL, *last = NULL;
    gkv_store_t *st = ctx->store;
    gkv_store_reap(st, GKV_REAP_BEFORE_WALK);
    uint64_t due = gkv_store_next_deadline(st);
    if (req->prefix.len == 0 && req->cursor.len == 0 && (!due || due > st->now_ms)) {
        /* Every key, none past its deadline: the store keeps the sums. */
        bytes = ctx->store->linked_bytes;
        count = gkv_index_count(ctx->store->ix);
    } else if (req->cursor.len) {
        n = seek_after(ctx->store->ix, req->cursor);
    } else {
        n = gkv_index_seek(ctx->store->ix, req->prefix.p, req->prefix.len);
    }
    /* At most GKV_SIZE_WALK keys per request, so that one request never holds the loop for
     * long; the cursor (the last key counted) lets the client go on. */
    bool more = false;
    for (uint32_t walked = 0; n && has_prefix_node(n, req->prefix);
         n = gkv_index_next(ctx->store->ix, n)) {
        if (walked++ == GKV_SIZE_WALK) {
            more = true;
            break;
        }
        const gkv_entry_t *e = gkv_inode_val(ctx->store->ix, n);
        last = n;
        if (!gkv_store_alive(st, e))
            continue;
        bytes += e->size;
        count++;
    }
    gkv_reply_ok(w, req->id);
    gkv_wr_uint(w, GKV_F_BYTES, bytes);
    gkv_wr_uint(w, GKV_F_COUNT, count);
    if (more) {
        size_t kl;
        const uint8_t *k = gkv_inode_key(last, &kl);
        gkv_wr_bin(w, GKV_F_CURSOR, k, kl);
    }
    return gkv_wr_end(w);
}

int gkv_cmd_flush(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    uint64_t count = gkv_index_count(ctx->store->ix);
    gkv_store_flush(ctx->store);
    return gkv_reply_count(rep, req->id, count);
}
