/* membership.c: joining, the lease's renewal and the member list's watch (membership.h). */
#include "membership.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "error.h"
#include "log.h"

struct gkv_membership {
    gkv_membership_cfg_t cfg;
    char endpoints[1024], cluster[GKV_NODE_NAME_MAX + 1];
    char prefix[128], key[256];  /* /gpukv/<cluster>/members/ and this node's key */
    char record[512];            /* this node's record */
    size_t record_len;
    gkv_etcd_t *keeper, *watcher; /* one client per thread */
    pthread_t keep_thread, watch_thread;
    bool keep_started, watch_started;
    void (*on_change)(void *arg);
    void *arg;
    pthread_mutex_t lock; /* guards what follows, and the condition below */
    pthread_cond_t wake;
    volatile int stop;
    bool poked; /* renew at once (gkv_membership_poke) */
    gkv_members_t members;
    gkv_membership_state_t state;
    _Atomic uint64_t valid_until; /* state.lease_valid_until, read without the lock */
    _Atomic int64_t incarnation;  /* state.incarnation, likewise */
};

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Records whether etcd answered (under lock). */
static void note_reachable(gkv_membership_t *ms, bool ok)
{
    pthread_mutex_lock(&ms->lock);
    if (ok && !ms->state.reachable)
        GKV_INFO("cluster: etcd is reachable%s", ms->state.unreachable_since ? " again" : "");
    if (!ok && ms->state.reachable)
        GKV_WARN("cluster: etcd is unreachable; serving with the last known %zu members",
                 ms->members.n);
    if (!ok && !ms->state.unreachable_since)
        ms->state.unreachable_since = wall_ms();
    if (ok)
        ms->state.unreachable_since = 0;
    ms->state.reachable = ok;
    pthread_mutex_unlock(&ms->lock);
}

/* Waits up to ms milliseconds or until stop (or, for the keeper, a poke). Returns true when
 * stopping. */
static bool nap(gkv_membership_t *ms, uint64_t ms_, bool keeper)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)(ms_ / 1000);
    ts.tv_nsec += (long)(ms_ % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&ms->lock);
    while (!ms->stop && !(keeper && ms->poked) &&
           pthread_cond_timedwait(&ms->wake, &ms->lock, &ts) != ETIMEDOUT)
        ;
    if (keeper)
        ms->poked = false;
    bool stop = ms->stop;
    pthread_mutex_unlock(&ms->lock);
    return stop;
}

/* A lease and this node's record under it. Returns 0, GKV_EEXISTS (the name is taken) or an
 * etcd call's error. */
static int join(gkv_membership_t *ms, gkv_etcd_t *e)
{
    int64_t id = 0;
    int created = 0;
    uint64_t asked = mono_ms();
    int rc = gkv_etcd_grant(e, ms->cfg.ttl_s, &id);
    if (!rc && (rc = gkv_etcd_put(e, ms->key, ms->record, ms->record_len, id, 1, &created)) == 0 &&
        !created) {
        gkv_etcd_revoke(e, id);
        rc = GKV_EEXISTS;
    }
    if (rc)
        return rc;
    pthread_mutex_lock(&ms->lock);
    ms->state.incarnation = id;
    atomic_store(&ms->incarnation, id);
    ms->state.lease_valid_until = asked + (uint64_t)ms->cfg.ttl_s * 1000;
    atomic_store(&ms->valid_until, ms->state.lease_valid_until);
    ms->state.joins++;
    pthread_mutex_unlock(&ms->lock);
    GKV_INFO("cluster: node %s joined cluster %s (incarnation %lld)", ms->cfg.self.name,
             ms->cluster, (long long)id);
    return 0;
}

/* Reads the list; publishes it when it differs from the last. Returns the revision read, or
 * 0 on failure. */
static int64_t refresh(gkv_membership_t *ms, gkv_etcd_t *e)
{
    gkv_etcd_range_t r;
    gkv_members_t fresh;
    int rc = gkv_etcd_range_prefix(e, ms->prefix, &r);
    note_reachable(ms, rc != GKV_EUNAVAILABLE);
    if (rc)
        return 0;
    rc = gkv_members_from_range(&r, &fresh);
    gkv_etcd_range_fini(&r);
    if (rc)
        return 0;
    pthread_mutex_lock(&ms->lock);
    bool changed = !gkv_members_same(&fresh, &ms->members);
    gkv_members_t old = ms->members;
    ms->members = fresh;
    if (changed)
        ms->state.list_updates++;
    pthread_mutex_unlock(&ms->lock);
    gkv_members_fini(&old);
    if (changed) {
        GKV_INFO("cluster: %zu members", fresh.n);
        ms->on_change(ms->arg);
    }
    return fresh.revision;
}

static int on_watch_event(void *arg)
{
    (void)arg;
    return 1; /* stop the stream: the caller ranges again and watches from the new revision */
}

static void *watch_main(void *arg)
{
    gkv_membership_t *ms = arg;
    while (!ms->stop) {
        int64_t rev = refresh(ms, ms->watcher);
        if (!rev) {
            nap(ms, 1000, false);
            continue;
        }
        int rc = gkv_etcd_watch(ms->watcher, ms->prefix, rev + 1, on_watch_event, ms, &ms->stop);
        if (rc) {
            note_reachable(ms, false);
            nap(ms, 1000, false);
        }
    }
    return NULL;
}

