/* cmd.c: the command table and every handler. */
#include "cmd.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "error.h"
#include "log.h"
#include "version.h"

static int fail(gkv_reply_t *rep, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(gkv_reply_t *rep, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rep->msgbuf, sizeof(rep->msgbuf), fmt, ap);
    va_end(ap);
    rep->msg = rep->msgbuf;
    return code;
}

void gkv_reply_error(gkv_wr_t *wr, uint64_t id, int code, const char *msg)
{
    gkv_wr_begin(wr);
    gkv_wr_uint(wr, GKV_F_ID, id);
    gkv_wr_int(wr, GKV_F_STATUS, code);
    gkv_wr_str(wr, GKV_F_MESSAGE, msg ? msg : gkv_strerror(code));
    gkv_wr_end(wr);
}

void gkv_reply_ok(gkv_wr_t *wr, uint64_t id)
{
    gkv_wr_begin(wr);
    gkv_wr_uint(wr, GKV_F_ID, id);
    gkv_wr_int(wr, GKV_F_STATUS, 0);
}

void gkv_reply_release(gkv_server_t *srv, gkv_reply_t *rep)
{
    for (uint32_t i = 0; i < rep->nsegs; i++)
        gkv_store_unref(&srv->store, rep->segs[i].entry);
    if (rep->segs != &rep->one)
        free(rep->segs);
    rep->segs = NULL;
    rep->nsegs = 0;
    if (rep->recv)
        gkv_store_unref(&srv->store, rep->recv);
    rep->recv = NULL;
}

static int check_key(gkv_server_t *srv, gkv_slice_t key, gkv_reply_t *rep)
{
    if (key.len == 0)
        return fail(rep, GKV_EINVAL, "keys must be at least 1 byte");
    if (key.len > srv->cfg.max_key)
        return fail(rep, GKV_ETOOBIG, "key of %u bytes exceeds max-key-size %" PRIu64, key.len,
                    srv->cfg.max_key);
    return 0;
}

/* Turns a requested range into (off, len) within a value of size bytes. A suffix takes the last
 * bytes; otherwise length 0 means "to the end" and a length past the end is clamped. */
