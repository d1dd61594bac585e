/* fence.c: asynchronous seals; see fence.h. */
#include "fence.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "conn_impl.h"
#include "error.h"
#include "keywait.h"
#include "log.h"
#include "trace.h"

/* The schedule of the counters' polling: the loop spins for FENCE_SPIN_MS after a seal or a
 * publication, then looks every FENCE_TICK_US (a timerfd wakes it) until FENCE_TICK_MS after
 * it, then once every FENCE_POLL_MS. A seal whose producer's work runs 20 ms is then noticed
 * within 50 us of its end, not within a millisecond (bench/fence_watch.c), for a wake-up of a
 * few microseconds every 50 (GPUKV_FENCE_TICK_US=0: no ticks, the earlier schedule;
 * GPUKV_FENCE_SPIN_MS: a longer spin, for producers whose work runs longer and a core to spare:
 * a loop that ticked is slower to hand the value on than one that spun, bench/RESULTS.md). */
#define FENCE_SPIN_MS 5
#define FENCE_TICK_US 50
#define FENCE_TICK_MS 1000
#define FENCE_POLL_MS 1

/* One asynchronous seal that waits for its counter. */
typedef struct {
    gkv_entry_t *entry; /* one reference: the value to publish */
    uint64_t lease;     /* the connection's lease on it (a read lease now), if it still holds it */
    uint64_t target;
    uint64_t since_ns; /* uv_hrtime at the seal */
    uint32_t slot;
    bool linked; /* early MAPs lease it (keywait.h): published by linking it (store.h) */
} waiting_t;

/* A connection's fence page and the seals that wait on it, oldest first (a ring). */
struct gkv_fence {
    gkv_conn_t *c;
    struct gkv_fence *prev, *next; /* the fences' list of connections with seals waiting */
    bool listed;
    volatile uint64_t *slots;           /* the page, mapped (the client writes it) */
    uint64_t gen[GKV_FENCE_SLOTS];      /* each counter's last target */
    waiting_t q[GKV_FENCE_SLOTS];
    uint32_t head, n;
};

struct gkv_fences {
    gkv_net_t *net;
    struct gkv_fence *head; /* connections with seals waiting */
    uv_idle_t spin;
    uv_timer_t poll;
    uv_poll_t tick; /* the timerfd's readiness (tick_fd >= 0) */
    int tick_fd;
    uint64_t tick_us; /* FENCE_TICK_US, or GPUKV_FENCE_TICK_US; 0: no ticks */
    uint64_t spin_until; /* uv_now ms */
    uint64_t spin_ms;    /* FENCE_SPIN_MS, or GPUKV_FENCE_SPIN_MS */
    bool closing;        /* the handles are closing: nothing starts them again */
    uint64_t waiting, published, discarded, wait_us, max_us;
};

static void list_add(gkv_fences_t *fs, struct gkv_fence *f)
{
    if (f->listed)
        return;
    f->prev = NULL;
    f->next = fs->head;
    if (fs->head)
        fs->head->prev = f;
    fs->head = f;
    f->listed = true;
}

static void list_remove(gkv_fences_t *fs, struct gkv_fence *f)
{
    if (!f->listed)
        return;
    if (f->prev)
        f->prev->next = f->next;
    else
        fs->head = f->next;
    if (f->next)
        f->next->prev = f->prev;
    f->prev = f->next = NULL;
    f->listed = false;
}

/* The oldest waiting seal of f leaves the ring (its counter free again). */
static waiting_t pop(struct gkv_fence *f)
{
    waiting_t w = f->q[f->head];
    f->head = (f->head + 1) % GKV_FENCE_SLOTS;
    f->n--;
    return w;
}

