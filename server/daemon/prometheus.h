/* prometheus.h: the Prometheus text exposition of every counter and gauge the daemon and its
 * layers keep (prometheus.c). The same text answers INFO with flags GKV_INFO_PROMETHEUS and GET
 * /metrics on --metrics-listen (metrics_http.c). */
#ifndef GKV_DAEMON_PROMETHEUS_H
#define GKV_DAEMON_PROMETHEUS_H

#include <stddef.h>
#include <stdint.h>

#include "metrics.h"

/* A growing text buffer. */
typedef struct {
    char *p;
    size_t len, cap;
    int failed; /* an allocation failed: p holds what fitted before */
} gkv_text_t;

/* Appends printf-style text. */
void gkv_text_printf(gkv_text_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void gkv_text_free(gkv_text_t *t);

struct gkv_server;
/* Appends srv's metrics in the Prometheus text format (version 0.0.4) to t. */
void gkv_metrics_render(const struct gkv_server *srv, gkv_text_t *t);

#endif
