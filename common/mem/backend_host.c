/* backend_host.c: values in a memfd-backed shared arena, for machines without a GPU. The memfd
 * can later be passed to local clients by fd, the way the cuda backend exports its pool. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arena.h"
#include "backend.h"
#include "error.h"
#include "log.h"
#include "ram.h"

/* Values are 64-byte aligned like cache lines. */
#define HOST_ALIGN 64

typedef struct {
    gkv_backend_t base;
    int fd;
    uint8_t *map;
    gkv_arena_t *arena;
} host_backend_t;

static int host_alloc(gkv_backend_t *b, uint64_t size, int lane, gkv_devptr_t *out)
{
    (void)lane;
    host_backend_t *h = (host_backend_t *)b;
    uint64_t off;
    int rc = gkv_arena_alloc(h->arena, size, &off);
    if (rc)
        return rc == GKV_ENOMEM ? GKV_EOOM : rc;
    out->v = off;
    return 0;
}

static void host_free(gkv_backend_t *b, gkv_devptr_t p, uint64_t size, int lane)
{
    (void)lane;
    /* Freed pages stay resident for the next value (up to --maxmemory), like a memory pool
     * with its release threshold at maximum: giving them back and faulting fresh zeroed pages
     * in on the next SET cost more than the copy itself (measured: kernel page clearing was
     * 78% of a large SET's time). */
    gkv_arena_free(((host_backend_t *)b)->arena, p.v, size);
}

static void *host_view(gkv_backend_t *b, gkv_devptr_t p)
{
    return ((host_backend_t *)b)->map + p.v;
}

static int host_copy_in(gkv_backend_t *b, gkv_devptr_t dst, uint64_t off, const void *src,
                        size_t len, int lane, gkv_copy_t *op)
{
    (void)lane;
    memcpy((uint8_t *)host_view(b, dst) + off, src, len);
    op->done(op, 0);
    return 0;
}

static int host_copy_out(gkv_backend_t *b, void *dst, gkv_devptr_t src, uint64_t off, size_t len,
                         int lane, gkv_copy_t *op)
{
    (void)lane;
    memcpy(dst, (uint8_t *)host_view(b, src) + off, len);
    op->done(op, 0);
    return 0;
}

/* The same batches the cuda backend runs, done at once. */
static int host_copy_batch(gkv_backend_t *b, void *buf, const gkv_piece_t *in, uint32_t nin,
                           const gkv_piece_t *out, uint32_t nout, const gkv_bulk_t *bulk,
                           uint32_t nbulk, gkv_copy_t *op)
{
    uint8_t *base = ((host_backend_t *)b)->map, *host = buf;
    for (uint32_t i = 0; i < nbulk; i++)
        memcpy(base + bulk[i].dev, bulk[i].host, bulk[i].len);
    for (uint32_t i = 0; i < nin; i++)
        memcpy(base + in[i].dev, host + in[i].host_off, in[i].len);
    for (uint32_t i = 0; i < nout; i++)
        memcpy(host + out[i].host_off, base + out[i].dev, out[i].len);
    op->done(op, 0);
    return 0;
}

static void host_batch_wait(gkv_backend_t *b)
{
    (void)b;
}

static int host_exportable(gkv_backend_t *b, gkv_devptr_t p)
{
    (void)b;
    (void)p;
    return 1;
}

static int host_copy_shared(gkv_backend_t *b, gkv_devptr_t dst, gkv_devptr_t src, uint64_t len)
{
    memmove(host_view(b, dst), host_view(b, src), len);
    return 0;
}

static int host_read_sync(gkv_backend_t *b, void *dst, gkv_devptr_t src, size_t len)
{
    memcpy(dst, host_view(b, src), len);
    return 0;
}

static int host_write_sync(gkv_backend_t *b, gkv_devptr_t dst, const void *src, size_t len)
{
    memcpy(host_view(b, dst), src, len);
    return 0;
}

static int host_copy_from(gkv_backend_t *b, gkv_devptr_t dst, gkv_backend_t *from, gkv_devptr_t src,
                          uint64_t len)
{
    memcpy(host_view(b, dst), host_view(from, src), len);
    return 0;
}

/* Whole pages inside the value are given back to the kernel (they read as zeros and are faulted
 * in fresh when written: no page-sized memset on the loop); the partial pages at either end, which
 * other values may share, are cleared by hand. */