static void *keep_main(void *arg)
{
    gkv_membership_t *ms = arg;
    uint64_t period = (uint64_t)ms->cfg.ttl_s * 1000 / 3;
    while (!nap(ms, period, true)) {
        int64_t ttl = 0, id;
        pthread_mutex_lock(&ms->lock);
        id = ms->state.incarnation;
        pthread_mutex_unlock(&ms->lock);
        uint64_t asked = mono_ms();
        int rc = gkv_etcd_keepalive(ms->keeper, id, &ttl);
        note_reachable(ms, rc != GKV_EUNAVAILABLE);
        if (rc)
            continue;
        if (ttl > 0) {
            pthread_mutex_lock(&ms->lock);
            ms->state.lease_valid_until = asked + (uint64_t)ttl * 1000;
            atomic_store(&ms->valid_until, ms->state.lease_valid_until);
            pthread_mutex_unlock(&ms->lock);
            continue;
        }
        /* etcd let the lease expire (we could not reach it for longer than the TTL): the
         * others saw this node leave. Join again, as a new incarnation. */
        GKV_WARN("cluster: our lease %lld expired; joining again", (long long)id);
        rc = join(ms, ms->keeper);
        if (rc == GKV_EEXISTS)
            GKV_ERROR("cluster: another node took the name %s; this node stays out",
                      ms->cfg.self.name);
    }
    return NULL;
}

int gkv_membership_start(const gkv_membership_cfg_t *cfg, void (*on_change)(void *arg),
                         void *arg, gkv_membership_t **out)
{
    if (!gkv_member_name_ok(cfg->cluster) || !gkv_member_name_ok(cfg->self.name) ||
        cfg->ttl_s < 2 || cfg->ttl_s > 60 || !cfg->self.advertise[0] ||
        strlen(cfg->endpoints) >= 1024)
        return GKV_EINVAL;
    gkv_membership_t *ms = calloc(1, sizeof(*ms));
    if (!ms)
        return GKV_ENOMEM;
    ms->cfg = *cfg;
    strcpy(ms->endpoints, cfg->endpoints);
    strcpy(ms->cluster, cfg->cluster);
    ms->cfg.endpoints = ms->endpoints;
    ms->cfg.cluster = ms->cluster;
    ms->on_change = on_change;
    ms->arg = arg;
    snprintf(ms->prefix, sizeof(ms->prefix), "/gpukv/%s/members/", ms->cluster);
    snprintf(ms->key, sizeof(ms->key), "%s%s", ms->prefix, cfg->self.name);
    int rc = gkv_member_encode(&cfg->self, ms->record, sizeof(ms->record));
    if (rc < 0)
        goto fail_alloc;
    ms->record_len = (size_t)rc;
    pthread_mutex_init(&ms->lock, NULL);
    pthread_cond_init(&ms->wake, NULL);
    ms->state.reachable = true;
    rc = GKV_EINVAL;
    ms->keeper = gkv_etcd_alloc(ms->endpoints, cfg->timeout_ms);
    ms->watcher = gkv_etcd_alloc(ms->endpoints, cfg->timeout_ms);
    if (!ms->keeper || !ms->watcher)
        goto fail;
    if ((rc = join(ms, ms->keeper)) != 0)
        goto fail;
    if (!refresh(ms, ms->keeper)) {
        rc = GKV_EUNAVAILABLE;
        goto fail_joined;
    }
    rc = GKV_ENOMEM;
    if (pthread_create(&ms->keep_thread, NULL, keep_main, ms))
        goto fail_joined;
    ms->keep_started = true;
    if (pthread_create(&ms->watch_thread, NULL, watch_main, ms))
        goto fail_joined;
    ms->watch_started = true;
    *out = ms;
    return 0;
fail_joined:
    gkv_membership_stop(ms);
    return rc;
fail:
    gkv_etcd_free(ms->keeper);
    gkv_etcd_free(ms->watcher);
    pthread_cond_destroy(&ms->wake);
    pthread_mutex_destroy(&ms->lock);
fail_alloc:
    free(ms);
    return rc;
}

void gkv_membership_stop(gkv_membership_t *ms)
{
    if (!ms)
        return;
    pthread_mutex_lock(&ms->lock);
    ms->stop = 1;
    pthread_cond_broadcast(&ms->wake);
    pthread_mutex_unlock(&ms->lock);
    /* The renewals end before the lease is revoked (a renewal after it would join again);
     * the watch, which notices stop only about once a second, after. */
    if (ms->keep_started)
        pthread_join(ms->keep_thread, NULL);
    if (ms->state.incarnation && gkv_etcd_revoke(ms->keeper, ms->state.incarnation) == 0)
        GKV_INFO("cluster: node %s left cluster %s", ms->cfg.self.name, ms->cluster);
    if (ms->watch_started)
        pthread_join(ms->watch_thread, NULL);
    gkv_etcd_free(ms->keeper);
    gkv_etcd_free(ms->watcher);
    gkv_members_fini(&ms->members);
    pthread_cond_destroy(&ms->wake);
    pthread_mutex_destroy(&ms->lock);
    free(ms);
}

int gkv_membership_members(gkv_membership_t *ms, gkv_members_t *out)
{
    pthread_mutex_lock(&ms->lock);
    int rc = gkv_members_copy(out, &ms->members);
    pthread_mutex_unlock(&ms->lock);
    return rc;
}

void gkv_membership_state(gkv_membership_t *ms, gkv_membership_state_t *out)
{
    pthread_mutex_lock(&ms->lock);
    *out = ms->state;
    pthread_mutex_unlock(&ms->lock);
}

uint64_t gkv_membership_valid_until(const gkv_membership_t *ms)
{
    return atomic_load(&((gkv_membership_t *)ms)->valid_until);
}

int64_t gkv_membership_incarnation(const gkv_membership_t *ms)
{
    return atomic_load(&((gkv_membership_t *)ms)->incarnation);
}

void gkv_membership_poke(gkv_membership_t *ms)
{
    pthread_mutex_lock(&ms->lock);
    ms->poked = true;
    pthread_cond_broadcast(&ms->wake);
    pthread_mutex_unlock(&ms->lock);
}
