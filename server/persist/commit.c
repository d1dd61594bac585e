/* commit.c: replies waiting for journal commits; see commit.h. */
#include "commit.h"

#include <stddef.h>

bool gkv_commits_wait(gkv_commits_t *q, gkv_commit_waiter_t *w, uint64_t until)
{
    if (until > w->until || !w->queued)
        w->until = until;
    if (w->queued)
        return false;
    w->queued = true;
    w->next = q->head;
    q->head = w;
    q->waits++;
    return true;
}

void gkv_commits_release(gkv_commits_t *q, uint64_t committed, bool all, bool resume)
{
    gkv_commit_waiter_t *ready = NULL, **tail = &ready, **pp = &q->head;
    while (*pp) {
        gkv_commit_waiter_t *w = *pp;
        if (all || w->until <= committed) {
            *pp = w->next;
            w->next = NULL;
            *tail = w;
            tail = &w->next;
        } else {
            pp = &w->next;
        }
    }
    while (ready) {
        gkv_commit_waiter_t *w = ready;
        ready = w->next;
        w->next = NULL;
        w->queued = false;
        w->ready(w, resume);
    }
}
