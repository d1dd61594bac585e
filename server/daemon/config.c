/* config.c: flags, config file and defaults for gpukvd. Every setting is one row of a table
 * (name, parser, field, reloadable, help) from which flags, the config file, --help and SIGHUP
 * reloads all work. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <ini.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "duration.h"
#include "error.h"
#include "frame.h"
#include "log.h"
#include "size.h"
#include "version.h"

typedef struct setting setting_t;
struct setting {
    const char *name;
    /* Parses text into the field at cfg + off; 0 or -1 (the caller says what was expected). */
    int (*parse)(const setting_t *s, gkv_config_t *cfg, const char *text);
    size_t off, len;   /* the field */
    uint64_t min, max; /* numbers */
    bool reload;       /* SIGHUP applies a new value */
    const char *arg;   /* the flag's argument in --help, and what an error says was expected */
    const char *help;
};

#define FIELD(f) offsetof(gkv_config_t, f), sizeof(((gkv_config_t *)0)->f)

static void *field(const setting_t *s, gkv_config_t *cfg)
{
    return (char *)cfg + s->off;
}

static int parse_uint(const setting_t *s, gkv_config_t *cfg, const char *v)
{
    char *end;
    if (!*v || *v == '-')
        return -1;
    unsigned long long n = strtoull(v, &end, 10);
    if (*end || n < s->min || n > s->max)
        return -1;
    if (s->len == sizeof(int))
        *(int *)field(s, cfg) = (int)n;
    else
        *(uint64_t *)field(s, cfg) = n;
    return 0;
}

static int parse_size(const setting_t *s, gkv_config_t *cfg, const char *v)
{
    uint64_t n;
    if (gkv_size_parse(v, &n) || n < s->min || n > s->max)
        return -1;
    *(uint64_t *)field(s, cfg) = n;
    return 0;
}

static int parse_ms(const setting_t *s, gkv_config_t *cfg, const char *v)
{
    uint64_t ms;
    if (gkv_duration_parse(v, &ms) || ms < s->min || ms > s->max)
        return -1;
    *(uint64_t *)field(s, cfg) = ms;
    return 0;
}

static int parse_bool(const setting_t *s, gkv_config_t *cfg, const char *v)
{
    if (strcmp(v, "yes") != 0 && strcmp(v, "no") != 0)
        return -1;
    *(bool *)field(s, cfg) = v[0] == 'y';
    return 0;
}

/* A size, or "auto" (GKV_SIZE_AUTO). */
static int parse_size_auto(const setting_t *s, gkv_config_t *cfg, const char *v)
{
    if (strcmp(v, "auto") == 0) {
        *(uint64_t *)field(s, cfg) = GKV_SIZE_AUTO;
        return 0;
    }
    return parse_size(s, cfg, v);
}

static int parse_tristate(const setting_t *s, gkv_config_t *cfg, const char *v)
{
    static const char *const names[] = {"auto", "yes", "no"};
    for (int i = 0; i < 3; i++)
        if (strcmp(v, names[i]) == 0) {
            *(gkv_tristate_t *)field(s, cfg) = (gkv_tristate_t)i;
            return 0;
        }
    return -1;
}

/* A path: 1..max bytes (0 allowed when min is 0: "none"). */
static int parse_path(const setting_t *s, gkv_config_t *cfg, const char *v)
{
    size_t n = strlen(v);
    if (n < s->min || n > s->max || n >= s->len)
        return -1;
    memcpy(field(s, cfg), v, n + 1);
    return 0;
}

static int parse_listen(const setting_t *s, gkv_config_t *cfg, const char *v)
{
    if (strlen(v) >= s->len || (*v && !strrchr(v, ':')))
        return -1;
    memcpy(field(s, cfg), v, strlen(v) + 1);
    return 0;
}

/* --cluster: "etcd://" and a comma-separated list of host:port ("" for none). The field keeps
 * the list without the scheme. */
static int parse_cluster(const setting_t *s, gkv_config_t *cfg, const char *v)
{
    char *dst = field(s, cfg);
    if (!*v) {
        dst[0] = 0;
        return 0;
    }
    if (strncmp(v, "etcd://", 7) != 0)
        return -1;
    v += 7;
    size_t n = strlen(v);
    if (!n || n >= s->len || v[n - 1] == ',' || strstr(v, ",,"))
        return -1;
    for (const char *p = v; *p; p++)
        if (*p == '/' || *p == ' ')
            return -1;
    memcpy(dst, v, n + 1);
    return 0;
}

