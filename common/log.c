/* log.c: leveled, timestamped log lines on stderr. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static int log_level = GKV_LOG_INFO;
static const char *const level_names[] = {"error", "warn", "info", "debug"};

void gkv_log_set_level(int level)
{
    log_level = level;
}

int gkv_log_parse_level(const char *s)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(s, level_names[i]) == 0)
            return i;
    return -1;
}

void gkv_log(int level, const char *fmt, ...)
{
    if (level > log_level)
        return;
    struct timespec ts;
    struct tm tm;
    char stamp[32];
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
    /* One fprintf per line keeps lines whole when several threads log. */
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s.%03ldZ %-5s %s\n", stamp, ts.tv_nsec / 1000000, level_names[level], msg);
}
