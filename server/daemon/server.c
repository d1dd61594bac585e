/* server.c: listeners, signals, the copy-completion wake-up and orderly shutdown. */
#include "server.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "admin.h"
#include "conn.h"
#include "demoter.h"
#include "duration.h"
#include "error.h"
#include "hostport.h"
#include "keywait.h"
#include "log.h"
#include "metrics_http.h"
#include "notify.h"
#include "paths.h"
#include "ram.h"
#include "size.h"

#define SWEEP_MS 250 /* how often deadlines are checked */

static void on_signal(uv_signal_t *h, int signum)
{
    gkv_server_t *s = h->data;
    GKV_INFO("received %s, shutting down", signum == SIGTERM ? "SIGTERM" : "SIGINT");
    gkv_server_stop(s);
}

static void on_grace_timeout(uv_timer_t *t)
{
    gkv_server_t *s = t->data;
    GKV_WARN("%llu connections still open after %llu ms; closing them",
             (unsigned long long)s->net.nconns, (unsigned long long)s->cfg.shutdown_grace_ms);
    gkv_net_stop_conns(&s->net, 0, true);
}

static void on_sweep(uv_timer_t *t)
{
    gkv_server_t *s = t->data;
    uint64_t now = uv_now(s->loop);
    if (s->watchdog_ms && now - s->watchdog_at >= s->watchdog_ms / 2) {
        gkv_notify("WATCHDOG=1");
        s->watchdog_at = now;
    }
    gkv_net_sweep(&s->net, now);
    gkv_metrics_http_sweep(s, now);
}

static void on_expiry(uv_timer_t *t)
{
    gkv_server_t *s = t->data;
    if (s->takeover.draining) {
        /* Handing over: the memory the journal names must stay as it is (a successor may be
         * copying it); a successor that goes away schedules expiry again. */
        s->expiry_at = 0;
        return;
    }
    s->store.now_ms = gkv_clock_ms();
    gkv_store_reap(&s->store, 1024);
    s->expiry_at = 0;
    gkv_server_schedule_expiry(s);
}

void gkv_server_schedule_expiry(gkv_server_t *s)
{
    uint64_t next = gkv_store_next_deadline(&s->store);
    if (!next || s->shutting_down || (s->expiry_at && s->expiry_at <= next))
        return;
    uint64_t now = gkv_clock_ms();
    s->expiry_at = next;
    /* Relative to the loop's (older) time: it may fire a little early, then schedules again. */
    uv_timer_start(&s->expiry, on_expiry, next > now ? next - now : 0, 0);
}

/* --key-order-thread: auto starts the helper where 4 or more CPUs may run this process (on
 * fewer it takes CPU from the clients beside it: RESULTS.md, session 12). True when it runs. */
static bool start_key_order(gkv_server_t *s)
{
    gkv_tristate_t want = s->cfg.key_order_thread;
    if (want == GKV_AUTO) {
        cpu_set_t set;
        bool many = sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) >= 4;
        want = many ? GKV_YES : GKV_NO;
    }
    if (want != GKV_YES)
        return false;
    int rc = gkv_index_start_helper(s->store.ix);
    if (rc)
        GKV_WARN("no key order thread (%s): the loop keeps the key order", strerror(rc));
    return rc == 0;
}

/* Once per turn, before the loop waits for I/O: what the turn queued for the key order is
 * applied by its helper meanwhile (order.h), and the backends do their work ahead of need
 * (backend.h's ahead: the turn's replies have gone out). */
static void on_ahead(uv_idle_t *h)
{
    (void)h; /* only keeps the loop from waiting: on_kick does the work */
}

static void on_kick(uv_prepare_t *p)
{
    gkv_server_t *s = p->data;
    gkv_index_kick(s->store.ix);
    bool more = false;
    for (unsigned i = 0; i < s->devs.n; i++) {
        gkv_backend_t *be = s->devs.dev[i].be;
        if (be->ops->ahead && be->ops->ahead(be))
            more = true;
    }
    if (more && !s->shutting_down)
        uv_idle_start(&s->ahead, on_ahead);
    else
        uv_idle_stop(&s->ahead);
}