/* A cluster's or node's name: 1..63 bytes of [A-Za-z0-9._-]. */
static int parse_name(const setting_t *s, gkv_config_t *cfg, const char *v)
{
    size_t n = strlen(v);
    if (!n || n >= s->len)
        return -1;
    for (const char *p = v; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '.' && *p != '_' && *p != '-')
            return -1;
    memcpy(field(s, cfg), v, n + 1);
    return 0;
}

static int parse_backend(const setting_t *s, gkv_config_t *cfg, const char *v)
{
    (void)s;
    if (strcmp(v, "auto") == 0)
        cfg->backend = GKV_BACKEND_AUTO;
    else if (strcmp(v, "cuda") == 0)
        cfg->backend = GKV_BACKEND_CUDA;
    else if (strcmp(v, "host") == 0)
        cfg->backend = GKV_BACKEND_HOST;
    else
        return -1;
    return 0;
}

static int parse_level(const setting_t *s, gkv_config_t *cfg, const char *v)
{
    (void)s;
    int level = gkv_log_parse_level(v);
    if (level < 0)
        return -1;
    cfg->log_level = level;
    return 0;
}

static int parse_policy(const setting_t *s, gkv_config_t *cfg, const char *v)
{
    (void)s;
    return gkv_policy_parse(v, &cfg->maxmemory_policy);
}

/* --devices: "all" or a comma-separated list of CUDA ordinals (at most GKV_MAX_DEVICES). An
 * ordinal listed twice opens two pools on that GPU, each with its own limit: a machine with one
 * GPU can so run the paths of several (MOVE, one descriptor per pool). */
static int parse_devices(const setting_t *s, gkv_config_t *cfg, const char *v)
{
    (void)s;
    int devs[GKV_MAX_DEVICES];
    uint32_t n = 0;
    if (strcmp(v, "all") == 0) {
        cfg->devices_all = true;
        cfg->ndevices = 0;
        return 0;
    }
    while (*v) {
        char *end;
        if (*v < '0' || *v > '9' || n == GKV_MAX_DEVICES)
            return -1;
        unsigned long d = strtoul(v, &end, 10);
        if (d > 1023 || (*end && *end != ','))
            return -1;
        devs[n++] = (int)d;
        v = *end ? end + 1 : end;
    }
    if (!n)
        return -1;
    memcpy(cfg->devices, devs, n * sizeof(devs[0]));
    cfg->ndevices = n;
    cfg->devices_all = false;
    return 0;
}

/* --maxmemory: one size, or a comma-separated list of one per device. */
static int parse_maxmemory(const setting_t *s, gkv_config_t *cfg, const char *v)
{
    uint64_t each[GKV_MAX_DEVICES];
    uint32_t n = 0;
    char buf[64];
    while (*v) {
        const char *comma = strchr(v, ',');
        size_t len = comma ? (size_t)(comma - v) : strlen(v);
        if (n == GKV_MAX_DEVICES || len == 0 || len >= sizeof(buf))
            return -1;
        memcpy(buf, v, len);
        buf[len] = 0;
        if (gkv_size_parse(buf, &each[n]) || each[n] < s->min)
            return -1;
        n++;
        v = comma ? comma + 1 : v + len;
        if (comma && !*v)
            return -1;
    }
    if (!n)
        return -1;
    memcpy(cfg->maxmemory_each, each, n * sizeof(each[0]));
    cfg->nmaxmemory = n;
    cfg->maxmemory = each[0];
    return 0;
}

/* A comma-separated list of up to GKV_ALLOW_MAX ids; "" for none. The count follows the array
 * in gkv_config_t's order (allow_uids, allow_gids, n_allow_uids, n_allow_gids). */
