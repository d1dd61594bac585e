/* config.h: gpukvd's settings, from flags and an optional config file with the same keys. */
#ifndef GKV_SERVER_CONFIG_H
#define GKV_SERVER_CONFIG_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"

typedef struct {
    char socket_path[PATH_MAX]; /* Unix socket; always listened on */
    char listen[256];           /* "HOST:PORT" for TCP, "" for none */
    gkv_backend_kind_t backend;
    int device;
    uint64_t maxmemory;     /* 0: 90% of the GPU's free memory (or RAM) at start */
    uint64_t max_value;     /* 0: maxmemory */
    uint64_t max_key;       /* 1..65535 */
    uint64_t maxclients;
    int log_level;
    uint64_t max_leases;       /* per connection */
    uint64_t max_leased_bytes; /* per connection; 0: maxmemory */
    bool host_zero_copy;       /* let local clients map the whole host arena */
    uint64_t busy_poll_us;     /* keep polling this long after the last input; 0: sleep at once */
} gkv_config_t;

/* Fills cfg with the defaults; the socket path follows the user (see gkv_default_socket). */
void gkv_config_defaults(gkv_config_t *cfg);
/* Sets one key ("socket", "listen", "backend", "device", "maxmemory", "max-value-size",
 * "max-key-size", "maxclients", "log-level") from its text. Returns 0 or GKV_EINVAL with a
 * sentence in err (cap bytes). */
int gkv_config_set(gkv_config_t *cfg, const char *key, const char *value, char *err, size_t cap);
/* Loads a file of "key = value" lines (# or ; comments, an optional [gpukvd] section). */
int gkv_config_load(gkv_config_t *cfg, const char *path, char *err, size_t cap);
/* Applies argv: --config FILE first, then every other flag over it. Returns 0, 1 when --help or
 * --version was printed (exit 0), or GKV_EINVAL with err set. argv is borrowed. */
int gkv_config_parse_args(gkv_config_t *cfg, int argc, char **argv, char *err, size_t cap);

#endif
