/* crc32c.h: CRC-32C (Castagnoli), the checksum of snapshots (docs/snapshots.md). The SSE4.2
 * instruction where the CPU has it (about 20 GB/s a core), else a table, a byte at a time. */
#ifndef GKV_COMMON_CRC32C_H
#define GKV_COMMON_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* The CRC of n bytes at p continued from crc (start with 0): crc32c(0, "123456789", 9) is
 * 0xe3069283. */
uint32_t gkv_crc32c(uint32_t crc, const void *p, size_t n);

#endif
