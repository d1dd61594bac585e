/* device.c: device memory in and out: through a mapping when zero-copy is available (CREATE, a
 * device copy, SEAL; MAP, a device copy, unmap), else through host memory and the socket. Many
 * values at once: the CREATEs pipelined, the copies waited for together, the SEALs pipelined. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "commands.h"
#include "error.h"
#include "import.h"
#include "mapping_impl.h"
#include "trace.h"

#define DEV_CHUNK (8u << 20)

/* opts, or a copy of them naming the daemon's GPU that holds dptr (when opts names none and
 * the daemon has several): the value is then written device to device on one GPU. */
static const gkv_set_opts_t *near_source(gkv_client_t *c, const void *dptr,
                                         const gkv_set_opts_t *opts, gkv_set_opts_t *buf)
{
    char uuid[48];
    if ((opts && opts->gpu) || c->info.gpus < 2 || gkv__cuda_ptr_uuid(dptr, uuid, sizeof(uuid)))
        return opts;
    for (uint32_t i = 0; i < c->info.gpus; i++) {
        if (strcmp(c->info.gpu_uuids[i], uuid) == 0) {
            *buf = opts ? *opts : (gkv_set_opts_t){0};
            buf->gpu = GKV_GPU((int)i);
            return buf;
        }
    }
    return opts;
}

int gkv_set_from_device(gkv_client_t *c, const void *key, size_t klen, const void *dptr, size_t len,
                        const gkv_set_opts_t *opts)
{
    gkv_mapping_t *m;
    gkv_set_opts_t near;
    opts = near_source(c, dptr, opts, &near);
    if (c->nshared) {
        c->internal = true; /* the mapping stays in here: its import may be held */
        int rc = gkv_create(c, key, klen, len, opts, &m);
        c->internal = false;
        if (rc)
            return rc;
        if (len && (rc = gkv__cuda_mapping_copy(((mapping_t *)m)->imp, m->ptr, (void *)dptr, len,
                                                true, true))) {
            gkv_abort(c, m);
            return rc;
        }
        return gkv_seal(c, m);
    }
    /* Remote: through host memory, a chunk at a time. */
    uint8_t *buf = malloc(len < DEV_CHUNK ? (len ? len : 1) : DEV_CHUNK);
    if (!buf)
        return GKV_ENOMEM;
    int rc = len ? gkv__cuda_copy(buf, dptr, len < DEV_CHUNK ? len : DEV_CHUNK) : 0;
    if (rc) {
        free(buf);
        return rc;
    }
    rc = gkv__set_begin(c, key, klen, len, opts);
    for (size_t off = 0; rc == 0 && off < len; off += DEV_CHUNK) {
        size_t n = len - off < DEV_CHUNK ? len - off : DEV_CHUNK;
        if (off && gkv__cuda_copy(buf, (const uint8_t *)dptr + off, n)) {
            free(buf);
            return gkv__break(c, GKV_EIO); /* the payload cannot be completed */
        }
        rc = gkv__send_raw(c, buf, n);
    }
    free(buf);
    return rc ? rc : gkv__recv(c);
}

/* One item of gkv_set_many_from_device on its way: its mapping (until sealed or ended), its
 * options (naming the GPU that holds its memory), whether its CREATE is in the pipeline, its
 * copy enqueued and its SEAL answered, and the lease its SEAL offered as the key's next spare. */
typedef struct {
    gkv_mapping_t *m;
    gkv_set_opts_t opts;
    bool created, copied, answered;
    uint64_t asked;
} many_t;

/* Starts frame number k (from 0) of a pipeline of op requests; *first gets the first's id. */
static int pipe_frame(gkv_client_t *c, unsigned op, size_t k, uint64_t *first)
{
    if (k == 0) {
        gkv__begin(c, op);
        *first = c->next_id;
        return 0;
    }
    int rc = gkv__end_frame(c);
    if (rc == 0)
        gkv__begin_more(c, op);
    return rc;
}

/* Enqueues item i's copy into its mapping (the legacy default stream of the mapping's GPU;
 * waited for by many_wait). */
static void copy_in(gkv_set_item_t *items, size_t i, many_t *w)
{
    if (items[i].len) {
        items[i].status = gkv__cuda_mapping_copy(((mapping_t *)w[i].m)->imp, w[i].m->ptr,
                                                 (void *)items[i].dptr, items[i].len, true, false);
        w[i].copied = items[i].status == 0;
    }
}

/* Pass 1: every item's writable mapping, a spare of the lease cache or a pipelined CREATE,
 * and its copy enqueued as soon as the mapping is there (the GPU copies while the next
 * replies are read and their memory imported). Returns 0 (each item's status says) or the
 * connection's code. */
