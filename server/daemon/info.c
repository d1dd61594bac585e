/* info.c: INFO: the daemon and its layers described section by section (the text Redis users
 * know, "# Section" then "name:value" lines), or the same figures as Prometheus text
 * (prometheus.c) with flags GKV_INFO_PROMETHEUS. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "admin.h"
#include "demoter.h"
#include "error.h"
#include "fence.h"
#include "keywait.h"
#include "prometheus.h"
#include "server.h"
#include "tier_pin.h"
#include "version.h"
#include "watch.h"

/* INFO with flags GKV_INFO_PROMETHEUS: the metrics text that --metrics-listen serves. */
static int info_prometheus(gkv_server_t *srv, const gkv_request_t *req, gkv_reply_t *rep)
{
    gkv_text_t t = {0};
    gkv_metrics_render(srv, &t);
    gkv_wr_t *w = rep->wr;
    int rc = t.failed ? GKV_ENOMEM : 0;
    if (!rc) {
        gkv_reply_ok(w, req->id);
        gkv_wr_uint(w, GKV_F_PAYLOAD, (uint64_t)t.len);
        rc = gkv_wr_end(w);
    }
    if (!rc && msgpack_sbuffer_write(&w->sb, t.p, t.len))
        rc = GKV_ENOMEM;
    gkv_text_free(&t);
    return rc;
}

/* INFO evictable_bytes, in O(1): the bytes under keys less the bytes under lease (leases of
 * values no longer under a key and transfers in flight make it an estimate; a walk over every
 * key would be exact but would hold the loop for as long as the keyspace is large). */
static uint64_t evictable_estimate(const gkv_server_t *srv)
{
    uint64_t linked = srv->store.linked_bytes, leased = srv->lease_totals.bytes;
    return linked > leased ? linked - leased : 0;
}

/* INFO's # GPUs: a line per device of the store (its ordinal in the daemon), at most cap bytes.
 * Returns the length, or -1 when it does not fit. */
static int info_gpus(const gkv_server_t *srv, char *text, size_t cap)
{
    const gkv_store_t *st = &srv->store;
    int n = snprintf(text, cap, "# GPUs\r\ngpus:%u\r\n", srv->devs.n);
    for (unsigned i = 0; i < srv->devs.n && n >= 0 && (size_t)n < cap; i++) {
        const gkv_backend_t *be = srv->devs.dev[i].be;
        const gkv_store_dev_t *d = &st->dev[i];
        int m = snprintf(text + n, cap - (size_t)n,
                         "gpu%u:uuid=%s,name=%s,cuda_device=%d,used=%" PRIu64 ",maxmemory=%" PRIu64
                         ",keys=%" PRIu64 ",linked_bytes=%" PRIu64 ",oom_errors=%" PRIu64
                         ",device_total=%" PRIu64 ",peers=0x%02x\r\n",
                         i, be->gpu_uuid[0] ? be->gpu_uuid : "none", be->gpu_name, be->device,
                         d->used, d->limit, d->keys, d->linked_bytes, d->oom_errors,
                         be->device_total, srv->devs.dev[i].peers);
        n = m < 0 ? -1 : n + m;
    }
    return n >= 0 && (size_t)n < cap ? n : -1;
}

/* INFO's # Tiers: each tier's use and limit (0 without it), and what moved between the tiers
 * and the GPUs. Returns the length, or -1 when it does not fit cap bytes. */
