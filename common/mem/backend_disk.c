/* backend_disk.c: value memory in one file on a local filesystem, for the disk tier below the
 * host tier (docs/tiers.md): records and their copies (the layout: backend_disk_impl.h; the
 * file found, opened and scanned: backend_disk_open.c). Only what a tier needs: alloc/free
 * (offsets in the file, the bookkeeping outside it) and blocking copies (pread/pwrite, with
 * O_DIRECT where the filesystem takes it: the host tier above is the cache, the page cache
 * would hold the same bytes a second time). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_disk_impl.h"
#include "crc32c.h"
#include "duration.h"
#include "error.h"
#include "hash.h"
#include "log.h"

void gkv__disk_put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

uint32_t gkv__disk_get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void gkv__disk_put64(uint8_t *p, uint64_t v)
{
    gkv__disk_put32(p, (uint32_t)v);
    gkv__disk_put32(p + 4, (uint32_t)(v >> 32));
}

uint64_t gkv__disk_get64(const uint8_t *p)
{
    return gkv__disk_get32(p) | (uint64_t)gkv__disk_get32(p + 4) << 32;
}

uint64_t gkv__disk_total(uint64_t size, uint32_t klen, uint32_t mlen)
{
    uint64_t n = HEADER + size + klen + mlen;
    return (n + DISK_ALIGN - 1) & ~(uint64_t)(DISK_ALIGN - 1);
}

uint64_t gkv__disk_mac(const disk_backend_t *d, const uint8_t *h, const uint8_t *label,
                       uint32_t label_len)
{
    uint8_t *buf = malloc(40 + (size_t)label_len);
    if (!buf)
        return 0; /* no MAC is 0 by chance: the record is not trusted */
    memcpy(buf, h + 8, 40);
    memcpy(buf + 40, label, label_len);
    uint64_t mac = gkv_siphash(buf, 40 + (size_t)label_len, d->key);
    free(buf);
    return mac;
}

int gkv__disk_io(int fd, void *buf, size_t len, uint64_t off, bool write_it)
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

static disk_rec_t *rec_of(disk_backend_t *d, gkv_devptr_t p)
{
    disk_rec_t *r = NULL;
    HASH_FIND(hh, d->recs, &p.v, sizeof(uint64_t), r);
    return r;
}

/* An O_DIRECT copier for a copy off the loop: a kept one, or a new one (NULL without memory). */
static disk_direct_t *take_direct(disk_backend_t *d)
{
    for (int i = 0; i < 2; i++) {
        disk_direct_t *x = d->spare[i];
        if (x) {
            d->spare[i] = NULL;
            return x;
        }
    }
    return gkv__direct_new(d->uring);
}

/* x back from a copy off the loop: kept (two at most), or freed. */
static void give_direct(disk_backend_t *d, disk_direct_t *x)
{
    for (int i = 0; i < 2 && x; i++)
        if (!d->spare[i] && gkv__direct_ring(x) == gkv__direct_ring(d->io)) {
            d->spare[i] = x;
            return;
        }
    gkv__direct_free(x);
}

void gkv_backend_disk_label(gkv_backend_t *b, const void *key, uint32_t klen, const void *meta,
                            uint32_t mlen, uint64_t expire_unix_ms)
{
    disk_backend_t *d = (disk_backend_t *)b;
    free(d->next_label);
    d->next_label = malloc((size_t)klen + mlen + 1);
    d->next_klen = d->next_mlen = 0;
    if (!d->next_label)
        return; /* written without: never reloaded */
    memcpy(d->next_label, key, klen);
    if (mlen)
        memcpy(d->next_label + klen, meta, mlen);
    d->next_klen = klen;
    d->next_mlen = mlen;
    d->next_expire = expire_unix_ms;
}

/* A value's address is its bytes' file offset, after its header; its record's allocator
 * offset is FILE_BASE + HEADER less. */
