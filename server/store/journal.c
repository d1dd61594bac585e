/* journal.c: the index log in a memfd (journal.h).
 *
 * Layout (little-endian): a 64-byte header ("GKVJRNL1", u32 version 1, u32 zero, u64
 * committed: the bytes of records after the header that replay reads), then records, each a
 * multiple of 8 bytes: u32 length (the record's, header included), u32 CRC-32C of the bytes
 * after it, u8 type (1 PUT, 2 DEL, 3 FLUSH, 4 DEV), 3 zero bytes, u32 device, u32 key length, u32
 * metadata length, u64 size, u64 address, u64 deadline (Unix ms), u64 origin's base, u64 its
 * size, u32 export data length (<= 64), u32 zero, then key (a DEV record: the UUID), metadata and
 * export data, zero-padded. */
#include "journal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uthash.h>

#include "crc32c.h"
#include "error.h"

#define MAGIC "GKVJRNL1"
#define HEADER 64
#define FIXED 72 /* a record's fields before key, metadata and export data */
#define INITIAL (16u << 20)
#define MAX_KEY 65535u
#define MAX_META 4096u

enum { PUT = 1, DEL = 2, FLUSH = 3, DEV = 4 };

struct gkv_journal {
    int fd;
    uint8_t *map;
    size_t cap;                      /* bytes mapped (the memfd's size) */
    uint64_t used;                   /* bytes of records */
    uint64_t pins[GKV_JOURNAL_PINS]; /* positions held (gkv_journal_pin), npins of them */
    unsigned npins;
    bool broken;
};

static _Atomic uint64_t *committed(uint8_t *map)
{
    return (_Atomic uint64_t *)(void *)(map + 16);
}

