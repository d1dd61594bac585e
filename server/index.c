/* index.c: hash table of node pointers (linear probing, backward-shift deletion, no tombstones)
 * plus a skip list (p = 1/4) threaded through the same nodes. A node is one block:
 * [caller data: prefix bytes][gkv_inode_t: hash, key length, level, next[level]][key bytes]. */
#include "index.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "error.h"
#include "hash.h"

#define MAX_LEVEL 32

struct gkv_inode {
    uint32_t hash;
    uint16_t klen;
    uint8_t level;
    gkv_inode_t *next[]; /* level pointers, then the key bytes */
};

struct gkv_index {
    gkv_inode_t **slots;
    size_t mask, count, node_bytes, prefix;
    uint8_t seed[16];
    uint64_t rng;
    int level;
    gkv_inode_t *head; /* MAX_LEVEL pointers, no data, no key */
};

static uint8_t *node_key(const gkv_inode_t *n)
{
    return (uint8_t *)&n->next[n->level];
}

static size_t node_size(const gkv_index_t *ix, const gkv_inode_t *n)
{
    return ix->prefix + sizeof(gkv_inode_t) + (size_t)n->level * sizeof(gkv_inode_t *) + n->klen;
}

static gkv_inode_t *node_of(const gkv_index_t *ix, const void *data)
{
    return (gkv_inode_t *)((uint8_t *)data + ix->prefix);
}

void *gkv_inode_val(const gkv_index_t *ix, const gkv_inode_t *n)
{
    return (uint8_t *)n - ix->prefix;
}

static int cmp_keys(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);
    if (c)
        return c;
    return alen < blen ? -1 : alen > blen;
}

gkv_index_t *gkv_index_alloc(size_t prefix)
{
    gkv_index_t *ix = calloc(1, sizeof(*ix));
    if (!ix)
        return NULL;
    ix->prefix = (prefix + 7) & ~(size_t)7;
    ix->mask = 1023;
    ix->slots = calloc(ix->mask + 1, sizeof(*ix->slots));
    ix->head = calloc(1, sizeof(gkv_inode_t) + MAX_LEVEL * sizeof(gkv_inode_t *));
    if (!ix->slots || !ix->head) {
        free(ix->slots);
        free(ix->head);
        free(ix);
        return NULL;
    }
    ix->head->level = MAX_LEVEL;
    ix->level = 1;
    if (getrandom(ix->seed, sizeof(ix->seed), 0) != sizeof(ix->seed))
        memcpy(ix->seed, "gpukv-fallback!!", 16);
    memcpy(&ix->rng, ix->seed, sizeof(ix->rng));
    ix->rng |= 1;
    return ix;
}

void gkv_index_clear(gkv_index_t *ix, void (*drop)(void *, void *), void *arg)
{
    gkv_inode_t *n = ix->head->next[0];
    memset(ix->head->next, 0, MAX_LEVEL * sizeof(gkv_inode_t *));
    memset(ix->slots, 0, (ix->mask + 1) * sizeof(*ix->slots));
    ix->count = 0;
    ix->node_bytes = 0;
    ix->level = 1;
    while (n) {
        gkv_inode_t *next = n->next[0];
        if (drop)
            drop(gkv_inode_val(ix, n), arg);
        n = next;
    }
}

void gkv_index_free(gkv_index_t *ix, void (*drop)(void *, void *), void *arg)
{
    if (!ix)
        return;
    gkv_index_clear(ix, drop, arg);
    free(ix->slots);
    free(ix->head);
    free(ix);
}

static uint32_t hash_of(const gkv_index_t *ix, const void *key, size_t len)
{
    return (uint32_t)gkv_siphash(key, len, ix->seed);
}

static uint64_t next_random(gkv_index_t *ix)
{
    return gkv_xorshift64(&ix->rng);
}

static int random_level(gkv_index_t *ix)
{
    /* Each extra level with probability 1/4. */
    uint64_t x = next_random(ix);
    int level = 1;
    while (level < MAX_LEVEL && (x & 3) == 0) {
        level++;
        x >>= 2;
    }
    return level;
}

