/* jobs.c: what a cluster job does on its worker thread: NODE requests to homes and owners
 * (peer.h), retried while they answer BUSY for up to CL_BUSY_MS, and a fetched value relayed
 * into this node's own memory as a REPLICA. Nothing here touches the loop's state: a job has
 * its own copy of the members and of its keys. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster_impl.h"
#include "commands.h"
#include "error.h"
#include "log.h"
#include "placement.h"
#include "trace.h"

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void pause_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* The optional fields of a NODE request. */
typedef struct {
    uint64_t vversion, size, flags, limit, have;
    uint64_t at_most; /* FETCH at the home: send the value only when at most this large */
    uint64_t wait;    /* FETCH at the home: no record: notify this node within wait ms */
    uint64_t after;   /* ... nor one above this version */
    const uint8_t *prefix, *cursor;
    uint32_t plen, clen;
    int delim;
    bool list;
} nreq_t;

static void note(cl_job_t *j, const char *fmt, const char *what)
{
    if (!j->msg[0])
        snprintf(j->msg, sizeof(j->msg), fmt, what);
}

/* Sends one NODE request to addr and reads its reply header into *r; a reply with a payload
 * leaves the connection in *keep (give it back when read). Returns 0 (r->status may be an
 * error), or GKV_EUNAVAILABLE. r's slices stay valid until the job's next call: a connection
 * given back here may be another worker's a moment later, its next reply read over the last
 * (a READ could take its owner's name from there after another key's reply landed: a miss). */
static int call_once(cl_job_t *j, const char *addr, unsigned op, const uint8_t *key,
                     uint32_t klen, const nreq_t *f, gkv_response_t *r, gkv_peer_conn_t **keep)
{
    gkv_peers_t *peers = &j->cl->peers;
    gkv_peer_conn_t *c;
    int rc = gkv_peer_take(peers, addr, &c);
    if (rc)
        return GKV_EUNAVAILABLE;
    gkv_peer_begin(c, 0, op, j->self, (uint64_t)j->self_inc);
    if (key)
        gkv_wr_bin(&c->wr, GKV_F_KEY, key, klen);
    if (f->vversion)
        gkv_wr_uint(&c->wr, GKV_F_VVERSION, f->vversion);
    if (f->size)
        gkv_wr_uint(&c->wr, GKV_F_SIZE, f->size);
    if (f->flags)
        gkv_wr_uint(&c->wr, GKV_F_FLAGS, f->flags);
    if (f->have)
        gkv_wr_uint(&c->wr, GKV_F_HAVE, f->have);
    if (f->at_most)
        gkv_wr_uint(&c->wr, GKV_F_LIMIT, f->at_most);
    if (f->wait)
        gkv_wr_uint(&c->wr, GKV_F_WAIT, f->wait);
    if (f->wait && f->after)
        gkv_wr_uint(&c->wr, GKV_F_AFTER, f->after);
    if (f->list) {
        gkv_wr_bin(&c->wr, GKV_F_PREFIX, f->prefix, f->plen);
        if (f->clen)
            gkv_wr_bin(&c->wr, GKV_F_CURSOR, f->cursor, f->clen);
        if (f->delim >= 0) {
            char d = (char)f->delim;
            gkv_wr_bin(&c->wr, GKV_F_DELIM, &d, 1);
        }
        gkv_wr_uint(&c->wr, GKV_F_LIMIT, f->limit);
    }
    rc = gkv_peer_call(c, NULL, 0, r);
    if (!rc && r->status == 0 && r->payload_len && keep) {
        *keep = c;
        return 0;
    }
    if (!rc && r->payload_len) /* not expected: the connection cannot be reused */
        rc = GKV_EPROTO;
    if (!rc)
        rc = gkv_peer_reply_keep(c, r, &j->rhdr, &j->rhdr_cap);
    gkv_peer_give(peers, c, rc == 0);
    return rc ? GKV_EUNAVAILABLE : 0;
}