static int disk_alloc(gkv_backend_t *b, uint64_t size, int lane, gkv_devptr_t *out)
{
    (void)lane;
    disk_backend_t *d = (disk_backend_t *)b;
    disk_rec_t *r = calloc(1, sizeof(*r));
    if (!r)
        return GKV_ENOMEM;
    if (d->adopt >= 0) { /* a reload: the found record's own memory */
        gkv_disk_found_t *f = &d->found[d->adopt];
        if (f->size != size) {
            free(r);
            return GKV_EINVAL;
        }
        d->adopted[d->adopt] = true;
        d->adopt = -1;
        r->v = f->mem.v;
        r->total = gkv__disk_total(size, f->klen, f->mlen);
    } else {
        r->klen = d->next_klen;
        r->mlen = d->next_mlen;
        r->label = d->next_label;
        r->expire_unix_ms = d->next_expire;
        d->next_label = NULL;
        d->next_klen = d->next_mlen = 0;
        r->total = gkv__disk_total(size, r->klen, r->mlen);
        uint64_t off;
        int rc = gkv_arena_alloc(d->arena, r->total, &off);
        if (rc) {
            free(r->label);
            free(r);
            return rc == GKV_ENOMEM ? GKV_EOOM : rc;
        }
        r->v = off + FILE_BASE + HEADER;
    }
    HASH_ADD(hh, d->recs, v, sizeof(uint64_t), r);
    out->v = r->v;
    return 0;
}

static void disk_free(gkv_backend_t *b, gkv_devptr_t p, uint64_t size, int lane)
{
    (void)lane;
    (void)size;
    disk_backend_t *d = (disk_backend_t *)b;
    disk_rec_t *r = rec_of(d, p);
    if (!r)
        return;
    gkv_arena_free(d->arena, r->v - HEADER - FILE_BASE, r->total);
    HASH_DEL(d->recs, r);
    free(r->label);
    free(r);
}

static void io_error(disk_backend_t *d, const char *what, int e)
{
    if (d->errors++ % 1000 == 0) /* a full disk fails every write: not every one logged */
        GKV_ERROR("disk tier: %s %s: %s (%llu errors so far)", what, d->path, strerror(e),
                  (unsigned long long)d->errors);
}

/* A read of any part of the file's values (a snapshot reads in chunks): not checked. */
static int disk_read_sync(gkv_backend_t *b, void *dst, gkv_devptr_t src, size_t len)
{
    disk_backend_t *d = (disk_backend_t *)b;
    int e = gkv__disk_io(d->fd, dst, len, src.v, false);
    if (e) {
        io_error(d, "reading", e);
        return GKV_EIO;
    }
    return 0;
}

/* The value at p (len bytes) into dst, checked: 0, an errno, or -1 (it fails its checksum). Any
 * thread, with an O_DIRECT copier of its own (x, with dfd). */
static int read_checked(int fd, int dfd, disk_direct_t *x, void *dst, gkv_devptr_t p,
                        uint64_t len)
{
    uint8_t h[HEADER];
    uint32_t crc = 0;
    int e;
    if (dfd >= 0) {
        e = gkv__direct_read(x, dfd, p.v, len, dst, h, &crc);
    } else {
        e = gkv__disk_io(fd, h, HEADER, p.v - HEADER, false);
        if (!e)
            e = gkv__disk_io(fd, dst, (size_t)len, p.v, false);
        if (!e)
            crc = gkv_crc32c(0, dst, (size_t)len);
    }
    if (e)
        return e;
    if (gkv__disk_get32(h) != MAGIC_REC || gkv__disk_get64(h + 8) != len ||
        crc != gkv__disk_get32(h + 16))
        return -1;
    return 0;
}

/* Counts and logs read_checked's failure rc of the value at p. */
static int read_failed(disk_backend_t *d, gkv_devptr_t p, uint64_t len, int rc)
{
    if (rc > 0) {
        io_error(d, "reading", rc);
    } else if (rc < 0) {
        d->corrupt++;
        GKV_ERROR("disk tier: a %llu-byte value at offset %llu of %s fails its checksum",
                  (unsigned long long)len, (unsigned long long)p.v, d->path);
    }
    return rc ? GKV_EIO : 0;
}

int gkv_backend_disk_read_value(gkv_backend_t *b, void *dst, gkv_devptr_t p, uint64_t len)
{
    disk_backend_t *d = (disk_backend_t *)b;
    return read_failed(d, p, len, read_checked(d->fd, d->dfd, d->io, dst, p, len));
}

