/* route.c: what each request of a client needs of the cluster, decided on the loop
 * (docs/cluster.md): a read of a value this node owns runs here as usual; any other read asks
 * the key's home and pulls the value from its owner into a replica first (a job); a SET's value
 * is published once its home recorded it; deletes, LIST and prefix sizes go to the homes. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_impl.h"
#include "commands.h"
#include "duration.h"
#include "error.h"
#include "log.h"
#include "placement.h"
#include "trace.h"

void gkv_cl_job_done(gkv_job_t *job)
{
    cl_job_t *j = (cl_job_t *)job;
    gkv_cluster_t *cl = j->cl;
    if (j->status == GKV_EUNAVAILABLE)
        cl->stats.unavailable++;
    if (j->kind == JOB_RECORD)
        gkv_cl_commit_done(j);
    if (j->kind == JOB_PULL)
        gkv_cl_pull_done(cl, j);
    if (j->kind == JOB_VOUCH) {
        cl->vouching = false;
        if (!j->status && j->started_ms + CL_VOUCH_MS > cl->vouched_until) {
            cl->vouched_until = j->started_ms + CL_VOUCH_MS;
            cl->stats.vouch_rounds++;
        }
        if (j->etcd_seen && cl->ms)
            gkv_membership_poke(cl->ms); /* others reach etcd: renew now, not in a while */
    }
    if (j->kind == JOB_REGISTER) {
        /* A home that kept a newer record than ours: our copy is no longer the value. */
        for (uint32_t i = 0; i < j->nkeys; i++) {
            cl_key_t *k = &j->keys[i];
            gkv_copy_rec_t *c = gkv_copy_find(&cl->rec, k->key, k->klen);
            if (!c || c->replica || c->version != k->version)
                continue;
            if (k->status == GKV_EEXISTS) /* registered newer elsewhere */
                gkv_cl_unlink_quietly(cl, k->key, k->klen, 0);
            else if (!k->status)
                snprintf(c->home, sizeof(c->home), "%s", k->owner);
            else
                cl->register_again = true; /* c->home still names the old home */
        }
        cl->stats.registered += j->nkeys;
    }
    j->finished = true;
    gkv_route_ticket_t *t = j->t;
    if (!t) {
        gkv_cl_job_free(j);
        return;
    }
    if (j->kind == JOB_RECORD && j->publish) {
        /* A SET's reply is written: nothing is left for the next route. */
        t->job = NULL;
        gkv_cl_job_free(j);
    }
    t->wake(t->conn);
}

/* This node is the only member and nothing of a member change is in flight: the home and
 * owner of every key, with no replicas (a member change drops them all). */
static bool alone(const gkv_cluster_t *cl)
{
    return cl->members.n == 1 && cl->self == 0 && !gkv_cl_settling(cl);
}

/* Requests that only read, answered from the store alone when this node is alone (a one-node
 * cluster then costs a read no lookup of its records). */
static bool reads_alone(const gkv_request_t *req)
{
    switch (req->op) {
    case GKV_OP_GET:
    case GKV_OP_MAP:
    case GKV_OP_MGET:
    case GKV_OP_EXISTS:
    case GKV_OP_LIST:
    case GKV_OP_TTL:
        return true;
    case GKV_OP_GETSIZE:
        return !(req->has & GKV_HAS_KEY); /* a key's names its owner (route_keys) */
    default:
        return false;
    }
}

/* Members in force, with this node among them; else requests get UNAVAILABLE. */
static bool ready(const gkv_cluster_t *cl)
{
    return cl->self >= 0 && cl->members.n > 0;
}

/* The keys of a request that reads values: GET and MAP's key, MGET's items. */
typedef int (*key_fn)(gkv_cluster_t *cl, const uint8_t *key, size_t klen, void *arg);

static int each_read_key(gkv_cluster_t *cl, const gkv_request_t *req, key_fn fn, void *arg)
{
    if (req->op != GKV_OP_MGET)
        return fn(cl, req->key.p, req->key.len, arg);
    gkv_reader_t it;
    gkv_item_t item;
    uint32_t n;
    gkv_read_init(&it, req->items.p, req->items.len);
    gkv_read_array(&it, &n);
    for (uint32_t i = 0; i < n; i++) {
        gkv_req_items_next(&it, &item);
        int rc = fn(cl, item.key.p, item.key.len, arg);
        if (rc)
            return rc;
    }
    return 0;
}