/* call_once, again while the answer is BUSY, until CL_BUSY_MS have passed. */
static int call(cl_job_t *j, const char *addr, unsigned op, const uint8_t *key, uint32_t klen,
                const nreq_t *f, gkv_response_t *r, gkv_peer_conn_t **keep)
{
    uint64_t until = now_ms() + CL_BUSY_MS;
    unsigned wait = 1;
    for (;;) {
        int rc = call_once(j, addr, op, key, klen, f, r, keep);
        if (rc) {
            note(j, "the node at %s did not answer", addr);
            return rc;
        }
        if (r->status != GKV_EBUSY)
            return 0;
        if (now_ms() >= until) {
            note(j, "the node at %s stayed busy (a write of the key, or members changing)",
                 addr);
            return GKV_EUNAVAILABLE;
        }
        pause_ms(wait);
        wait = wait < 32 ? wait * 2 : 50;
    }
}

/* Starts a REPLICA of k (at k->version, len bytes, with meta) to this node itself on self. */
static void replica_begin(const cl_job_t *j, gkv_peer_conn_t *self, const cl_key_t *k,
                          uint64_t len, const uint8_t *meta, size_t meta_len)
{
    gkv_peer_begin(self, 0, GKV_NODE_REPLICA, j->self, (uint64_t)j->self_inc);
    gkv_wr_bin(&self->wr, GKV_F_KEY, k->key, k->klen);
    gkv_wr_uint(&self->wr, GKV_F_VVERSION, k->version);
    gkv_wr_uint(&self->wr, GKV_F_PAYLOAD, len);
    if (meta_len)
        gkv_wr_bin(&self->wr, GKV_F_META, meta, meta_len);
}

/* bytes (len, in host memory) kept here as the replica of k. Returns the REPLICA's status. */
static int replica_from(cl_job_t *j, const cl_key_t *k, const void *bytes, uint64_t len,
                        const uint8_t *meta, size_t meta_len)
{
    gkv_peer_conn_t *self;
    int rc = gkv_peer_take(&j->cl->peers, j->self_addr, &self);
    if (rc)
        return rc;
    replica_begin(j, self, k, len, meta, meta_len);
    gkv_response_t sr;
    rc = gkv_peer_call(self, bytes, (size_t)len, &sr);
    gkv_peer_give(&j->cl->peers, self, rc == 0);
    return rc ? rc : (int)sr.status;
}

/* The bytes of the FETCH reply waiting on src (r its header) go to this node itself as a
 * REPLICA of k at version. */
static int relay(cl_job_t *j, gkv_peer_conn_t *src, const gkv_response_t *r, cl_key_t *k)
{
    gkv_peers_t *peers = &j->cl->peers;
    gkv_peer_conn_t *self;
    uint64_t len = r->payload_len;
    uint8_t *buf = malloc(len < CL_RELAY_CHUNK ? (len ? len : 1) : CL_RELAY_CHUNK);
    int rc = buf ? gkv_peer_take(peers, j->self_addr, &self) : GKV_ENOMEM;
    if (rc) {
        free(buf);
        return rc;
    }
    replica_begin(j, self, k, len, r->meta.p, r->has_meta ? r->meta.len : 0);
    bool src_ok = true;
    rc = gkv_peer_send(self);
    for (uint64_t left = len; !rc && left;) {
        size_t n = left < CL_RELAY_CHUNK ? (size_t)left : CL_RELAY_CHUNK;
        if ((rc = gkv_peer_read(src, buf, n))) {
            src_ok = false;
            break;
        }
        rc = gkv_peer_write(self, buf, n);
        left -= n;
    }
    free(buf);
    gkv_response_t sr;
    if (!rc)
        rc = gkv_peer_recv(self, &sr);
    if (!rc && sr.status)
        rc = (int)sr.status;
    gkv_peer_give(peers, self, rc == 0);
    gkv_peer_give(peers, src, src_ok && !rc);
    return rc;
}

