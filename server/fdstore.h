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
#ifndef GKV_SERVER_FDSTORE_H
#define GKV_SERVER_FDSTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct gkv_server gkv_server_t;
typedef struct gkv_conn gkv_conn_t;
struct gkv_journal;

/* A descriptor handed over by name (systemd's store, or a predecessor's TAKEOVER reply). */
typedef struct gkv_stored_fd {
    int fd;
    char name[48];
} gkv_stored_fd_t;

typedef struct {
    struct gkv_journal *journal; /* owned; NULL while the fd store is off */
    uint32_t epoch, gen;
    bool closing;           /* after the loop: nothing to resume */
    uint64_t rewrite_after; /* a failed rewrite waits until the journal is this long */
    /* The predecessor's descriptors, removed from the store once this daemon serves. */
    gkv_stored_fd_t *old;
    unsigned nold;
    gkv_conn_t *waiters; /* connections whose replies wait for a commit (conn.h) */
    /* INFO # Persistence. */
    uint64_t adopted_keys, adopted_bytes, dropped, adopt_ms, rewrites, held_replies;
    uint32_t adopted_epoch; /* 0: started without stored descriptors */
} gkv_fdstore_t;

/* At start, after the devices open and before snapshots load or anything listens: adopts what
 * a predecessor stored (LISTEN_FDS's gpukv-* descriptors, and the npassed descriptors of passed,
 * which a TAKEOVER brought: taken over, closed here or by gkv_fdstore_serving), then, with the
 * fd store on, attaches a fresh journal to the store and the batchers and stores this daemon's
 * descriptors. *adopted says whether values came over (snapshots then stay unloaded). Returns
 * 0, or GKV_EINVAL / GKV_ESYS / GKV_ENOMEM with err (cap bytes): --fd-store yes outside systemd,
 * the descriptors could not be stored. */
int gkv_fdstore_open(gkv_server_t *s, gkv_stored_fd_t *passed, unsigned npassed, bool *adopted,
                     char *err, size_t cap);
/* A journal of the store as it is now (the devices, every live key), the caller's to close, or
 * NULL when out of memory: what TAKEOVER hands over when no fd store runs. */
struct gkv_journal *gkv_fdstore_journal_now(gkv_server_t *s);
/* The names of device i's memory and of journal generation gen in epoch (48 bytes). */
void gkv_fdstore_name(char *out, size_t cap, char kind, uint32_t epoch, uint32_t idx);
/* The daemon listens: the predecessor's descriptors leave the fd store (before, a failed start
 * leaves them for the next try). */
void gkv_fdstore_serving(gkv_server_t *s);
/* A request on c has been answered (gkv_conn_op_done): when it appended journal records that
 * have not committed yet (mark: the journal's length when it began), c's replies are held until
 * they have. */
void gkv_fdstore_hold(gkv_server_t *s, gkv_conn_t *c, uint64_t mark);
/* The journal's length now (the mark of a request beginning), 0 when off. */
uint64_t gkv_fdstore_mark(const gkv_server_t *s);
/* A batch's pin went (batch.h committed): frees the store's limbo up to the committed length,
 * releases the connections waiting for it, and rewrites the journal when it has grown to
 * several times the index. arg is the server. */
void gkv_fdstore_committed(void *arg);
/* INFO lines (fd_store:..., appended to # Persistence) into text. Returns the length or -1. */
int gkv_fdstore_info(const gkv_server_t *s, char *text, size_t cap);
/* A graceful stop (or a failed start), before the store frees its values: removes this
 * daemon's descriptors from the fd store (a planned restart keeps values through --snapshot-on-exit
 * instead: freeing the values would leave the stored journal naming freed memory), detaches the
 * journal from the store and closes it. */
void gkv_fdstore_close(gkv_server_t *s);

#endif
