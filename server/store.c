/* store.c: entry lifetime and accounting. */
#include "store.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"

int gkv_store_init(gkv_store_t *st, gkv_backend_t *be, uint64_t limit)
{
    memset(st, 0, sizeof(*st));
    st->ix = gkv_index_alloc();
    if (!st->ix)
        return GKV_ENOMEM;
    st->be = be;
    st->limit = limit;
    return 0;
}

static void drop_link(void *val, void *arg)
{
    gkv_store_unref(arg, val);
}

void gkv_store_fini(gkv_store_t *st)
{
    gkv_index_free(st->ix, drop_link, st);
    st->ix = NULL;
}

int gkv_store_entry_new(gkv_store_t *st, uint64_t size, const void *meta, uint32_t meta_len,
                        int lane, gkv_entry_t **out)
{
    if (size > st->limit - st->used) {
        st->stats.oom_errors++;
        return GKV_EOOM;
    }
    gkv_entry_t *e = calloc(1, sizeof(*e));
    if (!e)
        return GKV_ENOMEM;
    if (meta_len) {
        e->meta = malloc(meta_len);
        if (!e->meta) {
            free(e);
            return GKV_ENOMEM;
        }
        memcpy(e->meta, meta, meta_len);
        e->meta_len = meta_len;
    }
    if (size) {
        int rc = lane < 0 ? st->be->ops->alloc_now(st->be, size, &e->mem)
                          : st->be->ops->alloc(st->be, size, lane, &e->mem);
        if (rc) {
            if (rc == GKV_EOOM)
                st->stats.oom_errors++;
            free(e->meta);
            free(e);
            return rc;
        }
    }
    e->size = size;
    e->refs = 1;
    st->used += size;
    st->entries++;
    *out = e;
    return 0;
}

void gkv_store_ref(gkv_entry_t *e)
{
    e->refs++;
}

void gkv_store_unref(gkv_store_t *st, gkv_entry_t *e)
{
    if (--e->refs)
        return;
    if (e->size)
        st->be->ops->free(st->be, e->mem, e->size, 0);
    st->used -= e->size;
    st->entries--;
    free(e->meta);
    free(e->exported);
    free(e);
}

int gkv_store_publish(gkv_store_t *st, const void *key, size_t klen, gkv_entry_t *e,
                      unsigned flags)
{
    bool exists = gkv_index_get(st->ix, key, klen) != NULL;
    if ((flags & GKV_SET_NX) && exists)
        return GKV_EEXISTS;
    if ((flags & GKV_SET_XX) && !exists)
        return GKV_ENOTFOUND;
    void *old;
    gkv_store_ref(e);
    if (gkv_index_put(st->ix, key, klen, e, &old)) {
        e->refs--;
        return GKV_ENOMEM;
    }
    if (old)
        gkv_store_unref(st, old);
    st->stats.sets++;
    return 0;
}

gkv_entry_t *gkv_store_get(gkv_store_t *st, const void *key, size_t klen)
{
    gkv_entry_t *e = gkv_index_get(st->ix, key, klen);
    if (e)
        st->stats.hits++;
    else
        st->stats.misses++;
    return e;
}

int gkv_store_del(gkv_store_t *st, const void *key, size_t klen)
{
    gkv_entry_t *e = gkv_index_del(st->ix, key, klen);
    if (!e)
        return 0;
    st->stats.dels++;
    gkv_store_unref(st, e);
    return 1;
}

void gkv_store_flush(gkv_store_t *st)
{
    gkv_index_clear(st->ix, drop_link, st);
}