/* w's counter says its writes are done: its value is published under its key. */
static void publish(gkv_fences_t *fs, struct gkv_fence *f, waiting_t *w)
{
    gkv_net_t *net = fs->net;
    gkv_store_t *st = net->store;
    st->now_ms = uv_hrtime() / 1000000;
    gkv_entry_t *holder = NULL;
    uint64_t size = w->entry->size; /* publishing may move the value into the key's entry */
    int rc = gkv_store_publish(st, w->entry, w->linked ? GKV_PUBLISH_LINK : 0, &holder);
    gkv_trace("d_sealed", size, (uint64_t)-rc); /* GPUKV_TRACE: the publication */
    if (rc == 0) {
        /* The lease follows the value if publishing moved it into the key's entry. */
        gkv_lease_t *l = gkv_lease_find(&f->c->leases, w->lease);
        if (l && l->entry == w->entry && holder && holder != w->entry)
            gkv_lease_to_read(&f->c->leases, st, l, holder);
        uint64_t us = (uv_hrtime() - w->since_ns) / 1000;
        fs->published++;
        fs->wait_us += us;
        if (us > fs->max_us)
            fs->max_us = us;
    } else {
        size_t klen;
        const uint8_t *key = gkv_store_key(st, w->entry, &klen);
        GKV_WARN("conn %llu: an asynchronous seal of '%.*s' could not be published (%s): "
                 "the value is discarded",
                 (unsigned long long)f->c->id, (int)(klen > 200 ? 200 : klen),
                 (const char *)key, gkv_err_name(rc));
        fs->discarded++;
    }
    gkv_store_unref(st, w->entry);
}

/* Publishes f's seals whose counters reached their targets, oldest first, up to the first that
 * waits still. True when any was. */
static bool poll_one(gkv_fences_t *fs, struct gkv_fence *f)
{
    bool any = false;
    while (f->n) {
        waiting_t *w = &f->q[f->head];
        if (__atomic_load_n(&f->slots[w->slot], __ATOMIC_ACQUIRE) < w->target)
            break;
        waiting_t done = pop(f);
        fs->waiting--;
        publish(fs, f, &done);
        any = true;
    }
    return any;
}

/* Publishes what the counters allow, in each connection's order. True when any was. */
static bool poll_all(gkv_fences_t *fs)
{
    bool any = false;
    for (struct gkv_fence *f = fs->head, *next; f; f = next) {
        next = f->next;
        any |= poll_one(fs, f);
        if (!f->n) {
            list_remove(fs, f);
            gkv_conn_t *c = f->c;
            if (c->wait.fence) { /* a synchronous SEAL waited for these: it runs now */
                c->wait.fence = false;
                if (!c->yielded && !c->closing)
                    gkv_net_yield(c->net, c);
            }
        }
    }
    if (any && fs->net->hooks.request_done) /* a deadline may have been published */
        fs->net->hooks.request_done(fs->net->hooks.owner);
    return any;
}

static void on_spin(uv_idle_t *h);
static void on_poll(uv_timer_t *t);
static void on_tick(uv_poll_t *p, int status, int events);

/* The timerfd's ticks on (every fs->tick_us) or off. */
static void set_ticking(gkv_fences_t *fs, bool on)
{
    if (fs->tick_fd < 0 || on == uv_is_active((uv_handle_t *)&fs->tick))
        return;
    struct itimerspec its = {{0, 0}, {0, 0}};
    if (on) {
        its.it_interval.tv_nsec = its.it_value.tv_nsec = (long)fs->tick_us * 1000;
        uv_poll_start(&fs->tick, UV_READABLE, on_tick);
    } else {
        uv_poll_stop(&fs->tick);
    }
    (void)timerfd_settime(fs->tick_fd, 0, &its, NULL);
}

/* Polling goes on while seals wait: spinning for FENCE_SPIN_MS after progress, then ticks,
 * then slower. */
static void keep_polling(gkv_fences_t *fs, bool progress)
{
    if (fs->closing)
        return;
    if (!fs->head) {
        uv_idle_stop(&fs->spin);
        uv_timer_stop(&fs->poll);
        set_ticking(fs, false);
        return;
    }
    uint64_t now = uv_now(fs->net->loop);
    if (progress)
        fs->spin_until = now + fs->spin_ms;
    if (now < fs->spin_until) {
        uv_timer_stop(&fs->poll);
        set_ticking(fs, false);
        if (!uv_is_active((uv_handle_t *)&fs->spin))
            uv_idle_start(&fs->spin, on_spin);
        return;
    }
    uv_idle_stop(&fs->spin);
    if (fs->tick_fd >= 0 && now < fs->spin_until + FENCE_TICK_MS) {
        uv_timer_stop(&fs->poll);
        set_ticking(fs, true);
        return;
    }
    set_ticking(fs, false);
    if (!uv_is_active((uv_handle_t *)&fs->poll))
        uv_timer_start(&fs->poll, on_poll, FENCE_POLL_MS, FENCE_POLL_MS);
}

