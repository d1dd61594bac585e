/* test_fdstore.c: values survive a crash through the fd store (--fd-store; server/fdstore.h),
 * with this test as the service manager (harness_sm_t): SIGKILLed at random points under a
 * writing load, restarted with the descriptors it stored, the daemon serves every acknowledged
 * write bit-exact, and nothing torn (each key holds its last acknowledged value, or the write
 * that was in flight when it died, whole); a large store comes back, timed; a damaged journal
 * drops what follows the damage, loudly, and serves nothing wrong; the journal is rewritten as
 * it grows and the store keeps one; a graceful stop takes its descriptors out of the store;
 * --fd-store yes outside a service manager is refused; the host tier comes back too. Host backend in CI (the arena's memfd
 * stands for the GPU pool); the cuda run (gpu_fdstore) does the same with GPU memory. */
#include <check.h>
#include <gpukv/gpukv.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check_client.h"
#include "harness.h"
#include "suite_main.h"

static bool on_cuda(void)
{
    return strcmp(harness_backend(), "cuda") == 0;
}

static char dir[64], sock[128];
static harness_sm_t sm;

static void setup(void)
{
    ck_assert_int_eq(harness_tmpdir(dir, sock, "fds"), 0);
    ck_assert_int_eq(harness_sm_open(&sm, dir), 0);
}

static void teardown(void)
{
    harness_sm_close(&sm);
    ck_assert_int_eq(harness_rmdir(dir), 0);
}

static int start(gkv_daemon_t *d, const char *maxmemory)
{
    const char *const args[] = {"--fd-store", "yes", "--maxmemory", maxmemory, NULL};
    int rc = harness_start_sm(d, dir, sock, args, &sm);
    harness_sm_poll(&sm, 0);
    return rc;
}

/* Kills d and takes in what it stored before it died. */
static void crash(gkv_daemon_t *d)
{
    harness_kill(d);
    harness_sm_poll(&sm, 0);
}

static unsigned stored_named(const char *prefix)
{
    unsigned n = 0;
    for (unsigned i = 0; i < sm.n; i++)
        n += strncmp(sm.names[i], prefix, strlen(prefix)) == 0;
    return n;
}

/* The writing load: writers own disjoint keys; each key's state is what was acknowledged last
 * and what was in flight when the daemon died. A value is harness_fill(size_of(k, v), seed)
 * with its version in its first 8 bytes. */
#define WRITERS 2
#define KEYS 48 /* per writer */

typedef struct {
    uint64_t acked;  /* version acknowledged last; 0: absent (never set, or deleted) */
    uint64_t flying; /* version in flight; 0: none; UINT64_MAX: a DEL */
} key_state_t;

typedef struct {
    int id;
    const char *url;
    atomic_bool *stop;
    key_state_t keys[KEYS];
    uint64_t next_version, rng, writes;
} writer_t;

static void key_name(char *out, size_t cap, int w, int k)
{
    snprintf(out, cap, "w%d-key-%02d", w, k);
}

/* Sizes that take every path: batched small values, one-chunk and several-chunk ones. */
static size_t size_of(int w, int k, uint64_t v)
{
    uint64_t h = harness_fnv(HARNESS_FNV_INIT, &v, sizeof(v)) ^ (uint64_t)(w * 131 + k);
    switch (h % 8) {
    case 0:
        return 8 + h % 64;
    case 1:
    case 2:
    case 3:
        return 100 + h % 4000;
    case 4:
        return 4096 + h % 12288;
    case 5:
        return 16384 + 1 + h % 50000;
    case 6:
        return 200000 + h % 100000;
    default:
        return 1500000 + h % 700000;
    }
}

static uint64_t seed_of(int w, int k, uint64_t v)
{
    return v * 1000003 + (uint64_t)(w * 64 + k);
}

static void *value_of(int w, int k, uint64_t v, size_t *len)
{
    *len = size_of(w, k, v);
    uint8_t *b = malloc(*len);
    harness_fill(b, *len, seed_of(w, k, v));
    memcpy(b, &v, 8);
    return b;
}

