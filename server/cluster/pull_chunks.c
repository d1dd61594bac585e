/* pull_chunks.c: the reader's side of a pull on its workers (docs/cluster.md, "Data plane"):
 * STAGE's chunks, up to plane.depth asked for at once, each on a connection of its own, landing
 * in this node's arena slots and copied into the value's memory as their answers come; the
 * first ones asked by the READ's worker ahead of the pull (the head start), and a head start
 * the pull never took over awaited and given back; and what every pull does (STAGE or PUSH):
 * the early frame offered once new memory is cleared, the value's metadata kept. */
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_impl.h"
#include "commands.h"
#include "error.h"
#include "trace.h"

/* The loop's side of offer_cleared: keys[0]'s memory is cleared, so the MAP waiting for the
 * pull may import it now (ticket's early), unless its connection went. */
static void on_cleared(gkv_job_t *m)
{
    cl_job_t *j = (cl_job_t *)((char *)m - offsetof(cl_job_t, cleared));
    cl_key_t *k = &j->keys[0];
    if (j->t && j->early && k->entry)
        k->early = j->early(j->t->conn, k->entry, true) == 1;
    gkv_trace("r_cleared", k->size, k->early);
}

void gkv_cl_offer_cleared(cl_job_t *j, cl_key_t *k, gkv_backend_t *be)
{
    if (!k->clearing)
        return;
    k->clearing = false;
    if (be->ops->shared_wait(be, k->mark) != 0)
        return; /* no early frame: the client imports the memory after the answer */
    j->cleared.done = on_cleared;
    gkv_workers_post(j->pool, &j->cleared);
}

uint8_t *gkv_cl_dup_bytes(const void *p, size_t n)
{
    uint8_t *d = malloc(n ? n : 1);
    if (d && n)
        memcpy(d, p, n);
    return d;
}

void gkv_cl_keep_meta(cl_key_t *k, const gkv_response_t *r)
{
    if (!r->has_meta || !r->meta.len)
        return;
    free(k->meta);
    k->meta = gkv_cl_dup_bytes(r->meta.p, r->meta.len);
    k->meta_len = k->meta ? (uint32_t)r->meta.len : 0;
}

/* A STAGE request for chunk i (of chunk bytes, of a size-byte value) into our slot: of
 * k->version, or on a guess (pull_guess) of the version the owner holds, unless we have it. */
static int stage_send(cl_job_t *j, gkv_peer_conn_t *c, const cl_key_t *k, uint64_t size, bool guess,
                      uint64_t i, uint64_t chunk, uint64_t slot_off)
{
    uint64_t off = i * chunk, len = size - off < chunk ? size - off : chunk;
    gkv_peer_begin(c, 0, GKV_NODE_STAGE, j->self, (uint64_t)j->self_inc);
    gkv_wr_bin(&c->wr, GKV_F_KEY, k->key, k->klen);
    gkv_wr_uint(&c->wr, GKV_F_VVERSION, guess ? 0 : k->version);
    if (guess)
        gkv_wr_uint(&c->wr, GKV_F_HAVE, k->have);
    gkv_wr_uint(&c->wr, GKV_F_OFFSET, off);
    gkv_wr_uint(&c->wr, GKV_F_LENGTH, len);
    gkv_wr_uint(&c->wr, GKV_F_ARENA_OFFSET, slot_off);
    gkv_wr_uint(&c->wr, GKV_F_GPU, k->dev);
    gkv_trace("r_send", off, 0);
    return gkv_peer_send(c);
}

/* Which of the n connections with a request pending answers first: its index, or -1 when
 * none did within timeout_ms (or poll failed). */
static int first_answer(gkv_peer_conn_t *const *conns, const bool *pending, uint32_t n,
                        int timeout_ms)
{
    struct pollfd pf[GKV_PLANE_DEPTH_MAX];
    uint32_t at[GKV_PLANE_DEPTH_MAX], m = 0;
    for (uint32_t s = 0; s < n; s++)
        if (pending[s]) {
            pf[m] = (struct pollfd){.fd = conns[s]->fd, .events = POLLIN};
            at[m++] = s;
        }
    int r;
    do
        r = poll(pf, m, timeout_ms);
    while (r < 0 && errno == EINTR);
    for (uint32_t i = 0; r > 0 && i < m; i++)
        if (pf[i].revents)
            return (int)at[i];
    return -1;
}

