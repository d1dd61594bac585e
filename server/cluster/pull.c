/* pull.c: remote reads through NIXL (docs/cluster.md, "Data plane"); the reader's chunk pipeline
 * of a STAGE pull is pull_chunks.c. Nodes tell each other
 * their plane when they meet (PLANE: agent metadata and arenas; the receiver probes a NIXL
 * write back, so each node learns whether reads from the other can take NIXL). A READ whose
 * owner is reachable through NIXL and whose value is larger than a direct answer comes back to
 * the loop (CL_PULL), which gives the value its new memory; a JOB_PULL then asks the owner for
 * the value chunk by chunk (STAGE), several chunks in flight on connections of their own: the
 * owner copies each chunk into a slot of its arena and writes it into the reader's slot, and
 * the reader copies it into the new memory. The loop then keeps it as the replica. A pull that
 * fails for any other reason than the value moving on is read over TCP instead, and counted. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <time.h>

#include "cluster_impl.h"
#include "commands.h"
#include "error.h"
#include "log.h"
#include "trace.h"

/* ---- PLANE ---------------------------------------------------------------------------- */

static void run_plane(gkv_job_t *job);
static void run_pull(gkv_job_t *job);

void gkv_cl_plane_members(gkv_cluster_t *cl)
{
    size_t n = cl->members.n;
    const char **names = malloc((n ? n : 1) * sizeof(*names));
    int64_t *incs = malloc((n ? n : 1) * sizeof(*incs));
    if (!names || !incs) {
        free(names);
        free(incs);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        names[i] = cl->members.m[i].name;
        incs[i] = cl->members.m[i].incarnation;
    }
    gkv_plane_keep_only(&cl->plane, names, incs, n);
    free(names);
    free(incs);
    if (!cl->plane.on)
        return;
    for (size_t i = 0; i < n; i++) {
        const gkv_member_t *m = &cl->members.m[i];
        if ((long)i == cl->self || !gkv_plane_ask(&cl->plane, m->name, m->incarnation))
            continue;
        cl_job_t *j = gkv_cl_job_new(cl, NULL, JOB_PLANE);
        if (!j || gkv_cl_job_key(j, m->name, strlen(m->name), m)) {
            gkv_cl_job_free(j);
            continue;
        }
        snprintf(j->peer, sizeof(j->peer), "%s", m->name);
        j->peer_inc = m->incarnation;
        j->job.run = run_plane;
        gkv_workers_submit(&cl->stage, &j->job); /* not behind (or before) clients' reads */
    }
}

/* Our PLANE to keys[0] (its name is peer): its answer says whether NIXL reaches us from it. */
static void run_plane(gkv_job_t *job)
{
    cl_job_t *j = (cl_job_t *)job;
    gkv_plane_t *p = &j->cl->plane;
    void *md = NULL;
    size_t md_len = 0, alen = 0;
    uint8_t arenas[GKV_PLANE_ARENA_REC * GKV_MAX_DEVICES];
    if (gkv_plane_hello(p, &md, &md_len, arenas, &alen)) {
        gkv_plane_set_state(p, j->peer, j->peer_inc, false, "this node's NIXL agent has no metadata");
        return;
    }
    gkv_response_t r;
    uint8_t *rhdr = NULL; /* r's own copy: the connection goes back before its message is read */
    size_t rhdr_cap = 0;
    int rc;
    /* A member that joined a moment ago may not list us yet (UNAVAILABLE): a few tries. */
    for (int tries = 0;; tries++) {
        gkv_peer_conn_t *c;
        rc = gkv_peer_take(&j->cl->peers, j->keys[0].home_addr, &c);
        if (!rc) {
            gkv_peer_begin(c, 0, GKV_NODE_PLANE, j->self, (uint64_t)j->self_inc);
            gkv_wr_bin(&c->wr, GKV_F_PLANE, md, md_len);
            gkv_wr_bin(&c->wr, GKV_F_ARENAS, arenas, alen);
            rc = gkv_peer_call(c, NULL, 0, &r);
            if (!rc && r.payload_len)
                rc = GKV_EPROTO;
            if (!rc)
                rc = gkv_peer_reply_keep(c, &r, &rhdr, &rhdr_cap);
            gkv_peer_give(&j->cl->peers, c, rc == 0);
        }
        /* Only a member that answered may be retried (it may not list us yet); one that did
         * not answer is TCP until the members change again. */
        bool later = !rc && (r.status == GKV_EUNAVAILABLE || r.status == GKV_EBUSY);
        if (!later || tries == 10)
            break;
        struct timespec ts = {0, 200 * 1000000L};
        nanosleep(&ts, NULL);
    }
    free(md);
    char why[224];
    if (rc) {
        snprintf(why, sizeof(why), "it did not answer this node's PLANE");
    } else if (r.status || !r.count) {
        snprintf(why, sizeof(why), "%.*s", (int)r.message.len, (const char *)r.message.p);
        if (!why[0])
            snprintf(why, sizeof(why), "its NIXL could not reach this node (%s)",
                     gkv_strerror((int)r.status));
    }
    bool nixl = !rc && !r.status && r.count;
    free(rhdr);
    gkv_plane_set_state(p, j->peer, j->peer_inc, nixl, why);
    /* Its reads come in bursts of pulls, each on connections of its own: some ready ahead. */
    if (nixl)
        gkv_peer_want(&j->cl->peers, j->keys[0].home_addr);
}

