/* tier.c: the tiers below the devices (store.h, docs/tiers.md): host memory, then a file on
 * disk. Values that must leave a device move down instead of being lost, and come back to a
 * device when read. */
#include <stdlib.h>
#include <string.h>

#include "duration.h"
#include "error.h"
#include "log.h"
#include "store_impl.h"
#include "tier_pin.h"

static int add(gkv_store_t *st, unsigned at, bool *flag, gkv_backend_t *be, uint64_t limit)
{
    if (*flag || !limit)
        return GKV_EINVAL;
    st->dev[at] = (gkv_store_dev_t){.be = be, .limit = limit};
    *flag = true;
    return 0;
}

int gkv_store_add_tier(gkv_store_t *st, gkv_backend_t *be, uint64_t limit)
{
    if (!be->host_visible || st->host_tier || !limit)
        return GKV_EINVAL;
    int rc;
    st->tier_pin = gkv_tier_pin_start(st->dev[0].be, be, &rc);
    return rc ? rc : add(st, GKV_DEV_HOST_TIER, &st->host_tier, be, limit);
}

void gkv__store_tier_fini(gkv_store_t *st)
{
    gkv_tier_pin_stop(st->tier_pin);
    st->tier_pin = NULL;
}

int gkv_store_add_disk_tier(gkv_store_t *st, gkv_backend_t *be, uint64_t limit)
{
    return !be->host_visible ? add(st, GKV_DEV_DISK_TIER, &st->disk_tier, be, limit) : GKV_EINVAL;
}

const char *gkv_store_tier_name(const gkv_entry_t *e)
{
    static const char *const names[] = {"device", "host", "disk"};
    return names[gkv_store_tier(e)];
}

/* The tier values leaving dev go to, or -1 (dev is the last). */
static int below(const gkv_store_t *st, unsigned dev)
{
    if (dev < GKV_MAX_DEVICES && st->host_tier)
        return GKV_DEV_HOST_TIER;
    if (dev != GKV_DEV_DISK_TIER && st->disk_tier)
        return GKV_DEV_DISK_TIER;
    return -1;
}

/* Copies size bytes of the value at src in from's memory to to's at dst: a memcpy between
 * host-visible memory, else the other side's blocking copy, through a host buffer when neither
 * is host-visible. A value read from the disk tier is checked (*bad_source: it failed). */
static int move_bytes(gkv_store_t *st, gkv_backend_t *to, gkv_devptr_t dst, gkv_backend_t *from,
                      gkv_devptr_t src, uint64_t size, bool *bad_source)
{
    *bad_source = false;
    if (!size)
        return 0;
    bool from_disk = st->disk_tier && from == st->dev[GKV_DEV_DISK_TIER].be;
    if (to->host_visible && from->host_visible) {
        memcpy(to->ops->host_view(to, dst), from->ops->host_view(from, src), size);
        return 0;
    }
    if (to->host_visible) { /* down from a device, or up from the disk */
        void *at = to->ops->host_view(to, dst);
        int rc = from_disk ? gkv_backend_disk_read_value(from, at, src, size)
                           : from->ops->read_sync(from, at, src, size);
        *bad_source = rc && from_disk;
        return rc;
    }
    if (from->host_visible)
        return to->ops->write_sync(to, dst, from->ops->host_view(from, src), size);
    void *buf = malloc(size); /* neither: a device's value to disk, or a disk's up to a GPU */
    if (!buf)
        return GKV_ENOMEM;
    int rc = from_disk ? gkv_backend_disk_read_value(from, buf, src, size)
                       : from->ops->read_sync(from, buf, src, size);
    *bad_source = rc && from_disk;
    if (!rc)
        rc = to->ops->write_sync(to, dst, buf, size);
    free(buf);
    return rc;
}

/* A copy of size bytes from device or tier from to to, that took us: counted in stats'
 * down_host_*, up_host_* (between the host tier and a GPU), down_disk_*, up_disk_* (to or from
 * the disk). */