static int info_tiers(const gkv_server_t *srv, char *text, size_t cap)
{
    const gkv_store_t *st = &srv->store;
    const gkv_store_dev_t *t = &st->dev[GKV_DEV_HOST_TIER], *d = &st->dev[GKV_DEV_DISK_TIER];
    uint64_t sw[3] = {0, 0, 0}; /* the disk records' state changes: count, time, longest */
    if (st->disk_tier)
        gkv_backend_disk_state_stats(d->be, &sw[0], &sw[1], &sw[2]);
    const gkv_store_stats_t *s = &st->stats;
    int n = snprintf(
        text, cap,
        "# Tiers\r\ntier_host:%s\r\ntier_host_used:%" PRIu64 "\r\ntier_host_limit:%" PRIu64
        "\r\ntier_host_locked:%" PRIu64
        "\r\ntier_host_keys:%" PRIu64 "\r\ntier_host_oom_errors:%" PRIu64 "\r\ntier_disk:%s"
        "\r\ntier_disk_used:%" PRIu64 "\r\ntier_disk_limit:%" PRIu64 "\r\ntier_disk_keys:%" PRIu64
        "\r\ntier_disk_oom_errors:%" PRIu64 "\r\ntier_disk_io_errors:%" PRIu64
        "\r\ntier_disk_corrupt:%" PRIu64 "\r\ntier_disk_reloaded:%" PRIu64
        "\r\ntier_disk_direct:%d\r\ntier_disk_uring:%d"
        "\r\ntier_disk_state_writes:%" PRIu64 "\r\ntier_disk_state_us:%" PRIu64
        "\r\ntier_disk_state_max_us:%" PRIu64
        "\r\ntier_dropped_keys:%" PRIu64
        "\r\ndemoted_keys:%" PRIu64 "\r\ndemoted_bytes:%" PRIu64 "\r\npromoted_keys:%" PRIu64
        "\r\npromoted_bytes:%" PRIu64 "\r\npromote_errors:%" PRIu64
        "\r\ndemoted_to_host_bytes:%" PRIu64 "\r\ndemoted_to_host_us:%" PRIu64
        "\r\npromoted_from_host_bytes:%" PRIu64 "\r\npromoted_from_host_us:%" PRIu64
        "\r\ndemoted_to_disk_bytes:%" PRIu64 "\r\ndemoted_to_disk_us:%" PRIu64
        "\r\npromoted_from_disk_bytes:%" PRIu64 "\r\npromoted_from_disk_us:%" PRIu64
        "\r\ntier_headroom:%d\r\ndemoted_background_keys:%" PRIu64
        "\r\ntier_room_waits:%" PRIu64 "\r\n",
        st->host_tier ? "on" : "off", t->used, t->limit, gkv_tier_pin_locked(st->tier_pin),
        t->keys, t->oom_errors,
        st->disk_tier ? "on" : "off", d->used, d->limit, d->keys, d->oom_errors,
        st->disk_tier ? gkv_backend_disk_errors(d->be) : 0,
        st->disk_tier ? gkv_backend_disk_corrupt(d->be) : 0, s->disk_reloaded,
        st->disk_tier && gkv_backend_disk_direct(d->be),
        st->disk_tier && gkv_backend_disk_uring(d->be), sw[0], sw[1], sw[2], s->tier_dropped,
        s->demoted,
        s->demoted_bytes, s->promoted, s->promoted_bytes, s->promote_errors, s->down_host_bytes,
        s->down_host_us, s->up_host_bytes, s->up_host_us, s->down_disk_bytes, s->down_disk_us,
        s->up_disk_bytes, s->up_disk_us, srv->demoter ? srv->cfg.tier_headroom : 0,
        gkv_demoter_done(srv->demoter), gkv_demoter_waits(srv->demoter));
    return n >= 0 && (size_t)n < cap ? n : -1;
}

