/* snapshot.c: SAVE's thread and the loading of a snapshot at start (snapshot.h; the format is
 * docs/snapshots.md). */
#include "snapshot.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "crc32c.h"
#include "duration.h"
#include "error.h"
#include "frame.h"
#include "index.h"
#include "log.h"
#include "server.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the format is little-endian");

#define MAGIC "GKVSNAP1"
#define TRAILER "GKVEND01"
#define VERSION 1u
#define HEADER_LEN 64
#define UUID_LEN 48
#define RECORD_LEN 32 /* klen, meta_len, size, expire, device, crc */
#define TRAILER_LEN 32
#define CHUNK (8u << 20) /* values move in chunks of the pinned buffer */
#define KEEP 2           /* snapshots kept after a save: the new one and the one before */
#define SLICE 16384      /* keys listed per loop turn (2-core CPU machine: ~2 ms) */

typedef struct {
    gkv_entry_t *e;   /* one reference */
    uint64_t key_off; /* the key, then the metadata, in the save's names */
    uint32_t klen, meta_len;
    uint64_t expire_unix_ms;
} item_t;

struct gkv_save {
    gkv_server_t *srv;
    pthread_t thread;
    bool started; /* the thread runs (join it) */
    item_t *items;
    uint64_t n, cap, bytes_total;
    uint8_t *names; /* every key and metadata, copied */
    uint64_t names_len, names_cap;
    uint8_t *cursor; /* the last key listed (max-key-size bytes); cursor_len 0: none yet */
    size_t cursor_len;
    uint8_t *buf; /* CHUNK + 4 KiB pinned bytes (dev[0]'s staging_alloc: portable) */
    int fd;
    bool direct;      /* fd is O_DIRECT (write_fd) */
    size_t fill;      /* bytes gathered in buf */
    uint64_t written; /* bytes of the file written */
    char path[PATH_MAX + 64], tmp[PATH_MAX + 64];
    uint64_t started_ms, unix_ms;
    _Atomic uint64_t keys_done, bytes_done;
    uint64_t progress_at; /* the thread logs its progress every GiB */
    int status;
    char err[192];
};

/* Opens path with flags and O_DIRECT where the filesystem allows it (*direct says whether):
 * snapshots move in whole aligned blocks of their pinned buffer, and on the 2-core CPU machine
 * buffered writes and fsync ran at 0.26 GB/s against 1.6 GB/s direct. Returns the fd or -1. */
static int open_direct(const char *path, int flags, bool *direct)
{
    int fd = open(path, flags | O_CLOEXEC | O_DIRECT, 0600);
    *direct = fd >= 0;
    if (fd < 0 && errno == EINVAL) /* a filesystem without O_DIRECT (tmpfs) */
        fd = open(path, flags | O_CLOEXEC, 0600);
    return fd;
}

/* A transfer on fd failed with EINVAL: if it was O_DIRECT, fd goes on buffered (*direct
 * cleared) and the caller retries. False when there is nothing to retry. */
static bool drop_direct(int fd, bool *direct)
{
    if (errno != EINVAL || !*direct)
        return false;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_DIRECT) != 0)
        return false;
    *direct = false;
    return true;
}

/* --- writing (the save's thread) ----------------------------------------------------------- */

/* The file goes out in whole blocks of the pinned buffer: records' small fields are gathered
 * there, values are read from their device straight into it (open_direct). Every block but the
 * last is CHUNK bytes (aligned); the last is padded to 4 KiB and the file cut back to its
 * length. Returns 0 or GKV_ESYS (errno set). */
static int write_fd(gkv_save_t *sv, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = write(sv->fd, p, n);
        if (w < 0 && (errno == EINTR || drop_direct(sv->fd, &sv->direct)))
            continue;
        if (w <= 0)
            return GKV_ESYS;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int out_flush(gkv_save_t *sv)
{
    size_t n = sv->fill, w = sv->direct ? (n + 4095) & ~(size_t)4095 : n;
    memset(sv->buf + n, 0, w - n);
    int rc = write_fd(sv, sv->buf, w);
    sv->written += n;
    sv->fill = 0;
    return rc;
}

static int write_all(gkv_save_t *sv, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        size_t k = CHUNK - sv->fill < n ? CHUNK - sv->fill : n;
        memcpy(sv->buf + sv->fill, b, k);
        sv->fill += k;
        b += k;
        n -= k;
        int rc = sv->fill == CHUNK ? out_flush(sv) : 0;
        if (rc)
            return rc;
    }
    return 0;
}