/* A member's PLANE (md in prefix, arenas in cursor): load, probe. */
static void run_plane_in(gkv_job_t *job)
{
    cl_job_t *j = (cl_job_t *)job;
    j->status = gkv_plane_take_hello(&j->cl->plane, j->peer, j->peer_inc, j->prefix,
                                     j->prefix_len, j->cursor, j->cursor_len, j->msg,
                                     sizeof(j->msg));
}

int gkv_cl_node_plane(gkv_cluster_t *cl, gkv_route_ticket_t *t, const gkv_request_t *req,
                      const gkv_member_t *from, gkv_wr_t *out, int *rc)
{
    *rc = 0;
    if (t->job) { /* the probe ran */
        cl_job_t *j = t->job;
        t->job = NULL;
        gkv_wr_ok(out, req->id);
        gkv_wr_uint(out, GKV_F_COUNT, j->status == 0);
        if (j->status)
            gkv_wr_str(out, GKV_F_MESSAGE, j->msg);
        gkv_wr_end(out);
        gkv_cl_job_free(j);
        return GKV_ROUTE_DONE;
    }
    if (!cl->plane.on) {
        gkv_wr_ok(out, req->id);
        gkv_wr_uint(out, GKV_F_COUNT, 0);
        gkv_wr_str(out, GKV_F_MESSAGE, cl->plane.why);
        gkv_wr_end(out);
        return GKV_ROUTE_DONE;
    }
    cl_job_t *j = gkv_cl_job_new(cl, t, JOB_PLANE_IN);
    if (j) {
        j->job.run = run_plane_in;
        j->prefix = gkv_cl_dup_bytes(req->plane.p, req->plane.len);
        j->prefix_len = (uint32_t)req->plane.len;
        j->cursor = gkv_cl_dup_bytes(req->arenas.p, req->arenas.len);
        j->cursor_len = (uint32_t)req->arenas.len;
        snprintf(j->peer, sizeof(j->peer), "%s", from->name);
        j->peer_inc = from->incarnation;
    }
    if (!j || !j->prefix || !j->cursor) {
        gkv_cl_job_free(j);
        *rc = GKV_ENOMEM;
        gkv_wr_error(out, req->id, GKV_ENOMEM, NULL);
        return GKV_ROUTE_DONE;
    }
    gkv_cl_submit(cl, t, j, true);
    return GKV_ROUTE_PARK;
}

/* ---- STAGE (the owner's side) ---------------------------------------------------------- */

static void run_stage(gkv_job_t *job)
{
    cl_job_t *j = (cl_job_t *)job;
    gkv_plane_t *p = &j->cl->plane;
    p->stage_queue_us += gkv_plane_now_us() - j->t_us;
    gkv_trace("o_run", j->offset, 0);
    gkv_plane_remote_t dst;
    char agent[128];
    j->status = gkv_plane_dest(p, j->peer, j->peer_inc, j->arena_idx, j->arena_off, j->length,
                               &dst, agent, sizeof(agent));
    if (j->status) {
        snprintf(j->msg, sizeof(j->msg), "%s",
                 j->status == GKV_EINVAL ? "the chunk does not fit the reader's arena"
                                         : "the reader's PLANE has not reached this node");
        return;
    }
    j->status = gkv_plane_send(p, j->entry->dev, j->entry->mem, j->offset, j->length, agent, &dst,
                               j->arena_off, j->cl->peers.timeout_ms, j->msg, sizeof(j->msg));
    j->t_us = gkv_plane_now_us();
}

