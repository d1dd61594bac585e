/* tier.c: the host tier below the devices (store.h, docs/tiers.md): values that must leave a
 * device move there instead of being lost, and come back to a device when read. */
#include <string.h>

#include "error.h"
#include "store_impl.h"

int gkv_store_add_tier(gkv_store_t *st, gkv_backend_t *be, uint64_t limit)
{
    if (st->host_tier || !be->host_visible || !limit)
        return GKV_EINVAL;
    st->dev[GKV_DEV_HOST_TIER] = (gkv_store_dev_t){.be = be, .limit = limit};
    st->host_tier = true;
    return 0;
}

const char *gkv_store_tier_name(const gkv_entry_t *e)
{
    return gkv_store_in_tier(e) ? "host" : "device";
}

/* Copies size bytes from from's value memory at src to to's at dst, one of them host-visible
 * (the tier): a memcpy when both are, else the other's blocking copy. */
static int move_bytes(gkv_backend_t *to, gkv_devptr_t dst, gkv_backend_t *from, gkv_devptr_t src,
                      uint64_t size)
{
    if (!size)
        return 0;
    if (to->host_visible && from->host_visible) {
        memcpy(to->ops->host_view(to, dst), from->ops->host_view(from, src), size);
        return 0;
    }
    if (to->host_visible) /* down: the device's copy into the tier's pages */
        return from->ops->read_sync(from, to->ops->host_view(to, dst), src, size);
    return to->ops->write_sync(to, dst, from->ops->host_view(from, src), size);
}

/* A copy of the linked e (its key, metadata, deadline, bytes) linked in its place on device or
 * tier dev, or NULL with *rc. The new entry keeps e's access stamp; e loses the index's
 * reference (and goes with it unless someone else holds it). */
static gkv_entry_t *move_entry(gkv_store_t *st, gkv_entry_t *e, unsigned dev, int *rc)
{
    size_t klen;
    uint32_t meta_len;
    const uint8_t *key = gkv_store_key(st, e, &klen);
    const uint8_t *meta = gkv_entry_meta(e, &meta_len);
    gkv_entry_t *n;
    if ((*rc = gkv_store_entry_new(st, dev, key, klen, e->size, meta, meta_len, GKV_LANE_SHARED,
                                   &n)))
        return NULL;
    if ((gkv__store_has_deadline(e) &&
         (*rc = gkv__store_set_extras(st, n, meta, meta_len, e->x->expire_at))) ||
        (*rc = move_bytes(gkv_store_be(st, n), n->mem, gkv_store_be(st, e), e->mem, e->size)) ||
        (*rc = gkv__store_link(st, n))) {
        gkv_store_unref(st, n);
        return NULL;
    }
    n->access = e->access;
    gkv_store_unref(st, n); /* the index holds it now */
    return n;
}

bool gkv__store_demote_one(gkv_store_t *st, unsigned dev)
{
    if (!st->host_tier)
        return false;
    gkv_entry_t *e = gkv__store_pick(st, dev, true);
    if (!e || e->size > st->dev[GKV_DEV_HOST_TIER].limit)
        return false;
    uint64_t size = e->size;
    int rc;
    gkv_store_ref(e); /* whatever the tier does to make room, e stays */
    gkv_entry_t *n = move_entry(st, e, GKV_DEV_HOST_TIER, &rc);
    gkv_store_unref(st, e);
    if (!n)
        return false;
    st->stats.demoted++;
    st->stats.demoted_bytes += size;
    return true;
}

gkv_entry_t *gkv_store_promote(gkv_store_t *st, gkv_entry_t *e, int *rc)
{
    *rc = 0;
    if (!gkv_store_in_tier(e))
        return e;
    size_t klen;
    const uint8_t *key = gkv_store_key(st, e, &klen);
    unsigned dev = gkv_store_place(st, key, klen, e->size);
    /* Held while the device makes room, so that the tier, making room in turn, keeps it; and
     * the tier may hold e's size more meanwhile: what goes down takes the room e leaves once it
     * is up (a full tier swaps rather than evicts). The tier's backend has that much more
     * memory than its limit (gkv_store_add_tier's caller). */
    gkv_store_dev_t *t = &st->dev[GKV_DEV_HOST_TIER];
    gkv_store_ref(e);
    t->limit += e->size;
    gkv_entry_t *n = move_entry(st, e, dev, rc);
    t->limit -= e->size;
    gkv_store_unref(st, e);
    if (!n) {
        st->stats.promote_errors++;
        return NULL;
    }
    st->stats.promoted++;
    st->stats.promoted_bytes += n->size;
    return n;
}

gkv_entry_t *gkv_store_get_here(gkv_store_t *st, const void *key, size_t klen, int *rc)
{
    gkv_entry_t *e = gkv_store_get(st, key, klen);
    if (!e) {
        *rc = GKV_ENOTFOUND;
        return NULL;
    }
    return gkv_store_promote(st, e, rc);
}
