/* fdstore.c: the journal and value memory in systemd's fd store, and adopting them at start;
 * see fdstore.h. */
#include "fdstore.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conn.h"
#include "duration.h"
#include "error.h"
#include "frame.h"
#include "journal.h"
#include "log.h"
#include "notify.h"
#include "server.h"
#include "slab.h"

#define STORED_MAX 64           /* descriptors taken from LISTEN_FDS */
#define REWRITE_MIN (16u << 20) /* the journal is rewritten once past this ... */
#define REWRITE_FACTOR 4        /* ... and this many times a record per live key */
#define REWRITE_RECORD 192      /* bytes of a typical live key's record */
#define DROP_LINES 20           /* dropped records logged one by one, then counted */

/* A descriptor the predecessor stored: gpukv-m-<epoch>-<idx> or gpukv-j-<epoch>-<idx>. */
typedef struct {
    int fd;
    char kind; /* 'm' or 'j' */
    uint32_t epoch, idx;
} stored_t;

void gkv_fdstore_name(char *out, size_t cap, char kind, uint32_t epoch, uint32_t idx)
{
    snprintf(out, cap, "gpukv-%c-%" PRIu32 "-%" PRIu32, kind, epoch, idx);
}

static bool parse_name(const char *name, stored_t *st)
{
    char kind;
    unsigned epoch, idx;
    int end = 0;
    if (sscanf(name, "gpukv-%c-%u-%u%n", &kind, &epoch, &idx, &end) != 3 || name[end] ||
        (kind != 'm' && kind != 'j') || (kind == 'm' && idx >= GKV_MAX_DEVICES))
        return false;
    st->kind = kind;
    st->epoch = epoch;
    st->idx = idx;
    return true;
}

/* The descriptors systemd passed this process (LISTEN_PID is ours): those named gpukv-*
 * into out; others are closed. The variables are unset (children must not see them). */
