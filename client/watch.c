/* watch.c: watching a prefix (gkv_watch, PROTOCOL.md "Watching a prefix"): after WATCH's
 * reply, every frame that carries the WATCH's id is an event (or the OVERFLOW that ended the
 * watch); UNWATCH's reply, with its own id, comes after the last event. */
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "commands.h"
#include "error.h"

/* WATCH (local: this node's own changes only). */
static int watch(gkv_client_t *c, const void *prefix, size_t plen, bool local, uint64_t *seq)
{
    if (c->watch_id)
        return GKV_EINVAL;
    if (!prefix && plen)
        return GKV_EINVAL;
    if (plen > c->info.max_key)
        return GKV_ETOOBIG;
    int rc = gkv__cache_flush(c);
    if (rc)
        return rc;
    gkv__begin(c, GKV_OP_WATCH);
    gkv_wr_bin(&c->wr, GKV_F_PREFIX, plen ? prefix : "", plen);
    if (local)
        gkv_wr_uint(&c->wr, GKV_F_LOCAL, 1);
    if ((rc = gkv__send(c, NULL, 0)) || (rc = gkv__recv(c)))
        return rc;
    c->watch_id = c->next_id;
    if (seq)
        *seq = c->resp.seq;
    return 0;
}

int gkv_watch(gkv_client_t *c, const void *prefix, size_t plen, uint64_t *seq)
{
    return watch(c, prefix, plen, false, seq);
}

int gkv_watch_local(gkv_client_t *c, const void *prefix, size_t plen, uint64_t *seq)
{
    return watch(c, prefix, plen, true, seq);
}

/* Waits up to timeout_ms (-1: forever) for c's socket to have bytes. 0, or GKV_ETIMEDOUT. */
static int readable(gkv_client_t *c, int timeout_ms)
{
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    for (;;) {
        int n = poll(&p, 1, timeout_ms);
        if (n > 0)
            return 0;
        if (n == 0)
            return GKV_ETIMEDOUT;
        if (errno != EINTR)
            return gkv__break(c, GKV_ESYS);
    }
}

/* Keeps the event's key in c (the header buffer is reused by the next frame). */
static int keep_key(gkv_client_t *c, gkv_event_t *ev)
{
    size_t n = c->resp.key.len;
    if (n > c->ev_key_cap) {
        uint8_t *k = realloc(c->ev_key, n);
        if (!k)
            return gkv__break(c, GKV_ENOMEM);
        c->ev_key = k;
        c->ev_key_cap = n;
    }
    if (n)
        memcpy(c->ev_key, c->resp.key.p, n);
    ev->key = c->ev_key ? (const void *)c->ev_key : (const void *)"";
    ev->klen = n;
    return 0;
}

int gkv_watch_next(gkv_client_t *c, gkv_event_t *ev, int timeout_ms)
{
    if (!c->watch_id)
        return GKV_EINVAL;
    if (c->broken)
        return GKV_ECLOSED;
    int rc = readable(c, timeout_ms < 0 ? -1 : timeout_ms);
    if (rc || (rc = gkv__recv_any(c)))
        return rc;
    if (c->resp.id != c->watch_id || c->resp.payload_len)
        return gkv__break(c, GKV_EPROTO);
    if (c->resp.status < 0) { /* OVERFLOW: the daemon ended the watch */
        c->watch_id = 0;
        return (int)c->resp.status;
    }
    if (c->resp.event < GKV_EVENT_SET || c->resp.event > GKV_EVENT_FLUSH)
        return gkv__break(c, GKV_EPROTO);
    if ((rc = keep_key(c, ev)))
        return rc;
    size_t nl = c->resp.node.len < sizeof(c->ev_node) ? c->resp.node.len : sizeof(c->ev_node) - 1;
    if (nl)
        memcpy(c->ev_node, c->resp.node.p, nl);
    c->ev_node[nl] = 0;
    c->ev_version = c->resp.vversion;
    ev->kind = (gkv_event_kind_t)c->resp.event;
    ev->size = c->resp.size;
    ev->seq = c->resp.seq;
    return 0;
}

const char *gkv_watch_node(const gkv_client_t *c)
{
    return c->ev_node;
}

uint64_t gkv_watch_version(const gkv_client_t *c)
{
    return c->ev_version;
}

int gkv_unwatch(gkv_client_t *c)
{
    uint64_t wid = c->watch_id;
    if (!wid)
        return 0;
    c->watch_id = 0; /* lets UNWATCH go out */
    gkv__begin(c, GKV_OP_UNWATCH);
    int rc = gkv__send(c, NULL, 0);
    /* Events (and an OVERFLOW) sent before UNWATCH's reply are dropped. */
    while (rc == 0 && (rc = gkv__recv_any(c)) == 0 && c->resp.id == wid && !c->resp.payload_len)
        ;
    if (rc)
        return rc;
    if (c->resp.id != c->next_id || c->resp.payload_len)
        return gkv__break(c, GKV_EPROTO);
    return (int)c->resp.status;
}