static int parse_ids(const setting_t *s, gkv_config_t *cfg, const char *v)
{
    uint32_t ids[GKV_ALLOW_MAX], n = 0;
    while (*v) {
        char *end;
        if (*v < '0' || *v > '9' || n == GKV_ALLOW_MAX)
            return -1;
        unsigned long long id = strtoull(v, &end, 10);
        if (id > UINT32_MAX - 1 || (*end && *end != ','))
            return -1;
        ids[n++] = (uint32_t)id;
        v = *end ? end + 1 : end;
    }
    bool uids = s->off == offsetof(gkv_config_t, allow_uids);
    memcpy(uids ? cfg->allow_uids : cfg->allow_gids, ids, n * sizeof(ids[0]));
    *(uids ? &cfg->n_allow_uids : &cfg->n_allow_gids) = n;
    return 0;
}

#define SZ_MAX UINT64_MAX
static const setting_t settings[] = {
    {"socket", parse_path, FIELD(socket_path), 1, 107, false, "PATH",
     "Unix socket (default: /run/gpukv/gpukv.sock for root, else\n"
     "$XDG_RUNTIME_DIR/gpukv/gpukv.sock, else /tmp/gpukv-$UID/gpukv.sock)"},
    {"listen", parse_listen, FIELD(listen), 0, 0, false, "HOST:PORT",
     "also listen on TCP (port 0 picks a free port); off by default. A non-loopback\n"
     "address needs --auth-token-file (or --insecure-listen yes)"},
    {"metrics-listen", parse_listen, FIELD(metrics_listen), 0, 0, false, "HOST:PORT",
     "serve Prometheus metrics on http://HOST:PORT/metrics; off by default. A\n"
     "non-loopback address needs --auth-token-file (or --insecure-listen yes)"},
    {"backend", parse_backend, FIELD(backend), 0, 0, false, "auto|cuda|host",
     "where values live (auto: cuda when a GPU is usable)"},
    {"device", parse_uint, FIELD(device), 0, 1023, false, "N", "CUDA device ordinal (default 0)"},
    {"devices", parse_devices, FIELD(devices), 0, 0, false, "all|N,N,...",
     "serve several GPUs: every one found, or these ordinals (the host backend\n"
     "opens one arena per listed ordinal, standing for a GPU each)"},
    {"maxmemory", parse_maxmemory, FIELD(maxmemory), 1, SZ_MAX, false, "SIZE[,SIZE...]",
     "value memory limit per device, e.g. 8G, or one per device in --devices\n"
     "order (default: 90% of each GPU's free memory, or of RAM)"},
    {"maxmemory-policy", parse_policy, FIELD(maxmemory_policy), 0, 0, true,
     "noeviction|allkeys-lru|allkeys-lfu|volatile-lru|volatile-ttl",
     "when a value does not fit: refuse it (noeviction, the default), or evict\n"
     "unleased keys: least recently (lru) or frequently (lfu) used, or (volatile-)\n"
     "only keys with a TTL, least recently used or due first"},
    {"prealloc", parse_size, FIELD(prealloc), 0, SZ_MAX, false, "SIZE",
     "memory each GPU's value pool takes at start and keeps (at most maxmemory):\n"
     "values it covers need no new memory from the driver (default 0: the pool\n"
     "grows as values come; a remote read into new memory costs ~0.3 ms more)"},
    {"max-value-size", parse_size, FIELD(max_value), 1, SZ_MAX, false, "SIZE",
     "largest value (default: maxmemory)"},
    {"max-key-size", parse_size, FIELD(max_key), 1, 65535, false, "N",
     "longest key in bytes (default 1024, at most 65535)"},
    {"tier-host", parse_size, FIELD(tier_host), 0, SZ_MAX, false, "SIZE",
     "host memory below the GPUs: values that must leave a GPU (the policy chose\n"
     "them) move here instead of being lost, and come back when read (default 0:\n"
     "none; docs/tiers.md)"},
    {"tier-disk", parse_path, FIELD(tier_disk), 0, PATH_MAX - 64, false, "DIR",
     "a file in DIR (a local filesystem) below the host tier: values leaving it\n"
     "move there, checksummed (default: none; needs --tier-disk-size)"},
    {"tier-disk-size", parse_size, FIELD(tier_disk_size), 0, SZ_MAX, false, "SIZE",
     "the disk tier's size"},
    {"tier-headroom", parse_uint, FIELD(tier_headroom), 0, 90, false, "PCT",
     "with --tier-host: keep this percentage of each GPU's maxmemory free by\n"
     "moving its coldest values to the host tier in the background, on a copy\n"
     "lane, so that writes rarely wait for a move (default 0: values move when a\n"
     "write needs the room)"},
    {"tier-disk-reload", parse_bool, FIELD(tier_disk_reload), 0, 0, false, "yes|no",
     "at start, take over the disk tier's file a daemon now gone left in the\n"
     "directory, and serve its values again (default yes; no: remove it)"},
    {"tier-disk-direct", parse_bool, FIELD(tier_disk_direct), 0, 0, false, "yes|no",
     "copy the disk tier's values with O_DIRECT, past the page cache (default yes,\n"
     "where the filesystem takes it; no: through the page cache)"},
    {"tier-disk-uring", parse_bool, FIELD(tier_disk_uring), 0, 0, false, "yes|no",
     "with O_DIRECT, keep several pieces of a value in flight to the disk tier\n"
     "through io_uring (default yes, where gpukvd was built with liburing and the\n"
     "kernel allows it; no: one pread/pwrite at a time)"},
    {"tier-promote-on-get", parse_bool, FIELD(tier_promote_on_get), 0, 0, false, "yes|no",
     "whether a GET of a value in a tier brings it up to a GPU (default no: it is\n"
     "answered from the host tier; a disk value comes up to the host tier; MAP and\n"
     "get_to_device always bring it up)"},
    {"key-versions", parse_bool, FIELD(key_versions), 0, 0, false, "yes|no",
     "give every value published a version, named by GET, MAP and GETSIZE replies\n"
     "and watch events, that a waiting GET or MAP can ask to be above (after);\n"
     "8 bytes more per key (default no; not on a cluster node)"},
    {"maxmemory-keys", parse_size, FIELD(maxmemory_keys), 1, SZ_MAX, true, "SIZE",
     "host memory for keys, metadata and the index (default: a quarter of RAM)"},
    {"maxclients", parse_uint, FIELD(maxclients), 1, 1000000, true, "N",
     "most simultaneous clients (default 10000)"},
    {"log-level", parse_level, FIELD(log_level), 0, 0, true, "error|warn|info|debug",
     "what is logged (default info)"},
    {"log-file", parse_path, FIELD(log_file), 0, PATH_MAX - 1, false, "PATH",
     "append the log to PATH, reopened on SIGHUP (default: stderr)"},
    {"snapshot-dir", parse_path, FIELD(snapshot_dir), 0, PATH_MAX - 64, false, "DIR",
     "SAVE writes snapshots of every key and value here, and the newest valid one\n"
     "loads at start (default: none)"},
    {"snapshot-interval", parse_ms, FIELD(snapshot_interval_ms), 0, 86400000 * 30ull, true, "TIME",
     "with --snapshot-dir, SAVE this often (default 0: only when asked)"},
    {"snapshot-on-exit", parse_bool, FIELD(snapshot_on_exit), 0, 0, true, "yes|no",
     "with --snapshot-dir, a graceful stop (SIGTERM) saves before exiting (yes)"},
    {"snapshot-skip-corrupt", parse_bool, FIELD(snapshot_skip_corrupt), 0, 0, false, "yes|no",
     "at start, skip a corrupt snapshot for the next older one (or none) instead\n"
     "of refusing to start (no)"},
    {"takeover", parse_bool, FIELD(takeover), 0, 0, false, "yes|no",
     "take over from the gpukvd running on --socket (an upgrade): its values,\n"
     "its listening sockets and its clients, which reconnect once (no)"},
    {"fd-store", parse_tristate, FIELD(fd_store), 0, 0, false, "auto|yes|no",
     "keep value memory and a journal of the index in systemd's file\n"
     "descriptor store, so that a restart after a crash serves the same values\n"
     "(auto: yes when $NOTIFY_SOCKET is set; yes without it is refused)"},
    {"max-leases", parse_uint, FIELD(max_leases), 1, 1000000, true, "N",
     "zero-copy leases per connection (default 4096)"},
    {"max-leased-bytes", parse_size, FIELD(max_leased_bytes), 1, SZ_MAX, true, "SIZE",
     "bytes under lease per connection (default: maxmemory)"},
    {"host-zero-copy", parse_bool, FIELD(host_zero_copy), 0, 0, false, "yes|no",
     "host backend: let local clients map the whole arena (no)"},
    {"busy-poll", parse_uint, FIELD(busy_poll_us), 0, 1000000, true, "USEC",
     "after input, poll without sleeping for USEC microseconds: lower\n"
     "latency for a CPU core kept busy meanwhile (default 0: off); in a\n"
     "cluster one worker per pool also watches for jobs that long"},
    {"key-order-thread", parse_tristate, FIELD(key_order_thread), 0, 0, false, "auto|yes|no",
     "keep the ordered key index (LIST) on a helper thread, which busy-polls\n"
     "for up to 100 us after each batch of changes (auto: yes with 4 or more\n"
     "CPUs to run on)"},
    {"host-copy", parse_size_auto, FIELD(host_copy), 0, SZ_MAX - 1, false, "SIZE|auto",
     "host memory for copies of small values, so that GETs of them need no\n"
     "GPU round trip (auto: 256M on the cuda backend, 0 on the host backend)"},
    {"host-copy-max-value", parse_size, FIELD(host_copy_max_value), 1024, 1u << 20, false, "SIZE",
     "largest value given a host copy (default 64K; from 1K to 1M)"},
    {"frame-timeout", parse_ms, FIELD(frame_timeout_ms), 0, 86400000, true, "TIME",
     "a request's header must arrive within TIME of its first byte, and a\n"
     "payload may not stall longer (default 30s; 0: off)"},
    {"idle-timeout", parse_ms, FIELD(idle_timeout_ms), 0, 86400000 * 30ull, true, "TIME",
     "close connections idle this long that hold no lease (default 0: off)"},
    {"write-timeout", parse_ms, FIELD(write_timeout_ms), 0, 86400000, true, "TIME",
     "close a connection whose client takes none of its output for TIME\n"
     "(default 60s; 0: off)"},
    {"output-buffer-limit", parse_size, FIELD(output_limit), 65536, 1ull << 30, true, "SIZE",
     "stop reading a client's requests while this much output waits for it (4M)"},
    {"watch-buffer", parse_size, FIELD(watch_buffer), 65536, 1ull << 30, true, "SIZE",
     "a watcher that leaves this many bytes of events untaken loses its\n"
     "watch (OVERFLOW) (default 8M)"},
    {"shutdown-grace", parse_ms, FIELD(shutdown_grace_ms), 0, 3600000, true, "TIME",
     "SIGTERM: requests in flight get this long, then connections are closed (5s)"},
    {"auth-token-file", parse_path, FIELD(auth_token_file), 0, PATH_MAX - 1, true, "PATH",
     "clients must present the token in this file (reread on SIGHUP)"},
    {"allow-uid", parse_ids, FIELD(allow_uids), 0, 0, true, "UID,...",
     "Unix socket: only these users (and --allow-gid groups) may connect"},
    {"allow-gid", parse_ids, FIELD(allow_gids), 0, 0, true, "GID,...",
     "Unix socket: only members of these primary groups (and --allow-uid users)"},
    {"cluster", parse_cluster, FIELD(cluster), 0, 0, false, "etcd://HOST:PORT[,HOST:PORT...]",
     "join a cluster whose members are kept in this etcd (default: none)"},
    {"cluster-name", parse_name, FIELD(cluster_name), 0, 0, false, "NAME",
     "the cluster's name: nodes with the same one form a cluster (default gpukv)"},
    {"node-name", parse_name, FIELD(node_name), 0, 0, false, "NAME",
     "this node's name in the cluster, unique in it (default: the host name)"},
    {"advertise", parse_listen, FIELD(advertise), 0, 0, false, "HOST:PORT",
     "where the other nodes reach this one (default: --listen's address)"},
    {"cluster-weight", parse_uint, FIELD(cluster_weight), 1, 1000, false, "N",
     "this node's share of keys' homes relative to the others' (default 1)"},
    {"cluster-ttl", parse_uint, FIELD(cluster_ttl_s), 2, 60, false, "SECONDS",
     "the membership lease: a node that stops renewing it leaves the cluster\n"
     "after this long (default 5)"},
    {"nixl", parse_path, FIELD(nixl), 1, 1023, false, "auto|off|PATH",
     "the data plane between cluster nodes: NIXL (pip install nixl-cu13) found\n"
     "through $GPUKV_NIXL or python3 (auto, the default), the library or\n"
     "site-packages at PATH, or none (off: TCP)"},
    {"nixl-arena", parse_size, FIELD(nixl_arena), 2ull << 20, 1ull << 40, false, "SIZE",
     "each device's transfer arena that NIXL registers (default 1G on a GPU,\n"
     "64M on the host backend)"},
    {"insecure-listen", parse_bool, FIELD(insecure_listen), 0, 0, false, "yes|no",
     "allow --listen and --metrics-listen on a non-loopback address without a\n"
     "token (no)"},
};
#define NSETTINGS (sizeof(settings) / sizeof(settings[0]))

