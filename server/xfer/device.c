/* device.c: the daemon's devices (device.h). */
#include "device.h"

#include <stdio.h>
#include <string.h>

#include "error.h"

void gkv_devices_close_backends(gkv_devices_t *d)
{
    for (unsigned i = 0; i < d->n; i++)
        d->dev[i].be->ops->close(d->dev[i].be);
    d->n = 0;
}

/* Lets each device's copies reach the others' memory where the hardware allows (MOVE between
 * devices), and notes which do in peers. */
static int link_devices(gkv_devices_t *d, char *err, size_t cap)
{
    for (unsigned i = 0; i < d->n; i++) {
        for (unsigned j = 0; j < d->n; j++) {
            gkv_backend_t *be = d->dev[j].be;
            int rc = i == j || !be->ops->link ? 1 : be->ops->link(be, d->dev[i].be);
            if (rc < 0) {
                snprintf(err, cap, "giving device %u access to device %u failed", i, j);
                gkv_devices_close_backends(d);
                return rc;
            }
            if (rc)
                d->dev[i].peers |= (uint8_t)(1u << j);
        }
    }
    return 0;
}

int gkv_devices_open(gkv_devices_t *d, const gkv_devices_spec_t *spec, char *err, size_t cap)
{
    memset(d, 0, sizeof(*d));
    gkv_backend_kind_t kind = spec->kind;
    for (unsigned i = 0; i < spec->n; i++) {
        gkv_backend_config_t bc = {kind, spec->ids[i], spec->limits[i], spec->host_reserve,
                                   spec->prealloc};
        int rc = gkv_backend_open(&bc, &d->dev[i].be, err, cap);
        if (rc) {
            gkv_devices_close_backends(d);
            return rc;
        }
        d->n = i + 1;
        gkv_backend_t *be = d->dev[i].be;
        kind = strcmp(be->name, "cuda") == 0 ? GKV_BACKEND_CUDA : GKV_BACKEND_HOST;
        if (spec->n > 1 && kind == GKV_BACKEND_HOST)
            snprintf(be->gpu_uuid, sizeof(be->gpu_uuid), "HOST-%u", i);
    }
    return link_devices(d, err, cap);
}

int gkv_devices_start(gkv_devices_t *d, gkv_store_t *st, uv_loop_t *loop, gkv_staging_t *staging,
                      gkv_batch_deliver_fn deliver, char *err, size_t cap)
{
    for (unsigned i = 0; i < d->n; i++) {
        gkv_device_t *dv = &d->dev[i];
        if (gkv_batcher_init(&dv->batcher, dv->be, st, loop, &dv->poller, staging, deliver)) {
            snprintf(err, cap, "out of pinned host memory for copy batches");
            return GKV_ENOMEM;
        }
        gkv_poller_init(&dv->poller, dv->be, loop); /* the batcher keeps its address only */
        d->started = i + 1;
    }
    return 0;
}

void gkv_devices_close(gkv_devices_t *d)
{
    for (unsigned i = 0; i < d->started; i++) {
        gkv_batcher_close(&d->dev[i].batcher);
        gkv_poller_close(&d->dev[i].poller);
    }
}

void gkv_devices_fini(gkv_devices_t *d)
{
    for (unsigned i = 0; i < d->started; i++)
        gkv_batcher_fini(&d->dev[i].batcher);
    d->started = 0;
}

int gkv_devices_find_gpu(const gkv_devices_t *d, const char *uuid, size_t len)
{
    for (unsigned i = 0; i < d->n; i++) {
        const char *u = d->dev[i].be->gpu_uuid;
        if (len && strlen(u) == len && memcmp(u, uuid, len) == 0)
            return (int)i;
    }
    return -1;
}

int gkv_devices_map_gpu(const gkv_devices_t *d, const char *uuid, size_t len, unsigned ordinal)
{
    if (!len) /* a host backend of one arena: no UUID, the same ordinal, also without one */
        return ordinal < d->n && !d->dev[ordinal].be->gpu_uuid[0] ? (int)ordinal : -1;
    return gkv_devices_find_gpu(d, uuid, len);
}

gkv_dev_totals_t gkv_devices_totals(const gkv_devices_t *d)
{
    gkv_dev_totals_t t = {0};
    for (unsigned i = 0; i < d->n; i++) {
        const gkv_device_t *dv = &d->dev[i];
        t.device_total += dv->be->device_total;
        t.kept_bytes += dv->be->kept_bytes;
        t.kept_reuses += dv->be->kept_reuses;
        t.kept_ahead += dv->be->kept_ahead;
        t.held += dv->be->held;
        t.batches += dv->batcher.batches;
        t.pieces += dv->batcher.pieces;
    }
    return t;
}
