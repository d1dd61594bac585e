/* fdstore.h: values that survive a crash or a restart without disk (--fd-store; issue 16).
 * The daemon keeps in systemd's file descriptor store ($NOTIFY_SOCKET, FDSTORE=1) the
 * descriptors of its value memory (the cuda pool's POSIX handle, the host arena's memfd: what
 * zero-copy clients get) and of its journal (journal.h: the index as an append-only log in a
 * memfd). Started again with them (LISTEN_FDS / LISTEN_FDNAMES), it replays the journal, checks
 * each record (lengths, bounds, overlaps, its device still present), copies each value out of
 * the predecessor's memory into its own (adopt and drain), publishes it, and only then listens;
 * what cannot be checked or copied is dropped with a log line, never served wrong. It then
 * stores its own descriptors and removes the predecessor's, whose memory is freed once closed.
 *
 * Names in the store: gpukv-m-<epoch>-<i> (device i's memory) and gpukv-j-<epoch>-<gen> (the
 * journal, gen rising with each rewrite). A daemon's epoch is one past the one it adopted. A
 * new journal is stored before the old one is removed, so a crash between leaves both, and the
 * successor takes the newest: the store always holds a complete set.
 *
 * Acknowledged writes survive: a reply to a request that appended records waits until the
 * journal has committed them (journal.h: copy batches pin it until their bytes are in place),
 * and memory freed meanwhile is not reused until then (store.h, limbo). docs/restarts.md has
 * the reasoning, the memory cost and what was measured. */
#ifndef GKV_PERSIST_FDSTORE_H
#define GKV_PERSIST_FDSTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "commit.h"
#include "persist_env.h"

struct gkv_journal;

/* A descriptor handed over by name (systemd's store, or a predecessor's TAKEOVER reply). */
typedef struct gkv_stored_fd {
    int fd;
    char name[48];
} gkv_stored_fd_t;

/* --fd-store: on, off, or on when $NOTIFY_SOCKET is there and $FDSTORE (if set) is not 0. */
typedef enum { GKV_FDSTORE_AUTO, GKV_FDSTORE_ON, GKV_FDSTORE_OFF } gkv_fdstore_mode_t;

typedef struct {
    gkv_persist_env_t env;
    struct gkv_journal *journal; /* owned; NULL while the fd store is off */
    uint32_t epoch, gen;
    bool closing;           /* after the loop: nothing to resume */
    uint64_t rewrite_after; /* a failed rewrite waits until the journal is this long */
    /* The predecessor's descriptors, removed from the store once this daemon serves. */
    gkv_stored_fd_t *old;
    unsigned nold;
    gkv_commits_t commits; /* replies waiting for a commit (commit.h) */
    /* INFO # Persistence. */
    uint64_t adopted_keys, adopted_bytes, dropped, adopt_ms, rewrites;
    uint32_t adopted_epoch; /* 0: started without stored descriptors */
} gkv_fdstore_t;

/* At start, after the devices open and before snapshots load or anything listens: adopts what
 * a predecessor stored (LISTEN_FDS's gpukv-* descriptors, and the npassed descriptors of passed,
 * which a TAKEOVER brought: taken over, closed here or by gkv_fdstore_serving) into env's store,
 * then, with the fd store on (mode), attaches a fresh journal to the store and the batchers and
 * stores this daemon's descriptors. *adopted says whether values came over (snapshots then stay
 * unloaded). Returns 0, or GKV_EINVAL / GKV_ESYS / GKV_ENOMEM with err (cap bytes): --fd-store
 * yes outside systemd, the descriptors could not be stored. Either way gkv_fdstore_close ends
 * it. */
int gkv_fdstore_open(gkv_fdstore_t *f, const gkv_persist_env_t *env, gkv_fdstore_mode_t mode,
                     gkv_stored_fd_t *passed, unsigned npassed, bool *adopted, char *err,
                     size_t cap);
/* A journal of env's store as it is now (the devices, every live key), the caller's to close,
 * or NULL when out of memory: what TAKEOVER hands over when no fd store runs. */
struct gkv_journal *gkv_fdstore_journal_now(const gkv_persist_env_t *env);
/* The names of device i's memory and of journal generation gen in epoch (48 bytes). */
void gkv_fdstore_name(char *out, size_t cap, char kind, uint32_t epoch, uint32_t idx);
/* The daemon listens: the predecessor's descriptors leave the fd store (before, a failed start
 * leaves them for the next try). */
void gkv_fdstore_serving(gkv_fdstore_t *f);
/* The journal's length now (the mark of a request beginning), 0 when off. */
uint64_t gkv_fdstore_mark(const gkv_fdstore_t *f);
/* A request has been answered: when it appended journal records that have not committed yet
 * (mark: the journal's length when it began), w waits for them (commit.h) and true is returned:
 * its owner holds the reply until w->ready. False: nothing to wait for. */
bool gkv_fdstore_hold(gkv_fdstore_t *f, gkv_commit_waiter_t *w, uint64_t mark);
/* A batch's pin went (batch.h committed): frees the store's limbo up to the committed length,
 * releases the waiters whose records have committed, and rewrites the journal when it has grown
 * to several times the index. arg is the fd store. */
void gkv_fdstore_committed(void *arg);
/* INFO lines (fd_store:..., appended to # Persistence) into text. Returns the length or -1. */
int gkv_fdstore_info(const gkv_fdstore_t *f, char *text, size_t cap);
/* A graceful stop (or a failed start), before the store frees its values: removes this
 * daemon's descriptors from the fd store (a planned restart keeps values through --snapshot-on-exit
 * instead: freeing the values would leave the stored journal naming freed memory), detaches the
 * journal from the store, closes it and releases every waiter (not resumed). */
void gkv_fdstore_close(gkv_fdstore_t *f);

#endif
