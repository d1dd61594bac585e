/* store.c: entry lifetime and accounting. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "duration.h"
#include "error.h"
#include "hash.h"
#include "journal.h"
#include "store_impl.h"

int gkv_store_init(gkv_store_t *st, gkv_backend_t *be, uint64_t limit)
{
    memset(st, 0, sizeof(*st));
    st->ix = gkv_index_alloc(sizeof(gkv_entry_t));
    if (!st->ix)
        return GKV_ENOMEM;
    st->rng = 0x9e3779b97f4a7c15ull;
    gkv_hostcopy_init(&st->hc, 0, 0);
    (void)gkv_store_add_device(st, be, limit);
    return 0;
}

int gkv_store_keep_versions(gkv_store_t *st)
{
    if (gkv_index_count(st->ix))
        return GKV_EINVAL;
    gkv_index_t *ix = gkv_index_alloc(sizeof(gkv_entry_t) + sizeof(uint64_t));
    if (!ix)
        return GKV_ENOMEM;
    gkv_index_free(st->ix, NULL, NULL);
    st->ix = ix;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    st->version_base = ((uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000) << 20;
    st->versions = true;
    return 0;
}

int gkv_store_add_device(gkv_store_t *st, gkv_backend_t *be, uint64_t limit)
{
    if (st->ndev == GKV_MAX_DEVICES)
        return GKV_EINVAL;
    st->dev[st->ndev] = (gkv_store_dev_t){.be = be, .limit = limit};
    st->limit += limit;
    return (int)st->ndev++;
}

gkv_backend_t *gkv_store_be(const gkv_store_t *st, const gkv_entry_t *e)
{
    return st->dev[e->dev].be;
}

/* A linked entry's value joins (sign 1) or leaves (-1) its device's linked figures. */
static void count_linked(gkv_store_t *st, const gkv_entry_t *e, int sign)
{
    gkv_store_dev_t *d = &st->dev[e->dev];
    uint64_t bytes = sign > 0 ? e->size : -(uint64_t)e->size; /* modular, in 64 bits */
    d->linked_bytes += bytes;
    st->linked_bytes += bytes;
    d->keys += (uint64_t)(int64_t)sign;
}

unsigned gkv_store_place(gkv_store_t *st, const void *key, size_t klen, uint64_t size)
{
    if (st->ndev == 1)
        return 0;
    const gkv_entry_t *cur = gkv_index_get(st->ix, key, klen);
    if (cur && !gkv_store_in_tier(cur)) {
        const gkv_store_dev_t *d = &st->dev[cur->dev];
        bool evicts = st->policy != GKV_POLICY_NOEVICTION;
        if (size <= d->limit - d->used || (evicts && size <= d->limit))
            return cur->dev;
    }
    unsigned best = 0;
    for (unsigned i = 1; i < st->ndev; i++)
        if (st->dev[i].limit - st->dev[i].used > st->dev[best].limit - st->dev[best].used)
            best = i;
    return best;
}

static uint32_t next_random(gkv_store_t *st)
{
    return (uint32_t)(gkv_xorshift64(&st->rng) >> 32);
}

/* Unlinks the linked entry e and drops the index's reference. */
void gkv__store_unlink(gkv_store_t *st, gkv_entry_t *e)
{
    if (st->journal)
        gkv__store_journal_del(st, e);
    gkv_index_unlink_node(st->ix, e);
    if (gkv__store_has_deadline(e))
        gkv_ttl_remove(&st->ttl, e);
    count_linked(st, e, -1);
    gkv__store_disk_left(st, e); /* after the journal's record that the key is gone */
    gkv_store_unref(st, e);
}

void gkv__store_evict(gkv_store_t *st, gkv_entry_t *e)
{
    st->stats.evicted++;
    gkv__store_changed(st, GKV_EVENT_EVICT, e, 0);
    gkv__store_unlink(st, e);
}

#define EVICT_SCAN 65536u /* keys looked at when sampling found no candidate */

/* How much e deserves eviction to make room on device dev under the store's policy, or 0 when
 * it is no candidate: leased, in transfer or in a batch (refs > 1), holding no memory, or on
 * another device. */