static void count_copy(gkv_store_t *st, unsigned from, unsigned to, uint64_t size, uint64_t us)
{
    uint64_t *bytes = NULL, *time = NULL;
    if (to == GKV_DEV_DISK_TIER) {
        bytes = &st->stats.down_disk_bytes;
        time = &st->stats.down_disk_us;
    } else if (from == GKV_DEV_DISK_TIER) {
        bytes = &st->stats.up_disk_bytes;
        time = &st->stats.up_disk_us;
    } else if (to == GKV_DEV_HOST_TIER && from < GKV_MAX_DEVICES) {
        bytes = &st->stats.down_host_bytes;
        time = &st->stats.down_host_us;
    } else if (from == GKV_DEV_HOST_TIER && to < GKV_MAX_DEVICES) {
        bytes = &st->stats.up_host_bytes;
        time = &st->stats.up_host_us;
    }
    if (bytes) {
        *bytes += size;
        *time += us;
    }
}

/* e's bytes into n's memory (move_bytes), the copy timed (count_copy). */
static int timed_move(gkv_store_t *st, gkv_entry_t *n, gkv_entry_t *e, bool *bad_source)
{
    uint64_t t0 = gkv_clock_us();
    int rc = move_bytes(st, gkv_store_be(st, n), n->mem, gkv_store_be(st, e), e->mem, e->size,
                        bad_source);
    if (!rc)
        count_copy(st, e->dev, n->dev, e->size, gkv_clock_us() - t0);
    return rc;
}

/* Whether e still holds its key as it did when n was made like it (a move in two steps). */
static bool unchanged(gkv_store_t *st, gkv_entry_t *e, const gkv_entry_t *n)
{
    size_t klen;
    const uint8_t *key = gkv_store_key(st, e, &klen);
    return gkv_index_get(st->ix, key, klen) == e && gkv_store_alive(st, e) &&
           gkv__store_has_deadline(e) == gkv__store_has_deadline(n) &&
           (!gkv__store_has_deadline(e) || e->x->expire_at == n->x->expire_at);
}

/* n took e's place in a move in two steps whose copy took us: e's access stamp goes with it,
 * and the move and its copy are counted (a higher tier number is further down). */
static void took_place(gkv_store_t *st, const gkv_entry_t *e, gkv_entry_t *n, uint64_t us)
{
    n->access = e->access;
    if (n->dev > e->dev) {
        st->stats.demoted++;
        st->stats.demoted_bytes += n->size;
    } else {
        st->stats.promoted++;
        st->stats.promoted_bytes += n->size;
    }
    count_copy(st, e->dev, n->dev, n->size, us);
}

/* The disk record of e's next allocation names e's key, metadata and deadline, for a reload. */
static void label(gkv_store_t *st, const gkv_entry_t *e)
{
    size_t klen;
    uint32_t meta_len;
    const uint8_t *key = gkv_store_key(st, e, &klen);
    const uint8_t *meta = gkv_entry_meta(e, &meta_len);
    gkv_backend_disk_label(st->dev[GKV_DEV_DISK_TIER].be, key, (uint32_t)klen, meta, meta_len,
                           gkv__store_has_deadline(e)
                               ? gkv_store_deadline_unix(st, e, gkv_wall_clock_ms())
                               : 0);
}

/* A copy of the linked e (its key, metadata, deadline, bytes) linked in its place on device or
 * tier dev, or NULL with *rc (*bad_source: e's bytes could not be read back from the disk). The
 * new entry keeps e's access stamp; e loses the index's reference (and goes with it unless
 * someone else holds it). */
static gkv_entry_t *move_entry(gkv_store_t *st, gkv_entry_t *e, unsigned dev, int *rc,
                               bool *bad_source)
{
    gkv_entry_t *n;
    *bad_source = false;
    if (dev == GKV_DEV_DISK_TIER)
        label(st, e);
    if ((*rc = gkv__store_entry_like(st, e, dev, GKV_LANE_SHARED, &n)))
        return NULL;
    if ((*rc = timed_move(st, n, e, bad_source)) || (*rc = gkv__store_link(st, n))) {
        if (dev == GKV_DEV_DISK_TIER) /* never linked: never reloaded */
            gkv_backend_disk_retire(st->dev[dev].be, n->mem);
        gkv_store_unref(st, n);
        return NULL;
    }
    n->access = e->access;
    gkv_store_unref(st, n); /* the index holds it now */
    return n;
}

