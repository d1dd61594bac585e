/* nixl_agent.c: this node's NIXL agent (nixl_agent.h). */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "error.h"
#include "nixl_agent.h"

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

int gkv_nixl_agent_open(gkv_nixl_agent_t *a, const gkv_nixl_api_t *api, const char *name, bool gpu,
                        char *why, size_t cap)
{
    memset(a, 0, sizeof(*a));
    a->api = api;
    snprintf(a->name, sizeof(a->name), "%s", name);
    pthread_mutex_init(&a->lock, NULL);
    /* NIXL's progress thread (the target side of a transfer needs one: without it transfers
     * never finished, on the CPU machine and on GPUs alike) sleeps between rounds: 100 us asked
     * for host memory, which NIXL's UCX backend rounds up to 1 ms (100 and 1000 us measured
     * alike). Before each sleep it arms UCX's worker, and UCX's CUDA transport then puts a host
     * callback on the stream of its copies in flight: the stream holds the copies behind it
     * until the callback ran, 100 us and more (RESULTS.md, session 36: every pause over 20 us
     * in a pull followed one). So with GPU memory it sleeps 5 ms: the callbacks still wake it
     * when copies end, our waits progress the worker themselves, and a 1 GiB pull meets 2-4
     * callbacks instead of 6-9. GPUKV_NIXL_PTHR_US sets the sleep (0 spins and arms all the
     * time: far slower). RW locking inside NIXL, so that worker threads post and poll at once. */
    const char *prog = getenv("GPUKV_NIXL_PROGRESS"), *delay = getenv("GPUKV_NIXL_PTHR_US");
    /* UCX workers behind the agent. With one, every thread's posts and polls meet at its lock:
     * session 46 saw 16 concurrent pulls' posts wait for each other, 322 us each by the median.
     * With four (session 47, 2x H200, alternating) a round's last post left at 1.2 ms instead of
     * 2.3, and 16 reader processes pulling 64 MiB values ran 0.77x the peer copy by the median
     * of 22 runs (0.69-0.82) against 0.74x of 13 with one (0.72-0.82); a 1 GiB pull alone
     * 0.81-0.91x against 0.76-0.80x. 8 and 16 gained nothing more. GPUKV_NIXL_WORKERS=N (1-64)
     * sets it, for measurements. */
    const char *workers = getenv("GPUKV_NIXL_WORKERS");
    a->workers = workers && atoi(workers) > 0 && atoi(workers) <= 64 ? (unsigned)atoi(workers)
                                                                     : GKV_NIXL_WORKERS;
    gkv_nixl_agent_cfg_t cfg = {.enable_prog_thread = !(prog && !strcmp(prog, "0")),
                                .thread_sync = 2,
                                .num_workers = a->workers,
                                .pthr_delay_us = delay ? strtoull(delay, NULL, 10)
                                                 : gpu ? 5000
                                                       : 100};
    const char *lock = getenv("GPUKV_NIXL_LOCK");
    a->unlocked = !(lock && !strcmp(lock, "1"));
    if (api->create_configured_agent(a->name, &cfg, &a->agent) != GKV_NIXL_OK) {
        snprintf(why, cap, "NIXL could not create its agent");
        return GKV_EIO;
    }
    gkv_nixl_h mems = NULL, params = NULL;
    int rc = api->get_plugin_params(a->agent, "UCX", &mems, &params);
    if (rc == GKV_NIXL_OK)
        rc = api->create_backend(a->agent, "UCX", params, &a->backend);
    if (mems)
        api->destroy_mem_list(mems);
    if (params)
        api->destroy_params(params);
    if (rc != GKV_NIXL_OK) {
        snprintf(why, cap, "NIXL has no UCX backend here (its plugin did not load)");
        api->destroy_agent(a->agent);
        a->agent = NULL;
        return GKV_EIO;
    }
    return 0;
}

int gkv_nixl_agent_register(gkv_nixl_agent_t *a, void *addr, size_t len, int mem, uint64_t dev,
                            char *why, size_t cap)
{
    const gkv_nixl_api_t *api = a->api;
    gkv_nixl_h list = NULL;
    if (a->nregs == GKV_NIXL_REGS || api->create_reg_dlist(mem, &list) != GKV_NIXL_OK) {
        snprintf(why, cap, "NIXL: no registration list");
        return GKV_EIO;
    }
    pthread_mutex_lock(&a->lock);
    int rc = api->reg_dlist_add_desc(list, (uintptr_t)addr, len, dev, NULL, 0);
    if (rc == GKV_NIXL_OK)
        rc = api->register_mem(a->agent, list, NULL);
    pthread_mutex_unlock(&a->lock);
    if (rc != GKV_NIXL_OK) {
        api->destroy_reg_dlist(list);
        snprintf(why, cap, "NIXL refused to register %zu bytes of %s memory (status %d)", len,
                 mem == GKV_NIXL_VRAM ? "GPU" : "host", rc);
        return GKV_EIO;
    }
    a->regs[a->nregs++] = list;
    return 0;
}

