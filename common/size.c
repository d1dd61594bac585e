/* size.c: parse and format byte sizes. */
#include "size.h"

#include <ctype.h>
#include <stdio.h>
#include <strings.h>

#include "error.h"

int gkv_parse_digits(const char **s, uint64_t *n)
{
    const char *p = *s;
    if (!p || !isdigit((unsigned char)*p))
        return GKV_EINVAL;
    *n = 0;
    while (isdigit((unsigned char)*p)) {
        unsigned d = (unsigned)(*p++ - '0');
        if (*n > (UINT64_MAX - d) / 10)
            return GKV_EINVAL;
        *n = *n * 10 + d;
    }
    *s = p;
    return 0;
}

int gkv_size_parse(const char *s, uint64_t *out)
{
    uint64_t n;
    if (gkv_parse_digits(&s, &n))
        return GKV_EINVAL;
    unsigned shift = 0;
    switch (toupper((unsigned char)*s)) {
    case 0:
        break;
    case 'B':
        if (s[1])
            return GKV_EINVAL;
        break;
    case 'K':
        shift = 10;
        break;
    case 'M':
        shift = 20;
        break;
    case 'G':
        shift = 30;
        break;
    case 'T':
        shift = 40;
        break;
    default:
        return GKV_EINVAL;
    }
    if (shift) {
        s++;
        if (*s && strcasecmp(s, "B") != 0 && strcasecmp(s, "iB") != 0)
            return GKV_EINVAL;
        if (n > (UINT64_MAX >> shift))
            return GKV_EINVAL;
        n <<= shift;
    }
    *out = n;
    return 0;
}

void gkv_size_format(uint64_t n, char *buf, size_t cap)
{
    static const char units[] = "BKMGT";
    int u = 0;
    double v = (double)n;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, cap, "%lluB", (unsigned long long)n);
    else
        snprintf(buf, cap, "%.1f%c", v, units[u]);
}
