/* place.h: the one loader behind both ways values come back at start: a record read back (the
 * journal's last PUT of a key, journal.h; a snapshot's record, snapfile.h) is checked, given an
 * entry on the right device, filled by the caller (copied out of a predecessor's memory, or
 * written from the file), and published with its deadline. What cannot be placed is skipped
 * with a reason and counted; nothing half-placed is ever published.
 *
 * The two formats stay as they were (a snapshot file or a predecessor's journal written by an
 * earlier gpukvd loads here): what they share is the record (gkv_jrec_t), its checks and this
 * placing; they differ in where the value's bytes are. */
#ifndef GKV_PERSIST_PLACE_H
#define GKV_PERSIST_PLACE_H

#include <stdbool.h>
#include <stdint.h>

#include "journal.h"
#include "persist_env.h"

typedef struct {
    gkv_store_t *store; /* borrowed */
    uint32_t max_key;
    uint64_t now_unix;        /* deadlines are checked against this wall-clock time */
    bool anywhere;            /* a record whose GPU is missing or full goes wherever it fits */
    int map[GKV_MAX_DEVICES]; /* the record's device i is the store's map[i], or -1 */
    unsigned ndev;            /* devices the records may name */
    /* Counts. */
    uint64_t keys, bytes;                           /* published */
    uint64_t expired, too_long, no_device, no_room; /* skipped */
} gkv_placer_t;

/* A placer onto env's store; anywhere: see above (snapshots: yes; the fd store: no, a value is
 * copied by its own device's backend). Every device unmapped until gkv_placer_device. */
void gkv_placer_init(gkv_placer_t *p, const gkv_persist_env_t *env, bool anywhere);
/* The records' device i had the GPU whose UUID is the len bytes at uuid ("" for a lone host
 * arena): mapped to this daemon's device with that UUID (gkv_devices_map_gpu), or to none. */
void gkv_placer_device(gkv_placer_t *p, const gkv_devices_t *devs, unsigned i, const char *uuid,
                       size_t len);

/* Whether r can be placed, before anything is allocated: NULL with *to the store device it goes
 * to, or the reason it is skipped (counted): its deadline has passed, its key or metadata is
 * longer than this daemon allows, its GPU is not one this daemon serves (anywhere: placed by
 * size and key instead). */
const char *gkv_place_check(gkv_placer_t *p, const gkv_jrec_t *r, unsigned *to);
/* A new unpublished entry for r on device to (from gkv_place_check), memory from lane (backend.h),
 * in *e (one reference, the caller's): 0, or 0 with *e NULL when no device has room (counted:
 * anywhere tries the others), or GKV_ENOMEM. */
int gkv_place_entry(gkv_placer_t *p, const gkv_jrec_t *r, unsigned to, int lane, gkv_entry_t **e);
/* The caller filled e's value: it is published under r's key with r's deadline and the
 * reference dropped. Returns 0 or GKV_ENOMEM (e dropped, nothing published). */
int gkv_place_publish(gkv_placer_t *p, const gkv_jrec_t *r, gkv_entry_t *e);
/* Filling e failed: it is dropped, never published. */
void gkv_place_abandon(gkv_placer_t *p, gkv_entry_t *e);

#endif
