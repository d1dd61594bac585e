/* lease_cache.c: a connection's lease cache and its later ends; see lease_cache.h. */
#include "lease_cache.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "hash.h"

/* The index: one cached key's slots' mappings, oldest first. It makes a lookup by key cost the
 * same with 4096 cached leases as with 8 (a scan of the array compared every key). */
typedef struct gkv_lc_key {
    UT_hash_handle hh;
    int n;
    gkv_mapping_t *m[GKV_CACHE_PER_KEY];
    uint8_t key[]; /* the hash's key */
} lc_key_t;

void gkv_lc_init(gkv_lease_cache_t *lc)
{
    memset(lc, 0, sizeof(*lc));
    lc->slots = GKV_CACHE_SLOTS;
    lc->max_value = GKV_CACHE_MAX_BYTES;
    pthread_mutex_init(&lc->later_lock, NULL);
}

static void index_clear(gkv_lease_cache_t *lc)
{
    lc_key_t *k, *tmp;
    HASH_ITER(hh, lc->index, k, tmp)
    {
        HASH_DEL(lc->index, k);
        free(k);
    }
}

void gkv_lc_fini(gkv_lease_cache_t *lc)
{
    index_clear(lc);
    free(lc->slot);
    free(lc->later);
    pthread_mutex_destroy(&lc->later_lock);
    memset(lc, 0, sizeof(*lc));
}

static lc_key_t *index_find(const gkv_lease_cache_t *lc, const void *key, size_t klen)
{
    lc_key_t *k;
    HASH_FIND(hh, lc->index, key, klen, k);
    return k;
}

/* Adds m to the index as its key's newest (its key has fewer than GKV_CACHE_PER_KEY). Returns 0
 * or GKV_ENOMEM (nothing added). */
static int index_add(gkv_lease_cache_t *lc, gkv_mapping_t *m, const void *key, size_t klen)
{
    lc_key_t *k = index_find(lc, key, klen);
    if (!k) {
        if (!(k = calloc(1, sizeof(*k) + klen)))
            return GKV_ENOMEM;
        memcpy(k->key, key, klen);
        gkv__hash_oom = 0;
        HASH_ADD_KEYPTR(hh, lc->index, k->key, klen, k);
        if (gkv__hash_oom) {
            free(k);
            return GKV_ENOMEM;
        }
    }
    k->m[k->n++] = m;
    return 0;
}

static void index_remove(gkv_lease_cache_t *lc, const gkv_lc_slot_t *s)
{
    lc_key_t *k = index_find(lc, s->key, s->klen);
    if (!k)
        return;
    int i = 0;
    while (i < k->n && k->m[i] != s->m)
        i++;
    if (i == k->n)
        return;
    memmove(&k->m[i], &k->m[i + 1], (size_t)(k->n - i - 1) * sizeof(k->m[0]));
    if (--k->n == 0) {
        HASH_DEL(lc->index, k);
        free(k);
    }
}

/* The slot of cached mapping m, or -1. */
static int slot_of(const gkv_lease_cache_t *lc, const gkv_mapping_t *m)
{
    for (int i = 0; i < lc->n; i++)
        if (lc->slot[i].m == m)
            return i;
    return -1;
}

/* Takes the mapping in slot i out of the cache. */
static gkv_mapping_t *uncache(gkv_lease_cache_t *lc, int i)
{
    gkv_lc_slot_t s = lc->slot[i];
    memmove(&lc->slot[i], &lc->slot[i + 1], (size_t)(lc->n - i - 1) * sizeof(*lc->slot));
    lc->n--;
    lc->bytes -= s.m->value_size;
    index_remove(lc, &s);
    return s.m;
}

/* Hands the oldest cached leases to end until at most keep remain and `more` bytes more fit
 * under the byte total. Returns 0 or the first end's code. */
static int evict(gkv_lease_cache_t *lc, uint32_t keep, uint64_t more, gkv_lc_end_fn end, void *arg)
{
    int rc = 0;
    while (lc->n &&
           ((uint32_t)lc->n > keep || (lc->max_bytes && lc->bytes + more > lc->max_bytes))) {
        int r = end(arg, uncache(lc, 0));
        rc = rc ? rc : r;
    }
    return rc;
}

int gkv_lc_configure(gkv_lease_cache_t *lc, uint32_t slots, uint64_t max_value, uint64_t max_bytes,
                     gkv_lc_end_fn end, void *arg)
{
    lc->slots = slots;
    lc->max_value = max_value;
    lc->max_bytes = max_bytes;
    return evict(lc, slots, 0, end, arg);
}

bool gkv_lc_wants(const gkv_lease_cache_t *lc, const gkv_mapping_t *m)
{
    return lc->slots && m->value_size <= lc->max_value;
}

