/* listen.c: the daemon's listeners: the Unix socket (its directory checked, a stale file
 * replaced, the mode set before anyone can connect), TCP (--listen; a non-loopback address
 * needs a token), sockets taken over from a predecessor, and pausing and resuming them around
 * a takeover. Accepted connections go to the net (net/conn.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "conn.h"
#include "error.h"
#include "hostport.h"
#include "log.h"
#include "metrics_http.h"
#include "paths.h"
#include "server.h"

static void on_connection(uv_stream_t *listener, int status)
{
    gkv_server_t *s = listener->data;
    if (status < 0) {
        GKV_WARN("accept: %s", uv_strerror(status));
        return;
    }
    if (s->shutting_down)
        return;
    gkv_conn_accept(&s->net, listener, listener == (uv_stream_t *)&s->unix_listener);
}

/* Creates the socket's directory if needed and refuses one that others can enter. */
static int prepare_socket_dir(const char *path, char *err, size_t cap)
{
    char dir[PATH_MAX];
    gkv_path_dir(path, dir, sizeof(dir));
    if (mkdir(dir, 0750) == 0)
        GKV_INFO("created socket directory %s (mode 0750)", dir);
    else if (errno != EEXIST) {
        snprintf(err, cap, "cannot create socket directory %s: %s", dir, strerror(errno));
        return GKV_ESYS;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, cap, "socket directory %s is not a directory", dir);
        return GKV_EINVAL;
    }
    if (st.st_mode & S_IRWXO) {
        snprintf(err, cap,
                 "socket directory %s can be entered by others (mode %03o); use a directory "
                 "only its owner and group can enter, or the default --socket",
                 dir, st.st_mode & 0777);
        return GKV_EINVAL;
    }
    return 0;
}

/* Replaces a socket file left by a dead daemon; refuses when a live one answers there. */
static int clear_stale_socket(const char *path, char *err, size_t cap)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return 0;
    if (!S_ISSOCK(st.st_mode)) {
        snprintf(err, cap, "%s exists and is not a socket", path);
        return GKV_EINVAL;
    }
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path)) {
        snprintf(err, cap, "socket path %s is too long", path);
        return GKV_EINVAL;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int live = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    if (fd >= 0)
        close(fd);
    if (live) {
        snprintf(err, cap, "another gpukvd is already listening on %s", path);
        return GKV_EINVAL;
    }
    GKV_INFO("removing stale socket %s", path);
    unlink(path);
    return 0;
}

/* The address t is bound to, "HOST:PORT" ("[HOST]:PORT" for IPv6), into bound (128 bytes). */
static void bound_name(uv_tcp_t *t, char bound[128])
{
    struct sockaddr_storage got;
    int len = sizeof(got);
    char ip[64] = "?";
    uv_tcp_getsockname(t, (struct sockaddr *)&got, &len);
    if (got.ss_family == AF_INET6) {
        uv_ip6_name((struct sockaddr_in6 *)&got, ip, sizeof(ip));
        snprintf(bound, 128, "[%s]:%d", ip, ntohs(((struct sockaddr_in6 *)&got)->sin6_port));
    } else {
        uv_ip4_name((struct sockaddr_in *)&got, ip, sizeof(ip));
        snprintf(bound, 128, "%s:%d", ip, ntohs(((struct sockaddr_in *)&got)->sin_port));
    }
}

/* Listens on st with cb once e (what bound or opened st) is 0. Returns 0, or GKV_ESYS with err
 * "cannot listen on WHERE: why". */
static int start_listening(uv_stream_t *st, int e, uv_connection_cb cb, const char *where,
                           char *err, size_t cap)
{
    if (e == 0)
        e = uv_listen(st, 511, cb);
    if (e) {
        snprintf(err, cap, "cannot listen on %s: %s", where, uv_strerror(e));
        return GKV_ESYS;
    }
    return 0;
}

