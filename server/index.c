/* index.c: a hash table of node pointers (linear probing, backward-shift deletion, no
 * tombstones) for lookups, and a radix tree (radix.h) over the same nodes for key order. A node
 * is one block: [caller data: prefix bytes][gkv_inode_t][key bytes]. */
#include "index.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "error.h"
#include "hash.h"
#include "radix.h"

struct gkv_inode {
    uint32_t hash;
    uint16_t klen;
    uint16_t unused;
    /* then the key */
};

struct gkv_index {
    gkv_inode_t **slots;
    size_t mask, count, node_bytes, prefix;
    uint8_t seed[16];
    uint64_t rng;
    gkv_radix_t order; /* leaves: the nodes */
};

static uint8_t *node_key(const gkv_inode_t *n)
{
    return (uint8_t *)(n + 1);
}

static size_t node_size(const gkv_index_t *ix, const gkv_inode_t *n)
{
    return ix->prefix + sizeof(gkv_inode_t) + n->klen;
}

static const uint8_t *leaf_key(const void *leaf, size_t *len)
{
    const gkv_inode_t *n = leaf;
    *len = n->klen;
    return node_key(n);
}

static gkv_inode_t *node_of(const gkv_index_t *ix, const void *data)
{
    return (gkv_inode_t *)((uint8_t *)data + ix->prefix);
}

void *gkv_inode_val(const gkv_index_t *ix, const gkv_inode_t *n)
{
    return (uint8_t *)n - ix->prefix;
}

gkv_index_t *gkv_index_alloc(size_t prefix)
{
    gkv_index_t *ix = calloc(1, sizeof(*ix));
    if (!ix)
        return NULL;
    ix->prefix = (prefix + 7) & ~(size_t)7;
    ix->mask = 1023;
    ix->slots = calloc(ix->mask + 1, sizeof(*ix->slots));
    if (!ix->slots) {
        free(ix);
        return NULL;
    }
    gkv_radix_init(&ix->order, leaf_key);
    if (getrandom(ix->seed, sizeof(ix->seed), 0) != sizeof(ix->seed))
        memcpy(ix->seed, "gpukv-fallback!!", 16);
    memcpy(&ix->rng, ix->seed, sizeof(ix->rng));
    ix->rng |= 1;
    return ix;
}

typedef struct {
    const gkv_index_t *ix;
    void (*drop)(void *data, void *arg);
    void *arg;
} drop_ctx_t;

static void drop_leaf(void *leaf, void *arg)
{
    drop_ctx_t *d = arg;
    if (d->drop)
        d->drop(gkv_inode_val(d->ix, leaf), d->arg);
}

void gkv_index_clear(gkv_index_t *ix, void (*drop)(void *, void *), void *arg)
{
    memset(ix->slots, 0, (ix->mask + 1) * sizeof(*ix->slots));
    ix->count = 0;
    ix->node_bytes = 0;
    drop_ctx_t d = {ix, drop, arg};
    gkv_radix_clear(&ix->order, drop_leaf, &d);
}

void gkv_index_free(gkv_index_t *ix, void (*drop)(void *, void *), void *arg)
{
    if (!ix)
        return;
    gkv_index_clear(ix, drop, arg);
    free(ix->slots);
    free(ix);
}

static uint32_t hash_of(const gkv_index_t *ix, const void *key, size_t len)
{
    return (uint32_t)gkv_siphash(key, len, ix->seed);
}

void *gkv_inode_new(gkv_index_t *ix, const void *key, size_t klen)
{
    if (klen > UINT16_MAX)
        return NULL;
    uint8_t *block = calloc(1, ix->prefix + sizeof(gkv_inode_t) + klen);
    if (!block)
        return NULL;
    gkv_inode_t *n = (gkv_inode_t *)(block + ix->prefix);
    n->hash = hash_of(ix, key, klen);
    n->klen = (uint16_t)klen;
    memcpy(node_key(n), key, klen);
    return block;
}

void gkv_inode_free(const gkv_index_t *ix, void *data)
{
    (void)ix;
    free(data);
}

const uint8_t *gkv_inode_data_key(const gkv_index_t *ix, const void *data, size_t *len)
{
    const gkv_inode_t *n = node_of(ix, data);
    *len = n->klen;
    return node_key(n);
}

/* The slot holding key, or the empty slot where it would go. */
static size_t find_slot(const gkv_index_t *ix, const void *key, size_t len, uint32_t h)
{
    size_t i = h & ix->mask;
    for (;;) {
        gkv_inode_t *n = ix->slots[i];
        if (!n || (n->hash == h && n->klen == len && memcmp(node_key(n), key, len) == 0))
            return i;
        i = (i + 1) & ix->mask;
    }
}

