/* metrics.c: per-command latency histograms; see metrics.h. */
#include "metrics.h"

static const uint64_t bounds_us[GKV_LATENCY_BUCKETS - 1] = {GKV_LATENCY_BOUNDS};

void gkv_metrics_record(gkv_metrics_t *m, uint64_t op, uint64_t ns, int failed)
{
    gkv_cmd_stats_t *s = &m->cmd[op < GKV_OP_MAX ? op : 0];
    int b = 0; /* the first bucket whose bound is >= ns (Prometheus' "le") */
    while (b < GKV_LATENCY_BUCKETS - 1 && ns > bounds_us[b] * 1000)
        b++;
    s->calls++;
    s->errors += failed != 0;
    s->buckets[b]++;
    s->sum_ns += ns;
}