int gkv_nixl_agent_md(gkv_nixl_agent_t *a, void **md, size_t *len)
{
    pthread_mutex_lock(&a->lock);
    int rc = a->api->get_local_md(a->agent, md, len);
    pthread_mutex_unlock(&a->lock);
    return rc == GKV_NIXL_OK ? 0 : GKV_EIO;
}

int gkv_nixl_agent_load(gkv_nixl_agent_t *a, const void *md, size_t len, char *name, size_t cap)
{
    char *got = NULL;
    pthread_mutex_lock(&a->lock);
    int rc = a->api->load_remote_md(a->agent, md, len, &got);
    pthread_mutex_unlock(&a->lock);
    if (rc != GKV_NIXL_OK || !got)
        return GKV_EIO;
    snprintf(name, cap, "%s", got);
    free(got);
    return 0;
}

void gkv_nixl_agent_forget(gkv_nixl_agent_t *a, const char *name)
{
    pthread_mutex_lock(&a->lock);
    a->api->invalidate_remote_md(a->agent, name);
    pthread_mutex_unlock(&a->lock);
}

/* Transfers take the agent's lock only when asked (GPUKV_NIXL_LOCK=1): NIXL's RW locking
 * lets threads post and poll at once. */
static void xlock(gkv_nixl_agent_t *a)
{
    if (!a->unlocked)
        pthread_mutex_lock(&a->lock);
}

static void xunlock(gkv_nixl_agent_t *a)
{
    if (!a->unlocked)
        pthread_mutex_unlock(&a->lock);
}

/* A descriptor list of one buffer. NULL on failure. */
static gkv_nixl_h one_desc(const gkv_nixl_api_t *api, int mem, uint64_t addr, size_t len,
                           uint64_t dev)
{
    gkv_nixl_h l = NULL;
    if (api->create_xfer_dlist(mem, &l) != GKV_NIXL_OK)
        return NULL;
    if (api->xfer_dlist_add_desc(l, (uintptr_t)addr, len, dev) != GKV_NIXL_OK) {
        api->destroy_xfer_dlist(l);
        return NULL;
    }
    return l;
}

int gkv_nixl_agent_post(gkv_nixl_agent_t *a, int op, const char *peer, const void *addr,
                        size_t len, int mem, uint64_t dev, uint64_t raddr, int rmem,
                        uint64_t rdev, gkv_nixl_xfer_t *x, char *why, size_t cap)
{
    return gkv_nixl_agent_post_notify(a, op, peer, addr, len, mem, dev, raddr, rmem, rdev, NULL,
                                      0, x, why, cap);
}

int gkv_nixl_agent_post_notify(gkv_nixl_agent_t *a, int op, const char *peer, const void *addr,
                               size_t len, int mem, uint64_t dev, uint64_t raddr, int rmem,
                               uint64_t rdev, const void *notif, size_t notif_len,
                               gkv_nixl_xfer_t *x, char *why, size_t cap)
{
    const gkv_nixl_api_t *api = a->api;
    gkv_nixl_h local = one_desc(api, mem, (uintptr_t)addr, len, dev);
    gkv_nixl_h remote = one_desc(api, rmem, raddr, len, rdev);
    gkv_nixl_h opt = NULL;
    x->req = NULL;
    int rc = local && remote ? GKV_NIXL_OK : -1;
    if (rc == GKV_NIXL_OK && notif) {
        rc = api->create_opt_args(&opt);
        if (rc == GKV_NIXL_OK)
            rc = api->opt_args_set_notif_msg(opt, notif, notif_len);
        if (rc == GKV_NIXL_OK)
            rc = api->opt_args_set_has_notif(opt, true);
    }
    xlock(a);
    if (rc == GKV_NIXL_OK)
        rc = api->create_xfer_req(a->agent, op, local, remote, peer, &x->req, opt);
    if (rc == GKV_NIXL_OK)
        rc = api->post_xfer_req(a->agent, x->req, opt);
    xunlock(a);
    if (opt)
        api->destroy_opt_args(opt);
    if (local)
        api->destroy_xfer_dlist(local);
    if (remote)
        api->destroy_xfer_dlist(remote);
    x->rc = rc;
    if (rc < 0) {
        snprintf(why, cap, "NIXL refused the transfer (status %d: no zero-copy path?)", rc);
        return GKV_EIO;
    }
    return 0;
}

