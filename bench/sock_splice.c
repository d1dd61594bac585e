/* sock_splice.c: a 64 MiB value in a memfd (as the host tier holds it) sent through a Unix
 * socket pair to a reader thread, by write() or without the sender's copy (vmsplice into a
 * pipe, splice into the socket): is the sender's copy what bounds a host-tier GET?
 *
 *     sock_splice [write|splice] [ROUNDS]
 *
 * Prints the mean and best GB/s of ROUNDS rounds (default 20) after a warm-up round. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define SIZE ((size_t)64 << 20)

static int sv[2];

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void wait_fd(int fd, short ev)
{
    struct pollfd p = {.fd = fd, .events = ev};
    (void)poll(&p, 1, -1);
}

/* Reads SIZE bytes into a touched buffer, then answers one byte; until the socket closes. */
static void *reader(void *arg)
{
    (void)arg;
    char *buf = malloc(SIZE);
    if (!buf)
        return NULL;
    memset(buf, 0, SIZE);
    for (;;) {
        size_t got = 0;
        while (got < SIZE) {
            ssize_t r = read(sv[1], buf + got, SIZE - got);
            if (r <= 0) {
                free(buf);
                return NULL;
            }
            got += (size_t)r;
        }
        if (write(sv[1], "k", 1) != 1)
            break;
    }
    free(buf);
    return NULL;
}

/* Sends src's SIZE bytes: write(), or vmsplice into pipe p then splice into the socket. */
static bool send_all(const char *src, bool splice_it, const int p[2], size_t pipe_cap)
{
    size_t sent = 0, in_pipe = 0;
    while (sent < SIZE) {
        ssize_t n;
        if (!splice_it) {
            n = write(sv[0], src + sent, SIZE - sent);
        } else {
            if (!in_pipe) {
                size_t want = SIZE - sent < pipe_cap ? SIZE - sent : pipe_cap;
                struct iovec iv = {.iov_base = (void *)(src + sent), .iov_len = want};
                ssize_t v = vmsplice(p[1], &iv, 1, SPLICE_F_NONBLOCK);
                if (v < 0)
                    return false;
                in_pipe = (size_t)v;
            }
            n = splice(p[0], NULL, sv[0], NULL, in_pipe, SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
            if (n > 0)
                in_pipe -= (size_t)n;
        }
        if (n > 0)
            sent += (size_t)n;
        else
            wait_fd(sv[0], POLLOUT);
    }
    char ok;
    while (read(sv[0], &ok, 1) != 1)
        wait_fd(sv[0], POLLIN);
    return true;
}

int main(int argc, char **argv)
{
    bool splice_it = argc > 1 && !strcmp(argv[1], "splice");
    int rounds = argc > 2 ? atoi(argv[2]) : 20, sndbuf = 4 << 20, p[2];
    int fd = memfd_create("tier", 0);
    if (rounds < 1 || fd < 0 || ftruncate(fd, (off_t)SIZE))
        return 2;
    char *src = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (src == MAP_FAILED || socketpair(AF_UNIX, SOCK_STREAM, 0, sv) || pipe2(p, O_NONBLOCK))
        return 2;
    memset(src, 7, SIZE);
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    int cap = fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
    pthread_t t;
    if (cap <= 0 || pthread_create(&t, NULL, reader, NULL))
        return 2;
    double best = 1e9, total = 0;
    for (int r = 0; r <= rounds; r++) {
        double t0 = now_s();
        if (!send_all(src, splice_it, p, (size_t)cap))
            return 1;
        double dt = now_s() - t0;
        if (r) { /* round 0 warms up */
            total += dt;
            best = dt < best ? dt : best;
        }
    }
    printf("%s: %.2f GB/s mean, %.2f GB/s best (%d rounds of 64 MiB)\n",
           splice_it ? "splice" : "write", SIZE * rounds / total / 1e9, SIZE / best / 1e9, rounds);
    shutdown(sv[0], SHUT_RDWR);
    pthread_join(t, NULL);
    return 0;
}
