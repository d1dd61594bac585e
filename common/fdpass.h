/* fdpass.h: bytes with file descriptors attached, over a Unix socket (SCM_RIGHTS). libuv passes
 * only stream handles (uv_write2), so the daemon, libgpukv, benchmarks and tests all pass memory
 * descriptors (one per device) through these calls. */
#ifndef GKV_COMMON_FDPASS_H
#define GKV_COMMON_FDPASS_H

#include <stddef.h>
#include <sys/types.h>

/* Most descriptors one message carries: one per device (GKV_MAX_DEVICES), or what TAKEOVER
 * hands over (listeners, memory, journal). */
#define GKV_FDPASS_MAX 16

/* Sends len (>= 1) bytes of buf with n (1..GKV_FDPASS_MAX) descriptors attached in one sendmsg
 * (MSG_NOSIGNAL; retried on EINTR). The descriptors stay the caller's. Returns the bytes sent
 * (possibly fewer than len: the rest goes without the descriptors) or -1 with errno set. */
ssize_t gkv_fds_send(int sock, const void *buf, size_t len, const int *fds, unsigned n);
/* Receives up to len bytes into buf in one recvmsg (MSG_CMSG_CLOEXEC; retried on EINTR).
 * Descriptors passed with them are stored in fds[*n], *n incremented, while *n < cap; the rest
 * are closed (a receiver bounds what a peer can put in its table). Returns the bytes received,
 * 0 at end of stream, or -1 with errno set. */
ssize_t gkv_fds_recv(int sock, void *buf, size_t len, int *fds, unsigned cap, unsigned *n);

/* The same with one descriptor: sent; or received into *fd when *fd is -1 (else closed). */
ssize_t gkv_fd_send(int sock, const void *buf, size_t len, int fd);
ssize_t gkv_fd_recv(int sock, void *buf, size_t len, int *fd);

#endif