static const setting_t *find(const char *name)
{
    for (size_t i = 0; i < NSETTINGS; i++)
        if (strcmp(settings[i].name, name) == 0)
            return &settings[i];
    return NULL;
}

void gkv_config_defaults(gkv_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    if (gkv_default_socket(cfg->socket_path, sizeof(cfg->socket_path)) < 0)
        cfg->socket_path[0] = 0;
    cfg->backend = GKV_BACKEND_AUTO;
    cfg->max_key = 1024;
    cfg->maxclients = 10000;
    cfg->max_leases = 4096;
    cfg->log_level = GKV_LOG_INFO;
    cfg->frame_timeout_ms = 30000;
    cfg->write_timeout_ms = 60000;
    cfg->output_limit = 4u << 20;
    cfg->watch_buffer = 8u << 20;
    cfg->shutdown_grace_ms = 5000;
    cfg->snapshot_on_exit = true;
    cfg->tier_disk_reload = true;
    cfg->tier_disk_direct = true;
    cfg->tier_disk_uring = true;
    cfg->host_copy = GKV_SIZE_AUTO;
    cfg->host_copy_max_value = 64u << 10;
    strcpy(cfg->cluster_name, "gpukv");
    cfg->cluster_weight = 1;
    cfg->cluster_ttl_s = 5;
    strcpy(cfg->nixl, "auto");
}