typedef struct {
    cl_job_t *job;
    int rc;
} read_plan_t;

/* One key of a read without a job yet: local when owned here or resolved from this node's
 * own home records; else added to the job (created on first need). */
static int plan_read_key(gkv_cluster_t *cl, const uint8_t *key, size_t klen, void *arg)
{
    read_plan_t *p = arg;
    if (gkv_cl_owned_here(cl, key, klen)) {
        bool gone = !gkv_store_find(cl->store, key, klen);
        if (gone)
            cl->stats.miss_owned_gone++; /* the handler answers NOTFOUND */
        /* GPUKV_TRACE: c_plan, how a key is read: 1 ours, 2 ours but gone (3-6 below) */
        gkv_trace_key("c_plan", key, klen, gone ? 2 : 1);
        return 0;
    }
    const gkv_member_t *home = gkv_cluster_home(cl, key, klen);
    gkv_copy_rec_t *c = gkv_copy_find(&cl->rec, key, klen);
    if (gkv_cluster_is_self(cl, home) && !gkv_cl_settling(cl)) {
        gkv_home_rec_t *h = gkv_home_find(&cl->rec, key, klen);
        if (!h || !h->owner[0]) {
            if (c && c->replica) /* a stale replica: the key is gone */
                gkv_cl_unlink(cl, key, klen, 0);
            cl->stats.miss_no_record++;
            gkv_trace_key("c_plan", key, klen, 3); /* homed here, no record */
            return 0;
        }
        if (!h->busy && !strcmp(h->owner, cl->node) && !(c && c->pending)) {
            cl->stats.miss_gone_here++; /* ours, but gone from memory (evicted, expired) */
            gkv_trace_key("c_plan", key, klen, 4);
            return 0;
        }
        if (!h->busy && gkv_cl_replica_version(cl, key, klen, NULL) == h->version) {
            cl->stats.replica_hits++;
            gkv_trace_key("c_plan", key, klen, 5); /* our replica is the recorded version */
            return 0;
        }
    }
    gkv_trace_key("c_plan", key, klen, 6); /* a READ job asks */
    if (!p->job && !(p->job = gkv_cl_job_new(cl, NULL, JOB_READ)))
        return GKV_ENOMEM;
    if (gkv_cl_job_key(p->job, key, klen, home))
        return GKV_ENOMEM;
    cl_key_t *k = &p->job->keys[p->job->nkeys - 1];
    k->have = gkv_cl_replica_version(cl, key, klen, &k->have_size);
    if (gkv_cluster_is_self(cl, home) && !gkv_cl_settling(cl)) {
        gkv_home_rec_t *h = gkv_home_find(&cl->rec, key, klen);
        if (h && h->owner[0] && !h->busy && strcmp(h->owner, cl->node)) {
            /* Our own record says who owns it: the job need not ask us. */
            k->known = true;
            strcpy(k->owner, h->owner);
            k->owner_inc = h->owner_inc;
            k->version = h->version;
            k->size = h->size;
        }
    }
    return 0;
}

/* A small value fetched for a plain GET (k->bytes): answered from those bytes now, as the GET
 * handler would; the replica is kept afterwards by a job of its own. */
static int answer_direct(gkv_cluster_t *cl, cl_job_t *j, cl_key_t *k, const gkv_request_t *req,
                         gkv_wr_t *out, int *rc)
{
    gkv_wr_ok(out, req->id);
    gkv_wr_uint(out, GKV_F_SIZE, k->size);
    gkv_wr_uint(out, GKV_F_OFFSET, 0);
    gkv_wr_uint(out, GKV_F_PAYLOAD, k->size);
    gkv_wr_uint(out, GKV_F_GPU, 0);
    if (k->meta_len)
        gkv_wr_bin(out, GKV_F_META, k->meta, k->meta_len);
    gkv_wr_uint(out, GKV_F_VVERSION, k->version); /* its cluster version, as a replica's */
    gkv_trace_key("c_direct", k->key, k->klen, k->size); /* GPUKV_TRACE */
    *rc = gkv_wr_end(out);
    if (!*rc && k->size && msgpack_sbuffer_write(&out->sb, (const char *)k->bytes, k->size))
        out->failed = true;
    cl->stats.remote_reads++;
    cl->stats.bytes_pulled += k->size;
    /* The job becomes the replica's installer: its key and bytes move over. */
    j->kind = JOB_INSTALL;
    j->t = NULL;
    j->finished = false;
    j->status = 0;
    if (k != &j->keys[0]) {
        cl_key_t tmp = j->keys[0];
        j->keys[0] = *k;
        *k = tmp;
    }
    gkv_workers_submit(&cl->origin, &j->job);
    return GKV_ROUTE_DONE;
}

