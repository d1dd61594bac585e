/* lease.c: a connection's lease table (uthash keyed by lease id). */
#include "lease.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"

void gkv_leases_init(gkv_leases_t *ls, gkv_lease_totals_t *totals)
{
    memset(ls, 0, sizeof(*ls));
    ls->totals = totals;
}

int gkv_lease_add(gkv_leases_t *ls, gkv_entry_t *e, bool writable, unsigned flags,
                  gkv_lease_t **out)
{
    gkv_lease_t *l = calloc(1, sizeof(*l));
    if (!l)
        return GKV_ENOMEM;
    l->id = ++ls->totals->last_id;
    l->entry = e;
    l->writable = writable;
    l->flags = flags;
    l->bytes = e->size;
    HASH_ADD(hh, ls->table, id, sizeof(uint64_t), l);
    ls->count++;
    ls->bytes += e->size;
    ls->totals->leases++;
    ls->totals->bytes += e->size;
    ls->totals->creates += writable;
    *out = l;
    return 0;
}

gkv_lease_t *gkv_lease_find(gkv_leases_t *ls, uint64_t id)
{
    gkv_lease_t *l = NULL;
    HASH_FIND(hh, ls->table, &id, sizeof(uint64_t), l);
    return l;
}

void gkv_lease_drop(gkv_leases_t *ls, gkv_store_t *st, gkv_lease_t *l)
{
    HASH_DELETE(hh, ls->table, l);
    ls->count--;
    ls->bytes -= l->bytes;
    ls->totals->leases--;
    ls->totals->bytes -= l->bytes;
    ls->totals->creates -= l->writable;
    gkv_store_unref(st, l->entry);
    free(l);
}

void gkv_lease_to_read(gkv_leases_t *ls, gkv_store_t *st, gkv_lease_t *l, gkv_entry_t *e)
{
    if (e != l->entry) {
        gkv_store_ref(e);
        gkv_store_unref(st, l->entry);
        l->entry = e;
    }
    ls->totals->creates -= l->writable;
    l->writable = false;
    l->flags = 0;
}

void gkv_lease_to_write(gkv_leases_t *ls, gkv_lease_t *l)
{
    ls->totals->creates += !l->writable;
    l->writable = true;
    l->flags = 0;
}

static gkv_backend_t *dev_be(const gkv_store_t *st, uint8_t dev)
{
    return st->dev[dev].be;
}

int gkv_hold_add(gkv_leases_t *ls, gkv_store_t *st, const gkv_lease_t *l)
{
    const gkv_entry_t *e = l->entry;
    gkv_backend_t *be = gkv_store_be(st, e);
    if (!e->size || !be->ops->hold || gkv_store_in_tier(e))
        return GKV_ENOTSUP;
    gkv_hold_t *h = calloc(1, sizeof(*h));
    if (!h)
        return GKV_ENOMEM;
    int rc = be->ops->hold(be, e->mem, 1);
    if (rc) {
        free(h);
        return rc;
    }
    h->id = l->id;
    h->mem = e->mem;
    h->dev = (uint8_t)e->dev;
    h->bytes = e->size;
    HASH_ADD(hh, ls->holds, id, sizeof(uint64_t), h);
    ls->nholds++;
    ls->held_bytes += h->bytes;
    return 0;
}

uint64_t gkv_hold_cap(const gkv_store_t *st)
{
    uint64_t cap = 0;
    for (unsigned i = 0; i < st->ndev; i++)
        cap += st->dev[i].be->capacity / 8;
    return cap;
}

gkv_hold_t *gkv_hold_find(gkv_leases_t *ls, uint64_t id)
{
    gkv_hold_t *h = NULL;
    HASH_FIND(hh, ls->holds, &id, sizeof(uint64_t), h);
    return h;
}

void gkv_hold_drop(gkv_leases_t *ls, gkv_store_t *st, gkv_hold_t *h)
{
    gkv_backend_t *be = dev_be(st, h->dev);
    (void)be->ops->hold(be, h->mem, -1);
    HASH_DELETE(hh, ls->holds, h);
    ls->nholds--;
    ls->held_bytes -= h->bytes;
    free(h);
}

void gkv_leases_fini(gkv_leases_t *ls, gkv_store_t *st)
{
    gkv_lease_t *l, *tmp;
    HASH_ITER(hh, ls->table, l, tmp)
    {
        gkv_lease_drop(ls, st, l);
    }
    gkv_hold_t *h, *htmp;
    HASH_ITER(hh, ls->holds, h, htmp)
    {
        gkv_hold_drop(ls, st, h);
    }
}
