/* cluster.c: the cluster on the loop (cluster.h). */
#include "cluster.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cluster_impl.h"
#include "error.h"
#include "hash.h"
#include "log.h"
#include "placement.h"

static void rebalance(gkv_cluster_t *cl);
static void register_moved(gkv_cluster_t *cl, bool reborn);

static void on_changed_thread(void *arg)
{
    gkv_cluster_t *cl = arg;
    uv_async_send(&cl->changed);
}

/* Takes the newest list on the loop. */
static void take_members(gkv_cluster_t *cl)
{
    gkv_members_t fresh;
    if (gkv_membership_members(cl->ms, &fresh))
        return; /* no memory: the next change tries again */
    /* Nodes with another token are not ours: they could neither ask us nor answer us. */
    size_t kept = 0;
    for (size_t i = 0; i < fresh.n; i++)
        if (!strcmp(fresh.m[i].token_id, cl->token_id))
            fresh.m[kept++] = fresh.m[i];
    if (kept < fresh.n && cl->foreign != fresh.n - kept)
        GKV_WARN("cluster: %zu registered nodes have another cluster token: ignored",
                 fresh.n - kept);
    cl->foreign = fresh.n - kept;
    fresh.n = kept;
    /* A member gone (or back as a new incarnation) may have been serving on its peers'
     * vouches until a moment ago: nothing acts on its departure before settling. */
    cl->departed = false;
    for (size_t i = 0; i < cl->members.n && !cl->departed; i++) {
        const gkv_member_t *m = &cl->members.m[i];
        size_t k = 0;
        while (k < fresh.n && (strcmp(fresh.m[k].name, m->name) ||
                               fresh.m[k].incarnation != m->incarnation))
            k++;
        cl->departed = k == fresh.n;
    }
    gkv_members_fini(&cl->members);
    cl->members = fresh;
    cl->self = -1;
    for (size_t i = 0; i < fresh.n; i++)
        if (!strcmp(fresh.m[i].name, cl->node))
            cl->self = (long)i;
    cl->member_changes++;
    rebalance(cl);
    gkv_cl_plane_members(cl);
    gkv_cl_watches_follow(cl);
    if (cl->on_members)
        cl->on_members(cl->arg);
}

/* The members changed (docs/cluster.md, "Membership changes"): records whose owner left are
 * forgotten, records of keys homed elsewhere now go (their owners register them there), and
 * this node's own values whose home changed are registered with the new home. A node that
 * rejoined as a new incarnation was taken for dead by the others: its values are gone. */
static void rebalance(gkv_cluster_t *cl)
{
    int64_t inc = gkv_cl_self_inc(cl);
    /* Alone, and nobody gone, no one has keys to register with us. */
    cl->settle_until = cl->members.n > 1 || cl->departed ? uv_now(cl->loop) + CL_SETTLE_MS : 0;
    /* Reborn: the others took us for dead and moved on, so what we recorded as a home is
     * stale (owners register their keys again; a stale record would outvote them). */
    bool reborn = cl->last_self_inc && inc && inc != cl->last_self_inc;
    if (inc) /* a list without us (our lease expired, we rejoin next) must not hide the rebirth */
        cl->last_self_inc = inc;
    gkv_home_rec_t *h, *ht;
    HASH_ITER(hh, cl->rec.homes, h, ht)
    {
        if (reborn && !h->busy) {
            gkv_home_del(&cl->rec, h);
            continue;
        }
        if (h->busy)
            continue;
        const gkv_member_t *o = gkv_cl_member(cl, h->owner, strlen(h->owner));
        const gkv_member_t *home = gkv_cluster_home(cl, h->key, h->klen);
        if (!o || o->incarnation != h->owner_inc) {
            cl->stats.dropped_dead++;
            gkv_home_del(&cl->rec, h);
        } else if (!gkv_cluster_is_self(cl, home)) {
            gkv_home_del(&cl->rec, h);
        }
    }
    register_moved(cl, reborn);
}

/* This node's copies after a member change, or again after a registration failed: replicas
 * whose home left go (all of them when reborn, and our own values too: the others took us for
 * dead), and each value of ours whose home moved is registered with the new home. */
