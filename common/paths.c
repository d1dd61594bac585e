/* paths.c: where the default socket lives, as daemon, library and CLI all compute it, and the
 * directory of a path. */
#include "paths.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"

int gkv_default_socket(char *buf, size_t cap)
{
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    int n;
    if (geteuid() == 0)
        n = snprintf(buf, cap, "/run/gpukv/gpukv.sock");
    else if (xdg && *xdg)
        n = snprintf(buf, cap, "%s/gpukv/gpukv.sock", xdg);
    else
        n = snprintf(buf, cap, "/tmp/gpukv-%u/gpukv.sock", (unsigned)geteuid());
    if (n < 0 || (size_t)n >= cap)
        return GKV_ENOSPACE;
    return n;
}

void gkv_path_dir(const char *path, char *dir, size_t cap)
{
    snprintf(dir, cap, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, cap, ".");
    else if (slash == dir)
        dir[1] = 0;
    else
        *slash = 0;
}
