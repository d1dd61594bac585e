/* node.c: NODE requests from other nodes (proto/node.h), answered on the loop: a home's
 * LOOKUP, RECORD, DELETE, LIST and REGISTER, an owner's DROP and FETCH, and the REPLICA a
 * node's own read sends itself. A home that must first tell a previous owner to drop its copy
 * marks the record busy and waits for that (a job on the nested pool). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_impl.h"
#include "commands.h"
#include "error.h"
#include "log.h"
#include "placement.h"
#include "trace.h"

static int fail(gkv_wr_t *out, uint64_t id, int code, const char *msg, int *rc)
{
    *rc = code;
    gkv_wr_error(out, id, code, msg);
    return GKV_ROUTE_DONE;
}

/* This node is the key's home in its own view. */
static bool home_here(gkv_cluster_t *cl, const gkv_request_t *req)
{
    return gkv_cluster_is_self(cl, gkv_cluster_home(cl, req->key.p, req->key.len));
}

/* A job that tells owner to drop its copy of key (flags: GKV_DROP_SUPERSEDED when a write
 * elsewhere replaces it); the request is routed again when it ends. */
static int drop_first(gkv_cluster_t *cl, gkv_route_ticket_t *t, const gkv_request_t *req,
                      gkv_home_rec_t *h, unsigned flags, gkv_wr_t *out, int *rc)
{
    const gkv_member_t *owner = gkv_cl_member(cl, h->owner, strlen(h->owner));
    cl_job_t *j = gkv_cl_job_new(cl, t, JOB_DROP);
    if (!j || gkv_cl_job_key(j, req->key.p, req->key.len, owner)) {
        gkv_cl_job_free(j);
        return fail(out, req->id, GKV_ENOMEM, NULL, rc);
    }
    j->keys[0].version = h->version;
    j->flags = flags;
    h->busy = true;
    cl->stats.drops_sent++;
    t->job = j;
    gkv_workers_submit(&cl->nested, &j->job);
    return GKV_ROUTE_PARK;
}

/* A previous owner's drop came back: the record may change (or UNAVAILABLE, unchanged). */
static int drop_outcome(gkv_cluster_t *cl, gkv_route_ticket_t *t, gkv_home_rec_t **h,
                        const gkv_request_t *req, gkv_wr_t *out, int *rc)
{
    cl_job_t *j = t->job;
    t->job = NULL;
    int status = j->status;
    gkv_cl_job_free(j);
    *h = gkv_home_find(&cl->rec, req->key.p, req->key.len);
    if (*h)
        (*h)->busy = false;
    if (status && *h && gkv_cl_member(cl, (*h)->owner, strlen((*h)->owner)))
        return fail(out, req->id, GKV_EUNAVAILABLE,
                    "the node that owns the current value did not answer", rc);
    return GKV_ROUTE_LOCAL; /* go on */
}

/* The start RECORD and DELETE share: a previous owner's drop that came back (*dropped, *h the
 * record), and this node being the key's home. DONE with the reply written, else LOCAL. */
static int at_home(gkv_cluster_t *cl, gkv_route_ticket_t *t, const gkv_request_t *req,
                   gkv_home_rec_t **h, bool *dropped, gkv_wr_t *out, int *rc)
{
    if (t->job) {
        if (drop_outcome(cl, t, h, req, out, rc) == GKV_ROUTE_DONE)
            return GKV_ROUTE_DONE;
        *dropped = true;
    }
    if (!home_here(cl, req))
        return fail(out, req->id, GKV_EBUSY, "not this key's home (the members are changing)",
                    rc);
    return GKV_ROUTE_LOCAL;
}

