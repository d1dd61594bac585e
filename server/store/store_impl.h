/* store_impl.h: what the store's files share (not an interface of the store): store.c keeps
 * entries, their accounting and the index; store_ttl.c deadlines; store_journal.c the journal's
 * records and the memory held back for them; store_share.c what zero-copy asks. */
#ifndef GKV_STORE_STORE_IMPL_H
#define GKV_STORE_STORE_IMPL_H

#include "store.h"

/* Value memory freed while the journal's last records wait to commit (store_journal.c). */
struct gkv_limbo {
    uint64_t tag; /* the journal's length when the memory was freed */
    gkv_devptr_t mem;
    uint64_t size;
    unsigned dev;
    bool retire; /* not memory to free: a disk record to retire (gkv__store_disk_left) */
};

static inline bool gkv__store_has_deadline(const gkv_entry_t *e)
{
    return e->x && e->x->expire_at;
}

/* With versions: e's value is at version v (gkv_store_version reads it). */
static inline void gkv__store_set_version(gkv_entry_t *e, uint64_t v)
{
    *(uint64_t *)(void *)(e + 1) = v;
}

/* A change of e's key (kind GKV_EVENT_*; size 0 when the value goes) is counted and told to
 * the listeners, if any (store.h: changed). e must still be alive. */
static inline void gkv__store_changed(gkv_store_t *st, unsigned kind, gkv_entry_t *e,
                                      uint64_t size)
{
    st->changes++;
    if (st->versions && kind == GKV_EVENT_SET) /* the value published gets its version */
        gkv__store_set_version(e, st->version_base + st->changes);
    if (st->listeners && st->changed) {
        size_t klen;
        const uint8_t *key = gkv_store_key(st, e, &klen);
        st->changed(st->changed_arg, kind, key, klen, size, st->changes,
                    gkv_store_version(st, e));
    }
}

/* store.c. */
/* Unlinks the linked entry e and drops the index's reference. */
void gkv__store_unlink(gkv_store_t *st, gkv_entry_t *e);
/* e is linked and past its deadline: it goes (counted as expired). */
void gkv__store_expire_one(gkv_store_t *st, gkv_entry_t *e);
/* Links e under its key with the index's reference (and e's deadline in the TTL heap),
 * dropping the index's reference on the entry it replaces. Returns 0 or GKV_ENOMEM (nothing
 * changed). */
int gkv__store_link(gkv_store_t *st, gkv_entry_t *e);
/* Gives e extras holding meta (borrowed) and the deadline expire_at, or none when both are
 * empty; e is not in the TTL heap. Returns 0 or GKV_ENOMEM (e unchanged). */
int gkv__store_set_extras(gkv_store_t *st, gkv_entry_t *e, const void *meta, uint32_t meta_len,
                          uint64_t expire_at);
/* A new unpublished entry on device or tier dev with e's key, size, metadata and deadline (its
 * bytes are the caller's to copy, on lane: its memory is in that lane's order), in *n (one
 * reference): MOVE's and MAP's copies, and moves between tiers. Returns 0 or
 * gkv_store_entry_new's code. */
int gkv__store_entry_like(gkv_store_t *st, const gkv_entry_t *e, unsigned dev, int lane,
                          gkv_entry_t **n);
/* Gives size bytes at mem back to device dev's backend and accounting. */
void gkv__store_free_memory(gkv_store_t *st, unsigned dev, gkv_devptr_t mem, uint64_t size);

/* The best candidate on device dev (or the tier) to make room for a value, sampled as evict.h
 * says with the store's policy, or with LRU (volatile, noeviction) when any is to demote
 * (nothing is lost): only entries nothing but the index holds. NULL when none is. */
gkv_entry_t *gkv__store_pick(gkv_store_t *st, unsigned dev, bool any);
/* Unlinks e (linked, used by nothing but the index) and frees it: an eviction. */
void gkv__store_evict(gkv_store_t *st, gkv_entry_t *e);

/* tier.c. */
/* Room on device or tier dev through the tier below it: moves its best candidate there. False
 * when there is none below, no candidate, or the tier could not take it (the caller evicts
 * then). */
bool gkv__store_demote_one(gkv_store_t *st, unsigned dev);
/* e (in the disk tier) has left its key (unlinked, replaced, flushed): its record is retired
 * in the file, so a reload never brings it back: at once without a journal, else once the
 * journal's record of the change has committed (before the change is acknowledged; a crash
 * before that leaves the record for the reload, the journal not knowing the change either).
 * Called after the journal's record of the change is written. Its memory is freed later. */
void gkv__store_disk_left(gkv_store_t *st, const gkv_entry_t *e);
/* Holds l back until the journal's records up to now have committed (gkv_store_journal_
 * committed carries it out). Held ones are carried out in order: a disk record's retirement
 * always before its space is freed (and reused). False when nothing waits to commit and
 * nothing is held (carry it out now), or when host memory to remember it is short (the
 * journal is then marked broken). */
bool gkv__store_limbo_push(gkv_store_t *st, struct gkv_limbo l);
/* Unlocks the host tier's locked regions (gkv_store_fini, before the tier's memory goes). */
void gkv__store_tier_fini(gkv_store_t *st);

/* store_journal.c. */
/* The journal's record of e (linked) as it is now; nothing without a journal. */
void gkv__store_journal_put(gkv_store_t *st, const gkv_entry_t *e);
/* The journal's record that e's key is gone. */
void gkv__store_journal_del(gkv_store_t *st, const gkv_entry_t *e);
/* Holds e's memory back while the journal's last records wait to commit; false when it need
 * not wait, or when host memory to remember it is short: the memory is then freed now, and
 * the journal is marked broken (the fd store then leaves systemd's store). */
bool gkv__store_into_limbo(gkv_store_t *st, const gkv_entry_t *e);

#endif
