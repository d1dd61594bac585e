/* poller.h: the loop's side of backends that report copies through poll (backend.h; cuda:
 * events queried instead of a callback thread and a wake-up, which cost tens of microseconds
 * per completion). From the moment a copy starts (gkv_poller_arm) until the backend reports
 * nothing in flight, an idle handle keeps the loop from sleeping and polls the backend once
 * per iteration: the loop spins only while the GPU works for it, never when idle. */
#ifndef GKV_SERVER_POLLER_H
#define GKV_SERVER_POLLER_H

#include <stdbool.h>
#include <uv.h>

#include "backend.h"

typedef struct {
    gkv_backend_t *be; /* borrowed */
    uv_idle_t spin;
    bool ready;
} gkv_poller_t;

/* Sets p up on loop for be (borrowed, must outlive p). */
void gkv_poller_init(gkv_poller_t *p, gkv_backend_t *be, uv_loop_t *loop);
/* A copy was started: keep polling until it is reported. Cheap when already polling. */
void gkv_poller_arm(gkv_poller_t *p);
/* Starts closing p's handle (the loop must then run out). */
void gkv_poller_close(gkv_poller_t *p);

#endif