static void *write_loop(void *arg)
{
    writer_t *wr = arg;
    gkv_client_t *c;
    if (gkv_client_connect(wr->url, &c))
        return NULL;
    while (!atomic_load(wr->stop)) {
        wr->rng ^= wr->rng << 13;
        wr->rng ^= wr->rng >> 7;
        wr->rng ^= wr->rng << 17;
        int k = (int)(wr->rng % KEYS);
        key_state_t *ks = &wr->keys[k];
        char key[32];
        key_name(key, sizeof(key), wr->id, k);
        int rc;
        if (wr->rng % 16 == 0) {
            ks->flying = UINT64_MAX;
            const void *keys[] = {key};
            size_t klens[] = {strlen(key)};
            rc = gkv_del(c, keys, klens, 1) < 0;
            if (!rc)
                ks->acked = 0;
        } else {
            uint64_t v = wr->next_version++;
            size_t len;
            void *val = value_of(wr->id, k, v, &len);
            ks->flying = v;
            rc = gkv_set(c, key, strlen(key), val, len, NULL);
            free(val);
            if (!rc)
                ks->acked = v;
        }
        if (rc)
            break; /* the daemon died: this key's write stays in flight */
        ks->flying = 0;
        wr->writes++;
    }
    gkv_client_close(c);
    return NULL;
}

/* True when the bytes are version v of (w, k), whole. */
static bool is_version(int w, int k, uint64_t v, const void *got, size_t n)
{
    size_t len;
    void *want = value_of(w, k, v, &len);
    bool same = len == n && memcmp(want, got, n) == 0;
    free(want);
    return same;
}

/* Every key holds its acknowledged state or its write in flight, bit-exact; the state found
 * becomes the acknowledged one. Returns how many keys were wrong. */
static int check_keys(const char *url, writer_t *ws, int nw)
{
    gkv_client_t *c = connect_or_fail(url);
    int wrong = 0;
    for (int w = 0; w < nw; w++) {
        for (int k = 0; k < KEYS; k++) {
            key_state_t *ks = &ws[w].keys[k];
            char key[32];
            key_name(key, sizeof(key), w, k);
            void *got = NULL;
            gkv_value_info_t info;
            int rc = gkv_get_alloc(c, key, strlen(key), NULL, &got, &info);
            uint64_t found = 0;
            bool ok;
            if (rc == GKV_ENOTFOUND) {
                ok = ks->acked == 0 || ks->flying == UINT64_MAX;
            } else {
                ck_assert_msg(rc == 0, "GET %s: %s", key, gkv_strerror(rc));
                if (info.length >= 8)
                    memcpy(&found, got, 8);
                ok = found && (found == ks->acked || found == ks->flying) &&
                     is_version(w, k, found, got, info.length);
            }
            if (!ok) {
                fprintf(stderr,
                        "%s: found %s version %llu (%llu bytes), acknowledged %llu, in "
                        "flight %llu\n",
                        key, rc ? "no" : "", (unsigned long long)found,
                        (unsigned long long)(rc ? 0 : info.length), (unsigned long long)ks->acked,
                        (unsigned long long)ks->flying);
                wrong++;
            }
            gkv_free(got);
            ks->acked = found;
            ks->flying = 0;
        }
    }
    gkv_client_close(c);
    return wrong;
}

START_TEST(acknowledged_writes_survive_sigkill_at_random_points)
{
    int rounds = on_cuda() ? 25 : 100;
    writer_t ws[WRITERS];
    memset(ws, 0, sizeof(ws));
    gkv_daemon_t d;
    uint64_t writes = 0, adopted = 0;
    srand((unsigned)time(NULL));
    for (int r = 0; r < rounds; r++) {
        ck_assert_msg(start(&d, "256M") == 0, "restart %d failed", r);
        gkv_client_t *c = connect_or_fail(d.url);
        if (r) {
            ck_assert_uint_eq(info_u64(c, "adopted_dropped"), 0);
            adopted += info_u64(c, "adopted_keys");
        }
        gkv_client_close(c);
        int wrong = check_keys(d.url, ws, WRITERS);
        ck_assert_msg(wrong == 0, "round %d: %d keys wrong after the restart", r, wrong);
        atomic_bool stop = false;
        pthread_t t[WRITERS];
        for (int w = 0; w < WRITERS; w++) {
            ws[w].id = w;
            ws[w].url = d.url;
            ws[w].stop = &stop;
            ws[w].rng = (uint64_t)rand() * 2 + 1;
            if (!ws[w].next_version)
                ws[w].next_version = 1;
            ck_assert_int_eq(pthread_create(&t[w], NULL, write_loop, &ws[w]), 0);
        }
        harness_sleep_ms(10 + rand() % 120);
        crash(&d); /* the writers fail on their next reply */
        atomic_store(&stop, true);
        for (int w = 0; w < WRITERS; w++)
            pthread_join(t[w], NULL);
        ck_assert_uint_ge(stored_named("gpukv-j-"), 1);
    }
    for (int w = 0; w < WRITERS; w++)
        writes += ws[w].writes;
    ck_assert_int_eq(start(&d, "256M"), 0);
    ck_assert_int_eq(check_keys(d.url, ws, WRITERS), 0);
    harness_stop(&d);
    fprintf(stderr,
            "fd store: %d SIGKILLs under load, %llu acknowledged writes, %llu keys "
            "adopted in all, none wrong\n",
            rounds, (unsigned long long)writes, (unsigned long long)adopted);
    ck_assert_uint_gt(writes, (uint64_t)rounds);
}
END_TEST

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

