/* exports.c: exported allocations and freed ones kept for reuse (exports.h). Every exported
 * allocation has a record, found by address; a kept one is also on the age list (oldest first)
 * and on its size's list (newest first, so a reuse takes the one touched last). */
#include "exports.h"

#include <stdlib.h>
#include <string.h>
#include <uthash.h>
#include <utlist.h>

#include "error.h"

typedef struct rec {
    uint64_t addr, size;
    uint8_t data[GKV_EXPORT_MAX];
    uint32_t len;
    bool kept;
    uint32_t holds; /* client processes holding their import of it (gkv_exports_hold) */
    uint64_t tag;   /* the caller's (gkv_exports_tag) */
    struct rec *age_prev, *age_next;   /* kept: the age list */
    struct rec *size_prev, *size_next; /* kept: its size's list */
    UT_hash_handle hh;                 /* by address */
} rec_t;

typedef struct {
    uint64_t size;
    rec_t *recs;
    UT_hash_handle hh;
} size_list_t;

struct gkv_exports {
    rec_t *by_addr;
    size_list_t *by_size;
    rec_t *age;
    uint64_t cap, bytes, reuses, holds;
    gkv_exports_release_fn release;
    void *ctx;
};

int gkv_exports_init(gkv_exports_t **out, uint64_t cap, gkv_exports_release_fn release, void *ctx)
{
    gkv_exports_t *k = calloc(1, sizeof(*k));
    if (!k)
        return GKV_ENOMEM;
    k->cap = cap;
    k->release = release;
    k->ctx = ctx;
    *out = k;
    return 0;
}

/* Takes r off the kept lists (it stays in the address table). */
static void unhold(gkv_exports_t *k, rec_t *r)
{
    size_list_t *sl;
    HASH_FIND(hh, k->by_size, &r->size, sizeof(r->size), sl);
    DL_DELETE2(sl->recs, r, size_prev, size_next);
    if (!sl->recs) {
        HASH_DELETE(hh, k->by_size, sl);
        free(sl);
    }
    DL_DELETE2(k->age, r, age_prev, age_next);
    r->kept = false;
    k->bytes -= r->size;
}

/* Gives r's memory back and forgets it. */
static void release_rec(gkv_exports_t *k, rec_t *r)
{
    if (r->kept)
        unhold(k, r);
    HASH_DELETE(hh, k->by_addr, r);
    k->release(k->ctx, r->addr, r->size);
    free(r);
}

/* The oldest kept allocation that nobody holds, or NULL. */
static rec_t *oldest_free(const gkv_exports_t *k)
{
    rec_t *r = k->age;
    while (r && r->holds)
        r = r->age_next;
    return r;
}

/* Gives back the oldest kept allocations nobody holds while more than cap bytes are kept
 * (want more: room for that many bytes more). */
static void trim(gkv_exports_t *k, uint64_t more)
{
    rec_t *r;
    while (k->bytes + more > k->cap && (r = oldest_free(k)))
        release_rec(k, r);
}

uint64_t gkv_exports_drain(gkv_exports_t *k)
{
    uint64_t n = k->bytes;
    rec_t *r;
    while ((r = oldest_free(k)))
        release_rec(k, r);
    return n - k->bytes;
}

void gkv_exports_fini(gkv_exports_t *k)
{
    if (!k)
        return;
    gkv_exports_drain(k);
    rec_t *r, *tmp;
    HASH_ITER(hh, k->by_addr, r, tmp)
    {
        HASH_DELETE(hh, k->by_addr, r);
        free(r);
    }
    free(k);
}

int gkv_exports_add(gkv_exports_t *k, uint64_t addr, uint64_t size, const uint8_t *data,
                      uint32_t len)
{
    if (len > GKV_EXPORT_MAX)
        return GKV_EINVAL;
    rec_t *r;
    HASH_FIND(hh, k->by_addr, &addr, sizeof(addr), r);
    if (!r) {
        if (!(r = calloc(1, sizeof(*r))))
            return GKV_ENOMEM;
        r->addr = addr;
        HASH_ADD(hh, k->by_addr, addr, sizeof(r->addr), r);
    }
    r->size = size;
    memcpy(r->data, data, len);
    r->len = len;
    return 0;
}

