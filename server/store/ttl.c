/* ttl.c: the deadline heap (ttl.h). */
#include "ttl.h"

#include <stdlib.h>

#include "error.h"
#include "store.h"

static uint64_t deadline(const gkv_ttl_heap_t *h, uint32_t i)
{
    return h->v[i]->x->expire_at;
}

static void place(gkv_ttl_heap_t *h, uint32_t i, gkv_entry_t *e)
{
    h->v[i] = e;
    e->x->heap_pos = i;
}

static void sift_up(gkv_ttl_heap_t *h, uint32_t i)
{
    gkv_entry_t *e = h->v[i];
    while (i > 0) {
        uint32_t parent = (i - 1) / 2;
        if (deadline(h, parent) <= e->x->expire_at)
            break;
        place(h, i, h->v[parent]);
        i = parent;
    }
    place(h, i, e);
}

static void sift_down(gkv_ttl_heap_t *h, uint32_t i)
{
    gkv_entry_t *e = h->v[i];
    for (;;) {
        uint32_t child = 2 * i + 1;
        if (child >= h->n)
            break;
        if (child + 1 < h->n && deadline(h, child + 1) < deadline(h, child))
            child++;
        if (e->x->expire_at <= deadline(h, child))
            break;
        place(h, i, h->v[child]);
        i = child;
    }
    place(h, i, e);
}

int gkv_ttl_reserve(gkv_ttl_heap_t *h)
{
    if (h->n < h->cap)
        return 0;
    uint32_t cap = h->cap ? h->cap * 2 : 64;
    gkv_entry_t **v = realloc(h->v, (size_t)cap * sizeof(*v));
    if (!v)
        return GKV_ENOMEM;
    h->v = v;
    h->cap = cap;
    return 0;
}

int gkv_ttl_add(gkv_ttl_heap_t *h, gkv_entry_t *e)
{
    if (gkv_ttl_reserve(h))
        return GKV_ENOMEM;
    h->v[h->n++] = e;
    sift_up(h, h->n - 1);
    return 0;
}

void gkv_ttl_remove(gkv_ttl_heap_t *h, gkv_entry_t *e)
{
    uint32_t i = e->x->heap_pos;
    gkv_entry_t *last = h->v[--h->n];
    if (i == h->n)
        return;
    place(h, i, last);
    sift_down(h, i);
    sift_up(h, last->x->heap_pos);
}

gkv_entry_t *gkv_ttl_top(const gkv_ttl_heap_t *h)
{
    return h->n ? h->v[0] : NULL;
}

gkv_entry_t *gkv_ttl_random(const gkv_ttl_heap_t *h, uint32_t r)
{
    return h->n ? h->v[r % h->n] : NULL;
}

void gkv_ttl_free(gkv_ttl_heap_t *h)
{
    free(h->v);
    h->v = NULL;
    h->n = h->cap = 0;
}