START_TEST(a_large_store_comes_back_after_sigkill)
{
    /* 10 GiB on a GPU; 512 MiB of the host's memory in CI. GKV_FDSTORE_GIB overrides. */
    double gib = on_cuda() ? 10 : 0.5;
    if (getenv("GKV_FDSTORE_GIB"))
        gib = atof(getenv("GKV_FDSTORE_GIB"));
    size_t big = 64u << 20, nbig = (size_t)(gib * 16), nsmall = 20000;
    gkv_daemon_t d;
    char maxmem[32];
    snprintf(maxmem, sizeof(maxmem), "%zuM", nbig * 64 + 512);
    ck_assert_int_eq(start(&d, maxmem), 0);
    gkv_client_t *c = connect_or_fail(d.url);
    uint8_t *buf = malloc(big);
    char key[32];
    for (size_t i = 0; i < nbig; i++) {
        harness_fill(buf, big, 7000 + i);
        snprintf(key, sizeof(key), "big-%zu", i);
        ck_assert_int_eq(gkv_set(c, key, strlen(key), buf, big, NULL), 0);
    }
    for (size_t i = 0; i < nsmall; i++) {
        harness_fill(buf, 100 + i % 900, 90000 + i);
        snprintf(key, sizeof(key), "small-%zu", i);
        ck_assert_int_eq(gkv_set(c, key, strlen(key), buf, 100 + i % 900, NULL), 0);
    }
    gkv_client_close(c);
    crash(&d);
    double t0 = now_s();
    ck_assert_int_eq(start(&d, maxmem), 0);
    double serving = now_s() - t0;
    c = connect_or_fail(d.url);
    uint64_t adopt_ms = info_u64(c, "adopt_ms");
    ck_assert_uint_eq(info_u64(c, "adopted_keys"), nbig + nsmall);
    ck_assert_uint_eq(info_u64(c, "adopted_dropped"), 0);
    uint8_t *want = malloc(big);
    for (size_t i = 0; i < nbig; i++) {
        harness_fill(want, big, 7000 + i);
        snprintf(key, sizeof(key), "big-%zu", i);
        gkv_value_info_t info;
        ck_assert_int_eq(gkv_get(c, key, strlen(key), NULL, buf, big, &info), 0);
        ck_assert_uint_eq(info.length, big);
        ck_assert_msg(memcmp(buf, want, big) == 0, "%s differs", key);
    }
    for (size_t i = 0; i < nsmall; i += 7) {
        harness_fill(want, 100 + i % 900, 90000 + i);
        snprintf(key, sizeof(key), "small-%zu", i);
        gkv_value_info_t info;
        ck_assert_int_eq(gkv_get(c, key, strlen(key), NULL, buf, big, &info), 0);
        ck_assert_uint_eq(info.length, 100 + i % 900);
        ck_assert(memcmp(buf, want, info.length) == 0);
    }
    gkv_client_close(c);
    harness_stop(&d);
    fprintf(stderr,
            "fd store: %.2f GiB in %zu values back after SIGKILL: serving %.0f ms after "
            "the restart began (adoption %llu ms)\n",
            (double)(nbig * big) / (1u << 30), nbig + nsmall, serving * 1e3,
            (unsigned long long)adopt_ms);
    free(buf);
    free(want);
}
END_TEST

