/* fdpass.c: SCM_RIGHTS sending and receiving (fdpass.h). */
#include "fdpass.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

ssize_t gkv_fds_send(int sock, const void *buf, size_t len, const int *fds, unsigned n)
{
    if (n < 1 || n > GKV_FDPASS_MAX) {
        errno = EINVAL;
        return -1;
    }
    char cbuf[CMSG_SPACE(sizeof(int) * GKV_FDPASS_MAX)];
    memset(cbuf, 0, sizeof(cbuf));
    struct iovec iov = {(void *)buf, len};
    struct msghdr msg = {.msg_iov = &iov,
                         .msg_iovlen = 1,
                         .msg_control = cbuf,
                         .msg_controllen = CMSG_SPACE(sizeof(int) * n)};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * n);
    memcpy(CMSG_DATA(cm), fds, sizeof(int) * n);
    ssize_t sent;
    do
        sent = sendmsg(sock, &msg, MSG_NOSIGNAL);
    while (sent < 0 && errno == EINTR);
    return sent;
}

ssize_t gkv_fds_recv(int sock, void *buf, size_t len, int *fds, unsigned cap, unsigned *n)
{
    /* Room for more than a sender may pass, so that extra ones are received (and closed), not
     * dropped with MSG_CTRUNC while still counted against nothing. */
    char cbuf[CMSG_SPACE(sizeof(int) * (GKV_FDPASS_MAX + 4))];
    struct iovec iov = {buf, len};
    struct msghdr msg = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
    ssize_t got;
    do
        got = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    while (got < 0 && errno == EINTR);
    if (got < 0)
        return got;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < nfd; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
            if (*n < cap)
                fds[(*n)++] = fd;
            else
                close(fd);
        }
    }
    return got;
}

ssize_t gkv_fd_send(int sock, const void *buf, size_t len, int fd)
{
    return gkv_fds_send(sock, buf, len, &fd, 1);
}

ssize_t gkv_fd_recv(int sock, void *buf, size_t len, int *fd)
{
    unsigned n = *fd >= 0;
    return gkv_fds_recv(sock, buf, len, fd, 1, &n);
}
