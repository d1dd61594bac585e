/* store_ttl.c: keys' deadlines: EXPIRE, PERSIST, TTL, and the active expiry that reaps keys
 * past theirs (store.h, "TTLs"). */
#include <stdint.h>

#include "error.h"
#include "store_impl.h"

uint64_t gkv_store_deadline_unix(const gkv_store_t *st, const gkv_entry_t *e, uint64_t now_unix_ms)
{
    return gkv__store_has_deadline(e) ? now_unix_ms + (e->x->expire_at - st->now_ms) : 0;
}

int gkv_store_expire(gkv_store_t *st, const void *key, size_t klen, uint64_t ttl_ms)
{
    gkv_entry_t *e = gkv_store_find(st, key, klen);
    if (!e)
        return 0;
    bool member = gkv__store_has_deadline(e);
    if (!member) {
        uint32_t meta_len;
        const uint8_t *meta = gkv_entry_meta(e, &meta_len);
        if (gkv__store_set_extras(st, e, meta, meta_len, st->now_ms + ttl_ms))
            return GKV_ENOMEM;
        if (gkv_ttl_add(&st->ttl, e)) {
            e->x->expire_at = 0;
            return GKV_ENOMEM;
        }
        gkv__store_journal_put(st, e);
        return 1;
    }
    gkv_ttl_remove(&st->ttl, e);
    e->x->expire_at = st->now_ms + ttl_ms;
    (void)gkv_ttl_add(&st->ttl, e); /* it was a member: there is room */
    gkv__store_journal_put(st, e);
    return 1;
}

int gkv_store_persist(gkv_store_t *st, const void *key, size_t klen)
{
    gkv_entry_t *e = gkv_store_find(st, key, klen);
    if (!e)
        return GKV_ENOTFOUND;
    if (!gkv__store_has_deadline(e))
        return 0;
    gkv_ttl_remove(&st->ttl, e);
    e->x->expire_at = 0;
    gkv__store_journal_put(st, e);
    return 1;
}

int gkv_store_ttl(gkv_store_t *st, const void *key, size_t klen, uint64_t *left)
{
    gkv_entry_t *e = gkv_store_find(st, key, klen);
    if (!e)
        return GKV_ENOTFOUND;
    *left = gkv__store_has_deadline(e) ? e->x->expire_at - st->now_ms : UINT64_MAX;
    return 0;
}

uint32_t gkv_store_reap(gkv_store_t *st, uint32_t limit)
{
    uint32_t n = 0;
    gkv_entry_t *e;
    while (n < limit && (e = gkv_ttl_top(&st->ttl)) && e->x->expire_at <= st->now_ms) {
        gkv__store_expire_one(st, e);
        n++;
    }
    return n;
}

uint64_t gkv_store_next_deadline(const gkv_store_t *st)
{
    gkv_entry_t *e = gkv_ttl_top(&st->ttl);
    return e ? e->x->expire_at : 0;
}
