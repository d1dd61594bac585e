/* journal.h: the index of the values in backend memory, kept in a memfd that outlives the
 * process (handed to systemd's fd store), so that a successor started after a crash finds every
 * published value: an append-only log of checksummed records, PUT (key, metadata, size, device,
 * address, deadline), DEL and FLUSH, after a header whose committed length advances once a
 * record is whole. A SIGKILL leaves at most a partial record past the committed length, which
 * replay never reads. The store appends at publish, before the old value's memory can be freed,
 * so the journal never names freed memory (docs/snapshots.md, "the plan"). */
#ifndef GKV_SERVER_JOURNAL_H
#define GKV_SERVER_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct gkv_journal gkv_journal_t;

/* One value as the journal records it. Slices are borrowed. */
typedef struct {
    const uint8_t *key, *meta;
    uint32_t klen, meta_len;
    uint64_t size;
    uint64_t addr;           /* the value's address in its device's memory (arena offset) */
    uint64_t expire_unix_ms; /* 0: no deadline */
    uint32_t dev;            /* the store's device */
} gkv_jrec_t;

/* A new journal in a new memfd (sealed against shrinking). *out is the caller's (close with
 * gkv_journal_close). Returns 0, GKV_ESYS or GKV_ENOMEM. */
int gkv_journal_create(gkv_journal_t **out);
/* Its memfd (borrowed: dup it to hand it on). */
int gkv_journal_fd(const gkv_journal_t *j);
/* Appends a record; the memfd grows as needed. Returns 0, GKV_ENOMEM or GKV_ESYS (the journal
 * is then broken: every later append fails, and the daemon says so in INFO). */
int gkv_journal_put(gkv_journal_t *j, const gkv_jrec_t *r);
int gkv_journal_del(gkv_journal_t *j, const uint8_t *key, uint32_t klen);
int gkv_journal_flush(gkv_journal_t *j);
/* Bytes of records appended, and of them the bytes the last record of each live key takes (an
 * estimate of a rewrite's size: when used is several times live, rewrite). */
uint64_t gkv_journal_used(const gkv_journal_t *j);
bool gkv_journal_broken(const gkv_journal_t *j);
void gkv_journal_close(gkv_journal_t *j);

/* Replays the journal in fd (borrowed): calls fn for the last PUT of every key that is live at
 * the end (DEL and FLUSH applied), in no particular order, stopping when fn returns non-zero.
 * A record whose checksum or lengths are wrong ends the replay there (what follows cannot be
 * found again): *bad is set and what came before stands. Returns 0, fn's code, or GKV_EIO /
 * GKV_ENOMEM with why (cap bytes). */
int gkv_journal_replay(int fd, int (*fn)(void *arg, const gkv_jrec_t *r), void *arg, bool *bad,
                       char *why, size_t cap);

#endif
