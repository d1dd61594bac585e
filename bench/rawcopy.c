/* rawcopy.c: the ceiling for moving a value through a socket on this machine: a sender and a
 * receiver with no store in between, the same chunked writes and reads as a client and gpukvd.
 * Usage: rawcopy unix|tcp BYTES [REPEATS]   Prints: bytes,seconds,GB/s (median of repeats). */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static size_t total;
static int fds[2];

static void *receiver(void *arg)
{
    (void)arg;
    size_t chunk = 256 << 10, got = 0;
    char *buf = malloc(chunk);
    while (got < total) {
        ssize_t n = read(fds[1], buf, chunk);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    free(buf);
    return NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void tcp_pair(int out[2])
{
    int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    bind(l, (struct sockaddr *)&sa, sizeof(sa));
    listen(l, 1);
    getsockname(l, (struct sockaddr *)&sa, &len);
    out[0] = socket(AF_INET, SOCK_STREAM, 0);
    connect(out[0], (struct sockaddr *)&sa, sizeof(sa));
    out[1] = accept(l, NULL, NULL);
    setsockopt(out[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    close(l);
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    total = strtoull(argv[2], NULL, 10);
    int reps = argc > 3 ? atoi(argv[3]) : 3;
    size_t chunk = 1 << 20;
    char *src = malloc(chunk);
    memset(src, 7, chunk);
    double *t = calloc((size_t)reps, sizeof(double));
    for (int r = 0; r < reps; r++) {
        if (strcmp(argv[1], "tcp") == 0)
            tcp_pair(fds);
        else
            socketpair(AF_UNIX, SOCK_STREAM, 0, fds);
        pthread_t th;
        double t0 = now_s();
        pthread_create(&th, NULL, receiver, NULL);
        for (size_t sent = 0; sent < total;) {
            size_t n = total - sent < chunk ? total - sent : chunk;
            ssize_t w = write(fds[0], src, n);
            if (w <= 0)
                return 1;
            sent += (size_t)w;
        }
        pthread_join(th, NULL);
        t[r] = now_s() - t0;
        close(fds[0]);
        close(fds[1]);
    }
    qsort(t, (size_t)reps, sizeof(double), cmp);
    double med = t[reps / 2];
    printf("%zu,%.6f,%.2f\n", total, med, (double)total / med / 1e9);
    return 0;
}
