/* hostport.c: "host:port" splitting (hostport.h). */
#include "hostport.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"

int gkv_hostport_split(const char *s, char *buf, size_t cap, const char **host, const char **port)
{
    size_t len = strlen(s);
    if (len >= cap)
        return GKV_EINVAL;
    memcpy(buf, s, len + 1);
    char *colon = strrchr(buf, ':');
    if (!colon || !colon[1])
        return GKV_EINVAL;
    *colon = 0;
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end || p < 0 || p > 65535 || colon[1] < '0' || colon[1] > '9')
        return GKV_EINVAL;
    char *h = buf;
    size_t hl = strlen(h);
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
        h[hl - 1] = 0;
        h++;
    }
    *host = h;
    *port = colon + 1;
    return 0;
}
