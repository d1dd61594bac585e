/* backend_disk_open.c: the disk tier's file found, opened and scanned (backend_disk_impl.h).
 * Each daemon has its own file, dir/gpukv-tier-PID.bin, locked (flock) while it lives. A file
 * nobody holds was left by a daemon that is gone (a crash, a stop): with reload the newest one
 * is taken over (renamed to this daemon's name, its live records listed for the store), older
 * ones are removed, since only the newest can be as new as the keys it holds. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend_disk_impl.h"
#include "error.h"
#include "log.h"

#define SCAN_BUF (1u << 20)

/* The newest file in dir nobody holds (its descriptor, locked, and name in path), or -1; the
 * others nobody holds are removed. */
static int take_orphan(const char *dir, bool reload, char *path, size_t cap)
{
    DIR *dh = opendir(dir);
    if (!dh)
        return -1;
    int best = -1;
    struct timespec best_t = {0, 0};
    char name[4096];
    struct dirent *de;
    while ((de = readdir(dh))) {
        int pid;
        char tail[8];
        if (sscanf(de->d_name, "gpukv-tier-%d.%7s", &pid, tail) != 2 || strcmp(tail, "bin"))
            continue;
        if (snprintf(name, sizeof(name), "%s/%s", dir, de->d_name) >= (int)sizeof(name))
            continue;
        int fd = open(name, O_RDWR | O_CLOEXEC);
        if (fd < 0)
            continue;
        struct stat st;
        if (flock(fd, LOCK_EX | LOCK_NB) || fstat(fd, &st)) { /* a live daemon's */
            close(fd);
            continue;
        }
        bool newer = best < 0 || st.st_mtim.tv_sec > best_t.tv_sec ||
                     (st.st_mtim.tv_sec == best_t.tv_sec && st.st_mtim.tv_nsec > best_t.tv_nsec);
        if (!reload || !newer) {
            GKV_WARN("disk tier: removing %s (%s)", name,
                     reload ? "an older file than another one left here" : "--tier-disk-reload no");
            unlink(name);
            close(fd);
            continue;
        }
        if (best >= 0) {
            GKV_WARN("disk tier: removing %s (an older file than another one left here)", path);
            unlink(path);
            close(best);
        }
        best = fd;
        best_t = st.st_mtim;
        snprintf(path, cap, "%s", name);
    }
    closedir(dh);
    return best;
}

static int read_superblock(disk_backend_t *d)
{
    uint8_t sb[64];
    if (gkv__disk_io(d->fd, sb, sizeof(sb), 0, false) || memcmp(sb, MAGIC_FILE, 8))
        return GKV_EIO;
    memcpy(d->key, sb + 16, 16);
    return 0;
}

static int write_superblock(disk_backend_t *d)
{
    uint8_t sb[FILE_BASE] = {0};
    memcpy(sb, MAGIC_FILE, 8);
    if (getrandom(d->key, sizeof(d->key), 0) != (ssize_t)sizeof(d->key))
        return GKV_ESYS;
    memcpy(sb + 16, d->key, 16);
    return gkv__disk_io(d->fd, sb, sizeof(sb), 0, true) ? GKV_ESYS : 0;
}

static int by_seq_desc(const void *a, const void *b)
{
    const gkv_disk_found_t *x = a, *y = b;
    return x->seq < y->seq ? 1 : x->seq > y->seq ? -1 : 0;
}

/* The record whose header is h at file offset pos (of a file of size bytes), when its MAC holds:
 * 1 with *f filled (key and metadata allocated) and its state, 0 when there is none there, or
 * a negative code (out of memory). */
static int record_at(disk_backend_t *d, const uint8_t *h, uint64_t pos, uint64_t size,
                     gkv_disk_found_t *f, uint32_t *state)
{
    uint64_t len = gkv__disk_get64(h + 8);
    uint32_t klen = gkv__disk_get32(h + 20), mlen = gkv__disk_get32(h + 24);
    *state = gkv__disk_get32(h + 4);
    if (gkv__disk_get32(h) != MAGIC_REC || (*state != STATE_LIVE && *state != STATE_RETIRED && *state != STATE_PENDING) ||
        klen > 65535 || mlen > (1u << 20) || len > size ||
        pos + HEADER + len + klen + mlen > size) /* the last record's padding is past the end */
        return 0;
    uint8_t *label = malloc((size_t)klen + mlen + 1);
    if (!label)
        return GKV_ENOMEM;
    if (gkv__disk_io(d->fd, label, (size_t)klen + mlen, pos + HEADER + len, false) ||
        gkv__disk_mac(d, h, label, klen + mlen) != gkv__disk_get64(h + 48)) {
        free(label);
        return 0;
    }
    *f = (gkv_disk_found_t){.mem = {pos + HEADER}, .size = len, .seq = gkv__disk_get64(h + 32),
                            .expire_unix_ms = gkv__disk_get64(h + 40), .key = label,
                            .meta = label + klen, .klen = klen, .mlen = mlen};
    return 1;
}

/* Lists d's live records, in file order, reserving their space; skips retired ones by their
 * length, holes (never written) by SEEK_DATA, and anything else a block at a time. Returns 0 or GKV_ENOMEM. */