/* One key of a READ: owner and version from its home, then the bytes from the owner unless
 * this node has a replica of that version already. */
/* A small value's bytes (r's payload, waiting on src; none without src) and metadata kept
 * in k, to be answered from at once (CL_DIRECT_MAX). */
static int keep_direct(cl_job_t *j, gkv_peer_conn_t *src, const gkv_response_t *r, cl_key_t *k)
{
    uint64_t len = r->payload_len;
    k->bytes = malloc(len ? len : 1);
    k->meta = r->has_meta && r->meta.len ? malloc(r->meta.len) : NULL;
    if (!k->bytes || (r->has_meta && r->meta.len && !k->meta)) {
        if (src)
            gkv_peer_give(&j->cl->peers, src, false);
        return GKV_ENOMEM;
    }
    if (k->meta) {
        memcpy(k->meta, r->meta.p, r->meta.len);
        k->meta_len = (uint32_t)r->meta.len;
    }
    int rc = src && len ? gkv_peer_read(src, k->bytes, len) : 0;
    if (src)
        gkv_peer_give(&j->cl->peers, src, rc == 0);
    k->direct = rc == 0;
    k->size = len;
    return rc;
}

/* The member at advertised address addr, or NULL. */
static const gkv_member_t *member_at(const cl_job_t *j, const char *addr)
{
    for (size_t i = 0; i < j->nmembers; i++)
        if (!strcmp(j->members[i].advertise, addr))
            return &j->members[i];
    return NULL;
}

/* The home of k when it is worth guessing to be k's owner (gkv_cl_pull_guess): a node that
 * reads through NIXL, not us, k replicated here larger than CL_DIRECT_MAX, and a read that
 * does not wait there (a guess would hold arena slots while it waits); else NULL. */
static const gkv_member_t *home_to_guess(const cl_job_t *j, const cl_key_t *k)
{
    const gkv_member_t *home = member_at(j, k->home_addr);
    if (home && !j->wait_ms && k->have_size > CL_DIRECT_MAX && strcmp(home->name, j->self) &&
        gkv_plane_reads_nixl(&j->cl->plane, home->name, home->incarnation))
        return home;
    return NULL;
}

/* The owner the loop's own record named for k (k->known), if it is still that member (the
 * same incarnation); else NULL. */
static const gkv_member_t *record_owner(const cl_job_t *j, const cl_key_t *k)
{
    const gkv_member_t *owner = gkv_cl_job_member(j, k->owner, strlen(k->owner));
    return owner && owner->incarnation == k->owner_inc ? owner : NULL;
}

/* k's value (k->size bytes) comes from owner through NIXL, not over TCP. */
static bool pulled_from(const cl_job_t *j, const cl_key_t *k, const gkv_member_t *owner)
{
    return k->size > CL_DIRECT_MAX && !j->no_nixl &&
           gkv_plane_reads_nixl(&j->cl->plane, owner->name, owner->incarnation);
}

void gkv_cl_read_ahead(cl_job_t *j)
{
    /* Only a read that starts while no other pulls: one among concurrent reads gains nothing
     * (the link is busy already) and the loop would take the connections and slots of the
     * others' workers; 16 readers at once ran 0.38-0.76x with it (RESULTS.md session 49). */
    if (j->nkeys != 1 || j->kind != JOB_READ || !j->cl->plane.on || !j->cl->plane.ahead ||
        j->no_nixl || j->cl->plane.narenas != 1 || !gkv_slots_idle(&j->cl->plane.arena[0].slots))
        return;
    cl_key_t *k = &j->keys[0];
    if (!k->known) {
        const gkv_member_t *home = home_to_guess(j, k);
        if (home)
            gkv_cl_pull_ahead(j, k, home, true);
        return;
    }
    /* The loop's own record named the owner: read_key goes straight to the pull. */
    const gkv_member_t *owner = record_owner(j, k);
    if (owner && strcmp(owner->name, j->self) && k->have != k->version && pulled_from(j, k, owner))
        gkv_cl_pull_ahead(j, k, owner, false);
}

