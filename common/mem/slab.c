/* slab.c: size classes, pages and regions; see slab.h. */
#include "slab.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"

#define PAGES (GKV_SLAB_REGION / GKV_SLAB_PAGE) /* 64: one bit each in a region's mask */
#define MAX_CLASSES 48

typedef struct region region_t;

typedef struct page {
    region_t *region;
    uint64_t *bits;            /* 1 = free slot; NULL while the page belongs to no class */
    struct page *prev, *next;  /* the class's pages with free slots */
    uint32_t nfree, hint;      /* free slots; the first word that may hold one */
    int cls;                   /* -1: unassigned */
} page_t;

struct region {
    uint64_t base;
    uint64_t free_mask; /* bit i: page i is unassigned */
    gkv_slab_note_t note;
    page_t pages[PAGES];
};

typedef struct {
    uint32_t size, nslots;
    page_t *partial;
} class_t;

struct gkv_slab {
    gkv_slab_backing_t backing;
    class_t classes[MAX_CLASSES];
    int nclasses;
    region_t **regions; /* sorted by base */
    uint32_t nregions, cap;
    uint64_t used;
};

#define ALL_PAGES (PAGES == 64 ? ~0ull : ((1ull << PAGES) - 1))

int gkv_slab_alloc_init(gkv_slab_t **out, const gkv_slab_backing_t *backing)
{
    gkv_slab_t *s = calloc(1, sizeof(*s));
    if (!s)
        return GKV_ENOMEM;
    s->backing = *backing;
    /* 64, 80, 112, 144, ... each about 1.25x the last, 16-byte multiples, up to the maximum. */
    for (uint32_t size = 64; s->nclasses < MAX_CLASSES; size = ((size * 5 / 4) + 15) & ~15u) {
        if (size > GKV_SLAB_MAX)
            size = GKV_SLAB_MAX;
        s->classes[s->nclasses].size = size;
        s->classes[s->nclasses++].nslots = GKV_SLAB_PAGE / size;
        if (size == GKV_SLAB_MAX)
            break;
    }
    *out = s;
    return 0;
}

void gkv_slab_free_all(gkv_slab_t *s)
{
    if (!s)
        return;
    for (uint32_t i = 0; i < s->nregions; i++) {
        region_t *r = s->regions[i];
        for (int p = 0; p < (int)PAGES; p++)
            free(r->pages[p].bits);
        s->backing.region_free(s->backing.ctx, r->base, GKV_SLAB_REGION);
        free(r);
    }
    free(s->regions);
    free(s);
}

