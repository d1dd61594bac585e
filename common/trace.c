/* trace.c: a timeline of steps (trace.h). */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "trace.h"

static int fd = -1;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void open_trace(void)
{
    const char *path = getenv("GPUKV_TRACE");
    char name[512];
    if (path && *path && snprintf(name, sizeof(name), "%s.%ld", path, (long)getpid()) <
                             (int)sizeof(name))
        fd = open(name, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
}

/* One line (the trace is open). */
static void emit(const char *ev, uint64_t value, uint64_t part)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    unsigned long long us =
        (unsigned long long)ts.tv_sec * 1000000 + (unsigned long long)ts.tv_nsec / 1000;
    static _Thread_local long tid;
    if (!tid)
        tid = (long)syscall(SYS_gettid);
    char line[160];
    int n = snprintf(line, sizeof(line), "%llu %s %llu %llu %ld\n", us, ev,
                     (unsigned long long)value, (unsigned long long)part, tid);
    if (n > 0 && n < (int)sizeof(line) && write(fd, line, (size_t)n) < 0)
        return; /* a lost line only */
}

void gkv_trace(const char *ev, uint64_t value, uint64_t part)
{
    pthread_once(&once, open_trace);
    if (fd >= 0)
        emit(ev, value, part);
}

void gkv_trace_key(const char *ev, const void *key, size_t len, uint64_t part)
{
    pthread_once(&once, open_trace);
    if (fd < 0)
        return; /* the key is packed only for a trace being written */
    uint8_t b[8] = {0};
    if (len) /* no key (an MGET's request): 0 */
        memcpy(b, key, len < 8 ? len : 8);
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | b[i];
    emit(ev, v, part);
}