int gkv_config_set(gkv_config_t *cfg, const char *key, const char *value, char *err, size_t cap)
{
    const setting_t *s = find(key);
    if (!s) {
        snprintf(err, cap, "unknown setting '%s'", key);
        return GKV_EINVAL;
    }
    if (s->parse(s, cfg, value)) {
        snprintf(err, cap, "%s: expected %s, got '%s'", key, s->arg, value);
        return GKV_EINVAL;
    }
    return 0;
}

bool gkv_config_reloadable(const char *key)
{
    const setting_t *s = find(key);
    return s && s->reload;
}

int gkv_config_apply_reloadable(gkv_config_t *live, const gkv_config_t *next)
{
    int changed = 0;
    for (size_t i = 0; i < NSETTINGS; i++) {
        const setting_t *s = &settings[i];
        const char *a = (const char *)live + s->off, *b = (const char *)next + s->off;
        size_t len = s->len;
        if (s->parse == parse_ids) /* the counts, which follow both arrays */
            len = offsetof(gkv_config_t, n_allow_gids) + sizeof(live->n_allow_gids) - s->off;
        if (memcmp(a, b, len) == 0)
            continue;
        if (!s->reload) {
            GKV_WARN("config: %s changed; it takes effect after a restart", s->name);
            continue;
        }
        memcpy((char *)live + s->off, b, len);
        GKV_INFO("config: %s reloaded", s->name);
        changed++;
    }
    return changed;
}