struct gkv_disk_read {
    int fd, dfd;
    disk_direct_t *x; /* its own, with O_DIRECT */
    void *dst;
    gkv_devptr_t p;
    uint64_t len;
};

gkv_disk_read_t *gkv_backend_disk_read_begin(gkv_backend_t *b, gkv_devptr_t p, void *dst,
                                             uint64_t len)
{
    disk_backend_t *d = (disk_backend_t *)b;
    gkv_disk_read_t *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    *r = (gkv_disk_read_t){.fd = d->fd, .dfd = d->dfd, .dst = dst, .p = p, .len = len};
    if (r->dfd >= 0 && !(r->x = take_direct(d))) {
        free(r);
        return NULL;
    }
    return r;
}

int gkv_backend_disk_read_run(gkv_disk_read_t *r)
{
    return read_checked(r->fd, r->dfd, r->x, r->dst, r->p, r->len);
}

int gkv_backend_disk_read_end(gkv_backend_t *b, gkv_disk_read_t *r, int rc)
{
    disk_backend_t *d = (disk_backend_t *)b;
    rc = read_failed(d, r->p, r->len, rc);
    give_direct(d, r->x);
    free(r);
    return rc;
}

/* What a record's write needs, taken on the loop; the copy itself may run on another thread
 * (its own aligned buffer then). */
struct gkv_disk_write {
    int fd, dfd; /* dfd >= 0: O_DIRECT */
    disk_direct_t *x; /* with dfd */
    uint64_t start, total, len;
    const void *src;
    uint8_t *label; /* owned */
    uint32_t klen, mlen, state;
    uint8_t h[HEADER]; /* bytes 0..15 and 20..47 filled at begin; the CRC and MAC at run */
    const uint8_t *mac_key;
};

/* The value, then its key and metadata, then the header: a record torn by a crash has none.
 * 0 or an errno. */
/* The header's MAC (bytes 48..55), once its other bytes are in. 0 or an errno. */
static int seal(struct gkv_disk_write *w)
{
    uint32_t label_len = w->klen + w->mlen;
    uint8_t *buf = malloc(40 + (size_t)label_len);
    if (!buf)
        return ENOMEM;
    memcpy(buf, w->h + 8, 40);
    if (label_len)
        memcpy(buf + 40, w->label, label_len);
    gkv__disk_put64(w->h + 48, gkv_siphash(buf, 40 + (size_t)label_len, w->mac_key));
    free(buf);
    return 0;
}

static int write_record(struct gkv_disk_write *w)
{
    uint32_t label_len = w->klen + w->mlen, crc;
    int e;
    if (w->dfd >= 0) { /* the checksum made on the way, the header's block last */
        const piece_t image[] = {{w->h, HEADER}, {w->src, w->len}, {w->label, label_len}};
        if ((e = gkv__direct_write_rest(w->x, w->dfd, w->start, w->total, image, &crc)))
            return e;
        gkv__disk_put32(w->h + 16, crc);
        if ((e = seal(w)))
            return e;
        return gkv__direct_write_first(w->x, w->dfd, w->start, image);
    }
    gkv__disk_put32(w->h + 16, gkv_crc32c(0, w->src, (size_t)w->len));
    if ((e = seal(w)))
        return e;
    uint64_t v = w->start + HEADER;
    e = gkv__disk_io(w->fd, (void *)w->src, (size_t)w->len, v, true);
    if (!e && label_len)
        e = gkv__disk_io(w->fd, w->label, label_len, v + w->len, true);
    if (!e)
        e = gkv__disk_io(w->fd, w->h, HEADER, w->start, true);
    return e;
}

/* The write of p's record (its label taken over) in state, into w. */
static int write_prepare(disk_backend_t *d, gkv_devptr_t p, const void *src, uint64_t len,
                         uint32_t state, struct gkv_disk_write *w)
{
    disk_rec_t *r = rec_of(d, p);
    if (!r)
        return GKV_EINVAL;
    *w = (struct gkv_disk_write){.fd = d->fd, .dfd = d->dfd, .x = d->io,
                                 .start = p.v - HEADER, .total = r->total, .len = len,
                                 .src = src, .label = r->label, .klen = r->klen, .mlen = r->mlen,
                                 .state = state, .mac_key = d->key};
    r->label = NULL;
    gkv__disk_put32(w->h, MAGIC_REC);
    gkv__disk_put32(w->h + 4, state);
    gkv__disk_put64(w->h + 8, len);
    gkv__disk_put32(w->h + 20, r->klen);
    gkv__disk_put32(w->h + 24, r->mlen);
    gkv__disk_put64(w->h + 32, ++d->seq);
    gkv__disk_put64(w->h + 40, r->expire_unix_ms);
    return 0;
}

