/* demoter.h: values moved down from the GPUs to the host tier off the request path
 * (docs/tiers.md). Once per loop iteration, for each device whose used bytes are above its
 * limit less a headroom (--tier-headroom, a percentage of the limit), the demoter starts
 * copying the device's coldest values into the host tier (gkv_store_demote_begin: the same
 * choice a write that needs room makes) on the device's copy lane, GKV_DEMOTE_FLIGHT at most
 * at once over all devices. A copy done, the tier's entry takes the value's place under its
 * key if nothing changed it meanwhile (gkv_store_demote_end), and the GPU memory goes when its
 * last reader lets go. Readers see the GPU's bytes until then.
 *
 * A write that finds its device full asks the demoter too (gkv_demoter_room): the moves it
 * needs start on the copy lane the same way, and the write waits for them while the loop
 * serves others, at most GKV_DEMOTE_WAITS times; then it makes whatever room is still missing
 * itself, on the loop, as without a demoter (store.h).
 *
 * When the host tier has a disk below and no room for the value a move would bring, the
 * demoter first moves the tier's coldest value to the disk: the record is written on the
 * demoter's own thread (gkv_store_disk_move_begin), one at a time, and takes the value's place
 * on the loop once written. So a write waits at most GKV_DEMOTE_WAITS times for
 * GKV_DEMOTE_FLIGHT copies from its device and one write to the disk, plus the moves it then
 * makes itself.
 *
 * Reads wait for moves up the same way: a GET of a disk value for its read into the host tier
 * (gkv_demoter_fetch), a MAP of a value in a tier (or a GET under promote-on-get) for its
 * moves up to the GPU (gkv_demoter_promote), an H2D copy in one of the same GKV_DEMOTE_FLIGHT slots. */
#ifndef GKV_XFER_DEMOTER_H
#define GKV_XFER_DEMOTER_H

#include <stdint.h>
#include <uv.h>

#include "device.h"
#include "store.h"
#include "waitq.h"

#define GKV_DEMOTE_FLIGHT 4
#define GKV_DEMOTE_WAITS 4

typedef struct gkv_demoter gkv_demoter_t;

/* Starts a demoter on loop over st and devs (borrowed, outliving it), keeping headroom_pct
 * (0..90; 0: none, moves for writes only) of each device's limit free. NULL when st has no
 * host tier, or out of memory (logged). */
gkv_demoter_t *gkv_demoter_start(uv_loop_t *loop, gkv_store_t *st, gkv_devices_t *devs,
                                 unsigned headroom_pct);
/* Waits for the copies in flight (their values stay where they were), then starts closing its
 * handles: the loop must run out before gkv_demoter_free. NULL does nothing. */
void gkv_demoter_close(gkv_demoter_t *d);
void gkv_demoter_free(gkv_demoter_t *d);
/* Moves that took their value's place, so far (the background's and the writes'). */
uint64_t gkv_demoter_done(const gkv_demoter_t *d);
/* A write needs need bytes on device dev, which lacks them: moves of dev's coldest values
 * start (up to GKV_DEMOTE_FLIGHT in flight), and w is called on the loop once moves end. True
 * when w waits; false when no move from dev could start or is in flight (the write makes room
 * itself). NULL d: false. */
bool gkv_demoter_room(gkv_demoter_t *d, unsigned dev, uint64_t need, gkv_waiter_t *w);
/* A GET of e, a linked value on the disk, waits for it to come up to the host tier: the read
 * runs on the demoter's thread (after a move down that makes room in the tier, when needed),
 * and w is called on the loop once the disk job in flight ends (concurrent GETs of e wait
 * for the same one). True when w waits; false when nothing could start (the GET brings the
 * value up itself). NULL d: false. */
bool gkv_demoter_fetch(gkv_demoter_t *d, gkv_entry_t *e, gkv_waiter_t *w);
/* A MAP (or a promoting GET) of e, a linked value in a tier, waits for it to come up to device
 * dev: from the host tier the copy runs on dev's copy lane (GKV_DEMOTE_FLIGHT at most with the
 * moves down); from the disk the value comes up to the host tier first (gkv_demoter_fetch);
 * where dev has no room for it, moves down make it first (gkv_demoter_room), unless they would
 * make a host tier with no disk below evict (false then: the request swaps). w is called on the
 * loop once moves end (concurrent requests for e wait for the same move); the request then
 * runs again and finds e a step further up. True when w waits; false when nothing could start
 * (the request moves the value up itself). NULL d: false. */
bool gkv_demoter_promote(gkv_demoter_t *d, gkv_entry_t *e, unsigned dev, gkv_waiter_t *w);
/* Takes w out of the waiters (its connection closes). NULL d: nothing. */
void gkv_demoter_cancel(gkv_demoter_t *d, gkv_waiter_t *w);
/* Writes that waited for moves, so far. */
uint64_t gkv_demoter_waits(const gkv_demoter_t *d);

#endif