typedef struct {
    gkv_config_t *cfg;
    char *err;
    size_t cap;
    int rc;
} load_ctx_t;

static int on_ini(void *user, const char *section, const char *name, const char *value)
{
    load_ctx_t *ctx = user;
    if (*section && strcmp(section, "gpukvd") != 0) {
        snprintf(ctx->err, ctx->cap, "unknown section [%s]", section);
        ctx->rc = GKV_EINVAL;
        return 0;
    }
    if (ctx->rc == 0)
        ctx->rc = gkv_config_set(ctx->cfg, name, value, ctx->err, ctx->cap);
    return ctx->rc == 0;
}

int gkv_config_load(gkv_config_t *cfg, const char *path, char *err, size_t cap)
{
    load_ctx_t ctx = {cfg, err, cap, 0};
    char inner[256] = "";
    ctx.err = inner;
    ctx.cap = sizeof(inner);
    int line = ini_parse(path, on_ini, &ctx);
    if (line < 0) {
        snprintf(err, cap, "cannot read config file %s", path);
        return GKV_EINVAL;
    }
    if (line > 0) {
        snprintf(err, cap, "%s:%d: %s", path, line, inner[0] ? inner : "syntax error");
        return GKV_EINVAL;
    }
    return 0;
}

/* --help, from the table: each setting's flag and argument, then its help indented. */
static void print_usage(FILE *f)
{
    fputs("usage: gpukvd [options]\n", f);
    for (size_t i = 0; i < NSETTINGS; i++) {
        const setting_t *s = &settings[i];
        char flag[128];
        snprintf(flag, sizeof(flag), "--%s %s", s->name, s->arg);
        fprintf(f, "  %-24s", flag);
        if (strlen(flag) >= 24)
            fprintf(f, "\n  %-24s", "");
        for (const char *p = s->help; *p; p++) {
            fputc(*p, f);
            if (*p == '\n')
                fprintf(f, "  %-24s", "");
        }
        fputc('\n', f);
    }
    fputs(
        "  --config FILE           read the same keys (\"maxmemory = 8G\") from FILE; flags win;\n"
        "                          -FILE: skipped when FILE does not exist\n"
        "  --version, --help\n"
        "SIGHUP reopens --log-file and applies new values (from the config file) of:\n ",
        f);
    int n = 0;
    for (size_t i = 0; i < NSETTINGS; i++)
        if (settings[i].reload)
            fprintf(f, "%s %s", n++ && n % 7 == 1 ? "\n " : "", settings[i].name);
    fputc('\n', f);
}