static int disk_write_sync(gkv_backend_t *b, gkv_devptr_t dst, const void *src, size_t len)
{
    disk_backend_t *d = (disk_backend_t *)b;
    struct gkv_disk_write w;
    int rc = write_prepare(d, dst, src, len, STATE_LIVE, &w);
    if (rc)
        return rc;
    int e = write_record(&w);
    free(w.label);
    if (e) {
        io_error(d, "writing", e);
        return GKV_EIO;
    }
    return 0;
}

gkv_disk_write_t *gkv_backend_disk_write_begin(gkv_backend_t *b, gkv_devptr_t p, const void *src,
                                               uint64_t len)
{
    disk_backend_t *d = (disk_backend_t *)b;
    gkv_disk_write_t *w = malloc(sizeof(*w));
    if (!w || write_prepare(d, p, src, len, STATE_PENDING, w)) {
        free(w);
        return NULL;
    }
    w->x = NULL;
    if (w->dfd >= 0 && !(w->x = take_direct(d))) {
        free(w->label);
        free(w);
        return NULL;
    }
    return w;
}

int gkv_backend_disk_write_run(gkv_disk_write_t *w)
{
    return write_record(w);
}

void gkv_backend_disk_write_end(gkv_backend_t *b, gkv_disk_write_t *w, int rc)
{
    disk_backend_t *d = (disk_backend_t *)b;
    if (rc > 0)
        io_error(d, "writing", rc);
    give_direct(d, w->x);
    free(w->label);
    free(w);
}

static int write_state(disk_backend_t *d, gkv_devptr_t p, uint32_t state);

/* p's record's state, in the file, timed (the loop waits for it, behind whatever the disk is
 * writing for the demoter). */
static int set_state(disk_backend_t *d, gkv_devptr_t p, uint32_t state)
{
    uint64_t t0 = gkv_clock_us();
    int e = write_state(d, p, state);
    uint64_t us = gkv_clock_us() - t0;
    d->state_writes++;
    d->state_us += us;
    if (us > d->state_max_us)
        d->state_max_us = us;
    return e;
}

static int write_state(disk_backend_t *d, gkv_devptr_t p, uint32_t state)
{
    if (d->dfd < 0) {
        uint8_t b[4];
        gkv__disk_put32(b, state);
        return gkv__disk_io(d->fd, b, sizeof(b), p.v - HEADER + 4, true);
    }
    uint8_t *block = gkv__direct_buf(d->io);
    int e = gkv__disk_io(d->dfd, block, DISK_ALIGN, p.v - HEADER, false);
    if (!e) { /* the first block, read, changed and written back */
        gkv__disk_put32(block + 4, state);
        e = gkv__disk_io(d->dfd, block, DISK_ALIGN, p.v - HEADER, true);
    }
    return e;
}

int gkv_backend_disk_make_live(gkv_backend_t *b, gkv_devptr_t p)
{
    disk_backend_t *d = (disk_backend_t *)b;
    int e = set_state(d, p, STATE_LIVE);
    if (e)
        io_error(d, "making a record live in", e);
    return e ? GKV_EIO : 0;
}

void gkv_backend_disk_retire(gkv_backend_t *b, gkv_devptr_t p)
{
    disk_backend_t *d = (disk_backend_t *)b;
    int e = set_state(d, p, STATE_RETIRED);
    if (e)
        io_error(d, "retiring a record in", e);
}

size_t gkv_backend_disk_found(const gkv_backend_t *b, const gkv_disk_found_t **found)
{
    const disk_backend_t *d = (const disk_backend_t *)b;
    *found = d->found;
    return d->nfound;
}

void gkv_backend_disk_adopt_next(gkv_backend_t *b, size_t i)
{
    disk_backend_t *d = (disk_backend_t *)b;
    d->adopt = i < d->nfound ? (long)i : -1;
}

