/* waits.c: GET and MAP with wait across a cluster (docs/handoff.md, "Waits across a
 * cluster"). A key's home notes which nodes wait for a key it has no record of (their LOOKUP
 * said NOTFOUND) and notifies them when the key is recorded; a node that is notified (or that
 * records the key itself, as its home) wakes its own waiters of the key and remembers the key
 * for a while, for a request that asked before the notification but parks after it. On the
 * loop; NOTIFY's sends run on the nested pool. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_impl.h"
#include "log.h"
#include "placement.h"

/* One node waiting for a key. */
typedef struct {
    char node[GKV_NODE_NAME_MAX + 1];
    int64_t inc;
    uint64_t until; /* uv_now ms */
} waiter_t;

/* The nodes waiting for one key. */
struct gkv_cl_interest {
    UT_hash_handle hh;
    waiter_t *w;
    uint32_t n, cap;
    uint32_t klen;
    uint8_t key[]; /* klen bytes */
};

/* w's member, while it is still one at that incarnation and its wait has not expired; else
 * NULL. */
static const gkv_member_t *still_waiting(gkv_cluster_t *cl, const waiter_t *w, uint64_t now)
{
    const gkv_member_t *m = gkv_cl_member(cl, w->node, strlen(w->node));
    return w->until >= now && m && m->incarnation == w->inc ? m : NULL;
}

static void drop_key(gkv_cl_waits_t *ws, gkv_cl_interest_t *in)
{
    ws->n -= in->n;
    HASH_DEL(ws->keys, in);
    free(in->w);
    free(in);
}

void gkv_cl_waits_note(gkv_cluster_t *cl, const void *key, size_t klen, const gkv_member_t *from,
                       uint64_t wait_ms)
{
    gkv_cl_waits_t *ws = &cl->waits;
    if (wait_ms > GKV_MAX_WAIT_MS)
        wait_ms = GKV_MAX_WAIT_MS;
    uint64_t until = uv_now(cl->loop) + wait_ms;
    gkv_cl_interest_t *in = NULL;
    HASH_FIND(hh, ws->keys, key, klen, in);
    for (uint32_t i = 0; in && i < in->n; i++) {
        waiter_t *w = &in->w[i];
        if (!strcmp(w->node, from->name)) { /* one per node: the latest expiry */
            w->inc = from->incarnation;
            if (until > w->until)
                w->until = until;
            return;
        }
    }
    if (ws->n >= GKV_CL_INTERESTS_MAX) {
        ws->full++; /* the reader's re-check serves it */
        return;
    }
    if (!in) {
        if (!(in = calloc(1, sizeof(*in) + klen)))
            return;
        memcpy(in->key, key, klen);
        in->klen = (uint32_t)klen;
        HASH_ADD(hh, ws->keys, key, in->klen, in);
    }
    if (in->n == in->cap) {
        uint32_t cap = in->cap ? in->cap * 2 : 2;
        waiter_t *more = realloc(in->w, cap * sizeof(*more));
        if (!more) {
            if (!in->n)
                drop_key(ws, in);
            return;
        }
        in->w = more;
        in->cap = cap;
    }
    waiter_t *w = &in->w[in->n++];
    snprintf(w->node, sizeof(w->node), "%s", from->name);
    w->inc = from->incarnation;
    w->until = until;
    ws->n++;
}

void gkv_cl_waits_recorded(gkv_cluster_t *cl, const void *key, size_t klen, uint64_t version)
{
    gkv_cl_waits_t *ws = &cl->waits;
    gkv_cl_waits_notified(cl, key, klen); /* this node's own waiters */
    gkv_cl_interest_t *in = NULL;
    HASH_FIND(hh, ws->keys, key, klen, in);
    if (!in)
        return;
    uint64_t now = uv_now(cl->loop);
    cl_job_t *j = NULL;
    for (uint32_t i = 0; i < in->n; i++) {
        const gkv_member_t *m = still_waiting(cl, &in->w[i], now);
        if (!m || gkv_cluster_is_self(cl, m))
            continue;
        if (!j && !(j = gkv_cl_job_new(cl, NULL, JOB_NOTIFY)))
            break;
        if (gkv_cl_job_key(j, key, klen, m))
            break;
        j->keys[j->nkeys - 1].version = version;
        ws->sent++;
    }
    drop_key(ws, in); /* notified once: a reader that still waits asks again */
    if (j && j->nkeys)
        gkv_workers_submit(&cl->nested, &j->job);
    else
        gkv_cl_job_free(j);
}

void gkv_cl_waits_notified(gkv_cluster_t *cl, const void *key, size_t klen)
{
    gkv_cl_waits_t *ws = &cl->waits;
    ws->seq++;
    unsigned i = (unsigned)(ws->seq % GKV_CL_NOTIFIED_RECENT);
    ws->recent_hash[i] = gkv_place_key_hash(key, klen);
    ws->recent_seq[i] = ws->seq;
    if (cl->on_recorded)
        cl->on_recorded(cl->arg, key, klen);
}

bool gkv_cluster_wait_missed(const gkv_cluster_t *cl, const gkv_route_ticket_t *t,
                             const void *key, size_t klen)
{
    const gkv_cl_waits_t *ws = &cl->waits;
    if (!cl->on || ws->seq == t->wait_seq)
        return false;
    if (ws->seq - t->wait_seq >= GKV_CL_NOTIFIED_RECENT)
        return true; /* more than the ring remembers: maybe */
    uint64_t h = gkv_place_key_hash(key, klen);
    for (uint64_t s = t->wait_seq + 1; s <= ws->seq; s++) {
        unsigned i = (unsigned)(s % GKV_CL_NOTIFIED_RECENT);
        if (ws->recent_seq[i] == s && ws->recent_hash[i] == h)
            return true;
    }
    return false;
}

void gkv_cl_waits_expire(gkv_cluster_t *cl)
{
    gkv_cl_waits_t *ws = &cl->waits;
    uint64_t now = uv_now(cl->loop);
    gkv_cl_interest_t *in, *tmp;
    HASH_ITER(hh, ws->keys, in, tmp)
    {
        uint32_t kept = 0;
        for (uint32_t i = 0; i < in->n; i++)
            if (still_waiting(cl, &in->w[i], now))
                in->w[kept++] = in->w[i];
        ws->n -= in->n - kept;
        in->n = kept;
        if (!kept)
            drop_key(ws, in);
    }
}

void gkv_cl_waits_fini(gkv_cluster_t *cl)
{
    gkv_cl_interest_t *in, *tmp;
    HASH_ITER(hh, cl->waits.keys, in, tmp)
    drop_key(&cl->waits, in);
}
