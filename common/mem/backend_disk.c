/* backend_disk.c: value memory in one file on a local filesystem, for the disk tier below the
 * host tier (docs/tiers.md). Only what a tier needs: alloc/free (offsets in the file, the
 * bookkeeping outside it), and blocking copies (read_sync/write_sync: pread/pwrite). Each value
 * is a record: a 64-byte header (magic, CRC-32C, length) right before its bytes, written with
 * them and checked when the whole value is read back, so a damaged file is found, not served.
 * The file is created empty at start (a tier's values do not outlive the daemon yet). */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arena.h"
#include "backend.h"
#include "crc32c.h"
#include "error.h"
#include "log.h"

/* Records start at 64-byte boundaries: a value's bytes follow its 64-byte header. The file's
 * address range (capacity) must allow for that much more per value. */
#define DISK_ALIGN 64u
#define HEADER 64u
#define MAGIC 0x444b5647u /* "GVKD" little-endian */

typedef struct {
    gkv_backend_t base;
    int fd;
    gkv_arena_t *arena;
    char path[4096];
    uint64_t corrupt, errors;
} disk_backend_t;

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A value's address is its bytes' offset; its header is the HEADER bytes before them. */
static int disk_alloc(gkv_backend_t *b, uint64_t size, int lane, gkv_devptr_t *out)
{
    (void)lane;
    disk_backend_t *d = (disk_backend_t *)b;
    uint64_t off;
    int rc = gkv_arena_alloc(d->arena, size + HEADER, &off);
    if (rc)
        return rc == GKV_ENOMEM ? GKV_EOOM : rc;
    out->v = off + HEADER;
    return 0;
}

static void disk_free(gkv_backend_t *b, gkv_devptr_t p, uint64_t size, int lane)
{
    (void)lane;
    disk_backend_t *d = (disk_backend_t *)b;
    gkv_arena_free(d->arena, p.v - HEADER, size + HEADER);
}

static int io_all(int fd, void *buf, size_t len, uint64_t off, bool write_it)
{
    uint8_t *p = buf;
    while (len) {
        ssize_t n = write_it ? pwrite(fd, p, len, (off_t)off) : pread(fd, p, len, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n == 0 ? EIO : errno;
        p += n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
    return 0;
}

/* A read of any part of the file's values (a snapshot reads in chunks): not checked. */
static int disk_read_sync(gkv_backend_t *b, void *dst, gkv_devptr_t src, size_t len)
{
    disk_backend_t *d = (disk_backend_t *)b;
    int e = io_all(d->fd, dst, len, src.v, false);
    if (e) {
        d->errors++;
        GKV_ERROR("disk tier: reading %s: %s", d->path, strerror(e));
        return GKV_EIO;
    }
    return 0;
}

int gkv_backend_disk_read_value(gkv_backend_t *b, void *dst, gkv_devptr_t p, uint64_t len)
{
    disk_backend_t *d = (disk_backend_t *)b;
    uint8_t h[HEADER];
    int rc = disk_read_sync(b, h, (gkv_devptr_t){p.v - HEADER}, HEADER);
    if (!rc)
        rc = disk_read_sync(b, dst, p, (size_t)len);
    if (rc)
        return rc;
    if (get32(h) != MAGIC || (get32(h + 8) | (uint64_t)get32(h + 12) << 32) != len ||
        gkv_crc32c(0, dst, (size_t)len) != get32(h + 4)) {
        d->corrupt++;
        GKV_ERROR("disk tier: a %llu-byte value at offset %llu of %s fails its checksum",
                  (unsigned long long)len, (unsigned long long)p.v, d->path);
        return GKV_EIO;
    }
    return 0;
}

static int disk_write_sync(gkv_backend_t *b, gkv_devptr_t dst, const void *src, size_t len)
{
    disk_backend_t *d = (disk_backend_t *)b;
    uint8_t h[HEADER] = {0};
    put32(h, MAGIC);
    put32(h + 4, gkv_crc32c(0, src, len));
    put32(h + 8, (uint32_t)len);
    put32(h + 12, (uint32_t)((uint64_t)len >> 32));
    int e = io_all(d->fd, (void *)src, len, dst.v, true);
    if (!e)
        e = io_all(d->fd, h, HEADER, dst.v - HEADER, true);
    if (e) {
        if (d->errors++ % 1000 == 0) /* a full disk fails every write: not every one logged */
            GKV_ERROR("disk tier: writing %s: %s (%llu errors so far)", d->path, strerror(e),
                      (unsigned long long)d->errors);
        return GKV_EIO;
    }
    return 0;
}

static void disk_close(gkv_backend_t *b)
{
    disk_backend_t *d = (disk_backend_t *)b;
    gkv_arena_free_all(d->arena);
    if (d->fd >= 0) {
        close(d->fd);
        unlink(d->path);
    }
    free(d);
}

static const gkv_backend_ops_t disk_ops = {
    .alloc = disk_alloc,
    .free = disk_free,
    .read_sync = disk_read_sync,
    .write_sync = disk_write_sync,
    .close = disk_close,
};

uint64_t gkv_backend_disk_corrupt(const gkv_backend_t *b)
{
    return ((const disk_backend_t *)b)->corrupt;
}

uint64_t gkv_backend_disk_errors(const gkv_backend_t *b)
{
    return ((const disk_backend_t *)b)->errors;
}

int gkv_backend_disk_open(const char *dir, uint64_t capacity, gkv_backend_t **out, char *why,
                          size_t cap)
{
    disk_backend_t *d = calloc(1, sizeof(*d));
    if (!d) {
        snprintf(why, cap, "out of host memory");
        return GKV_ENOMEM;
    }
    d->fd = -1;
    struct stat st;
    if (stat(dir, &st) || !S_ISDIR(st.st_mode)) {
        snprintf(why, cap, "%s is not a directory", dir);
        free(d);
        return GKV_EINVAL;
    }
    if (snprintf(d->path, sizeof(d->path), "%s/gpukv-tier-%d.bin", dir, (int)getpid()) >=
        (int)sizeof(d->path)) {
        snprintf(why, cap, "the directory's name is too long");
        free(d);
        return GKV_EINVAL;
    }
    d->fd = open(d->path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (d->fd < 0) {
        snprintf(why, cap, "creating %s: %s", d->path, strerror(errno));
        free(d);
        return GKV_ESYS;
    }
    int rc = gkv_arena_alloc_init(&d->arena, capacity, DISK_ALIGN);
    if (rc) {
        snprintf(why, cap, "out of host memory");
        disk_close(&d->base);
        return rc;
    }
    d->base = (gkv_backend_t){.ops = &disk_ops, .name = "disk", .device = -1,
                              .gpu_name = "disk", .capacity = capacity,
                              .device_total = capacity};
    *out = &d->base;
    return 0;
}