/* Once every connection is gone, closing the remaining handles lets uv_run return. */
static void maybe_finish(gkv_server_t *s)
{
    if (!s->shutting_down || s->net.nconns)
        return;
    if (s->net.open) {
        gkv_cluster_close(&s->cluster); /* its jobs hold no connection any more */
        gkv_demoter_close(s->demoter);
        gkv_devices_close(&s->devs);
        gkv_net_close(&s->net);
        uv_close((uv_handle_t *)&s->kick, NULL);
        uv_close((uv_handle_t *)&s->lag.prep, NULL);
        uv_close((uv_handle_t *)&s->ahead, NULL);
        /* A second SIGTERM (or SIGINT) while the store is torn down must not kill it half-way.
         * Closing a signal handle puts back the default action at once: the signals stay
         * blocked until they are ignored, so none can arrive in between. */
        sigset_t term, old;
        sigemptyset(&term);
        sigaddset(&term, SIGTERM);
        sigaddset(&term, SIGINT);
        pthread_sigmask(SIG_BLOCK, &term, &old);
        uv_close((uv_handle_t *)&s->sigterm, NULL);
        uv_close((uv_handle_t *)&s->sigint, NULL);
        signal(SIGTERM, SIG_IGN);
        signal(SIGINT, SIG_IGN);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        uv_close((uv_handle_t *)&s->sighup, NULL);
        uv_close((uv_handle_t *)&s->shutdown_timer, NULL);
        uv_close((uv_handle_t *)&s->sweep, NULL);
        uv_close((uv_handle_t *)&s->expiry, NULL);
        uv_close((uv_handle_t *)&s->takeover.grace, NULL);
        gkv_snapshot_close(&s->snapshots);
    }
}

void gkv_server_resolve(const gkv_server_t *s, gkv_config_t *cfg)
{
    /* Each device's limit is its backend's capacity (--maxmemory, or 90% of its memory). */
    uint64_t total = 0, largest = 0;
    for (unsigned i = 0; i < s->devs.n; i++) {
        total += s->devs.dev[i].be->capacity;
        largest = s->devs.dev[i].be->capacity > largest ? s->devs.dev[i].be->capacity : largest;
    }
    cfg->maxmemory = total;
    cfg->nmaxmemory = s->cfg.nmaxmemory; /* as given: a reload compares them */
    memcpy(cfg->maxmemory_each, s->cfg.maxmemory_each, sizeof(cfg->maxmemory_each));
    if (!cfg->max_value || cfg->max_value > largest)
        cfg->max_value = largest; /* a value lives on one device */
    if (!cfg->max_leased_bytes)
        cfg->max_leased_bytes = cfg->maxmemory;
    if (cfg->host_copy == GKV_SIZE_AUTO)
        cfg->host_copy = s->devs.dev[0].be->host_visible ? 0 : GKV_HOST_COPY_AUTO;
    if (!cfg->maxmemory_keys) /* a quarter of usable RAM: a cgroup's limit counts (ram.h) */
        cfg->maxmemory_keys = gkv_ram_usable() / 4;
}

void gkv_server_apply_settings(gkv_server_t *s)
{
    const gkv_config_t *cfg = &s->cfg;
    s->store.host_limit = cfg->maxmemory_keys;
    s->store.policy = cfg->maxmemory_policy;
    s->cmd.lim = (gkv_cmd_limits_t){.max_key = cfg->max_key,
                                    .max_value = cfg->max_value,
                                    .max_leases = cfg->max_leases,
                                    .max_leased_bytes = cfg->max_leased_bytes};
    s->net.set = (gkv_net_settings_t){.output_limit = cfg->output_limit,
                                      .watch_buffer = cfg->watch_buffer,
                                      .frame_timeout_ms = cfg->frame_timeout_ms,
                                      .idle_timeout_ms = cfg->idle_timeout_ms,
                                      .write_timeout_ms = cfg->write_timeout_ms,
                                      .maxclients = cfg->maxclients,
                                      .busy_poll_us = cfg->busy_poll_us,
                                      .allow_uids = cfg->allow_uids,
                                      .allow_gids = cfg->allow_gids,
                                      .n_allow_uids = cfg->n_allow_uids,
                                      .n_allow_gids = cfg->n_allow_gids,
                                      .token = s->token_len > 0};
    gkv_cluster_set_busy_poll(&s->cluster, cfg->busy_poll_us);
}