/* A PUSH: the whole value into the reader's slots (cursor: their offsets). */
static void run_push(gkv_job_t *job)
{
    cl_job_t *j = (cl_job_t *)job;
    gkv_plane_t *p = &j->cl->plane;
    p->stage_queue_us += gkv_plane_now_us() - j->t_us;
    uint32_t nslots = j->cursor_len / 8;
    uint64_t offs[GKV_PLANE_DEPTH_MAX * 2];
    gkv_plane_remote_t dst;
    char agent[128];
    for (uint32_t i = 0; i < nslots; i++) {
        offs[i] = gkv_le64_get(j->cursor + 8 * i);
        j->status = gkv_plane_dest(p, j->peer, j->peer_inc, j->arena_idx, offs[i], j->length,
                                   &dst, agent, sizeof(agent));
        if (j->status) {
            snprintf(j->msg, sizeof(j->msg), "%s",
                     j->status == GKV_EINVAL ? "a slot does not fit the reader's arena"
                                             : "the reader's PLANE has not reached this node");
            return;
        }
    }
    j->status = gkv_plane_push(p, j->entry->dev, j->entry->mem, j->entry->size, j->length, agent,
                               &dst, offs, nslots, j->xfer, j->cl->peers.timeout_ms, j->msg,
                               sizeof(j->msg));
    j->t_us = gkv_plane_now_us();
}

/* STAGE (one chunk) and PUSH (the whole value) at the owner: checked on the loop, sent by a
 * worker of the stage pool, answered when it is done. */
int gkv_cl_node_stage(gkv_cluster_t *cl, gkv_route_ticket_t *t, const gkv_request_t *req,
                      const gkv_member_t *from, gkv_wr_t *out, int *rc)
{
    bool push = req->node_op == GKV_NODE_PUSH;
    if (t->job) { /* sent (or not) */
        cl_job_t *j = t->job;
        t->job = NULL;
        if (j->t_us)
            cl->plane.stage_reply_us += gkv_plane_now_us() - j->t_us;
        gkv_trace("o_reply", j->offset, 0);
        *rc = j->status;
        if (j->status) {
            gkv_wr_error(out, req->id, j->status, j->msg[0] ? j->msg : NULL);
        } else {
            gkv_wr_ok(out, req->id);
            gkv_wr_uint(out, GKV_F_SIZE, j->entry->size);
            if (!push)
                gkv_wr_uint(out, GKV_F_VVERSION, j->staged);
            uint32_t ml = 0;
            const uint8_t *meta = gkv_entry_meta(j->entry, &ml);
            if (j->offset == 0 && ml)
                gkv_wr_bin(out, GKV_F_META, meta, ml);
            gkv_wr_end(out);
        }
        gkv_cl_job_free(j);
        return GKV_ROUTE_DONE;
    }
    const char *why = NULL;
    int code = 0;
    /* A guess (vversion 0): whatever version this node owns now, unless the reader holds it
     * already (have); its chunk ends at the value's end. */
    bool guess = !push && !req->vversion;
    gkv_copy_rec_t *c = gkv_copy_find(&cl->rec, req->key.p, req->key.len);
    gkv_entry_t *e = gkv_store_find(cl->store, req->key.p, req->key.len);
    int up = 0;
    if (e && gkv_store_in_tier(e) && cl->plane.on) /* the arena copies from a GPU's memory */
        e = gkv_store_promote(cl->store, e, &up);
    if (!cl->plane.on) {
        code = GKV_ENOTSUP;
        why = cl->plane.why;
    } else if (up) {
        code = up; /* the reader reads it over TCP */
        why = "the value is in a tier below the GPUs and none here could make room for it";
    } else if (c && (c->pending || c->version < req->vversion)) {
        code = GKV_EBUSY;
        why = "that version is being written here";
    } else if (!c || c->replica || !c->version || !e || !e->size ||
               (guess ? req->have == c->version : c->version != req->vversion)) {
        code = GKV_ENOTFOUND;
        why = guess ? "this node owns no other version" : "this node does not hold that version";
    } else if (push ? !req->length || !req->slots.len || req->slots.len % 8 ||
                          req->slots.len / 8 > GKV_PLANE_DEPTH_MAX * 2
                    : !(req->has & GKV_HAS_OFFSET) || !(req->has & GKV_HAS_LENGTH) ||
                          !req->length || req->offset >= e->size ||
                          (!guess && req->length > e->size - req->offset)) {
        code = GKV_ERANGE;
        why = push ? "a PUSH names a chunk size and 1 to 64 slots"
                   : "a STAGE names a chunk inside the value";
    }
    if (code) {
        *rc = code;
        gkv_wr_error(out, req->id, code, why);
        return GKV_ROUTE_DONE;
    }
    cl_job_t *j = gkv_cl_job_new(cl, t, JOB_STAGE);
    if (j && push && !(j->cursor = gkv_cl_dup_bytes(req->slots.p, req->slots.len))) {
        gkv_cl_job_free(j);
        j = NULL;
    }
    if (!j) {
        *rc = GKV_ENOMEM;
        gkv_wr_error(out, req->id, GKV_ENOMEM, NULL);
        return GKV_ROUTE_DONE;
    }
    j->job.run = push ? run_push : run_stage;
    j->cursor_len = (uint32_t)req->slots.len;
    j->xfer = req->xfer;
    j->t_us = gkv_plane_now_us();
    gkv_store_ref(e);
    j->entry = e;
    j->offset = push ? 0 : req->offset;
    j->length = req->length;
    if (guess && j->length > e->size - j->offset)
        j->length = e->size - j->offset;
    j->staged = c->version;
    j->arena_off = req->arena_offset;
    j->arena_idx = (req->has & GKV_HAS_GPU) ? (unsigned)req->gpu : 0;
    snprintf(j->peer, sizeof(j->peer), "%s", from->name);
    j->peer_inc = from->incarnation;
    t->job = j;
    gkv_trace("o_in", j->offset, 0);
    if (cl->before_copy) /* a SET answered just now may have its last bytes in a batch yet */
        cl->before_copy(cl->arg, e->dev);
    gkv_workers_submit(&cl->stage, &j->job);
    return GKV_ROUTE_PARK;
}

