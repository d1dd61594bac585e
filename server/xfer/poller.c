/* poller.c: polling the backend for finished copies while any are in flight; see poller.h. */
#include "poller.h"

static void on_spin(uv_idle_t *h)
{
    gkv_poller_t *p = h->data;
    if (!gkv_backend_poll(p->be))
        uv_idle_stop(h);
}

void gkv_poller_init(gkv_poller_t *p, gkv_backend_t *be, uv_loop_t *loop)
{
    *p = (gkv_poller_t){.be = be};
    uv_idle_init(loop, &p->spin);
    p->spin.data = p;
    p->ready = true;
}

void gkv_poller_arm(gkv_poller_t *p)
{
    if (p->be->ops->poll && p->ready && !uv_is_active((uv_handle_t *)&p->spin))
        uv_idle_start(&p->spin, on_spin);
}

void gkv_poller_close(gkv_poller_t *p)
{
    if (!p->ready)
        return;
    p->ready = false;
    uv_close((uv_handle_t *)&p->spin, NULL);
}