/* A READ job came back: every key is now local at the version its home confirmed (the job
 * installed replicas), or missing (any stale replica goes), or the request fails. Returns
 * LOCAL, DONE (an error written) or PARK (a replica was replaced meanwhile: once more). */
/* read_outcome's answer when j went on as a JOB_PULL (the ticket waits for it). */
#define CL_ROUTE_PULLING 100

static int read_outcome(gkv_cluster_t *cl, gkv_route_ticket_t *t, cl_job_t *j,
                        const gkv_request_t *req, gkv_wr_t *out, int *rc)
{
    bool again = false, pull = false;
    for (uint32_t i = 0; i < j->nkeys; i++) {
        cl_key_t *k = &j->keys[i];
        /* GPUKV_TRACE: c_out, a READ's key back on the loop, and its status */
        gkv_trace_key("c_out", k->key, k->klen, (uint64_t)(int64_t)k->status);
        if (k->status == CL_PULL) {
            pull = true;
            continue;
        }
        if (k->status == CL_AGAIN) {
            again = true;
            continue;
        }
        if (k->status == GKV_EEXISTS) { /* the home says we own it */
            gkv_copy_rec_t *c = gkv_copy_find(&cl->rec, k->key, k->klen);
            if (gkv_cl_owned_here(cl, k->key, k->klen))
                continue;
            /* Recorded but not published yet, or superseded since the home answered (another
             * write dropped ours): ask again. Still ours after that many rounds: gone from
             * memory (evicted, expired), a miss. */
            if ((c && c->pending) || j->attempts < CL_READ_ROUNDS - 1) {
                again = true;
                continue;
            }
            k->status = GKV_ENOTFOUND;
            cl->stats.miss_rounds++;
        } else if (k->status == GKV_ENOTFOUND) {
            cl->stats.miss_home_said++;
        }
        if (k->status == GKV_ENOTFOUND) {
            gkv_copy_rec_t *c = gkv_copy_find(&cl->rec, k->key, k->klen);
            if (c && c->replica)
                gkv_cl_unlink(cl, k->key, k->klen, 0);
            else if (!c && gkv_store_find(cl->store, k->key, k->klen))
                gkv_store_del(cl->store, k->key, k->klen); /* nothing the cluster knows */
            continue;
        }
        if (k->status == GKV_EUNAVAILABLE && t->wait_ms)
            return GKV_ROUTE_WAIT_KEY; /* a dead home: the members change within the TTL */
        if (k->status) {
            *rc = k->status;
            gkv_wr_error(out, req->id, k->status, j->msg[0] ? j->msg : NULL);
            return GKV_ROUTE_DONE;
        }
        if (gkv_cl_owned_here(cl, k->key, k->klen)) {
            gkv_trace_key("c_outown", k->key, k->klen, 0);
            continue; /* written here meanwhile: newer than what the home said */
        }
        if (k->direct && j->nkeys == 1)
            return answer_direct(cl, j, k, req, out, rc);
        if (gkv_cl_replica_version(cl, k->key, k->klen, NULL) != k->version)
            again = true;
    }
    if (pull) {
        if (gkv_cl_pull_start(cl, t, j))
            return CL_ROUTE_PULLING;
        again = true; /* no memory for it now: over TCP */
    }
    cl->stats.remote_reads++;
    if (!again)
        return GKV_ROUTE_LOCAL;
    if (j->attempts >= CL_READ_ROUNDS) {
        *rc = GKV_EUNAVAILABLE;
        gkv_wr_error(out, req->id, GKV_EUNAVAILABLE,
                           "the value kept changing while it was being fetched");
        return GKV_ROUTE_DONE;
    }
    (void)t;
    return GKV_ROUTE_PARK;
}

