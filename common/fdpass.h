/* fdpass.h: bytes with one file descriptor attached, over a Unix socket (SCM_RIGHTS). libuv
 * passes only stream handles (uv_write2), so the daemon, libgpukv, benchmarks and tests all pass
 * memory descriptors through these two calls. */
#ifndef GKV_COMMON_FDPASS_H
#define GKV_COMMON_FDPASS_H

#include <stddef.h>
#include <sys/types.h>

/* Sends len (>= 1) bytes of buf with fd attached in one sendmsg (MSG_NOSIGNAL; retried on
 * EINTR). fd stays the caller's. Returns the bytes sent (possibly fewer than len: the rest
 * goes without the descriptor) or -1 with errno set. */
ssize_t gkv_fd_send(int sock, const void *buf, size_t len, int fd);
/* Receives up to len bytes into buf in one recvmsg (MSG_CMSG_CLOEXEC; retried on EINTR). A
 * descriptor passed with them is stored in *fd when *fd is -1 and closed otherwise (a receiver
 * takes one descriptor at most, so a peer cannot fill its table). Returns the bytes received,
 * 0 at end of stream, or -1 with errno set. */
ssize_t gkv_fd_recv(int sock, void *buf, size_t len, int *fd);

#endif
