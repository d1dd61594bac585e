/* order.c: the index's radix tree kept by a helper thread (order.h). The ring is single
 * producer (the loop), single consumer (the helper): the loop writes slots and then publishes
 * head, the helper reads head, applies the slots and then writes tail. An operation is a leaf
 * pointer (malloc'd, so its low 3 bits are 0) with its kind in the low bits. */
#include "order.h"

#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <uv.h>

#include "log.h"

enum { OP_INSERT = 1, OP_REPLACE = 2, OP_REMOVE = 3, OP_MASK = 3 };

#define PUBLISH_AT 64  /* operations queued but not published that publish them at once */
#define SPIN_NS 100000 /* how long the helper watches an empty ring before it sleeps */

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void apply(gkv_radix_t *t, uintptr_t op)
{
    void *leaf = (void *)(op & ~(uintptr_t)OP_MASK);
    size_t len;
    const uint8_t *key;
    switch (op & OP_MASK) {
    case OP_INSERT:
        for (int tries = 0; gkv_radix_insert(t, leaf); tries++) {
            if (tries == 0)
                GKV_ERROR("key order: out of memory; retrying every millisecond");
            nanosleep(&(struct timespec){0, 1000000}, NULL);
        }
        break;
    case OP_REPLACE:
        gkv_radix_replace(t, leaf);
        break;
    case OP_REMOVE:
        key = t->key_of(leaf, &len);
        gkv_radix_remove(t, key, len);
        break;
    }
}

static void *helper_main(void *arg)
{
    gkv_order_t *o = arg;
    uint64_t tail = atomic_load_explicit(&o->tail, memory_order_relaxed);
    for (;;) {
        uint64_t head = atomic_load_explicit(&o->head, memory_order_acquire);
        uint64_t until = 0;
        for (unsigned spin = 0; head == tail; spin++) {
            if ((spin & 63) == 0) {
                uint64_t now = uv_hrtime();
                if (!until)
                    until = now + SPIN_NS;
                else if (now >= until)
                    break;
                if (atomic_load_explicit(&o->stop, memory_order_acquire))
                    return NULL;
            }
            cpu_relax();
            head = atomic_load_explicit(&o->head, memory_order_acquire);
        }
        if (head == tail) {
            /* Sleep: sleeping is set before head is looked at again, and the loop looks at
             * sleeping after it writes head (both sequentially consistent), so one of the two
             * sees the other. */
            pthread_mutex_lock(&o->mu);
            atomic_store(&o->sleeping, 1);
            while (atomic_load(&o->head) == tail && !atomic_load(&o->stop))
                pthread_cond_wait(&o->wake, &o->mu);
            atomic_store(&o->sleeping, 0);
            pthread_mutex_unlock(&o->mu);
            if (atomic_load(&o->head) == tail && atomic_load(&o->stop))
                return NULL;
            continue;
        }
        for (; tail != head; tail++) {
            uintptr_t op = o->ring[tail & (GKV_ORDER_RING - 1)];
            if (head - tail > 8) /* the leaf a few operations on, fetched meanwhile */
                __builtin_prefetch(
                    (void *)(o->ring[(tail + 8) & (GKV_ORDER_RING - 1)] & ~(uintptr_t)OP_MASK));
            apply(&o->tree, op);
            if ((tail & 63) == 63) /* let the loop see progress within long batches */
                atomic_store_explicit(&o->tail, tail + 1, memory_order_release);
        }
        atomic_store_explicit(&o->tail, tail, memory_order_release);
    }
}

void gkv_order_init(gkv_order_t *o, gkv_radix_key_fn key_of)
{
    gkv_radix_init(&o->tree, key_of);
    atomic_init(&o->head, 0);
    atomic_init(&o->tail, 0);
    atomic_init(&o->sleeping, 0);
    atomic_init(&o->stop, 0);
    o->dead = NULL;
    o->dead_first = o->dead_n = o->dead_cap = 0;
    o->helper = false;
    o->queued = o->tail_seen = 0;
}