static unsigned listen_fds(stored_t *out, unsigned cap)
{
    const char *pid = getenv("LISTEN_PID"), *count = getenv("LISTEN_FDS");
    const char *names = getenv("LISTEN_FDNAMES");
    unsigned n = 0;
    if (pid && count && strtol(pid, NULL, 10) == (long)getpid()) {
        long nfds = strtol(count, NULL, 10);
        const char *p = names ? names : "";
        for (long i = 0; i < nfds && i < 4096; i++) {
            int fd = 3 + (int)i;
            size_t len = strcspn(p, ":");
            char name[128];
            snprintf(name, sizeof(name), "%.*s", (int)len, p);
            p += len + (p[len] == ':');
            (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
            stored_t st;
            if (n < cap && parse_name(name, &st)) {
                st.fd = fd;
                out[n++] = st;
            } else {
                GKV_WARN("fd store: closing descriptor %d (\"%s\"): not one of gpukv's", fd, name);
                close(fd);
            }
        }
    }
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
    return n;
}

/* Adoption. */

typedef struct {
    uint32_t dev;
    uint64_t addr, size;
} range_t;

typedef struct {
    gkv_server_t *s;
    const stored_t *mem[GKV_MAX_DEVICES]; /* the predecessor's device i's memory, or NULL */
    void *src[GKV_MAX_DEVICES];           /* opened for copies (adopt_open), or NULL */
    bool unusable[GKV_MAX_DEVICES];       /* opening it failed */
    int to[GKV_MAX_DEVICES];              /* this daemon's device with its UUID, or -1 */
    gkv_jdevs_t devs;
    range_t *ranges, *bad; /* pass 1: every value's memory; the overlapping ones, sorted */
    size_t nranges, cap, nbad;
    uint64_t keys, bytes, dropped, expired, now_unix;
} adopt_t;

static int by_range(const void *a, const void *b)
{
    const range_t *x = a, *y = b;
    if (x->dev != y->dev)
        return x->dev < y->dev ? -1 : 1;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static int collect_range(void *arg, const gkv_jrec_t *r)
{
    adopt_t *a = arg;
    if (!r->size)
        return 0;
    if (a->nranges == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 4096;
        range_t *n = realloc(a->ranges, cap * sizeof(*n));
        if (!n)
            return GKV_ENOMEM;
        a->ranges = n;
        a->cap = cap;
    }
    a->ranges[a->nranges++] = (range_t){r->dev, r->addr, r->size};
    return 0;
}

/* Values whose memory overlaps another's: a journal that says so is wrong about both. */
static void find_overlaps(adopt_t *a)
{
    qsort(a->ranges, a->nranges, sizeof(range_t), by_range);
    size_t n = 0;
    for (size_t i = 0; i < a->nranges; i++) {
        const range_t *r = &a->ranges[i];
        bool over = (i > 0 && r[-1].dev == r->dev && r[-1].addr + r[-1].size > r->addr) ||
                    (i + 1 < a->nranges && r[1].dev == r->dev && r->addr + r->size > r[1].addr);
        if (over)
            a->ranges[n++] = *r; /* in place: n <= i */
    }
    a->bad = a->ranges;
    a->nbad = n;
}

static void drop(adopt_t *a, const gkv_jrec_t *r, const char *why)
{
    if (a->dropped++ < DROP_LINES)
        GKV_ERROR("fd store: dropping key \"%.*s\" (%" PRIu64 " bytes): %s",
                  (int)(r->klen < 64 ? r->klen : 64), (const char *)r->key, r->size, why);
}

static int adopt_one(void *arg, const gkv_jrec_t *r)
{
    adopt_t *a = arg;
    gkv_server_t *s = a->s;
    gkv_store_t *st = &s->store;
    if (r->expire_unix_ms && r->expire_unix_ms <= a->now_unix) {
        a->expired++;
        return 0;
    }
    if (r->dev >= GKV_MAX_DEVICES || !a->mem[r->dev]) {
        drop(a, r, "the memory it names was not stored");
        return 0;
    }
    if (a->to[r->dev] < 0) {
        drop(a, r, "its GPU is not one this daemon serves");
        return 0;
    }
    if (r->klen > s->cfg.max_key || r->meta_len > GKV_MAX_META) {
        drop(a, r, "its key or metadata is longer than this daemon allows");
        return 0;
    }
    range_t key = {r->dev, r->addr, r->size};
    if (r->size && bsearch(&key, a->bad, a->nbad, sizeof(range_t), by_range)) {
        drop(a, r, "its memory overlaps another value's");
        return 0;
    }
    unsigned to = (unsigned)a->to[r->dev];
    gkv_backend_t *be = s->devs.dev[to].be;
    char why[192];
    if (r->size && !a->src[r->dev] && !a->unusable[r->dev] &&
        be->ops->adopt_open(be, a->mem[r->dev]->fd, &a->src[r->dev], why, sizeof(why))) {
        GKV_ERROR("fd store: device %u's stored memory: %s", r->dev, why);
        a->unusable[r->dev] = true;
    }
    if (r->size && a->unusable[r->dev]) {
        drop(a, r, "its memory could not be opened");
        return 0;
    }
    gkv_entry_t *e;
    int lane = r->size <= GKV_SLAB_MAX ? GKV_LANE_BATCH : GKV_LANE_SHARED;
    int rc = gkv_store_entry_new(st, to, r->key, r->klen, r->size, r->meta, r->meta_len, lane, &e);
    if (rc == GKV_EOOM) {
        drop(a, r, "no room for it on its device");
        return 0;
    }
    if (rc)
        return rc;
    if (r->size && (rc = be->ops->adopt_copy(be, a->src[r->dev], r->base, r->base_size, r->exp,
                                             r->exp_len, r->addr, r->size, e->mem))) {
        gkv_store_unref(st, e);
        drop(a, r, rc == GKV_EINVAL ? "it lies outside the memory it names" : "copying it failed");
        return 0;
    }
    rc = r->expire_unix_ms ? gkv_store_entry_ttl(st, e, r->expire_unix_ms - a->now_unix) : 0;
    if (!rc)
        rc = gkv_store_publish(st, e, 0, NULL);
    gkv_store_unref(st, e);
    if (rc)
        return GKV_ENOMEM;
    a->keys++;
    a->bytes += r->size;
    return 0;
}

/* Replays the journal j of stored (the predecessor's epoch) into the empty store. Returns 0
 * (what could be adopted is published, the rest dropped and logged) or a negative code with
 * the store empty. */
static int adopt(gkv_server_t *s, const stored_t *j, const stored_t *stored, unsigned n)
{
    adopt_t a = {.s = s, .now_unix = gkv_wall_clock_ms()};
    for (unsigned i = 0; i < n; i++)
        if (stored[i].kind == 'm' && stored[i].epoch == j->epoch)
            a.mem[stored[i].idx] = &stored[i];
    bool bad;
    char why[192];
    int rc = gkv_journal_replay(j->fd, &a.devs, collect_range, &a, &bad, why, sizeof(why));
    if (!rc) {
        if (bad)
            GKV_ERROR("fd store: the journal: %s", why);
        for (unsigned i = 0; i < GKV_MAX_DEVICES; i++)
            a.to[i] = i < a.devs.n
                          ? gkv_devices_map_gpu(&s->devs, a.devs.uuid[i], strlen(a.devs.uuid[i]), i)
                          : -1;
        find_overlaps(&a);
        s->store.now_ms = gkv_clock_ms();
        rc = gkv_journal_replay(j->fd, &a.devs, adopt_one, &a, &bad, why, sizeof(why));
    }
    for (unsigned i = 0; i < GKV_MAX_DEVICES; i++) {
        if (!a.src[i])
            continue;
        gkv_backend_t *be = s->devs.dev[a.to[i]].be;
        if (be->ops->adopt_close(be, a.src[i]) && !rc) {
            snprintf(why, sizeof(why), "copying device %u's values failed", i);
            rc = GKV_EIO;
        }
    }
    free(a.ranges);
    if (rc) {
        GKV_ERROR("fd store: adopting epoch %" PRIu32 " failed (%s): starting without its values",
                  j->epoch, rc == GKV_ENOMEM ? "out of host memory" : why);
        gkv_store_flush(&s->store); /* never half-adopted */
        return rc;
    }
    gkv_fdstore_t *f = &s->fdstore;
    f->adopted_epoch = j->epoch;
    f->adopted_keys = a.keys;
    f->adopted_bytes = a.bytes;
    f->dropped = a.dropped;
    GKV_INFO("fd store: adopted epoch %" PRIu32 ": %" PRIu64 " keys, %" PRIu64 " bytes; %" PRIu64
             " past their deadline, %" PRIu64 " dropped",
             j->epoch, a.keys, a.bytes, a.expired, a.dropped);
    return 0;
}

/* Storing this daemon's descriptors. */

static void set_journal(gkv_server_t *s, gkv_journal_t *j)
{
    s->store.journal = j;
    for (unsigned i = 0; i < s->devs.n; i++) {
        s->devs.dev[i].batcher.journal = j;
        s->devs.dev[i].batcher.committed = gkv_fdstore_committed;
        s->devs.dev[i].batcher.committed_ctx = s;
    }
}

gkv_journal_t *gkv_fdstore_journal_now(gkv_server_t *s)
{
    gkv_journal_t *j;
    if (gkv_journal_create(&j))
        return NULL;
    int rc = 0;
    for (unsigned i = 0; i < s->devs.n && !rc; i++)
        rc = gkv_journal_device(j, i, s->devs.dev[i].be->gpu_uuid);
    if (rc || gkv_store_journal_all(&s->store, j)) {
        gkv_journal_close(j);
        return NULL;
    }
    return j;
}

static int store_journal(gkv_server_t *s, gkv_journal_t *j, uint32_t gen)
{
    char name[64];
    gkv_fdstore_name(name, sizeof(name), 'j', s->fdstore.epoch, gen);
    return gkv_notify_fd(name, gkv_journal_fd(j));
}

/* Stores each device's memory, then the journal: a stored journal's memory is always there. */
static int store_all(gkv_server_t *s, gkv_journal_t *j, char *err, size_t cap)
{
    gkv_fdstore_t *f = &s->fdstore;
    for (unsigned i = 0; i < s->devs.n; i++) {
        gkv_backend_t *be = s->devs.dev[i].be;
        int fd;
        char why[160], name[64];
        if (be->ops->share(be, &fd, why, sizeof(why))) {
            snprintf(err, cap, "device %u's memory cannot be stored: %s", i, why);
            return GKV_ESYS;
        }
        gkv_fdstore_name(name, sizeof(name), 'm', f->epoch, i);
        int rc = gkv_notify_fd(name, fd);
        int e = errno;
        close(fd);
        if (rc) {
            snprintf(err, cap, "storing %s on $NOTIFY_SOCKET failed: %s", name, strerror(e));
            return GKV_ESYS;
        }
    }
    if (store_journal(s, j, f->gen)) {
        snprintf(err, cap, "storing the journal on $NOTIFY_SOCKET failed: %s", strerror(errno));
        return GKV_ESYS;
    }
    return 0;
}

static void remove_epoch(const gkv_server_t *s, uint32_t epoch, uint32_t gen)
{
    char name[64];
    for (unsigned i = 0; i < s->devs.n; i++) {
        gkv_fdstore_name(name, sizeof(name), 'm', epoch, i);
        (void)gkv_notify_fd_remove(name);
    }
    gkv_fdstore_name(name, sizeof(name), 'j', epoch, gen);
    (void)gkv_notify_fd_remove(name);
}

int gkv_fdstore_open(gkv_server_t *s, gkv_stored_fd_t *passed, unsigned npassed, bool *adopted,
                     char *err, size_t cap)
{
    gkv_fdstore_t *f = &s->fdstore;
    *adopted = false;
    stored_t stored[STORED_MAX];
    unsigned n = listen_fds(stored, STORED_MAX);
    for (unsigned i = 0; i < npassed; i++) {
        if (n < STORED_MAX && parse_name(passed[i].name, &stored[n])) {
            stored[n++].fd = passed[i].fd;
        } else {
            GKV_WARN("takeover: closing descriptor \"%s\": not one of gpukv's", passed[i].name);
            close(passed[i].fd);
        }
    }
    /* The newest epoch with a journal, and its newest journal. */
    const stored_t *j = NULL;
    uint32_t newest = 0;
    for (unsigned i = 0; i < n; i++) {
        const stored_t *x = &stored[i];
        newest = x->epoch > newest ? x->epoch : newest;
        if (x->kind == 'j' &&
            (!j || x->epoch > j->epoch || (x->epoch == j->epoch && x->idx > j->idx)))
            j = x;
    }
    uint64_t t0 = gkv_clock_ms();
    if (j && adopt(s, j, stored, n) == 0) {
        *adopted = true;
        f->adopt_ms = gkv_clock_ms() - t0;
    } else if (n && !j) {
        GKV_ERROR("fd store: %u stored descriptors but no journal: their values are lost", n);
    }
    bool on = s->cfg.fd_store == GKV_YES ||
              (s->cfg.fd_store == GKV_AUTO && gkv_notify_available() &&
               (!getenv("FDSTORE") || strtol(getenv("FDSTORE"), NULL, 10) > 0));
    int rc = 0;
    if (on && !gkv_notify_available()) {
        snprintf(err, cap,
                 "--fd-store yes needs $NOTIFY_SOCKET: run gpukvd as a systemd "
                 "service (Type=notify, FileDescriptorStoreMax=32)");
        rc = GKV_EINVAL;
    } else if (on) {
        f->epoch = newest + 1;
        gkv_journal_t *jn = gkv_fdstore_journal_now(s);
        if (!jn) {
            snprintf(err, cap, "out of memory for the fd store's journal");
            rc = GKV_ENOMEM;
        } else if ((rc = store_all(s, jn, err, cap))) {
            gkv_journal_close(jn);
            remove_epoch(s, f->epoch, 0);
        } else {
            f->journal = jn;
            set_journal(s, jn);
            GKV_INFO("fd store: on (epoch %" PRIu32 "): value memory and the journal kept in "
                     "systemd's file descriptor store",
                     f->epoch);
        }
    }
    /* The predecessor's descriptors go once this daemon serves (gkv_fdstore_serving). */
    if (!rc && n && (f->old = calloc(n, sizeof(*f->old)))) {
        for (unsigned i = 0; i < n; i++) {
            f->old[i].fd = stored[i].fd;
            gkv_fdstore_name(f->old[i].name, sizeof(f->old[i].name), stored[i].kind,
                             stored[i].epoch, stored[i].idx);
        }
        f->nold = n;
    } else {
        for (unsigned i = 0; i < n; i++)
            close(stored[i].fd);
    }
    return rc;
}

static void drop_old(gkv_fdstore_t *f, bool remove)
{
    for (unsigned i = 0; i < f->nold; i++) {
        if (remove)
            (void)gkv_notify_fd_remove(f->old[i].name);
        close(f->old[i].fd);
    }
    free(f->old);
    f->old = NULL;
    f->nold = 0;
}

void gkv_fdstore_serving(gkv_server_t *s)
{
    drop_old(&s->fdstore, s->fdstore.journal != NULL);
}

/* Waiting for commits. */

uint64_t gkv_fdstore_mark(const gkv_server_t *s)
{
    return s->fdstore.journal ? gkv_journal_used(s->fdstore.journal) : 0;
}

static void release(gkv_server_t *s, bool all)
{
    gkv_fdstore_t *f = &s->fdstore;
    uint64_t upto = f->journal ? gkv_journal_committed(f->journal) : 0;
    gkv_conn_t *ready = NULL, **pp = &f->waiters;
    while (*pp) {
        gkv_conn_t *c = *pp;
        if (all || c->journal_until <= upto) {
            *pp = c->journal_next;
            c->journal_next = ready;
            ready = c;
        } else {
            pp = &c->journal_next;
        }
    }
    while (ready) {
        gkv_conn_t *c = ready;
        ready = c->journal_next;
        c->journal_next = NULL;
        c->journal_wait = false;
        c->held--;
        if (!f->closing)
            gkv_conn_resume(c);
    }
}

/* The journal failed (out of memory growing it): it is taken out of the fd store, since the
 * memory it names changes from now on, and the daemon goes on without. */
static void broken(gkv_server_t *s)
{
    gkv_fdstore_t *f = &s->fdstore;
    GKV_ERROR("fd store: the journal failed; removing it from the fd store: values will NOT "
              "survive a crash from now on");
    char name[64];
    gkv_fdstore_name(name, sizeof(name), 'j', f->epoch, f->gen);
    (void)gkv_notify_fd_remove(name);
    set_journal(s, NULL);
    gkv_journal_close(f->journal);
    f->journal = NULL;
    gkv_store_journal_committed(&s->store);
    release(s, true);
}

/* A journal several times the index is replaced by one written from the index. */
static void maybe_rewrite(gkv_server_t *s)
{
    gkv_fdstore_t *f = &s->fdstore;
    uint64_t used = gkv_journal_used(f->journal);
    uint64_t live = (uint64_t)gkv_index_count(s->store.ix) * REWRITE_RECORD;
    if (f->closing || used < REWRITE_MIN || used < REWRITE_FACTOR * live ||
        used < f->rewrite_after || !gkv_journal_idle(f->journal))
        return;
    gkv_journal_t *jn = gkv_fdstore_journal_now(s);
    if (!jn || store_journal(s, jn, f->gen + 1)) {
        GKV_WARN("fd store: rewriting the journal (%" PRIu64 " bytes) failed; trying again at "
                 "twice the size",
                 used);
        gkv_journal_close(jn);
        f->rewrite_after = used * 2;
        return;
    }
    char name[64];
    gkv_fdstore_name(name, sizeof(name), 'j', f->epoch, f->gen);
    (void)gkv_notify_fd_remove(name);
    GKV_DEBUG("fd store: journal rewritten: %" PRIu64 " bytes to %" PRIu64, used,
              gkv_journal_used(jn));
    gkv_journal_close(f->journal);
    f->journal = jn;
    f->gen++;
    f->rewrites++;
    set_journal(s, jn);
}

void gkv_fdstore_hold(gkv_server_t *s, gkv_conn_t *c, uint64_t mark)
{
    gkv_fdstore_t *f = &s->fdstore;
    if (!f->journal)
        return;
    if (gkv_journal_broken(f->journal)) {
        broken(s);
        return;
    }
    uint64_t used = gkv_journal_used(f->journal);
    if (used == mark || gkv_journal_committed(f->journal) >= used) {
        maybe_rewrite(s);
        return;
    }
    c->journal_until = used;
    if (!c->journal_wait) {
        c->journal_wait = true;
        c->held++;
        c->journal_next = f->waiters;
        f->waiters = c;
        f->held_replies++;
    }
}

void gkv_fdstore_committed(void *arg)
{
    gkv_server_t *s = arg;
    gkv_fdstore_t *f = &s->fdstore;
    gkv_store_journal_committed(&s->store);
    if (!f->journal)
        return;
    if (gkv_journal_broken(f->journal)) {
        broken(s);
        return;
    }
    release(s, false);
    maybe_rewrite(s);
}

int gkv_fdstore_info(const gkv_server_t *s, char *text, size_t cap)
{
    const gkv_fdstore_t *f = &s->fdstore;
    const gkv_journal_t *j = f->journal;
    int n = snprintf(text, cap,
                     "fd_store:%s\r\nfd_store_epoch:%" PRIu32 "\r\nfd_store_journal_bytes:%" PRIu64
                     "\r\nfd_store_journal_rewrites:%" PRIu64 "\r\nfd_store_held_replies:%" PRIu64
                     "\r\nfd_store_limbo_bytes:%" PRIu64 "\r\nadopted_epoch:%" PRIu32
                     "\r\nadopted_keys:%" PRIu64 "\r\nadopted_bytes:%" PRIu64
                     "\r\nadopted_dropped:%" PRIu64 "\r\nadopt_ms:%" PRIu64 "\r\n",
                     j ? "on" : "off", j ? f->epoch : 0, j ? gkv_journal_used(j) : 0, f->rewrites,
                     f->held_replies, s->store.limbo_bytes, f->adopted_epoch, f->adopted_keys,
                     f->adopted_bytes, f->dropped, f->adopt_ms);
    return n < 0 || (size_t)n >= cap ? -1 : n;
}

void gkv_fdstore_close(gkv_server_t *s)
{
    gkv_fdstore_t *f = &s->fdstore;
    f->closing = true;
    drop_old(f, false); /* a failed start: the next one adopts them again */
    if (!f->journal)
        return;
    remove_epoch(s, f->epoch, f->gen);
    set_journal(s, NULL);
    gkv_journal_close(f->journal);
    f->journal = NULL;
    release(s, true);
    gkv_store_journal_committed(&s->store);
}
