/* watch.c: a WATCH that spans the cluster (docs/handoff.md, "Watches across a cluster"). The
 * watcher's node watches its own values as one node does (net/watch.c) and opens a stream to
 * every other member: a connection of its own that asked WATCH with local 1, whose event
 * frames it reads on the loop and hands to the watch with the member's name. The handshake
 * (connect, HELLO with the cluster's token, WATCH) runs on a worker; the loop then owns the
 * socket. Members that join get a stream, those that leave lose theirs; a stream that breaks
 * ends without an event. */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "cluster_impl.h"
#include "commands.h"
#include "error.h"
#include "frame.h"
#include "hash.h"
#include "log.h"

/* One member's stream. Owned by its watch's list; once the watch is gone (w NULL) it only
 * waits for its handshake or its handle's close to end, then frees itself. */
typedef struct stream {
    gkv_cl_watch_t *w;
    char node[GKV_NODE_NAME_MAX + 1];
    int64_t inc;
    char addr[GKV_ADVERTISE_MAX + 1];
    bool connecting; /* the handshake job runs */
    bool reading;    /* h is open (reading, or about to) */
    uv_tcp_t h;
    uint8_t *buf;
    size_t len, cap;
    struct stream *next;
} stream_t;

/* The last keys (up to GKV_CL_WATCH_RECENT) a watch delivered a versioned event of, with that
 * version: an open-addressed table of 2x cap slots by the key's 64-bit hash (never 0: 0 is a
 * free slot), and the hashes in the order they came (ring), the oldest leaving first once
 * cap is GKV_CL_WATCH_RECENT. cap starts small and doubles as keys come. */
typedef struct {
    uint64_t hash, version;
} recent_slot_t;
typedef struct {
    recent_slot_t *slot; /* 2 * cap */
    uint64_t *ring;      /* cap */
    size_t cap, n, oldest;
} recent_t;
#define RECENT_FIRST 64

struct gkv_cl_watch {
    gkv_cluster_t *cl;
    gkv_cl_event_fn fn;
    void *arg;
    stream_t *streams;
    recent_t *recent; /* made at the first versioned event */
    uint8_t seed[16]; /* of the keys' hashes */
    gkv_cl_watch_t *next; /* the cluster's watches */
    size_t plen;
    uint8_t prefix[];
};

/* The handshake of one stream, on a worker. */
typedef struct {
    gkv_job_t job;
    gkv_cluster_t *cl;
    stream_t *s;
    uint8_t *prefix;
    size_t plen;
    int fd;
} hand_t;

static void stream_free(stream_t *s)
{
    free(s->buf);
    free(s);
}

static void on_closed(uv_handle_t *h)
{
    stream_free(h->data);
}

/* s leaves its watch's list (if it still has one) and ends. */
static void stream_end(stream_t *s)
{
    if (s->w) {
        for (stream_t **p = &s->w->streams; *p; p = &(*p)->next)
            if (*p == s) {
                *p = s->next;
                break;
            }
        s->w = NULL;
    }
    if (s->reading) {
        s->reading = false;
        uv_read_stop((uv_stream_t *)&s->h);
        uv_close((uv_handle_t *)&s->h, on_closed);
    } else if (!s->connecting) {
        stream_free(s);
    } /* else the handshake's end frees it */
}

static void on_alloc(uv_handle_t *h, size_t want, uv_buf_t *b)
{
    stream_t *s = h->data;
    if (want < 16384)
        want = 16384;
    if (s->cap - s->len < want) {
        uint8_t *more = realloc(s->buf, s->len + want);
        if (!more) {
            *b = uv_buf_init(NULL, 0); /* UV_ENOBUFS: the stream ends */
            return;
        }
        s->buf = more;
        s->cap = s->len + want;
    }
    *b = uv_buf_init((char *)s->buf + s->len, (unsigned)(s->cap - s->len));
}

/* The complete frames in s's buffer: events to the watch. False when the stream must end (a
 * bad frame, or its member ended the watch). */
static bool take_frames(stream_t *s)
{
    size_t off = 0;
    bool ok = true;
    while (ok && s->len - off >= GKV_FRAME_PREFIX) {
        uint32_t flen = gkv_frame_get_len(s->buf + off);
        if (gkv_frame_check_len(flen, GKV_MAX_HEADER)) {
            ok = false;
            break;
        }
        if (s->len - off < GKV_FRAME_PREFIX + flen)
            break;
        gkv_response_t r;
        if (gkv_resp_decode(s->buf + off + GKV_FRAME_PREFIX, flen, &r) || r.payload_len ||
            r.status || !r.event) {
            ok = false; /* an OVERFLOW (or anything else) ends the stream */
            break;
        }
        s->w->fn(s->w->arg, (unsigned)r.event, r.key.p, r.key.len, r.size, r.seq, r.vversion,
                 s->node);
        off += GKV_FRAME_PREFIX + flen;
        if (!s->w) /* the watch ended while handling it (its watcher's bound) */
            return true;
    }
    memmove(s->buf, s->buf + off, s->len - off);
    s->len -= off;
    return ok;
}

