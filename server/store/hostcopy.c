/* hostcopy.c: the host copies of small values; see hostcopy.h. */
#include "hostcopy.h"

#include <stdlib.h>
#include <string.h>

#define MIN_CAP 64u

static uint32_t slot_of(const gkv_hostcopy_t *hc, const void *key)
{
    uint64_t h = ((uint64_t)(uintptr_t)key >> 4) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32) & (hc->cap - 1);
}

static uint64_t table_bytes(uint32_t cap)
{
    return (uint64_t)cap * sizeof(gkv_hostcopy_slot_t);
}

void gkv_hostcopy_init(gkv_hostcopy_t *hc, uint64_t limit, uint64_t max_value)
{
    memset(hc, 0, sizeof(*hc));
    hc->limit = limit;
    hc->max_value = max_value;
    hc->rng = 0x2545F4914F6CDD1Dull;
}

void gkv_hostcopy_fini(gkv_hostcopy_t *hc)
{
    for (uint32_t i = 0; i < hc->cap; i++)
        if (hc->slots[i].key)
            free(hc->slots[i].bytes);
    free(hc->slots);
    hc->slots = NULL;
    hc->cap = hc->count = 0;
    hc->bytes = 0;
}

/* True when a value of len bytes would be kept. */
static bool wants(const gkv_hostcopy_t *hc, uint64_t len)
{
    return len >= GKV_HOSTCOPY_MIN && len <= hc->max_value &&
           len + GKV_HOSTCOPY_OVERHEAD <= hc->limit;
}

/* The slot holding key, or the empty slot that ends its probe. cap must not be 0. */
static uint32_t probe(const gkv_hostcopy_t *hc, const void *key)
{
    uint32_t i = slot_of(hc, key);
    while (hc->slots[i].key && hc->slots[i].key != key)
        i = (i + 1) & (hc->cap - 1);
    return i;
}

/* Empties slot i and closes the gap behind it (backward shift), so probes stay unbroken. */
static void remove_at(gkv_hostcopy_t *hc, uint32_t i)
{
    gkv_hostcopy_slot_t *s = hc->slots;
    hc->bytes -= s[i].len + GKV_HOSTCOPY_OVERHEAD;
    hc->count--;
    free(s[i].bytes);
    uint32_t mask = hc->cap - 1, j = i;
    for (;;) {
        s[i] = (gkv_hostcopy_slot_t){NULL, NULL, 0};
        for (;;) {
            j = (j + 1) & mask;
            if (!s[j].key)
                return;
            uint32_t home = slot_of(hc, s[j].key);
            /* s[j] may move to i unless its home lies cyclically in (i, j]. */
            if (i <= j ? (home <= i || home > j) : (home <= i && home > j))
                break;
        }
        s[i] = s[j];
        i = j;
    }
}

static bool grow(gkv_hostcopy_t *hc)
{
    uint32_t cap = hc->cap ? hc->cap * 2 : MIN_CAP;
    gkv_hostcopy_slot_t *old = hc->slots, *slots = calloc(cap, sizeof(*slots));
    if (!slots)
        return false;
    uint32_t old_cap = hc->cap;
    hc->slots = slots;
    hc->cap = cap;
    for (uint32_t i = 0; i < old_cap; i++)
        if (old[i].key)
            slots[probe(hc, old[i].key)] = old[i];
    free(old);
    hc->bytes += table_bytes(cap) - table_bytes(old_cap);
    return true;
}

/* Drops a copy picked at random (there must be one). */
static void evict_one(gkv_hostcopy_t *hc)
{
    hc->rng ^= hc->rng << 13, hc->rng ^= hc->rng >> 7, hc->rng ^= hc->rng << 17;
    uint32_t i = (uint32_t)hc->rng & (hc->cap - 1);
    while (!hc->slots[i].key)
        i = (i + 1) & (hc->cap - 1);
    remove_at(hc, i);
    hc->evictions++;
}

void gkv_hostcopy_put(gkv_hostcopy_t *hc, const void *key, const void *bytes, uint64_t len)
{
    gkv_hostcopy_drop(hc, key);
    if (!wants(hc, len))
        return;
    uint64_t need = len + GKV_HOSTCOPY_OVERHEAD;
    while (hc->count && hc->bytes + need > hc->limit)
        evict_one(hc);
    if ((uint64_t)(hc->count + 1) * 2 > hc->cap) {
        if (hc->cap && hc->bytes + table_bytes(hc->cap) + need > hc->limit)
            return; /* the table may not grow past the budget: this value is not kept */
        if (!grow(hc))
            return;
    }
    uint8_t *copy = malloc(len);
    if (!copy)
        return;
    memcpy(copy, bytes, len);
    uint32_t i = probe(hc, key);
    hc->slots[i] = (gkv_hostcopy_slot_t){key, copy, len};
    hc->count++;
    hc->bytes += need;
    hc->fills++;
}

const uint8_t *gkv_hostcopy_get(gkv_hostcopy_t *hc, const void *key, uint64_t *len)
{
    if (!hc->count)
        return NULL;
    gkv_hostcopy_slot_t *s = &hc->slots[probe(hc, key)];
    if (!s->key)
        return NULL;
    hc->hits++;
    *len = s->len;
    return s->bytes;
}

void gkv_hostcopy_drop(gkv_hostcopy_t *hc, const void *key)
{
    if (!hc->count)
        return;
    uint32_t i = probe(hc, key);
    if (hc->slots[i].key)
        remove_at(hc, i);
}
