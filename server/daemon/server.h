/* server.h: one gpukvd instance: its loop, listeners, store, backend and connections. */
#ifndef GKV_SERVER_SERVER_H
#define GKV_SERVER_SERVER_H

#include <pthread.h>
#include <stdbool.h>
#include <uv.h>

#include "backend.h"
#include "batch.h"
#include "cluster.h"
#include "cmd.h"
#include "config.h"
#include "device.h"
#include "fdstore.h"
#include "lease.h"
#include "looplag.h"
#include "net.h"
#include "poller.h"
#include "snapshot.h"
#include "staging.h"
#include "store.h"
#include "takeover.h"
#include "token.h"

typedef struct gkv_http_conn gkv_http_conn_t;

typedef struct gkv_server {
    uv_loop_t *loop; /* borrowed */
    gkv_config_t cfg;
    gkv_devices_t devs;
    gkv_backend_t *tier;      /* the host tier's memory (--tier-host), or NULL */
    gkv_backend_t *disk_tier; /* the disk tier's file (--tier-disk), or NULL */
    struct gkv_demoter *demoter; /* moves down off the request path (--tier-headroom), or NULL */
    gkv_store_t store;
    gkv_staging_t staging;
    uv_pipe_t unix_listener;
    uv_tcp_t tcp_listener;
    bool unix_open, tcp_open, shutting_down;
    /* Listener handles closed by gkv_server_pause_listening (or the metrics listener) whose
     * close callback has not run yet: a handle is initialised again only after it has, so a
     * relisten asked for meanwhile waits in relisten_fds (takeover.c). */
    unsigned listeners_closing;
    bool relisten_pending;
    int relisten_fds[2];
    char tcp_bound[128]; /* "host:port" actually bound, or "" */
    uv_signal_t sigterm, sigint, sighup;
    int argc; /* the command line, parsed again on SIGHUP (gkv_server_reload) */
    char **argv;
    uv_timer_t shutdown_timer;
    uv_timer_t sweep;  /* checks every connection's deadlines (conn_limits.c) */
    uv_timer_t expiry; /* active expiry: due at the earliest key deadline (expiry_at) */
    uint64_t expiry_at;
    uint64_t started_ms;
    gkv_net_t net; /* the client connections (net.h) */
    /* --metrics-listen: the HTTP listener and its connections (metrics_http.c). */
    uv_tcp_t metrics_listener;
    bool metrics_open;
    char metrics_bound[128]; /* "host:port" actually bound, or "" */
    gkv_http_conn_t *http_conns;
    unsigned nhttp;              /* of them, not closing */
    uint64_t metrics_scrapes;    /* answers on --metrics-listen */
    uint64_t http_auth_failures; /* scrapes without the token */
    gkv_lease_totals_t lease_totals;
    gkv_cmd_ctx_t cmd; /* what handlers reach (cmd.h): the store, devices, limits, this server */
    gkv_looplag_t lag; /* the loop's busy turns (looplag.h) */
    uv_prepare_t kick; /* before the loop waits: wakes the key order's helper (order.h) */
    uv_idle_t ahead;   /* active while a backend has work ahead of need left (on_kick) */
    bool key_order_thread; /* the helper runs (--key-order-thread) */
    /* --auth-token-file: the token (token_len 0: none). */
    char token[GKV_TOKEN_MAX + 1];
    size_t token_len;
    uint64_t watchdog_ms, watchdog_at; /* systemd's WatchdogSec=, pinged from the sweep */
    gkv_persist_env_t persist;         /* what snapshots and the fd store work on (persist_env.h) */
    gkv_snapshots_t snapshots;         /* --snapshot-dir (snapshot.h) */
    gkv_fdstore_t fdstore;             /* --fd-store (fdstore.h) */
    gkv_takeover_t takeover;           /* TAKEOVER and --takeover (takeover.h) */
    gkv_cluster_t cluster;             /* --cluster (cluster.h) */
} gkv_server_t;

/* Opens the backend, the store and the listeners. cfg is copied; loop is borrowed and must
 * outlive the server. On failure err (cap bytes) says why and everything opened is closed.
 * Returns 0, GKV_ENOTSUP (cuda asked for but unusable), GKV_EINVAL, GKV_ESYS or GKV_ENOMEM. */
int gkv_server_init(gkv_server_t *s, uv_loop_t *loop, const gkv_config_t *cfg, char *err,
                    size_t cap);
/* Starts a graceful stop: no new connections, connections close once their request in flight
 * is answered (at most --shutdown-grace), then the loop runs out. Idempotent. */
void gkv_server_stop(gkv_server_t *s);
/* Frees what gkv_server_init made, after the loop has run out. */
void gkv_server_fini(gkv_server_t *s);

/* Fills the settings of cfg whose 0 means "derived": max-value-size, max-leased-bytes (from
 * maxmemory), maxmemory-keys (a quarter of RAM). */
void gkv_server_resolve(const gkv_server_t *s, gkv_config_t *cfg);
/* Gives the layers below the settings they go by (the handlers' limits, the store's policy and
 * key memory): at start, and after a reload changed them. */
void gkv_server_apply_settings(gkv_server_t *s);
/* SIGHUP: reopens --log-file, parses the command line (and its --config file) again and applies
 * the reloadable settings; the others are logged as needing a restart (reload.c). A bad config
 * is logged and changes nothing. */
void gkv_server_reload(gkv_server_t *s);

/* TAKEOVER (takeover.h): stops accepting on the client listeners, their sockets kept open in
 * *unix_fd and *tcp_fd (-1 for none), so that connections wait in the backlog. */
void gkv_server_pause_listening(gkv_server_t *s, int *unix_fd, int *tcp_fd);
/* Listens again on those sockets (taken over; -1 for none; owned by the call) and on
 * --metrics-listen. While the paused listeners still close, that happens once they have closed
 * (a failure then stops the daemon, logged). Returns 0 or GKV_ESYS with err. */
int gkv_server_listen_again(gkv_server_t *s, int unix_fd, int tcp_fd, char *err, size_t cap);

/* Between server.c and listen.c: the Unix listener (--socket, or the one taken over) and the
 * clients' TCP listener (--listen, or the one taken over). Return 0 or a code with err. */
int gkv_server_listen_unix(gkv_server_t *s, char *err, size_t cap);
int gkv_server_listen_clients(gkv_server_t *s, char *err, size_t cap);

/* Between server.c, listen.c and metrics_http.c: binds t (initialised here, t->data = s) to addr
 * ("HOST:PORT", the value of flag what) and listens with cb; the address actually bound goes
 * into bound (128 bytes). A non-loopback address without a token is refused unless
 * --insecure-listen, exposes says what anyone could then do. Returns 0, GKV_EINVAL or
 * GKV_ESYS with err set. */
int gkv_server_listen_tcp(gkv_server_t *s, uv_tcp_t *t, const char *what, const char *addr,
                          const char *exposes, uv_connection_cb cb, char bound[128], char *err,
                          size_t cap);

/* A request ended: if a key's deadline now comes before the expiry timer, the timer is moved
 * up (keys past their deadline are reaped, up to 1024 per loop turn). */
void gkv_server_schedule_expiry(gkv_server_t *s);

/* Seconds since gkv_server_init. */
uint64_t gkv_server_uptime_s(const gkv_server_t *s);

/* The close callback of a listener handle closed while the daemon runs on (pause, metrics):
 * h->data is the server. */
void gkv_server_listener_closed(uv_handle_t *h);

#endif
