/* persist_env.h: what persistence (the fd store, snapshots) works on, borrowed from the daemon,
 * which outlives it: the store, the devices, the loop, and the one setting both loaders check. */
#ifndef GKV_PERSIST_ENV_H
#define GKV_PERSIST_ENV_H

#include <stdint.h>
#include <uv.h>

#include "device.h"
#include "store.h"

typedef struct {
    gkv_store_t *store;
    gkv_devices_t *devs;
    uv_loop_t *loop;
    uint32_t max_key; /* --max-key-size (not reloadable): longer keys are not loaded */
} gkv_persist_env_t;

/* The journal's name for the host tier's memory (its device record's UUID): the tier is the
 * journal's and the fd store's memory index after the GPUs (devs->n), where that is below
 * GKV_MAX_DEVICES (with that many GPUs the tier's values are recorded as gone). */
#define GKV_HOST_TIER_UUID "host-tier"

/* The memories the fd store and a takeover pass on, by index: the GPUs', then the host tier's
 * (above). Returns how many; be[i] and uuid[i] (borrowed) say whose. */
static inline unsigned gkv_persist_memories(const gkv_persist_env_t *env,
                                            gkv_backend_t *be[GKV_MAX_DEVICES],
                                            const char *uuid[GKV_MAX_DEVICES])
{
    unsigned n = 0;
    for (; n < env->devs->n; n++) {
        be[n] = env->devs->dev[n].be;
        uuid[n] = be[n]->gpu_uuid;
    }
    if (env->store->host_tier && n < GKV_MAX_DEVICES) {
        be[n] = env->store->dev[GKV_DEV_HOST_TIER].be;
        uuid[n++] = GKV_HOST_TIER_UUID;
    }
    return n;
}

#endif
