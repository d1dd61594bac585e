/* requests.c: one libgpukv call per command. Each sends one request and reads its response,
 * so the connection is always back in sync when a call returns (or it is marked broken). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client.h"
#include "commands.h"
#include "error.h"

#define FD_CHUNK (1u << 20)

int gkv_ping(gkv_client_t *c)
{
    gkv__cache_flush(c);
    gkv__begin(c, GKV_OP_PING);
    int rc = gkv__send(c, NULL, 0);
    return rc ? rc : gkv__recv(c);
}

int gkv__set_begin(gkv_client_t *c, const void *key, size_t klen, uint64_t len,
                   const gkv_set_opts_t *opts)
{
    int rc = gkv__check_key(c, key, klen);
    if (rc)
        return rc;
    if (opts && opts->meta_len > GKV_MAX_META)
        return GKV_ETOOBIG;
    gkv__cache_flush(c);
    gkv__begin(c, GKV_OP_SET);
    gkv_wr_bin(&c->wr, GKV_F_KEY, key, klen);
    gkv_wr_uint(&c->wr, GKV_F_PAYLOAD, len);
    gkv__put_set_opts(c, opts);
    return gkv__send_frame(c);
}

int gkv_set(gkv_client_t *c, const void *key, size_t klen, const void *value, size_t len,
            const gkv_set_opts_t *opts)
{
    int rc = gkv__set_begin(c, key, klen, len, opts);
    if (rc == 0 && len)
        rc = gkv__send_raw(c, value, len);
    return rc ? rc : gkv__recv(c);
}

int gkv_set_from_fd(gkv_client_t *c, const void *key, size_t klen, int fd, uint64_t len,
                    const gkv_set_opts_t *opts)
{
    int rc = gkv__set_begin(c, key, klen, len, opts);
    if (rc)
        return rc;
    uint8_t *buf = malloc(FD_CHUNK);
    if (!buf)
        return gkv__break(c, GKV_ENOMEM);
    uint64_t total = len;
    while (len) {
        size_t want = len < FD_CHUNK ? (size_t)len : FD_CHUNK;
        ssize_t n = read(fd, buf, want);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            /* The server still expects the rest of the payload: the stream cannot recover. */
            free(buf);
            return gkv__break(c, GKV_EIO);
        }
        if ((rc = gkv__send_raw(c, buf, (size_t)n))) {
            free(buf);
            return rc;
        }
        len -= (uint64_t)n;
        if (c->progress)
            c->progress(c->progress_arg, total - len, total);
    }
    free(buf);
    return gkv__recv(c);
}

int gkv__read_info(gkv_client_t *c, uint64_t length, gkv_value_info_t *info)
{
    free(c->meta);
    c->meta = NULL;
    info->size = c->resp.size;
    info->offset = c->resp.offset;
    info->length = length;
    info->meta = NULL;
    info->meta_len = 0;
    info->gpu = c->resp.gpu > 0 ? (int)c->resp.gpu : 0;
    if (c->resp.has_meta && c->resp.meta.len) {
        c->meta = malloc(c->resp.meta.len);
        if (!c->meta)
            return gkv__break(c, GKV_ENOMEM);
        memcpy(c->meta, c->resp.meta.p, c->resp.meta.len);
        info->meta = c->meta;
        info->meta_len = c->resp.meta.len;
    }
    return 0;
}

/* Sends GET and reads the response header; the payload follows on the socket. */
static int get_begin(gkv_client_t *c, const void *key, size_t klen, const gkv_range_t *range,
                     gkv_value_info_t *info)
{
    int rc = gkv__check_key(c, key, klen);
    if (rc)
        return rc;
    gkv__cache_flush(c);
    gkv__begin(c, GKV_OP_GET);
    gkv__put_key_range(c, key, klen, range);
    if ((rc = gkv__send_waiting(c)))
        return rc;
    return info ? gkv__read_info(c, c->resp.payload_len, info) : 0;
}

