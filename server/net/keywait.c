/* keywait.c: requests waiting for a key to exist; see keywait.h. */
#include "keywait.h"

#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "conn_impl.h"
#include "error.h"

/* The connections waiting for one key, oldest first (through c->kw_next). */
typedef struct kw_bucket {
    UT_hash_handle hh;
    uint8_t *key;
    size_t klen;
    gkv_conn_t *head, *tail;
} kw_bucket_t;

struct gkv_keywaits {
    gkv_net_t *net;
    kw_bucket_t *keys;
    uv_timer_t timer; /* the earliest deadline of those waiting */
    uint64_t waiting, woken, timed_out, rechecks;
};

/* The waiters of key (klen bytes), or NULL. */
static kw_bucket_t *find_bucket(const gkv_keywaits_t *w, const uint8_t *key, size_t klen)
{
    kw_bucket_t *b = NULL;
    HASH_FIND(hh, w->keys, key, klen, b);
    return b;
}

static void drop_bucket(gkv_keywaits_t *w, kw_bucket_t *b)
{
    HASH_DEL(w->keys, b);
    free(b->key);
    free(b);
}

/* c leaves its bucket (freed once empty); it stops waiting. */
static void unlink_conn(gkv_keywaits_t *w, gkv_conn_t *c)
{
    kw_bucket_t *b = c->kw_bucket;
    gkv_conn_t *prev = NULL;
    for (gkv_conn_t *x = b->head; x && x != c; x = x->kw_next)
        prev = x;
    if (prev)
        prev->kw_next = c->kw_next;
    else
        b->head = c->kw_next;
    if (b->tail == c)
        b->tail = prev;
    c->kw_next = NULL;
    c->kw_bucket = NULL;
    c->wait.key = false;
    w->waiting--;
    w->net->store->listeners--;
    if (!b->head)
        drop_bucket(w, b);
}

static void on_deadline(uv_timer_t *t);

/* The timer set to fire at when (uv_now milliseconds; at once when that has passed). */
static void fire_at(gkv_keywaits_t *w, uint64_t when)
{
    uint64_t now = uv_now(w->net->loop);
    uv_timer_start(&w->timer, on_deadline, when > now ? when - now : 0, 0);
}

/* When c's wait next needs the timer: its deadline, or its re-check when earlier. */
static uint64_t due(const gkv_conn_t *c)
{
    return c->kw_recheck && c->kw_recheck < c->kw_deadline ? c->kw_recheck : c->kw_deadline;
}

/* The timer set to the earliest deadline among the waiting (stopped when none waits). */
static void rearm(gkv_keywaits_t *w)
{
    uint64_t first = UINT64_MAX;
    for (kw_bucket_t *b = w->keys; b; b = b->hh.next)
        for (gkv_conn_t *c = b->head; c; c = c->kw_next)
            if (due(c) < first)
                first = due(c);
    if (first == UINT64_MAX)
        uv_timer_stop(&w->timer);
    else
        fire_at(w, first);
}

static void on_deadline(uv_timer_t *t)
{
    gkv_keywaits_t *w = t->data;
    uint64_t now = uv_now(w->net->loop);
    kw_bucket_t *b, *tmp;
    HASH_ITER(hh, w->keys, b, tmp)
    {
        gkv_conn_t *c = b->head;
        while (c) {
            gkv_conn_t *next = c->kw_next;
            if (due(c) <= now) {
                unlink_conn(w, c); /* may free b: next is read first, b not used after */
                if (c->kw_deadline <= now) {
                    c->kw_timed_out = true;
                    w->timed_out++;
                } else {
                    w->rechecks++; /* runs again: asks the key's home once more */
                }
                if (!c->closing)
                    gkv_net_yield(w->net, c);
            }
            c = next;
        }
    }
    rearm(w);
}

/* Every connection of b runs again, in the order they began waiting (counted in *count); b is
 * freed with the last. */
static void wake_bucket(gkv_keywaits_t *w, kw_bucket_t *b, uint64_t *count)
{
    for (bool last = false; !last;) {
        gkv_conn_t *c = b->head;
        last = c == b->tail;
        unlink_conn(w, c); /* frees b with the last */
        (*count)++;
        if (!c->closing)
            gkv_net_yield(w->net, c);
    }
}

