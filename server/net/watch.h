/* watch.h: connections that watch a prefix (WATCH, PROTOCOL.md "Watching a prefix"). Once its
 * WATCH is answered, a connection gets an event frame for every change of a key under its
 * prefix that the store reports (store.h: changed): set, delete, expire, evict, flush, in the
 * order the daemon made them, each with the store's change number (seq). While it watches it
 * takes only UNWATCH and PING (request.c refuses the rest). Events go into its reply buffer and
 * out on the next loop turn; one that would leave more than --watch-buffer bytes untaken
 * ends the watch instead: an OVERFLOW frame, and the connection is an ordinary one again (its
 * memory stays under the bound plus one event). */
#ifndef GKV_NET_WATCH_H
#define GKV_NET_WATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "message.h"

typedef struct gkv_conn gkv_conn_t;
typedef struct gkv_net gkv_net_t;
typedef struct gkv_watches gkv_watches_t;

/* Sets up net's watches. 0 or GKV_ENOMEM. */
int gkv_watches_init(gkv_net_t *net);
/* After the loop ran out (no connection watches any more). */
void gkv_watches_free(gkv_net_t *net);
/* WATCH (req: its id and prefix) on c: writes the reply (status 0 and seq, or INVAL when c
 * watches already, NOMEM) into c's output. span: the watch spans the cluster (the other
 * members' events come through gkv_cluster_watch_open's streams, each with its node's name).
 * Returns 0 or the error code written. */
int gkv_watch_start(gkv_conn_t *c, const gkv_request_t *req, bool span);
/* UNWATCH (id) on c: ends its watch, if any, and writes the reply (count: the events the
 * watch sent). */
void gkv_watch_stop(gkv_conn_t *c, uint64_t id);
/* The store's change (store.h: changed, through the net): an event frame for each watch whose
 * prefix the key is under (every watch for a FLUSH). version: the key's cluster version (0:
 * none, a daemon alone), which a watch spanning the cluster keeps in order. */
void gkv_watches_changed(gkv_net_t *net, unsigned kind, const uint8_t *key, size_t klen,
                         uint64_t size, uint64_t seq, uint64_t version);
/* c closes: its watch, if any, ends without a frame. */
void gkv_watch_cancel(gkv_conn_t *c);
/* Connections watching now; events sent and watches ended for a slow reader, in all. */
void gkv_watches_stats(const gkv_net_t *net, uint64_t *watching, uint64_t *events,
                       uint64_t *cut);

#endif