/* The connections' calls up (net.h). */
static bool conn_refusing(void *owner, const gkv_conn_t *c)
{
    return gkv_takeover_refusing(owner, c);
}

static void conn_closed(void *owner, gkv_conn_t *c)
{
    gkv_takeover_conn_closed(owner, c);
    maybe_finish(owner);
}

static void request_done(void *owner)
{
    gkv_server_schedule_expiry(owner);
    gkv_takeover_request_done(owner);
}

static void on_sighup(uv_signal_t *h, int signum)
{
    (void)signum;
    gkv_server_reload(h->data);
}

uint64_t gkv_server_uptime_s(const gkv_server_t *s)
{
    return (gkv_clock_ms() - s->started_ms) / 1000;
}

void gkv_server_stop(gkv_server_t *s)
{
    if (s->shutting_down)
        return;
    s->shutting_down = true;
    s->net.stopping = true;
    gkv_notify("STOPPING=1\nSTATUS=stopping: %llu connections open",
               (unsigned long long)s->net.nconns);
    if (s->unix_open) {
        uv_close((uv_handle_t *)&s->unix_listener, NULL);
        s->unix_open = false;
        unlink(s->cfg.socket_path);
    }
    if (s->tcp_open) {
        uv_close((uv_handle_t *)&s->tcp_listener, NULL);
        s->tcp_open = false;
    }
    gkv_metrics_http_close(s);
    gkv_cluster_stop(&s->cluster); /* the others stop sending this node requests at once */
    uv_timer_start(&s->shutdown_timer, on_grace_timeout, s->cfg.shutdown_grace_ms, 0);
    gkv_net_stop_conns(&s->net, 0, false);
    maybe_finish(s);
}

