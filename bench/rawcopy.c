/* rawcopy.c: the ceiling for moving a value through a socket on this machine: a sender and a
 * receiver with no store in between, the same writes and reads from the same memory as a client
 * and gpukvd.
 *   set: the sender writes from a buffer of the value's size (the client's value), the receiver
 *        reads into a 4 MiB buffer over and over (gpukvd's staging buffer);
 *   get: the sender writes from a 4 MiB buffer over and over, the receiver reads into a buffer
 *        of the value's size;
 *   hot: 1 MiB writes from one 1 MiB buffer, 256 KiB reads into one 256 KiB buffer: both stay
 *        in the CPU's caches, so this ceiling is higher than any real transfer of a large value.
 *   set-stage, get-stage: set and get with the host backend's second copy on the receiver's
 *        (sender's) thread: each 4 MiB chunk is copied into (out of) a store of the value's size
 *        after it was read (before it is written), as gpukvd's staging does with the arena.
 * Buffers are touched before the clock starts.
 * Usage: rawcopy unix|tcp BYTES [REPEATS] [set|get|hot (default)|set-stage|get-stage]
 * Prints: bytes,seconds,GB/s (median of repeats). */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define STAGE (4u << 20)

static size_t total;
static int fds[2];

/* One side's buffer: cap bytes; each read or write takes at most `step` bytes from pos, and pos
 * wraps to 0 at cap. */
typedef struct {
    char *buf;
    size_t cap, step;
} side_t;

static side_t sender, receiver_side;
static char *store;        /* set-stage, get-stage: the value's bytes on gpukvd's side */
static bool store_on_read; /* set-stage: chunks read are copied into store; else get-stage */

static size_t span(const side_t *s, size_t pos)
{
    size_t n = s->cap - pos;
    return n < s->step ? n : s->step;
}

static void *receiver(void *arg)
{
    (void)arg;
    size_t got = 0, pos = 0;
    while (got < total) {
        size_t want = span(&receiver_side, pos);
        if (want > total - got)
            want = total - got;
        ssize_t n = read(fds[1], receiver_side.buf + pos, want);
        if (n <= 0)
            break;
        if (store && store_on_read)
            memcpy(store + got, receiver_side.buf + pos, (size_t)n);
        got += (size_t)n;
        pos = (pos + (size_t)n) % receiver_side.cap;
    }
    return NULL;
}

static side_t side(size_t cap, size_t step)
{
    side_t s = {malloc(cap), cap, step};
    if (s.buf)
        memset(s.buf, 7, cap);
    return s;
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
    const char *mode = argc > 4 ? argv[4] : "hot";
    if (strcmp(mode, "set-stage") == 0 || strcmp(mode, "get-stage") == 0) {
        store_on_read = mode[0] == 's';
        if (!(store = malloc(total)))
            return 1;
        memset(store, 7, total);
        mode = store_on_read ? "set" : "get";
    }
    if (strcmp(mode, "set") == 0) {
        sender = side(total, total);
        receiver_side = side(STAGE, STAGE);
    } else if (strcmp(mode, "get") == 0) {
        sender = side(STAGE, STAGE);
        receiver_side = side(total, total);
    } else if (strcmp(mode, "hot") == 0) {
        sender = side(1 << 20, 1 << 20);
        receiver_side = side(256 << 10, 256 << 10);
    } else {
        return 2;
    }
    if (!total || !sender.buf || !receiver_side.buf)
        return 1;
    double *t = calloc((size_t)reps, sizeof(double));
    for (int r = 0; r < reps; r++) {
        if (strcmp(argv[1], "tcp") == 0)
            tcp_pair(fds);
        else
            socketpair(AF_UNIX, SOCK_STREAM, 0, fds);
        pthread_t th;
        double t0 = now_s();
        pthread_create(&th, NULL, receiver, NULL);
        for (size_t sent = 0, pos = 0; sent < total;) {
            size_t n = span(&sender, pos);
            if (n > total - sent)
                n = total - sent;
            if (store && !store_on_read && pos == 0) /* the next chunk, out of the store */
                memcpy(sender.buf, store + sent, n < STAGE ? n : STAGE);
            ssize_t w = write(fds[0], sender.buf + pos, n);
            if (w <= 0)
                return 1;
            sent += (size_t)w;
            pos = (pos + (size_t)w) % sender.cap;
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