static int fail(gkv_save_t *sv, int rc, const char *what)
{
    if (!sv->status) {
        sv->status = rc;
        snprintf(sv->err, sizeof(sv->err), "%s: %s", what,
                 rc == GKV_ESYS ? strerror(errno) : gkv_strerror(rc));
    }
    return rc;
}

static int write_header(gkv_save_t *sv)
{
    gkv_server_t *s = sv->srv;
    uint8_t h[HEADER_LEN] = {0};
    uint32_t version = VERSION, ndev = s->devs.n;
    memcpy(h, MAGIC, 8);
    memcpy(h + 8, &version, 4);
    memcpy(h + 12, &ndev, 4);
    memcpy(h + 16, &sv->unix_ms, 8);
    memcpy(h + 24, &sv->n, 8);
    memcpy(h + 32, &sv->bytes_total, 8);
    uint32_t crc = gkv_crc32c(0, h, 60);
    memcpy(h + 60, &crc, 4);
    uint8_t table[GKV_MAX_DEVICES * UUID_LEN + 4] = {0};
    for (unsigned i = 0; i < ndev; i++)
        snprintf((char *)table + i * UUID_LEN, UUID_LEN, "%s", s->devs.dev[i].be->gpu_uuid);
    crc = gkv_crc32c(0, table, ndev * UUID_LEN);
    memcpy(table + ndev * UUID_LEN, &crc, 4);
    int rc = write_all(sv, h, sizeof(h));
    return rc ? rc : write_all(sv, table, ndev * UUID_LEN + 4);
}

static int write_record(gkv_save_t *sv, const item_t *it)
{
    gkv_entry_t *e = it->e;
    uint8_t r[RECORD_LEN];
    uint64_t size = e->size;
    uint32_t dev = e->dev;
    memcpy(r, &it->klen, 4);
    memcpy(r + 4, &it->meta_len, 4);
    memcpy(r + 8, &size, 8);
    memcpy(r + 16, &it->expire_unix_ms, 8);
    memcpy(r + 24, &dev, 4);
    uint32_t crc = gkv_crc32c(0, r, 28);
    memcpy(r + 28, &crc, 4);
    int rc;
    const uint8_t *names = sv->names + it->key_off;
    if ((rc = write_all(sv, r, sizeof(r))) ||
        (rc = write_all(sv, names, (size_t)it->klen + it->meta_len)))
        return fail(sv, rc, "writing");
    crc = gkv_crc32c(0, names, (size_t)it->klen + it->meta_len);
    gkv_backend_t *be = sv->srv->devs.dev[e->dev].be;
    for (uint64_t off = 0; off < size;) {
        size_t n = CHUNK - sv->fill < size - off ? CHUNK - sv->fill : (size_t)(size - off);
        uint8_t *at = sv->buf + sv->fill;
        if ((rc = be->ops->read_sync(be, at, (gkv_devptr_t){e->mem.v + off}, n)))
            return fail(sv, rc, "reading a value from the device");
        crc = gkv_crc32c(crc, at, n);
        sv->fill += n;
        off += n;
        if (sv->fill == CHUNK && (rc = out_flush(sv)))
            return fail(sv, rc, "writing");
        atomic_fetch_add(&sv->bytes_done, n);
    }
    if ((rc = write_all(sv, &crc, 4)))
        return fail(sv, rc, "writing");
    atomic_fetch_add(&sv->keys_done, 1);
    uint64_t done = atomic_load(&sv->bytes_done);
    if (done >= sv->progress_at) {
        GKV_INFO("snapshot: %s: %" PRIu64 " of %" PRIu64 " keys, %" PRIu64 " of %" PRIu64
                 " bytes written",
                 sv->tmp, atomic_load(&sv->keys_done), sv->n, done, sv->bytes_total);
        sv->progress_at = done + (1ull << 30);
    }
    return 0;
}

static int write_trailer(gkv_save_t *sv)
{
    uint8_t t[TRAILER_LEN] = {0};
    memcpy(t, TRAILER, 8);
    memcpy(t + 8, &sv->n, 8);
    memcpy(t + 16, &sv->bytes_total, 8);
    uint32_t crc = gkv_crc32c(0, t, 28);
    memcpy(t + 28, &crc, 4);
    return write_all(sv, t, sizeof(t));
}

