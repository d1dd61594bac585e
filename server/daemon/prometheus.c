/* prometheus.c: the Prometheus text exposition (format 0.0.4) of the daemon's counters and
 * gauges. Every figure comes from the same fields INFO reads. */
#include "prometheus.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "journal.h"
#include "procstat.h"
#include "server.h"
#include "tier_pin.h"
#include "version.h"

static const uint64_t bounds_us[GKV_LATENCY_BUCKETS - 1] = {GKV_LATENCY_BOUNDS};

void gkv_text_printf(gkv_text_t *t, const char *fmt, ...)
{
    if (t->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = t->cap - t->len;
        int n = vsnprintf(t->p ? t->p + t->len : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->failed = 1;
            return;
        }
        if ((size_t)n < room) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = t->cap ? t->cap : 4096;
        while (cap - t->len <= (size_t)n)
            cap *= 2;
        char *p = realloc(t->p, cap);
        if (!p) {
            t->failed = 1;
            if (t->p)
                t->p[t->len] = 0;
            return;
        }
        t->p = p;
        t->cap = cap;
    }
}

void gkv_text_free(gkv_text_t *t)
{
    free(t->p);
    memset(t, 0, sizeof(*t));
}

/* A label value with \, " and newlines escaped, in buf (cap bytes, truncated to fit). */
static const char *label(const char *v, char *buf, size_t cap)
{
    size_t o = 0;
    for (; *v && o + 3 < cap; v++) {
        if (*v == '\\' || *v == '"' || *v == '\n') {
            buf[o++] = '\\';
            buf[o++] = *v == '\n' ? 'n' : *v;
        } else {
            buf[o++] = *v;
        }
    }
    buf[o] = 0;
    return buf;
}

static void family(gkv_text_t *t, const char *name, const char *type, const char *help)
{
    gkv_text_printf(t, "# HELP gpukv_%s %s\n# TYPE gpukv_%s %s\n", name, help, name, type);
}

/* One sample of family name with one label. */
static void labelled(gkv_text_t *t, const char *name, const char *label, const char *value,
                     uint64_t v)
{
    gkv_text_printf(t, "gpukv_%s{%s=\"%s\"} %llu\n", name, label, value, (unsigned long long)v);
}

/* One sample without labels. */
static void one(gkv_text_t *t, const char *name, const char *type, const char *help, uint64_t v)
{
    family(t, name, type, help);
    gkv_text_printf(t, "gpukv_%s %llu\n", name, (unsigned long long)v);
}

static const char *command_name(unsigned op)
{
    const char *n = op ? gkv_op_name(op) : NULL;
    return n ? n : "unknown";
}

static void render_commands(const gkv_metrics_t *m, gkv_text_t *t)
{
    family(t, "commands_total", "counter", "Requests handled, by command.");
    for (unsigned op = 0; op < GKV_OP_MAX; op++)
        if (op == 0 ? m->cmd[0].calls != 0 : gkv_op_name(op) != NULL)
            labelled(t, "commands_total", "command", command_name(op), m->cmd[op].calls);
    family(t, "command_errors_total", "counter", "Requests answered with an error, by command.");
    for (unsigned op = 0; op < GKV_OP_MAX; op++)
        if (op == 0 ? m->cmd[0].calls != 0 : gkv_op_name(op) != NULL)
            labelled(t, "command_errors_total", "command", command_name(op), m->cmd[op].errors);
    family(t, "command_duration_seconds", "histogram",
           "Server time per request: from its decoded header to its reply queued (SET: to the "
           "commit of its payload; a GET sent through staging: to its last byte handed to the "
           "socket).");
    for (unsigned op = 0; op < GKV_OP_MAX; op++) {
        const gkv_cmd_stats_t *s = &m->cmd[op];
        if (!s->calls)
            continue;
        const char *name = command_name(op);
        uint64_t cum = 0;
        for (int b = 0; b < GKV_LATENCY_BUCKETS; b++) {
            cum += s->buckets[b];
            if (b < GKV_LATENCY_BUCKETS - 1)
                gkv_text_printf(t,
                                "gpukv_command_duration_seconds_bucket{command=\"%s\",le=\"%g\"} "
                                "%llu\n",
                                name, (double)bounds_us[b] / 1e6, (unsigned long long)cum);
            else
                gkv_text_printf(t,
                                "gpukv_command_duration_seconds_bucket{command=\"%s\",le=\"+Inf\"}"
                                " %llu\n",
                                name, (unsigned long long)cum);
        }
        gkv_text_printf(t, "gpukv_command_duration_seconds_sum{command=\"%s\"} %.9f\n", name,
                        (double)s->sum_ns / 1e9);
        labelled(t, "command_duration_seconds_count", "command", name, s->calls);
    }
}