static void register_moved(gkv_cluster_t *cl, bool reborn)
{
    int64_t inc = gkv_cl_self_inc(cl);
    cl->register_again = false;
    if (cl->self < 0)
        return;
    cl_job_t *j = NULL;
    gkv_copy_rec_t *c, *ct;
    HASH_ITER(hh, cl->rec.copies, c, ct)
    {
        /* A value of ours is registered even while a write of the key is pending here: that
         * write may fail (its home died), and the value it would have replaced is still ours
         * and served here, so its new home must know it (else it answers "missing" once it
         * settles: the linearizability check caught it). A write recorded meanwhile carries a
         * newer version, which the home keeps over this one (EEXISTS). gkv_cl_unlink keeps the
         * record of pending writes. */
        if (!c->version)
            continue;
        if (reborn || c->replica) {
            if (reborn || !gkv_cl_member(cl, c->home, strlen(c->home)))
                gkv_cl_unlink(cl, c->key, c->klen, 0);
            continue;
        }
        const gkv_member_t *home = gkv_cluster_home(cl, c->key, c->klen);
        if (!home || !strcmp(home->name, c->home))
            continue;
        if (gkv_cluster_is_self(cl, home)) { /* we are its home now: recorded right here */
            gkv_home_rec_t *r = gkv_home_get(&cl->rec, c->key, c->klen);
            gkv_entry_t *e = gkv_store_find(cl->store, c->key, c->klen);
            if (r && e && (!r->owner[0] || r->version < c->version)) {
                strcpy(r->owner, cl->node);
                r->owner_inc = inc;
                r->version = c->version;
                r->size = e->size;
                if (cl->rec.clock < c->version)
                    cl->rec.clock = c->version;
            }
            snprintf(c->home, sizeof(c->home), "%s", cl->node);
            continue;
        }
        gkv_entry_t *e = gkv_store_find(cl->store, c->key, c->klen);
        if (!e)
            continue;
        if (!j && !(j = gkv_cl_job_new(cl, NULL, JOB_REGISTER)))
            return;
        if (gkv_cl_job_key(j, c->key, c->klen, home) == 0) {
            j->keys[j->nkeys - 1].version = c->version;
            j->keys[j->nkeys - 1].size = e->size;
        }
    }
    if (j)
        gkv_workers_submit(&cl->origin, &j->job);
}

void gkv_cl_published(gkv_cluster_t *cl, const void *key, size_t klen, const char *recorded_at)
{
    const gkv_member_t *home = gkv_cluster_home(cl, key, klen);
    if (home && strcmp(home->name, recorded_at))
        register_moved(cl, false);
}

static void on_changed(uv_async_t *a)
{
    take_members(a->data);
}

/* Every CL_VOUCH_PERIOD_MS: while etcd does not answer, a vouch round; and the log of this
 * node's fencing. */
static void on_tick(uv_timer_t *timer)
{
    gkv_cluster_t *cl = timer->data;
    if (!cl->on)
        return;
    gkv_membership_state_t st;
    gkv_membership_state(cl->ms, &st);
    if (!st.reachable && !cl->vouching && cl->self >= 0) {
        cl_job_t *j = gkv_cl_job_new(cl, NULL, JOB_VOUCH);
        if (j) {
            j->started_ms = uv_now(cl->loop); /* the clock gkv_cluster_live reads */
            cl->vouching = true;
            gkv_workers_submit(&cl->origin, &j->job);
        }
    }
    if (cl->register_again)
        register_moved(cl, false);
    gkv_cl_waits_expire(cl);
    bool live = gkv_cluster_live(cl);
    if (live != cl->was_live && cl->self >= 0) {
        if (live)
            GKV_INFO("cluster: serving again (%s)",
                     st.reachable ? "our lease is renewed" : "every member vouched for us");
        else
            GKV_WARN("cluster: fenced: etcd has not renewed our lease and not every member "
                     "vouched for us; requests get UNAVAILABLE until one of them does");
    }
    cl->was_live = live;
}

/* The worker pools, in the order they stop: pulls last (the others' ends may drop head starts
 * there). */
