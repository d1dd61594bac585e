/* tier_pin.h: the host tier's memory page-locked for the GPUs' copies (store.h's host tier) by
 * a thread of its own, started with the tier: the whole of it in one registration. Not in
 * parts: an asynchronous copy whose host range spans two registrations is refused by the driver
 * (cudaErrorInvalidValue), and the tier's values may lie anywhere. A copy between a GPU and the
 * tier before the lock is done goes through the driver's bounce buffers: slower, not wrong;
 * the loop never waits for the lock. Locking takes the memory (the pages are made), as
 * cudaHostAlloc would. */
#ifndef GKV_TIER_PIN_H
#define GKV_TIER_PIN_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"

typedef struct gkv_tier_pin gkv_tier_pin_t;

/* Starts locking tier's memory for gpu's copies (both borrowed: they outlive the pin). Returns
 * NULL with *rc 0 where gpu's backend needs nothing locked (no pin_host: host), or with *rc
 * GKV_ENOMEM or GKV_ESYS (no thread). */
gkv_tier_pin_t *gkv_tier_pin_start(gkv_backend_t *gpu, gkv_backend_t *tier, int *rc);
/* Bytes locked so far, and whether the thread has been through every region (a region the
 * driver refused is logged and left unlocked). p may be NULL: 0, true. */
uint64_t gkv_tier_pin_locked(const gkv_tier_pin_t *p);
bool gkv_tier_pin_done(const gkv_tier_pin_t *p);
/* Stops the thread (after the region it is locking), unlocks what it locked and frees p (NULL
 * does nothing). Before the tier's memory goes. */
void gkv_tier_pin_stop(gkv_tier_pin_t *p);

#endif