int gkv_nixl_agent_wait(gkv_nixl_agent_t *a, gkv_nixl_xfer_t *x, const char *peer,
                        int timeout_ms, bool *stuck, char *why, size_t cap)
{
    const gkv_nixl_api_t *api = a->api;
    int rc = x->rc, out = rc < 0 ? GKV_EIO : 0;
    /* Spin briefly (a chunk takes tens of microseconds on NVLink), then yield. */
    uint64_t until = now_us() + (uint64_t)timeout_ms * 1000;
    unsigned polls = 0;
    static int pause_us = -1; /* GPUKV_NIXL_POLL_US, for measurements: sleep between polls */
    if (pause_us < 0) {
        const char *e = getenv("GPUKV_NIXL_POLL_US");
        pause_us = e ? atoi(e) : 0;
    }
    while (!out && rc == GKV_NIXL_IN_PROG) {
        if (pause_us > 0) {
            struct timespec ts = {0, pause_us * 1000L};
            nanosleep(&ts, NULL);
        } else if (++polls > 64) {
            sched_yield();
        }
        xlock(a);
        rc = api->get_xfer_status(a->agent, x->req);
        xunlock(a);
        if (rc == GKV_NIXL_IN_PROG && now_us() > until) {
            snprintf(why, cap, "a NIXL transfer to %s did not finish in %d ms", peer, timeout_ms);
            out = GKV_EUNAVAILABLE;
        }
    }
    if (!out && rc != GKV_NIXL_OK) {
        snprintf(why, cap, "a NIXL transfer to %s failed (status %d)", peer, rc);
        out = GKV_EUNAVAILABLE;
    }
    if (x->req) {
        xlock(a);
        int rel = api->release_xfer_req(a->agent, x->req);
        xunlock(a);
        if (rel != GKV_NIXL_OK && out) {
            *stuck = true; /* still posted: its memory must stay as it is */
            a->stuck++;
        } else {
            api->destroy_xfer_req(x->req);
        }
        x->req = NULL;
    }
    return out;
}

int gkv_nixl_agent_xfer(gkv_nixl_agent_t *a, int op, const char *peer, const void *addr,
                        size_t len, int mem, uint64_t dev, uint64_t raddr, int rmem,
                        uint64_t rdev, int timeout_ms, bool *stuck, char *why, size_t cap)
{
    gkv_nixl_xfer_t x;
    *stuck = false;
    gkv_nixl_agent_post(a, op, peer, addr, len, mem, dev, raddr, rmem, rdev, &x, why, cap);
    return gkv_nixl_agent_wait(a, &x, peer, timeout_ms, stuck, why, cap);
}

int gkv_nixl_agent_notify(gkv_nixl_agent_t *a, const char *peer, const void *msg, size_t len)
{
    xlock(a);
    int rc = a->api->gen_notif(a->agent, peer, msg, len, NULL);
    xunlock(a);
    return rc == GKV_NIXL_OK ? 0 : GKV_EIO;
}

int gkv_nixl_agent_notifs(gkv_nixl_agent_t *a, void (*fn)(void *arg, const void *msg, size_t len),
                          void *arg)
{
    const gkv_nixl_api_t *api = a->api;
    if (!a->notifs && api->create_notif_map(&a->notifs) != GKV_NIXL_OK)
        return -1;
    xlock(a);
    int rc = api->get_notifs(a->agent, a->notifs, NULL);
    xunlock(a);
    if (rc != GKV_NIXL_OK)
        return -1;
    size_t agents = 0;
    int got = 0;
    api->notif_map_size(a->notifs, &agents);
    for (size_t i = 0; i < agents; i++) {
        const char *name = NULL;
        size_t n = 0;
        if (api->notif_map_get_agent_at(a->notifs, i, &name) != GKV_NIXL_OK || !name)
            continue;
        api->notif_map_get_notifs_size(a->notifs, name, &n);
        for (size_t k = 0; k < n; k++) {
            const void *msg = NULL;
            size_t len = 0;
            if (api->notif_map_get_notif(a->notifs, name, k, &msg, &len) == GKV_NIXL_OK) {
                fn(arg, msg, len);
                got++;
            }
        }
    }
    api->notif_map_clear(a->notifs);
    return got;
}

void gkv_nixl_agent_close(gkv_nixl_agent_t *a)
{
    const gkv_nixl_api_t *api = a->api;
    if (!api)
        return;
    if (a->notifs)
        api->destroy_notif_map(a->notifs);
    a->notifs = NULL;
    for (unsigned i = 0; i < a->nregs; i++) {
        api->deregister_mem(a->agent, a->regs[i], NULL);
        api->destroy_reg_dlist(a->regs[i]);
    }
    a->nregs = 0;
    if (a->backend)
        api->destroy_backend(a->backend);
    if (a->agent)
        api->destroy_agent(a->agent);
    a->agent = a->backend = NULL;
    pthread_mutex_destroy(&a->lock);
}
