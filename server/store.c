/* store.c: entry lifetime and accounting. */
#include "store.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"

int gkv_store_init(gkv_store_t *st, gkv_backend_t *be, uint64_t limit)
{
    memset(st, 0, sizeof(*st));
    st->ix = gkv_index_alloc(sizeof(gkv_entry_t));
    if (!st->ix)
        return GKV_ENOMEM;
    st->be = be;
    st->limit = limit;
    st->rng = 0x9e3779b97f4a7c15ull;
    return 0;
}

static uint32_t next_random(gkv_store_t *st)
{
    uint64_t x = st->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    st->rng = x;
    return (uint32_t)(x >> 32);
}

/* Unlinks e (linked, used by nothing but the index) and frees it. */
static void evict(gkv_store_t *st, gkv_entry_t *e)
{
    size_t klen;
    const uint8_t *key = gkv_store_key(st, e, &klen);
    gkv_index_unlink(st->ix, key, klen);
    st->linked_bytes -= e->size;
    st->stats.evicted++;
    gkv_store_unref(st, e);
}

/* Evicts the best candidate of a random sample (evict.h); up to 16 samples are drawn while
 * none holds a candidate. False when none was found. */
static bool evict_one(gkv_store_t *st)
{
    if (st->policy == GKV_POLICY_NOEVICTION)
        return false;
    for (int round = 0; round < 16; round++) {
        gkv_entry_t *best = NULL;
        uint64_t best_score = 0;
        for (int i = 0; i < GKV_EVICT_SAMPLES; i++) {
            gkv_entry_t *e = gkv_index_random(st->ix);
            if (!e)
                return false;
            if (e->refs != 1 || !e->size)
                continue; /* leased, in transfer or in a batch; or nothing to free */
            uint64_t score = gkv_access_score(st->policy, e->access, st->now_ms);
            if (!best || score > best_score) {
                best = e;
                best_score = score;
            }
        }
        if (best) {
            evict(st, best);
            return true;
        }
    }
    return false;
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

/* What an entry costs in host memory: itself and its index node (links estimated), the key,
 * the metadata with its header, each with an allocator's overhead. A function of lengths alone,
 * so that the entry's release subtracts exactly what its making added. */
static uint64_t meta_cost(uint32_t meta_len)
{
    return meta_len ? sizeof(gkv_extras_t) + meta_len + 16 : 0;
}

static uint64_t host_cost(size_t klen, uint32_t meta_len)
{
    return sizeof(gkv_entry_t) + 64 + klen + meta_cost(meta_len);
}

static uint32_t entry_meta_len(const gkv_entry_t *e)
{
    return e->x ? e->x->meta_len : 0;
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

int gkv_store_entry_new(gkv_store_t *st, const void *key, size_t klen, uint64_t size,
                        const void *meta, uint32_t meta_len, int lane, gkv_entry_t **out)
{
    while (size > st->limit - st->used)
        if (size > st->limit || !evict_one(st)) {
            st->stats.oom_errors++;
            return GKV_EOOM;
        }
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
        int rc = st->be->ops->alloc(st->be, size, lane, &e->mem);
        while (rc == GKV_EOOM && evict_one(st)) /* the device is full before the limit */
            rc = st->be->ops->alloc(st->be, size, lane, &e->mem);
        if (rc) {
            if (rc == GKV_EOOM)
                st->stats.oom_errors++;
            free(e->x);
            gkv_inode_free(st->ix, e);
            return rc;
        }
    }
    e->size = size;
    e->refs = 1;
    st->used += size;
    st->host_bytes += host_cost(klen, meta_len);
    st->entries++;
    *out = e;
    return 0;
}

int gkv_store_entry_renew(gkv_store_t *st, gkv_entry_t *e, const void *meta, uint32_t meta_len)
{
    gkv_extras_t *x = NULL;
    uint64_t before = meta_cost(entry_meta_len(e)), after = meta_cost(meta_len);
    if (after > before && !host_fits(st, after - before))
        return GKV_ENOMEM;
    if (meta_len) {
        if (!(x = malloc(sizeof(*x) + meta_len)))
            return GKV_ENOMEM;
        memcpy(x->meta, meta, meta_len);
        x->meta_len = meta_len;
    }
    free(e->x);
    e->x = x;
    st->host_bytes += after - before; /* modular: a smaller cost subtracts */
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
    size_t klen;
    gkv_store_key(st, e, &klen);
    st->host_bytes -= host_cost(klen, entry_meta_len(e));
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

/* Links e under its key with the index's reference, dropping the index's reference on the entry
 * it replaces. Returns 0 or GKV_ENOMEM (nothing changed). */
static int link_entry(gkv_store_t *st, gkv_entry_t *e)
{
    void *old;
    gkv_store_ref(e);
    if (gkv_index_link(st->ix, e, &old)) {
        e->refs--;
        return GKV_ENOMEM;
    }
    e->access = gkv_access_new(st->policy, st->now_ms);
    st->linked_bytes += e->size;
    if (old) {
        st->linked_bytes -= ((gkv_entry_t *)old)->size;
        gkv_store_unref(st, old);
    }
    return 0;
}

int gkv_store_publish(gkv_store_t *st, gkv_entry_t *e, unsigned flags, gkv_entry_t **holder)
{
    size_t klen;
    const uint8_t *key = gkv_store_key(st, e, &klen);
    gkv_entry_t *cur = gkv_index_get(st->ix, key, klen);
    if ((flags & GKV_SET_NX) && cur)
        return GKV_EEXISTS;
    if ((flags & GKV_SET_XX) && !cur)
        return GKV_ENOTFOUND;
    if (holder)
        *holder = e;
    if (cur == e)
        return 0; /* already published */
    if (cur && cur->refs == 1) {
        /* Nothing but the index uses the current entry: move the new value into it, in place,
         * and leave the old value with e (freed when its owner lets go). Replacing the node
         * would cost two skip-list searches; this costs none. */
        uint64_t size = cur->size;
        gkv_devptr_t mem = cur->mem;
        gkv_extras_t *x = cur->x;
        st->linked_bytes += e->size - size;
        cur->size = e->size;
        cur->mem = e->mem;
        cur->x = e->x;
        e->size = size;
        e->mem = mem;
        e->x = x;
        cur->access = gkv_access_touch(st->policy, cur->access, st->now_ms, next_random(st));
        if (holder)
            *holder = cur;
        st->stats.sets++;
        return 0;
    }
    if (link_entry(st, e))
        return GKV_ENOMEM;
    st->stats.sets++;
    return 0;
}

gkv_entry_t *gkv_store_get(gkv_store_t *st, const void *key, size_t klen)
{
    gkv_entry_t *e = gkv_index_get(st->ix, key, klen);
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
    gkv_entry_t *e = gkv_index_unlink(st->ix, key, klen);
    if (!e)
        return 0;
    st->stats.dels++;
    st->linked_bytes -= e->size;
    gkv_store_unref(st, e);
    return 1;
}

void gkv_store_flush(gkv_store_t *st)
{
    gkv_index_clear(st->ix, drop_link, st);
    st->linked_bytes = 0;
}

int gkv_store_export(gkv_store_t *st, const gkv_entry_t *e, uint8_t *buf, size_t cap,
                     uint32_t *len)
{
    size_t n = 0;
    int rc = e->size ? st->be->ops->export_ptr(st->be, e->mem, e->size, buf, cap, &n) : 0;
    *len = (uint32_t)n;
    return rc;
}

int gkv_store_clear(gkv_store_t *st, gkv_entry_t *e)
{
    return e->size ? st->be->ops->zero_shared(st->be, e->mem, e->size) : 0;
}

bool gkv_store_exportable(const gkv_store_t *st, const gkv_entry_t *e)
{
    return !e->size || st->be->ops->exportable(st->be, e->mem);
}

int gkv_store_unshare_begin(gkv_store_t *st, gkv_entry_t *e, gkv_entry_t **copy)
{
    size_t klen;
    uint32_t meta_len;
    const uint8_t *key = gkv_store_key(st, e, &klen);
    const uint8_t *meta = gkv_entry_meta(e, &meta_len);
    gkv_entry_t *n;
    int rc = gkv_store_entry_new(st, key, klen, e->size, meta, meta_len, GKV_LANE_SHARED, &n);
    if (rc)
        return rc;
    if ((rc = st->be->ops->copy_shared(st->be, n->mem, e->mem, e->size))) {
        gkv_store_unref(st, n);
        return rc;
    }
    *copy = n;
    return 0;
}

void gkv_store_unshare_end(gkv_store_t *st, gkv_entry_t *e, gkv_entry_t *copy)
{
    size_t klen;
    const uint8_t *key = gkv_store_key(st, e, &klen);
    if (gkv_index_get(st->ix, key, klen) != e)
        return;
    /* Linked as it is, never moved into e in place (publish's shortcut): the caller's lease
     * holds copy's memory, which another process has been told about. */
    (void)link_entry(st, copy); /* out of memory: the key keeps e; the next MAP copies again */
}

uint64_t gkv_store_evictable_bytes(const gkv_store_t *st)
{
    uint64_t bytes = 0;
    for (const gkv_inode_t *n = gkv_index_seek(st->ix, "", 0); n; n = gkv_index_next(n)) {
        const gkv_entry_t *e = gkv_inode_val(st->ix, n);
        if (e->refs == 1)
            bytes += e->size;
    }
    return bytes;
}