static int node_record(gkv_cluster_t *cl, gkv_route_ticket_t *t, const gkv_request_t *req,
                       const gkv_member_t *from, gkv_wr_t *out, int *rc)
{
    gkv_home_rec_t *h = NULL;
    bool dropped = false;
    if (at_home(cl, t, req, &h, &dropped, out, rc) == GKV_ROUTE_DONE)
        return GKV_ROUTE_DONE;
    if (!h)
        h = gkv_home_get(&cl->rec, req->key.p, req->key.len);
    if (!h)
        return fail(out, req->id, GKV_ENOMEM, "too many records", rc);
    if (h->busy)
        return fail(out, req->id, GKV_EBUSY, "a write of this key is being recorded", rc);
    if (!h->owner[0] && gkv_cl_settling(cl) && !dropped)
        return fail(out, req->id, GKV_EBUSY, "the members changed: owners are re-registering",
                    rc);
    bool exists = h->owner[0] != 0;
    if (((req->flags & GKV_SET_NX) && exists) || ((req->flags & GKV_SET_XX) && !exists)) {
        if (!exists)
            gkv_home_del(&cl->rec, h);
        return fail(out, req->id, exists ? GKV_EEXISTS : GKV_ENOTFOUND,
                    exists ? "key exists (NX)" : "key does not exist (XX)", rc);
    }
    if (exists && !dropped && strcmp(h->owner, from->name)) {
        if (!strcmp(h->owner, cl->node)) {
            /* ours: right here, superseded by the sender's write (its event) */
            gkv_cl_unlink_quietly(cl, req->key.p, req->key.len, h->version);
        } else if (gkv_cl_member(cl, h->owner, strlen(h->owner))) {
            return drop_first(cl, t, req, h, GKV_DROP_SUPERSEDED, out, rc);
        }
    }
    uint64_t v = gkv_cl_record(cl, h, from->name, from->incarnation, req->size, 0);
    gkv_cl_waits_recorded(cl, req->key.p, req->key.len, v); /* nodes waiting for it */
    gkv_wr_ok(out, req->id);
    gkv_wr_uint(out, GKV_F_VVERSION, v);
    gkv_wr_str(out, GKV_F_OWNER, cl->node); /* the home that recorded it */
    gkv_wr_end(out);
    return GKV_ROUTE_DONE;
}

static int node_delete(gkv_cluster_t *cl, gkv_route_ticket_t *t, const gkv_request_t *req,
                       gkv_wr_t *out, int *rc)
{
    gkv_home_rec_t *h = NULL;
    bool dropped = false;
    if (at_home(cl, t, req, &h, &dropped, out, rc) == GKV_ROUTE_DONE)
        return GKV_ROUTE_DONE;
    if (!dropped)
        h = gkv_home_find(&cl->rec, req->key.p, req->key.len);
    if (!h || !h->owner[0]) {
        if (gkv_cl_settling(cl))
            return fail(out, req->id, GKV_EBUSY, "the members changed", rc);
        if (h)
            gkv_home_del(&cl->rec, h);
        gkv_cl_reply_count(out, req->id, 0);
        return GKV_ROUTE_DONE;
    }
    if (h->busy)
        return fail(out, req->id, GKV_EBUSY, "a write of this key is being recorded", rc);
    /* The owner's copy goes first, the sender's too: a write of its own that we recorded
     * while its DELETE was on the way is published there meanwhile, and would be read there
     * after we answered (the linearizability check caught it). */
    if (!dropped) {
        if (!strcmp(h->owner, cl->node))
            gkv_cl_unlink(cl, req->key.p, req->key.len, h->version);
        else if (gkv_cl_member(cl, h->owner, strlen(h->owner)))
            return drop_first(cl, t, req, h, 0, out, rc);
    }
    uint64_t deleted = h->version;
    gkv_home_del(&cl->rec, h);
    gkv_wr_ok(out, req->id);
    gkv_wr_uint(out, GKV_F_COUNT, 1);
    gkv_wr_uint(out, GKV_F_VVERSION, deleted);
    gkv_wr_end(out);
    return GKV_ROUTE_DONE;
}

/* A LOOKUP with wait that answers NOTFOUND, or a record not above its after: the sender's
 * wait is noted in this same turn, so a record made after the answer notifies it (waits.c). */