/* Polls the counters; what a publication woke (a GET or MAP waiting for the key, a SEAL
 * behind the seals) runs at once rather than a loop turn later: the hand-off's latency. */
static void poll_and_run(gkv_fences_t *fs)
{
    bool any = poll_all(fs);
    if (any)
        gkv_net_run_yielded(fs->net);
    keep_polling(fs, any);
}

static void on_spin(uv_idle_t *h)
{
    gkv_fences_t *fs = h->data;
    uv_update_time(fs->net->loop);
    poll_and_run(fs);
}

static void on_poll(uv_timer_t *t)
{
    poll_and_run(t->data);
}

static void on_tick(uv_poll_t *p, int status, int events)
{
    (void)status, (void)events;
    gkv_fences_t *fs = p->data;
    uint64_t expirations;
    if (read(fs->tick_fd, &expirations, sizeof(expirations)) < 0 && errno != EAGAIN)
        GKV_WARN("fences: reading the tick timer: %s", strerror(errno));
    uv_update_time(fs->net->loop);
    poll_and_run(fs);
}

/* The number in the environment variable name (dflt when it is unset or empty), at most max. */
static uint64_t env_setting(const char *name, uint64_t dflt, uint64_t max)
{
    const char *e = getenv(name);
    uint64_t v = e && *e ? strtoull(e, NULL, 10) : dflt;
    return v < max ? v : max;
}

int gkv_fences_init(gkv_net_t *net)
{
    gkv_fences_t *fs = calloc(1, sizeof(*fs));
    if (!fs)
        return GKV_ENOMEM;
    fs->net = net;
    uv_idle_init(net->loop, &fs->spin);
    uv_timer_init(net->loop, &fs->poll);
    fs->spin.data = fs->poll.data = fs;
    fs->spin_ms = env_setting("GPUKV_FENCE_SPIN_MS", FENCE_SPIN_MS, 60000);
    fs->tick_us = env_setting("GPUKV_FENCE_TICK_US", FENCE_TICK_US, 999999);
    fs->tick_fd = -1;
    if (fs->tick_us) {
        fs->tick_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        if (fs->tick_fd >= 0 && uv_poll_init(net->loop, &fs->tick, fs->tick_fd) != 0) {
            close(fs->tick_fd);
            fs->tick_fd = -1;
        }
        if (fs->tick_fd < 0)
            GKV_WARN("fences: no tick timer (%s): seals waiting past %d ms are looked at once "
                     "a millisecond", strerror(errno), (int)fs->spin_ms);
        else
            fs->tick.data = fs;
    }
    net->fences = fs;
    return 0;
}

void gkv_fences_close(gkv_net_t *net)
{
    gkv_fences_t *fs = net->fences;
    if (!fs)
        return;
    fs->closing = true;
    uv_close((uv_handle_t *)&fs->spin, NULL);
    uv_close((uv_handle_t *)&fs->poll, NULL);
    if (fs->tick_fd >= 0)
        uv_close((uv_handle_t *)&fs->tick, NULL);
}

void gkv_fences_free(gkv_net_t *net)
{
    if (net->fences && net->fences->tick_fd >= 0)
        close(net->fences->tick_fd);
    free(net->fences);
    net->fences = NULL;
}

