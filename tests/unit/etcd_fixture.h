/* etcd_fixture.h: a private etcd for a test: started on free loopback ports with its own data
 * directory, healthy within a few seconds, stopped by pid (and its directory removed). Where
 * no etcd binary is installed the test is skipped (exit 77). */
#ifndef GKV_TESTS_ETCD_FIXTURE_H
#define GKV_TESTS_ETCD_FIXTURE_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    pid_t pid;
    int client_port, peer_port;
    char endpoint[64]; /* "127.0.0.1:PORT" */
    char dir[64];
} gkv_test_etcd_t;

/* A loopback port nobody listens on now. */
static inline int gkv_test_free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) ||
        getsockname(fd, (struct sockaddr *)&a, &len))
        abort();
    close(fd);
    return ntohs(a.sin_port);
}

/* The etcd binary: $GKV_ETCD, else etcd on PATH, else NULL. */
static inline const char *gkv_test_etcd_binary(void)
{
    const char *env = getenv("GKV_ETCD");
    if (env && *env)
        return env;
    return system("command -v etcd >/dev/null 2>&1") == 0 ? "etcd" : NULL;
}

/* Is it answering? GET /health on a plain socket (no curl binary needed). */
static inline int gkv_test_etcd_healthy(const gkv_test_etcd_t *e)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                            .sin_port = htons((uint16_t)e->client_port)};
    struct timeval tv = {1, 0};
    char buf[1024];
    int fd = socket(AF_INET, SOCK_STREAM, 0), ok = 0;
    if (fd < 0)
        return 0;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    static const char req[] = "GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        write(fd, req, sizeof(req) - 1) == (ssize_t)(sizeof(req) - 1)) {
        size_t got = 0;
        ssize_t n;
        while (got < sizeof(buf) - 1 && (n = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0)
            got += (size_t)n;
        buf[got] = 0;
        ok = strstr(buf, "\"health\":\"true\"") != NULL;
    }
    close(fd);
    return ok;
}

/* Starts etcd (again, on the same ports and data, when e->pid is 0 and e->dir is set).
 * Returns 0, or -1 when it did not become healthy within 15 s. */
static inline int gkv_test_etcd_start(gkv_test_etcd_t *e)
{
    const char *bin = gkv_test_etcd_binary();
    if (!bin)
        return -1;
    if (!e->dir[0]) {
        snprintf(e->dir, sizeof(e->dir), "/tmp/gkv-etcd-XXXXXX");
        if (!mkdtemp(e->dir))
            return -1;
        e->client_port = gkv_test_free_port();
        e->peer_port = gkv_test_free_port();
        snprintf(e->endpoint, sizeof(e->endpoint), "127.0.0.1:%d", e->client_port);
    }
    char data[96], client[64], peer[64], initial[96];
    snprintf(data, sizeof(data), "%s/data", e->dir);
    snprintf(client, sizeof(client), "http://127.0.0.1:%d", e->client_port);
    snprintf(peer, sizeof(peer), "http://127.0.0.1:%d", e->peer_port);
    snprintf(initial, sizeof(initial), "default=%s", peer);
    e->pid = fork();
    if (e->pid == 0) {
        char log[96];
        snprintf(log, sizeof(log), "%s/etcd.log", e->dir);
        if (!freopen(log, "a", stdout) || !freopen(log, "a", stderr))
            _exit(127);
        execlp(bin, bin, "--data-dir", data, "--listen-client-urls", client,
               "--advertise-client-urls", client, "--listen-peer-urls", peer,
               "--initial-advertise-peer-urls", peer, "--initial-cluster", initial, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 150; i++) {
        if (gkv_test_etcd_healthy(e))
            return 0;
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, NULL);
    }
    return -1;
}

/* Stops it (SIGTERM, then SIGKILL), keeping its data for a restart. */
static inline void gkv_test_etcd_kill(gkv_test_etcd_t *e)
{
    if (e->pid <= 0)
        return;
    kill(e->pid, SIGTERM);
    for (int i = 0; i < 50; i++) {
        if (waitpid(e->pid, NULL, WNOHANG) == e->pid) {
            e->pid = 0;
            return;
        }
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, NULL);
    }
    kill(e->pid, SIGKILL);
    waitpid(e->pid, NULL, 0);
    e->pid = 0;
}

static inline void gkv_test_etcd_stop(gkv_test_etcd_t *e)
{
    gkv_test_etcd_kill(e);
    if (e->dir[0]) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", e->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", e->dir);
        e->dir[0] = 0;
    }
}

#endif
