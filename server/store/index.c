/* index.c: a hash table of node pointers (linear probing, backward-shift deletion, no
 * tombstones) for lookups, and a radix tree (radix.h) over the same nodes for key order, kept
 * by a helper thread where one runs (order.h). A node is one block:
 * [caller data: prefix bytes][gkv_inode_t][key bytes].
 * Each slot keeps 16 bits of its node's hash in the pointer's top bits, which user-space
 * pointers on Linux (x86-64, arm64: 47- or 48-bit addresses) leave zero, so a probe passes
 * other keys' slots without reading their nodes: one cache miss fewer per slot passed. */
#include "index.h"

#include <stdalign.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "error.h"
#include "hash.h"
#include "order.h"
#include "radix.h"

struct gkv_inode {
    uint32_t hash;
    uint16_t klen;
    uint16_t unused;
    /* then the key */
};

struct gkv_index {
    uintptr_t *slots; /* 0, or a node's address with its tag in bits 48..63 */
    size_t mask, count, node_bytes, prefix;
    uint8_t seed[16];
    uint64_t rng;
    gkv_order_t order; /* a radix tree whose leaves are the nodes (order.h) */
};

#define TAG_SHIFT 48
#define ADDR_MASK (((uintptr_t)1 << TAG_SHIFT) - 1)

/* A slot's tag for hash h: its top 16 bits, never 0. */
static uintptr_t tag_of(uint32_t h)
{
    return ((uintptr_t)(h >> 16) | 0x8000u) << TAG_SHIFT;
}

static gkv_inode_t *slot_node(uintptr_t s)
{
    return (gkv_inode_t *)(s & ADDR_MASK);
}

static uintptr_t slot_for(gkv_inode_t *n)
{
    return (uintptr_t)n | tag_of(n->hash);
}

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

/* The tree of keys, once the helper has applied every change queued (order.h). Waiting changes
 * nothing a caller of the index sees, so the index's const readers wait too. */
static gkv_radix_t *tree(const gkv_index_t *ix)
{
    return gkv_order_read((gkv_order_t *)&ix->order);
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
    gkv_index_t *ix = aligned_alloc(alignof(gkv_index_t), sizeof(*ix)); /* order.h's lines */
    if (!ix)
        return NULL;
    memset(ix, 0, sizeof(*ix));
    ix->prefix = (prefix + 7) & ~(size_t)7;
    ix->mask = 1023;
    ix->slots = calloc(ix->mask + 1, sizeof(*ix->slots));
    if (!ix->slots) {
        free(ix);
        return NULL;
    }
    gkv_order_init(&ix->order, leaf_key);
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
    gkv_radix_clear(tree(ix), drop_leaf, &d);
}

void gkv_index_free(gkv_index_t *ix, void (*drop)(void *, void *), void *arg)
{
    if (!ix)
        return;
    gkv_index_clear(ix, drop, arg);
    gkv_order_fini(&ix->order);
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
    if (block && (uintptr_t)block >> TAG_SHIFT) { /* no room for a tag: never seen on Linux */
        free(block);
        block = NULL;
    }
    if (!block)
        return NULL;
    gkv_inode_t *n = (gkv_inode_t *)(block + ix->prefix);
    n->hash = hash_of(ix, key, klen);
    n->klen = (uint16_t)klen;
    memcpy(node_key(n), key, klen);
    return block;
}

void gkv_inode_free(gkv_index_t *ix, void *data)
{
    gkv_order_free(&ix->order, data);
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
    uintptr_t tag = tag_of(h);
    for (;;) {
        uintptr_t s = ix->slots[i];
        if (!s)
            return i;
        if ((s & ~ADDR_MASK) == tag) {
            const gkv_inode_t *n = slot_node(s);
            if (n->hash == h && n->klen == len && memcmp(node_key(n), key, len) == 0)
                return i;
        }
        i = (i + 1) & ix->mask;
    }
}

/* The slot holding the linked node n. */
static size_t slot_of_node(const gkv_index_t *ix, const gkv_inode_t *n)
{
    size_t i = n->hash & ix->mask;
    while (slot_node(ix->slots[i]) != n)
        i = (i + 1) & ix->mask;
    return i;
}

void *gkv_index_get(const gkv_index_t *ix, const void *key, size_t len)
{
    uintptr_t s = ix->slots[find_slot(ix, key, len, hash_of(ix, key, len))];
    return s ? gkv_inode_val(ix, slot_node(s)) : NULL;
}