int gkv_journal_create(gkv_journal_t **out)
{
    gkv_journal_t *j = calloc(1, sizeof(*j));
    if (!j)
        return GKV_ENOMEM;
    j->fd = memfd_create("gpukv-journal", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    j->cap = INITIAL;
    if (j->fd < 0 || ftruncate(j->fd, (off_t)j->cap) != 0 ||
        fcntl(j->fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0 ||
        (j->map = mmap(NULL, j->cap, PROT_READ | PROT_WRITE, MAP_SHARED, j->fd, 0)) == MAP_FAILED) {
        if (j->fd >= 0)
            close(j->fd);
        free(j);
        return GKV_ESYS;
    }
    memcpy(j->map, MAGIC, 8);
    uint32_t version = 1;
    memcpy(j->map + 8, &version, 4);
    atomic_store(committed(j->map), 0);
    *out = j;
    return 0;
}

int gkv_journal_fd(const gkv_journal_t *j)
{
    return j->fd;
}

uint64_t gkv_journal_used(const gkv_journal_t *j)
{
    return j->used;
}

uint64_t gkv_journal_committed(const gkv_journal_t *j)
{
    return atomic_load_explicit(committed(j->map), memory_order_relaxed);
}

/* The committed length: the oldest pin, or every record. */
static void advance(gkv_journal_t *j)
{
    uint64_t to = j->used;
    for (unsigned i = 0; i < j->npins; i++)
        if (j->pins[i] < to)
            to = j->pins[i];
    atomic_store_explicit(committed(j->map), to, memory_order_release);
}

bool gkv_journal_idle(const gkv_journal_t *j)
{
    return !j->npins && gkv_journal_committed(j) == j->used;
}

uint64_t gkv_journal_pin(gkv_journal_t *j)
{
    if (j->npins == GKV_JOURNAL_PINS) { /* more than every batch of every device: a bug */
        j->broken = true;
        return j->used;
    }
    j->pins[j->npins++] = j->used;
    return j->used;
}

void gkv_journal_unpin(gkv_journal_t *j, uint64_t pin)
{
    for (unsigned i = 0; i < j->npins; i++) {
        if (j->pins[i] == pin) {
            j->pins[i] = j->pins[--j->npins];
            break;
        }
    }
    advance(j);
}

void gkv_journal_break(gkv_journal_t *j)
{
    j->broken = true;
}

bool gkv_journal_broken(const gkv_journal_t *j)
{
    return j->broken;
}

void gkv_journal_close(gkv_journal_t *j)
{
    if (!j)
        return;
    munmap(j->map, j->cap);
    close(j->fd);
    free(j);
}

/* Room for n more bytes: the memfd doubles (the mapping moves). */
static int reserve(gkv_journal_t *j, size_t n)
{
    if (j->broken)
        return GKV_ESYS;
    if (HEADER + j->used + n <= j->cap)
        return 0;
    size_t cap = j->cap;
    while (HEADER + j->used + n > cap)
        cap *= 2;
    void *m;
    if (ftruncate(j->fd, (off_t)cap) != 0 ||
        (m = mremap(j->map, j->cap, cap, MREMAP_MAYMOVE)) == MAP_FAILED) {
        j->broken = true;
        return GKV_ESYS;
    }
    j->map = m;
    j->cap = cap;
    return 0;
}

static int append(gkv_journal_t *j, uint8_t type, const gkv_jrec_t *r)
{
    uint32_t klen = r ? r->klen : 0, mlen = r ? r->meta_len : 0, xlen = r ? r->exp_len : 0;
    if (xlen > GKV_EXPORT_MAX)
        return GKV_EINVAL;
    size_t len = (FIXED + klen + mlen + xlen + 7) & ~(size_t)7;
    int rc = reserve(j, len);
    if (rc)
        return rc;
    uint8_t *p = j->map + HEADER + j->used;
    memset(p, 0, len);
    uint32_t len32 = (uint32_t)len;
    memcpy(p, &len32, 4);
    p[8] = type;
    if (r) {
        memcpy(p + 12, &r->dev, 4);
        memcpy(p + 16, &klen, 4);
        memcpy(p + 20, &mlen, 4);
        memcpy(p + 24, &r->size, 8);
        memcpy(p + 32, &r->addr, 8);
        memcpy(p + 40, &r->expire_unix_ms, 8);
        memcpy(p + 48, &r->base, 8);
        memcpy(p + 56, &r->base_size, 8);
        memcpy(p + 64, &xlen, 4);
        if (klen)
            memcpy(p + FIXED, r->key, klen);
        if (mlen)
            memcpy(p + FIXED + klen, r->meta, mlen);
        if (xlen)
            memcpy(p + FIXED + klen + mlen, r->exp, xlen);
    }
    uint32_t crc = gkv_crc32c(0, p + 8, len - 8);
    memcpy(p + 4, &crc, 4);
    j->used += len;
    if (!j->npins)
        atomic_store_explicit(committed(j->map), j->used, memory_order_release);
    return 0;
}

int gkv_journal_put(gkv_journal_t *j, const gkv_jrec_t *r)
{
    return append(j, PUT, r);
}

int gkv_journal_del(gkv_journal_t *j, const uint8_t *key, uint32_t klen)
{
    gkv_jrec_t r = {.key = key, .klen = klen};
    return append(j, DEL, &r);
}

int gkv_journal_flush(gkv_journal_t *j)
{
    return append(j, FLUSH, NULL);
}

int gkv_journal_device(gkv_journal_t *j, uint32_t dev, const char *uuid)
{
    size_t n = strnlen(uuid, 47);
    gkv_jrec_t r = {.key = (const uint8_t *)uuid, .klen = (uint32_t)n, .dev = dev};
    return dev < GKV_MAX_DEVICES ? append(j, DEV, &r) : GKV_EINVAL;
}

/* Replay: the last record of each key, by key. */
typedef struct {
    const uint8_t *rec; /* its PUT record in the mapping */
    UT_hash_handle hh;
} live_t;

static void drop_all(live_t **live)
{
    live_t *l, *tmp;
    HASH_ITER(hh, *live, l, tmp)
    {
        HASH_DEL(*live, l);
        free(l);
    }
}

int gkv_journal_replay(int fd, gkv_jdevs_t *devs, int (*fn)(void *arg, const gkv_jrec_t *r),
                       void *arg, bool *bad, char *why, size_t cap)
{
    *bad = false;
    memset(devs, 0, sizeof(*devs));
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < HEADER) {
        snprintf(why, cap, "the journal is shorter than its header");
        return GKV_EIO;
    }
    size_t size = (size_t)st.st_size;
    const uint8_t *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        snprintf(why, cap, "mapping the journal failed: %s", strerror(errno));
        return GKV_EIO;
    }
    uint64_t end;
    memcpy(&end, map + 16, 8);
    if (memcmp(map, MAGIC, 8) != 0 || end > size - HEADER) {
        munmap((void *)map, size);
        snprintf(why, cap, "the journal's header is wrong");
        return GKV_EIO;
    }
    live_t *live = NULL;
    int rc = 0;
    for (uint64_t off = 0; off < end && !rc;) {
        const uint8_t *p = map + HEADER + off;
        uint32_t len, crc, klen, mlen;
        memcpy(&len, p, 4);
        memcpy(&crc, p + 4, 4);
        if (len < FIXED || len % 8 || len > end - off || crc != gkv_crc32c(0, p + 8, len - 8)) {
            *bad = true;
            snprintf(why, cap, "record at byte %llu is damaged; what follows is dropped",
                     (unsigned long long)off);
            break;
        }
        uint32_t dev, xlen;
        memcpy(&dev, p + 12, 4);
        memcpy(&klen, p + 16, 4);
        memcpy(&mlen, p + 20, 4);
        memcpy(&xlen, p + 64, 4);
        if (p[8] == DEV && dev < GKV_MAX_DEVICES && klen < 48 && FIXED + (uint64_t)klen <= len) {
            memset(devs->uuid[dev], 0, sizeof(devs->uuid[dev]));
            memcpy(devs->uuid[dev], p + FIXED, klen);
            if (dev >= devs->n)
                devs->n = dev + 1;
        } else if (p[8] == FLUSH) {
            drop_all(&live);
        } else if ((p[8] == PUT || p[8] == DEL) && klen >= 1 && klen <= MAX_KEY &&
                   mlen <= MAX_META && xlen <= GKV_EXPORT_MAX &&
                   FIXED + (uint64_t)klen + mlen + xlen <= len) {
            live_t *l;
            HASH_FIND(hh, live, p + FIXED, klen, l);
            if (p[8] == DEL && l) {
                HASH_DEL(live, l);
                free(l);
            } else if (p[8] == PUT) {
                if (!l && !(l = calloc(1, sizeof(*l)))) {
                    rc = GKV_ENOMEM;
                    break;
                }
                if (!l->rec) {
                    l->rec = p;
                    HASH_ADD_KEYPTR(hh, live, p + FIXED, klen, l);
                } else {
                    l->rec = p; /* the same key bytes: its hash entry stays valid */
                }
            }
        } else {
            *bad = true;
            snprintf(why, cap, "record at byte %llu has impossible fields; what follows is dropped",
                     (unsigned long long)off);
            break;
        }
        off += len;
    }
    live_t *l, *tmp;
    HASH_ITER(hh, live, l, tmp)
    {
        if (rc)
            break;
        const uint8_t *p = l->rec;
        gkv_jrec_t r;
        memcpy(&r.dev, p + 12, 4);
        memcpy(&r.klen, p + 16, 4);
        memcpy(&r.meta_len, p + 20, 4);
        memcpy(&r.size, p + 24, 8);
        memcpy(&r.addr, p + 32, 8);
        memcpy(&r.expire_unix_ms, p + 40, 8);
        memcpy(&r.base, p + 48, 8);
        memcpy(&r.base_size, p + 56, 8);
        memcpy(&r.exp_len, p + 64, 4);
        r.key = p + FIXED;
        r.meta = p + FIXED + r.klen;
        r.exp = r.meta + r.meta_len;
        rc = fn(arg, &r);
    }
    drop_all(&live);
    munmap((void *)map, size);
    if (rc == GKV_ENOMEM)
        snprintf(why, cap, "out of host memory replaying the journal");
    return rc;
}