/* The labels of the store's device i: backend, CUDA ordinal, GPU UUID, into buf. */
static const char *device_labels(const gkv_server_t *srv, unsigned i, char *buf, size_t cap)
{
    const gkv_backend_t *be = srv->devs.dev[i].be;
    char uuid[112];
    snprintf(buf, cap, "backend=\"%s\",device=\"%d\",gpu_uuid=\"%s\"", be->name, be->device,
             label(be->gpu_uuid, uuid, sizeof(uuid)));
    return buf;
}

static void render_memory(const gkv_server_t *srv, gkv_text_t *t)
{
    char gpu[160], dev[160];
    family(t, "build_info", "gauge", "Always 1: the version, backend and GPU of this gpukvd.");
    for (unsigned i = 0; i < srv->devs.n; i++)
        gkv_text_printf(t, "gpukv_build_info{version=\"%s\",%s,gpu_name=\"%s\"} 1\n",
                        GKV_VERSION_STRING, device_labels(srv, i, dev, sizeof(dev)),
                        label(srv->devs.dev[i].be->gpu_name, gpu, sizeof(gpu)));
    static const struct {
        const char *name, *help;
    } per_device[] = {
        {"memory_used_bytes", "Bytes of values, published or being written."},
        {"memory_limit_bytes", "--maxmemory: the most bytes values may take."},
        {"device_memory_bytes", "Total memory of the device (or RAM on the host backend)."},
        {"kept_export_bytes", "Freed exported allocations kept for reuse."},
        {"held_imports", "Holds on allocations by client processes that keep their imports."},
    };
    for (size_t f = 0; f < sizeof(per_device) / sizeof(per_device[0]); f++) {
        family(t, per_device[f].name, "gauge", per_device[f].help);
        for (unsigned i = 0; i < srv->devs.n; i++) {
            const gkv_backend_t *be = srv->devs.dev[i].be;
            const gkv_store_dev_t *d = &srv->store.dev[i];
            uint64_t v[] = {d->used, d->limit, be->device_total, be->kept_bytes, be->held};
            gkv_text_printf(t, "gpukv_%s{%s} %llu\n", per_device[f].name,
                            device_labels(srv, i, dev, sizeof(dev)), (unsigned long long)v[f]);
        }
    }
    one(t, "key_memory_bytes", "gauge", "Host bytes of keys, metadata and the index.",
        gkv_store_host_memory(&srv->store));
    one(t, "key_memory_limit_bytes", "gauge", "--maxmemory-keys.", srv->store.host_limit);
    one(t, "host_copy_bytes", "gauge", "Host bytes of small values' host copies and their table.",
        srv->store.hc.bytes);
    one(t, "host_copy_hits_total", "counter", "GETs answered from a host copy.",
        srv->store.hc.hits);
    const gkv_store_dev_t *tier = &srv->store.dev[GKV_DEV_HOST_TIER];
    const gkv_store_stats_t *ss = &srv->store.stats;
    one(t, "tier_host_used_bytes", "gauge", "Bytes of values in the host tier (--tier-host).",
        tier->used);
    one(t, "tier_host_limit_bytes", "gauge", "--tier-host (0: no host tier).", tier->limit);
    one(t, "tier_host_keys", "gauge", "Keys whose value is in the host tier.", tier->keys);
    one(t, "tier_host_locked_bytes", "gauge",
        "Bytes of the host tier page-locked for the GPUs' copies so far.",
        gkv_tier_pin_locked(srv->store.tier_pin));
    const gkv_store_dev_t *disk = &srv->store.dev[GKV_DEV_DISK_TIER];
    one(t, "tier_disk_used_bytes", "gauge", "Bytes of values in the disk tier (--tier-disk).",
        disk->used);
    one(t, "tier_disk_limit_bytes", "gauge", "--tier-disk-size (0: no disk tier).", disk->limit);
    one(t, "tier_disk_keys", "gauge", "Keys whose value is in the disk tier.", disk->keys);
    one(t, "tier_dropped_total", "counter",
        "Values dropped because their disk copy could not be read back.", ss->tier_dropped);
    one(t, "demoted_total", "counter", "Values moved one tier down (GPU to host, host to disk).", ss->demoted);
    one(t, "demoted_bytes_total", "counter", "Bytes moved one tier down.",
        ss->demoted_bytes);
    one(t, "promoted_total", "counter", "Values moved one tier up (to a GPU, or disk to host).",
        ss->promoted);
    one(t, "promoted_bytes_total", "counter", "Bytes moved one tier up.", ss->promoted_bytes);
    one(t, "demoted_to_host_bytes_total", "counter",
        "Bytes copied from a GPU to the host tier (with _microseconds: their throughput).",
        ss->down_host_bytes);
    one(t, "demoted_to_host_microseconds_total", "counter",
        "Time spent copying from a GPU to the host tier.", ss->down_host_us);
    one(t, "promoted_from_host_bytes_total", "counter",
        "Bytes copied from the host tier to a GPU.", ss->up_host_bytes);
    one(t, "promoted_from_host_microseconds_total", "counter",
        "Time spent copying from the host tier to a GPU.", ss->up_host_us);
    one(t, "demoted_to_disk_bytes_total", "counter",
        "Bytes copied to the disk tier (with _microseconds: their throughput).",
        ss->down_disk_bytes);
    one(t, "demoted_to_disk_microseconds_total", "counter",
        "Time spent copying to the disk tier.", ss->down_disk_us);
    one(t, "promoted_from_disk_bytes_total", "counter", "Bytes copied from the disk tier.",
        ss->up_disk_bytes);
    one(t, "promoted_from_disk_microseconds_total", "counter",
        "Time spent copying from the disk tier.", ss->up_disk_us);
    one(t, "promote_errors_total", "counter",
        "Reads of a value in a tier that no room could be made for above.", ss->promote_errors);
}

