/* cluster.c: the cluster on the loop (cluster.h). */
#include "cluster.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "log.h"
#include "placement.h"

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
    gkv_members_fini(&cl->members);
    cl->members = fresh;
    cl->self = -1;
    for (size_t i = 0; i < fresh.n; i++)
        if (!strcmp(fresh.m[i].name, cl->node))
            cl->self = (long)i;
    cl->member_changes++;
    if (cl->on_members)
        cl->on_members(cl->arg);
}

static void on_changed(uv_async_t *a)
{
    take_members(a->data);
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
    memset(cl, 0, sizeof(*cl));
    cl->loop = loop;
    cl->self = -1;
    strcpy(cl->node, cfg->node);
    strcpy(cl->name, cfg->cluster);
    uv_async_init(loop, &cl->changed, on_changed);
    cl->changed.data = cl;
    int rc = gkv_membership_start(&mc, on_changed_thread, cl, &cl->ms);
    if (rc) {
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
    take_members(cl);
    return 0;
}

void gkv_cluster_stop(gkv_cluster_t *cl)
{
    if (!cl->on)
        return;
    cl->on = false;
    gkv_membership_stop(cl->ms); /* its threads end: no async send after this */
    cl->ms = NULL;
    uv_close((uv_handle_t *)&cl->changed, NULL);
}

void gkv_cluster_fini(gkv_cluster_t *cl)
{
    gkv_members_fini(&cl->members);
}

const gkv_member_t *gkv_cluster_home(const gkv_cluster_t *cl, const void *key, size_t len)
{
    if (!cl->members.n)
        return NULL;
    long i = gkv_place_home(cl->members.m, cl->members.n, gkv_place_key_hash(key, len));
    return i < 0 ? NULL : &cl->members.m[i];
}

bool gkv_cluster_is_self(const gkv_cluster_t *cl, const gkv_member_t *m)
{
    return cl->self >= 0 && m == &cl->members.m[cl->self];
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
    int n = snprintf(buf, cap,
                     "# Cluster\r\ncluster_enabled:1\r\ncluster_name:%s\r\nnode_name:%s\r\n"
                     "incarnation:%" PRId64 "\r\netcd_state:%s\r\netcd_unreachable_since_ms:%" PRIu64
                     "\r\nmembership_joins:%" PRIu64 "\r\nmember_list_changes:%" PRIu64
                     "\r\nmembers:%zu\r\n",
                     cl->name, cl->node, st.incarnation, st.reachable ? "ok" : "unreachable",
                     st.unreachable_since, st.joins, cl->member_changes, cl->members.n);
    for (size_t i = 0; i < cl->members.n && n >= 0 && (size_t)n < cap; i++) {
        const gkv_member_t *m = &cl->members.m[i];
        int k = snprintf(buf + n, cap - (size_t)n,
                         "member%zu:name=%s,advertise=%s,weight=%u,incarnation=%" PRId64
                         ",self=%d\r\n",
                         i, m->name, m->advertise, m->weight, m->incarnation,
                         (long)i == cl->self);
        n = k < 0 ? -1 : n + k;
    }
    return n >= 0 && (size_t)n < cap ? n : -1;
}