static int route_read(gkv_cluster_t *cl, gkv_route_ticket_t *t, const gkv_request_t *req,
                      gkv_wr_t *out, int *rc)
{
    uint32_t attempts = 0;
    bool no_nixl = false;
    if (t->job) {
        cl_job_t *j = t->job;
        t->job = NULL;
        attempts = j->attempts;
        int r = read_outcome(cl, t, j, req, out, rc);
        if (r == CL_ROUTE_PULLING) /* it goes on pulling (the ticket holds it again) */
            return GKV_ROUTE_PARK;
        no_nixl = j->no_nixl; /* after the outcome: a pull that found no memory set it */
        if (j->kind != JOB_INSTALL) /* else it went on to keep the replica */
            gkv_cl_job_free(j);
        if (r != GKV_ROUTE_PARK)
            return r;
    }
    read_plan_t p = {NULL, 0};
    int err = each_read_key(cl, req, plan_read_key, &p);
    if (err) {
        gkv_cl_job_free(p.job);
        *rc = err;
        gkv_wr_error(out, req->id, err, NULL);
        return GKV_ROUTE_DONE;
    }
    if (!p.job)
        return GKV_ROUTE_LOCAL;
    /* A read waiting for a newer version goes through a replica, whose version its handler
     * checks (server/cmd/checks.c); so does a GET into a registered buffer, copied from it. */
    p.job->direct =
        req->op == GKV_OP_GET && !(req->has & (GKV_HAS_OFFSET | GKV_HAS_LENGTH | GKV_HAS_SUFFIX |
                                               GKV_HAS_AFTER | GKV_HAS_INTO));
    p.job->attempts = attempts + 1;
    p.job->no_nixl = no_nixl;
    p.job->wait_ms = t->wait_ms; /* a missing key: its home notes that we wait */
    p.job->wait_after = t->wait_ms && (req->has & GKV_HAS_AFTER) ? req->after : 0;
    p.job->t = t;
    gkv_cl_read_ahead(p.job); /* the owner stages while the job's worker wakes */
    gkv_cl_submit(cl, t, p.job, false);
    return GKV_ROUTE_PARK;
}

/* The keys of EXISTS and DEL. */
static int each_key(const gkv_request_t *req, key_fn fn, gkv_cluster_t *cl, void *arg)
{
    if (req->has & GKV_HAS_KEY) {
        int rc = fn(cl, req->key.p, req->key.len, arg);
        if (rc)
            return rc;
    }
    if (req->has & GKV_HAS_KEYS) {
        gkv_reader_t it;
        gkv_slice_t k;
        uint32_t n;
        gkv_read_init(&it, req->keys.p, req->keys.len);
        gkv_read_array(&it, &n);
        for (uint32_t i = 0; i < n; i++) {
            gkv_req_keys_next(&it, &k);
            int rc = fn(cl, k.p, k.len, arg);
            if (rc)
                return rc;
        }
    }
    return 0;
}

static int add_key(gkv_cluster_t *cl, const uint8_t *key, size_t klen, void *arg)
{
    return gkv_cl_job_key(arg, key, klen, gkv_cluster_home(cl, key, klen));
}

/* EXISTS, DEL of keys, GETSIZE of a key: every key asks its home (a job), unless all of them
 * can be answered here: owned here, or homed here with nothing to wait for. */
static bool local_only(gkv_cluster_t *cl, const uint8_t *key, size_t klen, bool deleting)
{
    const gkv_member_t *home = gkv_cluster_home(cl, key, klen);
    if (!gkv_cluster_is_self(cl, home) || gkv_cl_settling(cl))
        return !deleting && gkv_cl_owned_here(cl, key, klen);
    gkv_home_rec_t *h = gkv_home_find(&cl->rec, key, klen);
    return !h || !h->owner[0] || (!h->busy && !strcmp(h->owner, cl->node));
}

static int check_local(gkv_cluster_t *cl, const uint8_t *key, size_t klen, void *arg)
{
    bool *all = arg;
    *all = *all && local_only(cl, key, klen, false);
    return 0;
}

