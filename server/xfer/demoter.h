/* demoter.h: values moved down from the GPUs to the host tier off the request path
 * (docs/tiers.md). Once per loop iteration, for each device whose used bytes are above its
 * limit less a headroom (--tier-headroom, a percentage of the limit), the demoter starts
 * copying the device's coldest values into the host tier (gkv_store_demote_begin: the same
 * choice a write that needs room makes) on the device's copy lane, GKV_DEMOTE_FLIGHT at most
 * at once over all devices. A copy done, the tier's entry takes the value's place under its
 * key if nothing changed it meanwhile (gkv_store_demote_end), and the GPU memory goes when its
 * last reader lets go. Readers see the GPU's bytes until then. A write that still finds no
 * room moves one value down itself, on the loop, as without the demoter (store.h). */
#ifndef GKV_XFER_DEMOTER_H
#define GKV_XFER_DEMOTER_H

#include <stdint.h>
#include <uv.h>

#include "device.h"
#include "store.h"

#define GKV_DEMOTE_FLIGHT 4

typedef struct gkv_demoter gkv_demoter_t;

/* Starts a demoter on loop over st and devs (borrowed, outliving it), keeping headroom_pct
 * (1..90) of each device's limit free. NULL when st has no host tier or headroom_pct is 0 (none
 * needed), or out of memory (logged). */
gkv_demoter_t *gkv_demoter_start(uv_loop_t *loop, gkv_store_t *st, gkv_devices_t *devs,
                                 unsigned headroom_pct);
/* Waits for the copies in flight (their values stay where they were), then starts closing its
 * handles: the loop must run out before gkv_demoter_free. NULL does nothing. */
void gkv_demoter_close(gkv_demoter_t *d);
void gkv_demoter_free(gkv_demoter_t *d);
/* Moves that took their value's place, so far. */
uint64_t gkv_demoter_done(const gkv_demoter_t *d);

#endif
