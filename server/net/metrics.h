/* metrics.h: what connections count per command: calls, errors and a latency histogram
 * (recorded as each request ends; rendered by the daemon for INFO and /metrics). */
#ifndef GKV_NET_METRICS_H
#define GKV_NET_METRICS_H

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

#endif
