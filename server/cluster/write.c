/* write.c: a SET's value published once its home recorded it (gkv_cluster_commit, the
 * record job's end on the loop), a replica this node's own read fetched, and SEAL's record
 * (docs/cluster.md, "Writes"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_impl.h"
#include "commands.h"
#include "duration.h"
#include "error.h"
#include "log.h"

/* Publishes e (holder: gkv_store_publish's) whose copy record is written after it: its event
 * names version v (gkv_cluster_reports), which the record then takes. */
static int publish_at(gkv_cluster_t *cl, gkv_entry_t *e, gkv_entry_t **holder, uint64_t v)
{
    cl->store->now_ms = gkv_clock_ms();
    cl->publishing = v;
    int rc = gkv_store_publish(cl->store, e, 0, holder);
    cl->publishing = 0;
    return rc;
}

/* Finishes a SET's job on the loop: publish (or not) and write its reply. */
void gkv_cl_commit_done(cl_job_t *j)
{
    gkv_cluster_t *cl = j->cl;
    cl_key_t *k = &j->keys[0];
    gkv_copy_rec_t *c = gkv_copy_find(&cl->rec, k->key, k->klen);
    if (c && c->pending)
        c->pending--;
    int rc = j->status;
    /* Dropped by the home since it recorded this write, or a later write of ours was
     * published first: this one is history, not the value. */
    bool superseded = c && k->version &&
                      (k->version <= c->dropped_upto || (!c->replica && c->version > k->version));
    if (c && !c->pending)
        c->dropped_upto = 0;
    if (!rc && j->publish && !superseded) {
        rc = publish_at(cl, j->entry, NULL, k->version);
        if (!rc && (c || (c = gkv_copy_get(&cl->rec, k->key, k->klen)))) {
            gkv_copy_set(&cl->rec, c, k->version, false, k->owner /* the home's name */);
            gkv_cl_published(cl, k->key, k->klen, k->owner);
        }
        cl->stats.records++;
    }
    if (c && !c->pending && !c->version)
        gkv_copy_del(&cl->rec, c);
    if (j->t && j->publish) {
        if (rc) {
            gkv_wr_error(j->t->out, j->id, rc, j->msg[0] ? j->msg : NULL);
        } else {
            gkv_wr_ok(j->t->out, j->id);
            gkv_wr_end(j->t->out);
        }
    }
}

/* SEAL of a CREATE'd value: recorded at its home before it is published (a job), unless home
 * and owner are this node. */
int gkv_cl_route_seal(gkv_cluster_t *cl, gkv_route_ticket_t *t, const gkv_request_t *req,
                      gkv_leases_t *leases, gkv_wr_t *out, int *rc)
{
    gkv_lease_t *l = leases ? gkv_lease_find(leases, req->lease) : NULL;
    if (!l || !l->writable)
        return GKV_ROUTE_LOCAL; /* SEAL's own checks answer */
    size_t klen;
    const uint8_t *key = gkv_store_key(cl->store, l->entry, &klen);
    if (t->job) {
        cl_job_t *j = t->job;
        t->job = NULL;
        int status = j->status;
        uint64_t version = j->keys[0].version;
        char home[GKV_NODE_NAME_MAX + 1];
        snprintf(home, sizeof(home), "%s", j->keys[0].owner);
        gkv_copy_rec_t *c = gkv_copy_find(&cl->rec, key, klen);
        if (c && c->pending)
            c->pending--;
        if (status) {
            if (c && !c->pending && !c->version)
                gkv_copy_del(&cl->rec, c);
            *rc = status;
            gkv_wr_error(out, req->id, status, j->msg[0] ? j->msg : NULL);
            gkv_cl_job_free(j);
            return GKV_ROUTE_DONE;
        }
        gkv_cl_job_free(j);
        /* Recorded: any replica here goes, and SEAL publishes without NX/XX (decided). */
        if (c && c->replica)
            gkv_store_del(cl->store, key, klen);
        if (c || (c = gkv_copy_get(&cl->rec, key, klen))) {
            gkv_copy_set(&cl->rec, c, version, false, home);
            /* Published by SEAL right after this: a home that moved meanwhile learns it at
             * the next tick (gkv_cl_published's register_moved would find the old value). */
            const gkv_member_t *now = gkv_cluster_home(cl, key, klen);
            if (now && strcmp(now->name, home))
                cl->register_again = true;
        }
        cl->stats.records++;
        t->strip_nx_xx = true;
        return GKV_ROUTE_LOCAL;
    }
    const gkv_member_t *home = gkv_cluster_home(cl, key, klen);
    if (gkv_cluster_is_self(cl, home) && !gkv_cl_settling(cl)) {
        gkv_home_rec_t *h = gkv_home_find(&cl->rec, key, klen);
        if (!h || !h->owner[0] || (!h->busy && !strcmp(h->owner, cl->node))) {
            /* Recorded after it ran (gkv_cluster_after), at the version its event names. */
            cl->publishing = gkv_home_next_version(&cl->rec, h);
            return GKV_ROUTE_LOCAL;
        }
    }
    cl_job_t *j = gkv_cl_job_new(cl, t, JOB_RECORD);
    if (!j || gkv_cl_job_key(j, key, klen, home)) {
        gkv_cl_job_free(j);
        *rc = GKV_ENOMEM;
        gkv_wr_error(out, req->id, *rc, NULL);
        return GKV_ROUTE_DONE;
    }
    j->flags = l->flags | (unsigned)(req->flags & (GKV_SET_NX | GKV_SET_XX));
    j->keys[0].size = l->entry->size;
    j->id = req->id;
    gkv_copy_rec_t *c = gkv_copy_get(&cl->rec, key, klen);
    if (c)
        c->pending++;
    gkv_cl_submit(cl, t, j, false);
    return GKV_ROUTE_PARK;
}

