/* fuzz_daemon.c: libFuzzer target for the whole daemon: a real gpukv server (host backend,
 * zero-copy allowed, small limits) in this process, driven through socketpairs by up to three
 * clients whose every step the input decides: bytes written (request frames from the corpus,
 * or anything), large payload bytes, turns of the event loop, output read (descriptors passed
 * with it closed), a half close, a close, a reset, SIGTERM's stop. The dispatcher, every
 * handler, the connections' transfers and their lifetime run as they do in gpukvd, under
 * AddressSanitizer and UndefinedBehaviorSanitizer; a fresh server per input, so that a crash
 * replays from its input alone. Built and run by tests/fuzz/run.sh (clang, GKV_FUZZ=ON).
 *
 * The input is a sequence of steps, each a byte c and what it takes:
 *   c & 3     the client (3 is client 0 too)
 *   c >> 2 & 7:
 *     0, 1  write the next n bytes (n: one byte, + 1; step 1: n * 16)
 *     2     write the next byte alone, then a turn (frames that trickle in)
 *     3     write k * 4 KiB of filler (k: one byte, % 64): the payload of a large SET
 *     4     run the loop (one byte, % 8 + 1 turns)
 *     5     read what the daemon sent (closing any descriptor it passed)
 *     6     shut the client's writing side
 *     7     close the client (with the next byte odd: a reset); with c >> 5 == 7 instead: the
 *           daemon's stop (SIGTERM)
 * A closed client is connected again by its next write. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "config.h"
#include "conn.h"
#include "fdpass.h"
#include "log.h"
#include "server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define CLIENTS 3

static char dir[80]; /* a socket's path in it stays well inside sun_path's 108 bytes */
static bool exited; /* TAKEOVER flags 2 asked the daemon to exit */

static void no_exit(int status)
{
    (void)status;
    exited = true;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *under = getenv("GKV_FUZZ_TMP"); /* run.sh's work directory: removed with it */
    if (!under || !*under || strlen(under) > sizeof(dir) - sizeof("/gkv-fuzzd-XXXXXX"))
        under = "/tmp";
    snprintf(dir, sizeof(dir), "%s/gkv-fuzzd-XXXXXX", under);
    if (!mkdtemp(dir))
        abort();
    gkv_log_set_level(GKV_LOG_ERROR);
    return 0;
}

typedef struct {
    int fd; /* the client's end, or -1 */
} client_t;

static void turn(uv_loop_t *loop, int n)
{
    for (int i = 0; i < n; i++)
        uv_run(loop, UV_RUN_NOWAIT);
}

static bool connect_client(gkv_server_t *srv, client_t *cl)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return false;
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    /* A refusal (max clients, say) still leaves a connection that answers and closes. */
    (void)gkv_conn_open(&srv->net, sv[1], true);
    cl->fd = sv[0];
    return true;
}

/* Writes what the socket takes now (the daemon may not be reading). */
static void write_some(client_t *cl, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = send(cl->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

static void drain(client_t *cl)
{
    static uint8_t buf[1 << 16];
    int fds[GKV_FDPASS_MAX];
    for (int i = 0; i < 64; i++) {
        unsigned nfds = 0;
        ssize_t n = gkv_fds_recv(cl->fd, buf, sizeof(buf), fds, GKV_FDPASS_MAX, &nfds);
        for (unsigned k = 0; k < nfds; k++)
            close(fds[k]);
        if (n <= 0)
            return;
    }
}

static void close_client(client_t *cl, bool reset)
{
    if (cl->fd < 0)
        return;
    if (reset) {
        struct linger l = {1, 0};
        setsockopt(cl->fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    }
    close(cl->fd);
    cl->fd = -1;
}

static int start_server(gkv_server_t *srv, uv_loop_t *loop)
{
    char sock[128];
    snprintf(sock, sizeof(sock), "%s/gpukv.sock", dir);
    unlink(sock);
    char *argv[] = {"gpukvd", "--backend",
                    "host",   "--socket",
                    sock,     "--maxmemory",
                    "32M",    "--host-zero-copy",
                    "yes",    "--key-order-thread",
                    "no",     "--shutdown-grace",
                    "0",      "--max-leases",
                    "64",     "--output-buffer-limit",
                    "256K",   "--watch-buffer",
                    "64K",    "--maxclients",
                    "8",      "--maxmemory-keys",
                    "16M",    "--host-copy",
                    "1M",     "--log-level",
                    "error",  NULL};
    int argc = (int)(sizeof(argv) / sizeof(argv[0])) - 1;
    gkv_config_t cfg;
    char err[512];
    gkv_config_defaults(&cfg);
    optind = 0;
    if (gkv_config_parse_args(&cfg, argc, argv, err, sizeof(err)) != 0) {
        fprintf(stderr, "fuzz_daemon: %s\n", err);
        abort();
    }
    if (uv_loop_init(loop) != 0 || gkv_server_init(srv, loop, &cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "fuzz_daemon: cannot start: %s\n", err);
        abort();
    }
    srv->takeover.exit_now = no_exit;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t filler[4096];
    uv_loop_t loop;
    gkv_server_t srv;
    start_server(&srv, &loop);
    exited = false;
    client_t cl[CLIENTS];
    for (int i = 0; i < CLIENTS; i++)
        cl[i].fd = -1;
    size_t pos = 0;
    bool stopped = false;
    while (pos < size && !exited) {
        uint8_t c = data[pos++];
        client_t *k = &cl[(c & 3) % CLIENTS];
        unsigned op = (c >> 2) & 7;
        /* The step's argument byte, when it takes one (ops 0-4, and 7 unless it stops). */
        bool takes = op <= 4 || (op == 7 && (c >> 5) != 7);
        uint8_t arg = 0;
        if (takes) {
            if (pos >= size)
                break;
            arg = data[pos++];
        }
        if ((op <= 3) && k->fd < 0 && (stopped || !connect_client(&srv, k)))
            continue;
        switch (op) {
        case 0:
        case 1: {
            size_t n = ((size_t)arg + 1) * (op ? 16 : 1);
            if (n > size - pos)
                n = size - pos;
            write_some(k, data + pos, n);
            pos += n;
            break;
        }
        case 2:
            write_some(k, &arg, 1);
            break;
        case 3:
            for (unsigned i = 0; i < arg % 64u; i++)
                write_some(k, filler, sizeof(filler));
            break;
        case 4:
            turn(&loop, arg % 8 + 1);
            break;
        case 5:
            if (k->fd >= 0)
                drain(k);
            break;
        case 6:
            if (k->fd >= 0)
                shutdown(k->fd, SHUT_WR);
            break;
        case 7:
            if ((c >> 5) == 7) {
                if (!stopped)
                    gkv_server_stop(&srv);
                stopped = true;
            } else {
                close_client(k, arg & 1);
            }
            break;
        }
        turn(&loop, 1);
    }
    /* The end: every client reads what is there and goes away, the daemon stops. */
    for (int i = 0; i < CLIENTS; i++) {
        if (cl[i].fd >= 0)
            drain(&cl[i]);
        close_client(&cl[i], false);
    }
    turn(&loop, 4);
    gkv_server_stop(&srv);
    for (int i = 0; i < 10000 && uv_run(&loop, UV_RUN_NOWAIT); i++)
        ;
    if (uv_loop_alive(&loop)) {
        fprintf(stderr, "fuzz_daemon: the daemon did not stop\n");
        abort();
    }
    gkv_server_fini(&srv);
    if (uv_loop_close(&loop) != 0) {
        fprintf(stderr, "fuzz_daemon: handles left open\n");
        abort();
    }
    return 0;
}
