/* work.c: the cluster's worker threads (work.h). */
#include "work.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "error.h"

static uint64_t now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

/* With the lock held and nothing queued: unless another worker watches, watches the queue for
 * w->spin_us without the lock (a job, or the stop, ends it early). The lock is held again on
 * return. A GPU machine's thread wakes 50-150 us after it is signalled (RESULTS.md, session
 * 39); a 1 GiB remote read crosses about a dozen such hand-offs (session 44). */
static bool watch(gkv_workers_t *w)
{
    uint64_t spin = atomic_load_explicit(&w->spin_us, memory_order_relaxed);
    if (!spin || w->spinning)
        return false;
    w->spinning = true;
    pthread_mutex_unlock(&w->lock);
    uint64_t until = now_us() + spin;
    while (!atomic_load_explicit(&w->ready, memory_order_acquire) && now_us() < until)
        ;
    pthread_mutex_lock(&w->lock);
    w->spinning = false;
    return w->head != NULL;
}

static void *worker_main(void *arg)
{
    gkv_workers_t *w = arg;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        bool watched = !w->head && !w->stop && watch(w);
        while (!w->head && !w->stop)
            pthread_cond_wait(&w->more, &w->lock);
        gkv_job_t *j = w->head;
        if (!j)
            break; /* stopping and nothing left */
        w->head = j->next;
        if (!w->head)
            w->tail = NULL;
        if (!w->stop)
            atomic_fetch_sub_explicit(&w->ready, 1, memory_order_relaxed);
        w->watched += watched;
        if (watched && w->head) /* submitted while we watched: nobody was woken for them */
            pthread_cond_signal(&w->more);
        pthread_mutex_unlock(&w->lock);
        j->run(j);
        pthread_mutex_lock(&w->lock);
        j->next = w->finished;
        w->finished = j;
        uv_async_send(&w->async);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

/* The finished jobs, oldest first. */
static void drain(gkv_workers_t *w)
{
    pthread_mutex_lock(&w->lock);
    gkv_job_t *list = w->finished, *rev = NULL;
    w->finished = NULL;
    pthread_mutex_unlock(&w->lock);
    while (list) {
        gkv_job_t *next = list->next;
        list->next = rev;
        rev = list;
        list = next;
    }
    while (rev) {
        gkv_job_t *next = rev->next;
        rev->done(rev);
        rev = next;
    }
}

static void on_async(uv_async_t *a)
{
    drain(a->data);
}

int gkv_workers_start(gkv_workers_t *w, uv_loop_t *loop, unsigned n)
{
    atomic_init(&w->spin_us, 0);
    atomic_init(&w->ready, 0);
    w->threads = calloc(n, sizeof(*w->threads));
    if (!w->threads)
        return GKV_ENOMEM;
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->more, NULL);
    uv_async_init(loop, &w->async, on_async);
    w->async.data = w;
    w->open = true;
    for (w->n = 0; w->n < n; w->n++)
        if (pthread_create(&w->threads[w->n], NULL, worker_main, w))
            break;
    return w->n ? 0 : GKV_ENOMEM;
}

void gkv_workers_set_spin(gkv_workers_t *w, uint64_t spin_us)
{
    atomic_store_explicit(&w->spin_us, spin_us, memory_order_relaxed);
}

uint64_t gkv_workers_watched(gkv_workers_t *w)
{
    pthread_mutex_lock(&w->lock);
    uint64_t n = w->watched;
    pthread_mutex_unlock(&w->lock);
    return n;
}

void gkv_workers_submit(gkv_workers_t *w, gkv_job_t *j)
{
    j->next = NULL;
    pthread_mutex_lock(&w->lock);
    if (w->tail)
        w->tail->next = j;
    else
        w->head = j;
    w->tail = j;
    w->jobs++;
    if (!w->stop)
        atomic_fetch_add_explicit(&w->ready, 1, memory_order_release);
    /* A watching worker sees ready and takes it; a sleeper woken now could take it first (a
     * wake-up after all, and on a busy machine often the winner: the check of --busy-poll saw
     * none of 18 jobs taken by the watcher, twice). */
    if (!w->spinning)
        pthread_cond_signal(&w->more);
    pthread_mutex_unlock(&w->lock);
}

void gkv_workers_post(gkv_workers_t *w, gkv_job_t *m)
{
    pthread_mutex_lock(&w->lock);
    m->next = w->finished;
    w->finished = m;
    uv_async_send(&w->async);
    pthread_mutex_unlock(&w->lock);
}

void gkv_workers_stop(gkv_workers_t *w)
{
    if (!w->open)
        return;
    pthread_mutex_lock(&w->lock);
    w->stop = true;
    atomic_store_explicit(&w->ready, 1, memory_order_release); /* a watcher stops watching */
    pthread_cond_broadcast(&w->more);
    pthread_mutex_unlock(&w->lock);
    for (unsigned i = 0; i < w->n; i++)
        pthread_join(w->threads[i], NULL);
    drain(w);
    free(w->threads);
    w->threads = NULL;
    w->open = false;
    uv_close((uv_handle_t *)&w->async, NULL);
    pthread_cond_destroy(&w->more);
    pthread_mutex_destroy(&w->lock);
}
