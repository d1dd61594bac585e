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

void gkv_leases_fini(gkv_leases_t *ls, gkv_store_t *st)
{
    gkv_lease_t *l, *tmp;
    HASH_ITER(hh, ls->table, l, tmp)
    {
        gkv_lease_drop(ls, st, l);
    }
}