/* True for "gpukv-<digits>.snap". */
static bool snapshot_name(const char *name)
{
    size_t n = strlen(name);
    if (n < 12 || strncmp(name, "gpukv-", 6) != 0 || strcmp(name + n - 5, ".snap") != 0)
        return false;
    for (size_t i = 6; i < n - 5; i++)
        if (name[i] < '0' || name[i] > '9')
            return false;
    return true;
}

static int by_name_desc(const void *a, const void *b)
{
    return strcmp(*(char *const *)b, *(char *const *)a);
}

/* The snapshots of dir, newest first (names sort by time), in *names (the caller frees each
 * and the array). Returns how many, or -1. */
static int list_snapshots(const char *dir, char ***names)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    char **v = NULL;
    int n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!snapshot_name(de->d_name))
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            char **nv = realloc(v, (size_t)cap * sizeof(*v));
            if (!nv)
                break;
            v = nv;
        }
        if (!(v[n] = strdup(de->d_name)))
            break;
        n++;
    }
    closedir(d);
    if (n)
        qsort(v, (size_t)n, sizeof(*v), by_name_desc);
    *names = v;
    return n;
}

/* After a save: only the KEEP newest snapshots stay. */
static void prune(const char *dir)
{
    char **names;
    int n = list_snapshots(dir, &names);
    for (int i = 0; i < n; i++) {
        if (i >= KEEP) {
            char p[PATH_MAX + 256];
            snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
            if (unlink(p) == 0)
                GKV_INFO("snapshot: removed %s (older than the %d kept)", p, KEEP);
        }
        free(names[i]);
    }
    if (n > 0)
        free(names);
}

/* Writes the whole file and publishes it (or removes it and records why not). */
static void write_file(gkv_save_t *sv)
{
    const char *dir = sv->srv->cfg.snapshot_dir;
    int rc = sv->status ? sv->status : write_header(sv);
    if (rc)
        fail(sv, rc, "writing");
    for (uint64_t i = 0; !rc && i < sv->n; i++)
        rc = write_record(sv, &sv->items[i]);
    if (!rc && (rc = write_trailer(sv)))
        fail(sv, rc, "writing");
    if (!rc && (rc = out_flush(sv)))
        fail(sv, rc, "writing");
    if (!rc && ftruncate(sv->fd, (off_t)sv->written) != 0) /* the last block's padding */
        rc = fail(sv, GKV_ESYS, "ftruncate");
    if (!rc && fsync(sv->fd) != 0)
        rc = fail(sv, GKV_ESYS, "fsync");
    if (close(sv->fd) != 0 && !rc)
        rc = fail(sv, GKV_ESYS, "close");
    sv->fd = -1;
    if (!rc && rename(sv->tmp, sv->path) != 0)
        rc = fail(sv, GKV_ESYS, "rename");
    if (!rc) {
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0 || fsync(dfd) != 0)
            rc = fail(sv, GKV_ESYS, "fsync of the directory");
        if (dfd >= 0)
            close(dfd);
    }
    if (rc)
        unlink(sv->tmp);
    else
        prune(dir);
}

static void *save_thread(void *arg)
{
    gkv_save_t *sv = arg;
    write_file(sv);
    uv_async_send(&sv->srv->snap_done);
    return NULL;
}

/* --- the loop's side of a save ------------------------------------------------------------- */

static void save_free(gkv_server_t *s, gkv_save_t *sv)
{
    for (uint64_t i = 0; i < sv->n; i++)
        gkv_store_unref(&s->store, sv->items[i].e);
    if (sv->buf)
        s->devs.dev[0].be->ops->staging_free(s->devs.dev[0].be, sv->buf, CHUNK + 4096);
    if (sv->fd >= 0) {
        close(sv->fd);
        unlink(sv->tmp);
    }
    free(sv->items);
    free(sv->names);
    free(sv->cursor);
    free(sv);
}