static int host_zero_shared(gkv_backend_t *b, gkv_devptr_t p, uint64_t size)
{
    host_backend_t *h = (host_backend_t *)b;
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t lo = (p.v + page - 1) / page * page, hi = (p.v + size) / page * page;
    if (hi > lo && fallocate(h->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)lo,
                             (off_t)(hi - lo)) == 0) {
        memset(h->map + p.v, 0, lo - p.v);
        memset(h->map + hi, 0, p.v + size - hi);
    } else {
        memset(h->map + p.v, 0, size);
    }
    return 0;
}

/* backend.h zeroed_now: cleared here, at once. */
static bool host_zeroed_now(gkv_backend_t *b, gkv_devptr_t p, uint64_t size)
{
    return host_zero_shared(b, p, size) == 0;
}

/* Everything is done by the time a call returns; still reported through done, so that the
 * daemon takes the path it takes on the cuda backend. */
static int host_fence_shared(gkv_backend_t *b, int after_batches, gkv_copy_t *op)
{
    (void)b;
    (void)after_batches;
    op->done(op, 0);
    return 0;
}

/* Page-aligned, as pinned memory is on the cuda backend: snapshots write it with O_DIRECT. */
static void *host_staging_alloc(gkv_backend_t *b, size_t size)
{
    (void)b;
    void *p = NULL;
    return posix_memalign(&p, 4096, size) == 0 ? p : NULL;
}

static void host_staging_free(gkv_backend_t *b, void *p, size_t size)
{
    (void)b;
    (void)size;
    free(p);
}

static int host_share(gkv_backend_t *b, int *fd, char *why, size_t cap)
{
    int d = fcntl(((host_backend_t *)b)->fd, F_DUPFD_CLOEXEC, 0);
    if (d < 0) {
        snprintf(why, cap, "duplicating the arena's memfd failed: %s", strerror(errno));
        return GKV_ENOTSUP;
    }
    *fd = d;
    return 0;
}

static int host_export_ptr(gkv_backend_t *b, gkv_devptr_t p, uint64_t size, uint8_t *out,
                           size_t cap, size_t *len)
{
    (void)b;
    (void)p;
    (void)size;
    (void)out;
    (void)cap;
    *len = 0; /* the arena offset is all an importer needs */
    return 0;
}

static int host_origin(gkv_backend_t *b, gkv_devptr_t p, uint64_t size, uint64_t *base,
                       uint64_t *base_size, uint8_t *exp, size_t cap, size_t *len)
{
    (void)p, (void)size, (void)exp, (void)cap;
    *base = 0;
    *base_size = b->capacity;
    *len = 0;
    return 0;
}

/* A predecessor's arena, mapped for reading. */
typedef struct {
    const uint8_t *map;
    uint64_t size;
} adopted_t;

