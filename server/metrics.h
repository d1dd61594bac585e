/* metrics.h: what gpukvd counts per command (calls, errors, a latency histogram) and the
 * Prometheus text exposition of every counter and gauge the server keeps (metrics.c). The same
 * text answers INFO with flags GKV_INFO_PROMETHEUS and GET /metrics on --metrics-listen
 * (metrics_http.c). */
#ifndef GKV_SERVER_METRICS_H
#define GKV_SERVER_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "commands.h"

/* Latency bucket upper bounds, in microseconds; one more bucket holds the rest (+Inf). */
#define GKV_LATENCY_BOUNDS                                                                         \
    5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000,   \
        1000000, 2500000, 5000000, 10000000
#define GKV_LATENCY_BUCKETS 21

/* One command's figures. Index 0 of the table counts requests with an unknown opcode. */
typedef struct {
    uint64_t calls, errors;
    uint64_t buckets[GKV_LATENCY_BUCKETS]; /* not cumulative: the render sums them */
    uint64_t sum_ns;
} gkv_cmd_stats_t;

typedef struct {
    gkv_cmd_stats_t cmd[GKV_OP_MAX];
} gkv_metrics_t;

/* A request of opcode op (unknown ones count as 0) ended after ns nanoseconds of server time;
 * failed: it was answered with an error. */
void gkv_metrics_record(gkv_metrics_t *m, uint64_t op, uint64_t ns, int failed);

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
