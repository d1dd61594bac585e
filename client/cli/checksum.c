/* checksum.c: the host half of the checksum. */
#include "checksum.h"

#include <string.h>

#define GOLDEN 0x9E3779B97F4A7C15ULL

uint64_t gkv_checksum_host(const void *p, size_t len)
{
    const uint8_t *b = p;
    uint64_t sum = 0, i = 0;
    for (; (size_t)(i * 8 + 8) <= len; i++) {
        uint64_t w;
        memcpy(&w, b + i * 8, 8);
        sum += w ^ (i * GOLDEN);
    }
    size_t tail = len - (size_t)i * 8;
    if (tail) {
        uint64_t w = 0;
        memcpy(&w, b + i * 8, tail);
        sum += w ^ (i * GOLDEN);
    }
    return sum;
}
