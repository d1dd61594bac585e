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

static void enqueue(gkv_staging_t *sp, gkv_staging_waiter_t *w)
{
    if (w->queued)
        return;
    w->queued = 1;
    w->next = NULL;
    if (sp->tail)
        sp->tail->next = w;
    else
        sp->head = w;
    sp->tail = w;
}

void *gkv_staging_get(gkv_staging_t *sp, gkv_staging_waiter_t *w)
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
    /* Exhausted (or allocation failed while others hold buffers): wait for a put. */
    if (sp->ntotal == 0)
        return NULL;
    enqueue(sp, w);
    return NULL;
}

void gkv_staging_put(gkv_staging_t *sp, void *buf)
{
    sp->free_bufs[sp->nfree++] = buf;
    gkv_staging_waiter_t *w = sp->head;
    if (w) {
        sp->head = w->next;
        if (!sp->head)
            sp->tail = NULL;
        w->queued = 0;
        w->ready(w);
    }
}

void gkv_staging_cancel(gkv_staging_t *sp, gkv_staging_waiter_t *w)
{
    if (!w->queued)
        return;
    gkv_staging_waiter_t **pp = &sp->head, *prev = NULL;
    while (*pp && *pp != w) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (*pp) {
        *pp = w->next;
        if (sp->tail == w)
            sp->tail = prev;
    }
    w->queued = 0;
}
