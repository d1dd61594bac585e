/* duration.c: parse spans of time. */
#include "duration.h"

#include <string.h>
#include <time.h>

#include "error.h"
#include "size.h"

int gkv_duration_parse(const char *s, uint64_t *ms)
{
    static const struct {
        const char *unit;
        uint64_t ms;
    } units[] = {{"", 1000}, {"s", 1000}, {"ms", 1}, {"m", 60000}, {"h", 3600000}};
    uint64_t n;
    if (gkv_parse_digits(&s, &n))
        return GKV_EINVAL;
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

uint64_t gkv_wall_clock_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t gkv_clock_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t gkv_clock_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}