static void on_read(uv_stream_t *h, ssize_t n, const uv_buf_t *b)
{
    (void)b;
    stream_t *s = h->data;
    if (n == 0)
        return;
    if (n < 0 || !s->w) {
        if (s->w)
            GKV_DEBUG("cluster watch: the stream from %s ended (%s)", s->node,
                      uv_strerror((int)n));
        stream_end(s);
        return;
    }
    s->len += (size_t)n;
    if (!take_frames(s) && s->w) {
        GKV_WARN("cluster watch: %s sent a frame that is no event: its stream ends", s->node);
        stream_end(s);
    }
}

static void run_hand(gkv_job_t *job)
{
    hand_t *j = (hand_t *)job;
    gkv_peer_conn_t *c;
    j->fd = -1;
    if (gkv_peer_take(&j->cl->peers, j->s->addr, &c))
        return;
    gkv_peer_begin(c, GKV_OP_WATCH, 0, NULL, 0);
    gkv_wr_bin(&c->wr, GKV_F_PREFIX, j->plen ? j->prefix : (const uint8_t *)"", j->plen);
    gkv_wr_uint(&c->wr, GKV_F_LOCAL, 1);
    gkv_response_t r;
    int rc = gkv_peer_call(c, NULL, 0, &r);
    if (!rc && !r.status && !r.payload_len) {
        j->fd = c->fd; /* the loop reads it from now on */
        c->fd = -1;
    }
    gkv_peer_give(&j->cl->peers, c, false);
}

static void hand_done(gkv_job_t *job)
{
    hand_t *j = (hand_t *)job;
    stream_t *s = j->s;
    s->connecting = false;
    if (!s->w || j->fd < 0) {
        if (s->w)
            GKV_DEBUG("cluster watch: no stream from %s", s->node);
        if (j->fd >= 0)
            close(j->fd);
        stream_end(s);
    } else if (uv_tcp_init(j->cl->loop, &s->h)) {
        close(j->fd);
        stream_end(s);
    } else {
        s->h.data = s;
        s->reading = true; /* h is open from here: it ends through uv_close */
        if (uv_tcp_open(&s->h, j->fd)) {
            close(j->fd);
            stream_end(s);
        } else if (uv_read_start((uv_stream_t *)&s->h, on_alloc, on_read)) {
            stream_end(s);
        }
    }
    free(j->prefix);
    free(j);
}

/* A stream from member m for w, its handshake started. */
static void stream_open(gkv_cl_watch_t *w, const gkv_member_t *m)
{
    stream_t *s = calloc(1, sizeof(*s));
    hand_t *j = calloc(1, sizeof(*j));
    if (!s || !j || (w->plen && !(j->prefix = malloc(w->plen)))) {
        free(s);
        free(j);
        GKV_WARN("cluster watch: out of memory for a stream from %s", m->name);
        return;
    }
    s->w = w;
    snprintf(s->node, sizeof(s->node), "%s", m->name);
    snprintf(s->addr, sizeof(s->addr), "%s", m->advertise);
    s->inc = m->incarnation;
    s->connecting = true;
    s->next = w->streams;
    w->streams = s;
    if (w->plen)
        memcpy(j->prefix, w->prefix, w->plen);
    j->plen = w->plen;
    j->cl = w->cl;
    j->s = s;
    j->job.run = run_hand;
    j->job.done = hand_done;
    gkv_workers_submit(&w->cl->origin, &j->job);
}

/* w's streams follow the members in force: one per other member (at its incarnation). */
static void follow(gkv_cl_watch_t *w)
{
    gkv_cluster_t *cl = w->cl;
    for (stream_t *s = w->streams, *next; s; s = next) {
        next = s->next;
        const gkv_member_t *m = gkv_cl_member(cl, s->node, strlen(s->node));
        if (!m || m->incarnation != s->inc)
            stream_end(s);
    }
    for (size_t i = 0; i < cl->members.n; i++) {
        const gkv_member_t *m = &cl->members.m[i];
        if ((long)i == cl->self)
            continue;
        stream_t *s = w->streams;
        while (s && (strcmp(s->node, m->name) || s->inc != m->incarnation))
            s = s->next;
        if (!s)
            stream_open(w, m);
    }
}

