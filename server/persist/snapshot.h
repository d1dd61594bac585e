/* snapshot.h: every key, value, metadata and deadline written to one file in --snapshot-dir
 * (SAVE, --snapshot-interval), and the newest valid file loaded at start, for reboots. The
 * format, checksums and what a crash at any point leaves are in docs/snapshots.md.
 *
 * A save takes a reference on every live entry and copies its key, metadata and deadline on the
 * loop, a slice of keys per loop turn (host memory in proportion to the keys), waits for the
 * copy batches in flight (a value can be answered before its batch has run), then hands the
 * list to a thread of its own. The thread reads each value through the backend's read_sync in
 * chunks of a pinned buffer, writes the file under a temporary name, fsyncs it, renames it into
 * place and fsyncs the directory, and wakes the loop, which drops the references. Each key is
 * saved as it was when the listing reached it; a value overwritten or deleted once listed keeps
 * its memory until the save ends. */
#ifndef GKV_PERSIST_SNAPSHOT_H
#define GKV_PERSIST_SNAPSHOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "persist_env.h"

typedef struct gkv_save gkv_save_t;

/* Snapshots: the daemon's settings, the loop's handles and what INFO's # Persistence shows.
 * Written by the loop, except the running save's progress, which its thread updates (read
 * racily for display). */
typedef struct {
    gkv_persist_env_t env;
    const char *dir;      /* --snapshot-dir, borrowed; "" for none */
    uint64_t interval_ms; /* --snapshot-interval (gkv_snapshot_schedule) */
    bool skip_corrupt;    /* --snapshot-skip-corrupt */
    bool closed;          /* the loop is ending: no save starts on the timer */
    uv_async_t done;      /* the save's thread has ended */
    uv_timer_t timer;     /* --snapshot-interval */
    uv_idle_t list;       /* lists a save's keys a slice per loop turn */
    gkv_save_t *running;  /* the save in progress, or NULL */
    uint64_t saves, failures;
    uint64_t last_unix_ms, last_ms, last_keys, last_bytes; /* the last save that succeeded */
    int last_status;                                       /* 0 or the last failure's code */
    char last_file[128], last_error[192];
    /* At start: the snapshot loaded (file "" when none). */
    char loaded_file[128];
    uint64_t loaded_keys, loaded_bytes, load_ms, skipped_corrupt;
} gkv_snapshots_t;

/* Sets sn up on env (copied; what it points at borrowed) with --snapshot-dir dir (borrowed, ""
 * for none) and --snapshot-skip-corrupt, and its handles on env's loop. */
void gkv_snapshot_init(gkv_snapshots_t *sn, const gkv_persist_env_t *env, const char *dir,
                       bool skip_corrupt);
/* (Re)starts the interval timer: a save every interval_ms, 0 for none (init, SIGHUP). */
void gkv_snapshot_schedule(gkv_snapshots_t *sn, uint64_t interval_ms);
/* Starts a save (SAVE, the interval timer). Returns 0, GKV_ENOTSUP (no --snapshot-dir),
 * GKV_EBUSY (one is running), or GKV_ENOMEM / GKV_EIO / GKV_ESYS with why (cap bytes) saying
 * what failed; nothing is held then. */
int gkv_snapshot_start(gkv_snapshots_t *sn, char *why, size_t cap);
/* Keys and bytes the running save has written so far, and its totals; false when none runs. */
bool gkv_snapshot_progress(const gkv_snapshots_t *sn, uint64_t *keys, uint64_t *keys_total,
                           uint64_t *bytes, uint64_t *bytes_total);
/* INFO's # Persistence section into text (cap bytes). Returns its length, or -1 when it does
 * not fit. */
int gkv_snapshot_info(const gkv_snapshots_t *sn, char *text, size_t cap);
/* At start, before anything is served: loads the newest valid snapshot of the directory into
 * the empty store. Every record is checked before the daemon serves; a corrupt or unreadable
 * file leaves the store empty and is refused (GKV_EIO, err naming the file and what is wrong),
 * or with --snapshot-skip-corrupt logged and skipped for the next older one. A value whose
 * deadline has passed, or that fits on no device, is skipped with a count in the log.
 * Returns 0 (loaded, or nothing to load) or a negative code. */
int gkv_snapshot_load(gkv_snapshots_t *sn, char *err, size_t cap);
/* Closes the handles (the loop is ending; idempotent). A save still running goes on. */
void gkv_snapshot_close(gkv_snapshots_t *sn);
/* After the loop: waits for a save still running and drops what it holds; then, with
 * save_now (a graceful stop with --snapshot-on-exit), saves once more on this thread. */
void gkv_snapshot_fini(gkv_snapshots_t *sn, bool save_now);

#endif
