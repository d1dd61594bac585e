/* import.c: attaching a connection to the server's memory (the cuda pool through the CUDA half,
 * or the host arena mapped here) and importing values (import.h). */
#include "import.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "error.h"

_Thread_local int gkv__hash_oom;

typedef struct gkv_attach {
    int cuda;               /* 1: cuda pool, 0: host arena */
    gkv_cuda_pool_t *pool;  /* cuda */
    int device;
    uint8_t *arena;         /* host: the whole arena, shared */
    size_t arena_size;
} gkv_attach_t;

/* The size of the arena behind GPU gpu's descriptor: HELLO's for the first, the memfd's own
 * for the others (HELLO carries one size). 0 when it cannot be had. */
static size_t arena_size(const gkv_client_t *c, unsigned gpu)
{
    struct stat st;
    if (gpu == 0)
        return (size_t)c->arena_size;
    return fstat(c->shared_fds[gpu], &st) == 0 && st.st_size > 0 ? (size_t)st.st_size : 0;
}

/* Attaches c to the memory of the daemon's GPU gpu, once. */
static int attach(gkv_client_t *c, unsigned gpu)
{
    if (c->attach[gpu])
        return 0;
    if (gpu >= c->nshared) {
        if (c->nshared)
            snprintf(c->errmsg, sizeof(c->errmsg),
                     "the value is on the server's GPU %u (%s), whose memory this connection "
                     "was not given",
                     gpu, gpu < c->info.gpus ? c->info.gpu_uuids[gpu] : "?");
        else
            snprintf(c->errmsg, sizeof(c->errmsg), "no zero-copy on this connection: %s",
                     c->info.zero_copy_why);
        return GKV_ENOTSUP;
    }
    gkv_attach_t *a = calloc(1, sizeof(*a));
    if (!a)
        return GKV_ENOMEM;
    int fd = c->shared_fds[gpu];
    if (strcmp(c->info.zero_copy, "host-memfd") == 0) {
        a->arena_size = arena_size(c, gpu);
        a->arena = a->arena_size
                       ? mmap(NULL, a->arena_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                       : MAP_FAILED;
        if (a->arena == MAP_FAILED) {
            snprintf(c->errmsg, sizeof(c->errmsg), "mapping the server's arena %u failed", gpu);
            free(a);
            return GKV_ENOTSUP;
        }
        a->device = -1;
    } else if (strcmp(c->info.zero_copy, "cuda-pool-fd") == 0) {
        int rc = gkv__cuda_attach(fd, c->info.gpu_uuids[gpu], &a->pool, &a->device, c->errmsg,
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
    c->attach[gpu] = a;
    return 0;
}

int gkv__import_get(gkv_client_t *c, const gkv_response_t *r, void **base, gkv_import_t **imp,
                    int *on_device, int *device)
{
    /* An older server names no GPU: its values are on its first. */
    if (r->gpu >= (int64_t)c->info.gpus)
        return gkv__break(c, GKV_EPROTO);
    unsigned gpu = r->gpu > 0 ? (unsigned)r->gpu : 0;
    int rc = attach(c, gpu);
    if (rc)
        return rc;
    gkv_attach_t *a = c->attach[gpu];
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
    if (r->export_data.len == 0 || r->export_data.len > GKV_MAX_EXPORT)
        return gkv__break(c, GKV_EPROTO);
    return gkv__cuda_import(a->pool, r->export_data.p, r->export_data.len, imp, base);
}

int gkv__import_put(gkv_import_t *imp)
{
    return imp ? gkv__cuda_unimport(imp) : 0;
}

void gkv__import_shown(gkv_import_t *imp)
{
    if (imp)
        gkv__cuda_import_shown(imp);
}

void gkv__import_guard(gkv_import_t *imp)
{
    if (imp)
        gkv__cuda_import_guard(imp);
}

void gkv__import_unhold_all(gkv_client_t *c)
{
    for (size_t i = 0; i < c->nheld; i++)
        (void)gkv__cuda_unhold(c->held[i].imp);
    free(c->held);
    c->held = NULL;
    c->nheld = c->held_cap = 0;
    c->held_bytes = 0;
}

void gkv__import_detach(gkv_client_t *c)
{
    for (unsigned i = 0; i < GKV_FDPASS_MAX; i++) {
        gkv_attach_t *a = c->attach[i];
        if (!a)
            continue;
        if (a->cuda)
            gkv__cuda_detach(a->pool);
        else
            munmap(a->arena, a->arena_size);
        free(a);
        c->attach[i] = NULL;
    }
}