static int check_local_del(gkv_cluster_t *cl, const uint8_t *key, size_t klen, void *arg)
{
    bool *all = arg;
    *all = *all && local_only(cl, key, klen, true);
    return 0;
}

/* A key homed here whose value is this node's or nobody's: deleted here. */
static int del_here(gkv_cluster_t *cl, const uint8_t *key, size_t klen, void *arg)
{
    uint64_t *count = arg;
    gkv_home_rec_t *h = gkv_home_find(&cl->rec, key, klen);
    int had = h && h->owner[0];
    uint64_t upto = h ? h->version : 0;
    if (h)
        gkv_home_del(&cl->rec, h);
    gkv_cl_unlink(cl, key, klen, upto);
    *count += (uint64_t)had;
    return 0;
}

/* GETSIZE of a key in a cluster: its size, GPU, tier (1 or 2: the owner's host or disk tier;
 * known only to the owner) and owning node. */
static void reply_size(gkv_wr_t *out, uint64_t id, uint64_t size, unsigned gpu, unsigned tier,
                       const char *owner)
{
    gkv_wr_ok(out, id);
    gkv_wr_uint(out, GKV_F_SIZE, size);
    gkv_wr_uint(out, GKV_F_GPU, gpu);
    if (tier)
        gkv_wr_uint(out, GKV_F_TIER, tier);
    gkv_wr_str(out, GKV_F_OWNER, owner);
    gkv_wr_end(out);
}

static int route_keys(gkv_cluster_t *cl, gkv_route_ticket_t *t, const gkv_request_t *req,
                      int kind, gkv_wr_t *out, int *rc)
{
    if (t->job) {
        cl_job_t *j = t->job;
        t->job = NULL;
        *rc = j->status;
        if (j->status) {
            gkv_wr_error(out, req->id, j->status, j->msg[0] ? j->msg : NULL);
        } else if (kind == JOB_GETSIZE && j->keys[0].status) {
            *rc = j->keys[0].status;
            gkv_wr_error(out, req->id, *rc, NULL);
        } else if (kind == JOB_GETSIZE) { /* the owner's GPU is not known here */
            reply_size(out, req->id, j->keys[0].size, 0, 0, j->keys[0].owner);
        } else { /* the homes dropped our own copies too (node.c, DELETE) */
            gkv_cl_reply_count(out, req->id, j->count);
        }
        gkv_cl_job_free(j);
        return GKV_ROUTE_DONE;
    }
    if (kind == JOB_GETSIZE && gkv_cl_owned_here(cl, req->key.p, req->key.len)) {
        gkv_entry_t *e = gkv_store_find(cl->store, req->key.p, req->key.len);
        if (e) { /* ours: size, GPU and owner (this node) from here */
            reply_size(out, req->id, e->size, gkv_store_gpu(e), gkv_store_tier(e), cl->node);
            return GKV_ROUTE_DONE;
        }
    }
    bool all = true;
    each_key(req, kind == JOB_DEL ? check_local_del : check_local, cl, &all);
    if (all && kind != JOB_DEL)
        return GKV_ROUTE_LOCAL;
    if (all) {
        uint64_t count = 0;
        each_key(req, del_here, cl, &count);
        gkv_cl_reply_count(out, req->id, count);
        *rc = 0;
        return GKV_ROUTE_DONE;
    }
    cl_job_t *j = gkv_cl_job_new(cl, t, kind);
    if (!j || each_key(req, add_key, cl, j)) {
        gkv_cl_job_free(j);
        *rc = GKV_ENOMEM;
        gkv_wr_error(out, req->id, GKV_ENOMEM, NULL);
        return GKV_ROUTE_DONE;
    }
    gkv_cl_submit(cl, t, j, false);
    return GKV_ROUTE_PARK;
}

