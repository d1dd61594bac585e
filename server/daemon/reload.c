/* reload.c: SIGHUP. The log file is reopened (after logrotate moved it), the command line and
 * its --config file are parsed again, and the settings marked reloadable in config.c take
 * effect at once: limits and timeouts apply to the next request or sweep, the token and the
 * allowed users to the next connection. The others are logged as needing a restart. Nothing a
 * client holds is touched. */
#include <errno.h>
#include <string.h>

#include "log.h"
#include "notify.h"
#include "server.h"

/* Parses and applies; returns how many settings changed, or -1 (logged) when nothing did. */
static int reload(gkv_server_t *s)
{
    if (!s->argv)
        return 0;
    gkv_config_t next;
    char err[512];
    gkv_config_defaults(&next);
    if (gkv_config_parse_args(&next, s->argc, s->argv, err, sizeof(err)) != 0) {
        GKV_WARN("SIGHUP: configuration not reloaded: %s", err);
        return -1;
    }
    gkv_server_resolve(s, &next);
    char token[GKV_TOKEN_MAX + 1];
    size_t token_len = 0;
    if (next.auth_token_file[0] &&
        gkv_token_load(next.auth_token_file, token, &token_len, err, sizeof(err))) {
        GKV_WARN("SIGHUP: configuration not reloaded: %s", err);
        return -1;
    }
    if (!token_len && s->token_len && s->tcp_open && !s->cfg.insecure_listen) {
        GKV_WARN("SIGHUP: configuration not reloaded: the TCP listener keeps needing a token");
        return -1;
    }
    int changed = gkv_config_apply_reloadable(&s->cfg, &next);
    memcpy(s->token, token, token_len);
    s->token[token_len] = 0;
    s->token_len = token_len;
    explicit_bzero(token, sizeof(token));
    gkv_log_set_level(s->cfg.log_level);
    gkv_server_apply_settings(s);
    gkv_snapshot_schedule(&s->snapshots, s->cfg.snapshot_interval_ms);
    return changed;
}

void gkv_server_reload(gkv_server_t *s)
{
    if (s->cfg.log_file[0] && gkv_log_reopen(s->cfg.log_file))
        GKV_WARN("SIGHUP: cannot reopen %s: %s; logging on where it was", s->cfg.log_file,
                 strerror(errno));
    GKV_INFO("SIGHUP: reloading the configuration");
    gkv_notify("RELOADING=1");
    int changed = reload(s);
    if (changed >= 0)
        GKV_INFO("SIGHUP: %d setting%s changed", changed, changed == 1 ? "" : "s");
    gkv_notify("READY=1\nSTATUS=%s",
               changed < 0 ? "reload failed: configuration kept (see the log)" : "reloaded");
}
