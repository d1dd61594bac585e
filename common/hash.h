/* hash.h: SipHash-2-4, the keyed hash of the index (a client cannot aim keys at one bucket),
 * and xorshift64, the cheap generator of eviction samples. */
#ifndef GKV_COMMON_HASH_H
#define GKV_COMMON_HASH_H

#include <stddef.h>
#include <stdint.h>

/* Hashes len bytes of data (borrowed) under a 16-byte key (borrowed). */
uint64_t gkv_siphash(const void *data, size_t len, const uint8_t key[16]);

/* The next number of the xorshift64 sequence in *state (never 0). Not for secrets. */
static inline uint64_t gkv_xorshift64(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    return x;
}

#endif