int gkv_lc_put(gkv_lease_cache_t *lc, gkv_mapping_t *m, const void *key, size_t klen,
               gkv_lc_end_fn end, void *arg)
{
    int rc = 0;
    if (!lc->slots || (lc->max_bytes && m->value_size > lc->max_bytes))
        return end(arg, m); /* off, or too large: the others stay */
    if (lc->cap < (int)lc->slots) {
        gkv_lc_slot_t *a = realloc(lc->slot, lc->slots * sizeof(*a));
        if (!a)
            return end(arg, m);
        lc->slot = a;
        lc->cap = (int)lc->slots;
    }
    const lc_key_t *k = index_find(lc, key, klen);
    int oldest = k && k->n >= GKV_CACHE_PER_KEY ? slot_of(lc, k->m[0]) : -1;
    if (oldest >= 0)
        rc = end(arg, uncache(lc, oldest));
    int erc = evict(lc, lc->slots - 1, m->value_size, end, arg); /* room for m */
    rc = rc ? rc : erc;
    if (index_add(lc, m, key, klen)) {
        int r = end(arg, m);
        return rc ? rc : r;
    }
    lc->slot[lc->n++] = (gkv_lc_slot_t){m, key, klen};
    lc->bytes += m->value_size;
    return rc;
}

gkv_mapping_t *gkv_lc_read(const gkv_lease_cache_t *lc, const void *key, size_t klen)
{
    const lc_key_t *k = index_find(lc, key, klen);
    for (int i = k ? k->n - 1 : -1; i >= 0; i--)
        if (!k->m[i]->writable)
            return k->m[i];
    return NULL;
}

gkv_mapping_t *gkv_lc_spare(const gkv_lease_cache_t *lc, const void *key, size_t klen,
                            uint64_t size, int gpu)
{
    const lc_key_t *k = index_find(lc, key, klen);
    for (int i = 0; k && i < k->n; i++)
        if (k->m[i]->writable && k->m[i]->value_size == size && (gpu < 0 || k->m[i]->gpu == gpu))
            return k->m[i];
    return NULL;
}

bool gkv_lc_take(gkv_lease_cache_t *lc, gkv_mapping_t *m)
{
    int i = slot_of(lc, m);
    if (i < 0)
        return false;
    uncache(lc, i);
    return true;
}

int gkv_lc_end_key(gkv_lease_cache_t *lc, const void *key, size_t klen, gkv_lc_end_fn end,
                   void *arg)
{
    int rc = 0, i;
    for (lc_key_t *k; (k = index_find(lc, key, klen)) && (i = slot_of(lc, k->m[0])) >= 0;) {
        int r = end(arg, uncache(lc, i));
        rc = rc ? rc : r;
    }
    return rc;
}

int gkv_lc_end_all(gkv_lease_cache_t *lc, gkv_lc_end_fn end, void *arg)
{
    int rc = 0, n = lc->n;
    lc->n = 0;
    lc->bytes = 0;
    index_clear(lc);
    for (int i = 0; i < n; i++) {
        int r = end(arg, lc->slot[i].m);
        rc = rc ? rc : r;
    }
    return rc;
}

int gkv_lc_later(gkv_lease_cache_t *lc, gkv_mapping_t *m)
{
    int rc = 0;
    pthread_mutex_lock(&lc->later_lock);
    if (lc->nlater == lc->later_cap) {
        size_t cap = lc->later_cap ? lc->later_cap * 2 : 8;
        gkv_mapping_t **a = realloc(lc->later, cap * sizeof(*a));
        if (a) {
            lc->later = a;
            lc->later_cap = cap;
        }
    }
    if (lc->nlater < lc->later_cap) {
        lc->later[lc->nlater++] = m;
        lc->later_bytes += m->length;
    } else {
        rc = GKV_ENOMEM;
    }
    pthread_mutex_unlock(&lc->later_lock);
    return rc;
}

bool gkv_lc_later_due(gkv_lease_cache_t *lc)
{
    pthread_mutex_lock(&lc->later_lock);
    bool due = lc->nlater >= GKV_LATER_MAX || lc->later_bytes >= GKV_LATER_BYTES;
    pthread_mutex_unlock(&lc->later_lock);
    return due;
}

size_t gkv_lc_take_later(gkv_lease_cache_t *lc, gkv_mapping_t ***out)
{
    pthread_mutex_lock(&lc->later_lock);
    size_t n = lc->nlater;
    *out = lc->later;
    lc->later = NULL;
    lc->nlater = lc->later_cap = 0;
    lc->later_bytes = 0;
    pthread_mutex_unlock(&lc->later_lock);
    return n;
}