int gkv_get(gkv_client_t *c, const void *key, size_t klen, const gkv_range_t *range, void *buf,
            size_t cap, gkv_value_info_t *info)
{
    int rc = get_begin(c, key, klen, range, info);
    if (rc)
        return rc;
    uint64_t len = c->resp.payload_len;
    if (len > cap) {
        rc = gkv__drain(c, len);
        return rc ? rc : GKV_ENOSPACE;
    }
    return gkv__recv_raw(c, buf, (size_t)len);
}

int gkv_get_with(gkv_client_t *c, const void *key, size_t klen, const gkv_range_t *range,
                 gkv_alloc_fn fn, void *arg, gkv_value_info_t *info)
{
    if (!fn)
        return GKV_EINVAL;
    int rc = get_begin(c, key, klen, range, info);
    if (rc)
        return rc;
    uint64_t len = c->resp.payload_len;
    void *buf = fn(arg, 0, len);
    if (!buf) {
        rc = gkv__drain(c, len);
        return rc ? rc : GKV_ENOMEM;
    }
    return gkv__recv_raw(c, buf, (size_t)len);
}

int gkv_get_wait(gkv_client_t *c, const void *key, size_t klen, const gkv_range_t *range,
                 uint32_t wait_ms, void *buf, size_t cap, gkv_value_info_t *info)
{
    if (!wait_ms || wait_ms > GKV_MAX_WAIT_MS)
        return GKV_EINVAL;
    c->wait_ms = wait_ms;
    c->wait_newer = false;
    int rc = gkv_get(c, key, klen, range, buf, cap, info);
    c->wait_ms = 0; /* taken, unless the call failed before sending */
    return rc;
}

int gkv_map_wait(gkv_client_t *c, const void *key, size_t klen, const gkv_range_t *range,
                 uint32_t wait_ms, gkv_mapping_t **out)
{
    if (!wait_ms || wait_ms > GKV_MAX_WAIT_MS)
        return GKV_EINVAL;
    c->wait_ms = wait_ms;
    c->wait_newer = false;
    int rc = gkv_map(c, key, klen, range, out);
    c->wait_ms = 0;
    return rc;
}

/* gkv_alloc_fn for gkv_get_alloc: malloc, keeping the pointer in *arg so a failed receive can
 * free it. */
static void *alloc_heap(void *arg, size_t index, uint64_t len)
{
    (void)index;
    void **out = arg;
    *out = len < SIZE_MAX ? malloc(len ? (size_t)len : 1) : NULL;
    return *out;
}

