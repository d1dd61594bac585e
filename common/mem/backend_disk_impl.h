/* backend_disk_impl.h: the disk tier's file (backend_disk.c: records and their copies;
 * backend_disk_open.c: finding, opening and scanning the file). Not for other users.
 *
 * The file: a 4 KiB superblock (MAGIC_FILE, then at 16 a random 16-byte SipHash key), then
 * records at 4 KiB boundaries (a block, so that they can be written with O_DIRECT), each a
 * 64-byte header, the value, its key and metadata, padded to 4 KiB. Header (little-endian):
 *   0 magic (MAGIC_REC)   4 state (LIVE, RETIRED)   8 value length (8 bytes)
 *   16 CRC-32C of the value   20 key length (2)   24 metadata length (4)
 *   32 sequence (8)   40 deadline, wall clock ms, 0 for none (8)
 *   48 MAC: SipHash of bytes 8..47, the key and the metadata under the file's key (8)
 * The header is written last: with O_DIRECT the record's later blocks (the rest of the value,
 * key, metadata), then its first block (header and the value's first bytes); buffered, the
 * value, then key and metadata, then the header. A record torn by a crash has no valid header. A record is retired (state RETIRED) as soon as its key leaves it; a
 * reload links only LIVE records whose MAC holds, so bytes a client stored that look like a
 * record (a value may hold anything) never become one. A value's address (devptr) is the file
 * offset of its bytes; the allocator's offsets are file offsets less FILE_BASE. */
#ifndef GKV_BACKEND_DISK_IMPL_H
#define GKV_BACKEND_DISK_IMPL_H

#include <stdbool.h>
#include <stdint.h>
#include <uthash.h>

#include "arena.h"
#include "backend.h"

#define DISK_ALIGN 4096u /* a block: O_DIRECT's alignment */
#define HEADER 64u
#define FILE_BASE 4096u
#define MAGIC_FILE "GKVTIER2" /* 1: records at 64-byte boundaries */
#define MAGIC_REC 0x32564b47u /* "GKV2" little-endian */
#define STATE_LIVE 1u
#define STATE_RETIRED 2u
#define STATE_PENDING 3u /* written off the loop, not yet linked: never reloaded */

/* A record's bytes in the file, in order: header, value, key and metadata (then zeros). */
typedef struct {
    const void *p;
    uint64_t n;
} piece_t;

/* O_DIRECT copies of records (backend_disk_direct.c), through DIRECT_BYTES of block-aligned
 * buffers. With io_uring (liburing, where gpukvd was built with it and the kernel lets this
 * process use it) up to DIRECT_DEPTH pieces of DIRECT_PIECE bytes are in flight while the next
 * piece is filled (a write) or the last one emptied (a read), the CRC-32C computed on the way;
 * without, one pwrite/pread of up to DIRECT_BYTES at a time. One user (thread) at a time. */
#define DIRECT_PIECE (1u << 20)
#define DIRECT_DEPTH 8u
#define DIRECT_BYTES (DIRECT_PIECE * DIRECT_DEPTH)
typedef struct disk_direct disk_direct_t;

/* New buffers (and with uring a ring, when the kernel gives one), or NULL without memory. */
disk_direct_t *gkv__direct_new(bool uring);
/* Frees x (NULL: nothing); one whose ring failed mid-copy is left behind, logged. */
void gkv__direct_free(disk_direct_t *x);
/* Whether x's copies go through io_uring. */
bool gkv__direct_ring(const disk_direct_t *x);
/* A block-aligned buffer of DIRECT_BYTES, free between x's copies. */
uint8_t *gkv__direct_buf(disk_direct_t *x);
/* Writes the blocks after the first of the record at start (total bytes, whole blocks) made of
 * the three pieces; *crc, the CRC-32C of the value bytes in the first block, is continued over
 * those of the later ones. 0 or an errno. */
int gkv__direct_write_rest(disk_direct_t *x, int dfd, uint64_t start, uint64_t total,
                           const piece_t *image, uint32_t *crc);
/* Writes the record's first block (the header, whole by now). 0 or an errno. */
int gkv__direct_write_first(disk_direct_t *x, int dfd, uint64_t start, const piece_t *image);
/* Reads the value of len bytes at file offset v (after its header) into dst, its header into
 * h, and the CRC-32C of the value's bytes into *crc. 0 or an errno. */
int gkv__direct_read(disk_direct_t *x, int dfd, uint64_t v, uint64_t len, void *dst, uint8_t *h,
                     uint32_t *crc);

/* A record the allocator gave out, by its value's address: its whole length, and until it is
 * written the key and metadata it carries (gkv_backend_disk_label). */
typedef struct disk_rec {
    uint64_t v, total;
    uint8_t *label; /* key then metadata; freed once written */
    uint32_t klen, mlen;
    uint64_t expire_unix_ms;
    UT_hash_handle hh;
} disk_rec_t;

typedef struct {
    gkv_backend_t base;
    int fd;       /* buffered: the superblock, the scan, a snapshot's reads */
    int dfd;      /* O_DIRECT (the records' copies), or -1: fd does all */
    bool direct;  /* asked for: dfd is opened whenever fd changes */
    bool uring;   /* asked for: O_DIRECT copies through io_uring where the kernel allows */
    disk_direct_t *io; /* the loop's O_DIRECT copies, with dfd */
    disk_direct_t *spare[2]; /* kept for the copies off the loop (taken and given back on it) */
    gkv_arena_t *arena;
    char path[4096];
    uint8_t key[16]; /* the file's MAC key */
    uint64_t corrupt, errors, seq;
    uint64_t state_writes, state_us, state_max_us; /* set_state on the loop: retire, make live */
    disk_rec_t *recs;
    /* The next allocation's label, and whether it adopts a found record (adopt >= 0). */
    uint8_t *next_label;
    uint32_t next_klen, next_mlen;
    uint64_t next_expire;
    long adopt;
    gkv_disk_found_t *found; /* records found at open, newest first */
    size_t nfound;
    bool *adopted;
    bool discard; /* close removes the file */
} disk_backend_t;

void gkv__disk_put32(uint8_t *p, uint32_t v);
uint32_t gkv__disk_get32(const uint8_t *p);
void gkv__disk_put64(uint8_t *p, uint64_t v);
uint64_t gkv__disk_get64(const uint8_t *p);
/* A record's length in the file: header, value, key and metadata, padded. */
uint64_t gkv__disk_total(uint64_t size, uint32_t klen, uint32_t mlen);
/* The MAC of header h (its bytes 8..47) with label (klen + mlen bytes) under d's key. */
uint64_t gkv__disk_mac(const disk_backend_t *d, const uint8_t *h, const uint8_t *label,
                       uint32_t label_len);
/* Reads or writes len bytes at off, whole: 0 or an errno. */
int gkv__disk_io(int fd, void *buf, size_t len, uint64_t off, bool write_it);
/* Opens d's O_DIRECT descriptor on d->path when d->direct and the filesystem takes it (else
 * d->dfd stays -1, logged); closes an earlier one. */
void gkv__disk_open_direct(disk_backend_t *d);
/* Opens d's file in dir (d->path, d->fd, d->key; with reload the records a daemon that is gone
 * left there, d->found, their memory reserved in d->arena). Returns 0 or a code with why. */
int gkv__disk_open_file(disk_backend_t *d, const char *dir, bool reload, char *why, size_t cap);

#endif