/* The thread has ended: its result into the statistics, its references dropped. */
static void save_done(gkv_server_t *s)
{
    gkv_save_t *sv = s->snapshots.running;
    if (!sv)
        return;
    if (sv->started)
        pthread_join(sv->thread, NULL);
    gkv_snapshots_t *st = &s->snapshots;
    uint64_t ms = gkv_clock_ms() - sv->started_ms;
    st->last_status = sv->status;
    if (sv->status) {
        st->failures++;
        snprintf(st->last_error, sizeof(st->last_error), "%s", sv->err);
        GKV_ERROR("snapshot: %s failed after %.1f s: %s", sv->tmp, (double)ms / 1e3, sv->err);
    } else {
        st->saves++;
        st->last_unix_ms = sv->unix_ms;
        st->last_ms = ms;
        st->last_keys = sv->n;
        st->last_bytes = sv->bytes_total;
        st->last_error[0] = 0;
        snprintf(st->last_file, sizeof(st->last_file), "%s", strrchr(sv->path, '/') + 1);
        GKV_INFO("snapshot: %s: %" PRIu64 " keys, %" PRIu64 " value bytes in %.2f s (%.2f GB/s)",
                 sv->path, sv->n, sv->bytes_total, (double)ms / 1e3,
                 ms ? (double)sv->bytes_total / (double)ms / 1e6 : 0.0);
    }
    st->running = NULL;
    save_free(s, sv);
}

static void on_snap_done(uv_async_t *h)
{
    save_done(h->data);
}

static void on_snap_timer(uv_timer_t *t)
{
    gkv_server_t *s = t->data;
    char why[192];
    if (!s->snapshots.running && !s->shutting_down && gkv_snapshot_start(s, why, sizeof(why)))
        GKV_WARN("snapshot: the periodic save did not start: %s", why);
}

void gkv_snapshot_init(gkv_server_t *s)
{
    uv_async_init(s->loop, &s->snap_done, on_snap_done);
    s->snap_done.data = s;
    uv_timer_init(s->loop, &s->snap_timer);
    s->snap_timer.data = s;
    uv_idle_init(s->loop, &s->snap_list);
    s->snap_list.data = s;
    gkv_snapshot_schedule(s);
}

void gkv_snapshot_schedule(gkv_server_t *s)
{
    uint64_t every = s->cfg.snapshot_interval_ms;
    if (s->cfg.snapshot_dir[0] && every)
        uv_timer_start(&s->snap_timer, on_snap_timer, every, every);
    else
        uv_timer_stop(&s->snap_timer);
}

void gkv_snapshot_close(gkv_server_t *s)
{
    uv_close((uv_handle_t *)&s->snap_done, NULL);
    uv_close((uv_handle_t *)&s->snap_timer, NULL);
    uv_close((uv_handle_t *)&s->snap_list, NULL);
}

static int start_save(gkv_server_t *s, bool threaded, char *why, size_t cap);
static bool list_keys(gkv_server_t *s, gkv_save_t *sv, uint64_t max);
static void launch(gkv_server_t *s, gkv_save_t *sv);
static void on_list(uv_idle_t *h);

void gkv_snapshot_fini(gkv_server_t *s)
{
    gkv_save_t *sv = s->snapshots.running;
    if (sv && !sv->started) /* the loop ended while it listed keys */
        fail(sv, GKV_ESHUTDOWN, "stopped while listing the keys");
    save_done(s);
    if (!s->cfg.snapshot_dir[0] || !s->cfg.snapshot_on_exit || !s->shutting_down)
        return;
    char why[192];
    GKV_INFO("snapshot: saving before exit (--snapshot-on-exit)");
    if (start_save(s, false, why, sizeof(why)))
        GKV_ERROR("snapshot: the save before exit did not start: %s", why);
}

int gkv_snapshot_start(gkv_server_t *s, char *why, size_t cap)
{
    return start_save(s, true, why, cap);
}

/* Collects what to save and writes it: on a thread (SAVE), or here (at exit). */
static int start_save(gkv_server_t *s, bool threaded, char *why, size_t cap)
{
    const char *dir = s->cfg.snapshot_dir;
    if (!dir[0]) {
        snprintf(why, cap, "no --snapshot-dir: this server keeps no snapshots");
        return GKV_ENOTSUP;
    }
    if (s->snapshots.running) {
        snprintf(why, cap, "a save is running (INFO # Persistence shows its progress)");
        return GKV_EBUSY;
    }
    gkv_save_t *sv = calloc(1, sizeof(*sv));
    if (!sv)
        return GKV_ENOMEM;
    sv->srv = s;
    sv->fd = -1;
    sv->progress_at = 1ull << 30;
    sv->started_ms = gkv_clock_ms();
    sv->unix_ms = gkv_wall_clock_ms();
    sv->cursor = malloc(s->cfg.max_key + 1);
    sv->buf = s->devs.dev[0].be->ops->staging_alloc(s->devs.dev[0].be, CHUNK + 4096);
    if (!sv->cursor || !sv->buf) {
        snprintf(why, cap, "out of host memory for a snapshot");
        save_free(s, sv);
        return GKV_ENOMEM;
    }
    snprintf(sv->path, sizeof(sv->path), "%s/gpukv-%016" PRIu64 ".snap", dir, sv->unix_ms);
    snprintf(sv->tmp, sizeof(sv->tmp), "%s/.gpukv-%016" PRIu64 ".snap.tmp", dir, sv->unix_ms);
    sv->fd = open_direct(sv->tmp, O_WRONLY | O_CREAT | O_EXCL, &sv->direct);
    if (sv->fd < 0) {
        snprintf(why, cap, "cannot create %s: %s", sv->tmp, strerror(errno));
        save_free(s, sv);
        return GKV_ESYS;
    }
    s->snapshots.running = sv;
    if (!threaded) { /* at exit: the loop has ended, nothing changes meanwhile */
        list_keys(s, sv, UINT64_MAX);
        write_file(sv);
        save_done(s);
        return 0;
    }
    if (list_keys(s, sv, SLICE))
        launch(s, sv);
    else
        uv_idle_start(&s->snap_list, on_list);
    return 0;
}