static int many_create(gkv_client_t *c, gkv_set_item_t *items, size_t n, many_t *w,
                       uint64_t *ids)
{
    size_t ncreate = 0, nrefused = 0;
    uint64_t first = 0;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        int s = gkv__create_spare(c, items[i].key, items[i].klen, items[i].len, &w[i].opts,
                                  &w[i].m);
        if (s != 0) {
            items[i].status = s < 0 ? s : 0;
            if (s > 0)
                copy_in(items, i, w);
            continue;
        }
        if ((rc = pipe_frame(c, GKV_OP_CREATE, ncreate++, &first)) == 0) {
            gkv__create_put(c, items[i].key, items[i].klen, items[i].len, &w[i].opts);
            w[i].created = true;
        }
    }
    if (rc == 0 && ncreate)
        rc = gkv__send(c, NULL, 0);
    gkv_trace("w_sent", ncreate, n); /* GPUKV_TRACE: the CREATEs out (the rest were spares) */
    if (rc) { /* nothing went out: the spares taken go back to the server */
        for (size_t i = 0; i < n; i++) {
            if (w[i].m && !w[i].created)
                (void)gkv_abort(c, w[i].m);
            w[i].m = NULL;
            w[i].created = false;
        }
        return rc;
    }
    size_t k = 0;
    for (size_t i = 0; i < n && ncreate; i++) {
        if (!w[i].created)
            continue;
        c->next_id = first + k++; /* the id this reply carries */
        int st = gkv__recv(c);
        gkv_trace("w_reply", i, 0);
        if (c->broken)
            return st ? st : GKV_ECLOSED;
        uint64_t refused = 0;
        if (st == 0)
            st = gkv__create_made(c, items[i].key, items[i].klen, &w[i].opts, &w[i].m, &refused);
        if (c->broken)
            return st;
        if (refused)
            ids[nrefused++] = refused;
        items[i].status = st;
        gkv_trace("w_made", i, 0); /* its memory imported */
        if (st == 0)
            copy_in(items, i, w);
        gkv_trace("w_queued", i, 0); /* its copy enqueued */
    }
    if (ncreate)
        c->next_id = first + ncreate - 1;
    /* Every reply is read: what the refusals leave can be ended now. */
    if (nrefused)
        gkv__lease_send_ends(c, GKV_OP_RELEASE, ids, nrefused); /* writable: discarded */
    for (size_t i = 0; i < n; i++)
        if (w[i].created && items[i].status && !w[i].m)
            gkv__lease_end_key(c, items[i].key, items[i].klen); /* e.g. OOM, as gkv_create */
    return 0;
}

/* Pass 2: one wait for every copy pass 1 enqueued; an item whose copy failed is discarded
 * (one RELEASE for them all). */
static void many_wait(gkv_client_t *c, gkv_set_item_t *items, size_t n, many_t *w,
                      gkv_mapping_t **ends)
{
    /* The copies went on the legacy stream of each value's GPU: one wait per GPU used. */
    uint64_t waited = 0; /* bit d + 1: GPU d; bit 0: the current GPU (nothing imported) */
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        if (!w[i].copied)
            continue;
        int dev = gkv__cuda_import_device(((mapping_t *)w[i].m)->imp);
        uint64_t bit = dev < 63 ? 1ull << (dev + 1) : 0; /* 0: waited for each time */
        if (waited & bit)
            continue;
        waited |= bit;
        int r = gkv__cuda_device_sync(dev);
        rc = rc ? rc : r;
    }
    size_t nends = 0;
    for (size_t i = 0; i < n; i++) {
        if (w[i].m && (items[i].status || (rc && w[i].copied))) {
            items[i].status = items[i].status ? items[i].status : rc;
            ends[nends++] = w[i].m;
            w[i].m = NULL;
        }
    }
    if (nends)
        (void)gkv__lease_release(c, ends, nends);
}

/* Pass 3: the SEALs, pipelined; what each answer leaves of its mapping once all are read.
 * Returns 0 or the connection's code (each item's status says whether it was stored). */
