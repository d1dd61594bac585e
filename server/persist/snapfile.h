/* snapfile.h: the snapshot file's parts encoded and checked (docs/snapshots.md, format 1,
 * little-endian), and its O_DIRECT I/O. Pure functions over buffers: the save (snapshot_save.c)
 * writes what these encode, the load (snapshot_load.c) checks what it reads with them, and the
 * unit suite damages every byte of each part. */
#ifndef GKV_PERSIST_SNAPFILE_H
#define GKV_PERSIST_SNAPFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "journal.h"

#define GKV_SNAP_HEADER_LEN 64
#define GKV_SNAP_UUID_LEN 48
#define GKV_SNAP_RECORD_LEN 32 /* klen, meta_len, size, expire, device, crc */
#define GKV_SNAP_TRAILER_LEN 32
#define GKV_SNAP_KEY_MAX 65535    /* a record's key length, whatever --max-key-size says */
#define GKV_SNAP_CHUNK (8u << 20) /* files move in blocks of this many bytes */

typedef struct {
    uint32_t ndev;    /* 1..GKV_MAX_DEVICES */
    uint64_t unix_ms; /* when the save began */
    uint64_t keys, bytes;
} gkv_snap_header_t;

/* The header (GKV_SNAP_HEADER_LEN bytes) into out. */
void gkv_snap_header_encode(uint8_t *out, const gkv_snap_header_t *h);
/* Checks and decodes one; NULL, or what is wrong ("the header's magic or checksum is wrong",
 * the version, the device count). */
const char *gkv_snap_header_decode(const uint8_t *in, gkv_snap_header_t *h);
/* The device table: ndev UUIDs of GKV_SNAP_UUID_LEN bytes and a checksum (its length). */
static inline size_t gkv_snap_table_len(uint32_t ndev)
{
    return (size_t)ndev * GKV_SNAP_UUID_LEN + 4;
}
void gkv_snap_table_encode(uint8_t *out, const char *const *uuids, uint32_t ndev);
/* True when the table's checksum holds; uuid i is then at in + i * GKV_SNAP_UUID_LEN (NUL-padded,
 * not always terminated: strnlen it). */
bool gkv_snap_table_check(const uint8_t *in, uint32_t ndev);

/* A record's fixed part (GKV_SNAP_RECORD_LEN bytes): r's lengths, size, deadline, device. */
void gkv_snap_record_encode(uint8_t *out, const gkv_jrec_t *r);
/* Checks and decodes one into r (its key and metadata still to be read: r->key, r->meta NULL):
 * NULL, or what is wrong, to follow "record N" ("'s header checksum is wrong", " has impossible
 * lengths": a key of 0 or more than GKV_SNAP_KEY_MAX bytes, metadata over GKV_MAX_META, a device
 * past ndev). */
const char *gkv_snap_record_decode(const uint8_t *in, uint32_t ndev, gkv_jrec_t *r);

/* The trailer (GKV_SNAP_TRAILER_LEN bytes). */
void gkv_snap_trailer_encode(uint8_t *out, uint64_t keys, uint64_t bytes);
/* True when it is a trailer, its checksum holds and it counts keys keys. */
bool gkv_snap_trailer_check(const uint8_t *in, uint64_t keys);

/* True for "gpukv-<digits>.snap"; and for a save's temporary ".gpukv-<digits>.snap.tmp". */
bool gkv_snap_name(const char *name);
bool gkv_snap_tmp_name(const char *name);
/* The snapshots of dir, newest first (names sort by time), in *names (the caller frees each and
 * the array). Returns how many, or -1 with errno. */
int gkv_snap_list(const char *dir, char ***names);

/* Opens path with flags and O_DIRECT where the filesystem allows it (*direct says whether):
 * snapshots move in whole aligned blocks of a pinned buffer, and on the 2-core CPU machine
 * buffered writes and fsync ran at 0.26 GB/s against 1.6 GB/s direct. Returns the fd or -1. */
int gkv_snap_open(const char *path, int flags, bool *direct);
/* A transfer on fd failed with EINVAL: if it was O_DIRECT, fd goes on buffered (*direct
 * cleared) and the caller retries. False when there is nothing to retry. */
bool gkv_snap_drop_direct(int fd, bool *direct);

#endif
