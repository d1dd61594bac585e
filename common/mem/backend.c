/* backend.c: choosing a backend. */
#include "backend.h"

#include <stdio.h>

#include "error.h"
#include "log.h"

#ifndef GKV_HAVE_CUDA
int gkv_backend_cuda_open(const gkv_backend_config_t *cfg, gkv_backend_t **out, char *why,
                          size_t cap)
{
    (void)cfg;
    (void)out;
    snprintf(why, cap, "this gpukvd was built without CUDA (GKV_WITH_CUDA=OFF)");
    return GKV_ENOTSUP;
}

int gkv_backend_cuda_count(void)
{
    return 0;
}
#endif

int gkv_backend_count(gkv_backend_kind_t kind)
{
    int cuda = kind == GKV_BACKEND_HOST ? 0 : gkv_backend_cuda_count();
    return kind == GKV_BACKEND_CUDA || cuda > 0 ? cuda : 1;
}

static _Thread_local int polling;

int gkv_backend_poll(gkv_backend_t *b)
{
    if (!b->ops->poll)
        return 0;
    polling++;
    int n = b->ops->poll(b);
    polling--;
    return n;
}

int gkv_backend_polling(void)
{
    return polling;
}

int gkv_backend_open(const gkv_backend_config_t *cfg, gkv_backend_t **out, char *why, size_t cap)
{
    switch (cfg->kind) {
    case GKV_BACKEND_CUDA:
        return gkv_backend_cuda_open(cfg, out, why, cap);
    case GKV_BACKEND_HOST:
        return gkv_backend_host_open(cfg, out, why, cap);
    case GKV_BACKEND_AUTO:
        break;
    }
    char cuda_why[256] = "";
    int rc = gkv_backend_cuda_open(cfg, out, cuda_why, sizeof(cuda_why));
    if (rc == 0)
        return 0;
    if (rc != GKV_ENOTSUP) {
        snprintf(why, cap, "%s", cuda_why);
        return rc;
    }
    GKV_INFO("%s; using the host backend", cuda_why);
    return gkv_backend_host_open(cfg, out, why, cap);
}