/* ---- PULL (the reader's side) ---------------------------------------------------------- */

bool gkv_cl_pull_start(gkv_cluster_t *cl, gkv_route_ticket_t *t, cl_job_t *j)
{
    bool any = false;
    for (uint32_t i = 0; i < j->nkeys; i++) {
        cl_key_t *k = &j->keys[i];
        if (k->status != CL_PULL)
            continue;
        unsigned dev = gkv_store_place(cl->store, k->key, k->klen, k->size);
        gkv_entry_t *e = NULL;
        gkv_trace("r_alloc", k->size, 0);
        if (dev >= cl->plane.narenas ||
            gkv_store_entry_new(cl->store, dev, k->key, k->klen, k->size, NULL, 0,
                                GKV_LANE_SHARED, &e)) {
            k->status = CL_AGAIN; /* over TCP next time: it allocates as it receives */
            j->no_nixl = true;
            continue;
        }
        k->entry = e;
        k->dev = dev;
        k->mem = e->mem;
        /* A MAP's client may import the memory now, while the pull fills it; memory that may
         * still show an earlier value's bytes (new to the pool) is cleared first, queued now on
         * the shared lane (the pull's copies come after it), and offered once that ran. */
        int early = j->nkeys == 1 && t->early ? t->early(t->conn, e, false) : -1;
        gkv_trace("r_offered", k->size, (uint64_t)early); /* GPUKV_TRACE: memory, then export */
        gkv_backend_t *be = cl->plane.arena[dev].be;
        k->early = early == 1;
        k->clearing = early == 0 && be->ops->shared_wait && gkv_store_clear(cl->store, e) == 0;
        j->early = k->clearing ? t->early : NULL;
        /* The pull's copies into the memory, and its wait for the clear, come after what the
         * lane holds now, not after what the loop queues later (other values' clears). */
        if (be->ops->shared_mark && be->ops->shared_mark(be, &k->mark))
            k->mark = NULL;
        any = true;
    }
    if (!any)
        return false;
    j->kind = JOB_PULL;
    j->pull_us = gkv_plane_now_us();
    if (j->nkeys == 1 && t->tee.v) {
        j->tee = t->tee;
        j->tee_cap = t->tee_cap;
        j->tee_dev = t->tee_dev;
    }
    gkv_trace("r_queued", 0, 0);
    j->job.run = run_pull;
    j->finished = false;
    j->t = t;
    /* A pull holding slots already (its head start) runs where no pull waits for slots: on
     * origin it could queue behind pulls waiting for those very slots until they time out. */
    j->pool = j->head ? &cl->pulls : &cl->origin;
    t->job = j;
    gkv_workers_submit(j->pool, &j->job);
    return true;
}

