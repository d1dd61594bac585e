/* staging.c: the staging buffer pool. */
#include "staging.h"

#include <string.h>

void gkv_staging_init(gkv_staging_t *sp, gkv_backend_t *be)
{
    memset(sp, 0, sizeof(*sp));
    sp->be = be;
}

void gkv_staging_fini(gkv_staging_t *sp)
{
    for (int i = 0; i < sp->nfree; i++)
        sp->be->ops->staging_free(sp->be, sp->free_bufs[i], GKV_STAGING_CHUNK);
    sp->ntotal -= sp->nfree;
    sp->nfree = 0;
}

static void *take(gkv_staging_t *sp)
{
    if (sp->nfree)
        return sp->free_bufs[--sp->nfree];
    if (sp->ntotal < GKV_STAGING_MAX) {
        void *p = sp->be->ops->staging_alloc(sp->be, GKV_STAGING_CHUNK);
        if (p) {
            sp->ntotal++;
            return p;
        }
    }
    return NULL;
}

void *gkv_staging_try(gkv_staging_t *sp)
{
    return gkv_waitq_busy(&sp->waiters) ? NULL : take(sp);
}

void *gkv_staging_get(gkv_staging_t *sp, gkv_waiter_t *w)
{
    void *p = take(sp);
    if (p)
        return p;
    /* Exhausted (or allocation failed while others hold buffers): wait for a put. */
    if (sp->ntotal == 0)
        return NULL;
    gkv_waitq_push(&sp->waiters, w);
    return NULL;
}

void gkv_staging_put(gkv_staging_t *sp, void *buf)
{
    sp->free_bufs[sp->nfree++] = buf;
    gkv_waiter_t *w = gkv_waitq_pop(&sp->waiters);
    if (w)
        w->ready(w);
}

void gkv_staging_cancel(gkv_staging_t *sp, gkv_waiter_t *w)
{
    gkv_waitq_remove(&sp->waiters, w);
}
