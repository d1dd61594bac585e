/* cluster_off.c: cluster.h for a build without libcurl or cJSON: --cluster is refused. */
#include "cluster.h"

#include <stdio.h>
#include <string.h>

#include "error.h"

int gkv_cluster_start(gkv_cluster_t *cl, uv_loop_t *loop, const gkv_cluster_cfg_t *cfg,
                      char *err, size_t cap)
{
    (void)loop, (void)cfg;
    memset(cl, 0, sizeof(*cl));
    snprintf(err, cap, "cluster: this gpukvd was built without libcurl and cJSON "
                       "(libcurl4-openssl-dev, libcjson-dev), so it cannot join a cluster");
    return GKV_ENOTSUP;
}

void gkv_cluster_stop(gkv_cluster_t *cl)
{
    (void)cl;
}

void gkv_cluster_fini(gkv_cluster_t *cl)
{
    (void)cl;
}

const gkv_member_t *gkv_cluster_home(const gkv_cluster_t *cl, const void *key, size_t len)
{
    (void)cl, (void)key, (void)len;
    return NULL;
}

bool gkv_cluster_is_self(const gkv_cluster_t *cl, const gkv_member_t *m)
{
    (void)cl, (void)m;
    return false;
}

int gkv_cluster_info(const gkv_cluster_t *cl, char *buf, size_t cap)
{
    (void)cl;
    int n = snprintf(buf, cap, "# Cluster\r\ncluster_enabled:0\r\n");
    return n < 0 || (size_t)n >= cap ? -1 : n;
}

void gkv_cluster_set_busy_poll(gkv_cluster_t *cl, uint64_t us)
{
    (void)cl, (void)us;
}

uint64_t gkv_cluster_jobs_watched(gkv_cluster_t *cl)
{
    (void)cl;
    return 0;
}

void gkv_cluster_close(gkv_cluster_t *cl)
{
    (void)cl;
}

int gkv_cluster_route(gkv_cluster_t *cl, gkv_route_ticket_t *t, const gkv_request_t *req,
                      gkv_leases_t *leases, gkv_wr_t *out, int *rc)
{
    (void)cl, (void)t, (void)req, (void)leases, (void)out;
    *rc = 0;
    return GKV_ROUTE_LOCAL;
}

int gkv_cluster_commit(gkv_cluster_t *cl, gkv_route_ticket_t *t, uint64_t id, gkv_entry_t *e,
                       unsigned flags, gkv_wr_t *out, int *rc, gkv_entry_t **holder)
{
    (void)cl, (void)t, (void)id, (void)flags, (void)out;
    *holder = e;
    *rc = GKV_ENOTSUP; /* never reached: nothing is deferred without a cluster */
    return GKV_ROUTE_DONE;
}

void gkv_cluster_after(gkv_cluster_t *cl, const gkv_request_t *req, gkv_leases_t *leases,
                       int rc, const void *key, size_t klen)
{
    (void)cl, (void)req, (void)leases, (void)rc, (void)key, (void)klen;
}

void gkv_cluster_ticket_fini(gkv_cluster_t *cl, gkv_route_ticket_t *t)
{
    (void)cl, (void)t;
}

bool gkv_cluster_wait_missed(const gkv_cluster_t *cl, const gkv_route_ticket_t *t,
                             const void *key, size_t klen)
{
    (void)cl, (void)t, (void)key, (void)klen;
    return false;
}

uint64_t gkv_cluster_value_version(gkv_cluster_t *cl, const void *key, size_t klen)
{
    (void)cl, (void)key, (void)klen;
    return 0;
}

bool gkv_cluster_live(const gkv_cluster_t *cl)
{
    (void)cl;
    return false;
}

bool gkv_cluster_reports(const gkv_cluster_t *cl, unsigned kind, const void *key, size_t klen,
                         uint64_t *version)
{
    (void)cl, (void)kind, (void)key, (void)klen;
    *version = 0;
    return true;
}

bool gkv_cluster_watch_fresh(gkv_cl_watch_t *w, unsigned kind, const uint8_t *key, size_t klen,
                             uint64_t version)
{
    (void)w, (void)kind, (void)key, (void)klen, (void)version;
    return true;
}

gkv_cl_watch_t *gkv_cluster_watch_open(gkv_cluster_t *cl, const uint8_t *prefix, size_t plen,
                                       gkv_cl_event_fn fn, void *arg)
{
    (void)cl, (void)prefix, (void)plen, (void)fn, (void)arg;
    return NULL;
}

void gkv_cluster_watch_close(gkv_cluster_t *cl, gkv_cl_watch_t *w)
{
    (void)cl, (void)w;
}

void gkv_cluster_watch_counts(const gkv_cluster_t *cl, uint64_t *watches, uint64_t *streams)
{
    (void)cl;
    *watches = *streams = 0;
}