static void note_wait(gkv_cluster_t *cl, const gkv_request_t *req, const gkv_member_t *from)
{
    if ((req->has & GKV_HAS_WAIT) && req->wait)
        gkv_cl_waits_note(cl, req->key.p, req->key.len, from, req->wait);
}

/* LOOKUP (and FETCH at the home, when it answers as LOOKUP). */
static int node_lookup(gkv_cluster_t *cl, const gkv_request_t *req, const gkv_member_t *from,
                       gkv_wr_t *out, int *rc)
{
    if (!home_here(cl, req))
        return fail(out, req->id, GKV_EBUSY, "not this key's home (the members are changing)",
                    rc);
    gkv_home_rec_t *h = gkv_home_find(&cl->rec, req->key.p, req->key.len);
    if (h && h->busy)
        return fail(out, req->id, GKV_EBUSY, "a write of this key is being recorded", rc);
    if (!h || !h->owner[0]) {
        if (gkv_cl_settling(cl))
            return fail(out, req->id, GKV_EBUSY, "the members changed", rc);
        note_wait(cl, req, from);
        /* GPUKV_TRACE: h_look, a home's answer (1 no record, 2 ours but gone, 0 an owner) */
        gkv_trace_key("h_look", req->key.p, req->key.len, 1);
        return fail(out, req->id, GKV_ENOTFOUND, NULL, rc);
    }
    if ((req->has & GKV_HAS_AFTER) && h->version <= req->after)
        note_wait(cl, req, from); /* the sender waits for a newer one */
    if (!strcmp(h->owner, cl->node)) {
        gkv_copy_rec_t *c = gkv_copy_find(&cl->rec, req->key.p, req->key.len);
        if (c && c->pending && c->version != h->version)
            return fail(out, req->id, GKV_EBUSY, "that version is being published here", rc);
        if (!gkv_store_find(cl->store, req->key.p, req->key.len)) { /* ours, evicted or expired */
            note_wait(cl, req, from);
            gkv_trace_key("h_look", req->key.p, req->key.len, 2);
            return fail(out, req->id, GKV_ENOTFOUND, NULL, rc);
        }
    }
    gkv_trace_key("h_look", req->key.p, req->key.len, 0);
    gkv_wr_ok(out, req->id);
    gkv_wr_str(out, GKV_F_OWNER, h->owner);
    gkv_wr_uint(out, GKV_F_OWNER_INC, (uint64_t)h->owner_inc);
    gkv_wr_uint(out, GKV_F_VVERSION, h->version);
    gkv_wr_uint(out, GKV_F_SIZE, h->size);
    gkv_wr_end(out);
    return GKV_ROUTE_DONE;
}

/* FETCH without a version, to the key's home: the current value when this node owns it too
 * and the sender's replica (have) is not of that version (a GET reply that names its vversion:
 * one round trip for the reader instead of two), else what LOOKUP answers. */
static int node_fetch_current(gkv_cluster_t *cl, gkv_route_ticket_t *t, const gkv_request_t *req,
                              const gkv_member_t *from, gkv_wr_t *out, int *rc)
{
    gkv_home_rec_t *h = home_here(cl, req) ? gkv_home_find(&cl->rec, req->key.p, req->key.len)
                                          : NULL;
    if (h && !h->busy && !strcmp(h->owner, cl->node) && h->version != req->have &&
        !(req->limit && h->size > req->limit)) { /* limit: larger ones come through NIXL */
        gkv_copy_rec_t *c = gkv_copy_find(&cl->rec, req->key.p, req->key.len);
        if (c && !c->replica && c->version == h->version &&
            gkv_store_find(cl->store, req->key.p, req->key.len)) {
            t->fetch_version = h->version;
            return GKV_ROUTE_AS_GET;
        }
    }
    return node_lookup(cl, req, from, out, rc);
}