static uint64_t candidate_score(const gkv_store_t *st, const gkv_entry_t *e, unsigned dev,
                                gkv_policy_t policy)
{
    if (e->refs != 1 || !e->size || e->dev != dev)
        return 0;
    if (policy == GKV_POLICY_VOLATILE_TTL)
        return UINT64_MAX - e->x->expire_at;
    return 1 + gkv_access_score(policy, e->access, st->now_ms);
}

/* Keeps e in *best when it is a better candidate than the one there (scored *best_score). */
static void consider(const gkv_store_t *st, unsigned dev, gkv_policy_t policy, gkv_entry_t *e,
                     gkv_entry_t **best, uint64_t *best_score)
{
    uint64_t score = candidate_score(st, e, dev, policy);
    if (score > *best_score) {
        *best = e;
        *best_score = score;
    }
}

/* The best candidate of a random sample (evict.h); up to 16 samples are drawn while none holds
 * a candidate, then every key (or every key with a deadline, up to EVICT_SCAN) is looked at, so
 * that OOM means that nothing is evictable. Only values on device dev are candidates. */
gkv_entry_t *gkv__store_pick(gkv_store_t *st, unsigned dev, bool any)
{
    gkv_policy_t policy = st->policy;
    if (any && policy != GKV_POLICY_ALLKEYS_LFU)
        policy = GKV_POLICY_ALLKEYS_LRU; /* to demote: every key, least recently used first */
    else if (policy == GKV_POLICY_NOEVICTION)
        return NULL;
    bool vol = gkv_policy_volatile(policy);
    gkv_entry_t *best = NULL;
    uint64_t best_score = 0;
    for (int round = 0; round < 16 && !best; round++) {
        void *pick[GKV_EVICT_SAMPLES];
        size_t n = GKV_EVICT_SAMPLES;
        if (vol) {
            for (size_t i = 0; i < n; i++)
                if (!(pick[i] = gkv_ttl_random(&st->ttl, next_random(st))))
                    return NULL;
        } else if (!(n = gkv_index_sample(st->ix, pick, n))) {
            return NULL;
        }
        for (size_t i = 0; i < n; i++)
            consider(st, dev, policy, pick[i], &best, &best_score);
    }
    /* Most keys are held: look at every one, up to EVICT_SCAN (a bound on what one SET may
     * cost the loop). */
    if (!best && vol) {
        for (uint32_t i = 0; i < st->ttl.n && i < EVICT_SCAN; i++)
            consider(st, dev, policy, st->ttl.v[i], &best, &best_score);
    } else if (!best) {
        uint32_t looked = 0;
        for (const gkv_inode_t *n = gkv_index_seek(st->ix, "", 0); n && looked++ < EVICT_SCAN;
             n = gkv_index_next(st->ix, n))
            consider(st, dev, policy, gkv_inode_val(st->ix, n), &best, &best_score);
    }
    return best;
}

/* Evicts the policy's best candidate on dev. False when nothing is one. */
static bool evict_one(gkv_store_t *st, unsigned dev)
{
    gkv_entry_t *e = gkv__store_pick(st, dev, false);
    if (e)
        gkv__store_evict(st, e);
    return e != NULL;
}

/* Room for a new value on dev: a cache copy of the layer above first, then a move to the tier
 * below dev (tier.c), then the policy's eviction. */
static bool make_room(gkv_store_t *st, unsigned dev)
{
    if (st->reclaim && st->reclaim(st->reclaim_arg, dev))
        return true;
    for (int pass = 0;; pass++) {
        if (gkv__store_demote_one(st, dev) || evict_one(st, dev))
            return true;
        /* Every candidate may be held by copies that have run, whose completion the loop has
         * not taken yet: once they let go, look again. */
        if (pass || !st->release || !st->release(st->release_arg, dev))
            return false;
    }
}

static void drop_link(void *val, void *arg)
{
    gkv_store_unref(arg, val);
}

void gkv_store_fini(gkv_store_t *st)
{
    st->ttl.n = 0; /* every member is dropped with the index */
    gkv_index_free(st->ix, drop_link, st);
    st->ix = NULL;
    gkv_ttl_free(&st->ttl);
    gkv_hostcopy_fini(&st->hc);
    gkv__store_tier_fini(st);
    st->journal = NULL;
    gkv_store_journal_committed(st); /* everything held back */
    free(st->limbo);
    st->limbo = NULL;
    st->limbo_cap = 0;
}

