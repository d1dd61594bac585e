/* snapshot_load.c: the newest valid snapshot loaded at start (snapshot.h): the file checked part
 * by part (snapfile.h), each record placed like a journal's (place.h), the value written to its
 * device from the file. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crc32c.h"
#include "duration.h"
#include "error.h"
#include "frame.h"
#include "log.h"
#include "place.h"
#include "snapfile.h"
#include "snapshot.h"

#define CHUNK GKV_SNAP_CHUNK

typedef struct {
    gkv_snapshots_t *sn;
    gkv_placer_t placer;
    int fd;
    bool direct, eof;
    const char *path;
    uint8_t *buf;    /* CHUNK pinned bytes: the file's current block */
    size_t pos, len; /* what of it is read, and what it holds */
    uint32_t ndev;
    uint64_t bytes, progress_at;
    char *err;
    size_t cap;
} loader_t;

/* Says what is wrong with the file in l->err; returns GKV_EIO. */
__attribute__((format(printf, 2, 3))) static int bad(loader_t *l, const char *fmt, ...)
{
    int n = snprintf(l->err, l->cap, "snapshot %s is corrupt or unreadable: ", l->path);
    if (n >= 0 && (size_t)n < l->cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(l->err + n, l->cap - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return GKV_EIO;
}

/* The next block of the file into buf: whole blocks of CHUNK bytes from offset 0, so that
 * O_DIRECT's alignment holds (the last one is short). False at the end or on an error. */
static bool refill(loader_t *l)
{
    if (l->eof)
        return false;
    size_t got = 0;
    while (got < CHUNK) {
        ssize_t r = read(l->fd, l->buf + got, CHUNK - got);
        if (r < 0 && (errno == EINTR || gkv_snap_drop_direct(l->fd, &l->direct)))
            continue;
        if (r < 0)
            return false;
        if (r == 0) {
            l->eof = true;
            break;
        }
        got += (size_t)r;
        if (l->direct && got % 4096)
            l->eof = true; /* a short direct read is the end */
        if (l->eof)
            break;
    }
    l->pos = 0;
    l->len = got;
    return got > 0;
}

/* Up to n bytes in place (*p, borrowed until the next call), at least 1; 0 at the end. */
static size_t take(loader_t *l, size_t n, const uint8_t **p)
{
    if (l->pos == l->len && !refill(l))
        return 0;
    size_t k = l->len - l->pos < n ? l->len - l->pos : n;
    *p = l->buf + l->pos;
    l->pos += k;
    return k;
}

static bool read_exact(loader_t *l, void *dst, size_t n)
{
    uint8_t *d = dst;
    while (n) {
        const uint8_t *p;
        size_t k = take(l, n, &p);
        if (!k)
            return false;
        memcpy(d, p, k);
        d += k;
        n -= k;
    }
    return true;
}

static int load_header(loader_t *l, uint64_t *nkeys)
{
    uint8_t h[GKV_SNAP_HEADER_LEN];
    gkv_snap_header_t hd;
    if (!read_exact(l, h, sizeof(h)))
        return bad(l, "the header is cut short");
    const char *why = gkv_snap_header_decode(h, &hd);
    if (why)
        return bad(l, "%s", why);
    uint8_t table[GKV_MAX_DEVICES * GKV_SNAP_UUID_LEN + 4];
    if (!read_exact(l, table, gkv_snap_table_len(hd.ndev)))
        return bad(l, "the device table is cut short");
    if (!gkv_snap_table_check(table, hd.ndev))
        return bad(l, "the device table's checksum is wrong");
    l->ndev = hd.ndev;
    *nkeys = hd.keys;
    /* By UUID: a successor may see the GPUs in another order; one it lacks loses the map. */
    for (uint32_t i = 0; i < hd.ndev; i++) {
        const char *u = (const char *)table + i * GKV_SNAP_UUID_LEN;
        gkv_placer_device(&l->placer, l->sn->env.devs, i, u, strnlen(u, GKV_SNAP_UUID_LEN));
    }
    return 0;
}

/* Reads one record and places it (unless skipped: expired, too long, no room). */
static int load_record(loader_t *l, uint64_t i)
{
    uint8_t r[GKV_SNAP_RECORD_LEN];
    gkv_jrec_t rec;
    if (!read_exact(l, r, sizeof(r)))
        return bad(l, "record %" PRIu64 " is cut short", i);
    const char *why = gkv_snap_record_decode(r, l->ndev, &rec);
    if (why)
        return bad(l, "record %" PRIu64 "%s", i, why);
    uint8_t names[GKV_SNAP_KEY_MAX + GKV_MAX_META];
    if (!read_exact(l, names, rec.klen + rec.meta_len))
        return bad(l, "record %" PRIu64 " is cut short", i);
    rec.key = names;
    rec.meta = names + rec.klen;
    uint32_t crc, vcrc = gkv_crc32c(0, names, rec.klen + rec.meta_len);
    gkv_entry_t *e = NULL;
    unsigned to;
    if (!gkv_place_check(&l->placer, &rec, &to) &&
        gkv_place_entry(&l->placer, &rec, to, GKV_LANE_SHARED, &e))
        return bad(l, "out of memory at record %" PRIu64, i);
    for (uint64_t off = 0; off < rec.size;) {
        const uint8_t *p;
        size_t n = take(l, rec.size - off < CHUNK ? (size_t)(rec.size - off) : CHUNK, &p);
        if (!n) {
            if (e)
                gkv_place_abandon(&l->placer, e);
            return bad(l, "record %" PRIu64 "'s value is cut short", i);
        }
        vcrc = gkv_crc32c(vcrc, p, n);
        if (e) {
            gkv_backend_t *be = gkv_store_be(l->placer.store, e);
            if (be->ops->write_sync(be, (gkv_devptr_t){e->mem.v + off}, p, n)) {
                gkv_place_abandon(&l->placer, e);
                return bad(l, "writing record %" PRIu64 " to the device failed", i);
            }
        }
        off += n;
        l->bytes += n;
    }
    if (!read_exact(l, &crc, 4) || crc != vcrc) {
        if (e)
            gkv_place_abandon(&l->placer, e);
        return bad(l, "record %" PRIu64 "'s checksum is wrong", i);
    }
    if (!e)
        return 0;
    if (gkv_place_publish(&l->placer, &rec, e))
        return bad(l, "out of host memory at record %" PRIu64, i);
    if (l->bytes >= l->progress_at) {
        GKV_INFO("snapshot: loading %s: %" PRIu64 " keys, %" PRIu64 " bytes so far", l->path,
                 l->placer.keys, l->bytes);
        l->progress_at = l->bytes + (1ull << 30);
    }
    return 0;
}

/* Loads path whole into the empty store; on any error the store is emptied again. */
static int load_file(gkv_snapshots_t *sn, const char *path, char *err, size_t cap)
{
    loader_t l = {.sn = sn, .path = path, .err = err, .cap = cap, .progress_at = 1ull << 30};
    gkv_backend_t *be0 = sn->env.devs->dev[0].be;
    l.fd = gkv_snap_open(path, O_RDONLY, &l.direct);
    if (l.fd < 0) {
        snprintf(err, cap, "cannot open snapshot %s: %s", path, strerror(errno));
        return GKV_EIO;
    }
    gkv_placer_init(&l.placer, &sn->env, true);
    l.buf = be0->ops->staging_alloc(be0, CHUNK);
    uint64_t nkeys = 0, t0 = gkv_clock_ms();
    int rc = l.buf ? load_header(&l, &nkeys) : GKV_ENOMEM;
    for (uint64_t i = 0; !rc && i < nkeys; i++)
        rc = load_record(&l, i);
    uint8_t t[GKV_SNAP_TRAILER_LEN];
    if (!rc && !read_exact(&l, t, sizeof(t)))
        rc = bad(&l, "the trailer is missing");
    if (!rc && !gkv_snap_trailer_check(t, nkeys))
        rc = bad(&l, "the trailer is wrong");
    else if (!rc && (l.pos < l.len || refill(&l)))
        rc = bad(&l, "bytes follow the trailer");
    if (l.buf)
        be0->ops->staging_free(be0, l.buf, CHUNK);
    close(l.fd);
    if (rc == GKV_ENOMEM)
        snprintf(err, cap, "out of pinned host memory to load %s", path);
    if (rc) {
        gkv_store_flush(sn->env.store); /* never half-loaded */
        return rc;
    }
    const gkv_placer_t *p = &l.placer;
    snprintf(sn->loaded_file, sizeof(sn->loaded_file), "%s", strrchr(path, '/') + 1);
    sn->loaded_keys = p->keys;
    sn->loaded_bytes = l.bytes;
    sn->load_ms = gkv_clock_ms() - t0;
    GKV_INFO("snapshot: loaded %s: %" PRIu64 " keys, %" PRIu64 " bytes in %.2f s; skipped %" PRIu64
             " past their deadline, %" PRIu64 " for want of room, %" PRIu64
             " with keys longer than --max-key-size",
             path, p->keys, l.bytes, (double)sn->load_ms / 1e3, p->expired, p->no_room,
             p->too_long);
    return 0;
}

/* A save that a crash cut short leaves its temporary file: never loaded, removed here. */
static void remove_partial(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!gkv_snap_tmp_name(de->d_name))
            continue;
        char p[PATH_MAX + 256];
        snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
        if (unlink(p) == 0)
            GKV_WARN("snapshot: removed %s, a save that did not finish", p);
    }
    closedir(d);
}

int gkv_snapshot_load(gkv_snapshots_t *sn, char *err, size_t cap)
{
    const char *dir = sn->dir;
    if (!dir[0])
        return 0;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        snprintf(err, cap, "cannot create --snapshot-dir %s: %s", dir, strerror(errno));
        return GKV_ESYS;
    }
    remove_partial(dir);
    char **names;
    int n = gkv_snap_list(dir, &names);
    if (n < 0) {
        snprintf(err, cap, "cannot read --snapshot-dir %s: %s", dir, strerror(errno));
        return GKV_ESYS;
    }
    int rc = 0;
    for (int i = 0; i < n; i++) {
        char path[PATH_MAX + 256];
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        if (rc == 0 && !sn->loaded_file[0]) {
            rc = load_file(sn, path, err, cap);
            if (rc && sn->skip_corrupt) {
                GKV_ERROR("%s; skipped (--snapshot-skip-corrupt), trying an older one", err);
                sn->skipped_corrupt++;
                rc = 0;
            }
        }
        free(names[i]);
    }
    if (n > 0)
        free(names);
    if (!rc && !sn->loaded_file[0])
        GKV_INFO("snapshot: nothing to load in %s; starting empty", dir);
    return rc;
}