/* Snapshots and the fd store: what INFO's # Persistence says, for alerting on saves that stop
 * succeeding or a journal that grows. */
static void render_persistence(const gkv_server_t *srv, gkv_text_t *t)
{
    const gkv_snapshots_t *sn = &srv->snapshots;
    const gkv_fdstore_t *f = &srv->fdstore;
    uint64_t k, kt, b, bt;
    one(t, "snapshot_saving", "gauge", "1 while a SAVE writes a snapshot.",
        gkv_snapshot_progress(sn, &k, &kt, &b, &bt));
    family(t, "snapshot_saves_total", "counter", "SAVEs finished, by result.");
    labelled(t, "snapshot_saves_total", "result", "ok", sn->saves);
    labelled(t, "snapshot_saves_total", "result", "failed", sn->failures);
    family(t, "snapshot_last_success_timestamp_seconds", "gauge",
           "Unix time of the last snapshot written whole (0: none yet).");
    gkv_text_printf(t, "gpukv_snapshot_last_success_timestamp_seconds %.3f\n",
                    (double)sn->last_unix_ms / 1000.0);
    one(t, "snapshot_last_failed", "gauge", "1 when the last SAVE failed.", sn->last_status != 0);
    family(t, "snapshot_last_duration_seconds", "gauge", "How long the last snapshot took.");
    gkv_text_printf(t, "gpukv_snapshot_last_duration_seconds %.3f\n", (double)sn->last_ms / 1000.0);
    one(t, "snapshot_last_keys", "gauge", "Keys in the last snapshot.", sn->last_keys);
    one(t, "snapshot_last_bytes", "gauge", "Value bytes in the last snapshot.", sn->last_bytes);
    const gkv_journal_t *j = f->journal;
    one(t, "fd_store_enabled", "gauge",
        "1 when values and the index journal are kept in the service manager's fd store.",
        j != NULL);
    one(t, "fd_store_journal_bytes", "gauge", "Bytes of the index journal.",
        j ? gkv_journal_used(j) : 0);
    one(t, "fd_store_journal_rewrites_total", "counter", "Journal rewrites (compactions).",
        f->rewrites);
    one(t, "fd_store_held_replies_total", "counter",
        "Replies held until the journal had committed their request.", f->commits.waits);
    one(t, "fd_store_limbo_bytes", "gauge",
        "Freed value bytes kept until the journal no longer names them.", srv->store.limbo_bytes);
    one(t, "fd_store_adopted_keys", "gauge", "Keys adopted from the fd store at start.",
        f->adopted_keys);
}