/* What an entry costs in host memory: itself and its index node (links estimated), the key,
 * the metadata with its header, each with an allocator's overhead. A function of lengths alone,
 * so that the entry's release subtracts exactly what its making added. */
static uint64_t extras_size(uint32_t meta_len)
{
    return sizeof(gkv_extras_t) + meta_len + 16;
}

/* An entry with a klen-byte key and meta_len bytes of metadata (extras only with metadata). */
static uint64_t host_cost(size_t klen, uint32_t meta_len)
{
    return sizeof(gkv_entry_t) + 64 + klen + (meta_len ? extras_size(meta_len) : 0);
}

/* What e's extras cost: metadata, or a deadline alone (extras without metadata). */
static uint64_t extras_cost(const gkv_extras_t *x)
{
    return x ? extras_size(x->meta_len) : 0;
}

uint64_t gkv_store_host_memory(const gkv_store_t *st)
{
    return st->host_bytes + gkv_index_table_memory(st->ix);
}

/* True when extra more host bytes stay within host_limit. */
static bool host_fits(const gkv_store_t *st, uint64_t extra)
{
    return !st->host_limit || gkv_store_host_memory(st) + extra <= st->host_limit;
}

bool gkv_store_host_room(const gkv_store_t *st, size_t klen, uint32_t meta_len)
{
    return host_fits(st, host_cost(klen, meta_len));
}

/* A new value on d was refused for want of room. */
static int oom(gkv_store_t *st, gkv_store_dev_t *d)
{
    st->stats.oom_errors++;
    d->oom_errors++;
    return GKV_EOOM;
}

int gkv_store_entry_new(gkv_store_t *st, unsigned dev, const void *key, size_t klen, uint64_t size,
                        const void *meta, uint32_t meta_len, int lane, gkv_entry_t **out)
{
    gkv_store_dev_t *d = &st->dev[dev];
    if (size >> 56) /* beyond what an entry records (no device limit comes near it) */
        return oom(st, d);
    while (size > d->limit - d->used)
        if (size > d->limit || !make_room(st, dev))
            return oom(st, d);
    if (!gkv_store_host_room(st, klen, meta_len))
        return GKV_ENOMEM;
    gkv_entry_t *e = gkv_inode_new(st->ix, key, klen);
    if (!e)
        return GKV_ENOMEM;
    if (meta_len) {
        e->x = calloc(1, sizeof(gkv_extras_t) + meta_len);
        if (!e->x) {
            gkv_inode_free(st->ix, e);
            return GKV_ENOMEM;
        }
        memcpy(e->x->meta, meta, meta_len);
        e->x->meta_len = meta_len;
    }
    if (size) {
        int rc = d->be->ops->alloc(d->be, size, lane, &e->mem);
        while (rc == GKV_EOOM && make_room(st, dev)) /* the device is full before the limit */
            rc = d->be->ops->alloc(d->be, size, lane, &e->mem);
        if (rc) {
            if (rc == GKV_EOOM)
                (void)oom(st, d);
            free(e->x);
            gkv_inode_free(st->ix, e);
            return rc;
        }
    }
    e->size = size;
    e->refs = 1;
    e->dev = (uint8_t)dev;
    d->used += size;
    if (dev < GKV_MAX_DEVICES) /* the store's totals are the devices' */
        st->used += size;
    st->host_bytes += host_cost(klen, 0) + extras_cost(e->x);
    st->entries++;
    *out = e;
    return 0;
}

/* Gives e extras holding meta (borrowed) and the deadline expire_at, or none when both are
 * empty; e is not in the TTL heap. Returns 0 or GKV_ENOMEM (e unchanged). */
int gkv__store_set_extras(gkv_store_t *st, gkv_entry_t *e, const void *meta, uint32_t meta_len,
                          uint64_t expire_at)
{
    gkv_extras_t *x = NULL;
    if (meta_len || expire_at) {
        if (!(x = calloc(1, sizeof(*x) + meta_len)))
            return GKV_ENOMEM;
        if (meta_len)
            memcpy(x->meta, meta, meta_len);
        x->meta_len = meta_len;
        x->expire_at = expire_at;
    }
    uint64_t before = extras_cost(e->x), after = extras_cost(x);
    if (after > before && !host_fits(st, after - before)) {
        free(x);
        return GKV_ENOMEM;
    }
    free(e->x);
    e->x = x;
    st->host_bytes += after - before; /* modular: a smaller cost subtracts */
    return 0;
}

