/* backend_disk_direct.c: the disk tier's O_DIRECT copies (backend_disk_impl.h). A record goes
 * to and from the file through aligned buffers, a piece at a time. One pwrite of a whole value
 * keeps the disk busy with many requests at once (the kernel splits it); one piece at a time,
 * with the copy into the buffer and the checksum between them, does not (0.5-0.7x a raw write,
 * bench/RESULTS.md). With io_uring, up to DIRECT_DEPTH pieces are in flight while the thread
 * fills (or empties) the next; pieces complete in any order, each buffer is reused only once
 * its own piece is done, and nothing returns before every piece it started is done (the
 * kernel writes into, or reads from, the buffers until then). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backend_disk_impl.h"
#include "crc32c.h"
#include "log.h"

#ifdef GKV_HAVE_URING
#include <liburing.h>
#endif

struct disk_direct {
    uint8_t *mem; /* DIRECT_BYTES, block-aligned: DIRECT_DEPTH pieces */
#ifdef GKV_HAVE_URING
    struct io_uring ring;
    bool ring_ok;
    unsigned busy; /* pieces in flight */
    struct {
        uint64_t off; /* in the file */
        uint32_t len;
        bool busy, write;
        int dfd;
    } slot[DIRECT_DEPTH];
    int err; /* the first failure among the pieces reaped */
#endif
    bool broken; /* the ring failed with pieces in flight: mem may still be the kernel's */
};

disk_direct_t *gkv__direct_new(bool uring)
{
    disk_direct_t *x = calloc(1, sizeof(*x));
    if (!x)
        return NULL;
    if (posix_memalign((void **)&x->mem, DISK_ALIGN, DIRECT_BYTES)) {
        free(x);
        return NULL;
    }
#ifdef GKV_HAVE_URING
    int e = uring ? io_uring_queue_init(DIRECT_DEPTH, &x->ring, 0) : 0;
    x->ring_ok = uring && e == 0;
    static bool told;
    if (e && !told) { /* a kernel without it, or a sandbox that forbids it */
        told = true;
        GKV_INFO("disk tier: no io_uring here (%s): one copy at a time", strerror(-e));
    }
#else
    (void)uring;
#endif
    return x;
}

void gkv__direct_free(disk_direct_t *x)
{
    if (!x)
        return;
    if (x->broken) { /* left as they are: the kernel may still write into mem */
        GKV_ERROR("disk tier: %u bytes of buffers left behind after a failed ring", DIRECT_BYTES);
        return;
    }
#ifdef GKV_HAVE_URING
    if (x->ring_ok)
        io_uring_queue_exit(&x->ring);
#endif
    free(x->mem);
    free(x);
}

bool gkv__direct_ring(const disk_direct_t *x)
{
#ifdef GKV_HAVE_URING
    return x && x->ring_ok && !x->broken;
#else
    (void)x;
    return false;
#endif
}

uint8_t *gkv__direct_buf(disk_direct_t *x)
{
    return x->mem;
}

/* Bytes [off, off + n) of the record made of the three pieces, zeros past them, into to; *crc
 * continued over the value's bytes among them (record offsets HEADER .. HEADER + its length). */
static void fill(uint8_t *to, uint64_t off, uint64_t n, const piece_t *image, uint32_t *crc)
{
    uint64_t at = 0, done = 0;
    for (int i = 0; i < 3; at += image[i++].n) {
        uint64_t from = off + done;
        if (done == n || from >= at + image[i].n)
            continue;
        uint64_t take = at + image[i].n - from;
        if (take > n - done)
            take = n - done;
        memcpy(to + done, (const uint8_t *)image[i].p + (from - at), take);
        if (i == 1 && crc)
            *crc = gkv_crc32c(*crc, to + done, take);
        done += take;
    }
    memset(to + done, 0, n - done);
}

/* The value's bytes among the record's bytes [off, off + n) in from, into dst (the value of len
 * bytes), *crc continued over them; the header into h when off is 0. */
static void empty(const uint8_t *from, uint64_t off, uint64_t n, void *dst, uint64_t len,
                  uint8_t *h, uint32_t *crc)
{
    if (!off)
        memcpy(h, from, HEADER);
    uint64_t a = off < HEADER ? HEADER : off;
    uint64_t b = off + n < HEADER + len ? off + n : HEADER + len;
    if (b <= a)
        return;
    memcpy((uint8_t *)dst + (a - HEADER), from + (a - off), b - a);
    *crc = gkv_crc32c(*crc, from + (a - off), b - a);
}

#ifdef GKV_HAVE_URING
static uint8_t *slot_buf(disk_direct_t *x, unsigned i)
{
    return x->mem + (size_t)i * DIRECT_PIECE;
}

static int start_piece(disk_direct_t *x, unsigned i, int dfd, uint64_t off, uint32_t len,
                       bool write)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&x->ring);
    if (!sqe)
        return EBUSY; /* never: at most DIRECT_DEPTH in flight on a ring of that size */
    if (write)
        io_uring_prep_write(sqe, dfd, slot_buf(x, i), len, off);
    else
        io_uring_prep_read(sqe, dfd, slot_buf(x, i), len, off);
    io_uring_sqe_set_data64(sqe, i);
    x->slot[i].off = off;
    x->slot[i].len = len;
    x->slot[i].write = write;
    x->slot[i].dfd = dfd;
    x->slot[i].busy = true;
    x->busy++;
    int e = io_uring_submit(&x->ring);
    if (e < 0) {
        x->slot[i].busy = false;
        x->busy--;
        return -e;
    }
    return 0;
}

/* Waits for one piece to complete; a short one is finished synchronously. Failures are kept in
 * x->err (the first). */
