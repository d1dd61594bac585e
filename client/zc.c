/* zc.c: a connection's imports (on top of the process-wide registry of zc_cuda.c), and the
 * host backend's arena mapping. */
#include "zc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "error.h"
#include "hash.h"

_Thread_local int gkv__hash_oom;

struct gkv_zc_import {
    uint8_t key[GKV_EXPORT_MAX];
    size_t key_len;
    void *ptr;
    uint32_t refs;         /* mappings on this connection */
    gkv_cuda_value_t *value; /* the process-wide import */
    UT_hash_handle hh;
};

typedef struct gkv_zc {
    int cuda;            /* 1: cuda pool, 0: host arena */
    gkv_zc_cuda_t *pool; /* cuda */
    int device;
    uint8_t *arena;      /* host: the whole arena, shared */
    size_t arena_size;
    gkv_zc_import_t *imports;
} gkv_zc_t;

static int attach(gkv_client_t *c)
{
    if (c->zc)
        return 0;
    if (c->zc_fd < 0) {
        snprintf(c->errmsg, sizeof(c->errmsg), "no zero-copy on this connection: %s",
                 c->info.zero_copy_why);
        return GKV_ENOTSUP;
    }
    gkv_zc_t *z = calloc(1, sizeof(*z));
    if (!z)
        return GKV_ENOMEM;
    if (strcmp(c->info.zero_copy, "host-memfd") == 0) {
        z->arena_size = (size_t)c->arena_size;
        z->arena = mmap(NULL, z->arena_size, PROT_READ | PROT_WRITE, MAP_SHARED, c->zc_fd, 0);
        if (z->arena == MAP_FAILED) {
            snprintf(c->errmsg, sizeof(c->errmsg), "mapping the server's arena failed");
            free(z);
            return GKV_ENOTSUP;
        }
        z->device = -1;
    } else if (strcmp(c->info.zero_copy, "cuda-pool-fd") == 0) {
        int rc = gkv__cuda_attach(c->zc_fd, c->info.gpu_uuid, &z->pool, &z->device, c->errmsg,
                                  sizeof(c->errmsg));
        if (rc) {
            free(z);
            return rc;
        }
        z->cuda = 1;
    } else {
        snprintf(c->errmsg, sizeof(c->errmsg), "unknown zero-copy mechanism '%s'",
                 c->info.zero_copy);
        free(z);
        return GKV_ENOTSUP;
    }
    c->zc = z;
    return 0;
}

int gkv__zc_import(gkv_client_t *c, const gkv_response_t *r, void **base,
                   gkv_zc_import_t **imp, int *on_device, int *device)
{
    int rc = attach(c);
    if (rc)
        return rc;
    gkv_zc_t *z = c->zc;
    *on_device = z->cuda;
    *device = z->device;
    *imp = NULL;
    *base = NULL;
    if (r->size == 0)
        return 0;
    if (!z->cuda) {
        /* Offsets come from the server: check them against the arena before use. */
        if (r->arena_offset > z->arena_size || r->size > z->arena_size - r->arena_offset)
            return gkv__break(c, GKV_EPROTO);
        *base = z->arena + r->arena_offset;
        return 0;
    }
    if (r->export_data.len == 0 || r->export_data.len > GKV_EXPORT_MAX)
        return gkv__break(c, GKV_EPROTO);
    gkv_zc_import_t *im = NULL;
    HASH_FIND(hh, z->imports, r->export_data.p, r->export_data.len, im);
    if (!im) {
        im = calloc(1, sizeof(*im));
        if (!im)
            return GKV_ENOMEM;
        memcpy(im->key, r->export_data.p, r->export_data.len);
        im->key_len = r->export_data.len;
        if ((rc = gkv__cuda_import(z->pool, im->key, im->key_len, &im->value, &im->ptr))) {
            free(im);
            return rc;
        }
        gkv__hash_oom = 0;
        HASH_ADD(hh, z->imports, key, im->key_len, im);
        if (gkv__hash_oom) {
            gkv__cuda_unimport(im->value);
            free(im);
            return GKV_ENOMEM;
        }
    }
    im->refs++;
    *imp = im;
    *base = im->ptr;
    return 0;
}

int gkv__zc_unimport(gkv_client_t *c, gkv_zc_import_t *im)
{
    if (!im || --im->refs)
        return 0;
    HASH_DELETE(hh, c->zc->imports, im);
    int rc = gkv__cuda_unimport(im->value);
    free(im);
    return rc;
}

void gkv__zc_detach(gkv_client_t *c)
{
    gkv_zc_t *z = c->zc;
    if (!z)
        return;
    gkv_zc_import_t *im, *tmp;
    HASH_ITER(hh, z->imports, im, tmp)
    {
        HASH_DELETE(hh, z->imports, im);
        gkv__cuda_unimport(im->value);
        free(im);
    }
    if (z->cuda)
        gkv__cuda_detach(z->pool);
    else
        munmap(z->arena, z->arena_size);
    free(z);
    c->zc = NULL;
}
