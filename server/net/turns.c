/* turns.c: what the connections share on the loop (net.h): the list, the completion queue for
 * copies finished on other threads, yielding to one another, busy-polling after input, the
 * sweep of deadlines, trimming the heap after many connections came and went, and the store's
 * changes handed to the watches and the requests waiting for keys. */
#include <gpukv/gpukv.h>
#include <malloc.h>
#include <stdlib.h>

#include "conn_impl.h"
#include "fence.h"
#include "keywait.h"
#include "log.h"
#include "watch.h"

/* After many connections have come and gone (a flood of wrong tokens, a churning client
 * population), the pages their buffers freed in the middle of the heap go back to the kernel:
 * glibc returns only the heap's top by itself, so the resident size crept up with every flood
 * (measured: 20 MiB to 35 MiB over five floods of 3,000 failed HELLOs, flat with the trim). At
 * most every TRIM_MS, after TRIM_CLOSED closes; and once more for what a wave of closes left
 * after its last trim (fewer than TRIM_CLOSED), so that its tail is not kept until the next
 * wave. A trickle of closes alone never trims. */
#define TRIM_MS 5000
#define TRIM_CLOSED 1000

/* The completion queue: every connection whose copy finished, in one go. */
static void on_wake(uv_async_t *a)
{
    gkv_net_t *net = a->data;
    pthread_mutex_lock(&net->done_lock);
    gkv_conn_t *list = net->done_head;
    net->done_head = NULL;
    pthread_mutex_unlock(&net->done_lock);
    while (list) {
        gkv_conn_t *next = list->done_next;
        gkv_conn_copy_finished(list);
        list = next;
    }
}

void gkv_net_copy_done(gkv_net_t *net, gkv_conn_t *c, int status)
{
    if (gkv_backend_polling()) { /* on the loop thread already */
        c->copy_status = status;
        gkv_conn_copy_finished(c);
        return;
    }
    pthread_mutex_lock(&net->done_lock);
    c->copy_status = status;
    c->done_next = net->done_head;
    net->done_head = c;
    pthread_mutex_unlock(&net->done_lock);
    uv_async_send(&net->wake);
}

static void on_spin(uv_idle_t *h)
{
    gkv_net_t *net = h->data;
    if (uv_hrtime() > net->spin_until_ns)
        uv_idle_stop(h);
}

void gkv_net_input(gkv_net_t *net)
{
    if (!net->set.busy_poll_us || net->stopping)
        return;
    net->spin_until_ns = uv_hrtime() + net->set.busy_poll_us * 1000;
    if (!uv_is_active((uv_handle_t *)&net->spin))
        uv_idle_start(&net->spin, on_spin);
}

static void on_turns(uv_idle_t *h)
{
    uv_idle_stop(h);
    gkv_net_run_yielded(h->data);
}

void gkv_net_run_yielded(gkv_net_t *net)
{
    gkv_conn_t *list = net->yielded;
    net->yielded = NULL;
    /* In the order they yielded; each may yield again onto the fresh list. */
    gkv_conn_t *rev = NULL;
    while (list) {
        gkv_conn_t *next = list->yield_next;
        list->yield_next = rev;
        rev = list;
        list = next;
    }
    while (rev) {
        gkv_conn_t *c = rev;
        rev = c->yield_next;
        c->yield_next = NULL;
        c->yielded = false;
        if (!c->closing)
            gkv_conn_drive(c);
    }
}

void gkv_net_yield(gkv_net_t *net, gkv_conn_t *c)
{
    c->yielded = true;
    c->yield_next = net->yielded;
    net->yielded = c;
    if (!uv_is_active((uv_handle_t *)&net->turns))
        uv_idle_start(&net->turns, on_turns);
}

void gkv_net_remove(gkv_net_t *net, gkv_conn_t *c)
{
    for (gkv_conn_t **p = &net->yielded; c->yielded && *p; p = &(*p)->yield_next)
        if (*p == c) {
            *p = c->yield_next;
            break;
        }
    if (c->prev)
        c->prev->next = c->next;
    else
        net->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    net->nconns--;
    net->closed_since_trim++;
    if (net->hooks.closed)
        net->hooks.closed(net->hooks.owner, c);
}