/* Every key listed: the thread writes the file. */
static void launch(gkv_server_t *s, gkv_save_t *sv)
{
    /* A value answered before its copy batch ran is complete once the batches have. */
    for (unsigned i = 0; i < s->devs.n; i++)
        s->devs.dev[i].be->ops->batch_wait(s->devs.dev[i].be);
    GKV_INFO("snapshot: saving %" PRIu64 " keys, %" PRIu64 " value bytes to %s (listed in %" PRIu64
             " ms, %u keys per loop turn)",
             sv->n, sv->bytes_total, sv->path, gkv_clock_ms() - sv->started_ms, SLICE);
    sv->started = pthread_create(&sv->thread, NULL, save_thread, sv) == 0;
    if (!sv->started) {
        fail(sv, GKV_ESYS, "starting the save's thread");
        save_done(s);
    }
}

static void on_list(uv_idle_t *h)
{
    gkv_server_t *s = h->data;
    gkv_save_t *sv = s->snapshots.running;
    if (!sv || list_keys(s, sv, SLICE)) {
        uv_idle_stop(h);
        if (sv)
            launch(s, sv);
    }
}

/* Lists up to max more keys after the cursor: a reference on each entry, a copy of its key,
 * metadata and deadline. Returns true once every key is listed (or listing failed: the save's
 * status says so). */
static bool list_keys(gkv_server_t *s, gkv_save_t *sv, uint64_t max)
{
    gkv_store_t *st = &s->store;
    st->now_ms = gkv_clock_ms();
    uint64_t now_unix = gkv_wall_clock_ms();
    const gkv_inode_t *in = gkv_index_seek(st->ix, sv->cursor, sv->cursor_len);
    if (in && sv->cursor_len) { /* the cursor's own key was listed */
        size_t kl;
        const uint8_t *k = gkv_inode_key(in, &kl);
        if (kl == sv->cursor_len && memcmp(k, sv->cursor, kl) == 0)
            in = gkv_index_next(st->ix, in);
    }
    for (uint64_t done = 0; in && done < max; in = gkv_index_next(st->ix, in), done++) {
        gkv_entry_t *e = gkv_inode_val(st->ix, in);
        size_t kl;
        uint32_t ml;
        const uint8_t *k = gkv_inode_key(in, &kl);
        const uint8_t *m = gkv_entry_meta(e, &ml);
        memcpy(sv->cursor, k, kl);
        sv->cursor_len = kl;
        if (!gkv_store_alive(st, e))
            continue; /* due: gone for every command already */
        if (sv->n == sv->cap || sv->names_len + kl + ml > sv->names_cap) {
            uint64_t ic = sv->n == sv->cap ? (sv->cap ? sv->cap * 2 : 4096) : sv->cap;
            uint64_t nc = sv->names_cap;
            while (sv->names_len + kl + ml > nc)
                nc = nc ? nc * 2 : 1u << 20;
            item_t *items = realloc(sv->items, ic * sizeof(item_t));
            if (items)
                sv->items = items;
            uint8_t *names = items ? realloc(sv->names, nc) : NULL;
            if (!names) {
                fail(sv, GKV_ENOMEM, "listing the keys");
                return true;
            }
            sv->names = names;
            sv->cap = ic;
            sv->names_cap = nc;
        }
        item_t *it = &sv->items[sv->n++];
        it->key_off = sv->names_len;
        memcpy(sv->names + sv->names_len, k, kl);
        if (ml)
            memcpy(sv->names + sv->names_len + kl, m, ml);
        sv->names_len += kl + ml;
        it->klen = (uint32_t)kl;
        it->meta_len = ml;
        it->expire_unix_ms = gkv_store_deadline_unix(st, e, now_unix);
        gkv_store_ref(e);
        it->e = e;
        sv->bytes_total += e->size;
    }
    return !in;
}

