/* metrics_http.h: the --metrics-listen endpoint, a minimal HTTP/1.1 server for Prometheus:
 * GET (or HEAD) /metrics answers the text of gkv_metrics_render, then the connection closes.
 * Bounded like the client side: at most GKV_HTTP_CONNS connections, a request of at most
 * GKV_HTTP_REQUEST bytes, and GKV_HTTP_DEADLINE_MS for the whole exchange, after which the
 * connection is dropped whatever it is doing. With --auth-token-file every request needs
 * "Authorization: Bearer TOKEN". */
#ifndef GKV_SERVER_METRICS_HTTP_H
#define GKV_SERVER_METRICS_HTTP_H

#include <stdint.h>

#include "server.h"

#define GKV_HTTP_CONNS 16
#define GKV_HTTP_REQUEST 8192
#define GKV_HTTP_DEADLINE_MS 10000

/* Listens on s->cfg.metrics_listen (the caller checked that it is set). Returns 0, GKV_EINVAL
 * or GKV_ESYS with err (cap bytes) set; s->metrics_open says whether the listener must be
 * closed. */
int gkv_metrics_http_listen(gkv_server_t *s, char *err, size_t cap);
/* Stops listening and drops every metrics connection (shutdown). */
void gkv_metrics_http_close(gkv_server_t *s);
/* The sweep: drops the connections past their deadline at now (uv_now). */
void gkv_metrics_http_sweep(gkv_server_t *s, uint64_t now);

#endif
