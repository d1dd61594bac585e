/* job.c: what the cluster's loop-side files share: a job's making, keys and freeing and its
 * queueing, who is who (this node's incarnation, a member by name), replies, and dropping a
 * copy of ours. Calls nothing of route.c, node.c or write.c, so that they call down to it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_impl.h"
#include "duration.h"
#include "error.h"
#include "trace.h"

int64_t gkv_cl_self_inc(const gkv_cluster_t *cl)
{
    return cl->self >= 0 ? cl->members.m[cl->self].incarnation : 0;
}

const gkv_member_t *gkv_cl_member(const gkv_cluster_t *cl, const void *name, size_t len)
{
    for (size_t i = 0; i < cl->members.n; i++)
        if (strlen(cl->members.m[i].name) == len && !memcmp(cl->members.m[i].name, name, len))
            return &cl->members.m[i];
    return NULL;
}

const gkv_member_t *gkv_cl_job_member(const cl_job_t *j, const void *name, size_t len)
{
    for (size_t i = 0; i < j->nmembers; i++)
        if (strlen(j->members[i].name) == len && !memcmp(j->members[i].name, name, len))
            return &j->members[i];
    return NULL;
}

void gkv_cl_reply_count(gkv_wr_t *out, uint64_t id, uint64_t count)
{
    gkv_wr_ok(out, id);
    gkv_wr_uint(out, GKV_F_COUNT, count);
    gkv_wr_end(out);
}

int gkv_cl_unlink(gkv_cluster_t *cl, const void *key, size_t klen, uint64_t upto)
{
    gkv_copy_rec_t *c = gkv_copy_find(&cl->rec, key, klen);
    if (upto && c && !c->replica && c->version > upto)
        return 0; /* a newer value of ours, recorded after the one dropped */
    int had = gkv_store_del(cl->store, key, klen);
    if (c && !c->pending) {
        gkv_copy_del(&cl->rec, c);
    } else if (c) {
        gkv_copy_set(&cl->rec, c, 0, false, NULL);
        if (upto > c->dropped_upto)
            c->dropped_upto = upto;
    }
    return had;
}

int gkv_cl_unlink_quietly(gkv_cluster_t *cl, const void *key, size_t klen, uint64_t upto)
{
    cl->quiet = true;
    int had = gkv_cl_unlink(cl, key, klen, upto);
    cl->quiet = false;
    return had;
}

cl_job_t *gkv_cl_job_new(gkv_cluster_t *cl, gkv_route_ticket_t *t, int kind)
{
    cl_job_t *j = calloc(1, sizeof(*j));
    if (!j)
        return NULL;
    j->job.run = gkv_cl_job_run;
    j->job.done = gkv_cl_job_done;
    j->cl = cl;
    j->t = t;
    j->kind = kind;
    j->delim = -1;
    j->t_us = gkv_plane_now_us();
    if (kind == JOB_READ)
        gkv_trace("r_read", 0, 0);
    strcpy(j->self, cl->node);
    j->self_inc = gkv_cl_self_inc(cl);
    strcpy(j->self_addr, cl->self_addr);
    gkv_wr_init(&j->reply);
    if (cl->members.n && !(j->members = malloc(cl->members.n * sizeof(*j->members)))) {
        free(j);
        return NULL;
    }
    if (cl->members.n)
        memcpy(j->members, cl->members.m, cl->members.n * sizeof(*j->members));
    j->nmembers = cl->members.n;
    return j;
}

int gkv_cl_job_key(cl_job_t *j, const void *key, size_t klen, const gkv_member_t *home)
{
    if (!(j->nkeys & (j->nkeys - 1)) || !j->keys) { /* grow at powers of two */
        size_t cap = j->nkeys ? (size_t)j->nkeys * 2 : 1;
        cl_key_t *k = realloc(j->keys, cap * sizeof(*k));
        if (!k)
            return GKV_ENOMEM;
        j->keys = k;
    }
    cl_key_t *k = &j->keys[j->nkeys];
    memset(k, 0, sizeof(*k));
    if (!(k->key = malloc(klen ? klen : 1)))
        return GKV_ENOMEM;
    if (klen)
        memcpy(k->key, key, klen);
    k->klen = (uint32_t)klen;
    if (home)
        strcpy(k->home_addr, home->advertise);
    j->nkeys++;
    return 0;
}

