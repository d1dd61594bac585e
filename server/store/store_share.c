/* store_share.c: what zero-copy needs of the store: export data, clearing a new value's memory,
 * and copies of a value to memory of its own (a MAP of a value carved from a slab; MOVE). */
#include "error.h"
#include "store_impl.h"

int gkv_store_export(gkv_store_t *st, const gkv_entry_t *e, uint8_t *buf, size_t cap, uint32_t *len)
{
    size_t n = 0;
    gkv_backend_t *be = gkv_store_be(st, e);
    int rc = e->size ? be->ops->export_ptr(be, e->mem, e->size, buf, cap, &n) : 0;
    *len = (uint32_t)n;
    return rc;
}

int gkv_store_clear(gkv_store_t *st, gkv_entry_t *e)
{
    gkv_backend_t *be = gkv_store_be(st, e);
    return e->size ? be->ops->zero_shared(be, e->mem, e->size) : 0;
}

bool gkv_store_zeroed_now(gkv_store_t *st, gkv_entry_t *e)
{
    gkv_backend_t *be = gkv_store_be(st, e);
    return e->size && be->ops->zeroed_now && be->ops->zeroed_now(be, e->mem, e->size);
}

bool gkv_store_exportable(const gkv_store_t *st, const gkv_entry_t *e)
{
    gkv_backend_t *be = gkv_store_be(st, e);
    return !e->size || be->ops->exportable(be, e->mem);
}

int gkv__store_entry_like(gkv_store_t *st, const gkv_entry_t *e, unsigned dev, int lane,
                          gkv_entry_t **n)
{
    size_t klen;
    uint32_t meta_len;
    const uint8_t *key = gkv_store_key(st, e, &klen);
    const uint8_t *meta = gkv_entry_meta(e, &meta_len);
    int rc = gkv_store_entry_new(st, dev, key, klen, e->size, meta, meta_len, lane, n);
    if (rc)
        return rc;
    if (st->versions) /* the same value, moved: the same version */
        gkv__store_set_version(*n, gkv_store_version(st, e));
    if (gkv__store_has_deadline(e) &&
        (rc = gkv__store_set_extras(st, *n, meta, meta_len, e->x->expire_at))) {
        gkv_store_unref(st, *n);
        return rc;
    }
    return 0;
}

int gkv_store_copy_begin(gkv_store_t *st, gkv_entry_t *e, unsigned dev, gkv_entry_t **copy)
{
    gkv_entry_t *n;
    int rc = gkv__store_entry_like(st, e, dev, GKV_LANE_SHARED, &n);
    if (rc)
        return rc;
    gkv_backend_t *to = gkv_store_be(st, n), *from = gkv_store_be(st, e);
    if (e->size && (rc = to == from ? to->ops->copy_shared(to, n->mem, e->mem, e->size)
                                    : to->ops->copy_from(to, n->mem, from, e->mem, e->size))) {
        gkv_store_unref(st, n);
        return rc;
    }
    *copy = n;
    return 0;
}

bool gkv_store_copy_end(gkv_store_t *st, gkv_entry_t *e, gkv_entry_t *copy)
{
    size_t klen;
    const uint8_t *key = gkv_store_key(st, e, &klen);
    if (gkv_index_get(st->ix, key, klen) != e || !gkv_store_alive(st, e))
        return false;
    /* Linked as it is, never moved into e in place (publish's shortcut): the caller's lease
     * may hold copy's memory, which another process has been told about. */
    return gkv__store_link(st, copy) == 0; /* out of memory: the key keeps e */
}