/* A pull's requests in flight (STAGE): connection s asks for chunk asked[s], landing in slot
 * lands[s]; of the slots taken (slots, depth), those not in use are spare. Opened by pull_open
 * (on the pull's worker, or ahead of it on the READ's: gkv_cl_pull_head), ended by pull_close,
 * which waits for what is still asked. j and k: the job and key it serves (none once dropped). */
struct cl_pull {
    cl_job_t *j;
    cl_key_t *k;
    gkv_cluster_t *cl;
    gkv_plane_arena_t *a;
    char owner[GKV_NODE_NAME_MAX + 1];
    uint64_t chunk, n, next; /* chunk bytes, chunks, the next chunk to ask for */
    uint64_t size;           /* the value's bytes (a guess's: its replica's, until confirmed) */
    bool guess;              /* asks for the version the owner holds (gkv_cl_pull_guess) */
    bool guessed[GKV_PLANE_DEPTH_MAX]; /* connection s's request was asked as a guess */
    gkv_peer_conn_t *conns[GKV_PLANE_DEPTH_MAX];
    uint32_t open;
    bool pending[GKV_PLANE_DEPTH_MAX];
    uint64_t asked[GKV_PLANE_DEPTH_MAX];
    uint32_t lands[GKV_PLANE_DEPTH_MAX];
    uint32_t spare[2 * GKV_PLANE_DEPTH_MAX], nspare;
    uint32_t slots[2 * GKV_PLANE_DEPTH_MAX], depth;
    gkv_job_t drain; /* a head start whose pull never ran: pull_close on a worker */
};
typedef struct cl_pull pull_t;

/* Connection s's chunk (asked[s]) into its slot (lands[s]), asked again or for the first time:
 * as a guess or of k->version. */
static int reask(pull_t *u, uint32_t s, bool guess)
{
    u->guessed[s] = guess;
    u->pending[s] = true; /* a failed send breaks the connection: closed after the pull */
    return stage_send(u->j, u->conns[s], u->k, u->size, guess, u->asked[s], u->chunk,
                      gkv_plane_slot_off(u->a, u->lands[s]));
}

/* The next chunk on connection s, into a spare slot (the caller checked there is one). */
static int ask(pull_t *u, uint32_t s)
{
    u->asked[s] = u->next++;
    u->lands[s] = u->spare[--u->nspare];
    return reask(u, s, u->guess);
}

/* Takes u's slots (waiting up to slot_ms for the first) and connections to owner (idle ones
 * only on the loop) and asks for the first chunks of k's value (k->version, k->size, into
 * arena k->dev). Returns 0, or a code with j->msg; pull_close ends u either way. */
static int pull_open(pull_t *u, cl_job_t *j, cl_key_t *k, const gkv_member_t *owner, int slot_ms,
                     bool loop)
{
    gkv_plane_t *p = &j->cl->plane;
    u->j = j;
    u->k = k;
    u->cl = j->cl;
    u->a = &p->arena[k->dev];
    snprintf(u->owner, sizeof(u->owner), "%s", owner->name);
    u->chunk = gkv_plane_chunk(p, owner->name, k->dev);
    if (!u->guess)
        u->size = k->size;
    u->n = (u->size + u->chunk - 1) / u->chunk;
    /* Twice as many slots as requests in flight where the share allows: the next chunk's
     * request then goes out before this chunk is copied out of its slot. */
    uint32_t want = u->n < 2 * p->depth ? (uint32_t)u->n : 2 * p->depth;
    u->depth = gkv_slots_take(&u->a->slots, want, u->slots, slot_ms);
    if (!u->depth) {
        snprintf(j->msg, sizeof(j->msg), "no room in this node's transfer arena in time");
        return GKV_EUNAVAILABLE;
    }
    for (uint32_t i = u->depth; i > 0; i--)
        u->spare[u->nspare++] = u->slots[i - 1];
    uint32_t most = u->depth < p->depth ? u->depth : p->depth;
    int (*take)(gkv_peers_t *, const char *, gkv_peer_conn_t **) =
        loop ? gkv_peer_take_idle : gkv_peer_take;
    while (u->open < most && !take(&u->cl->peers, owner->advertise, &u->conns[u->open]))
        u->open++;
    if (!u->open) {
        snprintf(j->msg, sizeof(j->msg), "the owner %s did not answer", owner->name);
        return GKV_EUNAVAILABLE;
    }
    int rc = 0;
    for (uint32_t s = 0; s < u->open && u->next < u->n && !rc; s++)
        rc = ask(u, s);
    return rc;
}