/* LIST, GETSIZE of a prefix, DEL of a prefix: every member is asked (a job). */
static int route_fanout(gkv_cluster_t *cl, gkv_route_ticket_t *t, const gkv_request_t *req,
                        int kind, gkv_wr_t *out, int *rc)
{
    if (t->job) {
        cl_job_t *j = t->job;
        t->job = NULL;
        *rc = j->status;
        if (j->status) {
            gkv_wr_error(out, req->id, j->status, j->msg[0] ? j->msg : NULL);
        } else if (j->has_reply) {
            if (msgpack_sbuffer_write(&out->sb, j->reply.sb.data, j->reply.sb.size))
                out->failed = true;
        } else if (kind == JOB_SIZES) {
            gkv_wr_ok(out, req->id);
            gkv_wr_uint(out, GKV_F_BYTES, j->bytes);
            gkv_wr_uint(out, GKV_F_COUNT, j->count);
            gkv_wr_end(out);
        } else {
            gkv_cl_reply_count(out, req->id, j->count);
        }
        gkv_cl_job_free(j);
        return GKV_ROUTE_DONE;
    }
    if (req->prefix.len > cl->max_key || req->cursor.len > cl->max_key) {
        *rc = GKV_ETOOBIG;
        gkv_wr_error(out, req->id, *rc, "prefix or cursor longer than max-key-size");
        return GKV_ROUTE_DONE;
    }
    if ((req->has & GKV_HAS_DELIM) && req->delim.len > 1) {
        *rc = GKV_EINVAL;
        gkv_wr_error(out, req->id, *rc, "the delimiter is a single byte");
        return GKV_ROUTE_DONE;
    }
    uint64_t limit = req->limit ? req->limit : 1000;
    if (kind == JOB_LIST && limit > GKV_MAX_LIST) {
        *rc = GKV_ETOOBIG;
        gkv_wr_error(out, req->id, *rc, "limit exceeds the most a LIST returns");
        return GKV_ROUTE_DONE;
    }
    cl_job_t *j = gkv_cl_job_new(cl, t, kind);
    if (j) {
        j->id = req->id;
        j->limit = limit;
        j->req_flags = req->flags;
        j->delim = (req->has & GKV_HAS_DELIM) && req->delim.len == 1 ? req->delim.p[0] : -1;
        j->prefix = malloc(req->prefix.len + 1);
        j->cursor = malloc(req->cursor.len + 1);
    }
    if (!j || !j->prefix || !j->cursor) {
        gkv_cl_job_free(j);
        *rc = GKV_ENOMEM;
        gkv_wr_error(out, req->id, *rc, NULL);
        return GKV_ROUTE_DONE;
    }
    if (req->prefix.len)
        memcpy(j->prefix, req->prefix.p, req->prefix.len);
    j->prefix_len = (uint32_t)req->prefix.len;
    if (req->cursor.len)
        memcpy(j->cursor, req->cursor.p, req->cursor.len);
    j->cursor_len = (uint32_t)req->cursor.len;
    gkv_cl_submit(cl, t, j, false);
    return GKV_ROUTE_PARK;
}

uint64_t gkv_cluster_value_version(gkv_cluster_t *cl, const void *key, size_t klen)
{
    if (!cl->on)
        return 0;
    gkv_copy_rec_t *c = gkv_copy_find(&cl->rec, key, klen);
    return c && c->version && gkv_store_find(cl->store, key, klen) ? c->version : 0;
}

