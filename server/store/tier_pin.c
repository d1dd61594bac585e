/* tier_pin.c: the host tier's memory page-locked by a thread of its own (tier_pin.h). */
#include "tier_pin.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "duration.h"
#include "error.h"
#include "log.h"

struct gkv_tier_pin {
    pthread_t thread;
    gkv_backend_t *gpu, *tier; /* borrowed */
    size_t n;                  /* regions (one: the whole tier, tier_pin.h) */
    uint64_t span;             /* a region's length */
    uint8_t *locked;           /* per region: 1 once locked (the thread's; read after join) */
    atomic_size_t through;     /* regions the thread has been through */
    atomic_uint_fast64_t bytes; /* of them, locked */
    atomic_bool stop;
};

/* The start of the tier's region i, and its length (the last one may be short). */
static uint8_t *region(const gkv_tier_pin_t *p, size_t i, size_t *len)
{
    uint64_t at = i * p->span, left = p->tier->capacity - at;
    *len = (size_t)(left < p->span ? left : p->span);
    return p->tier->ops->host_view(p->tier, (gkv_devptr_t){.v = at});
}

static void *run(void *arg)
{
    gkv_tier_pin_t *p = arg;
    uint64_t t0 = gkv_clock_ms();
    size_t refused = 0;
    for (size_t i = 0; i < p->n && !atomic_load(&p->stop); i++) {
        size_t len;
        uint8_t *at = region(p, i, &len);
        if (p->gpu->ops->pin_host(p->gpu, at, len) == 0) {
            p->locked[i] = 1;
            atomic_fetch_add(&p->bytes, len);
        } else if (refused++ == 0) {
            GKV_WARN("host tier: region %zu could not be page-locked: copies between it and the "
                     "GPUs go through the driver's buffers",
                     i);
        }
        atomic_store(&p->through, i + 1);
    }
    if (atomic_load(&p->through) == p->n)
        GKV_INFO("host tier: %.1f GiB page-locked for the GPUs' copies in %.1f s (%zu of %zu "
                 "regions refused)",
                 (double)atomic_load(&p->bytes) / (1u << 30), (double)(gkv_clock_ms() - t0) / 1e3, refused, p->n);
    return NULL;
}

gkv_tier_pin_t *gkv_tier_pin_start(gkv_backend_t *gpu, gkv_backend_t *tier, int *rc)
{
    *rc = 0;
    if (!gpu->ops->pin_host)
        return NULL;
    gkv_tier_pin_t *p = calloc(1, sizeof(*p));
    size_t n = 1;
    if (!p || !(p->locked = calloc(n ? n : 1, 1))) {
        free(p);
        *rc = GKV_ENOMEM;
        return NULL;
    }
    p->gpu = gpu;
    p->tier = tier;
    p->n = n;
    p->span = tier->capacity;
    if (pthread_create(&p->thread, NULL, run, p)) {
        free(p->locked);
        free(p);
        *rc = GKV_ESYS;
        return NULL;
    }
    return p;
}

uint64_t gkv_tier_pin_locked(const gkv_tier_pin_t *p)
{
    return p ? atomic_load(&p->bytes) : 0;
}

bool gkv_tier_pin_done(const gkv_tier_pin_t *p)
{
    return !p || atomic_load(&p->through) == p->n;
}

void gkv_tier_pin_stop(gkv_tier_pin_t *p)
{
    if (!p)
        return;
    atomic_store(&p->stop, true);
    pthread_join(p->thread, NULL);
    for (size_t i = 0; i < p->n; i++) {
        size_t len;
        if (p->locked[i])
            p->gpu->ops->unpin_host(p->gpu, region(p, i, &len));
    }
    free(p->locked);
    free(p);
}
