/* notify.c: state lines through sd_notify from libsystemd (or by hand without it), and the fd
 * store's messages by hand; nothing outside systemd. */
#include "notify.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fdpass.h"

#ifdef GKV_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

static int send_state(const char *state, int fd);

void gkv_notify(const char *fmt, ...)
{
    char state[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(state, sizeof(state), fmt, ap);
    va_end(ap);
#ifdef GKV_HAVE_SYSTEMD
    sd_notify(0, state);
#else
    (void)send_state(state, -1); /* outside systemd: nothing */
#endif
}

uint64_t gkv_notify_watchdog_ms(void)
{
#ifdef GKV_HAVE_SYSTEMD
    uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) > 0)
        return usec / 1000;
#endif
    return 0;
}

int gkv_notify_available(void)
{
    const char *path = getenv("NOTIFY_SOCKET");
    return path && (path[0] == '/' || path[0] == '@');
}

/* A datagram socket connected to $NOTIFY_SOCKET, or -1. */
static int notify_socket(void)
{
    const char *path = getenv("NOTIFY_SOCKET");
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    size_t n = path ? strlen(path) : 0;
    if (!gkv_notify_available() || n >= sizeof(a.sun_path)) {
        errno = ENOENT;
        return -1;
    }
    memcpy(a.sun_path, path, n);
    if (path[0] == '@')
        a.sun_path[0] = 0; /* abstract namespace */
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&a,
                (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n)) != 0) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

static int send_state(const char *state, int fd)
{
    int sock = notify_socket();
    if (sock < 0)
        return -1;
    size_t len = strlen(state);
    ssize_t n =
        fd >= 0 ? gkv_fds_send(sock, state, len, &fd, 1) : send(sock, state, len, MSG_NOSIGNAL);
    int err = errno;
    close(sock);
    errno = err;
    return n == (ssize_t)len ? 0 : -1;
}

int gkv_notify_fd(const char *name, int fd)
{
    char state[160];
    snprintf(state, sizeof(state), "FDSTORE=1\nFDNAME=%s", name);
    return send_state(state, fd);
}

int gkv_notify_fd_remove(const char *name)
{
    char state[160];
    snprintf(state, sizeof(state), "FDSTOREREMOVE=1\nFDNAME=%s", name);
    return send_state(state, -1);
}