#define NPOOLS 5
static void pools_of(gkv_cluster_t *cl, gkv_workers_t *pools[NPOOLS])
{
    pools[0] = &cl->origin;
    pools[1] = &cl->nested;
    pools[2] = &cl->stage;
    pools[3] = &cl->pulls;
    pools[4] = &cl->spares; /* after every job that may take a connection (closed: no fill) */
}

static bool any_pool_open(gkv_cluster_t *cl)
{
    gkv_workers_t *pools[NPOOLS];
    pools_of(cl, pools);
    for (size_t i = 0; i < NPOOLS; i++)
        if (pools[i]->open)
            return true;
    return false;
}

static void stop_workers(gkv_cluster_t *cl)
{
    gkv_workers_t *pools[NPOOLS];
    pools_of(cl, pools);
    gkv_peers_close(&cl->peers); /* the fills queued end at once */
    for (size_t i = 0; i < NPOOLS; i++)
        gkv_workers_stop(pools[i]);
}

/* A fill of addr's spare connections (peer.h), on the spares pool. */
typedef struct {
    gkv_job_t job;
    gkv_peers_t *peers;
    char addr[];
} fill_job_t;

static void run_fill(gkv_job_t *job)
{
    fill_job_t *f = (fill_job_t *)job;
    gkv_peer_fill(f->peers, f->addr);
}

static void free_fill(gkv_job_t *job)
{
    free(job);
}

/* peers' want: any thread. */
static bool want_spares(void *arg, const char *addr)
{
    gkv_cluster_t *cl = arg;
    size_t n = strlen(addr) + 1;
    fill_job_t *f = malloc(sizeof(*f) + n);
    if (!f)
        return false;
    f->job.run = run_fill;
    f->job.done = free_fill;
    f->peers = &cl->peers;
    memcpy(f->addr, addr, n);
    gkv_workers_submit(&cl->spares, &f->job);
    return true;
}

