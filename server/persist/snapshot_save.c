/* snapshot_save.c: SAVE: the keys listed on the loop, the file written on a thread of its own
 * (snapshot.h; the format is snapfile.h and docs/snapshots.md). */
#include "snapshot.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crc32c.h"
#include "duration.h"
#include "error.h"
#include "frame.h"
#include "index.h"
#include "log.h"
#include "snapfile.h"

#define CHUNK GKV_SNAP_CHUNK /* values move in chunks of the pinned buffer */
#define KEEP 2               /* snapshots kept after a save: the new one and the one before */
#define SLICE 16384          /* keys listed per loop turn (2-core CPU machine: ~2 ms) */

typedef struct {
    gkv_entry_t *e;   /* one reference */
    uint64_t key_off; /* the key, then the metadata, in the save's names */
    uint32_t klen, meta_len;
    uint64_t expire_unix_ms;
} item_t;

struct gkv_save {
    gkv_snapshots_t *sn;
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

/* --- writing (the save's thread) ----------------------------------------------------------- */

/* The file goes out in whole blocks of the pinned buffer: records' small fields are gathered
 * there, values are read from their device straight into it (open_direct). Every block but the
 * last is CHUNK bytes (aligned); the last is padded to 4 KiB and the file cut back to its
 * length. Returns 0 or GKV_ESYS (errno set). */
static int write_fd(gkv_save_t *sv, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = write(sv->fd, p, n);
        if (w < 0 && (errno == EINTR || gkv_snap_drop_direct(sv->fd, &sv->direct)))
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
    const gkv_devices_t *d = sv->sn->env.devs;
    uint8_t h[GKV_SNAP_HEADER_LEN], table[GKV_MAX_DEVICES * GKV_SNAP_UUID_LEN + 4];
    const char *uuids[GKV_MAX_DEVICES];
    for (unsigned i = 0; i < d->n; i++)
        uuids[i] = d->dev[i].be->gpu_uuid;
    gkv_snap_header_encode(
        h, &(gkv_snap_header_t){
               .ndev = d->n, .unix_ms = sv->unix_ms, .keys = sv->n, .bytes = sv->bytes_total});
    gkv_snap_table_encode(table, uuids, d->n);
    int rc = write_all(sv, h, sizeof(h));
    return rc ? rc : write_all(sv, table, gkv_snap_table_len(d->n));
}

static int write_record(gkv_save_t *sv, const item_t *it)
{
    gkv_entry_t *e = it->e;
    uint8_t r[GKV_SNAP_RECORD_LEN];
    uint64_t size = e->size;
    gkv_snap_record_encode(r, &(gkv_jrec_t){.klen = it->klen,
                                            .meta_len = it->meta_len,
                                            .size = size,
                                            .expire_unix_ms = it->expire_unix_ms,
                                            /* a tier's value loads onto device 0 */
                                            .dev = gkv_store_in_tier(e) ? 0 : e->dev});
    uint32_t crc;
    int rc;
    const uint8_t *names = sv->names + it->key_off;
    if ((rc = write_all(sv, r, sizeof(r))) ||
        (rc = write_all(sv, names, (size_t)it->klen + it->meta_len)))
        return fail(sv, rc, "writing");
    crc = gkv_crc32c(0, names, (size_t)it->klen + it->meta_len);
    gkv_backend_t *be = gkv_store_be(sv->sn->env.store, e);
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
    uint8_t t[GKV_SNAP_TRAILER_LEN];
    gkv_snap_trailer_encode(t, sv->n, sv->bytes_total);
    return write_all(sv, t, sizeof(t));
}

/* After a save: only the KEEP newest snapshots stay. */
static void prune(const char *dir)
{
    char **names;
    int n = gkv_snap_list(dir, &names);
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
    const char *dir = sv->sn->dir;
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
    uv_async_send(&sv->sn->done);
    return NULL;
}

/* --- the loop's side of a save ------------------------------------------------------------- */

static void save_free(gkv_snapshots_t *sn, gkv_save_t *sv)
{
    for (uint64_t i = 0; i < sv->n; i++)
        gkv_store_unref(sn->env.store, sv->items[i].e);
    gkv_backend_t *be = sn->env.devs->dev[0].be;
    if (sv->buf)
        be->ops->staging_free(be, sv->buf, CHUNK + 4096);
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
static void save_done(gkv_snapshots_t *sn)
{
    gkv_save_t *sv = sn->running;
    if (!sv)
        return;
    if (sv->started)
        pthread_join(sv->thread, NULL);
    gkv_snapshots_t *st = sn;
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
    save_free(sn, sv);
}

static void on_snap_done(uv_async_t *h)
{
    save_done(h->data);
}

static void on_snap_timer(uv_timer_t *t)
{
    gkv_snapshots_t *sn = t->data;
    char why[192];
    if (!sn->running && !sn->closed && gkv_snapshot_start(sn, why, sizeof(why)))
        GKV_WARN("snapshot: the periodic save did not start: %s", why);
}

void gkv_snapshot_init(gkv_snapshots_t *sn, const gkv_persist_env_t *env, const char *dir,
                       bool skip_corrupt)
{
    memset(sn, 0, sizeof(*sn));
    sn->env = *env;
    sn->dir = dir;
    sn->skip_corrupt = skip_corrupt;
    uv_async_init(env->loop, &sn->done, on_snap_done);
    uv_timer_init(env->loop, &sn->timer);
    uv_idle_init(env->loop, &sn->list);
    sn->done.data = sn->timer.data = sn->list.data = sn;
}

void gkv_snapshot_schedule(gkv_snapshots_t *sn, uint64_t interval_ms)
{
    sn->interval_ms = interval_ms;
    if (sn->closed)
        return;
    if (sn->dir[0] && interval_ms)
        uv_timer_start(&sn->timer, on_snap_timer, interval_ms, interval_ms);
    else
        uv_timer_stop(&sn->timer);
}

void gkv_snapshot_close(gkv_snapshots_t *sn)
{
    if (sn->closed)
        return;
    sn->closed = true;
    uv_close((uv_handle_t *)&sn->done, NULL);
    uv_close((uv_handle_t *)&sn->timer, NULL);
    uv_close((uv_handle_t *)&sn->list, NULL);
}

static int start_save(gkv_snapshots_t *sn, bool threaded, char *why, size_t cap);
static bool list_keys(gkv_snapshots_t *sn, gkv_save_t *sv, uint64_t max);
static void launch(gkv_snapshots_t *sn, gkv_save_t *sv);
static void on_list(uv_idle_t *h);

void gkv_snapshot_fini(gkv_snapshots_t *sn, bool save_now)
{
    gkv_save_t *sv = sn->running;
    if (sv && !sv->started) /* the loop ended while it listed keys */
        fail(sv, GKV_ESHUTDOWN, "stopped while listing the keys");
    save_done(sn);
    if (!sn->dir[0] || !save_now)
        return;
    char why[192];
    GKV_INFO("snapshot: saving before exit (--snapshot-on-exit)");
    if (start_save(sn, false, why, sizeof(why)))
        GKV_ERROR("snapshot: the save before exit did not start: %s", why);
}

int gkv_snapshot_start(gkv_snapshots_t *sn, char *why, size_t cap)
{
    return start_save(sn, true, why, cap);
}

/* Collects what to save and writes it: on a thread (SAVE), or here (at exit). */
static int start_save(gkv_snapshots_t *sn, bool threaded, char *why, size_t cap)
{
    const char *dir = sn->dir;
    if (!dir[0]) {
        snprintf(why, cap, "no --snapshot-dir: this server keeps no snapshots");
        return GKV_ENOTSUP;
    }
    if (sn->running) {
        snprintf(why, cap, "a save is running (INFO # Persistence shows its progress)");
        return GKV_EBUSY;
    }
    gkv_save_t *sv = calloc(1, sizeof(*sv));
    if (!sv)
        return GKV_ENOMEM;
    sv->sn = sn;
    sv->fd = -1;
    sv->progress_at = 1ull << 30;
    sv->started_ms = gkv_clock_ms();
    sv->unix_ms = gkv_wall_clock_ms();
    gkv_backend_t *be = sn->env.devs->dev[0].be;
    sv->cursor = malloc(sn->env.max_key + 1);
    sv->buf = be->ops->staging_alloc(be, CHUNK + 4096);
    if (!sv->cursor || !sv->buf) {
        snprintf(why, cap, "out of host memory for a snapshot");
        save_free(sn, sv);
        return GKV_ENOMEM;
    }
    snprintf(sv->path, sizeof(sv->path), "%s/gpukv-%016" PRIu64 ".snap", dir, sv->unix_ms);
    snprintf(sv->tmp, sizeof(sv->tmp), "%s/.gpukv-%016" PRIu64 ".snap.tmp", dir, sv->unix_ms);
    sv->fd = gkv_snap_open(sv->tmp, O_WRONLY | O_CREAT | O_EXCL, &sv->direct);
    if (sv->fd < 0) {
        snprintf(why, cap, "cannot create %s: %s", sv->tmp, strerror(errno));
        save_free(sn, sv);
        return GKV_ESYS;
    }
    sn->running = sv;
    if (!threaded) { /* at exit: the loop has ended, nothing changes meanwhile */
        list_keys(sn, sv, UINT64_MAX);
        write_file(sv);
        save_done(sn);
        return 0;
    }
    if (list_keys(sn, sv, SLICE))
        launch(sn, sv);
    else
        uv_idle_start(&sn->list, on_list);
    return 0;
}

/* Every key listed: the thread writes the file. */
static void launch(gkv_snapshots_t *sn, gkv_save_t *sv)
{
    /* A value answered before its copy batch ran is complete once the batches have. */
    const gkv_devices_t *d = sn->env.devs;
    for (unsigned i = 0; i < d->n; i++)
        d->dev[i].be->ops->batch_wait(d->dev[i].be);
    GKV_INFO("snapshot: saving %" PRIu64 " keys, %" PRIu64 " value bytes to %s (listed in %" PRIu64
             " ms, %u keys per loop turn)",
             sv->n, sv->bytes_total, sv->path, gkv_clock_ms() - sv->started_ms, SLICE);
    sv->started = pthread_create(&sv->thread, NULL, save_thread, sv) == 0;
    if (!sv->started) {
        fail(sv, GKV_ESYS, "starting the save's thread");
        save_done(sn);
    }
}

static void on_list(uv_idle_t *h)
{
    gkv_snapshots_t *sn = h->data;
    gkv_save_t *sv = sn->running;
    if (!sv || list_keys(sn, sv, SLICE)) {
        uv_idle_stop(h);
        if (sv)
            launch(sn, sv);
    }
}

/* Lists up to max more keys after the cursor: a reference on each entry, a copy of its key,
 * metadata and deadline. Returns true once every key is listed (or listing failed: the save's
 * status says so). */
static bool list_keys(gkv_snapshots_t *sn, gkv_save_t *sv, uint64_t max)
{
    gkv_store_t *st = sn->env.store;
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

bool gkv_snapshot_progress(const gkv_snapshots_t *sn, uint64_t *keys, uint64_t *keys_total,
                           uint64_t *bytes, uint64_t *bytes_total)
{
    gkv_save_t *sv = sn->running;
    if (!sv)
        return false;
    *keys = atomic_load(&sv->keys_done);
    *bytes = atomic_load(&sv->bytes_done);
    *keys_total = sv->n;
    *bytes_total = sv->bytes_total;
    return true;
}

int gkv_snapshot_info(const gkv_snapshots_t *sn, char *text, size_t cap)
{
    const gkv_snapshots_t *st = sn;
    uint64_t k = 0, kt = 0, b = 0, bt = 0;
    bool saving = gkv_snapshot_progress(sn, &k, &kt, &b, &bt);
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
        sn->dir[0] ? sn->dir : "off", sn->interval_ms, saving ? 1 : 0, k, kt, b, bt, st->saves,
        st->failures,
        st->last_status ? "err"
        : st->saves     ? "ok"
                        : "none",
        st->last_error, st->last_file[0] ? st->last_file : "none", st->last_unix_ms, st->last_ms,
        st->last_keys, st->last_bytes, st->loaded_file[0] ? st->loaded_file : "none",
        st->loaded_keys, st->loaded_bytes, st->load_ms, st->skipped_corrupt);
    return n >= 0 && (size_t)n < cap ? n : -1;
}