/* The stored journal's descriptor, from the service manager's table. */
static int stored_journal(void)
{
    for (unsigned i = 0; i < sm.n; i++)
        if (strncmp(sm.names[i], "gpukv-j-", 8) == 0)
            return sm.fds[i];
    return -1;
}

/* The host tier (--tier-host) survives a SIGKILL under a writing load: its memfd is stored with
 * the GPUs' memory and the journal names the values in it, so the successor brings them back
 * into its own host tier; every key holds its last acknowledged value or the one in flight. */
#define TIER_VAL (256u << 10)
#define TIER_KEYS 100 /* 25 MiB: 8 MiB on the GPU, the rest in the tier */

typedef struct {
    gkv_daemon_t *d;
    atomic_int acked[TIER_KEYS], flight[TIER_KEYS];
    atomic_bool stop;
} tier_load_t;

static uint64_t tier_seed(int k, int v)
{
    return (uint64_t)k * 1000003u + (uint64_t)v;
}

static void *tier_writer(void *arg)
{
    tier_load_t *l = arg;
    gkv_client_t *c;
    if (gkv_client_connect(l->d->url, &c))
        return NULL;
    static uint8_t v[TIER_VAL];
    char key[32];
    for (int round = 1; !atomic_load(&l->stop); round++)
        for (int k = 0; k < TIER_KEYS && !atomic_load(&l->stop); k += 1 + round % 3) {
            harness_fill(v, TIER_VAL, tier_seed(k, round));
            snprintf(key, sizeof(key), "tier-%d", k);
            atomic_store(&l->flight[k], round);
            if (gkv_set(c, key, strlen(key), v, TIER_VAL, NULL))
                goto out; /* the daemon died */
            atomic_store(&l->acked[k], round);
        }
out:
    gkv_client_close(c);
    return NULL;
}

/* A failed round says which keys came back from neither side, and what the daemon logged. */
static void tier_explain(gkv_client_t *c, const gkv_daemon_t *d, tier_load_t *l)
{
    static uint8_t got[TIER_VAL];
    static char log[1 << 20];
    char key[32];
    for (int k = 0; k < TIER_KEYS; k++) {
        snprintf(key, sizeof(key), "tier-%d", k);
        if (gkv_get(c, key, strlen(key), NULL, got, TIER_VAL, NULL))
            fprintf(stderr, "%s is missing: acknowledged version %d, in flight %d\n", key,
                    atomic_load(&l->acked[k]), atomic_load(&l->flight[k]));
    }
    harness_read_log(d, log, sizeof(log));
    fprintf(stderr, "the daemon's log:\n%s\n", log);
}

/* One round: the daemon with args under the writing load, SIGKILLed, started again. */
static void tier_round(const char *const *args, bool with_disk)
{
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start_sm(&d, dir, sock, args, &sm), 0);
    harness_sm_poll(&sm, 0);
    static tier_load_t l;
    l.d = &d;
    atomic_store(&l.stop, false);
    gkv_client_t *c = connect_or_fail(d.url);
    static uint8_t v[TIER_VAL], got[TIER_VAL];
    char key[32];
    for (int k = 0; k < TIER_KEYS; k++) {
        harness_fill(v, TIER_VAL, tier_seed(k, 0));
        snprintf(key, sizeof(key), "tier-%d", k);
        ck_assert_int_eq(gkv_set(c, key, strlen(key), v, TIER_VAL, NULL), 0);
        atomic_store(&l.acked[k], 0);
        atomic_store(&l.flight[k], 0);
    }
    ck_assert_uint_ge(info_u64(c, "tier_host_keys"), 1);
    if (with_disk)
        ck_assert_uint_ge(info_u64(c, "tier_disk_keys"), 1);
    gkv_client_close(c);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, tier_writer, &l), 0);
    harness_sleep_ms(100 + rand() % 200);
    crash(&d);
    atomic_store(&l.stop, true);
    pthread_join(t, NULL);
    ck_assert_int_eq(harness_start_sm(&d, dir, sock, args, &sm), 0);
    harness_sm_poll(&sm, 0);
    c = connect_or_fail(d.url);
    ck_assert_uint_eq(info_u64(c, "adopted_dropped"), 0);
    if (info_u64(c, "adopted_keys") + info_u64(c, "tier_disk_reloaded") != TIER_KEYS)
        tier_explain(c, &d, &l);
    /* Each key once: from the journal (GPU, host tier) or from the disk's file. */
    ck_assert_uint_eq(info_u64(c, "adopted_keys") + info_u64(c, "tier_disk_reloaded"),
                      TIER_KEYS);
    ck_assert_uint_ge(info_u64(c, "tier_host_keys"), 1); /* some came back into the tier */
    ck_assert_uint_le(info_u64(c, "used_bytes"), 8u << 20);
    for (int k = 0; k < TIER_KEYS; k++) {
        snprintf(key, sizeof(key), "tier-%d", k);
        ck_assert_int_eq(gkv_get(c, key, strlen(key), NULL, got, TIER_VAL, NULL), 0);
        int a = atomic_load(&l.acked[k]), f = atomic_load(&l.flight[k]);
        harness_fill(v, TIER_VAL, tier_seed(k, a));
        bool is_acked = memcmp(v, got, TIER_VAL) == 0;
        harness_fill(v, TIER_VAL, tier_seed(k, f));
        ck_assert_msg(is_acked || memcmp(v, got, TIER_VAL) == 0,
                      "%s holds neither its acknowledged version %d nor the one in flight %d",
                      key, a, f);
    }
    gkv_client_close(c);
    harness_stop(&d);
}