int gkv_get_alloc(gkv_client_t *c, const void *key, size_t klen, const gkv_range_t *range,
                  void **out, gkv_value_info_t *info)
{
    void *buf = NULL;
    int rc = gkv_get_with(c, key, klen, range, alloc_heap, &buf, info);
    if (rc) {
        free(buf);
        return rc;
    }
    *out = buf;
    return 0;
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return GKV_EIO;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int gkv_get_to_fd(gkv_client_t *c, const void *key, size_t klen, const gkv_range_t *range, int fd,
                  gkv_value_info_t *info)
{
    int rc = get_begin(c, key, klen, range, info);
    if (rc)
        return rc;
    uint64_t len = c->resp.payload_len;
    uint8_t *buf = malloc(FD_CHUNK);
    if (!buf) {
        rc = gkv__drain(c, len);
        return rc ? rc : GKV_ENOMEM;
    }
    int wrc = 0;
    uint64_t total = len;
    while (len) {
        size_t n = len < FD_CHUNK ? (size_t)len : FD_CHUNK;
        if ((rc = gkv__recv_raw(c, buf, n))) {
            free(buf);
            return rc;
        }
        /* After a failed write keep reading, so the connection stays in sync. */
        if (!wrc)
            wrc = write_all(fd, buf, n);
        len -= n;
        if (c->progress)
            c->progress(c->progress_arg, total - len, total);
    }
    free(buf);
    return wrc;
}

/* Sends MGET for n items and reads the results: each item's status and len are set, and its
 * bytes are read into its buf (or into what fn allocates, when fn is not NULL). */
static int mget(gkv_client_t *c, gkv_mget_item_t *items, size_t n, gkv_alloc_fn fn, void *arg)
{
    if (n == 0 || n > GKV_MAX_BATCH)
        return GKV_EINVAL;
    for (size_t i = 0; i < n; i++) {
        int rc = gkv__check_key(c, items[i].key, items[i].klen);
        if (rc)
            return rc;
    }
    gkv__cache_flush(c);
    gkv__begin(c, GKV_OP_MGET);
    size_t pos = gkv_wr_array_begin(&c->wr, GKV_F_ITEMS);
    for (size_t i = 0; i < n; i++) {
        const gkv_range_t *r = &items[i].range;
        msgpack_pack_array(&c->wr.pk, 4);
        msgpack_pack_bin(&c->wr.pk, items[i].klen);
        msgpack_pack_bin_body(&c->wr.pk, items[i].key, items[i].klen);
        msgpack_pack_uint64(&c->wr.pk, r->offset);
        msgpack_pack_uint64(&c->wr.pk, r->length == GKV_TO_END ? 0 : r->length);
        msgpack_pack_uint64(&c->wr.pk, r->suffix);
    }
    gkv_wr_array_end(&c->wr, pos, (uint32_t)n);
    int rc = gkv__send(c, NULL, 0);
    if (rc || (rc = gkv__recv(c)))
        return rc;
    /* Parse every result before reading payload: c->hdr stays untouched meanwhile. */
    gkv_reader_t it;
    uint32_t count;
    gkv_read_init(&it, c->resp.results.p, c->resp.results.len);
    if (gkv_read_array(&it, &count) || count != n)
        return gkv__break(c, GKV_EPROTO);
    for (size_t i = 0; i < n; i++) {
        uint32_t three;
        int64_t status;
        uint64_t len, size;
        if (gkv_read_array(&it, &three) || three != 3 || gkv_read_int(&it, &status) ||
            gkv_read_uint(&it, &len) || gkv_read_uint(&it, &size))
            return gkv__break(c, GKV_EPROTO);
        items[i].status = (int)status;
        items[i].len = len;
        if (fn) {
            items[i].buf = NULL;
            items[i].cap = 0;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (items[i].status != 0)
            continue;
        if (fn) {
            items[i].buf = fn(arg, i, items[i].len);
            items[i].cap = items[i].buf ? (size_t)items[i].len : 0;
            if (!items[i].buf)
                items[i].status = GKV_ENOMEM;
        } else if (items[i].len > items[i].cap) {
            items[i].status = GKV_ENOSPACE;
        }
        if (items[i].len == 0)
            continue;
        rc = items[i].status ? gkv__drain(c, items[i].len)
                             : gkv__recv_raw(c, items[i].buf, (size_t)items[i].len);
        if (rc)
            return rc;
    }
    return 0;
}

int gkv_mget(gkv_client_t *c, gkv_mget_item_t *items, size_t n)
{
    return mget(c, items, n, NULL, NULL);
}

int gkv_mget_with(gkv_client_t *c, gkv_mget_item_t *items, size_t n, gkv_alloc_fn fn, void *arg)
{
    return fn ? mget(c, items, n, fn, arg) : GKV_EINVAL;
}

static int64_t keys_op(gkv_client_t *c, unsigned op, const void *const *keys, const size_t *klens,
                       size_t n)
{
    if (n == 0 || n > GKV_MAX_BATCH)
        return GKV_EINVAL;
    for (size_t i = 0; i < n; i++) {
        int rc = gkv__check_key(c, keys[i], klens[i]);
        if (rc)
            return rc;
    }
    gkv__cache_flush(c);
    gkv__begin(c, op);
    size_t pos = gkv_wr_array_begin(&c->wr, GKV_F_KEYS);
    for (size_t i = 0; i < n; i++) {
        msgpack_pack_bin(&c->wr.pk, klens[i]);
        msgpack_pack_bin_body(&c->wr.pk, keys[i], klens[i]);
    }
    gkv_wr_array_end(&c->wr, pos, (uint32_t)n);
    int rc = gkv__send(c, NULL, 0);
    if (rc || (rc = gkv__recv(c)))
        return rc;
    return (int64_t)c->resp.count;
}

int64_t gkv_exists(gkv_client_t *c, const void *const *keys, const size_t *klens, size_t n)
{
    return keys_op(c, GKV_OP_EXISTS, keys, klens, n);
}

int64_t gkv_del(gkv_client_t *c, const void *const *keys, const size_t *klens, size_t n)
{
    return keys_op(c, GKV_OP_DEL, keys, klens, n);
}

/* A request naming one key (and a ttl, unless 0), its response read into c->resp. Returns 0 or
 * a negative code. */
static int key_request(gkv_client_t *c, unsigned op, const void *key, size_t klen, uint64_t ttl)
{
    int rc = gkv__check_key(c, key, klen);
    if (rc)
        return rc;
    gkv__cache_flush(c);
    gkv__begin(c, op);
    gkv_wr_bin(&c->wr, GKV_F_KEY, key, klen);
    if (ttl)
        gkv_wr_uint(&c->wr, GKV_F_TTL, ttl);
    rc = gkv__send(c, NULL, 0);
    return rc ? rc : gkv__recv(c);
}

int gkv_del_prefix(gkv_client_t *c, const void *prefix, size_t plen, uint64_t *count)
{
    if (plen > c->info.max_key)
        return GKV_ETOOBIG;
    uint64_t n = 0;
    int rc;
    gkv__cache_flush(c);
    do {
        gkv__begin(c, GKV_OP_DEL);
        gkv_wr_bin(&c->wr, GKV_F_PREFIX, prefix, plen);
        if ((rc = gkv__send(c, NULL, 0)) || (rc = gkv__recv(c)))
            break;
        n += c->resp.count;
    } while (c->resp.has_cursor);
    if (count)
        *count = n;
    return rc;
}

int gkv_locate_tier(gkv_client_t *c, const void *key, size_t klen, uint64_t *size, int *gpu,
                    int *tier)
{
    int rc = key_request(c, GKV_OP_GETSIZE, key, klen, 0);
    if (rc)
        return rc;
    *size = c->resp.size;
    *gpu = c->resp.gpu > 0 ? (int)c->resp.gpu : 0; /* an older server names none: its first */
    *tier = c->resp.tier == 1 ? GKV_TIER_HOST : c->resp.tier == 2 ? GKV_TIER_DISK : GKV_TIER_GPU;
    return 0;
}

int gkv_locate(gkv_client_t *c, const void *key, size_t klen, uint64_t *size, int *gpu)
{
    int tier;
    return gkv_locate_tier(c, key, klen, size, gpu, &tier);
}

int gkv_locate_node(gkv_client_t *c, const void *key, size_t klen, char *node, size_t cap,
                    uint64_t *size)
{
    int rc = key_request(c, GKV_OP_GETSIZE, key, klen, 0);
    if (rc)
        return rc;
    if (c->resp.owner.len >= cap)
        return GKV_ENOSPACE;
    if (c->resp.owner.len)
        memcpy(node, c->resp.owner.p, c->resp.owner.len);
    node[c->resp.owner.len] = 0;
    if (size)
        *size = c->resp.size;
    return 0;
}

int gkv_getsize(gkv_client_t *c, const void *key, size_t klen, uint64_t *size)
{
    int gpu;
    return gkv_locate(c, key, klen, size, &gpu);
}

int gkv_getsize_prefix(gkv_client_t *c, const void *prefix, size_t plen, uint64_t *bytes,
                       uint64_t *count)
{
    /* The server counts a bounded number of keys per request and hands back a cursor: the sums
     * are those of consecutive walks, not of one instant (like LIST's pages). */
    uint64_t b = 0, n = 0;
    uint8_t *cursor = NULL;
    size_t cursor_len = 0;
    int rc;
    gkv__cache_flush(c);
    for (;;) {
        gkv__begin(c, GKV_OP_GETSIZE);
        gkv_wr_bin(&c->wr, GKV_F_PREFIX, plen ? prefix : "", plen);
        if (cursor_len)
            gkv_wr_bin(&c->wr, GKV_F_CURSOR, cursor, cursor_len);
        if ((rc = gkv__send(c, NULL, 0)) || (rc = gkv__recv(c)))
            break;
        b += c->resp.bytes;
        n += c->resp.count;
        if (!c->resp.has_cursor || c->resp.cursor.len == 0)
            break;
        uint8_t *next = realloc(cursor, c->resp.cursor.len);
        if (!next) {
            rc = GKV_ENOMEM;
            break;
        }
        cursor = next;
        cursor_len = c->resp.cursor.len;
        memcpy(cursor, c->resp.cursor.p, cursor_len);
    }
    free(cursor);
    if (rc)
        return rc;
    *bytes = b;
    if (count)
        *count = n;
    return 0;
}

int gkv_flush(gkv_client_t *c)
{
    gkv__cache_flush(c);
    gkv__begin(c, GKV_OP_FLUSH);
    int rc = gkv__send(c, NULL, 0);
    return rc ? rc : gkv__recv(c);
}

int gkv_save(gkv_client_t *c)
{
    gkv__cache_flush(c);
    gkv__begin(c, GKV_OP_SAVE);
    int rc = gkv__send(c, NULL, 0);
    return rc ? rc : gkv__recv(c);
}

/* One key answered with a count (EXPIRE, PERSIST): returns it, or a negative code. */
static int key_count(gkv_client_t *c, unsigned op, const void *key, size_t klen, uint64_t ttl)
{
    int rc = key_request(c, op, key, klen, ttl);
    return rc ? rc : c->resp.count ? 1 : 0;
}

int gkv_expire(gkv_client_t *c, const void *key, size_t klen, uint64_t ttl_ms)
{
    if (ttl_ms == 0)
        return GKV_EINVAL;
    return key_count(c, GKV_OP_EXPIRE, key, klen, ttl_ms);
}

int gkv_persist(gkv_client_t *c, const void *key, size_t klen)
{
    return key_count(c, GKV_OP_PERSIST, key, klen, 0);
}

int gkv_ttl(gkv_client_t *c, const void *key, size_t klen, uint64_t *ttl_ms)
{
    int rc = key_request(c, GKV_OP_TTL, key, klen, 0);
    if (rc)
        return rc;
    *ttl_ms = c->resp.has_ttl ? c->resp.ttl : GKV_NO_TTL;
    return 0;
}

static int info_text(gkv_client_t *c, uint64_t flags, char **text)
{
    gkv__cache_flush(c);
    gkv__begin(c, GKV_OP_INFO);
    if (flags)
        gkv_wr_uint(&c->wr, GKV_F_FLAGS, flags);
    int rc;
    if ((rc = gkv__send(c, NULL, 0)) || (rc = gkv__recv(c)))
        return rc;
    uint64_t len = c->resp.payload_len;
    char *t = len < (1u << 24) ? malloc((size_t)len + 1) : NULL;
    if (!t) {
        rc = gkv__drain(c, len);
        return rc ? rc : GKV_ENOMEM;
    }
    if ((rc = gkv__recv_raw(c, t, (size_t)len))) {
        free(t);
        return rc;
    }
    t[len] = 0;
    *text = t;
    return 0;
}

int gkv_info(gkv_client_t *c, char **text)
{
    return info_text(c, 0, text);
}

int gkv_metrics(gkv_client_t *c, char **text)
{
    return info_text(c, GKV_INFO_PROMETHEUS, text);
}
