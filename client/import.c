/* import.c: attaching a connection to the server's memory (the cuda pool through the CUDA half,
 * or the host arena mapped here) and importing values (import.h). */
#include "import.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "error.h"

_Thread_local int gkv__hash_oom;

typedef struct gkv_attach {
    int cuda;               /* 1: cuda pool, 0: host arena */
    gkv_cuda_pool_t *pool;  /* cuda */
    int device;
    uint8_t *arena;         /* host: the whole arena, shared */
    size_t arena_size;
} gkv_attach_t;

static int attach(gkv_client_t *c)
{
    if (c->attach)
        return 0;
    if (c->shared_fd < 0) {
        snprintf(c->errmsg, sizeof(c->errmsg), "no zero-copy on this connection: %s",
                 c->info.zero_copy_why);
        return GKV_ENOTSUP;
    }
    gkv_attach_t *a = calloc(1, sizeof(*a));
    if (!a)
        return GKV_ENOMEM;
    if (strcmp(c->info.zero_copy, "host-memfd") == 0) {
        a->arena_size = (size_t)c->arena_size;
        a->arena = mmap(NULL, a->arena_size, PROT_READ | PROT_WRITE, MAP_SHARED, c->shared_fd, 0);
        if (a->arena == MAP_FAILED) {
            snprintf(c->errmsg, sizeof(c->errmsg), "mapping the server's arena failed");
            free(a);
            return GKV_ENOTSUP;
        }
        a->device = -1;
    } else if (strcmp(c->info.zero_copy, "cuda-pool-fd") == 0) {
        int rc = gkv__cuda_attach(c->shared_fd, c->info.gpu_uuid, &a->pool, &a->device, c->errmsg,
                                  sizeof(c->errmsg));
        if (rc) {
            free(a);
            return rc;
        }
        a->cuda = 1;
    } else {
        snprintf(c->errmsg, sizeof(c->errmsg), "unknown zero-copy mechanism '%s'",
                 c->info.zero_copy);
        free(a);
        return GKV_ENOTSUP;
    }
    c->attach = a;
    return 0;
}

int gkv__import_get(gkv_client_t *c, const gkv_response_t *r, void **base, gkv_import_t **imp,
                    int *on_device, int *device)
{
    int rc = attach(c);
    if (rc)
        return rc;
    gkv_attach_t *a = c->attach;
    *on_device = a->cuda;
    *device = a->device;
    *imp = NULL;
    *base = NULL;
    if (r->size == 0)
        return 0;
    if (!a->cuda) {
        /* Offsets come from the server: check them against the arena before use. */
        if (r->arena_offset > a->arena_size || r->size > a->arena_size - r->arena_offset)
            return gkv__break(c, GKV_EPROTO);
        *base = a->arena + r->arena_offset;
        return 0;
    }
    if (r->export_data.len == 0 || r->export_data.len > GKV_EXPORT_MAX)
        return gkv__break(c, GKV_EPROTO);
    return gkv__cuda_import(a->pool, r->export_data.p, r->export_data.len, imp, base);
}

int gkv__import_put(gkv_import_t *imp)
{
    return imp ? gkv__cuda_unimport(imp) : 0;
}

void gkv__import_detach(gkv_client_t *c)
{
    gkv_attach_t *a = c->attach;
    if (!a)
        return;
    if (a->cuda)
        gkv__cuda_detach(a->pool);
    else
        munmap(a->arena, a->arena_size);
    free(a);
    c->attach = NULL;
}