/* The value of k (version k->version) in the GET reply r, its bytes waiting on src (none for
 * an empty value): kept for a direct answer, or relayed into a replica here. */
static int take_value(cl_job_t *j, cl_key_t *k, gkv_peer_conn_t *src, const gkv_response_t *r)
{
    if (j->direct && r->payload_len <= CL_DIRECT_MAX)
        return keep_direct(j, src, r, k);
    if (src)
        return relay(j, src, r, k);
    /* An empty value: nothing to relay, but a replica all the same. */
    return replica_from(j, k, NULL, 0, r->meta.p, r->has_meta ? r->meta.len : 0);
}

/* One key of a READ: owner and version from its home, then the bytes from the owner unless
 * this node has a replica of that version already. The home is asked for the value itself
 * (FETCH without a version, naming the replica we have): a home that owns a newer one answers
 * with it, in one round trip; any other answers as LOOKUP does. */
static void read_key(cl_job_t *j, cl_key_t *k)
{
    uint64_t until = now_ms() + CL_BUSY_MS;
    for (;;) {
        gkv_response_t r;
        const gkv_member_t *owner;
        gkv_peer_conn_t *src = NULL;
        int rc;
        if (k->known) { /* the loop read our own record: no LOOKUP of ourselves */
            k->known = false;
            if (!(owner = record_owner(j, k))) {
                k->status = GKV_ENOTFOUND;
                return;
            }
        } else {
            nreq_t ask = {.have = k->have, .wait = j->wait_ms, .after = j->wait_after,
                          .delim = -1};
            /* With NIXL, a large value is pulled through it rather than sent with the answer;
             * one we pulled before is asked of the home meanwhile (its usual owner), unless
             * the read may wait there (its guess would hold arena slots while it waits). */
            if (j->cl->plane.on && !j->no_nixl) {
                ask.at_most = CL_DIRECT_MAX;
                const gkv_member_t *home = home_to_guess(j, k);
                if (home) /* none when the loop asked it already (gkv_cl_read_ahead) */
                    gkv_cl_pull_guess(j, k, home);
            }
            rc = call(j, k->home_addr, GKV_NODE_FETCH, k->key, k->klen, &ask, &r, &src);
            gkv_trace("r_home", r.size, (uint64_t)rc); /* GPUKV_TRACE: the home's answer */
            gkv_trace_key("r_homes", k->key, k->klen, rc ? (uint64_t)rc : (uint64_t)r.status);
            if (rc || (r.status && r.status != GKV_ENOTFOUND)) {
                k->status = rc ? rc : (int)r.status;
                return;
            }
            if (!r.status && !r.owner.len) { /* the home owns it: here is the value */
                owner = member_at(j, k->home_addr);
                if (!owner || !strcmp(owner->name, j->self)) {
                    if (src)
                        gkv_peer_give(&j->cl->peers, src, false);
                    k->status = GKV_EUNAVAILABLE;
                    return;
                }
                k->version = r.vversion;
                strcpy(k->owner, owner->name);
                k->status = take_value(j, k, src, &r);
                return;
            }
            owner = r.status ? NULL : gkv_cl_job_member(j, r.owner.p, r.owner.len);
            if (!owner || owner->incarnation != (int64_t)r.owner_inc) {
                k->status = GKV_ENOTFOUND; /* nobody, or a node that left */
                return;
            }
            k->version = r.vversion;
            k->size = r.size;
        }
        if (!strcmp(owner->name, j->self)) {
            k->status = GKV_EEXISTS; /* ours: the loop knows whether it is published yet */
            return;
        }
        strcpy(k->owner, owner->name);
        if (k->have == k->version) {
            k->status = 0;
            return;
        }
        if (pulled_from(j, k, owner)) {
            k->status = CL_PULL; /* the loop gives it memory, then JOB_PULL */
            gkv_cl_pull_confirm(j, k, owner); /* its first chunks come meanwhile */
            return;
        }
        rc = gkv_cl_fetch_tcp(j, k, owner);
        if (rc != CL_AGAIN) {
            k->status = rc;
            return;
        }
        /* The owner no longer holds that version (the value moved on): ask the home again. */
        if (now_ms() >= until) {
            k->status = GKV_EUNAVAILABLE;
            note(j, "%s", "the value changed faster than it could be fetched");
            return;
        }
        pause_ms(1);
    }
}