/* e's bytes on the disk cannot be read back: it goes, loudly (never served wrong). */
static void drop_unreadable(gkv_store_t *st, gkv_entry_t *e)
{
    size_t klen;
    const uint8_t *key = gkv_store_key(st, e, &klen);
    GKV_ERROR("disk tier: the value of '%.*s' cannot be read back: the key is dropped",
              (int)(klen > 200 ? 200 : klen), (const char *)key);
    st->stats.tier_dropped++;
    if (gkv_index_get(st->ix, key, klen) == e) {
        gkv__store_changed(st, GKV_EVENT_EVICT, e, 0); /* gone without a delete */
        gkv__store_unlink(st, e);
    }
}

bool gkv__store_demote_one(gkv_store_t *st, unsigned dev)
{
    int to = below(st, dev);
    if (to < 0)
        return false;
    gkv_entry_t *e = gkv__store_pick(st, dev, true);
    if (!e || e->size > st->dev[to].limit)
        return false;
    uint64_t size = e->size;
    int rc;
    bool bad; /* never: nothing moves down from the disk, the last tier */
    gkv_store_ref(e); /* whatever the tier does to make room, e stays */
    gkv_entry_t *n = move_entry(st, e, (unsigned)to, &rc, &bad);
    gkv_store_unref(st, e);
    if (!n)
        return false;
    st->stats.demoted++;
    st->stats.demoted_bytes += size;
    return true;
}

/* e's value moved up to dev (a device, or the host tier from the disk), as gkv_store_promote
 * says. */
static gkv_entry_t *move_up(gkv_store_t *st, gkv_entry_t *e, unsigned dev, int *rc)
{
    /* Held while the device makes room, so that the tiers, making room in turn, keep it; and
     * e's tier may hold e's size more meanwhile: what goes down takes the room e leaves once
     * it is up (a full tier swaps rather than evicts). The tier's backend has that much more
     * memory than its limit (gkv_store_add_tier's caller). */
    gkv_store_dev_t *t = &st->dev[e->dev];
    bool bad;
    gkv_store_ref(e);
    t->limit += e->size;
    gkv_entry_t *n = move_entry(st, e, dev, rc, &bad);
    t->limit -= e->size;
    if (bad) {
        drop_unreadable(st, e);
        *rc = GKV_ENOTFOUND;
    }
    gkv_store_unref(st, e);
    if (!n) {
        if (!bad)
            st->stats.promote_errors++;
        return NULL;
    }
    st->stats.promoted++;
    st->stats.promoted_bytes += n->size;
    return n;
}

/* A move in two steps begins: e is held (no other move picks it, and it stays while copied) and
 * its new entry on dev, unpublished, made in *n with its memory in lane's order. False, e let
 * go again, when the entry cannot be made. */
static bool hold_and_make(gkv_store_t *st, gkv_entry_t *e, unsigned dev, int lane, gkv_entry_t **n)
{
    gkv_store_ref(e);
    if (gkv__store_entry_like(st, e, dev, lane, n)) {
        gkv_store_unref(st, e);
        return false;
    }
    return true;
}

bool gkv_store_demote_begin(gkv_store_t *st, unsigned dev, gkv_entry_t **e, gkv_entry_t **n,
                            bool *tier_full)
{
    *e = *n = NULL;
    *tier_full = false;
    if (dev >= GKV_MAX_DEVICES || !st->host_tier)
        return false;
    gkv_entry_t *v = gkv__store_pick(st, dev, true);
    const gkv_store_dev_t *h = &st->dev[GKV_DEV_HOST_TIER];
    if (!v || v->size > h->limit)
        return false;
    if (st->disk_tier && !gkv_store_dev_fits(h, v->size)) {
        *tier_full = true; /* room made off the loop first */
        return false;
    }
    gkv_entry_t *t;
    if (!hold_and_make(st, v, GKV_DEV_HOST_TIER, GKV_LANE_SHARED, &t))
        return false;
    *e = v;
    *n = t;
    return true;
}

