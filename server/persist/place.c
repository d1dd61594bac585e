/* place.c: records read back at start placed in the store; see place.h. */
#include "place.h"

#include <string.h>

#include "duration.h"
#include "error.h"
#include "frame.h"

void gkv_placer_init(gkv_placer_t *p, const gkv_persist_env_t *env, bool anywhere)
{
    memset(p, 0, sizeof(*p));
    p->store = env->store;
    p->max_key = env->max_key;
    p->anywhere = anywhere;
    p->now_unix = gkv_wall_clock_ms();
    for (unsigned i = 0; i < GKV_MAX_DEVICES; i++)
        p->map[i] = -1;
    p->store->now_ms = gkv_clock_ms();
}

void gkv_placer_device(gkv_placer_t *p, const gkv_devices_t *devs, unsigned i, const char *uuid,
                       size_t len)
{
    if (i >= GKV_MAX_DEVICES)
        return;
    if (len == strlen(GKV_HOST_TIER_UUID) && !memcmp(uuid, GKV_HOST_TIER_UUID, len))
        p->map[i] = p->store->host_tier ? GKV_DEV_HOST_TIER : -1; /* the host tier's values */
    else
        p->map[i] = gkv_devices_map_gpu(devs, uuid, len, i);
    if (i >= p->ndev)
        p->ndev = i + 1;
}

const char *gkv_place_check(gkv_placer_t *p, const gkv_jrec_t *r, unsigned *to)
{
    if (r->expire_unix_ms && r->expire_unix_ms <= p->now_unix) {
        p->expired++;
        return "its deadline has passed";
    }
    if (r->klen < 1 || r->klen > p->max_key || r->meta_len > GKV_MAX_META) {
        p->too_long++;
        return "its key or metadata is longer than this daemon allows";
    }
    int d = r->dev < p->ndev ? p->map[r->dev] : -1;
    if (d < 0 && !p->anywhere) {
        p->no_device++;
        return "its GPU is not one this daemon serves";
    }
    *to = d >= 0 ? (unsigned)d : gkv_store_place(p->store, r->key, r->klen, r->size);
    return NULL;
}

int gkv_place_entry(gkv_placer_t *p, const gkv_jrec_t *r, unsigned to, int lane, gkv_entry_t **e)
{
    gkv_store_t *st = p->store;
    *e = NULL;
    int rc = gkv_store_entry_new(st, to, r->key, r->klen, r->size, r->meta, r->meta_len, lane, e);
    if (rc == GKV_EOOM && p->anywhere) { /* its GPU is smaller now: wherever it fits */
        unsigned other = gkv_store_place(st, r->key, r->klen, r->size);
        if (other != to)
            rc = gkv_store_entry_new(st, other, r->key, r->klen, r->size, r->meta, r->meta_len,
                                     lane, e);
    }
    if (rc == GKV_EOOM) {
        *e = NULL;
        p->no_room++;
        return 0;
    }
    return rc ? GKV_ENOMEM : 0;
}

int gkv_place_publish(gkv_placer_t *p, const gkv_jrec_t *r, gkv_entry_t *e)
{
    gkv_store_t *st = p->store;
    int rc = r->expire_unix_ms ? gkv_store_entry_ttl(st, e, r->expire_unix_ms - p->now_unix) : 0;
    if (!rc)
        rc = gkv_store_publish(st, e, 0, NULL);
    gkv_store_unref(st, e);
    if (rc)
        return GKV_ENOMEM;
    p->keys++;
    p->bytes += r->size;
    return 0;
}

void gkv_place_abandon(gkv_placer_t *p, gkv_entry_t *e)
{
    gkv_store_unref(p->store, e);
}