int gkv_cluster_start(gkv_cluster_t *cl, uv_loop_t *loop, const gkv_cluster_cfg_t *cfg,
                      char *err, size_t cap)
{
    gkv_membership_cfg_t mc = {
        .endpoints = cfg->endpoints, .cluster = cfg->cluster, .ttl_s = cfg->ttl_s,
        .timeout_ms = 2000, .self = {.weight = cfg->weight},
    };
    if (strlen(cfg->node) > GKV_NODE_NAME_MAX || strlen(cfg->advertise) > GKV_ADVERTISE_MAX ||
        strlen(cfg->cluster) > GKV_NODE_NAME_MAX) {
        snprintf(err, cap, "cluster: a name or the advertised address is too long");
        return GKV_EINVAL;
    }
    strcpy(mc.self.name, cfg->node);
    strcpy(mc.self.advertise, cfg->advertise);
    /* The token's fingerprint: SipHash under a fixed key, 64 bits of a secret of at least as
     * many (token.h), enough to tell tokens apart and too few to help guess one. */
    static const uint8_t TOKEN_KEY[16] = {'g', 'p', 'u', 'k', 'v', '-', 't', 'o',
                                          'k', 'e', 'n', '-', 'i', 'd', 0, 0};
    snprintf(mc.self.token_id, sizeof(mc.self.token_id), "%016" PRIx64,
             gkv_siphash(cfg->token, cfg->token_len, TOKEN_KEY));
    memset(cl, 0, sizeof(*cl));
    cl->loop = loop;
    cl->self = -1;
    strcpy(cl->node, cfg->node);
    strcpy(cl->name, cfg->cluster);
    strcpy(cl->self_addr, cfg->advertise);
    strcpy(cl->token_id, mc.self.token_id);
    cl->store = cfg->store;
    cl->max_key = cfg->max_key;
    cl->max_value = cfg->max_value;
    cl->ttl_ms = (uint64_t)cfg->ttl_s * 1000;
    gkv_records_init(&cl->rec);
    gkv_peers_init(&cl->peers, cfg->token, cfg->token_len, cfg->timeout_ms ? cfg->timeout_ms : 2000);
    if (gkv_workers_start(&cl->origin, loop, 8) || gkv_workers_start(&cl->nested, loop, 4) ||
        gkv_workers_start(&cl->stage, loop, 16) || gkv_workers_start(&cl->pulls, loop, 16) ||
        gkv_workers_start(&cl->spares, loop, 2)) {
        snprintf(err, cap, "cluster: cannot start worker threads");
        stop_workers(cl);
        gkv_peers_fini(&cl->peers);
        return GKV_ENOMEM;
    }
    cl->peers.want = want_spares;
    cl->peers.want_arg = cl;
    /* The data plane: NIXL when it is there (the agent's name is unique to this process). */
    char agent[160];
    uint64_t salt = uv_hrtime() ^ ((uint64_t)getpid() << 32);
    snprintf(agent, sizeof(agent), "gpukv.%s.%s.%016" PRIx64, cfg->cluster, cfg->node,
             gkv_siphash(&salt, sizeof(salt), TOKEN_KEY));
    gkv_plane_cfg_t pc = {.nixl = cfg->nixl, .arena_size = cfg->nixl_arena, .bes = cfg->bes,
                          .nbes = cfg->nbes, .agent = agent};
    gkv_plane_open(&cl->plane, &pc);
    if (!cl->plane.on && cfg->nixl && strcmp(cfg->nixl, "off"))
        GKV_WARN("data plane: TCP between nodes: %s", cl->plane.why);
    uv_async_init(loop, &cl->changed, on_changed);
    cl->changed.data = cl;
    int rc = gkv_membership_start(&mc, on_changed_thread, cl, &cl->ms);
    if (rc) {
        stop_workers(cl);
        gkv_plane_close(&cl->plane);
        gkv_peers_fini(&cl->peers);
        snprintf(err, cap, "cluster: cannot join cluster %s as %s through etcd at %s: %s",
                 cfg->cluster, cfg->node, cfg->endpoints,
                 rc == GKV_EEXISTS        ? "a live node already has this name"
                 : rc == GKV_EUNAVAILABLE ? "etcd does not answer"
                 : rc == GKV_EINVAL ? "names are 1 to 63 of [A-Za-z0-9._-] (give --node-name)"
                                    : gkv_strerror(rc));
        uv_close((uv_handle_t *)&cl->changed, NULL);
        return rc;
    }
    cl->on = true;
    cl->was_live = true;
    cl->store->reclaim = gkv_cl_reclaim; /* replicas make room first */
    cl->store->reclaim_arg = cl;
    take_members(cl);
    uv_timer_init(loop, &cl->tick);
    cl->tick.data = cl;
    uv_timer_start(&cl->tick, on_tick, CL_VOUCH_PERIOD_MS, CL_VOUCH_PERIOD_MS);
    return 0;
}

void gkv_cluster_stop(gkv_cluster_t *cl)
{
    if (!cl->on)
        return;
    cl->on = false;
    cl->left = true;
    uv_timer_stop(&cl->tick);
    gkv_membership_stop(cl->ms); /* its threads end: no async send after this */
    cl->ms = NULL;
    uv_close((uv_handle_t *)&cl->changed, NULL);
    uv_close((uv_handle_t *)&cl->tick, NULL);
}

void gkv_cluster_close(gkv_cluster_t *cl)
{
    if (!any_pool_open(cl))
        return;
    stop_workers(cl);
}

void gkv_cluster_fini(gkv_cluster_t *cl)
{
    if (any_pool_open(cl))
        return; /* never started, or not closed: nothing of ours to free safely */
    if (cl->peers.timeout_ms)
        gkv_plane_close(&cl->plane);
    if (cl->store && cl->store->reclaim_arg == cl)
        cl->store->reclaim = NULL;
    gkv_members_fini(&cl->members);
    gkv_records_fini(&cl->rec);
    gkv_cl_waits_fini(cl);
    if (cl->peers.timeout_ms)
        gkv_peers_fini(&cl->peers);
}

const gkv_member_t *gkv_cluster_home(const gkv_cluster_t *cl, const void *key, size_t len)
{
    if (!cl->members.n)
        return NULL;
    long i = gkv_place_home(cl->members.m, cl->members.n, gkv_place_key_hash(key, len));
    return i < 0 ? NULL : &cl->members.m[i];
}

