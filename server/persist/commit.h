/* commit.h: replies that wait for the journal (fdstore.h). A request that appended journal
 * records is answered only once they have committed (journal.h: a copy batch pins the journal
 * until the bytes its records name are in place). The connection owns its waiter and its hold:
 * it queues the waiter here, and the queue calls ready once those records have committed (or
 * the journal has gone), after which the waiter is the connection's again. The queue never
 * frees or resumes anything itself; an owner is never freed while its waiter is queued (the
 * hold keeps a connection open, conn.h). */
#ifndef GKV_PERSIST_COMMIT_H
#define GKV_PERSIST_COMMIT_H

#include <stdbool.h>
#include <stdint.h>

typedef struct gkv_commit_waiter gkv_commit_waiter_t;

struct gkv_commit_waiter {
    /* Set by the owner: called once the records up to `until` have committed (or the journal
     * went, or the daemon is stopping: resume false, nothing more may be sent). The waiter has
     * left the queue when ready runs. */
    void (*ready)(gkv_commit_waiter_t *w, bool resume);
    /* The queue's; the owner reads them, never writes them. */
    uint64_t until; /* the journal length its records end at */
    bool queued;    /* in a queue now */
    gkv_commit_waiter_t *next;
};

typedef struct {
    gkv_commit_waiter_t *head;
    uint64_t waits; /* waiters queued since start (INFO fd_store_held_replies) */
} gkv_commits_t;

/* w waits until the journal's committed length reaches until (a waiter already queued only
 * has until moved up). Returns true when w was queued by this call. */
bool gkv_commits_wait(gkv_commits_t *q, gkv_commit_waiter_t *w, uint64_t until);
/* Every waiter whose until is at most committed (all: every waiter) leaves the queue, then
 * each gets ready(w, resume), in the order they were released. A ready callback may queue
 * again (that waiter waits for the next release). */
void gkv_commits_release(gkv_commits_t *q, uint64_t committed, bool all, bool resume);

#endif