/* A cluster node's figures (INFO # Cluster), when --cluster is on. */
static void render_cluster(const gkv_server_t *srv, gkv_text_t *t)
{
    const gkv_cluster_t *cl = &srv->cluster;
    if (!cl->on)
        return;
    const gkv_cluster_stats_t *s = &cl->stats;
    gkv_membership_state_t st = {0};
    if (cl->ms)
        gkv_membership_state(cl->ms, &st);
    one(t, "cluster_members", "gauge", "Members in this node's view of its cluster.",
        cl->members.n);
    one(t, "cluster_etcd_reachable", "gauge", "1 when the last call to etcd answered.",
        st.reachable);
    one(t, "cluster_serving", "gauge",
        "1 while this node may serve (its lease surely lives, or every member vouched).",
        gkv_cluster_live(cl));
    one(t, "cluster_keys_owned", "gauge", "Values this node owns.",
        cl->rec.ncopies - cl->rec.nreplicas);
    one(t, "cluster_keys_homed", "gauge", "Keys whose record this node keeps.", cl->rec.nhomes);
    one(t, "cluster_replicas", "gauge", "Replicas of other nodes' values.", cl->rec.nreplicas);
    one(t, "cluster_remote_reads_total", "counter", "Reads that asked another node.",
        s->remote_reads);
    one(t, "cluster_pulled_bytes_total", "counter", "Value bytes fetched from owners.",
        s->bytes_pulled);
    one(t, "cluster_replica_hits_total", "counter", "Reads served from a confirmed replica.",
        s->replica_hits);
    one(t, "cluster_records_total", "counter", "Writes recorded at a home.", s->records);
    one(t, "cluster_unavailable_total", "counter", "Requests answered UNAVAILABLE.",
        s->unavailable);
    one(t, "cluster_fenced_requests_total", "counter",
        "Requests refused while this node could not confirm its membership.", s->fenced);
    one(t, "cluster_vouch_rounds_total", "counter",
        "Rounds in which every member vouched for this node (etcd unreachable).",
        s->vouch_rounds);
    one(t, "cluster_jobs_watched_total", "counter",
        "Cluster jobs a worker took while watching its queue (--busy-poll): no wake-up.",
        gkv_cluster_jobs_watched((gkv_cluster_t *)cl));
    one(t, "cluster_replicas_reclaimed_total", "counter",
        "Replicas dropped to make room for new values (before any eviction).",
        s->replicas_reclaimed);
    family(t, "cluster_read_misses_total", "counter",
           "Reads that found no value, by the path that decided it (INFO read_misses_*).");
    labelled(t, "cluster_read_misses_total", "path", "no_record", s->miss_no_record);
    labelled(t, "cluster_read_misses_total", "path", "gone_here", s->miss_gone_here);
    labelled(t, "cluster_read_misses_total", "path", "owned_gone", s->miss_owned_gone);
    labelled(t, "cluster_read_misses_total", "path", "home_said", s->miss_home_said);
    labelled(t, "cluster_read_misses_total", "path", "rounds", s->miss_rounds);
    one(t, "cluster_membership_joins_total", "counter",
        "Leases granted to this node (1 + rejoins after its lease expired).", st.joins);
    one(t, "cluster_member_list_changes_total", "counter", "Member lists taken.",
        cl->member_changes);
    /* The data plane (docs/cluster.md, "Data plane"). */
    gkv_plane_t *p = (gkv_plane_t *)&cl->plane;
    uint64_t nixl, tcp, in_use, retired;
    gkv_plane_counts(p, &nixl, &tcp, &in_use, &retired);
    one(t, "cluster_data_plane_nixl", "gauge", "1 when NIXL is loaded and its arenas registered.",
        p->on);
    family(t, "cluster_peers", "gauge", "Other members by the data plane reads from them take.");
    labelled(t, "cluster_peers", "plane", "nixl", nixl);
    labelled(t, "cluster_peers", "plane", "tcp", tcp);
    one(t, "cluster_nixl_reads_total", "counter", "Remote reads pulled through NIXL.", p->reads);
    one(t, "cluster_nixl_read_bytes_total", "counter", "Bytes pulled through NIXL.",
        p->read_bytes);
    one(t, "cluster_nixl_fallbacks_total", "counter",
        "Pulls through NIXL that failed and were read over TCP instead.", p->fallbacks);
    one(t, "cluster_nixl_sent_bytes_total", "counter", "Bytes this node wrote to readers.",
        p->bytes_sent);
    one(t, "cluster_nixl_slots_in_use", "gauge", "Transfer arena slots holding a chunk now.",
        in_use);
    one(t, "cluster_nixl_slots_retired", "gauge",
        "Arena slots never reused (a transfer into them could not be released).", retired);
}