void gkv_backend_disk_found_done(gkv_backend_t *b)
{
    disk_backend_t *d = (disk_backend_t *)b;
    for (size_t i = 0; i < d->nfound; i++) {
        gkv_disk_found_t *f = &d->found[i];
        if (!d->adopted[i]) {
            gkv_backend_disk_retire(b, f->mem);
            gkv_arena_free(d->arena, f->mem.v - HEADER - FILE_BASE,
                           gkv__disk_total(f->size, f->klen, f->mlen));
        }
        free((void *)f->key); /* key and metadata in one allocation */
    }
    free(d->found);
    free(d->adopted);
    d->found = NULL;
    d->adopted = NULL;
    d->nfound = 0;
    d->adopt = -1;
}

void gkv_backend_disk_discard(gkv_backend_t *b)
{
    disk_backend_t *d = (disk_backend_t *)b;
    if (!d->discard && d->fd >= 0)
        unlink(d->path);
    d->discard = true;
}

static void disk_close(gkv_backend_t *b)
{
    disk_backend_t *d = (disk_backend_t *)b;
    gkv_backend_disk_found_done(b);
    disk_rec_t *r, *tmp;
    HASH_ITER(hh, d->recs, r, tmp)
    {
        HASH_DEL(d->recs, r);
        free(r->label);
        free(r);
    }
    free(d->next_label);
    gkv_arena_free_all(d->arena);
    if (d->dfd >= 0)
        close(d->dfd);
    if (d->fd >= 0)
        close(d->fd); /* the file stays for the next start, unlocked */
    gkv__direct_free(d->io);
    gkv__direct_free(d->spare[0]);
    gkv__direct_free(d->spare[1]);
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

bool gkv_backend_disk_direct(const gkv_backend_t *b)
{
    return ((const disk_backend_t *)b)->dfd >= 0;
}

void gkv_backend_disk_state_stats(const gkv_backend_t *b, uint64_t *writes, uint64_t *us,
                                  uint64_t *max_us)
{
    const disk_backend_t *d = (const disk_backend_t *)b;
    *writes = d->state_writes;
    *us = d->state_us;
    *max_us = d->state_max_us;
}

bool gkv_backend_disk_uring(const gkv_backend_t *b)
{
    const disk_backend_t *d = (const disk_backend_t *)b;
    return d->dfd >= 0 && gkv__direct_ring(d->io);
}

void gkv__disk_open_direct(disk_backend_t *d)
{
    if (d->dfd >= 0)
        close(d->dfd);
    d->dfd = -1;
    if (!d->direct || d->fd < 0)
        return;
    if (!d->io && !(d->io = gkv__direct_new(d->uring))) {
        GKV_WARN("disk tier: no host memory for O_DIRECT's buffers: buffered I/O");
        return;
    }
    d->dfd = open(d->path, O_RDWR | O_DIRECT | O_CLOEXEC);
    if (d->dfd < 0)
        GKV_INFO("disk tier: %s does not take O_DIRECT (%s): buffered I/O", d->path,
                 strerror(errno));
}

int gkv_backend_disk_open(const char *dir, uint64_t capacity, bool reload, unsigned io,
                          gkv_backend_t **out, char *why, size_t cap)
{
    disk_backend_t *d = calloc(1, sizeof(*d));
    if (!d) {
        snprintf(why, cap, "out of host memory");
        return GKV_ENOMEM;
    }
    d->fd = d->dfd = -1;
    d->direct = io & GKV_DISK_DIRECT;
    d->uring = io & GKV_DISK_URING;
    d->adopt = -1;
    d->base = (gkv_backend_t){.ops = &disk_ops, .name = "disk", .device = -1,
                              .gpu_name = "disk", .capacity = capacity,
                              .device_total = capacity};
    int rc = gkv_arena_alloc_init(&d->arena, capacity, DISK_ALIGN);
    if (rc) {
        snprintf(why, cap, "out of host memory");
        free(d);
        return rc;
    }
    if ((rc = gkv__disk_open_file(d, dir, reload, why, cap))) {
        disk_close(&d->base);
        return rc;
    }
    gkv__disk_open_direct(d);
    *out = &d->base;
    return 0;
}
