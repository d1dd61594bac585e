/* buffers.c: a connection's registered buffers; see buffers.h. */
#include "buffers.h"

#include <string.h>

#include "cmd.h"
#include "error.h"

void gkv_buffers_init(gkv_buffers_t *bs)
{
    memset(bs, 0, sizeof(*bs));
    bs->next_id = 1;
}

gkv_buffer_t *gkv_buffers_find(gkv_buffers_t *bs, uint64_t id)
{
    for (unsigned i = 0; id && i < GKV_MAX_BUFFERS; i++)
        if (bs->b[i].id == id)
            return &bs->b[i];
    return NULL;
}

int gkv_buffers_add(gkv_buffers_t *bs, gkv_cmd_ctx_t *ctx, unsigned dev, const uint8_t *handle,
                    uint32_t hlen, uint64_t off, uint64_t len, gkv_buffer_t **out,
                    uint64_t *alloc_size)
{
    gkv_backend_t *be = ctx->devs->dev[dev].be;
    *alloc_size = 0;
    if (!be->ops->foreign_open)
        return GKV_ENOTSUP;
    if (bs->n >= GKV_MAX_BUFFERS)
        return GKV_ELEASELIMIT;
    gkv_devptr_t base;
    uint64_t size;
    int rc = be->ops->foreign_open(be, handle, hlen, &base, &size);
    if (rc)
        return rc;
    *alloc_size = size;
    if (off > size || len > size - off) {
        be->ops->foreign_close(be, base);
        return GKV_ERANGE;
    }
    gkv_buffer_t *b = NULL;
    for (unsigned i = 0; !b && i < GKV_MAX_BUFFERS; i++)
        if (!bs->b[i].id)
            b = &bs->b[i];
    *b = (gkv_buffer_t){.id = bs->next_id++, .dev = dev, .base = base, .off = off, .len = len};
    bs->n++;
    ctx->buffers_open++;
    *out = b;
    return 0;
}

void gkv_buffers_drop(gkv_buffers_t *bs, gkv_cmd_ctx_t *ctx, gkv_buffer_t *b)
{
    gkv_backend_t *be = ctx->devs->dev[b->dev].be;
    be->ops->foreign_close(be, b->base);
    memset(b, 0, sizeof(*b));
    bs->n--;
    ctx->buffers_open--;
}

void gkv_buffers_fini(gkv_buffers_t *bs, gkv_cmd_ctx_t *ctx)
{
    for (unsigned i = 0; i < GKV_MAX_BUFFERS && bs->n; i++)
        if (bs->b[i].id)
            gkv_buffers_drop(bs, ctx, &bs->b[i]);
}