bool gkv_snapshot_progress(const gkv_server_t *s, uint64_t *keys, uint64_t *keys_total,
                           uint64_t *bytes, uint64_t *bytes_total)
{
    gkv_save_t *sv = s->snapshots.running;
    if (!sv)
        return false;
    *keys = atomic_load(&sv->keys_done);
    *bytes = atomic_load(&sv->bytes_done);
    *keys_total = sv->n;
    *bytes_total = sv->bytes_total;
    return true;
}

int gkv_snapshot_info(const gkv_server_t *s, char *text, size_t cap)
{
    const gkv_snapshots_t *st = &s->snapshots;
    uint64_t k = 0, kt = 0, b = 0, bt = 0;
    bool saving = gkv_snapshot_progress(s, &k, &kt, &b, &bt);
    int n = snprintf(
        text, cap,
        "# Persistence\r\nsnapshot_dir:%s\r\nsnapshot_interval_ms:%" PRIu64
        "\r\nsaving:%d\r\nsave_keys_done:%" PRIu64 "\r\nsave_keys_total:%" PRIu64
        "\r\nsave_bytes_done:%" PRIu64 "\r\nsave_bytes_total:%" PRIu64 "\r\nsaves:%" PRIu64
        "\r\nsave_failures:%" PRIu64 "\r\nlast_save_status:%s\r\nlast_save_error:%s"
        "\r\nlast_save_file:%s\r\nlast_save_unix_ms:%" PRIu64 "\r\nlast_save_ms:%" PRIu64
        "\r\nlast_save_keys:%" PRIu64 "\r\nlast_save_bytes:%" PRIu64
        "\r\nloaded_file:%s\r\nloaded_keys:%" PRIu64 "\r\nloaded_bytes:%" PRIu64
        "\r\nload_ms:%" PRIu64 "\r\nskipped_corrupt_snapshots:%" PRIu64 "\r\n",
        s->cfg.snapshot_dir[0] ? s->cfg.snapshot_dir : "off", s->cfg.snapshot_interval_ms,
        saving ? 1 : 0, k, kt, b, bt, st->saves, st->failures,
        st->last_status ? "err"
        : st->saves     ? "ok"
                        : "none",
        st->last_error, st->last_file[0] ? st->last_file : "none", st->last_unix_ms, st->last_ms,
        st->last_keys, st->last_bytes, st->loaded_file[0] ? st->loaded_file : "none",
        st->loaded_keys, st->loaded_bytes, st->load_ms, st->skipped_corrupt);
    return n >= 0 && (size_t)n < cap ? n : -1;
}

/* --- loading (at start) ---------------------------------------------------------------------- */

typedef struct {
    gkv_server_t *s;
    int fd;
    bool direct, eof;
    const char *path;
    uint8_t *buf;             /* CHUNK pinned bytes: the file's current block */
    size_t pos, len;          /* what of it is read, and what it holds */
    int map[GKV_MAX_DEVICES]; /* the file's device i is the daemon's map[i], or -1 */
    uint32_t ndev;
    uint64_t keys, bytes, skipped_expired, skipped_room, progress_at;
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
        if (r < 0 && (errno == EINTR || drop_direct(l->fd, &l->direct)))
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
    uint8_t h[HEADER_LEN];
    uint32_t version, ndev, crc;
    if (!read_exact(l, h, sizeof(h)))
        return bad(l, "the header is cut short");
    memcpy(&crc, h + 60, 4);
    if (memcmp(h, MAGIC, 8) != 0 || crc != gkv_crc32c(0, h, 60))
        return bad(l, "the header's magic or checksum is wrong");
    memcpy(&version, h + 8, 4);
    memcpy(&ndev, h + 12, 4);
    memcpy(nkeys, h + 24, 8);
    if (version != VERSION)
        return bad(l, "format version %" PRIu32 " is not 1", version);
    if (ndev < 1 || ndev > GKV_MAX_DEVICES)
        return bad(l, "it names %" PRIu32 " devices", ndev);
    uint8_t table[GKV_MAX_DEVICES * UUID_LEN + 4];
    if (!read_exact(l, table, ndev * UUID_LEN + 4))
        return bad(l, "the device table is cut short");
    memcpy(&crc, table + ndev * UUID_LEN, 4);
    if (crc != gkv_crc32c(0, table, ndev * UUID_LEN))
        return bad(l, "the device table's checksum is wrong");
    l->ndev = ndev;
    /* By UUID: a successor may see the GPUs in another order; one it lacks loses the map. */
    for (uint32_t i = 0; i < ndev; i++) {
        const char *u = (const char *)table + i * UUID_LEN;
        l->map[i] = gkv_devices_map_gpu(&l->s->devs, u, strnlen(u, UUID_LEN), i);
    }
    return 0;
}