static int many_seal(gkv_client_t *c, gkv_set_item_t *items, size_t n, many_t *w,
                     uint64_t *spares)
{
    size_t nseal = 0;
    uint64_t first = 0;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (!w[i].m)
            continue;
        if ((rc = pipe_frame(c, GKV_OP_SEAL, nseal++, &first)) == 0)
            w[i].asked = gkv__seal_put(c, w[i].m);
    }
    if (rc == 0 && nseal)
        rc = gkv__send(c, NULL, 0);
    size_t k = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (!w[i].m)
            continue;
        c->next_id = first + k++;
        items[i].status = gkv__recv(c);
        w[i].answered = true;
        spares[i] = items[i].status == 0 ? c->resp.spare : 0;
        if (c->broken)
            rc = items[i].status ? items[i].status : GKV_ECLOSED;
    }
    if (nseal && !c->broken)
        c->next_id = first + nseal - 1;
    for (size_t i = 0; i < n; i++) {
        if (!w[i].m)
            continue;
        if (rc && !c->broken) { /* nothing went out (a frame too large): discarded */
            (void)gkv_abort(c, w[i].m);
            items[i].status = rc;
        } else {
            int st = w[i].answered ? items[i].status : rc;
            items[i].status = gkv__seal_done(c, w[i].m, w[i].asked, st, spares[i]);
        }
        w[i].m = NULL;
    }
    return c->broken ? rc ? rc : GKV_ECLOSED : 0;
}

int gkv_set_many_from_device(gkv_client_t *c, gkv_set_item_t *items, size_t n,
                             const gkv_set_opts_t *opts)
{
    if (!c || !items || n == 0 || n > GKV_MAX_BATCH)
        return GKV_EINVAL;
    for (size_t i = 0; i < n; i++) {
        int rc = gkv__create_check(c, items[i].key, items[i].klen, opts);
        if (rc)
            return rc;
        if (!items[i].dptr && items[i].len)
            return GKV_EINVAL;
        items[i].status = 0;
    }
    if (!c->nshared) { /* remote: one at a time, through host memory */
        for (size_t i = 0; i < n; i++) {
            items[i].status = gkv_set_from_device(c, items[i].key, items[i].klen, items[i].dptr,
                                                  items[i].len, opts);
            if (c->broken)
                return items[i].status;
        }
        return 0;
    }
    many_t *w = calloc(n, sizeof(*w));
    uint64_t *ids = calloc(n, sizeof(*ids));
    gkv_mapping_t **ends = calloc(n, sizeof(*ends));
    int rc = w && ids && ends ? 0 : GKV_ENOMEM;
    for (size_t i = 0; i < n && rc == 0; i++) {
        gkv_set_opts_t near;
        const gkv_set_opts_t *o = near_source(c, items[i].dptr, opts, &near);
        w[i].opts = o ? *o : (gkv_set_opts_t){0};
    }
    gkv_trace("w_start", n, 0);
    if (rc == 0) {
        (void)gkv__end_later_now(c);
        if ((rc = many_create(c, items, n, w, ids))) {
            for (size_t i = 0; i < n; i++) {
                if (w[i].m) /* the connection is gone, and its leases with it */
                    (void)gkv__mapping_drop(c, w[i].m);
                if (items[i].status == 0)
                    items[i].status = rc;
            }
        }
    }
    if (rc == 0) {
        gkv_trace("w_created", n, 0);
        many_wait(c, items, n, w, ends);
        gkv_trace("w_copied", n, 0);
        rc = many_seal(c, items, n, w, ids);
    }
    gkv_trace("w_end", n, (uint64_t)-rc);
    free(w);
    free(ids);
    free(ends);
    return rc;
}

int gkv_get_to_device(gkv_client_t *c, const void *key, size_t klen, const gkv_range_t *range,
                      void *dptr, size_t cap, gkv_value_info_t *info)
{
    int rc;
    if (c->nshared) {
        gkv_mapping_t *m;
        c->internal = true; /* the mapping stays in here: its import may be held */
        rc = gkv_map(c, key, klen, range, &m);
        c->internal = false;
        if (rc)
            return rc;
        if (info) {
            info->size = m->value_size;
            info->offset = m->offset;
            info->length = m->length;
            info->meta = NULL;
            info->meta_len = 0;
            info->gpu = m->gpu;
        }
        rc = m->length > cap ? GKV_ENOSPACE
                             : (m->length ? gkv__cuda_mapping_copy(((mapping_t *)m)->imp, m->ptr,
                                                                   dptr, m->length, false, true)
                                          : 0);
        int urc = gkv_unmap(c, m);
        return rc ? rc : urc;
    }
    void *host;
    gkv_value_info_t vi;
    if ((rc = gkv_get_alloc(c, key, klen, range, &host, &vi)))
        return rc;
    if (info)
        *info = vi;
    rc = vi.length > cap ? GKV_ENOSPACE : (vi.length ? gkv__cuda_copy(dptr, host, vi.length) : 0);
    free(host);
    return rc;
}
