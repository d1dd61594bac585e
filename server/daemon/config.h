/* config.h: gpukvd's settings, from flags and an optional config file with the same keys. */
#ifndef GKV_SERVER_CONFIG_H
#define GKV_SERVER_CONFIG_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "evict.h"

#define GKV_ALLOW_MAX 16 /* uids (and gids) one --allow-uid (--allow-gid) may list */

typedef enum { GKV_AUTO, GKV_YES, GKV_NO } gkv_tristate_t;

#define GKV_SIZE_AUTO UINT64_MAX        /* a size setting left to the daemon ("auto") */
#define GKV_HOST_COPY_AUTO (256u << 20) /* --host-copy auto on the cuda backend */

typedef struct {
    char socket_path[PATH_MAX]; /* Unix socket; always listened on */
    char listen[256];           /* "HOST:PORT" for TCP, "" for none */
    char metrics_listen[256];   /* "HOST:PORT" for the Prometheus endpoint, "" for none */
    gkv_backend_kind_t backend;
    int device; /* --device N: the one device when --devices is not given */
    /* --devices: the devices served, in the daemon's ordinal order (ndevices 0: --device
     * alone; devices_all: every GPU found; on the host backend a list opens one arena per
     * entry, standing for that many GPUs). */
    int devices[GKV_MAX_DEVICES];
    uint32_t ndevices;
    bool devices_all;
    /* --maxmemory: the value memory limit of each device (0: 90% of its free memory, or of
     * RAM, at start), one size for all or one per device (nmaxmemory of them); maxmemory is
     * the first, and once the daemon has resolved it the total over the devices. */
    uint64_t maxmemory;
    uint64_t maxmemory_each[GKV_MAX_DEVICES];
    uint32_t nmaxmemory;
    uint64_t prealloc; /* --prealloc: what each GPU's value pool takes at start (0: none) */
    gkv_policy_t maxmemory_policy; /* what makes room for a value that does not fit */
    uint64_t max_value;            /* 0: maxmemory */
    uint64_t max_key;              /* 1..65535 */
    uint64_t maxclients;
    int log_level;
    uint64_t max_leases;       /* per connection */
    uint64_t max_leased_bytes; /* per connection; 0: maxmemory */
    bool host_zero_copy;       /* let local clients map the whole host arena */
    uint64_t busy_poll_us;     /* keep polling this long after the last input; 0: sleep at once */
    gkv_tristate_t key_order_thread; /* a helper thread keeps the key order (order.h) */
    /* Host copies of small values (hostcopy.h): the budget (GKV_SIZE_AUTO: 256 MiB on the cuda
     * backend, 0 on the host backend, whose values are in host memory already) and the largest
     * value kept. */
    uint64_t host_copy;
    uint64_t host_copy_max_value;
    /* Bounds on what one client can hold (service.md). Times in ms, 0: off. */
    uint64_t frame_timeout_ms;  /* a started frame must be complete, a payload keep moving */
    uint64_t idle_timeout_ms;   /* a connection with nothing in flight and no lease */
    uint64_t write_timeout_ms;  /* queued output that the client does not take */
    uint64_t output_limit;      /* queued output above which requests are no longer read */
    uint64_t watch_buffer;      /* a watcher's untaken events past which its watch ends */
    uint64_t shutdown_grace_ms; /* SIGTERM: how long requests in flight may take */
    uint64_t maxmemory_keys;    /* host bytes for keys, metadata and the index; 0: RAM / 4 */
    uint64_t tier_host;         /* --tier-host: bytes of the host tier below the GPUs; 0: none */
    char tier_disk[PATH_MAX];   /* --tier-disk: the disk tier's directory; "": none */
    uint64_t tier_disk_size;    /* --tier-disk-size */
    bool tier_promote_on_get;   /* --tier-promote-on-get: GETs bring tier values up to a GPU */
    bool key_versions;          /* --key-versions: every value gets a version (store.h) */
    bool tier_disk_reload;      /* --tier-disk-reload: a file left in the directory comes back */
    bool tier_disk_direct;      /* --tier-disk-direct: O_DIRECT where the filesystem takes it */
    bool tier_disk_uring;       /* --tier-disk-uring: O_DIRECT copies through io_uring */
    int tier_headroom;          /* --tier-headroom PCT: GPU memory kept free by moves off the
                                 * request path (demoter.h); 0: moves on writes only */
    /* Access. */
    char auth_token_file[PATH_MAX]; /* "" for none */
    bool insecure_listen; /* allow a non-loopback --listen (--metrics-listen) without a token */
    uint32_t allow_uids[GKV_ALLOW_MAX], allow_gids[GKV_ALLOW_MAX];
    uint32_t n_allow_uids, n_allow_gids;
    char log_file[PATH_MAX]; /* "" for stderr; reopened on SIGHUP */
    /* Snapshots (snapshot.h). */
    char snapshot_dir[PATH_MAX];   /* "" for none: SAVE is NOTSUP, nothing loads at start */
    uint64_t snapshot_interval_ms; /* a SAVE this often; 0: only when asked */
    bool snapshot_skip_corrupt;    /* at start, a corrupt snapshot is skipped (else refused) */
    bool snapshot_on_exit;         /* a graceful stop saves before the daemon exits */
    bool takeover; /* take the values and sockets of the daemon on --socket (takeover.h) */
    gkv_tristate_t fd_store; /* values survive crashes through systemd's fd store (fdstore.h) */
    /* A cluster (docs/cluster.md): etcd's endpoints ("" for none: one node, as before), the
     * cluster's and this node's names, where peers reach it, its weight and lease TTL. */
    char cluster[1024];
    char cluster_name[64];
    char node_name[64];
    char advertise[128];
    uint64_t cluster_weight;
    uint64_t cluster_ttl_s;
    /* The data plane between nodes (docs/cluster.md, "Data plane"): NIXL's library ("auto",
     * "off" or a path) and each device's transfer arena (0: 1 GiB on GPUs, 64 MiB on host). */
    char nixl[1024];
    uint64_t nixl_arena;
} gkv_config_t;

/* Fills cfg with the defaults; the socket path follows the user (see gkv_default_socket). */
void gkv_config_defaults(gkv_config_t *cfg);
/* Sets one key (a flag's name without the dashes, see --help) from its text. Returns 0 or
 * GKV_EINVAL with a sentence in err (cap bytes). */
int gkv_config_set(gkv_config_t *cfg, const char *key, const char *value, char *err, size_t cap);
/* True when a new value of key takes effect on SIGHUP; false for the keys that need a restart
 * and for unknown keys. */
bool gkv_config_reloadable(const char *key);
/* SIGHUP: copies the reloadable settings of next (both borrowed) into live and logs each other
 * setting whose value differs ("takes effect after a restart"). Returns how many changed. */
int gkv_config_apply_reloadable(gkv_config_t *live, const gkv_config_t *next);
/* Loads a file of "key = value" lines (# or ; comments, an optional [gpukvd] section). */
int gkv_config_load(gkv_config_t *cfg, const char *path, char *err, size_t cap);
/* Applies argv: --config FILE first, then every other flag over it. Returns 0, 1 when --help or
 * --version was printed (exit 0), or GKV_EINVAL with err set. argv is borrowed. */
int gkv_config_parse_args(gkv_config_t *cfg, int argc, char **argv, char *err, size_t cap);

#endif
