/* records.c: homes and copies (records.h). */
#include "records.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void gkv_records_init(gkv_records_t *r)
{
    memset(r, 0, sizeof(*r));
}

void gkv_records_fini(gkv_records_t *r)
{
    gkv_home_rec_t *h, *ht;
    HASH_ITER(hh, r->homes, h, ht)
    {
        HASH_DEL(r->homes, h);
        free(h);
    }
    gkv_copy_rec_t *c, *ct;
    HASH_ITER(hh, r->copies, c, ct)
    {
        HASH_DEL(r->copies, c);
        free(c);
    }
    memset(r, 0, sizeof(*r));
}

gkv_home_rec_t *gkv_home_find(gkv_records_t *r, const void *key, size_t klen)
{
    gkv_home_rec_t *h = NULL;
    HASH_FIND(hh, r->homes, key, klen, h);
    return h;
}

gkv_home_rec_t *gkv_home_get(gkv_records_t *r, const void *key, size_t klen)
{
    gkv_home_rec_t *h = gkv_home_find(r, key, klen);
    if (h)
        return h;
    if (r->nhomes >= GKV_RECORDS_MAX || !(h = calloc(1, sizeof(*h) + klen)))
        return NULL;
    if (klen)
        memcpy(h->key, key, klen);
    h->klen = (uint32_t)klen;
    HASH_ADD_KEYPTR(hh, r->homes, h->key, h->klen, h);
    r->nhomes++;
    return h;
}

void gkv_home_del(gkv_records_t *r, gkv_home_rec_t *h)
{
    HASH_DEL(r->homes, h);
    r->nhomes--;
    free(h);
}

uint64_t gkv_home_next_version(gkv_records_t *r, const gkv_home_rec_t *h)
{
    struct timespec ts; /* coarse: a floor for versions, read on every write */
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    uint64_t wall = ((uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000) << 20;
    uint64_t v = r->clock + 1;
    if (h && h->version >= v)
        v = h->version + 1;
    if (wall > v)
        v = wall;
    r->clock = v;
    return v;
}

gkv_copy_rec_t *gkv_copy_find(gkv_records_t *r, const void *key, size_t klen)
{
    gkv_copy_rec_t *c = NULL;
    HASH_FIND(hh, r->copies, key, klen, c);
    return c;
}

gkv_copy_rec_t *gkv_copy_get(gkv_records_t *r, const void *key, size_t klen)
{
    gkv_copy_rec_t *c = gkv_copy_find(r, key, klen);
    if (c)
        return c;
    if (r->ncopies >= GKV_RECORDS_MAX || !(c = calloc(1, sizeof(*c) + klen)))
        return NULL;
    if (klen)
        memcpy(c->key, key, klen);
    c->klen = (uint32_t)klen;
    HASH_ADD_KEYPTR(hh, r->copies, c->key, c->klen, c);
    r->ncopies++;
    return c;
}

/* c leaves the list of replicas (when it is on it). */
static void replica_out(gkv_records_t *r, gkv_copy_rec_t *c)
{
    if (!(c->replica && c->version))
        return;
    r->nreplicas--;
    if (c->rprev)
        c->rprev->rnext = c->rnext;
    else
        r->oldest = c->rnext;
    if (c->rnext)
        c->rnext->rprev = c->rprev;
    else
        r->newest = c->rprev;
    c->rprev = c->rnext = NULL;
}

void gkv_copy_del(gkv_records_t *r, gkv_copy_rec_t *c)
{
    replica_out(r, c);
    HASH_DEL(r->copies, c);
    r->ncopies--;
    free(c);
}

void gkv_copy_set(gkv_records_t *r, gkv_copy_rec_t *c, uint64_t version, bool replica,
                  const char *home)
{
    replica_out(r, c);
    c->version = version;
    c->replica = replica;
    if (replica && version) {
        r->nreplicas++;
        c->rprev = r->newest;
        c->rnext = NULL;
        if (r->newest)
            r->newest->rnext = c;
        else
            r->oldest = c;
        r->newest = c;
    }
    snprintf(c->home, sizeof(c->home), "%s", home ? home : "");
}
