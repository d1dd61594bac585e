/* evict.c: policy names and the access stamps that sampled eviction compares (evict.h). */
#include "evict.h"

#include <string.h>

#define LFU_INIT 5    /* a new key's counter: not the first to go */
#define LFU_FACTOR 10 /* Redis's lfu-log-factor */

static const char *const names[] = {"noeviction", "allkeys-lru", "allkeys-lfu", "volatile-lru",
                                    "volatile-ttl"};

const char *gkv_policy_name(gkv_policy_t p)
{
    return (unsigned)p < sizeof(names) / sizeof(names[0]) ? names[p] : "?";
}

int gkv_policy_parse(const char *s, gkv_policy_t *out)
{
    for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(s, names[i]) == 0) {
            *out = (gkv_policy_t)i;
            return 0;
        }
    return -1;
}

static uint32_t minutes(uint64_t now_ms)
{
    return (uint32_t)(now_ms / 60000) & 0xffffff;
}

/* The LFU counter of s after its idle minutes have been taken off. */
static uint32_t lfu_decayed(uint32_t s, uint64_t now_ms)
{
    uint32_t idle = (minutes(now_ms) - (s >> 8)) & 0xffffff;
    uint32_t counter = s & 0xff;
    return idle >= counter ? 0 : counter - idle;
}

uint32_t gkv_access_new(gkv_policy_t p, uint64_t now_ms)
{
    if (p == GKV_POLICY_ALLKEYS_LFU)
        return minutes(now_ms) << 8 | LFU_INIT;
    return (uint32_t)now_ms;
}

uint32_t gkv_access_touch(gkv_policy_t p, uint32_t s, uint64_t now_ms, uint32_t rnd)
{
    if (p != GKV_POLICY_ALLKEYS_LFU)
        return (uint32_t)now_ms;
    uint32_t counter = lfu_decayed(s, now_ms);
    /* Logarithmic: the more often seen, the less likely one more access counts. */
    if (counter < 255) {
        uint32_t base = counter > LFU_INIT ? counter - LFU_INIT : 0;
        double p_inc = 1.0 / (base * LFU_FACTOR + 1);
        if ((double)rnd / 4294967296.0 < p_inc)
            counter++;
    }
    return minutes(now_ms) << 8 | counter;
}

uint64_t gkv_access_score(gkv_policy_t p, uint32_t s, uint64_t now_ms)
{
    if (p == GKV_POLICY_ALLKEYS_LFU)
        return 255 - lfu_decayed(s, now_ms);
    return (uint32_t)((uint32_t)now_ms - s); /* idle ms, modulo 2^32 */
}