static int host_adopt_open(gkv_backend_t *b, int fd, void **src, char *why, size_t cap)
{
    (void)b;
    struct stat st;
    adopted_t *a = calloc(1, sizeof(*a));
    if (!a || fstat(fd, &st) != 0 || st.st_size <= 0) {
        snprintf(why, cap, "the stored arena cannot be read: %s",
                 a ? strerror(errno) : "no memory");
        free(a);
        return GKV_EIO;
    }
    a->size = (uint64_t)st.st_size;
    a->map = mmap(NULL, a->size, PROT_READ, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (a->map == MAP_FAILED) {
        snprintf(why, cap, "mapping the stored arena failed: %s", strerror(errno));
        free(a);
        return GKV_EIO;
    }
    *src = a;
    return 0;
}

static int host_adopt_copy(gkv_backend_t *b, void *src, uint64_t base, uint64_t base_size,
                           const uint8_t *exp, size_t exp_len, uint64_t addr, uint64_t len,
                           gkv_devptr_t dst)
{
    (void)exp;
    adopted_t *a = src;
    if (exp_len || base || addr > a->size || len > a->size - addr || addr > base_size ||
        len > base_size - addr)
        return GKV_EINVAL;
    memcpy(host_view(b, dst), a->map + addr, len);
    return 0;
}

static int host_adopt_close(gkv_backend_t *b, void *src)
{
    (void)b;
    adopted_t *a = src;
    munmap((void *)a->map, a->size);
    free(a);
    return 0;
}

static void host_close(gkv_backend_t *b)
{
    host_backend_t *h = (host_backend_t *)b;
    munmap(h->map, h->base.capacity);
    close(h->fd);
    gkv_arena_free_all(h->arena);
    free(h);
}

/* Transfer arenas: anonymous pages, which NIXL registers as DRAM. */
static int host_arena_alloc(gkv_backend_t *b, uint64_t size, void **addr)
{
    (void)b;
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return GKV_EOOM;
    *addr = p;
    return 0;
}

static void host_arena_free(gkv_backend_t *b, void *addr, uint64_t size)
{
    (void)b;
    munmap(addr, size);
}

static int host_arena_copy(gkv_backend_t *b, gkv_devptr_t p, uint64_t off, void *arena, size_t len,
                           int to_value, void *after)
{
    (void)after; /* no shared lane: every copy is in place at once */
    uint8_t *v = host_view(b, p);
    if (to_value)
        memcpy(v + off, arena, len);
    else
        memcpy(arena, v + off, len);
    return 0;
}

static const gkv_backend_ops_t host_ops = {
    .alloc = host_alloc,
    .free = host_free,
    .host_view = host_view,
    .copy_in = host_copy_in,
    .copy_out = host_copy_out,
    .copy_batch = host_copy_batch,
    .batch_wait = host_batch_wait,
    .exportable = host_exportable,
    .copy_shared = host_copy_shared,
    .copy_from = host_copy_from,
    .read_sync = host_read_sync,
    .write_sync = host_write_sync,
    .zero_shared = host_zero_shared,
    .zeroed_now = host_zeroed_now,
    .fence_shared = host_fence_shared,
    .staging_alloc = host_staging_alloc,
    .staging_free = host_staging_free,
    .share = host_share,
    .export_ptr = host_export_ptr,
    .origin = host_origin,
    .adopt_open = host_adopt_open,
    .adopt_copy = host_adopt_copy,
    .adopt_close = host_adopt_close,
    .arena_alloc = host_arena_alloc,
    .arena_free = host_arena_free,
    .arena_copy = host_arena_copy,
    .close = host_close,
};

int gkv_backend_host_open(const gkv_backend_config_t *cfg, gkv_backend_t **out, char *why,
                          size_t cap)
{
    /* Usable RAM: the machine's, or a cgroup's limit (a container, a unit's MemoryMax=). */
    uint64_t ram = gkv_ram_usable();
    if (!ram) {
        snprintf(why, cap, "the machine's memory size cannot be read");
        return GKV_ESYS;
    }
    uint64_t limit = cfg->limit;
    if (!limit) {
        limit = ram / 10 * 9;
        limit = limit > cfg->host_reserve * 2 ? limit - cfg->host_reserve : limit / 2;
    }
    limit = (limit + HOST_ALIGN - 1) & ~(uint64_t)(HOST_ALIGN - 1);
    if (limit == 0)
        limit = HOST_ALIGN;
    host_backend_t *h = calloc(1, sizeof(*h));
    if (!h) {
        snprintf(why, cap, "out of host memory");
        return GKV_ENOMEM;
    }
    h->fd = -1;
    h->map = MAP_FAILED;
    int rc = GKV_ESYS;
    /* The memfd is sparse: pages exist only once a value is written into them. */
    h->fd = memfd_create("gpukv-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (h->fd < 0) {
        snprintf(why, cap, "memfd_create failed: %s", strerror(errno));
        goto fail;
    }
    if (ftruncate(h->fd, (off_t)limit) != 0) {
        snprintf(why, cap, "sizing the arena to %llu bytes failed: %s", (unsigned long long)limit,
                 strerror(errno));
        goto fail;
    }
    /* Zero-copy clients get this descriptor: sealed, none can resize it (a shrunk memfd would
     * kill the daemon with SIGBUS on its next copy), nor add seals of their own. */
    if (fcntl(h->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        snprintf(why, cap, "sealing the arena's memfd failed: %s", strerror(errno));
        goto fail;
    }
    h->map = mmap(NULL, limit, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, h->fd, 0);
    if (h->map == MAP_FAILED) {
        snprintf(why, cap, "mapping the arena failed: %s", strerror(errno));
        goto fail;
    }
    rc = gkv_arena_alloc_init(&h->arena, limit, HOST_ALIGN);
    if (rc) {
        snprintf(why, cap, "arena allocator: %s", gkv_strerror(rc));
        goto fail;
    }
    h->base.ops = &host_ops;
    h->base.name = "host";
    h->base.device = -1;
    snprintf(h->base.gpu_name, sizeof(h->base.gpu_name), "host");
    h->base.lanes = 1;
    h->base.host_visible = 1;
    h->base.share_mechanism = "host-memfd";
    h->base.capacity = limit;
    h->base.device_total = ram;
    *out = &h->base;
    return 0;
fail:
    if (h->map != MAP_FAILED)
        munmap(h->map, limit);
    if (h->fd >= 0)
        close(h->fd);
    free(h);
    return rc;
}