/* Reads one record and stores it (unless expired or without room). */
static int load_record(loader_t *l, uint64_t i, uint64_t now_unix)
{
    gkv_server_t *s = l->s;
    gkv_store_t *st = &s->store;
    uint8_t r[RECORD_LEN];
    uint32_t klen, meta_len, dev, crc;
    uint64_t size, expire;
    if (!read_exact(l, r, sizeof(r)))
        return bad(l, "record %" PRIu64 " is cut short", i);
    memcpy(&crc, r + 28, 4);
    if (crc != gkv_crc32c(0, r, 28))
        return bad(l, "record %" PRIu64 "'s header checksum is wrong", i);
    memcpy(&klen, r, 4);
    memcpy(&meta_len, r + 4, 4);
    memcpy(&size, r + 8, 8);
    memcpy(&expire, r + 16, 8);
    memcpy(&dev, r + 24, 4);
    if (klen < 1 || klen > 65535 || meta_len > GKV_MAX_META || dev >= l->ndev)
        return bad(l, "record %" PRIu64 " has impossible lengths", i);
    uint8_t names[65535 + GKV_MAX_META];
    if (!read_exact(l, names, klen + meta_len))
        return bad(l, "record %" PRIu64 " is cut short", i);
    uint32_t vcrc = gkv_crc32c(0, names, klen + meta_len);
    gkv_entry_t *e = NULL;
    if ((!expire || expire > now_unix) && klen <= s->cfg.max_key) {
        int d = l->map[dev];
        unsigned to = d >= 0 ? (unsigned)d : gkv_store_place(st, names, klen, size);
        int rc = gkv_store_entry_new(st, to, names, klen, size, names + klen, meta_len,
                                     GKV_LANE_SHARED, &e);
        if (rc == GKV_EOOM && d >= 0) /* its GPU is smaller now: wherever it fits */
            rc = gkv_store_entry_new(st, gkv_store_place(st, names, klen, size), names, klen, size,
                                     names + klen, meta_len, GKV_LANE_SHARED, &e);
        if (rc == GKV_EOOM)
            l->skipped_room++;
        else if (rc)
            return bad(l, "out of memory at record %" PRIu64, i);
    } else {
        l->skipped_expired++;
    }
    for (uint64_t off = 0; off < size;) {
        const uint8_t *p;
        size_t n = take(l, size - off < CHUNK ? (size_t)(size - off) : CHUNK, &p);
        if (!n) {
            if (e)
                gkv_store_unref(st, e);
            return bad(l, "record %" PRIu64 "'s value is cut short", i);
        }
        vcrc = gkv_crc32c(vcrc, p, n);
        if (e) {
            gkv_backend_t *be = gkv_store_be(st, e);
            if (be->ops->write_sync(be, (gkv_devptr_t){e->mem.v + off}, p, n)) {
                gkv_store_unref(st, e);
                return bad(l, "writing record %" PRIu64 " to the device failed", i);
            }
        }
        off += n;
        l->bytes += n;
    }
    if (!read_exact(l, &crc, 4) || crc != vcrc) {
        if (e)
            gkv_store_unref(st, e);
        return bad(l, "record %" PRIu64 "'s checksum is wrong", i);
    }
    if (!e)
        return 0;
    int rc = expire ? gkv_store_entry_ttl(st, e, expire - now_unix) : 0;
    if (!rc)
        rc = gkv_store_publish(st, e, 0, NULL);
    gkv_store_unref(st, e);
    if (rc)
        return bad(l, "out of host memory at record %" PRIu64, i);
    l->keys++;
    if (l->bytes >= l->progress_at) {
        GKV_INFO("snapshot: loading %s: %" PRIu64 " keys, %" PRIu64 " bytes so far", l->path,
                 l->keys, l->bytes);
        l->progress_at = l->bytes + (1ull << 30);
    }
    return 0;
}