int gkv_fence_open(gkv_conn_t *c, int *fd)
{
    if (c->fence)
        return GKV_EINVAL;
    struct gkv_fence *f = calloc(1, sizeof(*f));
    if (!f)
        return GKV_ENOMEM;
    int mfd = memfd_create("gpukv-fence", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    void *p = MAP_FAILED;
    if (mfd >= 0 && ftruncate(mfd, GKV_FENCE_PAGE) == 0 &&
        fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0)
        p = mmap(NULL, GKV_FENCE_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    if (p == MAP_FAILED) {
        GKV_WARN("conn %llu: no fence page: %s", (unsigned long long)c->id, strerror(errno));
        if (mfd >= 0)
            close(mfd);
        free(f);
        return GKV_ESYS;
    }
    f->c = c;
    f->slots = p;
    c->fence = f;
    *fd = mfd; /* the mapping keeps the page: the descriptor goes to the client */
    return 0;
}

int gkv_fence_seal(gkv_conn_t *c, const gkv_request_t *req, gkv_lease_t *l)
{
    gkv_fences_t *fs = c->net->fences;
    struct gkv_fence *f = c->fence;
    uint64_t slot = req->fence / sizeof(uint64_t);
    int rc = 0;
    const char *why = NULL;
    if (!f || !fs) {
        rc = GKV_ENOTSUP;
        why = "an asynchronous SEAL needs a fence page: a local zero-copy connection whose "
              "HELLO asked for fences";
    } else if (!(req->has & GKV_HAS_FENCE) || req->fence % sizeof(uint64_t) ||
               slot >= GKV_FENCE_SLOTS) {
        rc = GKV_EINVAL;
        why = "an asynchronous SEAL names a counter of its fence page (fence: 0, 8, .. 504)";
    } else if (req->target <= f->gen[slot]) {
        rc = GKV_EINVAL;
        why = "the target is not above the counter's last target";
    } else if (f->n == GKV_FENCE_SLOTS) {
        rc = GKV_EBUSY;
        why = "64 asynchronous seals of this connection wait already";
    }
    if (rc) {
        gkv_reply_error(&c->out, req->id, rc, why);
        return rc;
    }
    f->gen[slot] = req->target;
    gkv_entry_t *e = l->entry;
    gkv_store_ref(e);
    /* The lease reads the value from now on; the client's import of it stays covered. */
    gkv_lease_to_read(&c->leases, c->net->store, l, e);
    uint32_t i = (f->head + f->n) % GKV_FENCE_SLOTS;
    f->q[i] = (waiting_t){.entry = e,
                          .lease = l->id,
                          .target = req->target,
                          .since_ns = uv_hrtime(),
                          .slot = (uint32_t)slot};
    f->n++;
    fs->waiting++;
    gkv_reply_ok(&c->out, req->id);
    (void)gkv_wr_end(&c->out);
    /* Work done by the time the SEAL came (or host memory, written first) publishes now. */
    poll_one(fs, f);
    if (f->n) { /* this seal waits (the ring's newest; seals publish in order) */
        list_add(fs, f);
        if (gkv_keywaits_sealing(c->net, e))
            f->q[i].linked = true;
    }
    keep_polling(fs, true);
    return 0;
}

gkv_entry_t *gkv_fence_pending(gkv_net_t *net, const uint8_t *key, size_t klen, bool **linked)
{
    gkv_fences_t *fs = net->fences;
    for (struct gkv_fence *f = fs ? fs->head : NULL; f; f = f->next) {
        for (uint32_t k = f->n; k-- > 0;) { /* newest first */
            waiting_t *w = &f->q[(f->head + k) % GKV_FENCE_SLOTS];
            size_t wlen;
            const uint8_t *wkey = gkv_store_key(net->store, w->entry, &wlen);
            if (wlen == klen && memcmp(wkey, key, klen) == 0) {
                *linked = &w->linked;
                return w->entry;
            }
        }
    }
    return NULL;
}

bool gkv_fence_waiting(const gkv_conn_t *c)
{
    return c->fence && c->fence->n;
}

void gkv_fence_cancel(gkv_conn_t *c)
{
    struct gkv_fence *f = c->fence;
    if (!f)
        return;
    gkv_fences_t *fs = c->net->fences;
    while (f->n) {
        waiting_t w = pop(f);
        gkv_store_unref(c->net->store, w.entry); /* never published */
        if (fs) {
            fs->waiting--;
            fs->discarded++;
        }
    }
    if (fs) {
        list_remove(fs, f);
        keep_polling(fs, false);
    }
    munmap((void *)f->slots, GKV_FENCE_PAGE);
    free(f);
    c->fence = NULL;
}

void gkv_fences_stats(const gkv_net_t *net, uint64_t *waiting, uint64_t *published,
                      uint64_t *discarded, uint64_t *wait_us, uint64_t *max_us)
{
    const gkv_fences_t *fs = net->fences;
    *waiting = fs ? fs->waiting : 0;
    *published = fs ? fs->published : 0;
    *discarded = fs ? fs->discarded : 0;
    *wait_us = fs ? fs->wait_us : 0;
    *max_us = fs ? fs->max_us : 0;
}