static void close_quietly(uv_handle_t *h)
{
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

/* Opens the devices cfg names (--devices, else --device), each with its --maxmemory. */
static int open_devices(gkv_server_t *s, char *err, size_t cap)
{
    const gkv_config_t *cfg = &s->cfg;
    gkv_devices_spec_t spec = {.kind = cfg->backend, .ids = {cfg->device}, .n = 1};
    if (cfg->devices_all) {
        int count = gkv_backend_count(cfg->backend);
        spec.n = (unsigned)(count < 1 ? 1 : count > GKV_MAX_DEVICES ? GKV_MAX_DEVICES : count);
        for (unsigned i = 0; i < spec.n; i++)
            spec.ids[i] = (int)i;
    } else if (cfg->ndevices) {
        spec.n = cfg->ndevices;
        memcpy(spec.ids, cfg->devices, spec.n * sizeof(spec.ids[0]));
    }
    if (cfg->nmaxmemory > 1 && cfg->nmaxmemory != spec.n) {
        snprintf(err, cap, "--maxmemory lists %u sizes for %u devices", cfg->nmaxmemory, spec.n);
        return GKV_EINVAL;
    }
    for (unsigned i = 0; i < spec.n; i++)
        spec.limits[i] = cfg->nmaxmemory > 1 ? cfg->maxmemory_each[i] : cfg->maxmemory;
    spec.host_reserve = cfg->maxmemory_keys ? cfg->maxmemory_keys : gkv_ram_usable() / 4;
    spec.prealloc = cfg->prealloc;
    return gkv_devices_open(&s->devs, &spec, err, cap);
}

/* What a tier's memory offers beyond its limit: the largest value, which a read that brings a
 * value up swaps with what goes down (gkv_store_add_tier). Address space; pages are taken as
 * used. */
static uint64_t swap_room(const gkv_server_t *s)
{
    return s->cfg.max_value ? s->cfg.max_value : s->devs.dev[0].be->capacity;
}

/* The host tier's memory (--tier-host): a host backend's arena, on either backend. */
static int open_tier(gkv_server_t *s, char *err, size_t cap)
{
    uint64_t size = s->cfg.tier_host, usable = gkv_ram_usable();
    if (!size)
        return 0;
    if (size > usable) {
        char want[32], have[32];
        gkv_size_format(size, want, sizeof(want));
        gkv_size_format(usable, have, sizeof(have));
        snprintf(err, cap, "--tier-host %s is more than the usable RAM (%s)", want, have);
        return GKV_EINVAL;
    }
    gkv_backend_config_t bc = {.kind = GKV_BACKEND_HOST, .limit = size + swap_room(s)};
    char why[256];
    int rc = gkv_backend_open(&bc, &s->tier, why, sizeof(why));
    if (rc) {
        snprintf(err, cap, "the host tier: %s", why);
        return rc;
    }
    char limit[32];
    gkv_size_format(size, limit, sizeof(limit));
    GKV_INFO("host tier: %s of host memory below the GPUs", limit);
    return 0;
}

/* The disk tier's file (--tier-disk DIR, --tier-disk-size SIZE), when asked for. */
static int open_disk_tier(gkv_server_t *s, char *err, size_t cap)
{
    const gkv_config_t *cfg = &s->cfg;
    if (!cfg->tier_disk[0] && !cfg->tier_disk_size)
        return 0;
    if (!cfg->tier_disk[0] || !cfg->tier_disk_size) {
        snprintf(err, cap, "--tier-disk DIR and --tier-disk-size SIZE go together");
        return GKV_EINVAL;
    }
    struct statvfs fs;
    if (statvfs(cfg->tier_disk, &fs) == 0 &&
        (uint64_t)fs.f_bavail * fs.f_frsize < cfg->tier_disk_size) {
        char want[32], have[32];
        gkv_size_format(cfg->tier_disk_size, want, sizeof(want));
        gkv_size_format((uint64_t)fs.f_bavail * fs.f_frsize, have, sizeof(have));
        snprintf(err, cap, "--tier-disk-size %s is more than %s has free (%s)", want,
                 cfg->tier_disk, have);
        return GKV_EINVAL;
    }
    /* Twice the size: address range for the records' headers and padding to 4 KiB blocks
     * (pages on the disk are taken as written). */
    char why[256];
    int rc = gkv_backend_disk_open(cfg->tier_disk, 2 * cfg->tier_disk_size + swap_room(s),
                                   cfg->tier_disk_reload,
                                   (cfg->tier_disk_direct ? GKV_DISK_DIRECT : 0) |
                                       (cfg->tier_disk_uring ? GKV_DISK_URING : 0),
                                   &s->disk_tier, why, sizeof(why));
    if (rc) {
        snprintf(err, cap, "the disk tier: %s", why);
        return rc;
    }
    char limit[32];
    gkv_size_format(cfg->tier_disk_size, limit, sizeof(limit));
    GKV_INFO("disk tier: %s in %s (%s)", limit, cfg->tier_disk,
             !gkv_backend_disk_direct(s->disk_tier) ? "buffered"
             : gkv_backend_disk_uring(s->disk_tier) ? "O_DIRECT, io_uring"
                                                     : "O_DIRECT");
    return 0;
}

static void close_tier(gkv_server_t *s)
{
    if (s->tier)
        s->tier->ops->close(s->tier);
    s->tier = NULL;
    if (s->disk_tier)
        s->disk_tier->ops->close(s->disk_tier);
    s->disk_tier = NULL;
}

/* The store's release hook: device dev's open batch starts (one I/O callback may have read
 * several SETs, whose bytes wait in it), and its batches let go of the values they wrote. */
static bool release_held(void *arg, unsigned dev)
{
    gkv_server_t *s = arg;
    if (dev >= s->devs.started)
        return false;
    gkv_batch_start_writes(&s->devs.dev[dev].batcher);
    return gkv_batch_release_written(&s->devs.dev[dev].batcher);
}

/* The store over the devices, and what each layer above is given to reach the ones below: the
 * handlers' context, the connections' environment, persistence's. */
static int wire_layers(gkv_server_t *s, char *err, size_t cap)
{
    int rc = gkv_store_init(&s->store, s->devs.dev[0].be, s->devs.dev[0].be->capacity);
    if (rc) {
        snprintf(err, cap, "out of host memory");
        return rc;
    }
    for (unsigned i = 1; i < s->devs.n; i++)
        (void)gkv_store_add_device(&s->store, s->devs.dev[i].be, s->devs.dev[i].be->capacity);
    if (s->tier)
        (void)gkv_store_add_tier(&s->store, s->tier, s->cfg.tier_host);
    if (s->disk_tier)
        (void)gkv_store_add_disk_tier(&s->store, s->disk_tier, s->cfg.tier_disk_size);
    s->store.promote_on_get = s->cfg.tier_promote_on_get;
    if (s->cfg.key_versions && s->cfg.cluster[0]) {
        snprintf(err, cap, "--key-versions is not for a cluster node: its watch events carry "
                           "the keys' cluster versions");
        return GKV_EINVAL;
    }
    if (s->cfg.key_versions && (rc = gkv_store_keep_versions(&s->store))) {
        snprintf(err, cap, "out of host memory");
        return rc;
    }
    s->store.release = release_held;
    s->store.release_arg = s;
    gkv_hostcopy_init(&s->store.hc, s->cfg.host_copy, s->cfg.host_copy_max_value);
    s->cmd = (gkv_cmd_ctx_t){.store = &s->store,
                             .devs = &s->devs,
                             .lease_totals = &s->lease_totals,
                             .table = gkv_command_table,
                             .owner = s};
    s->net.store = &s->store;
    s->net.devs = &s->devs;
    s->net.staging = &s->staging;
    s->net.cmd = &s->cmd;
    s->net.fdstore = &s->fdstore;
    s->net.hooks = (gkv_net_hooks_t){
        .owner = s, .refusing = conn_refusing, .closed = conn_closed, .request_done = request_done};
    s->persist = (gkv_persist_env_t){
        .store = &s->store, .devs = &s->devs, .loop = s->loop, .max_key = s->cfg.max_key};
    gkv_server_apply_settings(s);
    return 0;
}

/* The loop's handles: the connections', the key order's kick, signals, timers, snapshots'. */
static void init_handles(gkv_server_t *s)
{
    uv_loop_t *loop = s->loop;
    gkv_net_init(&s->net, loop);
    gkv_looplag_start(&s->lag, loop);
    uv_prepare_init(loop, &s->kick);
    s->kick.data = s;
    uv_prepare_start(&s->kick, on_kick);
    uv_idle_init(loop, &s->ahead);
    s->ahead.data = s;
    uv_signal_init(loop, &s->sigterm);
    uv_signal_init(loop, &s->sigint);
    uv_signal_init(loop, &s->sighup);
    s->sigterm.data = s->sigint.data = s->sighup.data = s;
    uv_signal_start(&s->sighup, on_sighup, SIGHUP);
    uv_signal_start(&s->sigterm, on_signal, SIGTERM);
    uv_signal_start(&s->sigint, on_signal, SIGINT);
    uv_timer_init(loop, &s->shutdown_timer);
    s->shutdown_timer.data = s;
    uv_timer_init(loop, &s->sweep);
    s->sweep.data = s;
    uv_timer_start(&s->sweep, on_sweep, SWEEP_MS, SWEEP_MS);
    uv_timer_init(loop, &s->expiry);
    s->expiry.data = s;
    s->watchdog_ms = gkv_notify_watchdog_ms();
    gkv_snapshot_init(&s->snapshots, &s->persist, s->cfg.snapshot_dir,
                      s->cfg.snapshot_skip_corrupt);
    gkv_snapshot_schedule(&s->snapshots, s->cfg.snapshot_interval_ms);
    gkv_takeover_init(s);
    s->demoter = gkv_demoter_start(loop, &s->store, &s->devs, (unsigned)s->cfg.tier_headroom);
    s->net.demoter = s->cmd.demoter = s->demoter;
}

/* Closes what init_handles and the listeners opened, and lets the loop run out (a failed
 * start). */
static void close_handles(gkv_server_t *s)
{
    if (s->unix_open) {
        if (!s->cfg.takeover) /* else the predecessor's: it serves on (takeover.h) */
            unlink(s->cfg.socket_path);
        close_quietly((uv_handle_t *)&s->unix_listener);
    }
    if (s->tcp_open)
        close_quietly((uv_handle_t *)&s->tcp_listener);
    if (s->metrics_open)
        close_quietly((uv_handle_t *)&s->metrics_listener);
    gkv_net_close(&s->net);
    close_quietly((uv_handle_t *)&s->kick);
    close_quietly((uv_handle_t *)&s->lag.prep);
    gkv_demoter_close(s->demoter);
    gkv_devices_close(&s->devs);
    close_quietly((uv_handle_t *)&s->sigterm);
    close_quietly((uv_handle_t *)&s->sigint);
    close_quietly((uv_handle_t *)&s->sighup);
    close_quietly((uv_handle_t *)&s->shutdown_timer);
    close_quietly((uv_handle_t *)&s->sweep);
    close_quietly((uv_handle_t *)&s->expiry);
    gkv_snapshot_close(&s->snapshots);
    close_quietly((uv_handle_t *)&s->takeover.grace);
    uv_run(s->loop, UV_RUN_DEFAULT);
}

/* A takeover's predecessor passed its disk tier's file: this daemon's disk tier takes it over
 * (its values come back with gkv_store_disk_reload). Without a disk tier here it is closed. A
 * file that cannot be taken is logged, and this daemon's own (empty) stays. */
static void take_disk_tier(gkv_server_t *s)
{
    int fd = s->takeover.disk_fd;
    s->takeover.disk_fd = -1;
    if (fd < 0)
        return;
    char why[256];
    if (!s->disk_tier) {
        GKV_WARN("takeover: the predecessor's disk tier is dropped: no --tier-disk here");
        close(fd);
    } else if (gkv_backend_disk_take(s->disk_tier, fd, why, sizeof(why))) {
        GKV_WARN("takeover: the predecessor's disk tier cannot be taken over (%s): starting "
                 "with an empty one",
                 why);
    }
}

/* Values back (a predecessor's, taken over or left in the fd store; else the newest snapshot;
 * then the disk tier's file), then the listeners. */
static int start_serving(gkv_server_t *s, char *err, size_t cap)
{
    const gkv_config_t *cfg = &s->cfg;
    bool adopted;
    gkv_fdstore_mode_t fd_mode = cfg->fd_store == GKV_YES  ? GKV_FDSTORE_ON
                                 : cfg->fd_store == GKV_NO ? GKV_FDSTORE_OFF
                                                           : GKV_FDSTORE_AUTO;
    int rc;
    if (cfg->takeover && (rc = gkv_takeover_fetch(s, err, cap)))
        return rc;
    take_disk_tier(s);
    if ((rc = gkv_fdstore_open(&s->fdstore, &s->persist, fd_mode, s->takeover.passed,
                               s->takeover.npassed, &adopted, err, cap)) ||
        (!adopted && (rc = gkv_snapshot_load(&s->snapshots, err, cap))))
        return rc;
    gkv_store_disk_reload(&s->store); /* after them: what they brought is newer */
    if ((rc = gkv_server_listen_unix(s, err, cap)) ||
        (cfg->listen[0] && (rc = gkv_server_listen_clients(s, err, cap))) ||
        (cfg->metrics_listen[0] && (rc = gkv_metrics_http_listen(s, err, cap))))
        return rc;
    s->takeover.npassed = 0; /* gkv_fdstore_open took them */
    if (s->takeover.listen_tcp >= 0) {
        GKV_WARN("takeover: no --listen given: the TCP socket taken over is closed");
        close(s->takeover.listen_tcp);
        s->takeover.listen_tcp = -1;
    }
    gkv_fdstore_serving(&s->fdstore);
    gkv_takeover_done(s);
    return 0;
}

/* The cluster's hooks (cluster.h): a key recorded here as its home, or notified by its home,
 * wakes the requests waiting for it here; a change of the members wakes them all (each asks its
 * key's home again). */
static void cluster_recorded(void *arg, const void *key, size_t klen)
{
    gkv_server_t *s = arg;
    gkv_keywaits_published(&s->net, key, klen);
}

static void cluster_members(void *arg)
{
    gkv_server_t *s = arg;
    gkv_keywaits_wake_all(&s->net);
}

/* ... and before a worker copies a value out (an owner's STAGE), device dev's open batch starts,
 * as before any copy outside batches (net/send.c). */
static void cluster_before_copy(void *arg, unsigned dev)
{
    gkv_server_t *s = arg;
    if (dev < s->devs.started)
        gkv_batch_start_writes(&s->devs.dev[dev].batcher);
}

/* --cluster: joins once the listeners are up (the others may send requests at once). Peers reach
 * this node on its TCP listener with the cluster's token, so both are required. */
static int join_cluster(gkv_server_t *s, char *err, size_t cap)
{
    const gkv_config_t *cfg = &s->cfg;
    char node[GKV_NODE_NAME_MAX + 1], advertise[128];
    if (!cfg->cluster[0])
        return 0;
    if (!s->tcp_bound[0] || !s->token_len) {
        snprintf(err, cap, "--cluster needs --listen (the other nodes connect to it) and "
                            "--auth-token-file (the cluster's token, the same on every node)");
        return GKV_EINVAL;
    }
    if (cfg->node_name[0]) {
        strcpy(node, cfg->node_name);
    } else if (gethostname(node, sizeof(node)) || !node[0]) {
        snprintf(err, cap, "--cluster: no host name to name this node by; give --node-name");
        return GKV_EINVAL;
    }
    const char *adv = cfg->advertise[0] ? cfg->advertise : s->tcp_bound;
    if (!cfg->advertise[0] && (!strncmp(adv, "0.0.0.0:", 8) || !strncmp(adv, "[::]:", 5))) {
        snprintf(err, cap, "--cluster: --listen %s is every address; give --advertise HOST:PORT, "
                           "where the other nodes reach this one", adv);
        return GKV_EINVAL;
    }
    snprintf(advertise, sizeof(advertise), "%s", adv);
    gkv_cluster_cfg_t cc = {
        .endpoints = cfg->cluster, .cluster = cfg->cluster_name, .node = node,
        .advertise = advertise, .weight = (uint32_t)cfg->cluster_weight,
        .ttl_s = (int)cfg->cluster_ttl_s, .token = s->token, .token_len = s->token_len,
        .store = &s->store, .max_key = cfg->max_key, .max_value = cfg->max_value,
        .timeout_ms = 2000, .nixl = cfg->nixl, .nixl_arena = cfg->nixl_arena,
    };
    gkv_backend_t *bes[GKV_MAX_DEVICES];
    for (unsigned i = 0; i < s->store.ndev && i < GKV_MAX_DEVICES; i++)
        bes[cc.nbes++] = s->store.dev[i].be;
    cc.bes = bes;
    int rc = gkv_cluster_start(&s->cluster, s->loop, &cc, err, cap);
    if (!rc) {
        s->net.cluster = &s->cluster;
        s->cmd.clustered = true;
        s->cluster.arg = s;
        s->cluster.on_recorded = cluster_recorded;
        s->cluster.on_members = cluster_members;
        s->cluster.before_copy = cluster_before_copy;
        gkv_cluster_set_busy_poll(&s->cluster, cfg->busy_poll_us); /* reloads set it again */
    }
    if (!rc)
        GKV_INFO("cluster: %s in cluster %s, advertised at %s, %zu members", node,
                 cfg->cluster_name, advertise, s->cluster.members.n);
    return rc;
}

int gkv_server_init(gkv_server_t *s, uv_loop_t *loop, const gkv_config_t *cfg, char *err,
                    size_t cap)
{
    memset(s, 0, sizeof(*s));
    s->loop = loop;
    s->cfg = *cfg;
    s->started_ms = gkv_clock_ms();
    gkv_log_set_level(cfg->log_level);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGXFSZ, SIG_IGN); /* a file-size limit fails the disk tier's writes (EFBIG), no more */
    if (cfg->log_file[0]) {
        if (gkv_log_reopen(cfg->log_file)) {
            snprintf(err, cap, "cannot open the log file %s: %s", cfg->log_file, strerror(errno));
            return GKV_EINVAL;
        }
        unsetenv("JOURNAL_STREAM"); /* lines go to the file, not to journald */
    }
    if (cfg->auth_token_file[0] &&
        gkv_token_load(cfg->auth_token_file, s->token, &s->token_len, err, cap))
        return GKV_EINVAL;
    /* Threads started from here on (the CUDA runtime's, as devices open, and the key order
     * helper) inherit a mask that blocks the signals the loop handles, so that the loop thread
     * is the one that gets them: a SIGTERM taken by another thread while the loop closes its
     * signal handles would find the default action there and kill the daemon mid-teardown. */
    sigset_t handled, before;
    sigemptyset(&handled);
    sigaddset(&handled, SIGTERM);
    sigaddset(&handled, SIGINT);
    sigaddset(&handled, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &handled, &before);
    int rc = open_devices(s, err, cap);
    if (rc) {
        pthread_sigmask(SIG_SETMASK, &before, NULL);
        return rc;
    }
    gkv_server_resolve(s, &s->cfg); /* maxmemory 0: the backends' capacity */
    for (unsigned i = 0; i < s->devs.n; i++) {
        gkv_backend_t *be = s->devs.dev[i].be;
        char limit[32];
        gkv_size_format(be->capacity, limit, sizeof(limit));
        GKV_INFO("device %u: backend %s (%s%s%s), maxmemory %s", i, be->name, be->gpu_name,
                 be->gpu_uuid[0] ? " " : "", be->gpu_uuid, limit);
    }
    if ((rc = open_tier(s, err, cap)) || (rc = open_disk_tier(s, err, cap)) ||
        (rc = wire_layers(s, err, cap)))
        goto fail_backend;
    s->key_order_thread = start_key_order(s);
    pthread_sigmask(SIG_SETMASK, &before, NULL);
    gkv_staging_init(&s->staging, s->devs.dev[0].be); /* portable: every device's copies use it */
    if ((rc = gkv_devices_start(&s->devs, &s->store, loop, &s->staging, gkv_conn_batch_deliver, err,
                                cap))) {
        gkv_devices_close(&s->devs);
        uv_run(s->loop, UV_RUN_DEFAULT);
        gkv_devices_fini(&s->devs);
        gkv_staging_fini(&s->staging);
        gkv_store_fini(&s->store);
        goto fail_backend;
    }
    init_handles(s);
    if ((rc = start_serving(s, err, cap)) == 0 && (rc = join_cluster(s, err, cap)) == 0)
        return 0;
    gkv_fdstore_close(&s->fdstore);
    gkv_takeover_fini(s);
    close_handles(s);
    gkv_demoter_free(s->demoter);
    gkv_devices_fini(&s->devs);
    gkv_store_fini(&s->store);
    gkv_staging_fini(&s->staging);
    gkv_net_fini(&s->net);
fail_backend:
    pthread_sigmask(SIG_SETMASK, &before, NULL);
    gkv_devices_close_backends(&s->devs);
    close_tier(s);
    return rc;
}

void gkv_server_fini(gkv_server_t *s)
{
    gkv_cluster_fini(&s->cluster);
    /* A save still running ends first: it reads the devices. */
    gkv_snapshot_fini(&s->snapshots, s->cfg.snapshot_on_exit && s->shutting_down);
    gkv_fdstore_close(&s->fdstore);
    gkv_takeover_fini(s);
    gkv_demoter_free(s->demoter);
    gkv_devices_fini(&s->devs);
    gkv_store_fini(&s->store);
    gkv_staging_fini(&s->staging);
    gkv_devices_close_backends(&s->devs);
    close_tier(s);
    gkv_net_fini(&s->net);
}