/* A tenth of the TTL, at least 500 ms. */
static uint64_t fence_margin(const gkv_cluster_t *cl)
{
    return cl->ttl_ms / 10 > 500 ? cl->ttl_ms / 10 : 500;
}

bool gkv_cluster_reports(const gkv_cluster_t *cl, unsigned kind, const void *key, size_t klen,
                         uint64_t *version)
{
    *version = 0;
    if (!cl->on)
        return true;
    if (cl->quiet)
        return false;
    if (kind == GKV_EVENT_FLUSH)
        return true;
    const gkv_copy_rec_t *c = gkv_copy_find((gkv_records_t *)&cl->rec, key, klen);
    if (c && c->replica)
        return false;
    /* A SET's version is the one being published where its record follows the publication;
     * else (and for the removals) the copy record's. */
    *version = kind == GKV_EVENT_SET && cl->publishing ? cl->publishing : c ? c->version : 0;
    return true;
}

bool gkv_cluster_live(const gkv_cluster_t *cl)
{
    if (!cl->ms)
        return false;
    /* valid_until first: a rejoin stores the incarnation before it (membership.c). */
    uint64_t valid = gkv_membership_valid_until(cl->ms);
    int64_t inc = gkv_membership_incarnation(cl->ms);
    if (inc != gkv_cl_self_inc(cl))
        return false; /* a new lease the members in force do not show yet */
    /* The loop's clock (read once a turn: a clock read per request cost a fifth of a one-node
     * cluster's SET throughput on the GPU machine). The lease surely lives until valid (etcd
     * counts from when it got our renewal, later than when we sent it); the margin covers the
     * clocks' drift and a turn of the loop. */
    uint64_t now = uv_now(cl->loop);
    return now + fence_margin(cl) < valid || now < cl->vouched_until;
}

bool gkv_cluster_is_self(const gkv_cluster_t *cl, const gkv_member_t *m)
{
    return cl->self >= 0 && m == &cl->members.m[cl->self];
}

uint64_t gkv_cluster_jobs_watched(gkv_cluster_t *cl)
{
    gkv_workers_t *pools[NPOOLS];
    pools_of(cl, pools);
    uint64_t n = 0;
    for (size_t i = 0; i < NPOOLS; i++)
        if (pools[i]->open)
            n += gkv_workers_watched(pools[i]);
    return n;
}

void gkv_cluster_set_busy_poll(gkv_cluster_t *cl, uint64_t us)
{
    gkv_workers_t *pools[NPOOLS];
    pools_of(cl, pools);
    for (size_t i = 0; i < NPOOLS; i++) /* not the spares': their dials wait for no request */
        if (pools[i]->open && pools[i] != &cl->spares)
            gkv_workers_set_spin(pools[i], us);
}

