/* harness.h: start and stop a real gpukvd for integration tests. The backend comes from the
 * environment (GKV_TEST_BACKEND=host|cuda, default host), so the same suite runs on both. */
#ifndef GKV_TESTS_HARNESS_H
#define GKV_TESTS_HARNESS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct {
    pid_t pid;
    char dir[64];      /* private temporary directory (mode 0700) */
    char sock[128];
    char url[160];     /* unix:... */
    char tcp_url[160]; /* tcp:127.0.0.1:PORT */
    char log[128];
} gkv_daemon_t;

/* The backend the tests run against. */
const char *harness_backend(void);
/* A private directory (mode 0700) for a test's daemons, "<run>/<tag>-XXXXXX" into dir (64
 * bytes), and the socket path in it into sock (128 bytes, or NULL). Returns 0 or -1. <run> is
 * the test program's own directory, "/tmp/gkv-run-XXXXXX" (mode 0711), made as it starts,
 * before any test forks; harness_run_end removes it. */
int harness_tmpdir(char dir[64], char *sock, const char *tag);
/* The end of a test program's run, rc its exit status: a run whose tests all passed (or were
 * skipped, 77) removes the run's directory with every daemon's directory and log in it, unless
 * $GKV_TEST_KEEP is set; a failed one keeps it and says where. Returns rc. Only the process that
 * made the directory removes it (not a forked test); one that never used it leaves nothing. */
int harness_run_end(int rc);
/* Removes dir and what it holds, unless $GKV_TEST_KEEP is set (the daemons' logs then stay
 * for a look). Returns 0 or -1. */
int harness_rmdir(const char *dir);
/* Starts gpukvd with the backend, a socket in a new directory, TCP on 127.0.0.1:0 and the
 * extra arguments (NULL-terminated, may be NULL). Returns 0 once it answers, else -1. */
int harness_start(gkv_daemon_t *d, const char *const *extra);
/* Same, in an existing directory with a chosen socket path (for stale-socket tests). */
int harness_start_at(gkv_daemon_t *d, const char *dir, const char *sock, const char *const *extra);
/* A service manager for the fd store's tests (server/fdstore.h), in place of systemd: a notify
 * socket that keeps what the daemon stores (FDSTORE=1 with FDNAME=, a descriptor attached),
 * drops what it removes (FDSTOREREMOVE=1), notes READY=1, and starts the daemon again with the
 * kept descriptors as fds 3.. in LISTEN_FDS / LISTEN_FDNAMES / LISTEN_PID. */
#define HARNESS_SM_FDS 64
typedef struct {
    char path[108]; /* the notify socket */
    int sock;
    int fds[HARNESS_SM_FDS];
    char names[HARNESS_SM_FDS][64];
    unsigned n;
    unsigned ready; /* READY=1 messages seen */
} harness_sm_t;
/* A notify socket in dir. Returns 0 or -1. */
int harness_sm_open(harness_sm_t *m, const char *dir);
/* Takes in every message waiting, waiting up to ms for the first. */
void harness_sm_poll(harness_sm_t *m, int ms);
/* Closes the socket and every kept descriptor. */
void harness_sm_close(harness_sm_t *m);
/* Like harness_start_at, the daemon given m's socket as NOTIFY_SOCKET and m's descriptors. */
int harness_start_sm(gkv_daemon_t *d, const char *dir, const char *sock, const char *const *extra,
                     harness_sm_t *m);
/* SIGTERM, then waits up to 15 s. Returns the exit status, or -1 if it had to be killed. */
int harness_stop(gkv_daemon_t *d);
/* Waits up to ms for the daemon to exit by itself. Returns its exit status (128 + signal when
 * killed), or -1 if it still runs. */
int harness_wait_exit(gkv_daemon_t *d, int ms);
/* Kills the daemon with SIGKILL and reaps it. */
void harness_kill(gkv_daemon_t *d);
/* i = 0, 1: d's Unix socket URL, then its TCP URL. */
const char *harness_url(const gkv_daemon_t *d, int i);
/* A connected TCP socket to "HOST:PORT" (IPv4 HOST), or -1. */
int harness_tcp_connect(const char *hostport);
/* Sleeps ms milliseconds. */
void harness_sleep_ms(int ms);
/* The daemon's log so far into buf (cap bytes, NUL-terminated, truncated to fit); "" if none. */
void harness_read_log(const gkv_daemon_t *d, char *buf, size_t cap);
/* The first number on the line of /proc/PID/FILE that starts with name (e.g. "status",
 * "FDSize:"; "limits", "Max open files"), or -1. */
long long harness_proc_number(pid_t pid, const char *file, const char *name);
/* RssAnon of the daemon in KiB (from /proc/PID/status), or -1. */
long harness_rss_anon_kb(const gkv_daemon_t *d);
/* FNV-1a 64 (word-wise) of a buffer, continued from h (start with HARNESS_FNV_INIT). */
#define HARNESS_FNV_INIT 0xcbf29ce484222325ULL
uint64_t harness_fnv(uint64_t h, const void *p, size_t n);
/* Fills p with bytes that depend on seed and position. */
void harness_fill(void *p, size_t n, uint64_t seed);

/* Readers for "every byte stays right while ..." tests: threads, each on a connection of its
 * own, GET every key in turn until stopped; a read that fails, or is not the whole value
 * harness_fill(sizes[i], seeds[i]), counts as wrong. Fill url, keys, sizes, seeds, nkeys. */
#define HARNESS_READ_KEYS 4
#define HARNESS_READERS 4
typedef struct {
    const char *url;
    const char *keys[HARNESS_READ_KEYS];
    size_t sizes[HARNESS_READ_KEYS];
    uint64_t seeds[HARNESS_READ_KEYS];
    int nkeys;
    atomic_bool stop;
    atomic_int reads; /* rounds over every key, by all readers */
    atomic_int wrong;
    pthread_t threads[HARNESS_READERS];
    int nthreads;
} harness_readers_t;
/* Starts n (1..HARNESS_READERS) readers and returns once they have read n rounds (or one went
 * wrong). Returns 0 or -1 (no thread could start). */
int harness_readers_start(harness_readers_t *r, int n);
/* Stops and joins them. */
void harness_readers_stop(harness_readers_t *r);

#endif
