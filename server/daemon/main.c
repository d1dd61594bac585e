/* main.c: gpukvd's entry point: configuration, the server, the loop. */
#include <stdio.h>
#include <uv.h>

#include "config.h"
#include "error.h"
#include "fdreserve.h"
#include "log.h"
#include "notify.h"
#include "server.h"

int main(int argc, char **argv)
{
    gkv_config_t cfg;
    char err[512] = "";
    gkv_config_defaults(&cfg);
    int rc = gkv_config_parse_args(&cfg, argc, argv, err, sizeof(err));
    if (rc == 1)
        return 0;
    if (rc) {
        fprintf(stderr, "gpukvd: %s\n", err);
        return 2;
    }
    if (!cfg.socket_path[0]) {
        fprintf(stderr, "gpukvd: no socket path: give --socket\n");
        return 2;
    }
    /* Before any thread starts (fdreserve.h): the table then never grows on a request's path. */
    uint64_t limit, want = cfg.maxclients + GKV_FD_SPARE;
    uint64_t table = gkv_fd_reserve(want, &limit);
    if (table < want)
        GKV_WARN("file descriptors: --maxclients %llu needs about %llu, but the limit is %llu "
                 "(raise it: ulimit -n, or LimitNOFILE= in the unit)",
                 (unsigned long long)cfg.maxclients, (unsigned long long)want,
                 (unsigned long long)limit);
    gkv_server_t srv;
    uv_loop_t *loop = uv_default_loop();
    if ((rc = gkv_server_init(&srv, loop, &cfg, err, sizeof(err))) != 0) {
        GKV_ERROR("cannot start: %s", err);
        return 1;
    }
    srv.argc = argc; /* SIGHUP parses them again */
    srv.argv = argv;
    GKV_INFO("ready");
    gkv_notify("READY=1\nSTATUS=serving on unix:%s%s%s, %s backend, %u device%s",
               srv.cfg.socket_path, srv.tcp_bound[0] ? " and tcp:" : "", srv.tcp_bound,
               srv.devs.dev[0].be->name, srv.devs.n, srv.devs.n == 1 ? "" : "s");
    uv_run(loop, UV_RUN_DEFAULT);
    gkv_server_fini(&srv);
    uv_loop_close(loop);
    GKV_INFO("stopped");
    return 0;
}