static void reap_one(disk_direct_t *x)
{
    struct io_uring_cqe *cqe;
    int e;
    while ((e = io_uring_wait_cqe(&x->ring, &cqe)) == -EINTR)
        ;
    if (e < 0) { /* the ring itself failed: nothing can be known of the pieces */
        GKV_ERROR("disk tier: io_uring: %s", strerror(-e));
        if (!x->err)
            x->err = -e;
        x->broken = true; /* never used again, never freed */
        x->busy = 0;
        for (unsigned k = 0; k < DIRECT_DEPTH; k++)
            x->slot[k].busy = false;
        return;
    }
    unsigned i = (unsigned)io_uring_cqe_get_data64(cqe);
    int res = cqe->res;
    io_uring_cqe_seen(&x->ring, cqe);
    x->slot[i].busy = false;
    x->busy--;
    if (res < 0) {
        if (!x->err)
            x->err = -res;
    } else if ((uint32_t)res < x->slot[i].len) {
        int f = res == 0 ? EIO
                         : gkv__disk_io(x->slot[i].dfd, slot_buf(x, i) + res,
                                        x->slot[i].len - (uint32_t)res,
                                        x->slot[i].off + (uint64_t)res, x->slot[i].write);
        if (f && !x->err)
            x->err = f;
    }
}

/* Every piece in flight done; the first failure (0 for none), cleared. */
static int settle(disk_direct_t *x)
{
    while (x->busy)
        reap_one(x);
    int e = x->err;
    x->err = 0;
    return e;
}

static int ring_write_rest(disk_direct_t *x, int dfd, uint64_t start, uint64_t total,
                           const piece_t *image, uint32_t *crc)
{
    unsigned k = 0;
    for (uint64_t off = DISK_ALIGN; off < total && !x->err; off += DIRECT_PIECE, k++) {
        uint32_t n = total - off < DIRECT_PIECE ? (uint32_t)(total - off) : DIRECT_PIECE;
        unsigned i = k % DIRECT_DEPTH;
        while (x->slot[i].busy)
            reap_one(x);
        if (x->err)
            break;
        fill(slot_buf(x, i), off, n, image, crc);
        int e = start_piece(x, i, dfd, start + off, n, true);
        if (e && !x->err)
            x->err = e;
    }
    return settle(x);
}

static int ring_read(disk_direct_t *x, int dfd, uint64_t start, uint64_t need, void *dst,
                     uint64_t len, uint8_t *h, uint32_t *crc)
{
    uint64_t pieces = (need + DIRECT_PIECE - 1) / DIRECT_PIECE, started = 0;
    for (uint64_t k = 0; k < pieces && !x->err; k++) {
        while (started < pieces && started < k + DIRECT_DEPTH && !x->err) {
            uint64_t off = started * DIRECT_PIECE;
            uint32_t n = need - off < DIRECT_PIECE ? (uint32_t)(need - off) : DIRECT_PIECE;
            int e = start_piece(x, (unsigned)(started % DIRECT_DEPTH), dfd, start + off, n, false);
            if (e && !x->err)
                x->err = e;
            started++;
        }
        unsigned i = (unsigned)(k % DIRECT_DEPTH);
        while (x->slot[i].busy)
            reap_one(x);
        if (x->err)
            break;
        uint64_t off = k * DIRECT_PIECE;
        empty(slot_buf(x, i), off, need - off < DIRECT_PIECE ? need - off : DIRECT_PIECE, dst, len,
              h, crc);
    }
    return settle(x);
}
#endif

int gkv__direct_write_rest(disk_direct_t *x, int dfd, uint64_t start, uint64_t total,
                           const piece_t *image, uint32_t *crc)
{
    if (x->broken)
        return EIO;
    uint64_t first = image[1].n < DISK_ALIGN - HEADER ? image[1].n : DISK_ALIGN - HEADER;
    *crc = gkv_crc32c(0, image[1].p, (size_t)first);
#ifdef GKV_HAVE_URING
    if (x->ring_ok)
        return ring_write_rest(x, dfd, start, total, image, crc);
#endif
    for (uint64_t off = DISK_ALIGN; off < total; off += DIRECT_BYTES) {
        uint64_t n = total - off < DIRECT_BYTES ? total - off : DIRECT_BYTES;
        fill(x->mem, off, n, image, crc);
        int e = gkv__disk_io(dfd, x->mem, (size_t)n, start + off, true);
        if (e)
            return e;
    }
    return 0;
}

int gkv__direct_write_first(disk_direct_t *x, int dfd, uint64_t start, const piece_t *image)
{
    if (x->broken)
        return EIO;
    fill(x->mem, 0, DISK_ALIGN, image, NULL);
    return gkv__disk_io(dfd, x->mem, DISK_ALIGN, start, true);
}

int gkv__direct_read(disk_direct_t *x, int dfd, uint64_t v, uint64_t len, void *dst, uint8_t *h,
                     uint32_t *crc)
{
    if (x->broken)
        return EIO;
    uint64_t start = v - HEADER;
    uint64_t need = (HEADER + len + DISK_ALIGN - 1) & ~(uint64_t)(DISK_ALIGN - 1);
    *crc = 0;
#ifdef GKV_HAVE_URING
    if (x->ring_ok && need > DISK_ALIGN)
        return ring_read(x, dfd, start, need, dst, len, h, crc);
#endif
    for (uint64_t off = 0; off < need; off += DIRECT_BYTES) {
        uint64_t n = need - off < DIRECT_BYTES ? need - off : DIRECT_BYTES;
        int e = gkv__disk_io(dfd, x->mem, (size_t)n, start + off, false);
        if (e)
            return e;
        empty(x->mem, off, n, dst, len, h, crc);
    }
    return 0;
}
