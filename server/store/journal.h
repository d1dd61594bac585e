/* journal.h: the index of the values in backend memory, kept in a memfd that outlives the
 * process (handed to systemd's fd store, fdstore.h), so that a successor started after a crash
 * finds every published value: an append-only log of checksummed records, PUT (key, metadata,
 * size, device, address, origin, deadline), DEL, FLUSH and DEV (a device's UUID), after a header
 * whose committed length advances once a record is whole and the bytes it names are in place. A
 * SIGKILL leaves at most a partial record past the committed length, which replay never reads. The
 * store appends at publish, before the old value's memory can be freed, so the journal never names
 * freed memory (docs/restarts.md). */
#ifndef GKV_SERVER_JOURNAL_H
#define GKV_SERVER_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"

typedef struct gkv_journal gkv_journal_t;

/* One value as the journal records it. Slices are borrowed. */
typedef struct {
    const uint8_t *key, *meta;
    uint32_t klen, meta_len;
    uint64_t size;
    uint64_t addr;           /* the value's address in its device's memory (arena offset) */
    uint64_t expire_unix_ms; /* 0: no deadline */
    uint32_t dev;            /* the store's device */
    /* Where the value lies, for a successor to import it (backend.h origin): the address of the
     * allocation holding it, its size, and its export data (host backend: base 0, the arena's
     * size and no export data: memfd offsets need none). */
    uint64_t base, base_size;
    const uint8_t *exp;
    uint32_t exp_len;
} gkv_jrec_t;

/* The devices a journal's records name, by index: their UUIDs ("" for a lone host arena). */
typedef struct {
    char uuid[GKV_MAX_DEVICES][48];
    unsigned n; /* one past the highest index recorded */
} gkv_jdevs_t;

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
/* Records that the store's device dev (< GKV_MAX_DEVICES) has this UUID. */
int gkv_journal_device(gkv_journal_t *j, uint32_t dev, const char *uuid);

/* Durability. A record is committed (replay reads it) once appended, except while pins are
 * held: then only the records before the oldest pin are. A copy batch pins the journal when it
 * takes its first write, before the SETs it carries append their records, and unpins once its
 * copies have run: a record never commits before the bytes it names are in place. Pins are
 * positions; at most GKV_JOURNAL_PINS are held at once (a batch each: GKV_BATCH_BUFS per
 * device). */
#define GKV_JOURNAL_PINS 64
uint64_t gkv_journal_pin(gkv_journal_t *j);
/* Drops the pin pin returned; the committed length moves up to the oldest pin left (or to the
 * end of the records). */
void gkv_journal_unpin(gkv_journal_t *j, uint64_t pin);
/* True when no pin is held and every record is committed (a rewrite may replace j then). */
bool gkv_journal_idle(const gkv_journal_t *j);
/* Bytes of records committed; equal to gkv_journal_used when nothing waits. */
uint64_t gkv_journal_committed(const gkv_journal_t *j);
/* Bytes of records appended, and of them the bytes the last record of each live key takes (an
 * estimate of a rewrite's size: when used is several times live, rewrite). */
uint64_t gkv_journal_used(const gkv_journal_t *j);
bool gkv_journal_broken(const gkv_journal_t *j);
/* Marks j broken: something it relies on failed (the store could not hold freed memory back). */
void gkv_journal_break(gkv_journal_t *j);
void gkv_journal_close(gkv_journal_t *j);

/* Replays the journal in fd (borrowed): fills devs from its device records, calls fn for the last
 * PUT of every key that is live at the end (DEL and FLUSH applied), in no particular order,
 * stopping when fn returns non-zero. A record whose checksum or lengths are wrong ends the replay
 * there (what follows cannot be found again): *bad is set and what came before stands. Returns 0,
 * fn's code, or GKV_EIO / GKV_ENOMEM with why (cap bytes). */
int gkv_journal_replay(int fd, gkv_jdevs_t *devs, int (*fn)(void *arg, const gkv_jrec_t *r),
                       void *arg, bool *bad, char *why, size_t cap);

#endif