int gkv_cl_fetch_tcp(cl_job_t *j, cl_key_t *k, const gkv_member_t *owner)
{
    gkv_response_t r;
    gkv_peer_conn_t *src = NULL;
    nreq_t f = {.vversion = k->version, .delim = -1};
    bool direct = j->direct;
    if (j->kind == JOB_PULL)
        j->direct = false; /* the loop installs no direct bytes after a pull */
    int rc = call(j, owner->advertise, GKV_NODE_FETCH, k->key, k->klen, &f, &r, &src);
    if (!rc && !r.status)
        rc = take_value(j, k, src, &r);
    else if (!rc)
        rc = r.status == GKV_ENOTFOUND ? CL_AGAIN : (int)r.status;
    j->direct = direct;
    return rc;
}

static void run_keys(cl_job_t *j)
{
    for (uint32_t i = 0; i < j->nkeys; i++) {
        cl_key_t *k = &j->keys[i];
        gkv_response_t r;
        nreq_t none = {.delim = -1};
        switch (j->kind) {
        case JOB_READ:
            read_key(j, k);
            if (k->status && k->status != GKV_ENOTFOUND)
                return;
            break;
        case JOB_EXISTS:
        case JOB_GETSIZE: {
            int rc = call(j, k->home_addr, GKV_NODE_LOOKUP, k->key, k->klen, &none, &r, NULL);
            k->status = rc ? rc : (int)r.status;
            if (k->status && k->status != GKV_ENOTFOUND) {
                j->status = k->status;
                return;
            }
            if (!k->status) {
                j->count++;
                k->size = r.size;
                snprintf(k->owner, sizeof(k->owner), "%.*s", (int)r.owner.len,
                         (const char *)r.owner.p);
            }
            break;
        }
        case JOB_DEL: {
            int rc = call(j, k->home_addr, GKV_NODE_DELETE, k->key, k->klen, &none, &r, NULL);
            k->status = rc ? rc : (int)r.status;
            if (k->status) {
                j->status = k->status;
                return;
            }
            j->count += r.count;
            break;
        }
        case JOB_DROP: {
            nreq_t f = {.vversion = k->version, .flags = j->flags, .delim = -1};
            int rc = call(j, k->home_addr, GKV_NODE_DROP, k->key, k->klen, &f, &r, NULL);
            j->status = rc ? rc : (int)r.status;
            return;
        }
        case JOB_NOTIFY: { /* best effort: a node not told asks again within a second */
            nreq_t f = {.vversion = k->version, .delim = -1};
            (void)call_once(j, k->home_addr, GKV_NODE_NOTIFY, k->key, k->klen, &f, &r, NULL);
            break;
        }
        case JOB_REGISTER: {
            nreq_t f = {.vversion = k->version, .size = k->size, .delim = -1};
            int rc = call(j, k->home_addr, GKV_NODE_REGISTER, k->key, k->klen, &f, &r, NULL);
            k->status = rc ? rc : (int)r.status;
            if (!k->status)
                snprintf(k->owner, sizeof(k->owner), "%.*s", (int)r.owner.len,
                         (const char *)r.owner.p);
            break;
        }
        }
    }
}