static int node_register(gkv_cluster_t *cl, const gkv_request_t *req, const gkv_member_t *from,
                         gkv_wr_t *out, int *rc)
{
    if (!home_here(cl, req))
        return fail(out, req->id, GKV_EBUSY, "not this key's home (the members are changing)",
                    rc);
    gkv_home_rec_t *h = gkv_home_get(&cl->rec, req->key.p, req->key.len);
    if (!h)
        return fail(out, req->id, GKV_ENOMEM, "too many records", rc);
    if (h->busy)
        return fail(out, req->id, GKV_EBUSY, "a write of this key is being recorded", rc);
    if (cl->rec.clock < req->vversion)
        cl->rec.clock = req->vversion;
    if (h->owner[0] && h->version >= req->vversion &&
        !(h->version == req->vversion && !strcmp(h->owner, from->name))) {
        /* A newer value was recorded: the sender's copy is stale. */
        return fail(out, req->id, GKV_EEXISTS, "a newer value is recorded", rc);
    }
    strcpy(h->owner, from->name);
    h->owner_inc = from->incarnation;
    h->version = req->vversion;
    h->size = req->size;
    gkv_cl_waits_recorded(cl, req->key.p, req->key.len, h->version);
    gkv_wr_ok(out, req->id);
    gkv_wr_str(out, GKV_F_OWNER, cl->node);
    gkv_wr_end(out);
    return GKV_ROUTE_DONE;
}

/* LIST over the records this node homes (see gkv_cl_list_write). */
static int node_list(gkv_cluster_t *cl, const gkv_request_t *req, gkv_wr_t *out, int *rc)
{
    size_t cap = 0, n = 0;
    cl_item_t *items = NULL;
    gkv_home_rec_t *h, *tmp;
    HASH_ITER(hh, cl->rec.homes, h, tmp)
    {
        if (!h->owner[0] || h->klen < req->prefix.len ||
            memcmp(h->key, req->prefix.p, req->prefix.len))
            continue;
        if (!strcmp(h->owner, cl->node) && !gkv_store_find(cl->store, h->key, h->klen))
            continue; /* ours, evicted or expired */
        if (n == cap) {
            size_t c2 = cap ? cap * 2 : 256;
            cl_item_t *more = realloc(items, c2 * sizeof(*items));
            if (!more) {
                free(items);
                return fail(out, req->id, GKV_ENOMEM, NULL, rc);
            }
            items = more;
            cap = c2;
        }
        items[n++] = (cl_item_t){h->key, h->klen, h->size, false};
    }
    gkv_cl_items_sort(items, n);
    int delim = (req->has & GKV_HAS_DELIM) && req->delim.len == 1 ? req->delim.p[0] : -1;
    uint64_t limit = req->limit ? req->limit : 1000;
    if (limit > GKV_MAX_LIST)
        limit = GKV_MAX_LIST;
    gkv_wr_ok(out, req->id);
    gkv_cl_list_write(out, items, n, req->prefix.p, req->prefix.len, delim, req->cursor.p,
                      req->cursor.len, limit, false);
    gkv_wr_end(out);
    free(items);
    return GKV_ROUTE_DONE;
}

