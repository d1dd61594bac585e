/* watch.c: connections that watch a prefix; see watch.h. */
#include "watch.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn_impl.h"
#include "error.h"
#include "log.h"

/* One connection's watch: in the net's list of watches (the order they began). */
struct gkv_watch {
    gkv_conn_t *c;
    gkv_cl_watch_t *span; /* a WATCH spanning the cluster: the other members' streams */
    struct gkv_watch *prev, *next;
    uint64_t id;   /* the WATCH request's: every event frame carries it */
    uint64_t sent; /* events written */
    size_t plen;
    uint8_t prefix[];
};

struct gkv_watches {
    gkv_net_t *net;
    struct gkv_watch *head;
    uint64_t watching, events, cut;
};

/* w leaves the list and is freed; c watches no more. */
static void drop(gkv_watches_t *ws, struct gkv_watch *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else
        ws->head = w->next;
    if (w->next)
        w->next->prev = w->prev;
    w->c->watch = NULL;
    if (w->span)
        gkv_cluster_watch_close(ws->net->cluster, w->span);
    ws->watching--;
    ws->net->store->listeners--;
    free(w);
}

/* c's output goes out on the next loop turn (never from inside another connection's request). */
static void push_later(gkv_conn_t *c)
{
    if (!c->yielded && !c->closing)
        gkv_net_yield(c->net, c);
}

/* An event frame for w (node: the member it happened on, NULL for this node; version: the
 * key's cluster version, 0 for none), or the end of w's watch when its connection leaves more
 * than the bound untaken. */
static void emit(gkv_watches_t *ws, struct gkv_watch *w, unsigned kind, const uint8_t *key,
                 size_t klen, uint64_t size, uint64_t seq, uint64_t version, const char *node)
{
    gkv_conn_t *c = w->c;
    if (c->snd.pending + c->out.sb.size > ws->net->set.watch_buffer) {
        char why[160];
        snprintf(why, sizeof(why),
                 "the watcher left over %llu bytes of events untaken: the watch ended "
                 "after seq %llu",
                 (unsigned long long)ws->net->set.watch_buffer, (unsigned long long)(seq - 1));
        gkv_reply_error(&c->out, w->id, GKV_EOVERFLOW, why);
        GKV_INFO("conn %llu: %s", (unsigned long long)c->id, why);
        ws->cut++;
        drop(ws, w);
        push_later(c);
        return;
    }
    gkv_wr_t *o = &c->out;
    gkv_wr_begin(o);
    gkv_wr_uint(o, GKV_F_ID, w->id);
    gkv_wr_int(o, GKV_F_STATUS, 0);
    gkv_wr_uint(o, GKV_F_EVENT, kind);
    gkv_wr_bin(o, GKV_F_KEY, key, key ? klen : 0);
    gkv_wr_uint(o, GKV_F_SIZE, size);
    gkv_wr_uint(o, GKV_F_SEQ, seq);
    if (version)
        gkv_wr_uint(o, GKV_F_VVERSION, version);
    if (node)
        gkv_wr_str(o, GKV_F_NODE, node);
    (void)gkv_wr_end(o); /* a failed buffer closes c at its flush */
    w->sent++;
    ws->events++;
    push_later(c);
}

/* Under the prefix of w (every watch for a FLUSH). */
static bool under(const struct gkv_watch *w, unsigned kind, const uint8_t *key, size_t klen)
{
    return kind == GKV_EVENT_FLUSH || (klen >= w->plen && memcmp(key, w->prefix, w->plen) == 0);
}

void gkv_watches_changed(gkv_net_t *net, unsigned kind, const uint8_t *key, size_t klen,
                         uint64_t size, uint64_t seq, uint64_t version)
{
    gkv_watches_t *ws = net->watches;
    if (!ws)
        return;
    for (struct gkv_watch *w = ws->head, *next; w; w = next) {
        next = w->next;
        if (!w->c->closing && under(w, kind, key, klen) &&
            (!w->span || gkv_cluster_watch_fresh(w->span, kind, key, klen, version)))
            emit(ws, w, kind, key, klen, size, seq, version, NULL);
    }
}

/* An event of another member for a watch spanning the cluster (gkv_cl_event_fn): delivered
 * unless an event of a newer version of its key was (a superseded owner's, late). */
static void member_event(void *arg, unsigned kind, const uint8_t *key, size_t klen,
                         uint64_t size, uint64_t seq, uint64_t version, const char *node)
{
    struct gkv_watch *w = arg;
    if (!w->c->closing && under(w, kind, key, klen) &&
        gkv_cluster_watch_fresh(w->span, kind, key, klen, version))
        emit(w->c->net->watches, w, kind, key, klen, size, seq, version, node);
}

int gkv_watches_init(gkv_net_t *net)
{
    gkv_watches_t *ws = calloc(1, sizeof(*ws));
    if (!ws)
        return GKV_ENOMEM;
    ws->net = net;
    net->watches = ws;
    return 0;
}

void gkv_watches_free(gkv_net_t *net)
{
    gkv_watches_t *ws = net->watches;
    if (!ws)
        return;
    while (ws->head)
        drop(ws, ws->head);
    free(ws);
    net->watches = NULL;
}

int gkv_watch_start(gkv_conn_t *c, const gkv_request_t *req, bool span)
{
    gkv_watches_t *ws = c->net->watches;
    int rc = 0;
    const char *why = NULL;
    struct gkv_watch *w = NULL;
    if (c->watch) {
        rc = GKV_EINVAL;
        why = "this connection watches already: UNWATCH first";
    } else if (!ws || !(w = malloc(sizeof(*w) + req->prefix.len + 1))) {
        rc = GKV_ENOMEM;
        why = "out of host memory for the watch";
    }
    if (rc) {
        gkv_reply_error(&c->out, req->id, rc, why);
        return rc;
    }
    *w = (struct gkv_watch){.c = c, .id = req->id, .plen = req->prefix.len, .next = ws->head};
    if (req->prefix.len)
        memcpy(w->prefix, req->prefix.p, req->prefix.len);
    if (ws->head)
        ws->head->prev = w;
    ws->head = w;
    c->watch = w;
    ws->watching++;
    c->net->store->listeners++;
    if (span && !(w->span = gkv_cluster_watch_open(c->net->cluster, req->prefix.p,
                                                   req->prefix.len, member_event, w))) {
        drop(ws, w);
        gkv_reply_error(&c->out, req->id, GKV_ENOMEM, "out of host memory for the watch");
        return GKV_ENOMEM;
    }
    gkv_reply_ok(&c->out, req->id);
    gkv_wr_uint(&c->out, GKV_F_SEQ, c->net->store->changes);
    (void)gkv_wr_end(&c->out);
    return 0;
}

void gkv_watch_stop(gkv_conn_t *c, uint64_t id)
{
    uint64_t sent = 0;
    if (c->watch) {
        sent = c->watch->sent;
        drop(c->net->watches, c->watch);
    }
    gkv_reply_ok(&c->out, id);
    gkv_wr_uint(&c->out, GKV_F_COUNT, sent);
    (void)gkv_wr_end(&c->out);
}

void gkv_watch_cancel(gkv_conn_t *c)
{
    if (c->watch)
        drop(c->net->watches, c->watch);
}

void gkv_watches_stats(const gkv_net_t *net, uint64_t *watching, uint64_t *events, uint64_t *cut)
{
    const gkv_watches_t *ws = net->watches;
    *watching = ws ? ws->watching : 0;
    *events = ws ? ws->events : 0;
    *cut = ws ? ws->cut : 0;
}
