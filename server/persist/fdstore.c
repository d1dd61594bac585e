/* fdstore.c: the journal and value memory in systemd's fd store: finding a predecessor's at
 * start (adopted by fdstore_adopt.c), storing this daemon's, rewriting the journal, and the
 * replies that wait for its commits; see fdstore.h. */
#include "fdstore_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "duration.h"
#include "error.h"
#include "journal.h"
#include "log.h"
#include "notify.h"

#define STORED_MAX 64           /* descriptors taken from LISTEN_FDS */
#define REWRITE_MIN (16u << 20) /* the journal is rewritten once past this ... */
#define REWRITE_FACTOR 4        /* ... and this many times a record per live key */
#define REWRITE_RECORD 192      /* bytes of a typical live key's record */

void gkv_fdstore_name(char *out, size_t cap, char kind, uint32_t epoch, uint32_t idx)
{
    snprintf(out, cap, "gpukv-%c-%" PRIu32 "-%" PRIu32, kind, epoch, idx);
}

static bool parse_name(const char *name, gkv__stored_t *st)
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
static unsigned listen_fds(gkv__stored_t *out, unsigned cap)
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
            gkv__stored_t st;
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

/* Storing this daemon's descriptors. */

static void set_journal(gkv_fdstore_t *f, gkv_journal_t *j)
{
    gkv_devices_t *d = f->env.devs;
    f->env.store->journal = j;
    for (unsigned i = 0; i < d->n; i++) {
        d->dev[i].batcher.journal = j;
        d->dev[i].batcher.committed = gkv_fdstore_committed;
        d->dev[i].batcher.committed_ctx = f;
    }
}

gkv_journal_t *gkv_fdstore_journal_now(const gkv_persist_env_t *env)
{
    gkv_journal_t *j;
    if (gkv_journal_create(&j))
        return NULL;
    int rc = 0;
    gkv_backend_t *be[GKV_MAX_DEVICES];
    const char *uuid[GKV_MAX_DEVICES];
    unsigned n = gkv_persist_memories(env, be, uuid);
    for (unsigned i = 0; i < n && !rc; i++)
        rc = gkv_journal_device(j, i, uuid[i]);
    if (rc || gkv_store_journal_all(env->store, j)) {
        gkv_journal_close(j);
        return NULL;
    }
    return j;
}

static int store_journal(gkv_fdstore_t *f, gkv_journal_t *j, uint32_t gen)
{
    char name[64];
    gkv_fdstore_name(name, sizeof(name), 'j', f->epoch, gen);
    return gkv_notify_fd(name, gkv_journal_fd(j));
}

/* Stores each device's memory (and the host tier's), then the journal: a stored journal's
 * memory is always there. */
