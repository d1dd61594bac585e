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

#endif