void gkv_cl_job_free(cl_job_t *j)
{
    if (!j)
        return;
    if (j->head)
        gkv_cl_pull_drop(j->cl, j->head);
    for (uint32_t i = 0; i < j->nkeys; i++) {
        free(j->keys[i].key);
        free(j->keys[i].bytes);
        free(j->keys[i].meta);
        if (j->keys[i].mark) {
            gkv_backend_t *be = j->cl->plane.arena[j->keys[i].dev].be;
            be->ops->mark_free(be, j->keys[i].mark);
        }
        if (j->keys[i].entry)
            gkv_store_unref(j->cl->store, j->keys[i].entry);
    }
    free(j->keys);
    free(j->members);
    free(j->rhdr);
    free(j->prefix);
    free(j->cursor);
    if (j->entry)
        gkv_store_unref(j->cl->store, j->entry);
    gkv_wr_fini(&j->reply);
    free(j);
}

void gkv_cl_submit(gkv_cluster_t *cl, gkv_route_ticket_t *t, cl_job_t *j, bool nested)
{
    if (t)
        t->job = j;
    gkv_workers_submit(nested ? &cl->nested : &cl->origin, &j->job);
}

/* The members changed lately: a key this node homes but has no record of may be on its way
 * here (its owner re-registers it), so only a request to ourselves (which answers BUSY until
 * then) can tell. */
bool gkv_cl_settling(const gkv_cluster_t *cl)
{
    return uv_now(cl->loop) < cl->settle_until;
}

bool gkv_cl_owned_here(gkv_cluster_t *cl, const void *key, size_t klen)
{
    gkv_copy_rec_t *c = gkv_copy_find(&cl->rec, key, klen);
    return c && !c->replica && c->version;
}

uint64_t gkv_cl_replica_version(gkv_cluster_t *cl, const void *key, size_t klen, uint64_t *size)
{
    if (size)
        *size = 0;
    gkv_copy_rec_t *c = gkv_copy_find(&cl->rec, key, klen);
    if (!c || !c->replica || !c->version)
        return 0;
    gkv_entry_t *e = gkv_store_find(cl->store, key, klen);
    if (!e) { /* its bytes went (evicted, flushed) */
        gkv_cl_unlink(cl, key, klen, 0);
        return 0;
    }
    if (size)
        *size = e->size;
    return c->version;
}

bool gkv_cl_keep_replica(gkv_cluster_t *cl, gkv_entry_t *e, const void *key, size_t klen,
                         uint64_t v, unsigned flags, gkv_entry_t **holder)
{
    gkv_copy_rec_t *c = gkv_copy_get(&cl->rec, key, klen);
    if (!c || c->pending || (!c->replica && c->version))
        return false;
    cl->store->now_ms = gkv_clock_ms();
    cl->quiet = true; /* a replica: no event (gkv_cluster_reports) */
    uint64_t size = e->size; /* publishing may move the value into the key's entry */
    int rc = gkv_store_publish(cl->store, e, flags, holder);
    cl->quiet = false;
    if (rc)
        return false;
    gkv_copy_set(&cl->rec, c, v, true, NULL);
    cl->stats.bytes_pulled += size;
    return true;
}

bool gkv_cl_reclaim(void *arg, unsigned dev)
{
    gkv_cluster_t *cl = arg;
    unsigned looked = 0;
    gkv_copy_rec_t *next;
    for (gkv_copy_rec_t *c = cl->rec.oldest; c && looked++ < 256; c = next) {
        next = c->rnext;
        gkv_entry_t *e = gkv_store_find(cl->store, c->key, c->klen);
        if (e && (e->dev != dev || e->refs != 1 || !e->size))
            continue; /* elsewhere, being read or sent, or holding no memory */
        gkv_cl_unlink(cl, c->key, c->klen, 0);
        if (e) {
            cl->stats.replicas_reclaimed++;
            return true;
        }
    }
    return false;
}

uint64_t gkv_cl_record(gkv_cluster_t *cl, gkv_home_rec_t *h, const char *owner, int64_t inc,
                       uint64_t size, uint64_t v)
{
    h->version = v > h->version ? v : gkv_home_next_version(&cl->rec, h);
    snprintf(h->owner, sizeof(h->owner), "%s", owner);
    h->owner_inc = inc;
    h->size = size;
    h->busy = false;
    cl->stats.records++;
    return h->version;
}