int gkv_config_parse_args(gkv_config_t *cfg, int argc, char **argv, char *err, size_t cap)
{
    struct option opts[NSETTINGS + 4];
    for (size_t i = 0; i < NSETTINGS; i++)
        opts[i] = (struct option){settings[i].name, required_argument, 0, 0};
    opts[NSETTINGS] = (struct option){"config", required_argument, 0, 'c'};
    opts[NSETTINGS + 1] = (struct option){"help", no_argument, 0, 'h'};
    opts[NSETTINGS + 2] = (struct option){"version", no_argument, 0, 'v'};
    opts[NSETTINGS + 3] = (struct option){0, 0, 0, 0};
    /* The config file first, so that flags override it whatever their order. */
    for (int i = 1; i < argc; i++) {
        const char *file = NULL;
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            file = argv[i + 1];
        else if (strncmp(argv[i], "--config=", 9) == 0)
            file = argv[i] + 9;
        /* "-FILE": optional, as in systemd units: a missing file is no error. */
        if (file && file[0] == '-' && access(file + 1, F_OK) != 0 && errno == ENOENT)
            continue;
        if (file && gkv_config_load(cfg, file[0] == '-' ? file + 1 : file, err, cap))
            return GKV_EINVAL;
    }
    optind = 1;
    opterr = 0;
    for (;;) {
        int idx = -1;
        int c = getopt_long(argc, argv, "", opts, &idx);
        if (c == -1)
            break;
        switch (c) {
        case 0:
            if (gkv_config_set(cfg, opts[idx].name, optarg, err, cap))
                return GKV_EINVAL;
            break;
        case 'c':
            break;
        case 'h':
            print_usage(stdout);
            return 1;
        case 'v':
            printf("gpukvd %s (protocol %d, accepts %d-%d)\n", GKV_VERSION_STRING,
                   GKV_PROTOCOL_VERSION, GKV_PROTOCOL_MIN, GKV_PROTOCOL_VERSION);
            return 1;
        default:
            snprintf(err, cap, "unknown or incomplete option '%s' (see --help)", argv[optind - 1]);
            return GKV_EINVAL;
        }
    }
    if (optind < argc) {
        snprintf(err, cap, "unexpected argument '%s' (see --help)", argv[optind]);
        return GKV_EINVAL;
    }
    return 0;
}
