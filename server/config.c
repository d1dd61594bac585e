/* config.c: flags, config file and defaults for gpukvd. */
#include "config.h"

#include <getopt.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "log.h"
#include "size.h"
#include "version.h"


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
}

static int parse_uint(const char *v, uint64_t min, uint64_t max, uint64_t *out)
{
    char *end;
    if (!*v || *v == '-')
        return GKV_EINVAL;
    unsigned long long n = strtoull(v, &end, 10);
    if (*end || n < min || n > max)
        return GKV_EINVAL;
    *out = n;
    return 0;
}

int gkv_config_set(gkv_config_t *cfg, const char *key, const char *value, char *err, size_t cap)
{
    uint64_t n;
    if (strcmp(key, "socket") == 0) {
        if (!*value || strlen(value) >= 108) {
            snprintf(err, cap, "socket: path must be 1..107 bytes (a Unix socket limit)");
            return GKV_EINVAL;
        }
        snprintf(cfg->socket_path, sizeof(cfg->socket_path), "%s", value);
    } else if (strcmp(key, "listen") == 0) {
        if (strlen(value) >= sizeof(cfg->listen) || (*value && !strrchr(value, ':'))) {
            snprintf(err, cap, "listen: expected HOST:PORT, got '%s'", value);
            return GKV_EINVAL;
        }
        snprintf(cfg->listen, sizeof(cfg->listen), "%s", value);
    } else if (strcmp(key, "backend") == 0) {
        if (strcmp(value, "auto") == 0)
            cfg->backend = GKV_BACKEND_AUTO;
        else if (strcmp(value, "cuda") == 0)
            cfg->backend = GKV_BACKEND_CUDA;
        else if (strcmp(value, "host") == 0)
            cfg->backend = GKV_BACKEND_HOST;
        else {
            snprintf(err, cap, "backend: expected auto, cuda or host, got '%s'", value);
            return GKV_EINVAL;
        }
    } else if (strcmp(key, "device") == 0) {
        if (parse_uint(value, 0, 1023, &n)) {
            snprintf(err, cap, "device: expected a GPU ordinal, got '%s'", value);
            return GKV_EINVAL;
        }
        cfg->device = (int)n;
    } else if (strcmp(key, "maxmemory") == 0 || strcmp(key, "max-value-size") == 0) {
        if (gkv_size_parse(value, &n) || n == 0) {
            snprintf(err, cap, "%s: expected a size like 512M or 4G, got '%s'", key, value);
            return GKV_EINVAL;
        }
        if (strcmp(key, "maxmemory") == 0)
            cfg->maxmemory = n;
        else
            cfg->max_value = n;
    } else if (strcmp(key, "max-key-size") == 0) {
        if (gkv_size_parse(value, &n) || n == 0 || n > 65535) {
            snprintf(err, cap, "max-key-size: expected 1..65535 bytes, got '%s'", value);
            return GKV_EINVAL;
        }
        cfg->max_key = n;
    } else if (strcmp(key, "maxclients") == 0) {
        if (parse_uint(value, 1, 1000000, &n)) {
            snprintf(err, cap, "maxclients: expected 1..1000000, got '%s'", value);
            return GKV_EINVAL;
        }
        cfg->maxclients = n;
    } else if (strcmp(key, "log-level") == 0) {
        int level = gkv_log_parse_level(value);
        if (level < 0) {
            snprintf(err, cap, "log-level: expected error, warn, info or debug, got '%s'", value);
            return GKV_EINVAL;
        }
        cfg->log_level = level;
    } else if (strcmp(key, "max-leases") == 0) {
        if (parse_uint(value, 1, 1000000, &cfg->max_leases)) {
            snprintf(err, cap, "max-leases: expected 1..1000000, got '%s'", value);
            return GKV_EINVAL;
        }
    } else if (strcmp(key, "max-leased-bytes") == 0) {
        if (gkv_size_parse(value, &n) || n == 0) {
            snprintf(err, cap, "max-leased-bytes: expected a size like 8G, got '%s'", value);
            return GKV_EINVAL;
        }
        cfg->max_leased_bytes = n;
    } else if (strcmp(key, "host-zero-copy") == 0) {
        if (strcmp(value, "yes") != 0 && strcmp(value, "no") != 0) {
            snprintf(err, cap, "host-zero-copy: expected yes or no, got '%s'", value);
            return GKV_EINVAL;
        }
        cfg->host_zero_copy = value[0] == 'y';
    } else if (strcmp(key, "busy-poll") == 0) {
        if (parse_uint(value, 0, 1000000, &cfg->busy_poll_us)) {
            snprintf(err, cap, "busy-poll: expected 0..1000000 microseconds, got '%s'", value);
            return GKV_EINVAL;
        }
    } else {
        snprintf(err, cap, "unknown setting '%s'", key);
        return GKV_EINVAL;
    }
    return 0;
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

static const char usage[] =
    "usage: gpukvd [options]\n"
    "  --socket PATH         Unix socket (default: /run/gpukv/gpukv.sock for root, else\n"
    "                        $XDG_RUNTIME_DIR/gpukv/gpukv.sock, else /tmp/gpukv-$UID/gpukv.sock)\n"
    "  --listen HOST:PORT    also listen on TCP (port 0 picks a free port); off by default\n"
    "  --backend auto|cuda|host   where values live (auto: cuda when a GPU is usable)\n"
    "  --device N            CUDA device ordinal (default 0)\n"
    "  --maxmemory SIZE      value memory limit, e.g. 8G (default: 90% of free GPU memory or RAM)\n"
    "  --max-value-size SIZE largest value (default: maxmemory)\n"
    "  --max-key-size N      longest key in bytes (default 1024, at most 65535)\n"
    "  --maxclients N        most simultaneous clients (default 10000)\n"
    "  --log-level LEVEL     error, warn, info or debug (default info)\n"
    "  --max-leases N        zero-copy leases per connection (default 4096)\n"
    "  --max-leased-bytes SIZE  bytes under lease per connection (default: maxmemory)\n"
    "  --host-zero-copy yes|no  host backend: let local clients map the whole arena (no)\n"
    "  --busy-poll USEC      after input, poll without sleeping for USEC microseconds: lower\n"
    "                        latency for a CPU core kept busy meanwhile (default 0: off)\n"
    "  --config FILE         read the same keys (\"maxmemory = 8G\") from FILE; flags win\n"
    "  --version, --help\n";

int gkv_config_parse_args(gkv_config_t *cfg, int argc, char **argv, char *err, size_t cap)
{
    static const struct option opts[] = {
        {"socket", required_argument, 0, 0},     {"listen", required_argument, 0, 0},
        {"backend", required_argument, 0, 0},    {"device", required_argument, 0, 0},
        {"maxmemory", required_argument, 0, 0},  {"max-value-size", required_argument, 0, 0},
        {"max-key-size", required_argument, 0, 0}, {"maxclients", required_argument, 0, 0},
        {"log-level", required_argument, 0, 0},
        {"max-leases", required_argument, 0, 0}, {"max-leased-bytes", required_argument, 0, 0},
        {"host-zero-copy", required_argument, 0, 0}, {"busy-poll", required_argument, 0, 0},
        {"config", required_argument, 0, 'c'},   {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, 'v'},        {0, 0, 0, 0},
    };
    /* The config file first, so that flags override it whatever their order. */
    for (int i = 1; i < argc; i++) {
        const char *file = NULL;
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            file = argv[i + 1];
        else if (strncmp(argv[i], "--config=", 9) == 0)
            file = argv[i] + 9;
        if (file && gkv_config_load(cfg, file, err, cap))
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
            fputs(usage, stdout);
            return 1;
        case 'v':
            printf("gpukvd %s (protocol 1)\n", GKV_VERSION_STRING);
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
