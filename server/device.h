/* device.h: one GPU of the daemon (--devices), or one arena of the host backend standing for one.
 * Per device: its backend (memory, copy lanes, exports), its copy batches and the polling of
 * its copies in flight. What stays single is the store's index (one key space), staging,
 * connections and leases; the store keeps each device's accounting (store.h gkv_store_dev_t)
 * and each entry the ordinal of the device its value is on. docs/multi-gpu.md says why. */
#ifndef GKV_SERVER_DEVICE_H
#define GKV_SERVER_DEVICE_H

#include "backend.h"
#include "batch.h"
#include "poller.h"

typedef struct {
    gkv_backend_t *be;     /* owned */
    gkv_poller_t poller;   /* its copies in flight */
    gkv_batcher_t batcher; /* its small copies */
    uint8_t peers;         /* bit j: this device reads and writes device j's memory directly */
} gkv_device_t;

#endif