static int class_of(const gkv_slab_t *s, uint64_t size)
{
    int lo = 0, hi = s->nclasses - 1; /* the first class with size >= the request */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (s->classes[mid].size >= size)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* The index of the region holding addr, or -1. */
static int region_index(const gkv_slab_t *s, uint64_t addr)
{
    int lo = 0, hi = (int)s->nregions - 1, found = -1;
    while (lo <= hi) { /* the last region with base <= addr */
        int mid = (lo + hi) / 2;
        if (s->regions[mid]->base <= addr) {
            found = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    if (found >= 0 && addr - s->regions[found]->base >= GKV_SLAB_REGION)
        found = -1;
    return found;
}

static void list_push(class_t *c, page_t *p)
{
    p->prev = NULL;
    p->next = c->partial;
    if (c->partial)
        c->partial->prev = p;
    c->partial = p;
}

static void list_remove(class_t *c, page_t *p)
{
    if (p->prev)
        p->prev->next = p->next;
    else
        c->partial = p->next;
    if (p->next)
        p->next->prev = p->prev;
    p->prev = p->next = NULL;
}

static int add_region(gkv_slab_t *s, region_t **out)
{
    if (s->nregions == s->cap) {
        uint32_t cap = s->cap ? s->cap * 2 : 16;
        region_t **grown = realloc(s->regions, cap * sizeof(*grown));
        if (!grown)
            return GKV_ENOMEM;
        s->regions = grown;
        s->cap = cap;
    }
    region_t *r = calloc(1, sizeof(*r));
    if (!r)
        return GKV_ENOMEM;
    int rc = s->backing.region_new(s->backing.ctx, GKV_SLAB_REGION, &r->base);
    if (rc) {
        free(r);
        return rc;
    }
    r->free_mask = ALL_PAGES;
    for (int p = 0; p < (int)PAGES; p++) {
        r->pages[p].region = r;
        r->pages[p].cls = -1;
    }
    uint32_t at = s->nregions;
    while (at > 0 && s->regions[at - 1]->base > r->base) {
        s->regions[at] = s->regions[at - 1];
        at--;
    }
    s->regions[at] = r;
    s->nregions++;
    *out = r;
    return 0;
}

/* Gives class cls a fresh page, from a region with one unassigned or a new region. */
static int take_page(gkv_slab_t *s, int cls)
{
    class_t *c = &s->classes[cls];
    region_t *r = NULL;
    for (uint32_t i = 0; i < s->nregions && !r; i++)
        if (s->regions[i]->free_mask)
            r = s->regions[i];
    int rc;
    if (!r && (rc = add_region(s, &r)))
        return rc;
    int idx = __builtin_ctzll(r->free_mask);
    page_t *p = &r->pages[idx];
    uint32_t words = (c->nslots + 63) / 64;
    p->bits = malloc(words * sizeof(uint64_t));
    if (!p->bits)
        return GKV_ENOMEM;
    memset(p->bits, 0xff, words * sizeof(uint64_t));
    if (c->nslots % 64)
        p->bits[words - 1] = (1ull << (c->nslots % 64)) - 1;
    r->free_mask &= ~(1ull << idx);
    p->cls = cls;
    p->nfree = c->nslots;
    p->hint = 0;
    list_push(c, p);
    return 0;
}

int gkv_slab_get(gkv_slab_t *s, uint64_t size, uint64_t *addr)
{
    if (size == 0 || size > GKV_SLAB_MAX)
        return GKV_EINVAL;
    int cls = class_of(s, size);
    class_t *c = &s->classes[cls];
    int rc;
    if (!c->partial && (rc = take_page(s, cls)))
        return rc;
    page_t *p = c->partial;
    uint32_t w = p->hint;
    while (!p->bits[w])
        w++; /* nfree > 0 and no free slot lies before the hint */
    uint32_t bit = (uint32_t)__builtin_ctzll(p->bits[w]);
    p->bits[w] &= ~(1ull << bit);
    p->hint = w;
    if (--p->nfree == 0)
        list_remove(c, p);
    uint32_t slot = w * 64 + bit;
    uint32_t idx = (uint32_t)(p - p->region->pages);
    *addr = p->region->base + (uint64_t)idx * GKV_SLAB_PAGE + (uint64_t)slot * c->size;
    s->used += c->size;
    return 0;
}

/* Returns region i to the backing. */
static void drop_region(gkv_slab_t *s, int i)
{
    region_t *r = s->regions[i];
    s->backing.region_free(s->backing.ctx, r->base, GKV_SLAB_REGION);
    free(r);
    memmove(&s->regions[i], &s->regions[i + 1], (s->nregions - (uint32_t)i - 1) * sizeof(*s->regions));
    s->nregions--;
}

void gkv_slab_put(gkv_slab_t *s, uint64_t addr, uint64_t size)
{
    (void)size;
    int ri = region_index(s, addr);
    if (ri < 0)
        return; /* not ours: a caller bug, but never corrupt the tables for it */
    region_t *r = s->regions[ri];
    uint32_t idx = (uint32_t)((addr - r->base) / GKV_SLAB_PAGE);
    page_t *p = &r->pages[idx];
    if (p->cls < 0)
        return;
    class_t *c = &s->classes[p->cls];
    uint32_t slot = (uint32_t)((addr - r->base - (uint64_t)idx * GKV_SLAB_PAGE) / c->size);
    uint32_t w = slot / 64;
    p->bits[w] |= 1ull << (slot % 64);
    if (w < p->hint)
        p->hint = w;
    if (p->nfree++ == 0)
        list_push(c, p);
    s->used -= c->size;
    if (p->nfree < c->nslots)
        return;
    /* The page is empty: any class may have it now. */
    list_remove(c, p);
    free(p->bits);
    p->bits = NULL;
    p->cls = -1;
    r->free_mask |= 1ull << idx;
    if (r->free_mask == ALL_PAGES && s->nregions > 1)
        drop_region(s, ri);
}

bool gkv_slab_region(const gkv_slab_t *s, uint64_t addr, uint64_t *base, gkv_slab_note_t **note)
{
    int ri = region_index(s, addr);
    if (ri < 0)
        return false;
    *base = s->regions[ri]->base;
    *note = &s->regions[ri]->note;
    return true;
}

bool gkv_slab_owns(const gkv_slab_t *s, uint64_t addr)
{
    return region_index(s, addr) >= 0;
}

uint64_t gkv_slab_held(const gkv_slab_t *s)
{
    return (uint64_t)s->nregions * GKV_SLAB_REGION;
}

uint64_t gkv_slab_used(const gkv_slab_t *s)
{
    return s->used;
}