void *gkv_inode_new(gkv_index_t *ix, const void *key, size_t klen)
{
    if (klen > UINT16_MAX)
        return NULL;
    int level = random_level(ix);
    size_t bytes = ix->prefix + sizeof(gkv_inode_t) + (size_t)level * sizeof(gkv_inode_t *) + klen;
    uint8_t *block = calloc(1, bytes);
    if (!block)
        return NULL;
    gkv_inode_t *n = (gkv_inode_t *)(block + ix->prefix);
    n->hash = hash_of(ix, key, klen);
    n->klen = (uint16_t)klen;
    n->level = (uint8_t)level;
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

/* Fills pred[i] with the last node before key at each level. */
static void find_preds(const gkv_index_t *ix, const uint8_t *key, size_t len,
                       gkv_inode_t **pred)
{
    gkv_inode_t *x = ix->head;
    for (int i = MAX_LEVEL - 1; i >= 0; i--) {
        if (i >= ix->level) {
            pred[i] = ix->head;
            continue;
        }
        while (x->next[i] && cmp_keys(node_key(x->next[i]), x->next[i]->klen, key, len) < 0)
            x = x->next[i];
        pred[i] = x;
    }
}

static void list_unlink(gkv_index_t *ix, gkv_inode_t *n)
{
    gkv_inode_t *pred[MAX_LEVEL];
    find_preds(ix, node_key(n), n->klen, pred);
    for (int i = 0; i < n->level; i++)
        if (pred[i]->next[i] == n)
            pred[i]->next[i] = n->next[i];
    while (ix->level > 1 && !ix->head->next[ix->level - 1])
        ix->level--;
}

static void list_link(gkv_index_t *ix, gkv_inode_t *n)
{
    gkv_inode_t *pred[MAX_LEVEL];
    find_preds(ix, node_key(n), n->klen, pred);
    if (n->level > ix->level)
        ix->level = n->level;
    for (int i = 0; i < n->level; i++) {
        n->next[i] = pred[i]->next[i];
        pred[i]->next[i] = n;
    }
}

int gkv_index_link(gkv_index_t *ix, void *data, void **old)
{
    gkv_inode_t *n = node_of(ix, data);
    const uint8_t *key = node_key(n);
    size_t slot = find_slot(ix, key, n->klen, n->hash);
    gkv_inode_t *prev = ix->slots[slot];
    *old = NULL;
    if (!prev && (ix->count + 1) * 4 > (ix->mask + 1) * 3) {
        if (grow(ix))
            return GKV_ENOMEM;
        slot = find_slot(ix, key, n->klen, n->hash);
    }
    if (prev) {
        list_unlink(ix, prev);
        ix->node_bytes -= node_size(ix, prev);
        ix->count--;
        *old = gkv_inode_val(ix, prev);
    }
    list_link(ix, n);
    ix->slots[slot] = n;
    ix->count++;
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
    list_unlink(ix, n);
    slot_remove(ix, slot);
    ix->count--;
    ix->node_bytes -= node_size(ix, n);
    return gkv_inode_val(ix, n);
}

void *gkv_index_random(gkv_index_t *ix)
{
    if (!ix->count)
        return NULL;
    size_t i = (size_t)(next_random(ix) >> 11) & ix->mask;
    for (int probes = 0; probes < 1024; probes++, i = (i + 1) & ix->mask)
        if (ix->slots[i])
            return gkv_inode_val(ix, ix->slots[i]);
    return gkv_inode_val(ix, ix->head->next[0]);
}

size_t gkv_index_count(const gkv_index_t *ix)
{
    return ix->count;
}

size_t gkv_index_memory(const gkv_index_t *ix)
{
    return ix->node_bytes + (ix->mask + 1) * sizeof(*ix->slots);
}

size_t gkv_index_table_memory(const gkv_index_t *ix)
{
    return (ix->mask + 1) * sizeof(*ix->slots);
}

const gkv_inode_t *gkv_index_seek(const gkv_index_t *ix, const void *key, size_t len)
{
    gkv_inode_t *pred[MAX_LEVEL];
    find_preds(ix, key, len, pred);
    return pred[0]->next[0];
}

const gkv_inode_t *gkv_index_next(const gkv_inode_t *n)
{
    return n->next[0];
}

const uint8_t *gkv_inode_key(const gkv_inode_t *n, size_t *len)
{
    *len = n->klen;
    return node_key(n);
}