static void run_record(cl_job_t *j)
{
    cl_key_t *k = &j->keys[0];
    gkv_response_t r;
    nreq_t f = {.size = k->size, .flags = j->flags & (GKV_SET_NX | GKV_SET_XX), .delim = -1};
    int rc = call(j, k->home_addr, GKV_NODE_RECORD, k->key, k->klen, &f, &r, NULL);
    if (rc) {
        j->status = rc;
        return;
    }
    j->status = (int)r.status;
    if (r.status) {
        if (r.message.len)
            snprintf(j->msg, sizeof(j->msg), "%.*s", (int)r.message.len,
                     (const char *)r.message.p);
        return;
    }
    k->version = r.vversion;
    snprintf(k->owner, sizeof(k->owner), "%.*s", (int)r.owner.len, (const char *)r.owner.p);
}

/* Items copied out of the replies (whose buffers are reused by the next call). */
typedef struct {
    cl_item_t *items;
    size_t n, cap;
    bool more;
} collect_t;

static int collect_add(collect_t *c, const uint8_t *key, size_t klen, uint64_t size, bool dir)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 256;
        cl_item_t *m = realloc(c->items, cap * sizeof(*m));
        if (!m)
            return GKV_ENOMEM;
        c->items = m;
        c->cap = cap;
    }
    uint8_t *k = malloc(klen ? klen : 1);
    if (!k)
        return GKV_ENOMEM;
    if (klen)
        memcpy(k, key, klen);
    c->items[c->n++] = (cl_item_t){k, (uint32_t)klen, size, dir};
    return 0;
}

static void collect_free(collect_t *c)
{
    for (size_t i = 0; i < c->n; i++)
        free((void *)c->items[i].key);
    free(c->items);
    memset(c, 0, sizeof(*c));
}

/* A NODE LIST reply's entries and dirs into c. */
static int collect_reply(collect_t *c, const gkv_response_t *r)
{
    gkv_reader_t it;
    uint32_t n;
    gkv_read_init(&it, r->entries.p, r->entries.len);
    if (r->entries.len && gkv_read_array(&it, &n) == 0) {
        for (uint32_t i = 0; i < n; i++) {
            uint32_t m;
            gkv_slice_t k;
            uint64_t size;
            if (gkv_read_array(&it, &m) || m < 2 || gkv_read_bin(&it, &k) ||
                gkv_read_uint(&it, &size))
                return GKV_EPROTO;
            for (uint32_t x = 2; x < m; x++)
                gkv_read_skip(&it);
            if (collect_add(c, k.p, k.len, size, false))
                return GKV_ENOMEM;
        }
    }
    gkv_read_init(&it, r->dirs.p, r->dirs.len);
    if (r->dirs.len && gkv_read_array(&it, &n) == 0) {
        for (uint32_t i = 0; i < n; i++) {
            gkv_slice_t d;
            if (gkv_read_bin(&it, &d) || collect_add(c, d.p, d.len, 0, true))
                return GKV_EPROTO;
        }
    }
    if (r->has_cursor)
        c->more = true;
    return 0;
}

/* Every page a member has under the prefix (no delimiter), into c. */
static int list_all(cl_job_t *j, const gkv_member_t *m, collect_t *c)
{
    uint8_t *cursor = NULL;
    size_t clen = 0;
    int rc = 0;
    for (;;) {
        gkv_response_t r;
        nreq_t f = {.list = true, .prefix = j->prefix, .plen = j->prefix_len, .cursor = cursor,
                    .clen = (uint32_t)clen, .delim = -1, .limit = GKV_MAX_LIST};
        if ((rc = call(j, m->advertise, GKV_NODE_LIST, NULL, 0, &f, &r, NULL)))
            break;
        if ((rc = (int)r.status))
            break;
        c->more = false;
        if ((rc = collect_reply(c, &r)))
            break;
        if (!r.has_cursor)
            break;
        uint8_t *next = malloc(r.cursor.len ? r.cursor.len : 1);
        if (!next) {
            rc = GKV_ENOMEM;
            break;
        }
        if (r.cursor.len)
            memcpy(next, r.cursor.p, r.cursor.len);
        free(cursor);
        cursor = next;
        clen = r.cursor.len;
    }
    free(cursor);
    return rc;
}