int gkv_cluster_info(const gkv_cluster_t *cl, char *buf, size_t cap)
{
    if (!cl->on && !cl->members.n) {
        int n = snprintf(buf, cap, "# Cluster\r\ncluster_enabled:0\r\n");
        return n < 0 || (size_t)n >= cap ? -1 : n;
    }
    gkv_membership_state_t st = {0};
    if (cl->ms)
        gkv_membership_state(cl->ms, &st);
    uint64_t now = uv_hrtime() / 1000000;
    uint64_t lease_left = st.lease_valid_until > now ? st.lease_valid_until - now : 0;
    int n = snprintf(
        buf, cap,
        "# Cluster\r\ncluster_enabled:1\r\ncluster_name:%s\r\nnode_name:%s\r\n"
        "incarnation:%" PRId64 "\r\netcd_state:%s\r\netcd_unreachable_since_ms:%" PRIu64
        "\r\nmembership_joins:%" PRIu64 "\r\nmember_list_changes:%" PRIu64 "\r\nkeys_owned:%" PRIu64
        "\r\nkeys_homed:%" PRIu64 "\r\nreplicas:%" PRIu64 "\r\nremote_reads:%" PRIu64
        "\r\nreplica_hits:%" PRIu64 "\r\nbytes_pulled:%" PRIu64 "\r\nrecords:%" PRIu64
        "\r\ndrops_sent:%" PRIu64 "\r\nkeys_registered:%" PRIu64 "\r\nrecords_of_departed:%" PRIu64
        "\r\nunavailable_errors:%" PRIu64 "\r\nnode_requests:%" PRIu64 "\r\nstale_senders:%" PRIu64
        "\r\npeer_connections:%" PRIu64 "\r\npeer_connections_ahead:%" PRIu64
        "\r\npeer_connections_idle:%u\r\npeer_dials_waited:%" PRIu64
        "\r\npeer_replies_refused:%" PRIu64
        "\r\nforeign_nodes:%zu\r\nmembers:%zu\r\nserving:%d\r\nlease_ms_left:%" PRIu64
        "\r\nfenced_requests:%" PRIu64 "\r\nvouch_rounds:%" PRIu64 "\r\nreplicas_reclaimed:%" PRIu64
        "\r\nread_misses_no_record:%" PRIu64 "\r\nread_misses_gone_here:%" PRIu64
        "\r\nread_misses_owned_gone:%" PRIu64 "\r\nread_misses_home_said:%" PRIu64
        "\r\nread_misses_rounds:%" PRIu64 "\r\n",
        cl->name, cl->node, st.incarnation, st.reachable ? "ok" : "unreachable",
        st.unreachable_since, st.joins, cl->member_changes, cl->rec.ncopies - cl->rec.nreplicas,
        cl->rec.nhomes, cl->rec.nreplicas, cl->stats.remote_reads, cl->stats.replica_hits,
        cl->stats.bytes_pulled, cl->stats.records, cl->stats.drops_sent, cl->stats.registered,
        cl->stats.dropped_dead, cl->stats.unavailable, cl->stats.node_requests,
        cl->stats.stale_senders, cl->peers.opened, cl->peers.ahead, cl->peers.nidle,
        cl->peers.waited, cl->peers.refused, cl->foreign, cl->members.n, gkv_cluster_live(cl),
        lease_left, cl->stats.fenced, cl->stats.vouch_rounds, cl->stats.replicas_reclaimed,
        cl->stats.miss_no_record, cl->stats.miss_gone_here, cl->stats.miss_owned_gone,
        cl->stats.miss_home_said, cl->stats.miss_rounds);
    if (n >= 0 && (size_t)n < cap) {
        uint64_t watches, streams;
        gkv_cluster_watch_counts(cl, &watches, &streams);
        int k = snprintf(
            buf + n, cap - (size_t)n,
            "cluster_watches:%" PRIu64 "\r\ncluster_watch_streams:%" PRIu64
            "\r\ncluster_watch_stale:%" PRIu64 "\r\ncluster_wait_interests:%" PRIu64
            "\r\ncluster_wait_interests_full:%" PRIu64 "\r\ncluster_notifies_sent:%" PRIu64
            "\r\ncluster_notifies_received:%" PRIu64 "\r\ncluster_worker_watch_us:%" PRIu64
            "\r\ncluster_jobs_watched:%" PRIu64 "\r\n",
            watches, streams, cl->watch_stale, cl->waits.n, cl->waits.full, cl->waits.sent,
            cl->waits.received, (uint64_t)atomic_load(&((gkv_cluster_t *)cl)->origin.spin_us),
            gkv_cluster_jobs_watched((gkv_cluster_t *)cl));
        n = k < 0 ? -1 : n + k;
    }
    if (n >= 0 && (size_t)n < cap) {
        int k = gkv_plane_info((gkv_plane_t *)&cl->plane, buf + n, cap - (size_t)n);
        n = k < 0 ? -1 : n + k;
    }
    for (size_t i = 0; i < cl->members.n && n >= 0 && (size_t)n < cap; i++) {
        const gkv_member_t *m = &cl->members.m[i];
        int k = snprintf(buf + n, cap - (size_t)n,
                         "member%zu:name=%s,advertise=%s,weight=%u,incarnation=%" PRId64
                         ",self=%d,plane=%s\r\n",
                         i, m->name, m->advertise, m->weight, m->incarnation,
                         (long)i == cl->self,
                         (long)i == cl->self
                             ? "self"
                             : gkv_plane_word((gkv_plane_t *)&cl->plane, m->name, m->incarnation));
        n = k < 0 ? -1 : n + k;
    }
    return n >= 0 && (size_t)n < cap ? n : -1;
}
