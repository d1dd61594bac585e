/* looplag.h: how long the loop stays busy between two waits for events (while it is, no
 * request anywhere is answered): each turn's time less the time libuv spent waiting
 * (UV_METRICS_IDLE_TIME). For INFO (# Stats loop_busy_max_us, loop_stalls) and GPUKV_TRACE
 * ("d_busy", the turn's busy microseconds, for a turn busy 1 ms or more). On the loop. */
#ifndef GKV_LOOPLAG_H
#define GKV_LOOPLAG_H

#include <stdint.h>
#include <uv.h>

#define GKV_LOOP_STALL_US 10000 /* a turn busy this long is a stall */

typedef struct {
    uv_prepare_t prep;
    uint64_t at_ns, idle_ns; /* the last turn's start, and the loop's idle time then */
    uint64_t max_us;         /* the longest busy turn */
    uint64_t stalls;         /* turns busy GKV_LOOP_STALL_US or more */
} gkv_looplag_t;

/* Starts measuring loop's turns (the handle is closed with the loop's others). */
void gkv_looplag_start(gkv_looplag_t *l, uv_loop_t *loop);

#endif