int gkv_store_entry_renew(gkv_store_t *st, gkv_entry_t *e, const void *meta, uint32_t meta_len)
{
    return gkv__store_set_extras(st, e, meta, meta_len, e->x ? e->x->expire_at : 0);
}

int gkv_store_entry_reset(gkv_store_t *st, gkv_entry_t *e)
{
    gkv_hostcopy_drop(&st->hc, e); /* its memory takes a new value next */
    return gkv__store_set_extras(st, e, NULL, 0, 0);
}

int gkv_store_entry_ttl(gkv_store_t *st, gkv_entry_t *e, uint64_t ttl_ms)
{
    uint32_t meta_len;
    const uint8_t *meta = gkv_entry_meta(e, &meta_len);
    return gkv__store_set_extras(st, e, meta, meta_len, st->now_ms + ttl_ms);
}

void gkv_store_ref(gkv_entry_t *e)
{
    e->refs++;
}

void gkv__store_free_memory(gkv_store_t *st, unsigned dev, gkv_devptr_t mem, uint64_t size)
{
    gkv_store_dev_t *d = &st->dev[dev];
    if (size)
        d->be->ops->free(d->be, mem, size, 0);
    d->used -= size;
    if (dev < GKV_MAX_DEVICES)
        st->used -= size;
}

void gkv_store_unref(gkv_store_t *st, gkv_entry_t *e)
{
    if (--e->refs)
        return;
    gkv_hostcopy_drop(&st->hc, e);
    if (!gkv__store_into_limbo(st, e))
        gkv__store_free_memory(st, e->dev, e->mem, e->size);
    size_t klen;
    gkv_store_key(st, e, &klen);
    st->host_bytes -= host_cost(klen, 0) + extras_cost(e->x);
    st->entries--;
    free(e->x);
    gkv_inode_free(st->ix, e);
}

const uint8_t *gkv_store_key(const gkv_store_t *st, const gkv_entry_t *e, size_t *len)
{
    return gkv_inode_data_key(st->ix, e, len);
}

const uint8_t *gkv_entry_meta(const gkv_entry_t *e, uint32_t *len)
{
    *len = e->x ? e->x->meta_len : 0;
    return *len ? e->x->meta : NULL;
}

/* Links e under its key with the index's reference (and e's deadline in the TTL heap),
 * dropping the index's reference on the entry it replaces. Returns 0 or GKV_ENOMEM (nothing
 * changed). */
int gkv__store_link(gkv_store_t *st, gkv_entry_t *e)
{
    void *old;
    if (gkv__store_has_deadline(e) && gkv_ttl_add(&st->ttl, e))
        return GKV_ENOMEM;
    gkv_store_ref(e);
    if (gkv_index_link(st->ix, e, &old)) {
        e->refs--;
        if (gkv__store_has_deadline(e))
            gkv_ttl_remove(&st->ttl, e);
        return GKV_ENOMEM;
    }
    e->access = gkv_access_new(st->policy, st->now_ms);
    count_linked(st, e, 1);
    gkv__store_journal_put(st, e);
    if (old) {
        gkv_entry_t *o = old;
        if (gkv__store_has_deadline(o))
            gkv_ttl_remove(&st->ttl, o);
        count_linked(st, o, -1);
        gkv__store_disk_left(st, o); /* after e's record in the journal */
        gkv_store_unref(st, o);
    }
    return 0;
}