int gkv_cmd_info(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    gkv_server_t *srv = ctx->owner;
    if (req->flags & ~(uint64_t)GKV_INFO_PROMETHEUS)
        return gkv_reply_fail(rep, GKV_EINVAL, "INFO flags: only 1 (Prometheus text) is known");
    if (req->flags & GKV_INFO_PROMETHEUS)
        return info_prometheus(srv, req, rep);
    char text[32768]; /* the member list of a large cluster included */
    const gkv_store_t *st = &srv->store;
    const gkv_net_stats_t *ss = &srv->net.stats;
    const gkv_backend_t *be0 = srv->devs.dev[0].be;
    gkv_dev_totals_t dt = gkv_devices_totals(&srv->devs);
    uint64_t kw[4]; /* requests waiting for keys now, woken, timed out, re-checks (keywait.h) */
    gkv_keywaits_stats(&srv->net, &kw[0], &kw[1], &kw[2], &kw[3]);
    uint64_t wa[3]; /* connections watching now, events sent, watches cut (watch.h) */
    gkv_watches_stats(&srv->net, &wa[0], &wa[1], &wa[2]);
    uint64_t fe[5]; /* asynchronous seals waiting, published, discarded, wait us, max (fence.h) */
    gkv_fences_stats(&srv->net, &fe[0], &fe[1], &fe[2], &fe[3], &fe[4]);
    int n = snprintf(
        text, sizeof(text),
        "# Server\r\nversion:%s\r\nprotocol:%d\r\npid:%d\r\nuptime_seconds:%" PRIu64
        "\r\nbackend:%s\r\ndevice:%d\r\ngpu_name:%s\r\ngpu_uuid:%s\r\nunix_socket:%s\r\n"
        "tcp_listen:%s\r\nmetrics_listen:%s\r\nkey_order_thread:%s\r\n"
        "# Clients\r\nconnected_clients:%" PRIu64 "\r\nmaxclients:%" PRIu64
        "\r\nwaiting_for_keys:%" PRIu64 "\r\nkey_waits_woken:%" PRIu64
        "\r\nkey_waits_timed_out:%" PRIu64 "\r\nkey_waits_rechecked:%" PRIu64
        "\r\nkey_waits_early:%" PRIu64 "\r\nwatching_clients:%" PRIu64
        "\r\nwatch_events_sent:%" PRIu64 "\r\nwatches_overflowed:%" PRIu64 "\r\nchanges:%" PRIu64
        "\r\nasync_seals_waiting:%" PRIu64 "\r\nasync_seals_published:%" PRIu64
        "\r\nasync_seals_discarded:%" PRIu64 "\r\nasync_seal_wait_us:%" PRIu64
        "\r\nasync_seal_max_wait_us:%" PRIu64 "\r\nregistered_buffers:%" PRIu64
        "\r\ngets_into:%" PRIu64 "\r\nget_into_bytes:%" PRIu64 "\r\n"
        "# Memory\r\nused_bytes:%" PRIu64 "\r\nmaxmemory:%" PRIu64 "\r\nmaxmemory_policy:%s"
        "\r\nevictable_bytes:%" PRIu64 "\r\ndevice_total_bytes:%" PRIu64
        "\r\nkept_export_bytes:%" PRIu64 "\r\nkept_export_reuses:%" PRIu64
        "\r\nkept_export_ahead:%" PRIu64 "\r\nheld_imports:%" PRIu64
        "\r\nindex_host_bytes:%zu\r\nmax_value_size:%" PRIu64 "\r\nmax_key_size:%" PRIu64 "\r\n"
        "# Stats\r\ntotal_connections_received:%" PRIu64 "\r\nrejected_connections:%" PRIu64
        "\r\ntotal_commands_processed:%" PRIu64 "\r\nprotocol_errors:%" PRIu64
        "\r\nkeyspace_hits:%" PRIu64 "\r\nkeyspace_misses:%" PRIu64 "\r\nsets:%" PRIu64
        "\r\ndeletes:%" PRIu64 "\r\nevicted_keys:%" PRIu64 "\r\nexpired_keys:%" PRIu64
        "\r\noom_errors:%" PRIu64 "\r\nbytes_in:%" PRIu64 "\r\nbytes_out:%" PRIu64
        "\r\ncopy_batches:%" PRIu64 "\r\nbatched_copies:%" PRIu64 "\r\nloop_busy_max_us:%" PRIu64
        "\r\nloop_stalls:%" PRIu64 "\r\n"
        "# Keyspace\r\nkeys:%zu\r\nkeys_with_ttl:%" PRIu32 "\r\nentries_alive:%" PRIu64 "\r\n"
        "# Leases\r\nzero_copy:%s\r\nleases:%" PRIu64 "\r\nleased_bytes:%" PRIu64
        "\r\nunsealed_creates:%" PRIu64 "\r\nmax_leases:%" PRIu64 "\r\nmax_leased_bytes:%" PRIu64
        "\r\n",
        GKV_VERSION_STRING, GKV_PROTOCOL_VERSION, (int)getpid(), gkv_server_uptime_s(srv),
        be0->name, be0->device, be0->gpu_name, be0->gpu_uuid, srv->cfg.socket_path,
        srv->tcp_bound[0] ? srv->tcp_bound : "off",
        srv->metrics_bound[0] ? srv->metrics_bound : "off", srv->key_order_thread ? "yes" : "no",
        srv->net.nconns, srv->cfg.maxclients, kw[0], kw[1], kw[2], kw[3], ss->early_maps, wa[0],
        wa[1], wa[2], st->changes, fe[0], fe[1], fe[2], fe[3], fe[4], srv->cmd.buffers_open,
        srv->cmd.gets_into, srv->cmd.get_into_bytes, st->used, st->limit,
        gkv_policy_name(st->policy), evictable_estimate(srv), dt.device_total, dt.kept_bytes,
        dt.kept_reuses, dt.kept_ahead, dt.held, gkv_index_memory(st->ix), srv->cfg.max_value,
        srv->cfg.max_key, ss->total_connections, ss->rejected_connections, srv->cmd.commands,
        ss->protocol_errors, st->stats.hits, st->stats.misses, st->stats.sets, st->stats.dels,
        st->stats.evicted, st->stats.expired, st->stats.oom_errors, ss->bytes_in, ss->bytes_out,
        dt.batches, dt.pieces, srv->lag.max_us, srv->lag.stalls, gkv_index_count(st->ix), st->ttl.n,
        st->entries, be0->host_visible && !srv->cfg.host_zero_copy ? "off" : be0->share_mechanism,
        srv->lease_totals.leases, srv->lease_totals.bytes, srv->lease_totals.creates,
        srv->cfg.max_leases, srv->cfg.max_leased_bytes);
    if (n < 0 || (size_t)n >= sizeof(text))
        return GKV_ENOMEM;
    int m = snprintf(
        text + n, sizeof(text) - (size_t)n,
        "# Limits\r\nframe_timeouts:%" PRIu64 "\r\nidle_timeouts:%" PRIu64
        "\r\nwrite_timeouts:%" PRIu64 "\r\nframe_timeout_ms:%" PRIu64 "\r\nidle_timeout_ms:%" PRIu64
        "\r\nwrite_timeout_ms:%" PRIu64 "\r\noutput_buffer_limit:%" PRIu64
        "\r\nwatch_buffer:%" PRIu64 "\r\nkey_memory:%" PRIu64
        "\r\nmaxmemory_keys:%" PRIu64 "\r\nstaging_yields:%" PRIu64 "\r\nwide_send_buffers:%u"
        "\r\nauth_failures:%" PRIu64 "\r\nrejected_peers:%" PRIu64 "\r\nauth_required:%s\r\n",
        ss->frame_timeouts, ss->idle_timeouts, ss->write_timeouts, srv->cfg.frame_timeout_ms,
        srv->cfg.idle_timeout_ms, srv->cfg.write_timeout_ms, srv->cfg.output_limit,
        srv->cfg.watch_buffer, gkv_store_host_memory(st), st->host_limit, ss->staging_yields, srv->net.wide_sndbufs,
        ss->auth_failures + srv->http_auth_failures, ss->rejected_peers,
        srv->token_len ? "yes" : "no");
    if (m < 0 || (size_t)m >= sizeof(text) - (size_t)n)
        return GKV_ENOMEM;
    n += m;
    const gkv_hostcopy_t *hc = &st->hc;
    m = snprintf(text + n, sizeof(text) - (size_t)n,
                 "# Host copies\r\nhost_copy_bytes:%" PRIu64 "\r\nhost_copy_limit:%" PRIu64
                 "\r\nhost_copy_max_value:%" PRIu64 "\r\nhost_copy_values:%" PRIu32
                 "\r\nhost_copy_hits:%" PRIu64 "\r\nhost_copy_fills:%" PRIu64
                 "\r\nhost_copy_evictions:%" PRIu64 "\r\n",
                 hc->bytes, hc->limit, hc->max_value, hc->count, hc->hits, hc->fills,
                 hc->evictions);
    if (m < 0 || (size_t)m >= sizeof(text) - (size_t)n)
        return GKV_ENOMEM;
    n += m;
    if ((m = info_gpus(srv, text + n, sizeof(text) - (size_t)n)) < 0)
        return GKV_ENOMEM;
    n += m;
    if ((m = info_tiers(srv, text + n, sizeof(text) - (size_t)n)) < 0)
        return GKV_ENOMEM;
    n += m;
    if ((m = gkv_snapshot_info(&srv->snapshots, text + n, sizeof(text) - (size_t)n)) < 0)
        return GKV_ENOMEM;
    n += m;
    if ((m = gkv_fdstore_info(&srv->fdstore, text + n, sizeof(text) - (size_t)n)) < 0)
        return GKV_ENOMEM;
    n += m;
    if ((m = gkv_cluster_info(&srv->cluster, text + n, sizeof(text) - (size_t)n)) < 0)
        return GKV_ENOMEM;
    n += m;
    gkv_wr_t *w = rep->wr;
    gkv_reply_ok(w, req->id);
    gkv_wr_uint(w, GKV_F_PAYLOAD, (uint64_t)n);
    int rc = gkv_wr_end(w);
    if (rc)
        return rc;
    if (msgpack_sbuffer_write(&w->sb, text, (size_t)n))
        return GKV_ENOMEM;
    return 0;
}