/* The owner answered early (an error) when its connection has something to read. */
static bool answered(void *arg)
{
    struct pollfd pf = {.fd = ((gkv_peer_conn_t *)arg)->fd, .events = POLLIN};
    return poll(&pf, 1, 0) > 0;
}

/* k's value through NIXL into k->mem, the owner pushing it (PUSH): chunks land in our slots
 * and are announced by NIXL notifications; each one copied out is announced back. Returns 0,
 * CL_AGAIN (the owner does not hold that version now), or another code (the caller falls back
 * to TCP). */
static int pull_pushed(cl_job_t *j, cl_key_t *k, const gkv_member_t *owner)
{
    gkv_plane_t *p = &j->cl->plane;
    gkv_plane_arena_t *a = &p->arena[k->dev];
    uint64_t chunk = gkv_plane_chunk(p, owner->name, k->dev);
    uint64_t n = (k->size + chunk - 1) / chunk;
    uint32_t slots[GKV_PLANE_DEPTH_MAX * 2];
    int timeout = j->cl->peers.timeout_ms;
    uint32_t want = n < 2 * p->depth ? (uint32_t)n : 2 * p->depth;
    uint32_t nslots = gkv_slots_take(&a->slots, want, slots, timeout);
    char agent[128];
    gkv_plane_remote_t unused;
    if (!nslots) {
        snprintf(j->msg, sizeof(j->msg), "no room in this node's transfer arena in time");
        return GKV_EUNAVAILABLE;
    }
    /* Its agent: loaded here from its PLANE (our notifications go to it). */
    int rc = gkv_plane_dest(p, owner->name, owner->incarnation, 0, 0, 1, &unused, agent,
                            sizeof(agent));
    uint64_t id = gkv_plane_new_id(p);
    gkv_plane_box_t *b = rc ? NULL : gkv_plane_box_open(p, id, n);
    gkv_peer_conn_t *c = NULL;
    if (!rc && !b)
        rc = GKV_ENOMEM;
    if (!rc && gkv_peer_take(&j->cl->peers, owner->advertise, &c))
        rc = GKV_EUNAVAILABLE;
    bool sent = false;
    if (!rc) {
        uint8_t offs[GKV_PLANE_DEPTH_MAX * 2 * 8];
        for (uint32_t i = 0; i < nslots; i++)
            gkv_le64_put(offs + 8 * i, gkv_plane_slot_off(a, slots[i]));
        gkv_peer_begin(c, 0, GKV_NODE_PUSH, j->self, (uint64_t)j->self_inc);
        gkv_wr_bin(&c->wr, GKV_F_KEY, k->key, k->klen);
        gkv_wr_uint(&c->wr, GKV_F_VVERSION, k->version);
        gkv_wr_uint(&c->wr, GKV_F_LENGTH, chunk);
        gkv_wr_bin(&c->wr, GKV_F_SLOTS, offs, (size_t)nslots * 8);
        gkv_wr_uint(&c->wr, GKV_F_XFER, id);
        gkv_wr_uint(&c->wr, GKV_F_GPU, k->dev);
        rc = gkv_peer_send(c);
        sent = rc == 0;
    }
    if (sent)
        gkv_cl_offer_cleared(j, k, a->be);
    /* The owner answers once every chunk is written (its notifications may come after the
     * answer), or at once on an error. */
    gkv_response_t r;
    bool replied = false, ok = false, retire = false;
    for (uint64_t i = 0; i < n && !rc; i++) {
        uint64_t t0 = gkv_plane_now_us();
        rc = gkv_plane_wait_landed(p, b, i, timeout, replied ? NULL : answered, c);
        if (rc && !replied && answered(c)) {
            replied = true;
            ok = gkv_peer_recv(c, &r) == 0 && !r.payload_len;
            if (!ok)
                rc = GKV_EUNAVAILABLE; /* the owner is gone: it writes nothing more */
            else if (r.status)
                rc = r.status == GKV_ENOTFOUND ? CL_AGAIN : (int)r.status;
            else /* all written: the notifications are on their way */
                rc = gkv_plane_wait_landed(p, b, i, timeout, NULL, NULL);
        }
        uint64_t t1 = gkv_plane_now_us();
        p->pull_wait_us += t1 - t0;
        if (rc)
            break;
        uint64_t off = i * chunk, len = k->size - off < chunk ? k->size - off : chunk;
        if (gkv_cl_land(j, k, a->be, off, gkv_slot_addr(&a->slots, slots[i % nslots]),
                        (size_t)len)) {
            rc = GKV_EIO;
            break;
        }
        p->pull_copy_us += gkv_plane_now_us() - t1;
        if (i + nslots < n && gkv_plane_freed(p, agent, id, i)) {
            rc = GKV_EIO;
            break;
        }
    }
    /* Not answered yet: after the last chunk, or after a failure here (the owner stops at the
     * timeout of its wait for a slot). One that stayed silent until our timeout may still
     * write: our slots are then retired; one whose connection broke (it died) writes nothing. */
    if (sent && !replied) {
        ok = gkv_peer_recv(c, &r) == 0 && !r.payload_len;
        if (!ok && c->timed_out)
            retire = true;
        if (!ok && !rc)
            rc = GKV_EUNAVAILABLE;
        else if (ok && r.status && !rc)
            rc = r.status == GKV_ENOTFOUND ? CL_AGAIN : (int)r.status;
    }
    if (ok && !rc)
        gkv_cl_keep_meta(k, &r);
    if (ok && r.message.len && rc)
        snprintf(j->msg, sizeof(j->msg), "%.*s", (int)r.message.len, (const char *)r.message.p);
    if (c)
        gkv_peer_give(&j->cl->peers, c, ok);
    gkv_plane_box_close(p, b);
    gkv_slots_give(&a->slots, slots, nslots, retire);
    return rc;
}