static void run_fanout(cl_job_t *j)
{
    collect_t c = {0};
    bool more = false;
    for (size_t i = 0; i < j->nmembers && !j->status; i++) {
        const gkv_member_t *m = &j->members[i];
        if (j->kind != JOB_LIST) {
            size_t before = c.n;
            if ((j->status = list_all(j, m, &c)))
                break;
            if (j->kind == JOB_DEL_PREFIX) {
                /* The keys this member homes: deleted there, one by one. */
                for (size_t x = before; x < c.n && !j->status; x++) {
                    gkv_response_t r;
                    nreq_t none = {.delim = -1};
                    int rc = call(j, m->advertise, GKV_NODE_DELETE, c.items[x].key,
                                  c.items[x].klen, &none, &r, NULL);
                    j->status = rc ? rc : (int)r.status;
                    if (!j->status)
                        j->count += r.count;
                }
            }
            continue;
        }
        gkv_response_t r;
        nreq_t f = {.list = true, .prefix = j->prefix, .plen = j->prefix_len,
                    .cursor = j->cursor, .clen = j->cursor_len, .delim = j->delim,
                    .limit = j->limit};
        int rc = call(j, m->advertise, GKV_NODE_LIST, NULL, 0, &f, &r, NULL);
        j->status = rc ? rc : (int)r.status;
        if (!j->status) {
            c.more = false;
            j->status = collect_reply(&c, &r);
            more = more || c.more;
        }
    }
    if (!j->status && j->kind == JOB_SIZES) {
        for (size_t i = 0; i < c.n; i++) {
            j->bytes += c.items[i].size;
            j->count++;
        }
    }
    if (!j->status && j->kind == JOB_LIST) {
        gkv_cl_items_sort(c.items, c.n);
        gkv_wr_t *w = &j->reply;
        gkv_wr_ok(w, j->id);
        gkv_cl_list_write(w, c.items, c.n, j->prefix, j->prefix_len, j->delim, j->cursor,
                          j->cursor_len, j->limit, more);
        j->status = gkv_wr_end(w);
        j->has_reply = !j->status;
    }
    collect_free(&c);
}

/* Every other member is asked to vouch for this node: that it still lists us at our
 * incarnation (its member check) and cannot reach etcd either (count 0). One that does not
 * answer, or reaches etcd, ends the round unvouched. */
static void run_vouch(cl_job_t *j)
{
    for (size_t i = 0; i < j->nmembers; i++) {
        const gkv_member_t *m = &j->members[i];
        if (!strcmp(m->name, j->self))
            continue;
        gkv_response_t r;
        nreq_t none = {.delim = -1};
        int rc = call_once(j, m->advertise, GKV_NODE_VOUCH, NULL, 0, &none, &r, NULL);
        if (!rc && !r.status && r.count)
            j->etcd_seen = true;
        if (rc || r.status || r.count) {
            j->status = GKV_EUNAVAILABLE;
            return;
        }
    }
}

/* Fetched bytes (keys[0]) to this node itself as a REPLICA, after a direct read's reply. */
static void run_install(cl_job_t *j)
{
    cl_key_t *k = &j->keys[0];
    j->status = replica_from(j, k, k->bytes, k->size, k->meta, k->meta_len);
}

void gkv_cl_job_run(gkv_job_t *job)
{
    cl_job_t *j = (cl_job_t *)job;
    switch (j->kind) {
    case JOB_INSTALL:
        run_install(j);
        break;
    case JOB_VOUCH:
        run_vouch(j);
        break;
    case JOB_RECORD:
        run_record(j);
        break;
    case JOB_LIST:
    case JOB_SIZES:
    case JOB_DEL_PREFIX:
        run_fanout(j);
        break;
    default:
        run_keys(j);
        break;
    }
}
