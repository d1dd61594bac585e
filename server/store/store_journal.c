/* store_journal.c: the store's side of the fd store's journal (journal.h): every link, unlink
 * and deadline change recorded as it happens, and value memory held back (limbo) while the
 * records that could still name it wait to commit. */
#include <stdlib.h>
#include <string.h>

#include "duration.h"
#include "error.h"
#include "journal.h"
#include "store_impl.h"

/* The journal's record that e's key is gone. */
void gkv__store_journal_del(gkv_store_t *st, const gkv_entry_t *e)
{
    size_t klen;
    const uint8_t *key = gkv_store_key(st, e, &klen);
    (void)gkv_journal_del(st->journal, key, (uint32_t)klen);
}

/* The journal's record of e (linked) as it is now. */
void gkv__store_journal_put(gkv_store_t *st, const gkv_entry_t *e)
{
    if (!st->journal)
        return;
    /* The host tier is the journal's device after the GPUs (persist_env.h); a successor finds
     * no disk tier yet, nor a host tier after GKV_MAX_DEVICES GPUs: gone rather than wrong. */
    unsigned dev = e->dev == GKV_DEV_HOST_TIER ? st->ndev : e->dev;
    if (e->dev == GKV_DEV_DISK_TIER || dev >= GKV_MAX_DEVICES) {
        gkv__store_journal_del(st, e);
        return;
    }
    size_t klen, exp_len = 0;
    uint32_t meta_len;
    uint8_t exp[GKV_EXPORT_MAX];
    gkv_jrec_t r = {.size = e->size, .addr = e->size ? e->mem.v : 0, .dev = dev};
    gkv_backend_t *be = st->dev[e->dev].be;
    if (e->size &&
        be->ops->origin(be, e->mem, e->size, &r.base, &r.base_size, exp, sizeof(exp), &exp_len)) {
        /* The successor could not find it: recorded as gone rather than wrongly. */
        gkv__store_journal_del(st, e);
        return;
    }
    r.exp = exp;
    r.exp_len = (uint32_t)exp_len;
    r.key = gkv_store_key(st, e, &klen);
    r.klen = (uint32_t)klen;
    r.meta = gkv_entry_meta(e, &meta_len);
    r.meta_len = meta_len;
    if (gkv__store_has_deadline(e))
        r.expire_unix_ms = gkv_store_deadline_unix(st, e, gkv_wall_clock_ms());
    (void)gkv_journal_put(st->journal, &r); /* failing: broken, which INFO reports */
}

/* Holds the memory back while the journal's last records wait to commit; false when it need
 * not wait, or when host memory to remember it is short: the memory is then freed now, and
 * the journal is marked broken (the fd store then leaves systemd's store, fdstore.c). */
bool gkv__store_into_limbo(gkv_store_t *st, const gkv_entry_t *e)
{
    return e->size && gkv__store_limbo_push(st, (struct gkv_limbo){.mem = e->mem,
                                                                    .size = e->size,
                                                                    .dev = e->dev});
}

bool gkv__store_limbo_push(gkv_store_t *st, struct gkv_limbo l)
{
    if (!st->journal)
        return false;
    gkv_store_journal_committed(st); /* what has committed goes first */
    if (st->limbo_head == st->nlimbo &&
        gkv_journal_committed(st->journal) == gkv_journal_used(st->journal))
        return false;
    if (st->nlimbo == st->limbo_cap) {
        if (st->limbo_head) { /* slide the live part down first */
            memmove(st->limbo, st->limbo + st->limbo_head,
                    (st->nlimbo - st->limbo_head) * sizeof(*st->limbo));
            st->nlimbo -= st->limbo_head;
            st->limbo_head = 0;
        }
        if (st->nlimbo == st->limbo_cap) {
            size_t cap = st->limbo_cap ? st->limbo_cap * 2 : 64;
            struct gkv_limbo *grown = realloc(st->limbo, cap * sizeof(*grown));
            if (!grown) {
                gkv_journal_break(st->journal);
                return false;
            }
            st->limbo = grown;
            st->limbo_cap = cap;
        }
    }
    l.tag = gkv_journal_used(st->journal);
    st->limbo[st->nlimbo++] = l;
    st->limbo_bytes += l.size;
    return true;
}

int gkv_store_journal_all(gkv_store_t *st, gkv_journal_t *j)
{
    gkv_journal_t *own = st->journal;
    st->journal = j;
    for (const gkv_inode_t *in = gkv_index_seek(st->ix, "", 0); in;
         in = gkv_index_next(st->ix, in)) {
        gkv_entry_t *e = gkv_inode_val(st->ix, in);
        if (gkv_store_alive(st, e))
            gkv__store_journal_put(st, e);
    }
    st->journal = own;
    return gkv_journal_broken(j) ? GKV_ESYS : 0;
}

void gkv_store_journal_committed(gkv_store_t *st)
{
    uint64_t upto = st->journal ? gkv_journal_committed(st->journal) : UINT64_MAX;
    while (st->limbo_head < st->nlimbo && st->limbo[st->limbo_head].tag <= upto) {
        struct gkv_limbo *l = &st->limbo[st->limbo_head++];
        if (l->retire)
            gkv_backend_disk_retire(st->dev[GKV_DEV_DISK_TIER].be, l->mem);
        else
            gkv__store_free_memory(st, l->dev, l->mem, l->size);
        st->limbo_bytes -= l->size;
    }
    if (st->limbo_head == st->nlimbo)
        st->limbo_head = st->nlimbo = 0;
}