int gkv_cl_node(gkv_cluster_t *cl, gkv_route_ticket_t *t, const gkv_request_t *req,
                gkv_wr_t *out, int *rc)
{
    *rc = 0;
    if (!cl->on && !t->job)
        return fail(out, req->id, GKV_ENOTSUP, "this gpukvd is not in a cluster", rc);
    cl->stats.node_requests++;
    const gkv_member_t *from = gkv_cl_member(cl, req->node.p, req->node.len);
    if (!from || from->incarnation != (int64_t)req->incarnation || cl->self < 0) {
        cl->stats.stale_senders++;
        gkv_cluster_ticket_fini(cl, t);
        return fail(out, req->id, GKV_EUNAVAILABLE,
                    "the sender is not a current member of this node's cluster", rc);
    }
    if (req->node_op == GKV_NODE_VOUCH) {
        /* The sender is a member at its incarnation in our view (checked above). */
        gkv_membership_state_t st;
        gkv_membership_state(cl->ms, &st);
        gkv_cl_reply_count(out, req->id, st.reachable);
        return GKV_ROUTE_DONE;
    }
    if (req->node_op == GKV_NODE_PLANE) /* no data: answered even while fenced */
        return gkv_cl_node_plane(cl, t, req, from, out, rc);
    if (req->node_op == GKV_NODE_NOTIFY) { /* no data either: waiters here ask again */
        if (!(req->has & GKV_HAS_KEY) || req->key.len > cl->max_key)
            return fail(out, req->id, GKV_EINVAL, "NOTIFY needs a key", rc);
        cl->waits.received++;
        gkv_cl_waits_notified(cl, req->key.p, req->key.len);
        gkv_cl_reply_count(out, req->id, 0);
        return GKV_ROUTE_DONE;
    }
    /* Fenced: our view may be out of date, so we neither answer for keys nor hold values out
     * (a job already running for a request finishes). */
    if (!t->job && !gkv_cluster_live(cl)) {
        /* BUSY: the sender retries for a while (we may just be taking our new incarnation). */
        cl->stats.fenced++;
        return fail(out, req->id, GKV_EBUSY,
                    "this node cannot confirm its own membership (etcd unreachable)", rc);
    }
    bool keyed = req->node_op != GKV_NODE_LIST;
    if (keyed && (!(req->has & GKV_HAS_KEY) || req->key.len > cl->max_key))
        return fail(out, req->id, GKV_EINVAL, "a NODE request needs a key", rc);
    switch (req->node_op) {
    case GKV_NODE_LOOKUP:
        return node_lookup(cl, req, from, out, rc);
    case GKV_NODE_RECORD:
        return node_record(cl, t, req, from, out, rc);
    case GKV_NODE_DELETE:
        return node_delete(cl, t, req, out, rc);
    case GKV_NODE_DROP: {
        int had = (req->flags & GKV_DROP_SUPERSEDED)
                      ? gkv_cl_unlink_quietly(cl, req->key.p, req->key.len, req->vversion)
                      : gkv_cl_unlink(cl, req->key.p, req->key.len, req->vversion);
        /* Requests here waiting for a newer value than ours ask the home again. */
        gkv_cl_waits_notified(cl, req->key.p, req->key.len);
        gkv_cl_reply_count(out, req->id, (uint64_t)had);
        return GKV_ROUTE_DONE;
    }
    case GKV_NODE_FETCH: {
        if (!req->vversion)
            return node_fetch_current(cl, t, req, from, out, rc);
        gkv_copy_rec_t *c = gkv_copy_find(&cl->rec, req->key.p, req->key.len);
        /* GPUKV_TRACE: o_fetch, an owner asked for a version (1: it holds it) */
        gkv_trace_key("o_fetch", req->key.p, req->key.len,
                      c && !c->replica && c->version == req->vversion);
        if (c && !c->replica && c->version == req->vversion)
            return GKV_ROUTE_AS_GET;
        if (c && (c->pending || c->version < req->vversion))
            return fail(out, req->id, GKV_EBUSY, "that version is being written here", rc);
        return fail(out, req->id, GKV_ENOTFOUND, "this node does not hold that version", rc);
    }
    case GKV_NODE_LIST:
        return node_list(cl, req, out, rc);
    case GKV_NODE_REGISTER:
        return node_register(cl, req, from, out, rc);
    case GKV_NODE_STAGE:
    case GKV_NODE_PUSH:
        return gkv_cl_node_stage(cl, t, req, from, out, rc);
    case GKV_NODE_REPLICA:
        if (strcmp(from->name, cl->node) || !req->vversion)
            return fail(out, req->id, GKV_EINVAL, "a replica comes from this node itself", rc);
        t->defer = true;
        t->replica_version = req->vversion;
        return GKV_ROUTE_LOCAL; /* received like a SET, then gkv_cluster_commit */
    default:
        return fail(out, req->id, GKV_EINVAL, "unknown NODE request", rc);
    }
}