static int store_all(gkv_fdstore_t *f, gkv_journal_t *j, char *err, size_t cap)
{
    gkv_backend_t *mem[GKV_MAX_DEVICES];
    const char *uuid[GKV_MAX_DEVICES];
    unsigned n = gkv_persist_memories(&f->env, mem, uuid);
    for (unsigned i = 0; i < n; i++) {
        gkv_backend_t *be = mem[i];
        int fd;
        char why[160], name[64];
        if (be->ops->share(be, &fd, why, sizeof(why))) {
            snprintf(err, cap, "memory %u's (%s) cannot be stored: %s", i,
                     i < f->env.devs->n ? "a device" : "the host tier", why);
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
    if (store_journal(f, j, f->gen)) {
        snprintf(err, cap, "storing the journal on $NOTIFY_SOCKET failed: %s", strerror(errno));
        return GKV_ESYS;
    }
    return 0;
}

static void remove_epoch(const gkv_fdstore_t *f, uint32_t epoch, uint32_t gen)
{
    char name[64];
    gkv_backend_t *mem[GKV_MAX_DEVICES];
    const char *uuid[GKV_MAX_DEVICES];
    unsigned n = gkv_persist_memories(&f->env, mem, uuid);
    for (unsigned i = 0; i < n; i++) {
        gkv_fdstore_name(name, sizeof(name), 'm', epoch, i);
        (void)gkv_notify_fd_remove(name);
    }
    gkv_fdstore_name(name, sizeof(name), 'j', epoch, gen);
    (void)gkv_notify_fd_remove(name);
}

int gkv_fdstore_open(gkv_fdstore_t *f, const gkv_persist_env_t *env, gkv_fdstore_mode_t mode,
                     gkv_stored_fd_t *passed, unsigned npassed, bool *adopted, char *err,
                     size_t cap)
{
    memset(f, 0, sizeof(*f));
    f->env = *env;
    *adopted = false;
    gkv__stored_t stored[STORED_MAX];
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
    const gkv__stored_t *j = NULL;
    uint32_t newest = 0;
    for (unsigned i = 0; i < n; i++) {
        const gkv__stored_t *x = &stored[i];
        newest = x->epoch > newest ? x->epoch : newest;
        if (x->kind == 'j' &&
            (!j || x->epoch > j->epoch || (x->epoch == j->epoch && x->idx > j->idx)))
            j = x;
    }
    uint64_t t0 = gkv_clock_ms();
    if (j && gkv__fdstore_adopt(f, j, stored, n) == 0) {
        *adopted = true;
        f->adopt_ms = gkv_clock_ms() - t0;
    } else if (n && !j) {
        GKV_ERROR("fd store: %u stored descriptors but no journal: their values are lost", n);
    }
    bool on =
        mode == GKV_FDSTORE_ON || (mode == GKV_FDSTORE_AUTO && gkv_notify_available() &&
                                   (!getenv("FDSTORE") || strtol(getenv("FDSTORE"), NULL, 10) > 0));
    int rc = 0;
    if (on && !gkv_notify_available()) {
        snprintf(err, cap,
                 "--fd-store yes needs $NOTIFY_SOCKET: run gpukvd as a systemd "
                 "service (Type=notify, FileDescriptorStoreMax=32)");
        rc = GKV_EINVAL;
    } else if (on) {
        f->epoch = newest + 1;
        gkv_journal_t *jn = gkv_fdstore_journal_now(env);
        if (!jn) {
            snprintf(err, cap, "out of memory for the fd store's journal");
            rc = GKV_ENOMEM;
        } else if ((rc = store_all(f, jn, err, cap))) {
            gkv_journal_close(jn);
            remove_epoch(f, f->epoch, 0);
        } else {
            f->journal = jn;
            set_journal(f, jn);
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

void gkv_fdstore_serving(gkv_fdstore_t *f)
{
    drop_old(f, f->journal != NULL);
}

/* Waiting for commits. */

uint64_t gkv_fdstore_mark(const gkv_fdstore_t *f)
{
    return f->journal ? gkv_journal_used(f->journal) : 0;
}

static void release(gkv_fdstore_t *f, bool all)
{
    uint64_t upto = f->journal ? gkv_journal_committed(f->journal) : 0;
    gkv_commits_release(&f->commits, upto, all, !f->closing);
}

/* The journal failed (out of memory growing it): it is taken out of the fd store, since the
 * memory it names changes from now on, and the daemon goes on without. */
static void broken(gkv_fdstore_t *f)
{
    GKV_ERROR("fd store: the journal failed; removing it from the fd store: values will NOT "
              "survive a crash from now on");
    char name[64];
    gkv_fdstore_name(name, sizeof(name), 'j', f->epoch, f->gen);
    (void)gkv_notify_fd_remove(name);
    set_journal(f, NULL);
    gkv_journal_close(f->journal);
    f->journal = NULL;
    gkv_store_journal_committed(f->env.store);
    release(f, true);
}

/* A journal several times the index is replaced by one written from the index. */
static void maybe_rewrite(gkv_fdstore_t *f)
{
    uint64_t used = gkv_journal_used(f->journal);
    uint64_t live = (uint64_t)gkv_index_count(f->env.store->ix) * REWRITE_RECORD;
    if (f->closing || used < REWRITE_MIN || used < REWRITE_FACTOR * live ||
        used < f->rewrite_after || !gkv_journal_idle(f->journal))
        return;
    /* Every record has committed: what the limbo holds goes now, under the old journal's
     * positions (the new journal counts from its own start). */
    gkv_store_journal_committed(f->env.store);
    gkv_journal_t *jn = gkv_fdstore_journal_now(&f->env);
    if (!jn || store_journal(f, jn, f->gen + 1)) {
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
    set_journal(f, jn);
}

bool gkv_fdstore_hold(gkv_fdstore_t *f, gkv_commit_waiter_t *w, uint64_t mark)
{
    if (!f->journal)
        return false;
    if (gkv_journal_broken(f->journal)) {
        broken(f);
        return false;
    }
    uint64_t used = gkv_journal_used(f->journal);
    if (used == mark || gkv_journal_committed(f->journal) >= used) {
        maybe_rewrite(f);
        return false;
    }
    return gkv_commits_wait(&f->commits, w, used);
}

void gkv_fdstore_committed(void *arg)
{
    gkv_fdstore_t *f = arg;
    gkv_store_journal_committed(f->env.store);
    if (!f->journal)
        return;
    if (gkv_journal_broken(f->journal)) {
        broken(f);
        return;
    }
    release(f, false);
    maybe_rewrite(f);
}

int gkv_fdstore_info(const gkv_fdstore_t *f, char *text, size_t cap)
{
    const gkv_journal_t *j = f->journal;
    uint64_t limbo = f->env.store ? f->env.store->limbo_bytes : 0;
    int n = snprintf(text, cap,
                     "fd_store:%s\r\nfd_store_epoch:%" PRIu32 "\r\nfd_store_journal_bytes:%" PRIu64
                     "\r\nfd_store_journal_rewrites:%" PRIu64 "\r\nfd_store_held_replies:%" PRIu64
                     "\r\nfd_store_limbo_bytes:%" PRIu64 "\r\nadopted_epoch:%" PRIu32
                     "\r\nadopted_keys:%" PRIu64 "\r\nadopted_bytes:%" PRIu64
                     "\r\nadopted_dropped:%" PRIu64 "\r\nadopt_ms:%" PRIu64 "\r\n",
                     j ? "on" : "off", j ? f->epoch : 0, j ? gkv_journal_used(j) : 0, f->rewrites,
                     f->commits.waits, limbo, f->adopted_epoch, f->adopted_keys, f->adopted_bytes,
                     f->dropped, f->adopt_ms);
    return n < 0 || (size_t)n >= cap ? -1 : n;
}

void gkv_fdstore_close(gkv_fdstore_t *f)
{
    f->closing = true;
    drop_old(f, false); /* a failed start: the next one adopts them again */
    if (!f->journal)
        return;
    remove_epoch(f, f->epoch, f->gen);
    set_journal(f, NULL);
    gkv_journal_close(f->journal);
    f->journal = NULL;
    release(f, true);
    gkv_store_journal_committed(f->env.store);
}
