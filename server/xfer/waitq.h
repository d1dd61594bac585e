/* waitq.h: a FIFO of waiters for a resource that is momentarily exhausted (staging buffers,
 * room in a copy batch). The waiters belong to their owners; the queue only links them. */
#ifndef GKV_SERVER_WAITQ_H
#define GKV_SERVER_WAITQ_H

#include <stdbool.h>
#include <stddef.h>

typedef struct gkv_waiter {
    /* Called on the loop thread when the resource may be available again: ask again. */
    void (*ready)(struct gkv_waiter *w);
    struct gkv_waiter *next;
    bool queued;
} gkv_waiter_t;

typedef struct {
    gkv_waiter_t *head, *tail;
} gkv_waitq_t;

/* Appends w (borrowed until popped or removed); nothing when it is already queued. */
void gkv_waitq_push(gkv_waitq_t *q, gkv_waiter_t *w);
/* Takes the oldest waiter out, or returns NULL when none waits. */
gkv_waiter_t *gkv_waitq_pop(gkv_waitq_t *q);
/* True when someone waits. */
static inline bool gkv_waitq_busy(const gkv_waitq_t *q)
{
    return q->head != NULL;
}
/* Takes w out if it is queued. */
void gkv_waitq_remove(gkv_waitq_t *q, gkv_waiter_t *w);

#endif