/* Replies still due (after a failure, or a head start dropped): the owner may still be writing
 * into those slots. Their answers are awaited (within the timeout); a connection that broke
 * means the owner is gone (or answered all it had) and writes nothing more, however long it
 * took to break, but one that stayed silent until the timeout may still have a transfer in
 * flight: its slots are retired. Then every connection and slot goes back. */
static void pull_close(pull_t *u)
{
    bool retire = false;
    for (uint32_t s = 0; s < u->open; s++) {
        bool ok = !u->pending[s];
        if (u->pending[s]) {
            gkv_response_t r;
            ok = gkv_peer_recv(u->conns[s], &r) == 0 && !r.payload_len;
            if (!ok && u->conns[s]->timed_out)
                retire = true;
        }
        gkv_peer_give(&u->cl->peers, u->conns[s], ok);
    }
    u->open = 0;
    if (u->depth)
        gkv_slots_give(&u->a->slots, u->slots, u->depth, retire);
    u->depth = 0;
}

/* The rest of u's pull: each answer taken as it comes (the owner's writes finish in the order
 * its workers posted them, not in the order asked), its chunk copied into k->mem and the next
 * asked. Returns 0, CL_AGAIN (the owner does not hold that version now) or another code. */
static int pull_run(pull_t *u)
{
    cl_job_t *j = u->j;
    cl_key_t *k = u->k;
    gkv_plane_t *p = &j->cl->plane;
    gkv_plane_arena_t *a = u->a;
    int timeout = j->cl->peers.timeout_ms, rc = 0;
    uint64_t done = 0;
    while (done < u->n && !rc) {
        uint64_t t0 = gkv_plane_now_us();
        int s = first_answer(u->conns, u->pending, u->open, timeout);
        gkv_response_t r;
        if (s < 0) {
            snprintf(j->msg, sizeof(j->msg), "the owner %s did not answer in time", u->owner);
            rc = GKV_EUNAVAILABLE;
            break;
        }
        rc = gkv_peer_recv(u->conns[s], &r);
        uint64_t t1 = gkv_plane_now_us();
        p->pull_wait_us += t1 - t0;
        gkv_trace("r_recv", u->asked[s] * u->chunk, 0);
        if (!rc && r.payload_len)
            rc = GKV_EPROTO;
        if (rc)
            break; /* pending[s] stays: the connection is closed by pull_close */
        u->pending[s] = false;
        if (u->guessed[s] && (r.status || r.vversion != k->version)) {
            /* A guess that found another version (or none): the chunk again, of the version
             * the home named (our slot holds nothing we read: the answer came after the
             * write). */
            p->guesses_missed++;
            rc = reask(u, (uint32_t)s, false);
            continue;
        }
        if (r.status) {
            rc = r.status == GKV_ENOTFOUND ? CL_AGAIN : (int)r.status;
            if (r.message.len)
                snprintf(j->msg, sizeof(j->msg), "%.*s", (int)r.message.len,
                         (const char *)r.message.p);
            break;
        }
        if (u->asked[s] == 0)
            gkv_cl_keep_meta(k, &r);
        uint64_t off = u->asked[s] * u->chunk;
        uint64_t len = k->size - off < u->chunk ? k->size - off : u->chunk;
        uint32_t slot = u->lands[s];
        bool early = u->next < u->n && u->nspare; /* asked before this one is copied out */
        if (early)
            rc = ask(u, (uint32_t)s);
        if (!rc && gkv_cl_land(j, k, a->be, off, gkv_slot_addr(&a->slots, slot), (size_t)len))
            rc = GKV_EIO;
        if (rc)
            break;
        u->spare[u->nspare++] = slot;
        p->pull_copy_us += gkv_plane_now_us() - t1;
        gkv_trace("r_copied", off, 0);
        if (!early && u->next < u->n)
            rc = ask(u, (uint32_t)s);
        done++;
    }
    return rc;
}

int gkv_cl_land(cl_job_t *j, cl_key_t *k, gkv_backend_t *be, uint64_t off, void *src, size_t len)
{
    if (be->ops->arena_copy(be, k->mem, off, src, len, 1, k->mark))
        return GKV_EIO;
    if (j->tee.v && !k->tee_failed && k->dev == j->tee_dev && k->size <= j->tee_cap) {
        /* The reader's buffer: memory of the same device, written as the replica is. */
        gkv_devptr_t dst = {j->tee.v + off};
        if (be->ops->arena_copy(be, dst, 0, src, len, 1, k->mark) == 0)
            k->teed += len;
        else
            k->tee_failed = true;
    }
    return 0;
}

