/* fdstore_adopt.c: a predecessor's values adopted at start (fdstore.h): its journal replayed
 * twice, once for the memory ranges (overlapping ones are wrong about both), once to place each
 * value (place.h) and copy it out of the predecessor's memory into this daemon's. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "duration.h"
#include "error.h"
#include "fdstore_impl.h"
#include "journal.h"
#include "log.h"
#include "place.h"
#include "slab.h"

#define DROP_LINES 20 /* dropped records logged one by one, then counted */

typedef struct {
    uint32_t dev;
    uint64_t addr, size;
} range_t;

typedef struct {
    gkv_fdstore_t *f;
    gkv_placer_t placer;
    const gkv__stored_t *mem[GKV_MAX_DEVICES]; /* the predecessor's device i's memory, or NULL */
    void *src[GKV_MAX_DEVICES];                /* opened for copies (adopt_open), or NULL */
    bool unusable[GKV_MAX_DEVICES];            /* opening it failed */
    gkv_jdevs_t devs;
    range_t *ranges, *bad; /* pass 1: every value's memory; the overlapping ones, sorted */
    size_t nranges, cap, nbad;
    uint64_t dropped;
} adopt_t;

static int by_range(const void *a, const void *b)
{
    const range_t *x = a, *y = b;
    if (x->dev != y->dev)
        return x->dev < y->dev ? -1 : 1;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static int collect_range(void *arg, const gkv_jrec_t *r)
{
    adopt_t *a = arg;
    if (!r->size)
        return 0;
    if (a->nranges == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 4096;
        range_t *n = realloc(a->ranges, cap * sizeof(*n));
        if (!n)
            return GKV_ENOMEM;
        a->ranges = n;
        a->cap = cap;
    }
    a->ranges[a->nranges++] = (range_t){r->dev, r->addr, r->size};
    return 0;
}

/* Values whose memory overlaps another's: a journal that says so is wrong about both. */
static void find_overlaps(adopt_t *a)
{
    qsort(a->ranges, a->nranges, sizeof(range_t), by_range);
    size_t n = 0;
    for (size_t i = 0; i < a->nranges; i++) {
        const range_t *r = &a->ranges[i];
        bool over = (i > 0 && r[-1].dev == r->dev && r[-1].addr + r[-1].size > r->addr) ||
                    (i + 1 < a->nranges && r[1].dev == r->dev && r->addr + r->size > r[1].addr);
        if (over)
            a->ranges[n++] = *r; /* in place: n <= i */
    }
    a->bad = a->ranges;
    a->nbad = n;
}

static void drop(adopt_t *a, const gkv_jrec_t *r, const char *why)
{
    if (a->dropped++ < DROP_LINES)
        GKV_ERROR("fd store: dropping key \"%.*s\" (%" PRIu64 " bytes): %s",
                  (int)(r->klen < 64 ? r->klen : 64), (const char *)r->key, r->size, why);
}

static int adopt_one(void *arg, const gkv_jrec_t *r)
{
    adopt_t *a = arg;
    unsigned to;
    uint64_t expired = a->placer.expired;
    const char *skip = gkv_place_check(&a->placer, r, &to); /* r->dev is a device of devs now */
    if (skip) {
        if (a->placer.expired == expired) /* a deadline passed is no loss */
            drop(a, r, skip);
        return 0;
    }
    if (!a->mem[r->dev]) {
        drop(a, r, "the memory it names was not stored");
        return 0;
    }
    range_t key = {r->dev, r->addr, r->size};
    if (r->size && bsearch(&key, a->bad, a->nbad, sizeof(range_t), by_range)) {
        drop(a, r, "its memory overlaps another value's");
        return 0;
    }
    gkv_backend_t *be = a->f->env.store->dev[to].be; /* a GPU's, or the host tier's */
    char why[192];
    if (r->size && !a->src[r->dev] && !a->unusable[r->dev] &&
        be->ops->adopt_open(be, a->mem[r->dev]->fd, &a->src[r->dev], why, sizeof(why))) {
        GKV_ERROR("fd store: device %u's stored memory: %s", r->dev, why);
        a->unusable[r->dev] = true;
    }
    if (r->size && a->unusable[r->dev]) {
        drop(a, r, "its memory could not be opened");
        return 0;
    }
    gkv_entry_t *e;
    int lane = r->size <= GKV_SLAB_MAX ? GKV_LANE_BATCH : GKV_LANE_SHARED;
    int rc = gkv_place_entry(&a->placer, r, to, lane, &e);
    if (rc)
        return rc;
    if (!e) {
        drop(a, r, "no room for it on its device");
        return 0;
    }
    if (r->size && (rc = be->ops->adopt_copy(be, a->src[r->dev], r->base, r->base_size, r->exp,
                                             r->exp_len, r->addr, r->size, e->mem))) {
        gkv_place_abandon(&a->placer, e);
        drop(a, r, rc == GKV_EINVAL ? "it lies outside the memory it names" : "copying it failed");
        return 0;
    }
    return gkv_place_publish(&a->placer, r, e);
}

int gkv__fdstore_adopt(gkv_fdstore_t *f, const gkv__stored_t *j, const gkv__stored_t *stored,
                       unsigned n)
{
    adopt_t a = {.f = f};
    for (unsigned i = 0; i < n; i++)
        if (stored[i].kind == 'm' && stored[i].epoch == j->epoch)
            a.mem[stored[i].idx] = &stored[i];
    bool bad;
    char why[192];
    int rc = gkv_journal_replay(j->fd, &a.devs, collect_range, &a, &bad, why, sizeof(why));
    if (!rc) {
        if (bad)
            GKV_ERROR("fd store: the journal: %s", why);
        gkv_placer_init(&a.placer, &f->env, false);
        for (unsigned i = 0; i < a.devs.n; i++)
            gkv_placer_device(&a.placer, f->env.devs, i, a.devs.uuid[i], strlen(a.devs.uuid[i]));
        find_overlaps(&a);
        rc = gkv_journal_replay(j->fd, &a.devs, adopt_one, &a, &bad, why, sizeof(why));
    }
    for (unsigned i = 0; i < GKV_MAX_DEVICES; i++) {
        if (!a.src[i])
            continue;
        gkv_backend_t *be = f->env.store->dev[a.placer.map[i]].be;
        if (be->ops->adopt_close(be, a.src[i]) && !rc) {
            snprintf(why, sizeof(why), "copying device %u's values failed", i);
            rc = GKV_EIO;
        }
    }
    free(a.ranges);
    if (rc) {
        GKV_ERROR("fd store: adopting epoch %" PRIu32 " failed (%s): starting without its values",
                  j->epoch, rc == GKV_ENOMEM ? "out of host memory" : why);
        gkv_store_flush(f->env.store); /* never half-adopted */
        return rc;
    }
    f->adopted_epoch = j->epoch;
    f->adopted_keys = a.placer.keys;
    f->adopted_bytes = a.placer.bytes;
    f->dropped = a.dropped;
    GKV_INFO("fd store: adopted epoch %" PRIu32 ": %" PRIu64 " keys, %" PRIu64 " bytes; %" PRIu64
             " past their deadline, %" PRIu64 " dropped",
             j->epoch, a.placer.keys, a.placer.bytes, a.placer.expired, a.dropped);
    return 0;
}