/* A value of size bytes, homed and owned here: recorded as ours (h) at version v (reserved
 * for its event; 0: a new one), which our copy record c takes. */
static void record_here(gkv_cluster_t *cl, gkv_home_rec_t *h, gkv_copy_rec_t *c, uint64_t size,
                        uint64_t v)
{
    v = gkv_cl_record(cl, h, cl->node, gkv_cl_self_inc(cl), size, v);
    gkv_cl_waits_recorded(cl, h->key, h->klen, v); /* nodes waiting for it */
    gkv_copy_set(&cl->rec, c, v, false, cl->node);
}

void gkv_cluster_after(gkv_cluster_t *cl, const gkv_request_t *req, gkv_leases_t *leases,
                       int rc, const void *key, size_t klen)
{
    (void)leases;
    uint64_t v = cl->publishing; /* reserved by gkv_cl_route_seal */
    cl->publishing = 0;
    if (!cl->on || rc || req->op != GKV_OP_SEAL || !key)
        return;
    const gkv_member_t *home = gkv_cluster_home(cl, key, klen);
    if (!gkv_cluster_is_self(cl, home))
        return; /* recorded before it ran */
    gkv_home_rec_t *h = gkv_home_get(&cl->rec, key, klen);
    gkv_copy_rec_t *c = gkv_copy_get(&cl->rec, key, klen);
    gkv_entry_t *e = gkv_store_find(cl->store, key, klen);
    if (!h || !c || !e)
        return;
    record_here(cl, h, c, e->size, v);
}

int gkv_cluster_commit(gkv_cluster_t *cl, gkv_route_ticket_t *t, uint64_t id, gkv_entry_t *e,
                       unsigned flags, gkv_wr_t *out, int *rc, gkv_entry_t **holder)
{
    *holder = e;
    size_t klen;
    const uint8_t *key = gkv_store_key(cl->store, e, &klen);
    t->defer = false;
    *rc = 0;
    if (t->replica_version) {
        /* A replica this node's own read fetched: kept unless a value of this node's took the
         * key meanwhile. */
        uint64_t v = t->replica_version;
        t->replica_version = 0;
        gkv_cl_keep_replica(cl, e, key, klen, v, 0, holder);
        gkv_cl_reply_count(out, id, 0);
        return GKV_ROUTE_DONE;
    }
    const gkv_member_t *home = gkv_cluster_home(cl, key, klen);
    if (!home || !gkv_cluster_live(cl)) {
        *rc = GKV_EUNAVAILABLE;
        if (home)
            cl->stats.fenced++;
        gkv_wr_error(out, id, *rc,
                     home ? "this node cannot confirm its membership (etcd unreachable): fenced"
                          : "this node knows no members of its cluster");
        return GKV_ROUTE_DONE;
    }
    gkv_home_rec_t *hr = gkv_home_find(&cl->rec, key, klen);
    if (gkv_cluster_is_self(cl, home) && (hr || !gkv_cl_settling(cl))) {
        gkv_home_rec_t *h = hr;
        if (!h || !h->owner[0] || (!h->busy && !strcmp(h->owner, cl->node))) {
            /* Home and owner here: decided and published on the loop, no message. */
            bool exists = (flags & (GKV_SET_NX | GKV_SET_XX)) && h && h->owner[0] &&
                          gkv_store_find(cl->store, key, klen);
            if ((flags & GKV_SET_NX) && exists) {
                *rc = GKV_EEXISTS;
                gkv_wr_error(out, id, *rc, "key exists (NX)");
                return GKV_ROUTE_DONE;
            }
            if ((flags & GKV_SET_XX) && !exists) {
                *rc = GKV_ENOTFOUND;
                gkv_wr_error(out, id, *rc, "key does not exist (XX)");
                return GKV_ROUTE_DONE;
            }
            gkv_copy_rec_t *c = gkv_copy_get(&cl->rec, key, klen);
            if (!h)
                h = gkv_home_get(&cl->rec, key, klen);
            /* Its version is taken first, for its event; recorded once it is published (its
             * size now: publishing may move the value into the key's entry, e then holding the
             * old one). */
            uint64_t v = h ? gkv_home_next_version(&cl->rec, h) : 0, size = e->size;
            int prc = h && c ? publish_at(cl, e, holder, v) : GKV_ENOMEM;
            if (prc) {
                if (h && !h->owner[0])
                    gkv_home_del(&cl->rec, h);
                *rc = prc;
                gkv_wr_error(out, id, prc, NULL);
                return GKV_ROUTE_DONE;
            }
            record_here(cl, h, c, size, v);
            gkv_wr_ok(out, id);
            gkv_wr_end(out);
            return GKV_ROUTE_DONE;
        }
    }
    cl_job_t *j = gkv_cl_job_new(cl, t, JOB_RECORD);
    gkv_copy_rec_t *c = j ? gkv_copy_get(&cl->rec, key, klen) : NULL;
    if (!c || gkv_cl_job_key(j, key, klen, home)) {
        gkv_cl_job_free(j);
        *rc = GKV_ENOMEM;
        gkv_wr_error(out, id, *rc, NULL);
        return GKV_ROUTE_DONE;
    }
    c->pending++;
    gkv_store_ref(e);
    j->entry = e;
    j->id = id;
    j->flags = flags;
    j->publish = true;
    j->keys[0].size = e->size;
    t->out = out;
    gkv_cl_submit(cl, t, j, false);
    return GKV_ROUTE_PARK;
}