START_TEST(the_host_tier_survives_sigkill_under_load)
{
    const char *const args[] = {"--fd-store", "yes", "--maxmemory", "8M", "--tier-host", "32M",
                                "--maxmemory-policy", "allkeys-lru", NULL};
    tier_round(args, false);
}
END_TEST

/* With a disk tier below: the journal brings the GPU's and the host tier's values back, the
 * disk's file its own, and where both know a key the journal's (newer) wins. */
START_TEST(the_disk_tier_comes_back_beside_the_fd_store_after_sigkill_under_load)
{
    char disk[128];
    snprintf(disk, sizeof(disk), "%s/disk", dir);
    ck_assert_int_eq(mkdir(disk, 0700), 0);
    const char *const args[] = {"--fd-store", "yes", "--maxmemory", "8M", "--tier-host", "8M",
                                "--tier-disk", disk, "--tier-disk-size", "64M",
                                "--maxmemory-policy", "allkeys-lru", NULL};
    for (int round = 0; round < 3; round++)
        tier_round(args, true);
}
END_TEST

START_TEST(a_damaged_journal_drops_what_follows_loudly)
{
    gkv_daemon_t d;
    ck_assert_int_eq(start(&d, "64M"), 0);
    gkv_client_t *c = connect_or_fail(d.url);
    char key[32], val[64];
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "k%03d", i);
        snprintf(val, sizeof(val), "value of %d", i);
        ck_assert_int_eq(gkv_set(c, key, strlen(key), val, strlen(val), NULL), 0);
    }
    gkv_client_close(c);
    crash(&d);
    int fd = stored_journal();
    ck_assert_int_ge(fd, 0);
    struct stat st;
    ck_assert_int_eq(fstat(fd, &st), 0);
    uint64_t committed;
    ck_assert_int_eq(pread(fd, &committed, 8, 16), 8);
    /* A byte in the middle of the records flips. */
    off_t at = (off_t)(64 + committed / 2);
    uint8_t b;
    ck_assert_int_eq(pread(fd, &b, 1, at), 1);
    b ^= 0x40;
    ck_assert_int_eq(pwrite(fd, &b, 1, at), 1);
    ck_assert_int_eq(start(&d, "64M"), 0);
    char log[65536];
    harness_read_log(&d, log, sizeof(log));
    ck_assert_msg(strstr(log, "damaged") != NULL, "the log does not say the journal is damaged");
    c = connect_or_fail(d.url);
    uint64_t keys = info_u64(c, "adopted_keys");
    ck_assert_uint_gt(keys, 0);
    ck_assert_uint_lt(keys, 100);
    int served = 0;
    for (int i = 0; i < 100; i++) { /* what is served is right */
        char got[64];
        gkv_value_info_t info;
        snprintf(key, sizeof(key), "k%03d", i);
        snprintf(val, sizeof(val), "value of %d", i);
        int rc = gkv_get(c, key, strlen(key), NULL, got, sizeof(got), &info);
        if (rc == GKV_ENOTFOUND)
            continue;
        ck_assert_int_eq(rc, 0);
        ck_assert_uint_eq(info.length, strlen(val));
        ck_assert(memcmp(got, val, info.length) == 0);
        served++;
    }
    ck_assert_uint_eq((uint64_t)served, keys);
    gkv_client_close(c);
    harness_stop(&d);
}
END_TEST