/* Loads path whole into the empty store; on any error the store is emptied again. */
static int load_file(gkv_server_t *s, const char *path, char *err, size_t cap)
{
    loader_t l = {.s = s, .path = path, .err = err, .cap = cap, .progress_at = 1ull << 30};
    l.fd = open_direct(path, O_RDONLY, &l.direct);
    if (l.fd < 0) {
        snprintf(err, cap, "cannot open snapshot %s: %s", path, strerror(errno));
        return GKV_EIO;
    }
    l.buf = s->devs.dev[0].be->ops->staging_alloc(s->devs.dev[0].be, CHUNK);
    uint64_t nkeys = 0, t0 = gkv_clock_ms(), now_unix = gkv_wall_clock_ms();
    s->store.now_ms = t0;
    int rc = l.buf ? load_header(&l, &nkeys) : GKV_ENOMEM;
    for (uint64_t i = 0; !rc && i < nkeys; i++)
        rc = load_record(&l, i, now_unix);
    uint8_t t[TRAILER_LEN];
    uint32_t crc;
    uint64_t tkeys;
    if (!rc && !read_exact(&l, t, sizeof(t)))
        rc = bad(&l, "the trailer is missing");
    if (!rc) {
        memcpy(&crc, t + 28, 4);
        memcpy(&tkeys, t + 8, 8);
        if (memcmp(t, TRAILER, 8) != 0 || crc != gkv_crc32c(0, t, 28) || tkeys != nkeys)
            rc = bad(&l, "the trailer is wrong");
        else if (l.pos < l.len || refill(&l))
            rc = bad(&l, "bytes follow the trailer");
    }
    if (l.buf)
        s->devs.dev[0].be->ops->staging_free(s->devs.dev[0].be, l.buf, CHUNK);
    close(l.fd);
    if (rc == GKV_ENOMEM)
        snprintf(err, cap, "out of pinned host memory to load %s", path);
    if (rc) {
        gkv_store_flush(&s->store); /* never half-loaded */
        return rc;
    }
    gkv_snapshots_t *st = &s->snapshots;
    snprintf(st->loaded_file, sizeof(st->loaded_file), "%s", strrchr(path, '/') + 1);
    st->loaded_keys = l.keys;
    st->loaded_bytes = l.bytes;
    st->load_ms = gkv_clock_ms() - t0;
    GKV_INFO("snapshot: loaded %s: %" PRIu64 " keys, %" PRIu64 " bytes in %.2f s; skipped %" PRIu64
             " past their deadline, %" PRIu64 " for want of room",
             path, l.keys, l.bytes, (double)st->load_ms / 1e3, l.skipped_expired, l.skipped_room);
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
        size_t n = strlen(de->d_name);
        if (strncmp(de->d_name, ".gpukv-", 7) != 0 || n < 16 ||
            strcmp(de->d_name + n - 9, ".snap.tmp") != 0)
            continue;
        char p[PATH_MAX + 256];
        snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
        if (unlink(p) == 0)
            GKV_WARN("snapshot: removed %s, a save that did not finish", p);
    }
    closedir(d);
}

int gkv_snapshot_load(gkv_server_t *s, char *err, size_t cap)
{
    const char *dir = s->cfg.snapshot_dir;
    if (!dir[0])
        return 0;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        snprintf(err, cap, "cannot create --snapshot-dir %s: %s", dir, strerror(errno));
        return GKV_ESYS;
    }
    remove_partial(dir);
    char **names;
    int n = list_snapshots(dir, &names);
    if (n < 0) {
        snprintf(err, cap, "cannot read --snapshot-dir %s: %s", dir, strerror(errno));
        return GKV_ESYS;
    }
    int rc = 0;
    for (int i = 0; i < n; i++) {
        char path[PATH_MAX + 256];
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        if (rc == 0 && !s->snapshots.loaded_file[0]) {
            rc = load_file(s, path, err, cap);
            if (rc && s->cfg.snapshot_skip_corrupt) {
                GKV_ERROR("%s; skipped (--snapshot-skip-corrupt), trying an older one", err);
                s->snapshots.skipped_corrupt++;
                rc = 0;
            }
        }
        free(names[i]);
    }
    if (n > 0)
        free(names);
    if (!rc && !s->snapshots.loaded_file[0])
        GKV_INFO("snapshot: nothing to load in %s; starting empty", dir);
    return rc;
}