/* The process_* series Prometheus client libraries export (no gpukv_ prefix: dashboards and
 * alerts written for any exporter read them). */
static void render_process(gkv_text_t *t)
{
    gkv_procstat_t p;
    if (!gkv_procstat_read(&p))
        return;
    gkv_text_printf(t,
                    "# HELP process_cpu_seconds_total Total user and system CPU time spent in "
                    "seconds.\n# TYPE process_cpu_seconds_total counter\n"
                    "process_cpu_seconds_total %.2f\n"
                    "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
                    "# TYPE process_resident_memory_bytes gauge\n"
                    "process_resident_memory_bytes %llu\n"
                    "# HELP process_virtual_memory_bytes Virtual memory size in bytes.\n"
                    "# TYPE process_virtual_memory_bytes gauge\n"
                    "process_virtual_memory_bytes %llu\n"
                    "# HELP process_open_fds Number of open file descriptors.\n"
                    "# TYPE process_open_fds gauge\nprocess_open_fds %llu\n"
                    "# HELP process_max_fds Maximum number of open file descriptors.\n"
                    "# TYPE process_max_fds gauge\nprocess_max_fds %llu\n"
                    "# HELP process_start_time_seconds Start time of the process since unix "
                    "epoch in seconds.\n# TYPE process_start_time_seconds gauge\n"
                    "process_start_time_seconds %.2f\n",
                    p.cpu_seconds, (unsigned long long)p.resident_bytes,
                    (unsigned long long)p.virtual_bytes, (unsigned long long)p.open_fds,
                    (unsigned long long)p.max_fds, p.start_time_seconds);
}

