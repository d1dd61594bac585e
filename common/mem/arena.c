/* arena.c: free ranges indexed by start and by end (uthash) for O(1) merging, and by size in
 * power-of-two bins (utlist) for allocation. */
#include "arena.h"

#include <stdlib.h>
#include <uthash.h>
#include <utlist.h>

#include "error.h"

#define NBINS 64

typedef struct range {
    uint64_t start, len, end;
    UT_hash_handle hs, he;
    struct range *prev, *next;
} range_t;

struct gkv_arena {
    uint64_t capacity, align, used, nfree;
    range_t *by_start, *by_end;
    range_t *bins[NBINS];
};

static int bin_of(uint64_t len)
{
    return 63 - __builtin_clzll(len);
}

static void range_link(gkv_arena_t *a, range_t *r)
{
    r->end = r->start + r->len;
    HASH_ADD(hs, a->by_start, start, sizeof(uint64_t), r);
    HASH_ADD(he, a->by_end, end, sizeof(uint64_t), r);
    DL_APPEND(a->bins[bin_of(r->len)], r);
    a->nfree++;
}

static void range_unlink(gkv_arena_t *a, range_t *r)
{
    HASH_DELETE(hs, a->by_start, r);
    HASH_DELETE(he, a->by_end, r);
    DL_DELETE(a->bins[bin_of(r->len)], r);
    a->nfree--;
}

int gkv_arena_alloc_init(gkv_arena_t **out, uint64_t capacity, uint64_t align)
{
    if (align == 0 || (align & (align - 1)) || capacity < align)
        return GKV_EINVAL;
    gkv_arena_t *a = calloc(1, sizeof(*a));
    range_t *r = calloc(1, sizeof(*r));
    if (!a || !r) {
        free(a);
        free(r);
        return GKV_ENOMEM;
    }
    a->capacity = capacity - capacity % align;
    a->align = align;
    r->start = 0;
    r->len = a->capacity;
    range_link(a, r);
    *out = a;
    return 0;
}

void gkv_arena_free_all(gkv_arena_t *a)
{
    if (!a)
        return;
    range_t *r, *tmp;
    /* uthash keeps each table's bookkeeping behind its first element: drop the second table
     * while the elements are still alive, then free them through the first. */
    HASH_CLEAR(he, a->by_end);
    HASH_ITER(hs, a->by_start, r, tmp)
    {
        HASH_DELETE(hs, a->by_start, r);
        free(r);
    }
    free(a);
}

static uint64_t round_up(const gkv_arena_t *a, uint64_t size)
{
    return (size + a->align - 1) & ~(a->align - 1);
}

int gkv_arena_alloc(gkv_arena_t *a, uint64_t size, uint64_t *off)
{
    if (size == 0 || size > a->capacity)
        return size ? GKV_EOOM : GKV_EINVAL;
    uint64_t need = round_up(a, size);
    range_t *best = NULL, *r;
    int b = bin_of(need);
    /* In the request's own bin take the tightest fit; any range of a higher bin fits. */
    DL_FOREACH(a->bins[b], r)
    {
        if (r->len >= need && (!best || r->len < best->len))
            best = r;
    }
    for (int i = b + 1; !best && i < NBINS; i++)
        best = a->bins[i];
    if (!best)
        return GKV_EOOM;
    range_unlink(a, best);
    *off = best->start;
    a->used += need;
    if (best->len == need) {
        free(best);
    } else {
        best->start += need;
        best->len -= need;
        range_link(a, best);
    }
    return 0;
}

int gkv_arena_reserve(gkv_arena_t *a, uint64_t off, uint64_t size)
{
    uint64_t need = round_up(a, size), end = a->capacity;
    range_t *tail = NULL;
    HASH_FIND(he, a->by_end, &end, sizeof(uint64_t), tail);
    if (!size || off % a->align || !tail || off < tail->start || need > end - off)
        return GKV_EINVAL;
    range_t *before = NULL;
    if (off > tail->start && !(before = calloc(1, sizeof(*before))))
        return GKV_ENOMEM;
    range_unlink(a, tail);
    if (before) {
        before->start = tail->start;
        before->len = off - tail->start;
        range_link(a, before);
    }
    a->used += need;
    if (off + need == end) {
        free(tail);
    } else {
        tail->start = off + need;
        tail->len = end - tail->start;
        range_link(a, tail);
    }
    return 0;
}

void gkv_arena_free(gkv_arena_t *a, uint64_t off, uint64_t size)
{
    uint64_t len = round_up(a, size);
    range_t *left = NULL, *right = NULL;
    uint64_t end = off + len;
    HASH_FIND(he, a->by_end, &off, sizeof(uint64_t), left);
    HASH_FIND(hs, a->by_start, &end, sizeof(uint64_t), right);
    a->used -= len;
    if (left) {
        range_unlink(a, left);
        left->len += len;
        if (right) {
            range_unlink(a, right);
            left->len += right->len;
            free(right);
        }
        range_link(a, left);
        return;
    }
    if (right) {
        range_unlink(a, right);
        right->start = off;
        right->len += len;
        range_link(a, right);
        return;
    }
    range_t *r = calloc(1, sizeof(*r));
    if (!r) {
        /* Losing track of a range leaks arena space but keeps every value intact. */
        return;
    }
    r->start = off;
    r->len = len;
    range_link(a, r);
}

uint64_t gkv_arena_used(const gkv_arena_t *a)
{
    return a->used;
}

uint64_t gkv_arena_free_ranges(const gkv_arena_t *a)
{
    return a->nfree;
}