int gkv_cluster_route(gkv_cluster_t *cl, gkv_route_ticket_t *t, const gkv_request_t *req,
                      gkv_leases_t *leases, gkv_wr_t *out, int *rc)
{
    *rc = 0;
    t->defer = false;
    t->strip_nx_xx = false;
    if (!cl->on && !cl->left && !t->job)
        return GKV_ROUTE_LOCAL; /* no cluster */
    if (req->op == GKV_OP_NODE)
        return gkv_cl_node(cl, t, req, out, rc);
    switch (req->op) {
    case GKV_OP_SET:
    case GKV_OP_GET:
    case GKV_OP_MAP:
    case GKV_OP_MGET:
    case GKV_OP_EXISTS:
    case GKV_OP_DEL:
    case GKV_OP_LIST:
    case GKV_OP_GETSIZE:
    case GKV_OP_SEAL:
    case GKV_OP_EXPIRE:
    case GKV_OP_PERSIST:
    case GKV_OP_TTL:
    case GKV_OP_MOVE:
        break;
    default:
        return GKV_ROUTE_LOCAL;
    }
    if (!ready(cl) && !t->job) {
        *rc = GKV_EUNAVAILABLE;
        gkv_wr_error(out, req->id, *rc, "this node is not (yet) a member of its cluster");
        return GKV_ROUTE_DONE;
    }
    if (!t->job && cl->left) {
        *rc = GKV_EUNAVAILABLE;
        gkv_wr_error(out, req->id, *rc, "this node has left its cluster (it is stopping)");
        return GKV_ROUTE_DONE;
    }
    if (!t->job && !gkv_cluster_live(cl)) {
        /* Cut off from etcd and unvouched: the others may have taken this node for gone and
         * moved on, so nothing of ours is served (docs/cluster.md, "Partitions"). */
        cl->stats.fenced++;
        *rc = GKV_EUNAVAILABLE;
        gkv_wr_error(out, req->id, *rc,
                     "this node cannot confirm its membership (etcd unreachable): fenced");
        return GKV_ROUTE_DONE;
    }
    if (t->wait_ms && !t->job)
        t->wait_seq = cl->waits.seq; /* gkv_cluster_wait_missed counts from here */
    if (!t->job && alone(cl) && reads_alone(req))
        return GKV_ROUTE_LOCAL; /* every key is ours, and no other node holds any */
    switch (req->op) {
    case GKV_OP_SET:
        if (req->has & GKV_HAS_KEY)
            t->defer = true;
        return GKV_ROUTE_LOCAL;
    case GKV_OP_GET:
    case GKV_OP_MAP:
        if (!(req->has & GKV_HAS_KEY) || req->key.len > cl->max_key)
            return GKV_ROUTE_LOCAL; /* the handler's checks answer */
        return route_read(cl, t, req, out, rc);
    case GKV_OP_MGET:
        if (!(req->has & GKV_HAS_ITEMS) || !req->nitems || req->nitems > GKV_MAX_BATCH)
            return GKV_ROUTE_LOCAL;
        return route_read(cl, t, req, out, rc);
    case GKV_OP_EXISTS:
        if (!(req->has & (GKV_HAS_KEY | GKV_HAS_KEYS)) || req->nkeys > GKV_MAX_BATCH)
            return GKV_ROUTE_LOCAL;
        return route_keys(cl, t, req, JOB_EXISTS, out, rc);
    case GKV_OP_DEL:
        if (req->has & GKV_HAS_PREFIX) {
            if (req->has & (GKV_HAS_KEY | GKV_HAS_KEYS))
                return GKV_ROUTE_LOCAL;
            return route_fanout(cl, t, req, JOB_DEL_PREFIX, out, rc);
        }
        if (!(req->has & (GKV_HAS_KEY | GKV_HAS_KEYS)) || req->nkeys > GKV_MAX_BATCH)
            return GKV_ROUTE_LOCAL;
        return route_keys(cl, t, req, JOB_DEL, out, rc);
    case GKV_OP_LIST:
        return route_fanout(cl, t, req, JOB_LIST, out, rc);
    case GKV_OP_GETSIZE:
        if (req->has & GKV_HAS_KEY)
            return req->key.len > cl->max_key ? GKV_ROUTE_LOCAL
                                              : route_keys(cl, t, req, JOB_GETSIZE, out, rc);
        if (!(req->has & GKV_HAS_PREFIX))
            return GKV_ROUTE_LOCAL;
        return route_fanout(cl, t, req, JOB_SIZES, out, rc);
    case GKV_OP_SEAL:
        return gkv_cl_route_seal(cl, t, req, leases, out, rc);
    default: /* EXPIRE, PERSIST, TTL, MOVE act on the owner's copy */
        if (!(req->has & GKV_HAS_KEY) || gkv_cl_owned_here(cl, req->key.p, req->key.len))
            return GKV_ROUTE_LOCAL;
        *rc = GKV_ENOTSUP;
        gkv_wr_error(out, req->id, *rc,
                           "in a cluster, EXPIRE, PERSIST, TTL and MOVE run on the node that "
                           "owns the value (gpukv locate KEY names it)");
        return GKV_ROUTE_DONE;
    }
}

void gkv_cluster_ticket_fini(gkv_cluster_t *cl, gkv_route_ticket_t *t)
{
    if (t->teed)
        gkv_store_unref(cl->store, t->teed);
    t->teed = NULL;
    cl_job_t *j = t->job;
    t->job = NULL;
    if (!j)
        return;
    if (j->finished)
        gkv_cl_job_free(j);
    else
        j->t = NULL; /* done frees it */
}