/* Listens on a listening Unix socket taken over (fd). */
static int listen_unix_fd(gkv_server_t *s, int fd, char *err, size_t cap)
{
    uv_pipe_init(s->loop, &s->unix_listener, 0);
    s->unix_listener.data = s;
    s->unix_open = true;
    int e = uv_pipe_open(&s->unix_listener, fd);
    int rc = start_listening((uv_stream_t *)&s->unix_listener, e, on_connection,
                             "the Unix socket taken over", err, cap);
    if (rc)
        return rc;
    GKV_INFO("listening on unix:%s (taken over)", s->cfg.socket_path);
    return 0;
}

static int listen_tcp_fd(gkv_server_t *s, int fd, char *err, size_t cap)
{
    uv_tcp_init(s->loop, &s->tcp_listener);
    s->tcp_listener.data = s;
    s->tcp_open = true;
    int e = uv_tcp_open(&s->tcp_listener, fd);
    int rc = start_listening((uv_stream_t *)&s->tcp_listener, e, on_connection,
                             "the TCP socket taken over", err, cap);
    if (rc)
        return rc;
    bound_name(&s->tcp_listener, s->tcp_bound);
    GKV_INFO("listen: listening on tcp:%s (taken over)", s->tcp_bound);
    return 0;
}

void gkv_server_pause_listening(gkv_server_t *s, int *unix_fd, int *tcp_fd)
{
    uv_os_fd_t fd;
    *unix_fd = *tcp_fd = -1;
    if (s->unix_open) {
        if (uv_fileno((uv_handle_t *)&s->unix_listener, &fd) == 0)
            *unix_fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        /* libuv unlinks the path of a pipe it bound when the handle closes: the socket file
         * must stay, for the successor (or this daemon again) listens on the same socket. So
         * libuv forgets the path (its copy, from the default allocator, freed here). */
        char *bound = (char *)s->unix_listener.pipe_fname;
        s->unix_listener.pipe_fname = NULL;
        s->listeners_closing++;
        uv_close((uv_handle_t *)&s->unix_listener, gkv_server_listener_closed);
        free(bound);
        s->unix_open = false;
    }
    if (s->tcp_open) {
        if (uv_fileno((uv_handle_t *)&s->tcp_listener, &fd) == 0)
            *tcp_fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        s->listeners_closing++;
        uv_close((uv_handle_t *)&s->tcp_listener, gkv_server_listener_closed);
        s->tcp_open = false;
    }
}

static int listen_now(gkv_server_t *s, int unix_fd, int tcp_fd, char *err, size_t cap)
{
    int rc = 0;
    if (unix_fd >= 0)
        rc = listen_unix_fd(s, unix_fd, err, cap);
    if (rc && tcp_fd >= 0)
        close(tcp_fd);
    if (!rc && tcp_fd >= 0)
        rc = listen_tcp_fd(s, tcp_fd, err, cap);
    if (!rc && s->cfg.metrics_listen[0] && !s->shutting_down)
        rc = gkv_metrics_http_listen(s, err, cap);
    return rc;
}

void gkv_server_listener_closed(uv_handle_t *h)
{
    gkv_server_t *s = h->data;
    if (--s->listeners_closing || !s->relisten_pending)
        return;
    s->relisten_pending = false;
    char err[256];
    int ufd = s->relisten_fds[0], tfd = s->relisten_fds[1];
    if (s->shutting_down) {
        if (ufd >= 0)
            close(ufd);
        if (tfd >= 0)
            close(tfd);
        return;
    }
    if (listen_now(s, ufd, tfd, err, sizeof(err))) {
        GKV_ERROR("listening again: %s; stopping", err);
        gkv_server_stop(s);
    }
}

int gkv_server_listen_again(gkv_server_t *s, int unix_fd, int tcp_fd, char *err, size_t cap)
{
    if (s->listeners_closing) { /* the handles are still closing: once they have */
        s->relisten_pending = true;
        s->relisten_fds[0] = unix_fd;
        s->relisten_fds[1] = tcp_fd;
        return 0;
    }
    return listen_now(s, unix_fd, tcp_fd, err, cap);
}

