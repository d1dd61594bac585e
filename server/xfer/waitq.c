/* waitq.c: the waiter FIFO; see waitq.h. */
#include "waitq.h"

#include <stddef.h>

void gkv_waitq_push(gkv_waitq_t *q, gkv_waiter_t *w)
{
    if (w->queued)
        return;
    w->queued = true;
    w->next = NULL;
    if (q->tail)
        q->tail->next = w;
    else
        q->head = w;
    q->tail = w;
}

gkv_waiter_t *gkv_waitq_pop(gkv_waitq_t *q)
{
    gkv_waiter_t *w = q->head;
    if (!w)
        return NULL;
    q->head = w->next;
    if (!q->head)
        q->tail = NULL;
    w->next = NULL;
    w->queued = false;
    return w;
}

void gkv_waitq_remove(gkv_waitq_t *q, gkv_waiter_t *w)
{
    if (!w->queued)
        return;
    gkv_waiter_t **pp = &q->head, *prev = NULL;
    while (*pp && *pp != w) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (*pp) {
        *pp = w->next;
        if (q->tail == w)
            q->tail = prev;
    }
    w->next = NULL;
    w->queued = false;
}