bool gkv_exports_find(const gkv_exports_t *k, uint64_t addr, const uint8_t **data,
                          uint32_t *len)
{
    rec_t *r;
    HASH_FIND(hh, k->by_addr, &addr, sizeof(addr), r);
    if (!r || r->kept)
        return false;
    *data = r->data;
    *len = r->len;
    return true;
}

/* The list of kept allocations of size bytes, made when missing; NULL without memory. */
static size_list_t *size_list(gkv_exports_t *k, uint64_t size)
{
    size_list_t *sl;
    HASH_FIND(hh, k->by_size, &size, sizeof(size), sl);
    if (!sl && (sl = calloc(1, sizeof(*sl)))) {
        sl->size = size;
        HASH_ADD(hh, k->by_size, size, sizeof(sl->size), sl);
    }
    return sl;
}

bool gkv_exports_freed(gkv_exports_t *k, uint64_t addr)
{
    rec_t *r;
    HASH_FIND(hh, k->by_addr, &addr, sizeof(addr), r);
    if (!r)
        return false;
    size_list_t *sl = NULL;
    if (r->size <= k->cap || r->holds) { /* a held one is kept whatever the cap */
        trim(k, r->size);
        sl = size_list(k, r->size);
    }
    if (!sl && r->holds) { /* no memory for its list: its memory stays, unlisted */
        return true;
    }
    if (!sl) { /* too large to keep (or no memory): the caller frees it */
        HASH_DELETE(hh, k->by_addr, r);
        free(r);
        return false;
    }
    DL_PREPEND2(sl->recs, r, size_prev, size_next);
    DL_APPEND2(k->age, r, age_prev, age_next);
    r->kept = true;
    k->bytes += r->size;
    return true;
}

bool gkv_exports_take(gkv_exports_t *k, uint64_t size, uint64_t *addr)
{
    size_list_t *sl;
    HASH_FIND(hh, k->by_size, &size, sizeof(size), sl);
    if (!sl)
        return false;
    rec_t *r = sl->recs->size_prev; /* the oldest of its size (the list's tail): see exports.h */
    unhold(k, r);
    k->reuses++;
    *addr = r->addr;
    return true;
}

bool gkv_exports_hold(gkv_exports_t *k, uint64_t addr, int delta)
{
    rec_t *r;
    HASH_FIND(hh, k->by_addr, &addr, sizeof(addr), r);
    if (!r || (delta < 0 && !r->holds))
        return false;
    r->holds = delta > 0 ? r->holds + 1 : r->holds - 1;
    k->holds = delta > 0 ? k->holds + 1 : k->holds - 1;
    if (!r->holds && r->kept)
        trim(k, 0); /* what it kept past the cap may go now */
    return true;
}

uint64_t gkv_exports_holds_now(const gkv_exports_t *k)
{
    return k->holds;
}

void gkv_exports_tag(gkv_exports_t *k, uint64_t addr, uint64_t tag)
{
    rec_t *r;
    HASH_FIND(hh, k->by_addr, &addr, sizeof(addr), r);
    if (r)
        r->tag = tag;
}

uint64_t gkv_exports_tag_of(const gkv_exports_t *k, uint64_t addr)
{
    rec_t *r;
    HASH_FIND(hh, k->by_addr, &addr, sizeof(addr), r);
    return r ? r->tag : 0;
}

bool gkv_exports_holds(const gkv_exports_t *k, uint64_t size)
{
    size_list_t *sl;
    HASH_FIND(hh, k->by_size, &size, sizeof(size), sl);
    return sl != NULL;
}

unsigned gkv_exports_count(const gkv_exports_t *k, uint64_t size)
{
    size_list_t *sl;
    HASH_FIND(hh, k->by_size, &size, sizeof(size), sl);
    unsigned n = 0;
    for (const rec_t *r = sl ? sl->recs : NULL; r; r = r->size_next)
        n++;
    return n;
}

uint64_t gkv_exports_bytes(const gkv_exports_t *k)
{
    return k->bytes;
}

uint64_t gkv_exports_reuses(const gkv_exports_t *k)
{
    return k->reuses;
}
