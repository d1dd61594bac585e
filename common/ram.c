/* ram.c: usable host memory (ram.h). */
#include "ram.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* A limit file's number: memory.max ("max" or bytes) or memory.limit_in_bytes (bytes; v1 says
 * "no limit" with a number near 2^63, page-rounded). 0 when unlimited or unreadable. */
static uint64_t read_limit(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char buf[64] = "";
    char *got = fgets(buf, sizeof(buf), f);
    fclose(f);
    unsigned long long v;
    if (!got || sscanf(buf, "%llu", &v) != 1 || v >= (1ull << 62))
        return 0;
    return v;
}

/* The lowest limit in file name of the directories base/cgroup, its parents, up to base. */
static uint64_t lowest_up(const char *base, const char *cgroup, const char *name)
{
    char dir[PATH_MAX], path[2 * PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", cgroup[0] == '/' ? cgroup : "/");
    uint64_t low = 0;
    for (;;) {
        size_t n = strlen(dir);
        while (n > 1 && dir[n - 1] == '/')
            dir[--n] = 0;
        snprintf(path, sizeof(path), "%s%s/%s", base, n > 1 ? dir : "", name);
        uint64_t v = read_limit(path);
        if (v && (!low || v < low))
            low = v;
        if (n <= 1)
            return low;
        char *slash = strrchr(dir, '/');
        slash[slash == dir] = 0; /* "/a" becomes "/", "/a/b" becomes "/a" */
    }
}

uint64_t gkv_ram_cgroup_limit(const char *root)
{
    char path[PATH_MAX], line[PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/proc/self/cgroup", root);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    uint64_t low = 0;
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = 0;
        /* "ID:CONTROLLERS:PATH": v2 is "0::PATH", v1's memory controller names "memory". */
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c1 = *c2 = 0;
        const char *controllers = c1 + 1, *cg = c2 + 1;
        char base[PATH_MAX];
        uint64_t v = 0;
        if (strcmp(line, "0") == 0 && !*controllers) {
            snprintf(base, sizeof(base), "%s/sys/fs/cgroup", root);
            v = lowest_up(base, cg, "memory.max");
        } else if (strstr(controllers, "memory")) {
            snprintf(base, sizeof(base), "%s/sys/fs/cgroup/memory", root);
            v = lowest_up(base, cg, "memory.limit_in_bytes");
        }
        if (v && (!low || v < low))
            low = v;
    }
    fclose(f);
    return low;
}

uint64_t gkv_ram_usable(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    uint64_t ram = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
    uint64_t cg = gkv_ram_cgroup_limit("");
    return cg && (!ram || cg < ram) ? cg : ram;
}