/* The store's changes (store.h), while anyone listens: to the watches, and a published key to
 * the requests waiting for it. */
static void on_changed(void *arg, unsigned kind, const uint8_t *key, size_t klen, uint64_t size,
                       uint64_t seq, uint64_t version)
{
    gkv_net_t *net = arg;
    /* A cluster node's events name the key's cluster version, a daemon alone's its own
     * (--key-versions; else none). */
    if (!net->cluster || gkv_cluster_reports(net->cluster, kind, key, klen, &version))
        gkv_watches_changed(net, kind, key, klen, size, seq, version);
    if (kind == GKV_EVENT_SET)
        gkv_keywaits_published(net, key, klen);
}

void gkv_net_init(gkv_net_t *net, uv_loop_t *loop)
{
    net->loop = loop;
    pthread_mutex_init(&net->done_lock, NULL);
    uv_async_init(loop, &net->wake, on_wake);
    uv_idle_init(loop, &net->spin);
    uv_idle_init(loop, &net->turns);
    net->wake.data = net->spin.data = net->turns.data = net;
    if (net->store && gkv_keywaits_init(net))
        GKV_WARN("out of memory for waiting requests: GET and MAP do not wait");
    if (net->store && gkv_watches_init(net))
        GKV_WARN("out of memory for watches: WATCH answers NOMEM");
    if (net->store && gkv_fences_init(net))
        GKV_WARN("out of memory for fences: asynchronous seals answer NOTSUP");
    if (net->store) {
        net->store->changed = on_changed;
        net->store->changed_arg = net;
    }
    net->open = true;
}

void gkv_net_close(gkv_net_t *net)
{
    if (!net->open)
        return;
    net->open = false;
    uv_close((uv_handle_t *)&net->spin, NULL);
    uv_close((uv_handle_t *)&net->turns, NULL);
    uv_close((uv_handle_t *)&net->wake, NULL);
    gkv_keywaits_close(net);
    gkv_fences_close(net);
}

void gkv_net_fini(gkv_net_t *net)
{
    if (net->store && net->store->changed_arg == net)
        net->store->changed = NULL;
    gkv_keywaits_free(net);
    gkv_watches_free(net);
    gkv_fences_free(net);
    pthread_mutex_destroy(&net->done_lock);
}

void gkv_net_stop_conns(gkv_net_t *net, uint64_t except, bool now)
{
    gkv_conn_t *c = net->conns;
    while (c) {
        gkv_conn_t *next = c->next; /* c may leave the list only in its close callback */
        if (c->id != except) {
            if (now)
                gkv_conn_stop_now(c);
            else
                gkv_conn_stop(c);
        }
        c = next;
    }
}

static void trim_heap(gkv_net_t *net, uint64_t now)
{
    if (!net->closed_since_trim || now - net->trimmed_at < TRIM_MS ||
        (net->closed_since_trim < TRIM_CLOSED && !net->trim_wave))
        return;
    net->trim_wave = net->closed_since_trim >= TRIM_CLOSED; /* its tail is trimmed next time */
    net->closed_since_trim = 0;
    net->trimmed_at = now;
    malloc_trim(0);
}

void gkv_net_sweep(gkv_net_t *net, uint64_t now)
{
    if (now >= net->auth_decay_at) {
        net->auth_recent /= 2;
        net->auth_decay_at = now + 10000;
    }
    trim_heap(net, now);
    gkv_conn_t *c = net->conns;
    while (c) {
        gkv_conn_t *next = c->next; /* c leaves the list only in its close callback */
        gkv_conn_sweep(c, now);
        c = next;
    }
}

uint64_t gkv_net_waiting_stage(const gkv_net_t *net)
{
    uint64_t n = 0;
    for (const gkv_conn_t *c = net->conns; c; c = c->next)
        n += c->wait.stage;
    return n;
}
