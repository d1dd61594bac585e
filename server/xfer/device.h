/* device.h: the daemon's devices: each GPU it serves (--devices), or each arena of the host
 * backend standing for one. Per device: its backend (memory, copy lanes, exports), its copy
 * batches and the polling of its copies in flight. What stays single is the store's index (one
 * key space), staging, connections and leases; the store keeps each device's accounting
 * (store.h gkv_store_dev_t) and each entry the ordinal of the device its value is on.
 * docs/multi-gpu.md says why. */
#ifndef GKV_XFER_DEVICE_H
#define GKV_XFER_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "backend.h"
#include "batch.h"
#include "poller.h"
#include "staging.h"
#include "store.h"

typedef struct {
    gkv_backend_t *be;     /* owned */
    gkv_poller_t poller;   /* its copies in flight */
    gkv_batcher_t batcher; /* its small copies */
    uint8_t peers;         /* bit j: this device reads and writes device j's memory directly */
} gkv_device_t;

typedef struct {
    gkv_device_t dev[GKV_MAX_DEVICES]; /* the store's device i is dev[i] */
    unsigned n;                        /* devices open */
    unsigned started; /* of them, with a poller and a batcher (gkv_devices_start) */
} gkv_devices_t;

/* Which devices to open: n ordinals (ids) of one backend kind (AUTO: cuda when a GPU is
 * usable, else host; every device then takes the first one's kind), each with its memory limit
 * (0: the backend's default). host_reserve: host memory the daemon needs beside values
 * (backend.h); prealloc: what each GPU's pool takes at open (backend.h, --prealloc). */
typedef struct {
    gkv_backend_kind_t kind;
    int ids[GKV_MAX_DEVICES];
    uint64_t limits[GKV_MAX_DEVICES];
    unsigned n;
    uint64_t host_reserve;
    uint64_t prealloc;
} gkv_devices_spec_t;

/* Opens the backends spec names into d (zeroed first) and lets each device's copies reach the
 * others' memory where the hardware allows (peers). Several host arenas stand for GPUs and say
 * so (HOST-i). Returns 0, or a code with err (cap bytes) saying why; nothing is left open then. */
int gkv_devices_open(gkv_devices_t *d, const gkv_devices_spec_t *spec, char *err, size_t cap);
/* Sets up each device's poller and batcher on loop over st and staging (borrowed, must outlive
 * d); deliver gets the bytes of small GET replies. Returns 0 or GKV_ENOMEM with err (cap bytes);
 * on failure the loop must run out (handles closing), then gkv_devices_fini. */
int gkv_devices_start(gkv_devices_t *d, gkv_store_t *st, uv_loop_t *loop, gkv_staging_t *staging,
                      gkv_batch_deliver_fn deliver, char *err, size_t cap);
/* Starts closing the handles of the devices started (the loop must then run out). */
void gkv_devices_close(gkv_devices_t *d);
/* After the loop ran out: frees the batchers of the devices started. */
void gkv_devices_fini(gkv_devices_t *d);
/* Closes the backends (nothing may use their memory any more). */
void gkv_devices_close_backends(gkv_devices_t *d);

/* The device an entry's value is on. */
static inline gkv_device_t *gkv_devices_of(gkv_devices_t *d, const gkv_entry_t *e)
{
    return &d->dev[e->dev];
}
/* The ordinal of the first device whose GPU UUID is the len bytes at uuid, or -1. */
int gkv_devices_find_gpu(const gkv_devices_t *d, const char *uuid, size_t len);
/* Where a value another daemon recorded on its device `ordinal`, with that GPU's UUID (len
 * bytes), goes here (snapshots, the fd store): the device with that UUID, or for an empty UUID
 * (a host arena of one has none) the device of the same ordinal when it has none either; -1
 * when there is none. */
int gkv_devices_map_gpu(const gkv_devices_t *d, const char *uuid, size_t len, unsigned ordinal);

/* What the devices' backends and batchers count, summed (INFO, metrics). */
typedef struct {
    uint64_t device_total, kept_bytes, kept_reuses, kept_ahead, held, batches, pieces;
} gkv_dev_totals_t;
gkv_dev_totals_t gkv_devices_totals(const gkv_devices_t *d);

#endif