static void run_pull(gkv_job_t *job)
{
    cl_job_t *j = (cl_job_t *)job;
    gkv_plane_t *p = &j->cl->plane;
    p->pull_queue_us += gkv_plane_now_us() - j->pull_us;
    for (uint32_t i = 0; i < j->nkeys; i++) {
        cl_key_t *k = &j->keys[i];
        if (!k->entry || k->status != CL_PULL)
            continue;
        const gkv_member_t *owner = gkv_cl_job_member(j, k->owner, strlen(k->owner));
        if (!owner) {
            k->status = CL_AGAIN;
            continue;
        }
        uint64_t t0 = gkv_plane_now_us();
        gkv_trace("r_pull", k->size, 0);
        int rc = p->push ? pull_pushed(j, k, owner) : gkv_cl_pull_chunks(j, k, owner);
        p->pull_us += gkv_plane_now_us() - t0;
        gkv_trace("r_pulled", k->size, (uint64_t)rc);
        if (!rc) {
            k->status = 0;
            k->pulled = true;
            p->reads++;
            p->read_bytes += k->size;
            continue;
        }
        if (rc == CL_AGAIN) {
            k->status = CL_AGAIN;
            continue;
        }
        /* Any other failure: this request reads it over TCP. */
        p->fallbacks++;
        GKV_DEBUG("data plane: a pull from %s failed (%s): over TCP", owner->name,
                  j->msg[0] ? j->msg : gkv_strerror(rc));
        j->msg[0] = 0;
        k->status = gkv_cl_fetch_tcp(j, k, owner);
        if (k->status && k->status != CL_AGAIN) {
            j->status = k->status;
            return;
        }
    }
}

void gkv_cl_pull_done(gkv_cluster_t *cl, cl_job_t *j)
{
    bool nixl = false;
    for (uint32_t i = 0; i < j->nkeys; i++) {
        cl_key_t *k = &j->keys[i];
        if (!k->pulled)
            continue;
        k->pulled = false;
        if (k->meta_len && gkv_store_entry_renew(cl->store, k->entry, k->meta, k->meta_len)) {
            k->status = CL_AGAIN;
            continue;
        }
        gkv_entry_t *holder = NULL;
        bool kept = gkv_cl_keep_replica(cl, k->entry, k->key, k->klen, k->version,
                                        k->early ? GKV_PUBLISH_LINK : 0, &holder);
        if (kept && holder && j->tee.v && k->teed == k->size && !k->tee_failed && j->t &&
            !j->t->teed) {
            gkv_store_ref(holder); /* the GET into finds the buffer written from this one */
            j->t->teed = holder;
            cl->plane.tees++;
        }
        nixl = true;
    }
    if (nixl) {
        cl->plane.read_us += gkv_plane_now_us() - j->t_us;
        gkv_trace("r_kept", 0, 0);
    }
}
