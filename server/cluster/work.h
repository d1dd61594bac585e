/* work.h: worker threads for what the cluster must wait for (other nodes' answers), so that
 * the loop never does: a job runs on a worker, then its done callback on the loop. Two pools
 * keep a home's own requests (drops it sends to owners) from waiting behind requests that wait
 * on other homes. */
#ifndef GKV_CLUSTER_WORK_H
#define GKV_CLUSTER_WORK_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

typedef struct gkv_job gkv_job_t;
struct gkv_job {
    void (*run)(gkv_job_t *j);  /* on a worker thread: touches nothing of the loop's */
    void (*done)(gkv_job_t *j); /* then on the loop */
    gkv_job_t *next;
};

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t more;
    gkv_job_t *head, *tail; /* waiting for a worker */
    gkv_job_t *finished;    /* run, waiting for the loop */
    uv_async_t async;
    pthread_t *threads;
    unsigned n;
    bool stop, open;
    uint64_t jobs; /* submitted */
    /* --busy-poll: after its job, one worker at a time watches the queue for spin_us before it
     * sleeps, so that a job submitted meanwhile starts without a thread's wake-up. */
    _Atomic uint64_t spin_us;
    bool spinning;          /* a worker watches (under lock) */
    uint64_t watched;       /* jobs a watching worker took, with no wake-up (under lock) */
    _Atomic unsigned ready; /* jobs in head..tail, or 1 once stopping: what the watcher sees */
} gkv_workers_t;

/* Starts n workers whose jobs complete on loop (borrowed), spin_us 0. Returns 0 or
 * GKV_ENOMEM. */
int gkv_workers_start(gkv_workers_t *w, uv_loop_t *loop, unsigned n);
/* Sets spin_us (--busy-poll, and on reload); from the loop, while w runs. */
void gkv_workers_set_spin(gkv_workers_t *w, uint64_t spin_us);
/* Jobs taken by a worker that watched for them (--busy-poll), read under w's lock. */
uint64_t gkv_workers_watched(gkv_workers_t *w);
/* Queues j (owned by the caller until its done callback). */
void gkv_workers_submit(gkv_workers_t *w, gkv_job_t *j);
/* From a job's run (on a worker of w): m's done runs on the loop, before the done of the job
 * posting it (m is not run; it stays the caller's, and is not posted again before its done
 * ran). A message from a job to the loop while the job goes on. */
void gkv_workers_post(gkv_workers_t *w, gkv_job_t *m);
/* Runs what is queued, joins the workers, calls the last done callbacks and closes the
 * handle. On the loop, once nothing will be submitted any more. */
void gkv_workers_stop(gkv_workers_t *w);

#endif