int gkv_order_start(gkv_order_t *o)
{
    if (o->helper)
        return 0;
    int rc = pthread_mutex_init(&o->mu, NULL);
    if (rc)
        return rc;
    if ((rc = pthread_cond_init(&o->wake, NULL))) {
        pthread_mutex_destroy(&o->mu);
        return rc;
    }
    /* Signals are the loop's: the helper starts with all of them blocked. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&o->thread, NULL, helper_main, o);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        pthread_cond_destroy(&o->wake);
        pthread_mutex_destroy(&o->mu);
        return rc;
    }
    o->helper = true;
    return 0;
}

/* The helper's progress, read again. */
static uint64_t see_tail(gkv_order_t *o)
{
    return o->tail_seen = atomic_load_explicit(&o->tail, memory_order_acquire);
}

/* Frees the held blocks whose operations are all applied. */
static void reap(gkv_order_t *o)
{
    uint64_t tail = see_tail(o);
    while (o->dead_n && o->dead[o->dead_first].seq <= tail) {
        free(o->dead[o->dead_first].block);
        o->dead_first = (o->dead_first + 1) % o->dead_cap;
        o->dead_n--;
    }
}

/* Makes every queued operation visible to the helper and wakes it if it sleeps. head is
 * written before sleeping is read, and the helper writes sleeping before it reads head (all
 * sequentially consistent): one of the two sees the other, so no wake-up is lost. */
static void publish(gkv_order_t *o)
{
    if (atomic_load_explicit(&o->head, memory_order_relaxed) != o->queued)
        atomic_store(&o->head, o->queued);
    if (atomic_load(&o->sleeping) && see_tail(o) != o->queued) {
        pthread_mutex_lock(&o->mu);
        pthread_cond_signal(&o->wake);
        pthread_mutex_unlock(&o->mu);
    }
}

gkv_radix_t *gkv_order_read(gkv_order_t *o)
{
    if (o->helper) {
        if (o->tail_seen != o->queued && see_tail(o) != o->queued) {
            publish(o);
            while (see_tail(o) != o->queued)
                cpu_relax();
        }
        if (o->dead_n)
            reap(o);
    }
    return &o->tree;
}

static void queue(gkv_order_t *o, void *leaf, int kind)
{
    uintptr_t op = (uintptr_t)leaf | (uintptr_t)kind;
    if (!o->helper) {
        apply(&o->tree, op);
        return;
    }
    if (o->queued - o->tail_seen == GKV_ORDER_RING && o->queued - see_tail(o) == GKV_ORDER_RING) {
        publish(o); /* full: wait for a slot (the helper is at work) */
        while (o->queued - see_tail(o) == GKV_ORDER_RING)
            cpu_relax();
    }
    o->ring[o->queued & (GKV_ORDER_RING - 1)] = op;
    o->queued++;
    if (o->queued - atomic_load_explicit(&o->head, memory_order_relaxed) >= PUBLISH_AT)
        publish(o);
}

void gkv_order_insert(gkv_order_t *o, void *leaf)
{
    queue(o, leaf, OP_INSERT);
}

void gkv_order_replace(gkv_order_t *o, void *leaf)
{
    queue(o, leaf, OP_REPLACE);
}

void gkv_order_remove(gkv_order_t *o, void *leaf)
{
    queue(o, leaf, OP_REMOVE);
}

void gkv_order_kick(gkv_order_t *o)
{
    if (!o->helper)
        return;
    publish(o);
    if (o->dead_n)
        reap(o);
}

void gkv_order_free(gkv_order_t *o, void *block)
{
    if (!o->helper || o->tail_seen == o->queued) {
        free(block);
        return;
    }
    if (o->dead_n == o->dead_cap) {
        uint32_t cap = o->dead_cap ? o->dead_cap * 2 : 256;
        gkv_order_dead_t *d = malloc(cap * sizeof(*d));
        if (!d) { /* no room to wait: wait here */
            gkv_order_read(o);
            free(block);
            return;
        }
        for (uint32_t i = 0; i < o->dead_n; i++)
            d[i] = o->dead[(o->dead_first + i) % o->dead_cap];
        free(o->dead);
        o->dead = d;
        o->dead_first = 0;
        o->dead_cap = cap;
    }
    o->dead[(o->dead_first + o->dead_n) % o->dead_cap] = (gkv_order_dead_t){o->queued, block};
    o->dead_n++;
    if (o->dead_n % 64 == 0) /* give back what the helper is past */
        reap(o);
}

void gkv_order_fini(gkv_order_t *o)
{
    gkv_order_read(o);
    if (o->helper) {
        pthread_mutex_lock(&o->mu);
        atomic_store(&o->stop, 1);
        pthread_cond_signal(&o->wake);
        pthread_mutex_unlock(&o->mu);
        pthread_join(o->thread, NULL);
        pthread_cond_destroy(&o->wake);
        pthread_mutex_destroy(&o->mu);
        o->helper = false;
    }
    reap(o);
    free(o->dead);
    o->dead = NULL;
    o->dead_n = o->dead_cap = 0;
}