gkv_cl_watch_t *gkv_cluster_watch_open(gkv_cluster_t *cl, const uint8_t *prefix, size_t plen,
                                       gkv_cl_event_fn fn, void *arg)
{
    if (!cl->on)
        return NULL;
    gkv_cl_watch_t *w = calloc(1, sizeof(*w) + plen + 1);
    if (!w)
        return NULL;
    w->cl = cl;
    w->fn = fn;
    w->arg = arg;
    w->plen = plen;
    if (getrandom(w->seed, sizeof(w->seed), GRND_NONBLOCK) != (ssize_t)sizeof(w->seed))
        memcpy(w->seed, &w, sizeof(w)); /* not a secret: a key pushed out costs one late event */
    if (plen)
        memcpy(w->prefix, prefix, plen);
    w->next = cl->watches;
    cl->watches = w;
    follow(w);
    return w;
}

void gkv_cluster_watch_close(gkv_cluster_t *cl, gkv_cl_watch_t *w)
{
    if (!w)
        return;
    for (gkv_cl_watch_t **p = &cl->watches; *p; p = &(*p)->next)
        if (*p == w) {
            *p = w->next;
            break;
        }
    while (w->streams)
        stream_end(w->streams);
    if (w->recent) {
        free(w->recent->slot);
        free(w->recent->ring);
        free(w->recent);
    }
    free(w);
}

/* The slot of hash h in r: where it is, or the free slot where it would go. */
static size_t recent_slot(const recent_t *r, uint64_t h)
{
    size_t mask = 2 * r->cap - 1, i = h & mask;
    while (r->slot[i].hash && r->slot[i].hash != h)
        i = (i + 1) & mask;
    return i;
}

/* Forgets hash h (there): the slots after it move back to where a lookup finds them. */
static void recent_forget(recent_t *r, uint64_t h)
{
    size_t mask = 2 * r->cap - 1, i = recent_slot(r, h);
    r->slot[i].hash = 0;
    for (size_t j = (i + 1) & mask; r->slot[j].hash; j = (j + 1) & mask) {
        size_t home = r->slot[j].hash & mask;
        /* j's entry may fill the hole at i unless its home lies in (i, j]. */
        if (((j - home) & mask) >= ((j - i) & mask)) {
            r->slot[i] = r->slot[j];
            r->slot[j].hash = 0;
            i = j;
        }
    }
}

/* r with room for cap keys (its keys kept, in their order). False: out of memory, r as it
 * was. Only while the ring has not wrapped (oldest 0). */
static bool recent_grow(recent_t *r, size_t cap)
{
    recent_slot_t *slot = calloc(2 * cap, sizeof(*slot));
    uint64_t *ring = slot ? realloc(r->ring, cap * sizeof(*ring)) : NULL;
    if (!ring) {
        free(slot);
        return false;
    }
    recent_slot_t *old = r->slot;
    size_t old_slots = 2 * r->cap;
    r->slot = slot;
    r->ring = ring;
    r->cap = cap;
    for (size_t i = 0; i < old_slots; i++)
        if (old[i].hash)
            r->slot[recent_slot(r, old[i].hash)] = old[i];
    free(old);
    return true;
}

bool gkv_cluster_watch_fresh(gkv_cl_watch_t *w, unsigned kind, const uint8_t *key, size_t klen,
                             uint64_t version)
{
    if (!w || !version)
        return true;
    if (!w->recent) {
        recent_t *r = calloc(1, sizeof(*r));
        if (!r || !recent_grow(r, RECENT_FIRST)) {
            free(r);
            return true; /* without the table, events go as they come */
        }
        w->recent = r;
    }
    recent_t *r = w->recent;
    uint64_t h = gkv_siphash(key, klen, w->seed);
    h += !h;
    size_t i = recent_slot(r, h);
    if (r->slot[i].hash) {
        /* Older than the key's last event delivered, or a set of the version delivered (a
         * removal of that version comes after its set, from the same member). */
        if (version < r->slot[i].version ||
            (version == r->slot[i].version && kind == GKV_EVENT_SET)) {
            w->cl->watch_stale++;
            return false;
        }
        r->slot[i].version = version;
        return true;
    }
    if (r->n == r->cap && r->cap < GKV_CL_WATCH_RECENT && !r->oldest &&
        recent_grow(r, 2 * r->cap))
        i = recent_slot(r, h);
    if (r->n == r->cap) { /* the oldest key leaves for it */
        recent_forget(r, r->ring[r->oldest]);
        r->ring[r->oldest] = h;
        r->oldest = (r->oldest + 1) % r->cap;
        i = recent_slot(r, h);
    } else {
        r->ring[r->n++] = h;
    }
    r->slot[i].hash = h;
    r->slot[i].version = version;
    return true;
}

void gkv_cl_watches_follow(gkv_cluster_t *cl)
{
    for (gkv_cl_watch_t *w = cl->watches; w; w = w->next)
        follow(w);
}

void gkv_cluster_watch_counts(const gkv_cluster_t *cl, uint64_t *watches, uint64_t *streams)
{
    *watches = *streams = 0;
    for (const gkv_cl_watch_t *w = cl->watches; w; w = w->next) {
        ++*watches;
        for (const stream_t *s = w->streams; s; s = s->next)
            *streams += s->reading;
    }
}
