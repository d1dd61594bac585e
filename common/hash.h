/* hash.h: SipHash-2-4, the keyed hash of the index (a client cannot aim keys at one bucket). */
#ifndef GKV_COMMON_HASH_H
#define GKV_COMMON_HASH_H

#include <stddef.h>
#include <stdint.h>

/* Hashes len bytes of data (borrowed) under a 16-byte key (borrowed). */
uint64_t gkv_siphash(const void *data, size_t len, const uint8_t key[16]);

#endif