bool gkv_store_demote_end(gkv_store_t *st, gkv_entry_t *e, gkv_entry_t *n, bool ok, uint64_t us)
{
    bool took = ok && unchanged(st, e, n) && gkv_store_copy_end(st, e, n);
    if (took)
        took_place(st, e, n, us);
    gkv_store_unref(st, n); /* the index holds it, or it goes */
    gkv_store_unref(st, e); /* replaced: its GPU memory goes with the last reader */
    return took;
}

bool gkv_store_promote_begin(gkv_store_t *st, gkv_entry_t *e, unsigned dev, int lane,
                             gkv_entry_t **n)
{
    *n = NULL;
    if (e->dev != GKV_DEV_HOST_TIER || dev >= st->ndev)
        return false;
    if (!gkv_store_dev_fits(&st->dev[dev], e->size))
        return false; /* no room is made here: the demoter's moves down make it */
    return hold_and_make(st, e, dev, lane, n);
}

bool gkv_store_disk_move_begin(gkv_store_t *st, bool may_evict, gkv_entry_t **e, gkv_entry_t **n,
                               gkv_disk_write_t **w)
{
    *e = *n = NULL;
    *w = NULL;
    if (!st->host_tier || !st->disk_tier)
        return false;
    gkv_entry_t *v = gkv__store_pick(st, GKV_DEV_HOST_TIER, true);
    const gkv_store_dev_t *disk = &st->dev[GKV_DEV_DISK_TIER];
    if (!v || v->size > disk->limit || (!may_evict && !gkv_store_dev_fits(disk, v->size)))
        return false;
    label(st, v);
    gkv_entry_t *t;
    if (!hold_and_make(st, v, GKV_DEV_DISK_TIER, GKV_LANE_SHARED, &t))
        return false;
    gkv_backend_t *host = st->dev[GKV_DEV_HOST_TIER].be;
    *w = gkv_backend_disk_write_begin(st->dev[GKV_DEV_DISK_TIER].be, t->mem,
                                      host->ops->host_view(host, v->mem), v->size);
    if (!*w) {
        gkv_store_unref(st, t);
        gkv_store_unref(st, v);
        return false;
    }
    *e = v;
    *n = t;
    return true;
}

bool gkv_store_disk_move_end(gkv_store_t *st, gkv_entry_t *e, gkv_entry_t *n, gkv_disk_write_t *w,
                             int rc, uint64_t us)
{
    gkv_backend_t *disk = st->dev[GKV_DEV_DISK_TIER].be;
    gkv_backend_disk_write_end(disk, w, rc);
    /* Live in the file only once it is sure to take the key; linked at once after. */
    bool took = !rc && unchanged(st, e, n) && gkv_backend_disk_make_live(disk, n->mem) == 0;
    if (took && !gkv_store_copy_end(st, e, n)) {
        gkv_backend_disk_retire(disk, n->mem); /* out of memory linking it */
        took = false;
    }
    if (took)
        took_place(st, e, n, us);
    gkv_store_unref(st, n);
    gkv_store_unref(st, e);
    return took;
}

bool gkv_store_disk_fetch_begin(gkv_store_t *st, gkv_entry_t *e, gkv_entry_t **n,
                                gkv_disk_read_t **r)
{
    *n = NULL;
    *r = NULL;
    const gkv_store_dev_t *h = &st->dev[GKV_DEV_HOST_TIER];
    if (e->dev != GKV_DEV_DISK_TIER || !st->host_tier || !gkv_store_dev_fits(h, e->size))
        return false;
    gkv_entry_t *t;
    if (!hold_and_make(st, e, GKV_DEV_HOST_TIER, GKV_LANE_SHARED, &t))
        return false;
    gkv_backend_t *host = h->be;
    *r = gkv_backend_disk_read_begin(st->dev[GKV_DEV_DISK_TIER].be, e->mem,
                                     host->ops->host_view(host, t->mem), e->size);
    if (!*r) {
        gkv_store_unref(st, t);
        gkv_store_unref(st, e);
        return false;
    }
    *n = t;
    return true;
}

