/* demoter.c: moves down off the request path; see demoter.h. */
#include "demoter.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "duration.h"
#include "error.h"
#include "log.h"

typedef struct {
    gkv_copy_t op;
    struct gkv_demoter *owner;
    gkv_entry_t *e, *n; /* NULL: the slot is free */
    unsigned dev;       /* the device's end of the move */
    bool up;            /* a move up (MAP: host tier to dev), else down (dev to host tier) */
    uint64_t size, t0;
    uint64_t end; /* when its end was reported (set before state) */
    atomic_int state; /* 0 copying, 1 done, 2 failed */
} job_t;

/* The move from the host tier to the disk in flight: its write runs on the demoter's thread. */
typedef struct {
    gkv_entry_t *e, *n; /* NULL: none */
    gkv_disk_write_t *w; /* a move down, or */
    gkv_disk_read_t *r;  /* a fetch up (a GET of a disk value) */
    uint64_t t0;
    int rc;
    atomic_int state; /* 0 running, 1 done (rc) */
} disk_job_t;

struct gkv_demoter {
    uv_check_t check;
    uv_async_t wake; /* a copy reported from another thread */
    gkv_store_t *st;
    gkv_devices_t *devs;
    unsigned headroom_pct;
    job_t jobs[GKV_DEMOTE_FLIGHT];
    uv_loop_t *loop;
    uint64_t rest_until[GKV_MAX_DEVICES]; /* a device with nothing to move: looked at again then */
    uint64_t lane_end[GKV_MAX_DEVICES];   /* when the last copy on a device's lane ended */
    unsigned busy;
    uint64_t coming[GKV_MAX_DEVICES]; /* bytes in flight down from each device */
    gkv_waitq_t waiters;              /* writes waiting for moves (gkv_demoter_room) */
    uint64_t done, waits;
    int closed; /* handles closing */
    disk_job_t disk;
    bool thread_on, go, stop; /* the disk thread: started, a write to run, asked to end */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

/* The disk thread: runs the write it is given, then wakes the loop. */
static void *disk_thread(void *arg)
{
    gkv_demoter_t *d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (!d->go && !d->stop)
            pthread_cond_wait(&d->cv, &d->mu);
        if (!d->go)
            break;
        d->go = false;
        pthread_mutex_unlock(&d->mu);
        d->disk.rc = d->disk.r ? gkv_backend_disk_read_run(d->disk.r)
                               : gkv_backend_disk_write_run(d->disk.w);
        atomic_store(&d->disk.state, 1);
        uv_async_send(&d->wake);
        pthread_mutex_lock(&d->mu);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

/* Starts the disk thread if it is not running yet: false when it cannot. */
static bool disk_thread_on(gkv_demoter_t *d)
{
    if (!d->thread_on) {
        pthread_mutex_init(&d->mu, NULL);
        pthread_cond_init(&d->cv, NULL);
        if (pthread_create(&d->thread, NULL, disk_thread, d)) {
            pthread_cond_destroy(&d->cv);
            pthread_mutex_destroy(&d->mu);
            return false;
        }
        d->thread_on = true;
    }
    return true;
}

/* Hands the job just filled in to the thread. */
static void disk_go(gkv_demoter_t *d)
{
    d->disk.t0 = gkv_clock_us();
    atomic_store(&d->disk.state, 0);
    pthread_mutex_lock(&d->mu);
    d->go = true;
    pthread_cond_signal(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

/* Starts a move of the host tier's coldest value to the disk, its write on the thread (with
 * may_evict, what the disk must evict for it goes; without, only into free room): false when
 * a disk job is in flight already or none could start. */
static bool start_disk(gkv_demoter_t *d, bool may_evict)
{
    disk_job_t *j = &d->disk;
    if (j->e || d->closed || !disk_thread_on(d) ||
        !gkv_store_disk_move_begin(d->st, may_evict, &j->e, &j->n, &j->w))
        return false;
    disk_go(d);
    return true;
}

/* Starts bringing e up from the disk to the host tier, its read on the thread. */
static bool start_fetch(gkv_demoter_t *d, gkv_entry_t *e)
{
    disk_job_t *j = &d->disk;
    if (j->e || d->closed || !disk_thread_on(d) ||
        !gkv_store_disk_fetch_begin(d->st, e, &j->n, &j->r))
        return false;
    j->e = e;
    disk_go(d);
    return true;
}

static void copied(gkv_copy_t *op, int status)
{
    job_t *j = op->arg;
    j->end = gkv_clock_us();
    atomic_store(&j->state, status ? 2 : 1);
    gkv_demoter_t *d = j->owner;
    /* The check runs on the loop's next iteration. Also when the loop's own poll delivered
     * this: else the loop may go on to wait for I/O before its check phase, and a write that
     * waits for this move would wait for the next I/O or timer. */
    uv_async_send(&d->wake);
}

/* Calls the writes that waited when reap began (one that waits again joins the next round). */
static void wake(gkv_demoter_t *d)
{
    size_t n = 0;
    for (const gkv_waiter_t *w = d->waiters.head; w; w = w->next)
        n++;
    for (gkv_waiter_t *w; n-- && (w = gkv_waitq_pop(&d->waiters));)
        w->ready(w);
}

/* How long j's copy took: as the device timed it; else (the host backend) from when it was
 * queued, or when the copy before it on the lane ended, to when its end was reported (done
 * jobs taken in the order they ended). */
static uint64_t copy_time(gkv_demoter_t *d, const job_t *j)
{
    uint64_t from = j->t0 > d->lane_end[j->dev] ? j->t0 : d->lane_end[j->dev];
    d->lane_end[j->dev] = j->end;
    if (j->op.run_us)
        return j->op.run_us;
    return j->end > from ? j->end - from : 0;
}

/* Ends the jobs whose copy has reported, then wakes the writes that wait. */
static void reap(gkv_demoter_t *d)
{
    bool ended = false;
    job_t *done[GKV_DEMOTE_FLIGHT];
    unsigned n = 0;
    for (unsigned i = 0; i < GKV_DEMOTE_FLIGHT && d->busy; i++) {
        job_t *j = &d->jobs[i];
        if (j->e && atomic_load(&j->state) != 0) {
            unsigned k = n++; /* in the order their ends were reported */
            for (; k && done[k - 1]->end > j->end; k--)
                done[k] = done[k - 1];
            done[k] = j;
        }
    }
    for (unsigned i = 0; i < n; i++) {
        job_t *j = done[i];
        int state = atomic_load(&j->state);
        bool took = gkv_store_demote_end(d->st, j->e, j->n, state == 1, copy_time(d, j));
        if (!j->up) {
            d->done += took;
            d->coming[j->dev] -= j->size;
        }
        j->e = j->n = NULL;
        d->busy--;
        ended = true;
    }
    disk_job_t *k = &d->disk;
    if (k->e && atomic_load(&k->state) == 1) {
        /* A demoter that stops keeps the value where it was (as its copies above). */
        uint64_t us = gkv_clock_us() - k->t0;
        if (k->r) { /* a fetch that ran is kept even when the demoter stops */
            (void)gkv_store_disk_fetch_end(d->st, k->e, k->n, k->r, k->rc, us);
        } else {
            int rc = d->closed && !k->rc ? -1 : k->rc;
            d->done += gkv_store_disk_move_end(d->st, k->e, k->n, k->w, rc, us);
        }
        k->e = k->n = NULL;
        k->w = NULL;
        k->r = NULL;
        ended = true;
    }
    if (ended)
        wake(d);
}

/* How long a device where no move could start is left alone: the pick samples keys and the
 * tier may walk its own to make room, too dear for every loop iteration. */
#define REST_MS 10

static bool above(const gkv_demoter_t *d, unsigned dev)
{
    const gkv_store_dev_t *s = &d->st->dev[dev];
    return d->headroom_pct && s->used > s->limit - s->limit / 100 * d->headroom_pct;
}

static job_t *free_job(gkv_demoter_t *d)
{
    for (unsigned i = 0; i < GKV_DEMOTE_FLIGHT; i++)
        if (!d->jobs[i].e)
            return &d->jobs[i];
    return NULL;
}

/* The copy of job j (filled in) on its device's last lane: connections take theirs by id from
 * the first. A copy that cannot start is reaped as failed. */
static void start_copy(gkv_demoter_t *d, job_t *j)
{
    gkv_backend_t *tier = gkv_store_be(d->st, j->up ? j->e : j->n);
    gkv_device_t *dv = &d->devs->dev[j->dev];
    j->size = j->e->size;
    j->t0 = gkv_clock_us();
    atomic_store(&j->state, 0);
    d->busy++;
    int lane = dv->be->lanes - 1;
    int rc = j->up ? dv->be->ops->copy_in(dv->be, j->n->mem, 0,
                                          tier->ops->host_view(tier, j->e->mem),
                                          (size_t)j->size, lane, &j->op)
                   : dv->be->ops->copy_out(dv->be, tier->ops->host_view(tier, j->n->mem),
                                           j->e->mem, 0, (size_t)j->size, lane, &j->op);
    if (rc) {
        j->end = j->t0;
        atomic_store(&j->state, 2); /* done is not called: reaped as failed */
        uv_async_send(&d->wake);
    } else
        gkv_poller_arm(&dv->poller);
}

/* Starts one move down from dev into a free slot: false when there is none to start. */
static bool start_one(gkv_demoter_t *d, unsigned dev)
{
    job_t *j = free_job(d);
    gkv_entry_t *e, *n;
    bool tier_full = false;
    if (!j || !gkv_store_demote_begin(d->st, dev, &e, &n, &tier_full))
        return tier_full && start_disk(d, true); /* room in the tier first */
    j->e = e;
    j->n = n;
    j->dev = dev;
    j->up = false;
    d->coming[dev] += e->size;
    start_copy(d, j);
    return true;
}

static void on_check(uv_check_t *h)
{
    gkv_demoter_t *d = h->data;
    reap(d);
    uint64_t now = uv_now(d->loop);
    for (unsigned dev = 0; dev < d->devs->n; dev++) {
        if (now < d->rest_until[dev])
            continue;
        while (d->busy < GKV_DEMOTE_FLIGHT && above(d, dev)) {
            if (!start_one(d, dev)) { /* everything held, or the tier full under noeviction */
                d->rest_until[dev] = now + REST_MS;
                break;
            }
        }
    }
    reap(d); /* a copy that was done at once (the host backend) */
}

static void on_wake(uv_async_t *h)
{
    (void)h; /* the check handle runs after this iteration's callbacks */
}

gkv_demoter_t *gkv_demoter_start(uv_loop_t *loop, gkv_store_t *st, gkv_devices_t *devs,
                                 unsigned headroom_pct)
{
    if (!st->host_tier)
        return NULL;
    gkv_demoter_t *d = calloc(1, sizeof(*d));
    if (!d) {
        GKV_WARN("host tier: out of memory for the demoter: values move down on writes only");
        return NULL;
    }
    d->st = st;
    d->devs = devs;
    d->loop = loop;
    d->headroom_pct = headroom_pct > 90 ? 90 : headroom_pct;
    for (unsigned i = 0; i < GKV_DEMOTE_FLIGHT; i++) {
        d->jobs[i].op.done = copied;
        d->jobs[i].op.timed = true; /* INFO counts the copy's own time, where the device tells */
        d->jobs[i].op.arg = &d->jobs[i];
        d->jobs[i].owner = d;
    }
    uv_check_init(loop, &d->check);
    d->check.data = d;
    uv_check_start(&d->check, on_check);
    uv_unref((uv_handle_t *)&d->check);
    uv_async_init(loop, &d->wake, on_wake);
    uv_unref((uv_handle_t *)&d->wake);
    return d;
}

void gkv_demoter_close(gkv_demoter_t *d)
{
    if (!d || d->closed)
        return;
    for (unsigned dev = 0; dev < d->devs->n; dev++) /* the copies in flight run out */
        while (gkv_backend_poll(d->devs->dev[dev].be))
            ;
    for (unsigned i = 0; i < GKV_DEMOTE_FLIGHT; i++)
        if (d->jobs[i].e && atomic_load(&d->jobs[i].state) == 0) {
            d->jobs[i].end = gkv_clock_us();
            atomic_store(&d->jobs[i].state, 2); /* kept where they were */
        }
    d->closed = 1; /* the writes woken now make their own room */
    while (d->disk.e && atomic_load(&d->disk.state) == 0) /* its write runs out */
        usleep(200);
    reap(d);
    wake(d);
    if (d->thread_on) {
        pthread_mutex_lock(&d->mu);
        d->stop = true;
        pthread_cond_signal(&d->cv);
        pthread_mutex_unlock(&d->mu);
        pthread_join(d->thread, NULL);
        pthread_cond_destroy(&d->cv);
        pthread_mutex_destroy(&d->mu);
        d->thread_on = false;
    }
    uv_close((uv_handle_t *)&d->check, NULL);
    uv_close((uv_handle_t *)&d->wake, NULL);
}

void gkv_demoter_free(gkv_demoter_t *d)
{
    free(d);
}

uint64_t gkv_demoter_done(const gkv_demoter_t *d)
{
    return d ? d->done : 0;
}

bool gkv_demoter_room(gkv_demoter_t *d, unsigned dev, uint64_t need, gkv_waiter_t *w)
{
    if (!d || d->closed || dev >= d->devs->n)
        return false;
    const gkv_store_dev_t *s = &d->st->dev[dev];
    if (need > s->limit)
        return false;
    /* Enough in flight when the device's used bytes, less those coming off it, leave room. */
    while (d->busy < GKV_DEMOTE_FLIGHT &&
           s->used - (d->coming[dev] < s->used ? d->coming[dev] : s->used) > s->limit - need &&
           start_one(d, dev))
        ;
    if (!d->coming[dev] && !d->disk.e)
        return false;
    d->waits++;
    gkv_waitq_push(&d->waiters, w);
    return true;
}

void gkv_demoter_cancel(gkv_demoter_t *d, gkv_waiter_t *w)
{
    if (d)
        gkv_waitq_remove(&d->waiters, w);
}

uint64_t gkv_demoter_waits(const gkv_demoter_t *d)
{
    return d ? d->waits : 0;
}

bool gkv_demoter_promote(gkv_demoter_t *d, gkv_entry_t *e, unsigned dev, gkv_waiter_t *w)
{
    if (!d || d->closed || dev >= d->devs->n || !gkv_store_in_tier(e))
        return false;
    if (e->dev == GKV_DEV_DISK_TIER) /* up to the host tier first */
        return gkv_demoter_fetch(d, e, w);
    bool moving = false; /* another request's move of e: wait for that one */
    for (unsigned i = 0; i < GKV_DEMOTE_FLIGHT; i++)
        moving |= d->jobs[i].e == e && d->jobs[i].up;
    if (!moving) {
        const gkv_store_dev_t *s = &d->st->dev[dev];
        if (e->size > s->limit)
            return false;
        if (!gkv_store_dev_fits(s, e->size)) {
            /* Room first, made by moves down; but where they would make the host tier evict
             * (no disk below it), the request swaps on the loop instead (what comes down takes
             * the room e leaves). */
            const gkv_store_dev_t *h = &d->st->dev[GKV_DEV_HOST_TIER];
            if (!d->st->disk_tier && !gkv_store_dev_fits(h, e->size))
                return false;
            return gkv_demoter_room(d, dev, e->size, w);
        }
        job_t *j = free_job(d);
        gkv_entry_t *n;
        gkv_device_t *dv = &d->devs->dev[dev];
        if (!j) {
            if (!d->busy)
                return false;
        } else if (!gkv_store_promote_begin(d->st, e, dev, dv->be->lanes - 1, &n)) {
            return false;
        } else {
            j->e = e;
            j->n = n;
            j->dev = dev;
            j->up = true;
            start_copy(d, j);
        }
    }
    d->waits++;
    gkv_waitq_push(&d->waiters, w);
    return true;
}

bool gkv_demoter_fetch(gkv_demoter_t *d, gkv_entry_t *e, gkv_waiter_t *w)
{
    if (!d || d->closed || e->dev != GKV_DEV_DISK_TIER)
        return false;
    if (!d->disk.e) { /* else the one in flight first */
        const gkv_store_dev_t *h = &d->st->dev[GKV_DEV_HOST_TIER];
        /* A full disk is left to the GET itself, which swaps rather than evicts. */
        if (!(gkv_store_dev_fits(h, e->size) ? start_fetch(d, e) : start_disk(d, false)))
            return false;
    }
    d->waits++;
    gkv_waitq_push(&d->waiters, w);
    return true;
}