START_TEST(the_journal_is_rewritten_and_the_store_keeps_one)
{
    gkv_daemon_t d;
    ck_assert_int_eq(start(&d, "64M"), 0);
    gkv_client_t *c = connect_or_fail(d.url);
    static uint8_t meta[4000];
    gkv_set_opts_t o = {.meta = meta, .meta_len = sizeof(meta)};
    char key[32];
    /* ~4.1 KB records: past 16 MiB after ~4100 SETs of 8 keys. */
    for (int i = 0; i < 6000; i++) {
        snprintf(key, sizeof(key), "k%d", i % 8);
        ck_assert_int_eq(gkv_set(c, key, strlen(key), &i, sizeof(i), &o), 0);
    }
    ck_assert_uint_ge(info_u64(c, "fd_store_journal_rewrites"), 1);
    ck_assert_uint_lt(info_u64(c, "fd_store_journal_bytes"), 16u << 20);
    gkv_client_close(c);
    crash(&d);
    ck_assert_uint_eq(stored_named("gpukv-j-"), 1);
    ck_assert_int_eq(start(&d, "64M"), 0);
    c = connect_or_fail(d.url);
    ck_assert_uint_eq(info_u64(c, "adopted_keys"), 8);
    for (int k = 0; k < 8; k++) {
        int got = -1;
        snprintf(key, sizeof(key), "k%d", k);
        ck_assert_int_eq(gkv_get(c, key, strlen(key), NULL, &got, sizeof(got), NULL), 0);
        ck_assert_int_eq(got, 5992 + k);
    }
    gkv_client_close(c);
    harness_stop(&d);
}
END_TEST

START_TEST(a_graceful_stop_takes_its_descriptors_out)
{
    gkv_daemon_t d;
    ck_assert_int_eq(start(&d, "64M"), 0);
    ck_assert_uint_eq(stored_named("gpukv-m-"), 1);
    ck_assert_uint_eq(stored_named("gpukv-j-"), 1);
    ck_assert_uint_ge(sm.ready, 1);
    ck_assert_int_eq(harness_stop(&d), 0);
    harness_sm_poll(&sm, 100);
    ck_assert_uint_eq(sm.n, 0);
}
END_TEST

START_TEST(fd_store_yes_without_a_service_manager_is_refused)
{
    gkv_daemon_t d;
    const char *const args[] = {"--fd-store", "yes", NULL};
    ck_assert_int_ne(harness_start_at(&d, dir, sock, args), 0);
    char log[8192];
    harness_read_log(&d, log, sizeof(log));
    ck_assert_msg(strstr(log, "NOTIFY_SOCKET") != NULL, "log: %s", log);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("fdstore");
    TCase *t = tcase_create("crash");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_set_timeout(t, 600);
    tcase_add_test(t, acknowledged_writes_survive_sigkill_at_random_points);
    tcase_add_test(t, the_host_tier_survives_sigkill_under_load);
    tcase_add_test(t, the_disk_tier_comes_back_beside_the_fd_store_after_sigkill_under_load);
    tcase_add_test(t, a_damaged_journal_drops_what_follows_loudly);
    tcase_add_test(t, the_journal_is_rewritten_and_the_store_keeps_one);
    tcase_add_test(t, a_graceful_stop_takes_its_descriptors_out);
    tcase_add_test(t, fd_store_yes_without_a_service_manager_is_refused);
    suite_add_tcase(s, t);
    /* Alone (CK_RUN_CASE=large, GKV_FDSTORE_GIB=N): bench/fdstore_bench.sh times restarts. */
    t = tcase_create("large");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_set_timeout(t, 600);
    tcase_add_test(t, a_large_store_comes_back_after_sigkill);
    suite_add_tcase(s, t);
    return s;
}