void gkv_metrics_render(const gkv_server_t *srv, gkv_text_t *t)
{
    const gkv_net_stats_t *ss = &srv->net.stats;
    const gkv_store_t *st = &srv->store;
    uint64_t waiting = gkv_net_waiting_stage(&srv->net);
    render_memory(srv, t);
    render_cluster(srv, t);
    one(t, "uptime_seconds", "gauge", "Seconds since gpukvd started.", gkv_server_uptime_s(srv));
    render_commands(&srv->net.metrics, t);
    one(t, "received_bytes_total", "counter", "Bytes read from clients.", ss->bytes_in);
    one(t, "sent_bytes_total", "counter", "Bytes written to clients.", ss->bytes_out);
    one(t, "keys", "gauge", "Keys stored.", gkv_index_count(st->ix));
    one(t, "values_alive", "gauge", "Values alive: under a key, being written or still leased.",
        st->entries);
    one(t, "keyspace_hits_total", "counter", "Lookups that found their key.", st->stats.hits);
    one(t, "keyspace_misses_total", "counter", "Lookups that did not.", st->stats.misses);
    one(t, "oom_errors_total", "counter", "Requests refused for want of memory.",
        st->stats.oom_errors);
    one(t, "evicted_keys_total", "counter", "Keys evicted to make room (--maxmemory-policy).",
        st->stats.evicted);
    one(t, "expired_keys_total", "counter", "Keys gone at their deadline (TTL).",
        st->stats.expired);
    one(t, "keys_with_ttl", "gauge", "Keys that have a deadline.", st->ttl.n);
    one(t, "leases", "gauge", "Zero-copy leases held by clients.", srv->lease_totals.leases);
    one(t, "leased_bytes", "gauge", "Bytes under zero-copy leases.", srv->lease_totals.bytes);
    one(t, "unsealed_creates", "gauge", "CREATEs not sealed or aborted yet.",
        srv->lease_totals.creates);
    one(t, "connections", "gauge", "Open client connections.", srv->net.nconns);
    one(t, "max_connections", "gauge", "--maxclients.", srv->cfg.maxclients);
    one(t, "connections_total", "counter", "Client connections accepted.", ss->total_connections);
    family(t, "rejected_connections_total", "counter",
           "Connections refused: over --maxclients (limit) or by --allow-uid/--allow-gid (peer).");
    labelled(t, "rejected_connections_total", "reason", "limit", ss->rejected_connections);
    labelled(t, "rejected_connections_total", "reason", "peer", ss->rejected_peers);
    one(t, "auth_failures_total", "counter", "HELLOs (and /metrics scrapes) with a wrong token.",
        ss->auth_failures + srv->http_auth_failures);
    one(t, "protocol_errors_total", "counter", "Connections closed for a malformed frame.",
        ss->protocol_errors);
    family(t, "timeouts_total", "counter",
           "Connections closed by --frame-timeout, --idle-timeout or --write-timeout.");
    labelled(t, "timeouts_total", "kind", "frame", ss->frame_timeouts);
    labelled(t, "timeouts_total", "kind", "idle", ss->idle_timeouts);
    labelled(t, "timeouts_total", "kind", "write", ss->write_timeouts);
    one(t, "staging_waits_total", "counter", "Transfers that queued for a staging buffer.",
        ss->staging_waits);
    one(t, "staging_waiting", "gauge", "Connections queued for a staging buffer now.", waiting);
    one(t, "staging_yields_total", "counter",
        "Staging buffers taken back from stalled clients for waiting ones.", ss->staging_yields);
    family(t, "staging_buffers", "gauge", "Staging buffers allocated, in use or idle.");
    labelled(t, "staging_buffers", "state", "in_use",
             (uint64_t)(srv->staging.ntotal - srv->staging.nfree));
    labelled(t, "staging_buffers", "state", "idle", (uint64_t)srv->staging.nfree);
    gkv_dev_totals_t dt = gkv_devices_totals(&srv->devs);
    one(t, "copy_batches_total", "counter", "Copy batches run for small values.", dt.batches);
    one(t, "batched_copies_total", "counter", "Small-value copies made in batches.", dt.pieces);
    one(t, "loop_stalls_total", "counter",
        "Loop turns busy 10 ms or more (no request answered meanwhile).", srv->lag.stalls);
    family(t, "loop_busy_max_seconds", "gauge", "The longest loop turn spent busy.");
    gkv_text_printf(t, "gpukv_loop_busy_max_seconds %.6f\n", (double)srv->lag.max_us / 1e6);
    one(t, "metrics_scrapes_total", "counter", "Answers given on --metrics-listen.",
        srv->metrics_scrapes);
    render_persistence(srv, t);
    render_process(t);
}