int gkv_server_listen_unix(gkv_server_t *s, char *err, size_t cap)
{
    const char *path = s->cfg.socket_path;
    if (s->takeover.listen_unix >= 0) {
        int fd = s->takeover.listen_unix;
        s->takeover.listen_unix = -1;
        return listen_unix_fd(s, fd, err, cap);
    }
    int rc = prepare_socket_dir(path, err, cap);
    if (rc || (rc = clear_stale_socket(path, err, cap)))
        return rc;
    uv_pipe_init(s->loop, &s->unix_listener, 0);
    s->unix_listener.data = s;
    s->unix_open = true;
    /* The file is created owner-only, then given its final mode before anyone can connect. */
    mode_t old = umask(0077);
    int e = uv_pipe_bind(&s->unix_listener, path);
    umask(old);
    if (e == 0 && chmod(path, 0660) != 0)
        e = uv_translate_sys_error(errno);
    if ((rc = start_listening((uv_stream_t *)&s->unix_listener, e, on_connection, path, err, cap)))
        return rc;
    GKV_INFO("listening on unix:%s", path);
    return 0;
}

static bool loopback(const struct sockaddr_storage *sa)
{
    if (sa->ss_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
}

int gkv_server_listen_tcp(gkv_server_t *s, uv_tcp_t *t, const char *what, const char *addr,
                          const char *exposes, uv_connection_cb cb, char bound[128], char *err,
                          size_t cap)
{
    char buf[256];
    const char *h, *port_s;
    if (gkv_hostport_split(addr, buf, sizeof(buf), &h, &port_s)) {
        snprintf(err, cap, "%s: '%s' is not HOST:PORT with a port 0..65535", what, addr);
        return GKV_EINVAL;
    }
    int port = atoi(port_s);
    struct sockaddr_storage sa;
    if (uv_ip4_addr(h, port, (struct sockaddr_in *)&sa) != 0 &&
        uv_ip6_addr(h, port, (struct sockaddr_in6 *)&sa) != 0) {
        snprintf(err, cap, "%s: '%s' is not an IPv4 or IPv6 address", what, h);
        return GKV_EINVAL;
    }
    if (!loopback(&sa) && !s->token_len) {
        if (!s->cfg.insecure_listen) {
            snprintf(err, cap,
                     "%s: %s is reachable from other machines and no --auth-token-file is "
                     "set: anyone could %s; give a token, listen on 127.0.0.1, or pass "
                     "--insecure-listen yes",
                     what, addr, exposes);
            return GKV_EINVAL;
        }
        GKV_WARN("%s %s without authentication (--insecure-listen): anyone who can reach it can "
                 "%s",
                 what, addr, exposes);
    }
    uv_tcp_init(s->loop, t); /* from here on the caller closes t, also on failure */
    t->data = s;
    int e = uv_tcp_bind(t, (struct sockaddr *)&sa, 0);
    char where[sizeof(buf) + 64];
    snprintf(where, sizeof(where), "tcp:%s (%s)", addr, what);
    int rc = start_listening((uv_stream_t *)t, e, cb, where, err, cap);
    if (rc)
        return rc;
    bound_name(t, bound);
    GKV_INFO("%s: listening on tcp:%s", what, bound);
    return 0;
}

/* The TCP listener for clients (--listen). */
int gkv_server_listen_clients(gkv_server_t *s, char *err, size_t cap)
{
    if (s->takeover.listen_tcp >= 0) {
        int fd = s->takeover.listen_tcp;
        s->takeover.listen_tcp = -1;
        return listen_tcp_fd(s, fd, err, cap);
    }
    int rc = gkv_server_listen_tcp(s, &s->tcp_listener, "listen", s->cfg.listen,
                                   "read, write and flush every value", on_connection, s->tcp_bound,
                                   err, cap);
    /* A bad address fails before the handle is initialised (s was zeroed: type 0). */
    s->tcp_open = uv_handle_get_type((uv_handle_t *)&s->tcp_listener) == UV_TCP;
    return rc;
}