int gkv_store_publish(gkv_store_t *st, gkv_entry_t *e, unsigned flags, gkv_entry_t **holder)
{
    size_t klen;
    const uint8_t *key = gkv_store_key(st, e, &klen);
    gkv_entry_t *cur = gkv_store_find(st, key, klen);
    if ((flags & GKV_SET_NX) && cur)
        return GKV_EEXISTS;
    if ((flags & GKV_SET_XX) && !cur)
        return GKV_ENOTFOUND;
    if (holder)
        *holder = e;
    if (cur == e)
        return 0; /* already published */
    if (cur && cur->refs == 1 && !(flags & GKV_PUBLISH_LINK)) {
        /* Nothing but the index uses the current entry: move the new value into it, in place,
         * and leave the old value with e (freed when its owner lets go). Replacing the node
         * would cost a walk down the radix tree and a hash lookup; this costs none. The deadline
         * moves with the value: the old one leaves the TTL heap, the new one (if any) joins it. */
        if (gkv__store_has_deadline(e) && gkv_ttl_reserve(&st->ttl))
            return GKV_ENOMEM;
        if (gkv__store_has_deadline(cur))
            gkv_ttl_remove(&st->ttl, cur);
        gkv_hostcopy_drop(&st->hc, cur); /* its bytes change */
        uint64_t size = cur->size;
        gkv_devptr_t mem = cur->mem;
        gkv_extras_t *x = cur->x;
        uint8_t dev = cur->dev;
        count_linked(st, cur, -1);
        cur->size = e->size;
        cur->mem = e->mem;
        cur->x = e->x;
        cur->dev = e->dev;
        count_linked(st, cur, 1);
        e->size = size;
        e->mem = mem;
        e->x = x;
        e->dev = dev;
        cur->access = gkv_access_touch(st->policy, cur->access, st->now_ms, next_random(st));
        if (gkv__store_has_deadline(cur))
            (void)gkv_ttl_add(&st->ttl, cur); /* room was reserved above: cannot fail */
        gkv__store_journal_put(st, cur);
        /* Only now may a disk record of the old value be retired: retired before the journal
         * names the new value, a crash between the two would lose the key. */
        gkv__store_disk_left(st, e);
        if (holder)
            *holder = cur;
        st->stats.sets++;
        gkv__store_changed(st, GKV_EVENT_SET, cur, cur->size);
        return 0;
    }
    if (gkv__store_link(st, e))
        return GKV_ENOMEM;
    st->stats.sets++;
    gkv__store_changed(st, GKV_EVENT_SET, e, e->size);
    return 0;
}

bool gkv_store_alive(const gkv_store_t *st, const gkv_entry_t *e)
{
    return !gkv__store_has_deadline(e) || e->x->expire_at > st->now_ms;
}

/* e is linked and past its deadline: it goes. */
void gkv__store_expire_one(gkv_store_t *st, gkv_entry_t *e)
{
    st->stats.expired++;
    gkv__store_changed(st, GKV_EVENT_EXPIRE, e, 0);
    gkv__store_unlink(st, e);
}

gkv_entry_t *gkv_store_find(gkv_store_t *st, const void *key, size_t klen)
{
    gkv_entry_t *e = gkv_index_get(st->ix, key, klen);
    if (e && !gkv_store_alive(st, e)) {
        gkv__store_expire_one(st, e);
        return NULL;
    }
    return e;
}

gkv_entry_t *gkv_store_get(gkv_store_t *st, const void *key, size_t klen)
{
    gkv_entry_t *e = gkv_store_find(st, key, klen);
    if (e) {
        st->stats.hits++;
        e->access = gkv_access_touch(st->policy, e->access, st->now_ms, next_random(st));
    } else {
        st->stats.misses++;
    }
    return e;
}

int gkv_store_del(gkv_store_t *st, const void *key, size_t klen)
{
    gkv_entry_t *e = gkv_store_find(st, key, klen);
    if (!e)
        return 0;
    st->stats.dels++;
    gkv__store_changed(st, GKV_EVENT_DELETE, e, 0);
    gkv__store_unlink(st, e);
    return 1;
}

/* A flushed key's value goes; one in the disk tier leaves its record retired. */
static void drop_flushed(void *val, void *arg)
{
    gkv__store_disk_left(arg, val);
    gkv_store_unref(arg, val);
}

void gkv_store_flush(gkv_store_t *st)
{
    st->ttl.n = 0; /* every member is unlinked below */
    if (st->journal)
        (void)gkv_journal_flush(st->journal);
    gkv_index_clear(st->ix, drop_flushed, st);
    st->linked_bytes = 0;
    for (unsigned i = 0; i < st->ndev; i++)
        st->dev[i].linked_bytes = st->dev[i].keys = 0;
    for (unsigned i = GKV_DEV_HOST_TIER; i <= GKV_DEV_DISK_TIER; i++)
        st->dev[i].linked_bytes = st->dev[i].keys = 0;
    st->changes++;
    if (st->listeners && st->changed)
        st->changed(st->changed_arg, GKV_EVENT_FLUSH, NULL, 0, 0, st->changes, 0);
}
