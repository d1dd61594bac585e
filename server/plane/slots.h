/* slots.h: a transfer arena cut into equal slots, shared by the transfers running on worker
 * threads. A reader takes several (its pipeline's depth), an owner one per chunk it sends. A
 * reader never takes more than its fair share: the slots divided among the readers holding or
 * waiting for some, so that concurrent remote reads share the arena. A slot whose transfer
 * could not be released is retired (never handed out again). Thread-safe. */
#ifndef GKV_PLANE_SLOTS_H
#define GKV_PLANE_SLOTS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t freed;
    uint8_t *base;      /* the arena (borrowed) */
    uint64_t slot_size; /* bytes */
    uint32_t nslots;
    uint8_t *state;     /* per slot: 0 free, 1 taken, 2 retired */
    uint32_t taken, retired;
    uint32_t users;     /* transfers holding or waiting for slots */
    uint64_t waits;     /* takes that had to wait */
} gkv_slots_t;

/* Cuts size bytes at base into slots of slot_size (the last partial one is not used). Returns
 * 0 or GKV_ENOMEM. */
int gkv_slots_init(gkv_slots_t *s, uint8_t *base, uint64_t size, uint64_t slot_size);
void gkv_slots_fini(gkv_slots_t *s);
/* Takes between 1 and want slots (at most the fair share) into out (slot numbers), waiting up
 * to timeout_ms for the first. Returns how many (0: none came in time). */
uint32_t gkv_slots_take(gkv_slots_t *s, uint32_t want, uint32_t *out, int timeout_ms);
/* No slot is taken and nobody waits for one: no pull is under way on this arena. */
bool gkv_slots_idle(gkv_slots_t *s);
/* Gives n slots back (retire: they may still be read by a transfer that could not be
 * released; they are never handed out again). */
void gkv_slots_give(gkv_slots_t *s, const uint32_t *slots, uint32_t n, bool retire);
/* The address of slot i. */
static inline uint8_t *gkv_slot_addr(const gkv_slots_t *s, uint32_t i)
{
    return s->base + (uint64_t)i * s->slot_size;
}

#endif
