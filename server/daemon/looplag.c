/* looplag.c: the loop's busy turns (looplag.h). */
#include "looplag.h"

#include "trace.h"

/* Before each wait: the turn since the last one, less the time spent waiting in it. */
static void on_turn(uv_prepare_t *h)
{
    gkv_looplag_t *l = h->data;
    uint64_t now = uv_hrtime(), idle = uv_metrics_idle_time(h->loop);
    if (l->at_ns) {
        uint64_t turn = now - l->at_ns, waited = idle - l->idle_ns;
        uint64_t busy_us = (turn > waited ? turn - waited : 0) / 1000;
        if (busy_us > l->max_us)
            l->max_us = busy_us;
        if (busy_us >= GKV_LOOP_STALL_US)
            l->stalls++;
        if (busy_us >= 1000)
            gkv_trace("d_busy", busy_us, 0);
    }
    l->at_ns = now;
    l->idle_ns = idle;
}

void gkv_looplag_start(gkv_looplag_t *l, uv_loop_t *loop)
{
    uv_loop_configure(loop, UV_METRICS_IDLE_TIME); /* from now on; an error leaves idle 0 */
    uv_prepare_init(loop, &l->prep);
    l->prep.data = l;
    uv_prepare_start(&l->prep, on_turn);
}
