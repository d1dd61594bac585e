/* procstat.c: this process's figures from /proc/self (procstat.h). */
#include "procstat.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* The fields of /proc/self/stat after the command name: utime (14), stime (15), starttime (22)
 * and vsize (23), counting from 1 as proc(5) does. */
static bool read_stat(gkv_procstat_t *out, double tick)
{
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
    unsigned long long utime, stime, start, vsize;
    if (!p || sscanf(p + 2,
                     "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d "
                     "%*d %llu %llu",
                     &utime, &stime, &start, &vsize) != 4)
        return false;
    out->cpu_seconds = (double)(utime + stime) / tick;
    out->virtual_bytes = vsize;
    /* starttime counts ticks since boot; /proc/stat's btime is the boot's Unix time. */
    f = fopen("/proc/stat", "r");
    if (!f)
        return false;
    unsigned long long btime = 0;
    char line[256];
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "btime %llu", &btime) == 1)
            break;
    fclose(f);
    out->start_time_seconds = (double)btime + (double)start / tick;
    return btime != 0;
}

static uint64_t count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return 0;
    uint64_t n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n ? n - 1 : 0; /* opendir's own descriptor */
}

bool gkv_procstat_read(gkv_procstat_t *out)
{
    memset(out, 0, sizeof(*out));
    long tick = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    bool ok = tick > 0 && read_stat(out, (double)tick);
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long size, resident;
    if (f && fscanf(f, "%llu %llu", &size, &resident) == 2)
        out->resident_bytes = resident * (uint64_t)page;
    else
        ok = false;
    if (f)
        fclose(f);
    out->open_fds = count_fds();
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        out->max_fds = rl.rlim_cur == RLIM_INFINITY ? 0 : rl.rlim_cur;
    return ok;
}
