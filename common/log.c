/* log.c: leveled, timestamped log lines on stderr. */
#include "log.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

int gkv_log_reopen(const char *path)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
    if (fd < 0)
        return -1;
    int rc = dup2(fd, STDERR_FILENO) < 0 ? -1 : 0;
    close(fd);
    return rc;
}

void gkv_log(int level, const char *fmt, ...)
{
    static const char *const journal_prio[] = {"<3>", "<4>", "<6>", "<7>"};
    if (level > log_level)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (getenv("JOURNAL_STREAM")) { /* journald timestamps lines itself */
        fprintf(stderr, "%s%s\n", journal_prio[level], msg);
        return;
    }
    struct timespec ts;
    struct tm tm;
    char stamp[32];
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
    /* One fprintf per line keeps lines whole when several threads log. */
    fprintf(stderr, "%s.%03ldZ %-5s %s\n", stamp, ts.tv_nsec / 1000000, level_names[level], msg);
}