static int scan(disk_backend_t *d, uint64_t size)
{
    uint8_t *buf = malloc(SCAN_BUF);
    size_t cap = 0;
    if (!buf)
        return GKV_ENOMEM;
    uint64_t boff = 0, blen = 0, pos = FILE_BASE;
    int rc = 0;
    while (pos + HEADER <= size) {
        if (pos < boff || pos + HEADER > boff + blen) {
            /* Never written (a hole in the sparse file): nothing to read there. */
            off_t data = lseek(d->fd, (off_t)pos, SEEK_DATA);
            if (data < 0 && errno == ENXIO)
                break; /* holes to the end */
            if (data > (off_t)pos) {
                pos = ((uint64_t)data + DISK_ALIGN - 1) & ~(uint64_t)(DISK_ALIGN - 1);
                continue;
            }
            uint64_t n = size - pos < SCAN_BUF ? size - pos : SCAN_BUF;
            if (gkv__disk_io(d->fd, buf, (size_t)n, pos, false))
                break; /* what follows cannot be read: not reloaded */
            boff = pos;
            blen = n;
        }
        gkv_disk_found_t f;
        uint32_t state;
        int got = record_at(d, buf + (pos - boff), pos, size, &f, &state);
        if (got < 0) {
            rc = got;
            break;
        }
        if (!got) {
            pos += DISK_ALIGN;
            continue;
        }
        uint64_t total = gkv__disk_total(f.size, f.klen, f.mlen);
        if (f.seq > d->seq)
            d->seq = f.seq;
        if (state != STATE_LIVE || !f.klen || /* retired, or written and never linked */
            gkv_arena_reserve(d->arena, pos - FILE_BASE, total)) {
            free((void *)f.key);
            pos += total;
            continue;
        }
        if (d->nfound == cap) {
            size_t ncap = cap ? 2 * cap : 256;
            gkv_disk_found_t *nf = realloc(d->found, ncap * sizeof(*nf));
            if (!nf) {
                free((void *)f.key);
                gkv_arena_free(d->arena, pos - FILE_BASE, total);
                rc = GKV_ENOMEM;
                break;
            }
            d->found = nf;
            cap = ncap;
        }
        d->found[d->nfound++] = f;
        pos += total;
    }
    free(buf);
    (void)posix_fadvise(d->fd, 0, 0, POSIX_FADV_DONTNEED); /* the scan's pages: not kept */
    if (!rc && d->nfound && !(d->adopted = calloc(d->nfound, sizeof(bool))))
        rc = GKV_ENOMEM;
    if (!rc)
        qsort(d->found, d->nfound, sizeof(*d->found), by_seq_desc);
    return rc;
}

/* Lists the live records of d's file (d->fd, its superblock read). Returns 0 or a code with
 * why. */
static int read_back(disk_backend_t *d, char *why, size_t cap)
{
    struct stat fs;
    int rc = fstat(d->fd, &fs) ? GKV_ESYS : scan(d, (uint64_t)fs.st_size);
    if (rc) {
        snprintf(why, cap, "reading %s back: %s", d->path,
                 rc == GKV_ENOMEM ? "out of host memory" : strerror(errno));
        return rc;
    }
    GKV_INFO("disk tier: %zu values found in %s", d->nfound, d->path);
    return 0;
}

int gkv_backend_disk_fd(const gkv_backend_t *b)
{
    return ((const disk_backend_t *)b)->fd;
}

int gkv_backend_disk_take(gkv_backend_t *b, int fd, char *why, size_t cap)
{
    disk_backend_t *d = (disk_backend_t *)b;
    char link[64], from[sizeof(d->path)];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, from, sizeof(from) - 1);
    int old = d->fd;
    d->fd = fd;
    if (d->recs || d->nfound || n <= 0 || flock(fd, LOCK_EX | LOCK_NB) || read_superblock(d)) {
        d->fd = old;
        close(fd);
        snprintf(why, cap, "%s", d->recs || d->nfound ? "this disk tier holds values already"
                                                      : "not a disk tier's file");
        return GKV_EINVAL;
    }
    from[n] = 0;
    /* Under this daemon's name (its own empty file goes); the predecessor removes its name
     * as it leaves, which is then no longer there. */
    close(old);
    if (rename(from, d->path)) {
        GKV_WARN("disk tier: %s stays under its name: %s", from, strerror(errno));
        unlink(d->path);
        snprintf(d->path, sizeof(d->path), "%s", from);
    }
    gkv__disk_open_direct(d);
    return read_back(d, why, cap);
}

int gkv__disk_open_file(disk_backend_t *d, const char *dir, bool reload, char *why, size_t cap)
{
    struct stat st;
    if (stat(dir, &st) || !S_ISDIR(st.st_mode)) {
        snprintf(why, cap, "%s is not a directory", dir);
        return GKV_EINVAL;
    }
    if (snprintf(d->path, sizeof(d->path), "%s/gpukv-tier-%d.bin", dir, (int)getpid()) >=
        (int)sizeof(d->path) - 16) {
        snprintf(why, cap, "the directory's name is too long");
        return GKV_EINVAL;
    }
    char left[sizeof(d->path)];
    int fd = take_orphan(dir, reload, left, sizeof(left));
    if (fd >= 0 && strcmp(left, d->path) && rename(left, d->path)) {
        snprintf(why, cap, "taking over %s: %s", left, strerror(errno));
        close(fd);
        return GKV_ESYS;
    }
    d->fd = fd;
    if (fd >= 0 && read_superblock(d) == 0)
        return read_back(d, why, cap);
    if (fd >= 0) { /* not a tier's file after all: start it again */
        GKV_WARN("disk tier: %s has no superblock: started empty", d->path);
        close(fd);
    }
    d->fd = open(d->path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (d->fd < 0 || flock(d->fd, LOCK_EX | LOCK_NB) || write_superblock(d)) {
        snprintf(why, cap, "creating %s: %s", d->path, strerror(errno));
        return GKV_ESYS;
    }
    return 0;
}