/* A head start for k from owner (a guess: of the version it holds, size bytes), in j->head;
 * on the loop with idle connections only. */
static void head_start(cl_job_t *j, cl_key_t *k, const gkv_member_t *owner, bool guess,
                       uint64_t size, bool loop)
{
    gkv_plane_t *p = &j->cl->plane;
    if (j->nkeys != 1 || p->narenas != 1 || p->push || !p->head_start || j->head)
        return;
    pull_t *u = calloc(1, sizeof(*u));
    if (!u)
        return;
    u->guess = guess;
    u->size = size;
    k->dev = 0; /* the only device: where the loop places the value too (gkv_store_place) */
    /* No slot free now: the pull waits for one later. */
    int rc = pull_open(u, j, k, owner, 0, loop);
    gkv_trace("r_head", size, (uint64_t)rc | (guess ? 2 : 0) | (loop ? 4 : 0));
    if (rc) {
        pull_close(u);
        free(u);
        j->msg[0] = 0;
        return;
    }
    j->head = u;
    if (guess)
        p->head_guesses++;
    else
        p->head_starts++;
    if (loop)
        p->heads_ahead++;
}

void gkv_cl_pull_head(cl_job_t *j, cl_key_t *k, const gkv_member_t *owner)
{
    head_start(j, k, owner, false, k->size, false);
}

void gkv_cl_pull_ahead(cl_job_t *j, cl_key_t *k, const gkv_member_t *m, bool guess)
{
    if (!guess || j->cl->plane.guess)
        head_start(j, k, m, guess, guess ? k->have_size : k->size, true);
}

void gkv_cl_pull_guess(cl_job_t *j, cl_key_t *k, const gkv_member_t *home)
{
    if (!j->cl->plane.guess)
        return;
    head_start(j, k, home, true, k->have_size, false);
    if (j->head && j->cl->plane.guess_lead_ms) /* tests: a write may land before the FETCH */
        (void)poll(NULL, 0, (int)j->cl->plane.guess_lead_ms);
}

void gkv_cl_pull_confirm(cl_job_t *j, cl_key_t *k, const gkv_member_t *owner)
{
    pull_t *u = j->head;
    if (u && u->guess && strcmp(u->owner, owner->name)) {
        /* Asked of a node that owns no version (or none but ours): refused at once. */
        j->head = NULL;
        j->cl->plane.heads_dropped++;
        pull_close(u);
        free(u);
        u = NULL;
    }
    if (u && u->guess)
        u->guess = false; /* the owner's: its answers are checked against k->version */
    else
        gkv_cl_pull_head(j, k, owner);
}

static void run_drain(gkv_job_t *job)
{
    pull_close((pull_t *)((char *)job - offsetof(pull_t, drain)));
}

static void free_drain(gkv_job_t *job)
{
    free((char *)job - offsetof(pull_t, drain));
}

void gkv_cl_pull_drop(gkv_cluster_t *cl, struct cl_pull *u)
{
    u->j = NULL;
    u->k = NULL;
    cl->plane.heads_dropped++;
    if (!cl->pulls.open || cl->pulls.stop) { /* stopping: nothing runs jobs any more */
        pull_close(u);
        free(u);
        return;
    }
    u->drain.run = run_drain;
    u->drain.done = free_drain;
    gkv_workers_submit(&cl->pulls, &u->drain);
}

int gkv_cl_pull_chunks(cl_job_t *j, cl_key_t *k, const gkv_member_t *owner)
{
    pull_t here, *u = j->head;
    j->head = NULL;
    /* A guess never confirmed, or of another size (the value changed size): dropped. */
    bool stale = u && (u->guess || u->size != k->size);
    if (u && (stale || strcmp(u->owner, owner->name) || u->a != &j->cl->plane.arena[k->dev] ||
              u->k != k)) {
        /* Not this pull's: a stale guess; otherwise it cannot be, but its slots must come
         * back. */
        if (stale)
            j->cl->plane.heads_dropped++;
        pull_close(u);
        free(u);
        u = NULL;
    }
    int rc = 0;
    if (!u) {
        memset(&here, 0, sizeof(here));
        u = &here;
        rc = pull_open(u, j, k, owner, j->cl->peers.timeout_ms, false);
    }
    if (!rc)
        gkv_cl_offer_cleared(j, k, u->a->be);
    if (!rc)
        rc = pull_run(u);
    pull_close(u);
    if (u != &here)
        free(u);
    return rc;
}