static int resolve_range(uint64_t size, uint64_t offset, uint64_t length, uint64_t suffix,
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

/* The entry under the request's key and the byte range it asks for (GET, MAP). */
static int lookup_range(gkv_server_t *srv, const gkv_request_t *req, gkv_reply_t *rep,
                        gkv_entry_t **e, uint64_t *off, uint64_t *len)
{
    *e = gkv_store_get(&srv->store, req->key.p, req->key.len);
    if (!*e)
        return GKV_ENOTFOUND;
    if (resolve_range((*e)->size, req->offset, req->length, req->suffix, off, len))
        return fail(rep, GKV_ERANGE, "offset %" PRIu64 " is past the end of a %" PRIu64
                    "-byte value", req->offset, (*e)->size);
    return 0;
}

static void add_segment(gkv_reply_t *rep, gkv_entry_t *e, uint64_t off, uint64_t len)
{
    gkv_store_ref(e);
    rep->segs[rep->nsegs++] = (gkv_segment_t){e, off, len};
}

static int cmd_hello(gkv_server_t *srv, const gkv_request_t *req, gkv_reply_t *rep)
{
    if (req->version && req->version != GKV_PROTOCOL_VERSION)
        return fail(rep, GKV_EVERSION, "protocol version %" PRIu64 " not supported (server: %d)",
                    req->version, GKV_PROTOCOL_VERSION);
    gkv_wr_t *w = rep->wr;
    gkv_reply_ok(w, req->id);
    gkv_wr_uint(w, GKV_F_VERSION, GKV_PROTOCOL_VERSION);
    gkv_wr_str(w, GKV_F_SERVER, GKV_VERSION_STRING);
    gkv_wr_str(w, GKV_F_BACKEND, srv->be->name);
    gkv_wr_int(w, GKV_F_DEVICE, srv->be->device);
    size_t pos = gkv_wr_array_begin(w, GKV_F_GPUS);
    uint32_t n = 0;
    if (srv->be->gpu_uuid[0]) {
        size_t l = strlen(srv->be->gpu_uuid);
        msgpack_pack_str(&w->pk, l);
        msgpack_pack_str_body(&w->pk, srv->be->gpu_uuid, l);
        n++;
    }
    gkv_wr_array_end(w, pos, n);
    char why[192] = "";
    if (!rep->local)
        snprintf(why, sizeof(why), "zero-copy needs a Unix socket connection on the same machine");
    else if (!req->zero_copy)
        snprintf(why, sizeof(why), "not asked for (HELLO zero_copy = 1)");
    else if (!rep->first)
        snprintf(why, sizeof(why), "zero-copy must be asked for in the connection's first request");
    else if (srv->be->host_visible && !srv->cfg.host_zero_copy)
        snprintf(why, sizeof(why), "the host backend would share its whole arena; start gpukvd "
                                   "with --host-zero-copy yes to allow it");
    else if (srv->be->ops->share(srv->be, &rep->fd, why, sizeof(why)) != 0)
        rep->fd = -1;
    gkv_wr_str(w, GKV_F_ZC, rep->fd >= 0 ? srv->be->zc_mechanism : "none");
    gkv_wr_str(w, GKV_F_ZC_WHY, why);
    if (rep->fd >= 0 && srv->be->host_visible)
        gkv_wr_uint(w, GKV_F_ARENA_SIZE, srv->be->capacity);
    gkv_wr_uint(w, GKV_F_MAX_KEY, srv->cfg.max_key);
    gkv_wr_uint(w, GKV_F_MAX_VALUE, srv->cfg.max_value);
    gkv_wr_uint(w, GKV_F_MAX_META, GKV_MAX_META);
    gkv_wr_uint(w, GKV_F_MAX_HEADER, GKV_MAX_HEADER);
    return gkv_wr_end(w);
}

static int cmd_ping(gkv_server_t *srv, const gkv_request_t *req, gkv_reply_t *rep)
{
    (void)srv;
    gkv_reply_ok(rep->wr, req->id);
    return gkv_wr_end(rep->wr);
}

/* The request's metadata within GKV_MAX_META (SET, CREATE, SEAL). */
static int check_meta(const gkv_request_t *req, gkv_reply_t *rep)
{
    if (req->meta.len > GKV_MAX_META)
        return fail(rep, GKV_ETOOBIG, "metadata of %u bytes exceeds %u", req->meta.len,
                    GKV_MAX_META);
    return 0;
}

/* Checks a new value of `size` bytes for SET or CREATE: flags, size and metadata limits, and
 * NX/XX against the key's current state (checked again when the value is published: another
 * client may change the key meanwhile). */
static int check_new_value(gkv_server_t *srv, const gkv_request_t *req, uint64_t size,
                           gkv_reply_t *rep)
{
    if (req->flags & ~(uint64_t)(GKV_SET_NX | GKV_SET_XX))
        return fail(rep, GKV_EINVAL, "unknown flags 0x%" PRIx64, req->flags);
    if ((req->flags & GKV_SET_NX) && (req->flags & GKV_SET_XX))
        return fail(rep, GKV_EINVAL, "NX and XX exclude each other");
    if (size > srv->cfg.max_value)
        return fail(rep, GKV_ETOOBIG, "value of %" PRIu64 " bytes exceeds max-value-size %" PRIu64,
                    size, srv->cfg.max_value);
    int rc = check_meta(req, rep);
    if (rc)
        return rc;
    bool exists = gkv_index_get(srv->store.ix, req->key.p, req->key.len) != NULL;
    if ((req->flags & GKV_SET_NX) && exists)
        return fail(rep, GKV_EEXISTS, "key exists (NX)");
    if ((req->flags & GKV_SET_XX) && !exists)
        return fail(rep, GKV_ENOTFOUND, "key does not exist (XX)");
    return 0;
}

/* Makes the entry for a new value (lane -1: for CREATE), with OOM explained. */
static int new_entry(gkv_server_t *srv, const gkv_request_t *req, uint64_t size, int lane,
                     gkv_reply_t *rep, gkv_entry_t **out)
{
    int rc = gkv_store_entry_new(&srv->store, req->key.p, req->key.len, size, req->meta.p,
                                 req->meta.len, lane, out);
    if (rc == GKV_EOOM)
        return fail(rep, rc, "value of %" PRIu64 " bytes does not fit: %" PRIu64 " of %" PRIu64
                    " bytes used", size, srv->store.used, srv->store.limit);
    return rc;
}

static int cmd_set(gkv_server_t *srv, const gkv_request_t *req, gkv_reply_t *rep)
{
    int rc = check_new_value(srv, req, req->payload_len, rep);
    /* Allocated in stream order on the lane that will copy into it. */
    if (rc || (rc = new_entry(srv, req, req->payload_len, rep->lane, rep, &rep->recv)))
        return rc;
    rep->recv_flags = (unsigned)req->flags;
    return 0;
}

int gkv_cmd_set_commit(gkv_server_t *srv, uint64_t id, gkv_entry_t *e, unsigned flags,
                       gkv_wr_t *wr, gkv_entry_t **holder)
{
    int rc = gkv_store_publish(&srv->store, e, flags, holder);
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

static int cmd_get(gkv_server_t *srv, const gkv_request_t *req, gkv_reply_t *rep)
{
    gkv_entry_t *e;
    uint64_t off = 0, len = 0;
    int rc = lookup_range(srv, req, rep, &e, &off, &len);
    if (rc)
        return rc;
    gkv_wr_t *w = rep->wr;
    gkv_reply_ok(w, req->id);
    gkv_wr_uint(w, GKV_F_SIZE, e->size);
    gkv_wr_uint(w, GKV_F_OFFSET, off);
    gkv_wr_uint(w, GKV_F_PAYLOAD, len);
    uint32_t meta_len;
    const uint8_t *meta = gkv_entry_meta(e, &meta_len);
    if (meta_len)
        gkv_wr_bin(w, GKV_F_META, meta, meta_len);
    rc = gkv_wr_end(w);
    if (rc)
        return rc;
    rep->segs = &rep->one;
    if (len)
        add_segment(rep, e, off, len);
    return 0;
}

static int cmd_mget(gkv_server_t *srv, const gkv_request_t *req, gkv_reply_t *rep)
{
    if (!(req->has & GKV_HAS_ITEMS) || req->nitems == 0)
        return fail(rep, GKV_EINVAL, "MGET needs a non-empty items array");
    if (req->nitems > GKV_MAX_BATCH)
        return fail(rep, GKV_ETOOBIG, "MGET of %u items exceeds %u", req->nitems, GKV_MAX_BATCH);
    gkv_mpr_t it;
    gkv_item_t item;
    uint32_t n;
    gkv_mpr_init(&it, req->items.p, req->items.len);
    gkv_mpr_array(&it, &n);
    for (uint32_t i = 0; i < n; i++) {
        gkv_req_items_next(&it, &item);
        int rc = check_key(srv, item.key, rep);
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
    gkv_mpr_init(&it, req->items.p, req->items.len);
    gkv_mpr_array(&it, &n);
    for (uint32_t i = 0; i < n; i++) {
        gkv_req_items_next(&it, &item);
        gkv_entry_t *e = gkv_store_get(&srv->store, item.key.p, item.key.len);
        int status = e ? 0 : GKV_ENOTFOUND;
        uint64_t off = 0, len = 0;
        if (e)
            status = resolve_range(e->size, item.offset, item.length, item.suffix, &off, &len);
        msgpack_pack_array(&w->pk, 3);
        msgpack_pack_int(&w->pk, status);
        msgpack_pack_uint64(&w->pk, status ? 0 : len);
        msgpack_pack_uint64(&w->pk, e ? e->size : 0);
        if (status == 0 && len) {
            add_segment(rep, e, off, len);
            total += len;
        }
    }
    gkv_wr_array_end(w, pos, n);
    gkv_wr_uint(w, GKV_F_PAYLOAD, total);
    return gkv_wr_end(w);
}

/* Calls fn on each key of a KEYS array, or on the single KEY field. */
static int each_key(gkv_server_t *srv, const gkv_request_t *req, gkv_reply_t *rep,
                    int (*fn)(gkv_server_t *, gkv_slice_t), uint64_t *count)
{
    gkv_slice_t k;
    *count = 0;
    if (req->has & GKV_HAS_KEYS) {
        if (req->nkeys == 0)
            return fail(rep, GKV_EINVAL, "keys array is empty");
        if (req->nkeys > GKV_MAX_BATCH)
            return fail(rep, GKV_ETOOBIG, "%u keys exceed the batch limit %u", req->nkeys,
                        GKV_MAX_BATCH);
        gkv_mpr_t it;
        uint32_t n;
        for (int pass = 0; pass < 2; pass++) { /* check every key before acting on any */
            gkv_mpr_init(&it, req->keys.p, req->keys.len);
            gkv_mpr_array(&it, &n);
            for (uint32_t i = 0; i < n; i++) {
                gkv_req_keys_next(&it, &k);
                if (pass == 0) {
                    int rc = check_key(srv, k, rep);
                    if (rc)
                        return rc;
                } else {
                    *count += (uint64_t)fn(srv, k);
                }
            }
        }
        return 0;
    }
    if (!(req->has & GKV_HAS_KEY))
        return fail(rep, GKV_EINVAL, "needs a key or a keys array");
    int rc = check_key(srv, req->key, rep);
    if (rc)
        return rc;
    *count = (uint64_t)fn(srv, req->key);
    return 0;
}

static int key_exists(gkv_server_t *srv, gkv_slice_t k)
{
    return gkv_index_get(srv->store.ix, k.p, k.len) != NULL;
}

static int key_delete(gkv_server_t *srv, gkv_slice_t k)
{
    return gkv_store_del(&srv->store, k.p, k.len);
}

static int reply_count(gkv_reply_t *rep, uint64_t id, uint64_t count)
{
    gkv_reply_ok(rep->wr, id);
    gkv_wr_uint(rep->wr, GKV_F_COUNT, count);
    return gkv_wr_end(rep->wr);
}

static int cmd_exists(gkv_server_t *srv, const gkv_request_t *req, gkv_reply_t *rep)
{
    uint64_t count;
    int rc = each_key(srv, req, rep, key_exists, &count);
    return rc ? rc : reply_count(rep, req->id, count);
}

static int cmd_del(gkv_server_t *srv, const gkv_request_t *req, gkv_reply_t *rep)
{
    uint64_t count;
    int rc = each_key(srv, req, rep, key_delete, &count);
    return rc ? rc : reply_count(rep, req->id, count);
}

static bool has_prefix(const uint8_t *k, size_t klen, gkv_slice_t prefix)
{
    return klen >= prefix.len && memcmp(k, prefix.p, prefix.len) == 0;
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

static int cmd_list(gkv_server_t *srv, const gkv_request_t *req, gkv_reply_t *rep)
{
    gkv_slice_t prefix = req->prefix;
    if (!(req->has & GKV_HAS_PREFIX))
        prefix = (gkv_slice_t){(const uint8_t *)"", 0};
    if (prefix.len > srv->cfg.max_key || req->cursor.len > srv->cfg.max_key)
        return fail(rep, GKV_ETOOBIG, "prefix or cursor longer than max-key-size");
    if ((req->has & GKV_HAS_DELIM) && req->delim.len > 1)
        return fail(rep, GKV_EINVAL, "the delimiter is a single byte");
    int delim = (req->has & GKV_HAS_DELIM) && req->delim.len == 1 ? req->delim.p[0] : -1;
    uint64_t limit = req->limit ? req->limit : 1000;
    if (limit > GKV_MAX_LIST)
        return fail(rep, GKV_ETOOBIG, "limit %" PRIu64 " exceeds %u", limit, GKV_MAX_LIST);
    uint8_t *succ = malloc(srv->cfg.max_key + 1);
    if (!succ)
        return GKV_ENOMEM;
    const gkv_inode_t *n;
    if (req->cursor.len) {
        bool dir_cursor = delim >= 0 && req->cursor.p[req->cursor.len - 1] == delim;
        if (dir_cursor) {
            size_t sl = prefix_successor(req->cursor.p, req->cursor.len, succ);
            n = sl ? gkv_index_seek(srv->store.ix, succ, sl) : NULL;
        } else {
            n = gkv_index_seek(srv->store.ix, req->cursor.p, req->cursor.len);
            size_t kl;
            const uint8_t *k = n ? gkv_inode_key(n, &kl) : NULL;
            if (k && kl == req->cursor.len && memcmp(k, req->cursor.p, kl) == 0)
                n = gkv_index_next(n);
        }
    } else {
        n = gkv_index_seek(srv->store.ix, prefix.p, prefix.len);
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
        if (nentries + ndirs == limit ||
            gkv_wr_frame_size(w) + dirs.size > GKV_MAX_HEADER / 2) {
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
            n = sl ? gkv_index_seek(srv->store.ix, succ, sl) : NULL;
            continue;
        }
        gkv_entry_t *e = gkv_inode_val(srv->store.ix, n);
        msgpack_pack_array(&w->pk, 2);
        msgpack_pack_bin(&w->pk, kl);
        msgpack_pack_bin_body(&w->pk, k, kl);
        msgpack_pack_uint64(&w->pk, e->size);
        nentries++;
        last = k;
        last_len = kl;
        n = gkv_index_next(n);
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

static int cmd_getsize(gkv_server_t *srv, const gkv_request_t *req, gkv_reply_t *rep)
{
    gkv_wr_t *w = rep->wr;
    if (req->has & GKV_HAS_KEY) {
        int rc = check_key(srv, req->key, rep);
        if (rc)
            return rc;
        gkv_entry_t *e = gkv_index_get(srv->store.ix, req->key.p, req->key.len);
        if (!e)
            return GKV_ENOTFOUND;
        gkv_reply_ok(w, req->id);
        gkv_wr_uint(w, GKV_F_SIZE, e->size);
        return gkv_wr_end(w);
    }
    if (!(req->has & GKV_HAS_PREFIX))
        return fail(rep, GKV_EINVAL, "GETSIZE needs a key or a prefix");
    uint64_t bytes = 0, count = 0;
    for (const gkv_inode_t *n = gkv_index_seek(srv->store.ix, req->prefix.p, req->prefix.len); n;
         n = gkv_index_next(n)) {
        size_t kl;
        const uint8_t *k = gkv_inode_key(n, &kl);
        if (!has_prefix(k, kl, req->prefix))
            break;
        bytes += ((gkv_entry_t *)gkv_inode_val(srv->store.ix, n))->size;
        count++;
    }
    gkv_reply_ok(w, req->id);
    gkv_wr_uint(w, GKV_F_BYTES, bytes);
    gkv_wr_uint(w, GKV_F_COUNT, count);
    return gkv_wr_end(w);
}

static int cmd_flush(gkv_server_t *srv, const gkv_request_t *req, gkv_reply_t *rep)
{
    uint64_t count = gkv_index_count(srv->store.ix);
    gkv_store_flush(&srv->store);
    return reply_count(rep, req->id, count);
}

static int cmd_info(gkv_server_t *srv, const gkv_request_t *req, gkv_reply_t *rep)
{
    char text[4096];
    const gkv_store_t *st = &srv->store;
    const gkv_server_stats_t *ss = &srv->stats;
    int n = snprintf(
        text, sizeof(text),
        "# Server\r\nversion:%s\r\nprotocol:%d\r\npid:%d\r\nuptime_seconds:%" PRIu64
        "\r\nbackend:%s\r\ndevice:%d\r\ngpu_name:%s\r\ngpu_uuid:%s\r\nunix_socket:%s\r\n"
        "tcp_listen:%s\r\n"
        "# Clients\r\nconnected_clients:%" PRIu64 "\r\nmaxclients:%" PRIu64 "\r\n"
        "# Memory\r\nused_bytes:%" PRIu64 "\r\nmaxmemory:%" PRIu64 "\r\ndevice_total_bytes:%" PRIu64
        "\r\nkept_export_bytes:%" PRIu64 "\r\nkept_export_reuses:%" PRIu64
        "\r\nindex_host_bytes:%zu\r\nmax_value_size:%" PRIu64 "\r\nmax_key_size:%" PRIu64 "\r\n"
        "# Stats\r\ntotal_connections_received:%" PRIu64 "\r\nrejected_connections:%" PRIu64
        "\r\ntotal_commands_processed:%" PRIu64 "\r\nprotocol_errors:%" PRIu64
        "\r\nkeyspace_hits:%" PRIu64 "\r\nkeyspace_misses:%" PRIu64 "\r\nsets:%" PRIu64
        "\r\ndeletes:%" PRIu64 "\r\noom_errors:%" PRIu64 "\r\nbytes_in:%" PRIu64
        "\r\nbytes_out:%" PRIu64 "\r\ncopy_batches:%" PRIu64 "\r\nbatched_copies:%" PRIu64 "\r\n"
        "# Keyspace\r\nkeys:%zu\r\nentries_alive:%" PRIu64 "\r\n"
        "# Leases\r\nzero_copy:%s\r\nleases:%" PRIu64 "\r\nleased_bytes:%" PRIu64
        "\r\nunsealed_creates:%" PRIu64 "\r\nmax_leases:%" PRIu64 "\r\nmax_leased_bytes:%" PRIu64
        "\r\n",
        GKV_VERSION_STRING, GKV_PROTOCOL_VERSION, (int)getpid(),
        gkv_server_uptime_s(srv), srv->be->name, srv->be->device, srv->be->gpu_name,
        srv->be->gpu_uuid, srv->cfg.socket_path, srv->tcp_bound[0] ? srv->tcp_bound : "off",
        srv->nconns, srv->cfg.maxclients, st->used, st->limit, srv->be->device_total,
        srv->be->kept_bytes, srv->be->kept_reuses, gkv_index_memory(st->ix), srv->cfg.max_value,
        srv->cfg.max_key, ss->total_connections,
        ss->rejected_connections, ss->total_commands, ss->protocol_errors, st->stats.hits,
        st->stats.misses, st->stats.sets, st->stats.dels, st->stats.oom_errors, ss->bytes_in,
        ss->bytes_out, srv->batch ? srv->batch->batches : 0, srv->batch ? srv->batch->pieces : 0,
        gkv_index_count(st->ix), st->entries,
        srv->be->host_visible && !srv->cfg.host_zero_copy ? "off" : srv->be->zc_mechanism,
        srv->lease_totals.leases, srv->lease_totals.bytes, srv->lease_totals.creates,
        srv->cfg.max_leases, srv->cfg.max_leased_bytes);
    if (n < 0 || (size_t)n >= sizeof(text))
        return GKV_ENOMEM;
    gkv_wr_t *w = rep->wr;
    gkv_reply_ok(w, req->id);
    gkv_wr_uint(w, GKV_F_PAYLOAD, (uint64_t)n);
    int rc = gkv_wr_end(w);
    if (rc)
        return rc;
    if (msgpack_sbuffer_write(&w->sb, text, (size_t)n))
        return GKV_ENOMEM;
    return 0;
}

/* Zero-copy. */

static int lease_room(gkv_server_t *srv, gkv_reply_t *rep, uint64_t size)
{
    if (rep->leases->count >= srv->cfg.max_leases)
        return fail(rep, GKV_ELEASELIMIT, "this connection holds %" PRIu64 " leases (max-leases)",
                    rep->leases->count);
    if (size > srv->cfg.max_leased_bytes - rep->leases->bytes)
        return fail(rep, GKV_ELEASELIMIT, "this connection has %" PRIu64 " bytes under lease; "
                    "%" PRIu64 " more exceed max-leased-bytes", rep->leases->bytes, size);
    return 0;
}

/* Writes what an importer needs to reach e: export data or arena offset, and the device. The
 * export data is made once per entry (it costs a driver call) and kept with it. */
static int write_export(gkv_server_t *srv, gkv_wr_t *w, gkv_entry_t *e)
{
    if (e->size && !(e->x && e->x->exported)) {
        uint8_t data[GKV_EXPORT_MAX];
        size_t len = 0;
        int rc = srv->be->ops->export_ptr(srv->be, e->mem, e->size, data, sizeof(data), &len);
        if (rc)
            return rc;
        if (!e->x && !(e->x = calloc(1, sizeof(gkv_extras_t))))
            return GKV_ENOMEM;
        e->x->exported = malloc(len ? len : 1);
        if (!e->x->exported)
            return GKV_ENOMEM;
        memcpy(e->x->exported, data, len);
        e->x->exported_len = (uint32_t)len;
    }
    bool have = e->x && e->x->exported;
    gkv_wr_bin(w, GKV_F_EXPORT, have ? e->x->exported : (const uint8_t *)"",
               have ? e->x->exported_len : 0);
    if (srv->be->host_visible)
        gkv_wr_uint(w, GKV_F_ARENA_OFFSET, e->size ? e->mem.v : 0);
    gkv_wr_int(w, GKV_F_DEVICE, srv->be->device);
    return 0;
}

/* A small value carved from a slab shares its memory with other values, which another process
 * must not reach: before its first MAP it moves (a device copy) to memory of its own, published
 * under its key like an overwrite with the same bytes. *e becomes the entry holding it. */
static int own_memory(gkv_server_t *srv, gkv_entry_t **e)
{
    gkv_backend_t *be = srv->be;
    gkv_store_t *st = &srv->store;
    if (!(*e)->size || be->ops->exportable(be, (*e)->mem))
        return 0;
    size_t klen;
    uint32_t meta_len;
    const uint8_t *key = gkv_store_key(st, *e, &klen);
    const uint8_t *meta = gkv_entry_meta(*e, &meta_len);
    gkv_entry_t *n, *holder = NULL;
    int rc = gkv_store_entry_new(st, key, klen, (*e)->size, meta, meta_len, -1, &n);
    if (rc)
        return rc;
    if (!(rc = be->ops->copy_now(be, n->mem, (*e)->mem, (*e)->size)))
        rc = gkv_store_publish(st, n, 0, &holder);
    gkv_store_unref(st, n);
    if (!rc)
        *e = holder;
    return rc;
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

static int cmd_map(gkv_server_t *srv, const gkv_request_t *req, gkv_reply_t *rep)
{
    gkv_entry_t *e;
    uint64_t off = 0, len = 0;
    int rc = lookup_range(srv, req, rep, &e, &off, &len);
    if (rc)
        return rc;
    if (srv->batch)
        gkv_batch_settle(srv->batch); /* the value may have been answered before it was copied */
    if ((rc = own_memory(srv, &e)))
        return rc;
    /* A lease the client still holds on this very value is named again: no lease is added. */
    gkv_lease_t *l = offered_lease(req, rep, e);
    if (!l && (rc = lease_room(srv, rep, e->size)))
        return rc;
    gkv_wr_t *w = rep->wr;
    gkv_reply_ok(w, req->id);
    if ((rc = write_export(srv, w, e)))
        return rc;
    bool added = !l;
    if (added) {
        gkv_store_ref(e);
        if ((rc = gkv_lease_add(rep->leases, e, false, 0, &l))) {
            gkv_store_unref(&srv->store, e);
            return rc;
        }
    }
    gkv_wr_uint(w, GKV_F_LEASE, l->id);
    gkv_wr_uint(w, GKV_F_SIZE, e->size);
    gkv_wr_uint(w, GKV_F_OFFSET, off);
    gkv_wr_uint(w, GKV_F_LENGTH, len);
    uint32_t meta_len;
    const uint8_t *meta = gkv_entry_meta(e, &meta_len);
    if (meta_len)
        gkv_wr_bin(w, GKV_F_META, meta, meta_len);
    if ((rc = gkv_wr_end(w)) && added)
        gkv_lease_drop(rep->leases, &srv->store, l);
    return rc;
}

/* A spare: a MAP lease whose value no key names and nothing else holds (refs == 1: not the
 * index, no other lease, no transfer). No process but the holder's has its memory imported,
 * and none can get it again (MAP and GET find values through keys), so it stays the holder's
 * alone: its memory may take a new value of its key (CREATE offering it, or SEAL of it). */
static bool is_spare(const gkv_lease_t *l)
{
    return !l->writable && l->entry->refs == 1;
}

/* The lease a CREATE request offers for reuse (field lease), when it is this connection's
 * spare of the same key and size; else NULL, and CREATE allocates. */
static gkv_lease_t *reusable_lease(gkv_server_t *srv, const gkv_request_t *req,
                                   gkv_reply_t *rep)
{
    if (!(req->has & GKV_HAS_LEASE) || req->size == 0)
        return NULL;
    gkv_lease_t *l = gkv_lease_find(rep->leases, req->lease);
    if (!l || !is_spare(l) || l->entry->size != req->size)
        return NULL;
    size_t klen;
    const uint8_t *key = gkv_store_key(&srv->store, l->entry, &klen);
    if (klen != req->key.len || memcmp(key, req->key.p, klen) != 0)
        return NULL;
    return l;
}

static int cmd_create(gkv_server_t *srv, const gkv_request_t *req, gkv_reply_t *rep)
{
    if (!(req->has & GKV_HAS_SIZE))
        return fail(rep, GKV_EINVAL, "CREATE needs a size");
    int rc = check_new_value(srv, req, req->size, rep);
    if (rc)
        return rc;
    gkv_wr_t *w = rep->wr;
    gkv_lease_t *l = reusable_lease(srv, req, rep);
    bool reused = l != NULL;
    if (reused) {
        /* The offered lease becomes the writable one, on the same memory: no allocation, no
         * new lease, and the client's import of it stays good. */
        if ((rc = gkv_store_entry_renew(l->entry, req->meta.p, req->meta.len)))
            return rc;
        gkv_lease_rewrite(rep->leases, l, (unsigned)req->flags);
        gkv_reply_ok(w, req->id);
        if ((rc = write_export(srv, w, l->entry))) {
            gkv_lease_keep(rep->leases, &srv->store, l, l->entry);
            return rc;
        }
    } else {
        if ((rc = lease_room(srv, rep, req->size)))
            return rc;
        gkv_entry_t *e;
        uint64_t t0 = uv_hrtime();
        rc = new_entry(srv, req, req->size, -1, rep, &e);
        GKV_DEBUG("CREATE of %" PRIu64 " bytes: allocation took %.1f us", req->size,
                  (double)(uv_hrtime() - t0) / 1e3);
        if (rc)
            return rc;
        gkv_reply_ok(w, req->id);
        if ((rc = write_export(srv, w, e)) ||
            (rc = gkv_lease_add(rep->leases, e, true, (unsigned)req->flags, &l))) {
            gkv_store_unref(&srv->store, e);
            return rc;
        }
    }
    gkv_wr_uint(w, GKV_F_LEASE, l->id);
    gkv_wr_uint(w, GKV_F_SIZE, l->entry->size);
    gkv_wr_uint(w, GKV_F_OFFSET, 0);
    gkv_wr_uint(w, GKV_F_LENGTH, l->entry->size);
    if ((rc = gkv_wr_end(w)) && reused)
        gkv_lease_keep(rep->leases, &srv->store, l, l->entry); /* still the client's spare */
    else if (rc)
        gkv_lease_drop(rep->leases, &srv->store, l);
    return rc;
}

/* The lease a SEAL or ABORT names (field lease), held by this connection. */
static int named_lease(const gkv_request_t *req, gkv_reply_t *rep, gkv_lease_t **out)
{
    if (!(req->has & GKV_HAS_LEASE))
        return fail(rep, GKV_EINVAL, "needs a lease");
    *out = gkv_lease_find(rep->leases, req->lease);
    if (!*out)
        return fail(rep, GKV_ENOLEASE, "lease %" PRIu64 " is not held by this connection",
                    req->lease);
    return 0;
}

static int cmd_seal(gkv_server_t *srv, const gkv_request_t *req, gkv_reply_t *rep)
{
    gkv_lease_t *l = NULL;
    int rc = named_lease(req, rep, &l);
    if (rc)
        return rc;
    if (!l->writable && !is_spare(l))
        return fail(rep, GKV_EINVAL, "lease %" PRIu64 " is a MAP lease on a value others can "
                    "reach: RELEASE it", req->lease);
    if (req->flags & ~(uint64_t)(GKV_SEAL_KEEP | GKV_SET_NX | GKV_SET_XX))
        return fail(rep, GKV_EINVAL, "unknown SEAL flags 0x%" PRIx64, req->flags);
    unsigned flags = l->flags | (unsigned)(req->flags & (GKV_SET_NX | GKV_SET_XX));
    if ((flags & GKV_SET_NX) && (flags & GKV_SET_XX))
        return fail(rep, GKV_EINVAL, "NX and XX exclude each other");
    if ((rc = check_meta(req, rep)))
        return rc;
    /* A spare's metadata is its old value's: the new value has SEAL's (none if absent). */
    if (((req->has & GKV_HAS_META) || !l->writable) &&
        (rc = gkv_store_entry_renew(l->entry, req->meta.p, req->meta.len)))
        return rc;
    gkv_entry_t *holder = NULL;
    rc = gkv_store_publish(&srv->store, l->entry, flags, &holder);
    /* On NX/XX failure the new value is discarded; with keep, the lease stays on it (a spare:
     * the client's next CREATE or SEAL of the key may reuse its memory). */
    if (req->flags & GKV_SEAL_KEEP)
        gkv_lease_keep(rep->leases, &srv->store, l, rc ? l->entry : holder);
    else
        gkv_lease_drop(rep->leases, &srv->store, l);
    if (rc == GKV_EEXISTS)
        return fail(rep, rc, "key exists (NX): the new value was discarded");
    if (rc == GKV_ENOTFOUND)
        return fail(rep, rc, "key does not exist (XX): the new value was discarded");
    if (rc)
        return rc;
    gkv_reply_ok(rep->wr, req->id);
    /* Typically the lease on the value this seal replaced: is it a spare now? */
    gkv_lease_t *s = req->has & GKV_HAS_SPARE ? gkv_lease_find(rep->leases, req->spare) : NULL;
    if (s && is_spare(s))
        gkv_wr_uint(rep->wr, GKV_F_SPARE, s->id);
    return gkv_wr_end(rep->wr);
}

static int cmd_abort(gkv_server_t *srv, const gkv_request_t *req, gkv_reply_t *rep)
{
    gkv_lease_t *l = NULL;
    int rc = named_lease(req, rep, &l);
    if (rc)
        return rc;
    if (!l->writable)
        return fail(rep, GKV_EINVAL, "lease %" PRIu64 " is a MAP lease: RELEASE it", req->lease);
    gkv_lease_drop(rep->leases, &srv->store, l);
    gkv_reply_ok(rep->wr, req->id);
    return gkv_wr_end(rep->wr);
}

static int cmd_release(gkv_server_t *srv, const gkv_request_t *req, gkv_reply_t *rep)
{
    bool batch = req->has & GKV_HAS_LEASES;
    if (batch && (req->nleases == 0 || req->nleases > GKV_MAX_BATCH))
        return fail(rep, GKV_EINVAL, "RELEASE takes 1..%u leases", GKV_MAX_BATCH);
    if (!batch && !(req->has & GKV_HAS_LEASE))
        return fail(rep, GKV_EINVAL, "RELEASE needs a lease or a leases array");
    uint32_t n = batch ? req->nleases : 1, nfound = 0;
    gkv_lease_t **found = malloc(sizeof(*found) * n);
    if (!found)
        return GKV_ENOMEM;
    gkv_mpr_t it;
    uint64_t id = req->lease;
    if (batch) {
        gkv_mpr_init(&it, req->leases.p, req->leases.len);
        gkv_mpr_array(&it, &n);
    }
    /* Check every id before ending any lease, so that a bad batch changes nothing. */
    int rc = 0;
    for (uint32_t i = 0; i < n && !rc; i++) {
        if (batch)
            gkv_mpr_uint(&it, &id);
        gkv_lease_t *l = gkv_lease_find(rep->leases, id);
        if (!l)
            rc = fail(rep, GKV_ENOLEASE, "lease %" PRIu64 " is not held by this connection", id);
        else if (l->writable)
            rc = fail(rep, GKV_EINVAL, "lease %" PRIu64 " is a CREATE lease: SEAL or ABORT it", id);
        else if (l->marked)
            rc = fail(rep, GKV_ENOLEASE, "lease %" PRIu64 " is named twice", id);
        else {
            l->marked = true;
            found[nfound++] = l;
        }
    }
    for (uint32_t i = 0; i < nfound; i++) {
        if (rc)
            found[i]->marked = false;
        else
            gkv_lease_drop(rep->leases, &srv->store, found[i]);
    }
    free(found);
    return rc ? rc : reply_count(rep, req->id, n);
}

static const gkv_handler_fn handlers[GKV_OP_MAX] = {
    [GKV_OP_HELLO] = cmd_hello, [GKV_OP_PING] = cmd_ping,       [GKV_OP_SET] = cmd_set,
    [GKV_OP_GET] = cmd_get,     [GKV_OP_MGET] = cmd_mget,       [GKV_OP_EXISTS] = cmd_exists,
    [GKV_OP_DEL] = cmd_del,     [GKV_OP_LIST] = cmd_list,       [GKV_OP_GETSIZE] = cmd_getsize,
    [GKV_OP_FLUSH] = cmd_flush, [GKV_OP_INFO] = cmd_info,       [GKV_OP_MAP] = cmd_map,
    [GKV_OP_RELEASE] = cmd_release, [GKV_OP_CREATE] = cmd_create, [GKV_OP_SEAL] = cmd_seal,
    [GKV_OP_ABORT] = cmd_abort,
};

static const gkv_command_t commands[GKV_OP_MAX] = {
#define GKV_CMD_ROW(name, num, str, flags, help) [num] = {str, NULL, flags},
    GKV_COMMAND_LIST(GKV_CMD_ROW)
#undef GKV_CMD_ROW
};

const gkv_command_t *gkv_command_lookup(uint64_t op)
{
    if (op == 0 || op >= GKV_OP_MAX || !commands[op].name)
        return NULL;
    return &commands[op];
}

int gkv_dispatch(gkv_server_t *srv, const gkv_request_t *req, gkv_reply_t *rep)
{
    srv->stats.total_commands++;
    const gkv_command_t *cmd = gkv_command_lookup(req->op);
    size_t mark = rep->wr->sb.size;
    int rc;
    rep->msg = NULL;
    if (!cmd)
        rc = fail(rep, GKV_EUNKNOWNCMD, "unknown command %" PRIu64, req->op);
    else if (req->payload_len && !(cmd->flags & GKV_CMD_PAYLOAD))
        rc = fail(rep, GKV_EINVAL, "%s takes no payload", cmd->name);
    else if ((cmd->flags & GKV_CMD_LOCAL) && !rep->zc)
        rc = fail(rep, GKV_ENOTSUP, "%s needs zero-copy: a Unix socket connection whose first "
                  "request was HELLO with zero_copy = 1 (see its zero_copy_why)", cmd->name);
    else if ((cmd->flags & GKV_CMD_KEY) && !(req->has & GKV_HAS_KEY))
        rc = fail(rep, GKV_EINVAL, "%s needs a key", cmd->name);
    else if ((cmd->flags & GKV_CMD_KEY) && (rc = check_key(srv, req->key, rep)) != 0)
        ;
    else
        rc = handlers[req->op](srv, req, rep);
    if (rc < 0) {
        gkv_reply_release(srv, rep);
        rep->wr->sb.size = mark;
        rep->wr->failed = false;
        gkv_reply_error(rep->wr, req->id, rc, rep->msg);
    }
    return rc;
}