void *gkv_index_get(const gkv_index_t *ix, const void *key, size_t len)
{
    gkv_inode_t *n = ix->slots[find_slot(ix, key, len, hash_of(ix, key, len))];
    return n ? gkv_inode_val(ix, n) : NULL;
}

static int grow(gkv_index_t *ix)
{
    size_t cap = (ix->mask + 1) * 2;
    gkv_inode_t **slots = calloc(cap, sizeof(*slots));
    if (!slots)
        return GKV_ENOMEM;
    for (size_t i = 0; i <= ix->mask; i++) {
        gkv_inode_t *n = ix->slots[i];
        if (!n)
            continue;
        size_t j = n->hash & (cap - 1);
        while (slots[j])
            j = (j + 1) & (cap - 1);
        slots[j] = n;
    }
    free(ix->slots);
    ix->slots = slots;
    ix->mask = cap - 1;
    return 0;
}

int gkv_index_link(gkv_index_t *ix, void *data, void **old)
{
    gkv_inode_t *n = node_of(ix, data);
    const uint8_t *key = node_key(n);
    size_t slot = find_slot(ix, key, n->klen, n->hash);
    gkv_inode_t *prev = ix->slots[slot];
    *old = NULL;
    if (prev) { /* n takes prev's place in both */
        gkv_radix_replace(&ix->order, n);
        ix->node_bytes -= node_size(ix, prev);
        *old = gkv_inode_val(ix, prev);
    } else {
        if ((ix->count + 1) * 4 > (ix->mask + 1) * 3) {
            if (grow(ix))
                return GKV_ENOMEM;
            slot = find_slot(ix, key, n->klen, n->hash);
        }
        if (gkv_radix_insert(&ix->order, n))
            return GKV_ENOMEM;
        ix->count++;
    }
    ix->slots[slot] = n;
    ix->node_bytes += node_size(ix, n);
    return 0;
}

/* Empties slot i and moves later entries of the probe run back so lookups still find them. */
static void slot_remove(gkv_index_t *ix, size_t i)
{
    size_t j = i;
    ix->slots[i] = NULL;
    for (;;) {
        j = (j + 1) & ix->mask;
        gkv_inode_t *n = ix->slots[j];
        if (!n)
            return;
        size_t home = n->hash & ix->mask;
        /* n may move to i unless its home lies cyclically in (i, j]. */
        bool stays = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            ix->slots[i] = n;
            ix->slots[j] = NULL;
            i = j;
        }
    }
}

void *gkv_index_unlink(gkv_index_t *ix, const void *key, size_t len)
{
    size_t slot = find_slot(ix, key, len, hash_of(ix, key, len));
    gkv_inode_t *n = ix->slots[slot];
    if (!n)
        return NULL;
    gkv_radix_remove(&ix->order, node_key(n), n->klen);
    slot_remove(ix, slot);
    ix->count--;
    ix->node_bytes -= node_size(ix, n);
    return gkv_inode_val(ix, n);
}

void *gkv_index_random(gkv_index_t *ix)
{
    if (!ix->count)
        return NULL;
    size_t i = (size_t)(gkv_xorshift64(&ix->rng) >> 11) & ix->mask;
    for (int probes = 0; probes < 1024; probes++, i = (i + 1) & ix->mask)
        if (ix->slots[i])
            return gkv_inode_val(ix, ix->slots[i]);
    return gkv_inode_val(ix, gkv_radix_seek(&ix->order, (const uint8_t *)"", 0, false));
}

size_t gkv_index_count(const gkv_index_t *ix)
{
    return ix->count;
}

size_t gkv_index_memory(const gkv_index_t *ix)
{
    return ix->node_bytes + ix->order.bytes + (ix->mask + 1) * sizeof(*ix->slots);
}

size_t gkv_index_table_memory(const gkv_index_t *ix)
{
    return (ix->mask + 1) * sizeof(*ix->slots);
}

const gkv_inode_t *gkv_index_seek(const gkv_index_t *ix, const void *key, size_t len)
{
    return gkv_radix_seek(&ix->order, key, len, false);
}

const gkv_inode_t *gkv_index_next(const gkv_index_t *ix, const gkv_inode_t *n)
{
    return gkv_radix_seek(&ix->order, node_key(n), n->klen, true);
}

const uint8_t *gkv_inode_key(const gkv_inode_t *n, size_t *len)
{
    *len = n->klen;
    return node_key(n);
}
