/* slots.c: a transfer arena's slots (slots.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "error.h"
#include "slots.h"

int gkv_slots_init(gkv_slots_t *s, uint8_t *base, uint64_t size, uint64_t slot_size)
{
    memset(s, 0, sizeof(*s));
    s->base = base;
    s->slot_size = slot_size;
    s->nslots = slot_size ? (uint32_t)(size / slot_size) : 0;
    if (!s->nslots || !(s->state = calloc(s->nslots, 1)))
        return GKV_ENOMEM;
    pthread_mutex_init(&s->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->freed, &ca);
    pthread_condattr_destroy(&ca);
    return 0;
}

void gkv_slots_fini(gkv_slots_t *s)
{
    if (!s->state)
        return;
    free(s->state);
    s->state = NULL;
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->freed);
}

uint32_t gkv_slots_take(gkv_slots_t *s, uint32_t want, uint32_t *out, int timeout_ms)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&s->lock);
    s->users++;
    uint32_t got = 0;
    bool waited = false;
    for (;;) {
        uint32_t usable = s->nslots - s->retired;
        uint32_t share = usable / s->users;
        if (share < 1)
            share = 1;
        if (want > share)
            want = share;
        if (s->taken + s->retired < s->nslots)
            break;
        waited = true;
        if (pthread_cond_timedwait(&s->freed, &s->lock, &until) == ETIMEDOUT)
            break;
    }
    for (uint32_t i = 0; i < s->nslots && got < want; i++)
        if (!s->state[i]) {
            s->state[i] = 1;
            out[got++] = i;
        }
    s->taken += got;
    if (waited)
        s->waits++;
    if (!got)
        s->users--;
    pthread_mutex_unlock(&s->lock);
    return got;
}

bool gkv_slots_idle(gkv_slots_t *s)
{
    pthread_mutex_lock(&s->lock);
    bool idle = !s->taken && !s->users;
    pthread_mutex_unlock(&s->lock);
    return idle;
}

void gkv_slots_give(gkv_slots_t *s, const uint32_t *slots, uint32_t n, bool retire)
{
    pthread_mutex_lock(&s->lock);
    for (uint32_t i = 0; i < n; i++) {
        if (slots[i] >= s->nslots || s->state[slots[i]] != 1)
            continue;
        s->state[slots[i]] = retire ? 2 : 0;
        s->taken--;
        if (retire)
            s->retired++;
    }
    if (n && s->users)
        s->users--;
    pthread_cond_broadcast(&s->freed);
    pthread_mutex_unlock(&s->lock);
}
