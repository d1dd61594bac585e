/* duration.c: parse spans of time. */
#include "duration.h"

#include <ctype.h>
#include <string.h>

#include "error.h"

int gkv_duration_parse(const char *s, uint64_t *ms)
{
    static const struct {
        const char *unit;
        uint64_t ms;
    } units[] = {{"", 1000}, {"s", 1000}, {"ms", 1}, {"m", 60000}, {"h", 3600000}};
    if (!s || !isdigit((unsigned char)*s))
        return GKV_EINVAL;
    uint64_t n = 0;
    while (isdigit((unsigned char)*s)) {
        unsigned d = (unsigned)(*s++ - '0');
        if (n > (UINT64_MAX - d) / 10)
            return GKV_EINVAL;
        n = n * 10 + d;
    }
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcmp(s, units[i].unit) != 0)
            continue;
        if (n > UINT64_MAX / units[i].ms)
            return GKV_EINVAL;
        *ms = n * units[i].ms;
        return 0;
    }
    return GKV_EINVAL;
}