static int grow(gkv_index_t *ix)
{
    size_t cap = (ix->mask + 1) * 2;
    uintptr_t *slots = calloc(cap, sizeof(*slots));
    if (!slots)
        return GKV_ENOMEM;
    for (size_t i = 0; i <= ix->mask; i++) {
        gkv_inode_t *n = slot_node(ix->slots[i]);
        if (!n)
            continue;
        size_t j = n->hash & (cap - 1);
        while (slots[j])
            j = (j + 1) & (cap - 1);
        slots[j] = ix->slots[i];
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
    gkv_inode_t *prev = slot_node(ix->slots[slot]);
    *old = NULL;
    if (prev) { /* n takes prev's place in both */
        gkv_order_replace(&ix->order, n);
        ix->node_bytes -= node_size(ix, prev);
        *old = gkv_inode_val(ix, prev);
    } else {
        if ((ix->count + 1) * 4 > (ix->mask + 1) * 3) {
            if (grow(ix))
                return GKV_ENOMEM;
            slot = find_slot(ix, key, n->klen, n->hash);
        }
        gkv_order_insert(&ix->order, n);
        ix->count++;
    }
    ix->slots[slot] = slot_for(n);
    ix->node_bytes += node_size(ix, n);
    return 0;
}

/* Empties slot i and moves later entries of the probe run back so lookups still find them. */
static void slot_remove(gkv_index_t *ix, size_t i)
{
    size_t j = i;
    ix->slots[i] = 0;
    for (;;) {
        j = (j + 1) & ix->mask;
        gkv_inode_t *n = slot_node(ix->slots[j]);
        if (!n)
            return;
        size_t home = n->hash & ix->mask;
        /* n may move to i unless its home lies cyclically in (i, j]. */
        bool stays = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            ix->slots[i] = ix->slots[j];
            ix->slots[j] = 0;
            i = j;
        }
    }
}

void gkv_index_unlink_node(gkv_index_t *ix, void *data)
{
    gkv_inode_t *n = node_of(ix, data);
    gkv_order_remove(&ix->order, n);
    slot_remove(ix, slot_of_node(ix, n));
    ix->count--;
    ix->node_bytes -= node_size(ix, n);
}

size_t gkv_index_sample(gkv_index_t *ix, void **out, size_t n)
{
    if (!ix->count)
        return 0;
    size_t at[16];
    n = n < 16 ? n : 16;
    for (size_t k = 0; k < n; k++) { /* every slot's line requested before any is read */
        at[k] = (size_t)(gkv_xorshift64(&ix->rng) >> 11) & ix->mask;
        __builtin_prefetch(&ix->slots[at[k]]);
    }
    size_t got = 0;
    for (size_t k = 0; k < n; k++) {
        size_t i = at[k];
        for (int probes = 0; probes < 1024 && !ix->slots[i]; probes++)
            i = (i + 1) & ix->mask;
        if (ix->slots[i]) {
            out[got] = gkv_inode_val(ix, slot_node(ix->slots[i]));
            __builtin_prefetch(out[got++]);
        }
    }
    if (!got)
        out[got++] = gkv_inode_val(ix, gkv_radix_seek(tree(ix), (const uint8_t *)"", 0, false));
    return got;
}

int gkv_index_start_helper(gkv_index_t *ix)
{
    return gkv_order_start(&ix->order);
}

void gkv_index_kick(gkv_index_t *ix)
{
    gkv_order_kick(&ix->order);
}

size_t gkv_index_count(const gkv_index_t *ix)
{
    return ix->count;
}

size_t gkv_index_memory(const gkv_index_t *ix)
{
    return ix->node_bytes + tree(ix)->bytes + (ix->mask + 1) * sizeof(*ix->slots);
}

size_t gkv_index_table_memory(const gkv_index_t *ix)
{
    return (ix->mask + 1) * sizeof(*ix->slots);
}

const gkv_inode_t *gkv_index_seek(const gkv_index_t *ix, const void *key, size_t len)
{
    return gkv_radix_seek(tree(ix), key, len, false);
}

const gkv_inode_t *gkv_index_next(const gkv_index_t *ix, const gkv_inode_t *n)
{
    return gkv_radix_seek(tree(ix), node_key(n), n->klen, true);
}

const uint8_t *gkv_inode_key(const gkv_inode_t *n, size_t *len)
{
    *len = n->klen;
    return node_key(n);
}
