/* device.c: device memory in and out: through a mapping when zero-copy is available (CREATE, a
 * device copy, SEAL; MAP, a device copy, unmap), else through host memory and the socket. */
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "commands.h"
#include "error.h"
#include "import.h"

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
        int rc = gkv_create(c, key, klen, len, opts, &m);
        if (rc)
            return rc;
        if (len && (rc = gkv__cuda_copy(m->ptr, dptr, len))) {
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

int gkv_get_to_device(gkv_client_t *c, const void *key, size_t klen, const gkv_range_t *range,
                      void *dptr, size_t cap, gkv_value_info_t *info)
{
    int rc;
    if (c->nshared) {
        gkv_mapping_t *m;
        if ((rc = gkv_map(c, key, klen, range, &m)))
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
                             : (m->length ? gkv__cuda_copy(dptr, m->ptr, m->length) : 0);
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