void gkv_keywaits_published(gkv_net_t *net, const uint8_t *key, size_t klen)
{
    gkv_keywaits_t *w = net->keywaits;
    kw_bucket_t *b = w ? find_bucket(w, key, klen) : NULL;
    if (!b)
        return;
    wake_bucket(w, b, &w->woken);
    rearm(w);
}

unsigned gkv_keywaits_sealing(gkv_net_t *net, gkv_entry_t *e)
{
    gkv_keywaits_t *w = net->keywaits;
    if (!w)
        return 0;
    size_t klen;
    const uint8_t *key = gkv_store_key(net->store, e, &klen);
    kw_bucket_t *b = find_bucket(w, key, klen);
    unsigned n = 0;
    for (gkv_conn_t *c = b ? b->head : NULL; c; c = c->kw_next)
        n += gkv_conn_early(c, e);
    return n;
}

void gkv_keywaits_wake_all(gkv_net_t *net)
{
    gkv_keywaits_t *w = net->keywaits;
    if (!w)
        return;
    kw_bucket_t *b, *tmp;
    HASH_ITER(hh, w->keys, b, tmp)
    wake_bucket(w, b, &w->rechecks);
    rearm(w);
}

int gkv_keywaits_init(gkv_net_t *net)
{
    gkv_keywaits_t *w = calloc(1, sizeof(*w));
    if (!w)
        return GKV_ENOMEM;
    w->net = net;
    uv_timer_init(net->loop, &w->timer);
    w->timer.data = w;
    uv_unref((uv_handle_t *)&w->timer);
    net->keywaits = w;
    return 0;
}

void gkv_keywaits_close(gkv_net_t *net)
{
    if (net->keywaits)
        uv_close((uv_handle_t *)&net->keywaits->timer, NULL);
}

void gkv_keywaits_free(gkv_net_t *net)
{
    gkv_keywaits_t *w = net->keywaits;
    if (!w)
        return;
    kw_bucket_t *b, *tmp;
    HASH_ITER(hh, w->keys, b, tmp)
    drop_bucket(w, b);
    free(w);
    net->keywaits = NULL;
}

int gkv_keywait_park(gkv_conn_t *c, const uint8_t *key, size_t klen, uint64_t deadline,
                     uint64_t recheck)
{
    gkv_keywaits_t *w = c->net->keywaits;
    if (!w || w->waiting >= GKV_KEYWAIT_MAX)
        return GKV_EBUSY;
    kw_bucket_t *b = find_bucket(w, key, klen);
    if (!b) {
        if (!(b = calloc(1, sizeof(*b))) || !(b->key = malloc(klen ? klen : 1))) {
            free(b);
            return GKV_ENOMEM;
        }
        memcpy(b->key, key, klen);
        b->klen = klen;
        HASH_ADD_KEYPTR(hh, w->keys, b->key, b->klen, b);
    }
    c->kw_next = NULL;
    if (b->tail)
        b->tail->kw_next = c;
    else
        b->head = c;
    b->tail = c;
    c->kw_bucket = b;
    c->kw_deadline = deadline;
    c->kw_recheck = recheck;
    c->wait.key = true;
    w->waiting++;
    c->net->store->listeners++;
    if (!uv_is_active((uv_handle_t *)&w->timer) ||
        due(c) < uv_now(c->net->loop) + uv_timer_get_due_in(&w->timer))
        fire_at(w, due(c)); /* earlier than the one it was set for */
    return 0;
}

void gkv_keywait_cancel(gkv_conn_t *c)
{
    gkv_keywaits_t *w = c->net->keywaits;
    if (!w || !c->kw_bucket)
        return;
    unlink_conn(w, c);
    rearm(w);
}

void gkv_keywaits_stats(const gkv_net_t *net, uint64_t *waiting, uint64_t *woken,
                        uint64_t *timed_out, uint64_t *rechecks)
{
    const gkv_keywaits_t *w = net->keywaits;
    *waiting = w ? w->waiting : 0;
    *woken = w ? w->woken : 0;
    *timed_out = w ? w->timed_out : 0;
    *rechecks = w ? w->rechecks : 0;
}