bool gkv_store_disk_fetch_end(gkv_store_t *st, gkv_entry_t *e, gkv_entry_t *n, gkv_disk_read_t *r,
                              int rc, uint64_t us)
{
    rc = gkv_backend_disk_read_end(st->dev[GKV_DEV_DISK_TIER].be, r, rc);
    bool took = false;
    if (rc)
        drop_unreadable(st, e); /* only where it still holds its key */
    else if (unchanged(st, e, n))
        took = gkv_store_copy_end(st, e, n);
    if (took)
        took_place(st, e, n, us);
    gkv_store_unref(st, n);
    gkv_store_unref(st, e);
    return took;
}

gkv_entry_t *gkv_store_promote(gkv_store_t *st, gkv_entry_t *e, int *rc)
{
    *rc = 0;
    if (!gkv_store_in_tier(e))
        return e;
    size_t klen;
    const uint8_t *key = gkv_store_key(st, e, &klen);
    return move_up(st, e, gkv_store_place(st, key, klen, e->size), rc);
}

gkv_entry_t *gkv_store_get_readable(gkv_store_t *st, const void *key, size_t klen, int *rc)
{
    gkv_entry_t *e = gkv_store_get(st, key, klen);
    *rc = e ? 0 : GKV_ENOTFOUND;
    if (!e || (e->dev == GKV_DEV_HOST_TIER && !st->promote_on_get))
        return e;
    if (e->dev == GKV_DEV_DISK_TIER && !st->promote_on_get && st->host_tier &&
        e->size <= st->dev[GKV_DEV_HOST_TIER].limit)
        return move_up(st, e, GKV_DEV_HOST_TIER, rc);
    return gkv_store_promote(st, e, rc);
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

void gkv__store_disk_left(gkv_store_t *st, const gkv_entry_t *e)
{
    if (e->dev != GKV_DEV_DISK_TIER || !e->size)
        return;
    struct gkv_limbo l = {.mem = e->mem, .dev = e->dev, .retire = true};
    if (!gkv__store_limbo_push(st, l))
        gkv_backend_disk_retire(st->dev[GKV_DEV_DISK_TIER].be, e->mem);
}

void gkv_store_disk_reload(gkv_store_t *st)
{
    if (!st->disk_tier)
        return;
    gkv_backend_t *be = st->dev[GKV_DEV_DISK_TIER].be;
    const gkv_disk_found_t *found;
    size_t n = gkv_backend_disk_found(be, &found);
    uint64_t now_unix = gkv_wall_clock_ms(), linked = 0, bytes = 0, skipped = 0;
    for (size_t i = 0; i < n; i++) { /* newest first: an older record of a key is skipped */
        const gkv_disk_found_t *f = &found[i];
        gkv_entry_t *e;
        if (gkv_store_find(st, f->key, f->klen) ||
            (f->expire_unix_ms && f->expire_unix_ms <= now_unix)) {
            skipped++;
            continue;
        }
        gkv_backend_disk_adopt_next(be, i);
        int rc = gkv_store_entry_new(st, GKV_DEV_DISK_TIER, f->key, f->klen, f->size, f->meta,
                                     f->mlen, GKV_LANE_SHARED, &e);
        gkv_backend_disk_adopt_next(be, SIZE_MAX); /* unused when the store made no room */
        if (rc == GKV_EOOM) {
            skipped++;
            continue;
        }
        if (rc)
            break;
        if (f->expire_unix_ms)
            rc = gkv_store_entry_ttl(st, e, f->expire_unix_ms - now_unix);
        if (!rc)
            rc = gkv_store_publish(st, e, 0, NULL);
        gkv_store_unref(st, e);
        if (rc)
            break;
        linked++;
        bytes += f->size;
    }
    gkv_backend_disk_found_done(be); /* the rest retired, their space freed */
    if (n)
        GKV_INFO("disk tier: %llu values reloaded (%llu bytes), %llu skipped (newer elsewhere, "
                 "past their deadline, or no room)",
                 (unsigned long long)linked, (unsigned long long)bytes,
                 (unsigned long long)skipped);
    st->stats.disk_reloaded = linked;
}
