/* test_seal_async.c: asynchronous seals (net/fence.h) against a real gpukvd, on either backend:
 * a value is published only once its fence counter holds the target (a wrong value publishes
 * nothing), and a reader waiting for the key gets it then; one connection's seals publish in
 * the order they were made, and a synchronous seal after them waits for them; a connection that
 * goes away first (or a producer killed) publishes nothing and holds nothing; 64 seals wait at most per connection; a
 * stream's earlier work comes before the publication (GPU); bad seals are refused and leave the
 * value writable; the daemon checks the counter and target a seal names (raw frames); a
 * waiting MAP takes an early frame of a sealed value and its answer renews that lease (raw),
 * and libgpukv's early imports with their fallbacks (a SET instead, a timeout, a range). */
#include <check.h>
#include <gpukv/gpukv.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check_client.h"
#include "commands.h"
#include "fdpass.h"
#include "harness.h"
#include "message.h"
#include "probe.h"
#include "raw_frame.h"

#define KEY(s) s, strlen(s)

static gkv_daemon_t start(void)
{
    const char *const flags[] = {"--host-zero-copy", "yes", NULL};
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, flags), 0);
    return d;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Fills a created value with byte b, wherever it lives. */
static void fill(gkv_mapping_t *m, char b)
{
    char *buf = malloc(m->length);
    memset(buf, b, m->length);
    if (m->on_device)
        ck_assert_int_eq(gkv_test_gpu_write(m->ptr, buf, m->length), 0);
    else
        memcpy(m->ptr, buf, m->length);
    free(buf);
}

static gkv_mapping_t *created(gkv_client_t *c, const char *key, size_t size, char b)
{
    gkv_mapping_t *m;
    ck_assert_int_eq(gkv_create(c, KEY(key), size, NULL, &m), 0);
    fill(m, b);
    return m;
}

/* The first byte of key's value, or 0 when it does not exist. */
static char first_byte(gkv_client_t *c, const char *key)
{
    char b[1];
    gkv_range_t one = {.offset = 0, .length = 1};
    int rc = gkv_get(c, KEY(key), &one, b, 1, NULL);
    if (rc == GKV_ENOTFOUND)
        return 0;
    ck_assert_int_eq(rc, 0);
    return b[0];
}

/* Gives the daemon up to a second to publish (or discard) every seal that waits. */
static void until_none_waits(gkv_client_t *r)
{
    for (int i = 0; i < 500 && info_u64(r, "async_seals_waiting"); i++)
        harness_sleep_ms(2);
}

static void complete(const gkv_fence_t *f)
{
    __atomic_store_n(f->counter, f->target, __ATOMIC_RELEASE);
}

START_TEST(a_seal_is_published_only_when_its_counter_holds_the_target)
{
    gkv_daemon_t d = start();
    gkv_client_t *c = connect_or_fail(d.url), *r = connect_or_fail(d.url);
    gkv_mapping_t *m = created(c, "a/1", 4096, 'x');
    gkv_fence_t f;
    ck_assert_int_eq(gkv_seal_deferred(c, m, &f), 0);
    ck_assert_uint_gt(f.target, 0);
    ck_assert_uint_eq(info_u64(r, "async_seals_waiting"), 1);
    harness_sleep_ms(50);
    ck_assert_int_eq(first_byte(r, "a/1"), 0); /* not yet */
    *f.counter = f.target - 1;                 /* short of its target: nothing */
    harness_sleep_ms(50);
    ck_assert_int_eq(first_byte(r, "a/1"), 0);
    complete(&f);
    char buf[4096];
    gkv_value_info_t vi;
    ck_assert_int_eq(gkv_get_wait(r, KEY("a/1"), NULL, 5000, buf, sizeof(buf), &vi), 0);
    ck_assert_uint_eq(vi.length, 4096);
    ck_assert(buf[0] == 'x' && buf[4095] == 'x');
    ck_assert_uint_eq(info_u64(r, "async_seals_waiting"), 0);
    ck_assert_uint_eq(info_u64(r, "async_seals_published"), 1);
    ck_assert_uint_eq(info_u64(r, "unsealed_creates"), 0);
    /* The counter is used again: its next target is another. */
    m = created(c, "a/2", 16, 'y');
    gkv_fence_t g;
    ck_assert_int_eq(gkv_seal_deferred(c, m, &g), 0);
    ck_assert(g.target != f.target);
    complete(&g);
    ck_assert_int_eq(gkv_get_wait(r, KEY("a/2"), NULL, 5000, buf, sizeof(buf), &vi), 0);
    ck_assert_int_eq(buf[0], 'y');
    gkv_client_close(c);
    gkv_client_close(r);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

typedef struct {
    const gkv_fence_t *f;
    int delay_ms;
} later_t;

static void *complete_later(void *arg)
{
    later_t *l = arg;
    harness_sleep_ms(l->delay_ms);
    complete(l->f);
    return NULL;
}

/* The daemon's polling goes from a spin (5 ms) to ticks every 50 us (up to a second) to once a
 * millisecond (server/net/fence.c): a seal completed in each of those phases is published. */
START_TEST(seals_completed_in_every_phase_of_the_polling_are_published)
{
    gkv_daemon_t d = start();
    gkv_client_t *c = connect_or_fail(d.url), *r = connect_or_fail(d.url);
    static const int delays_ms[] = {1, 30, 1200};
    for (int i = 0; i < 3; i++) {
        char key[8];
        snprintf(key, sizeof(key), "ph/%d", i);
        gkv_fence_t f;
        ck_assert_int_eq(gkv_seal_deferred(c, created(c, key, 256, (char)('a' + i)), &f), 0);
        later_t l = {&f, delays_ms[i]};
        pthread_t t;
        ck_assert_int_eq(pthread_create(&t, NULL, complete_later, &l), 0);
        char buf[256];
        gkv_value_info_t vi;
        ck_assert_int_eq(gkv_get_wait(r, key, strlen(key), NULL, 10000, buf, sizeof(buf), &vi),
                         0);
        ck_assert(vi.length == 256 && buf[0] == 'a' + i && buf[255] == 'a' + i);
        pthread_join(t, NULL);
    }
    ck_assert_uint_eq(info_u64(r, "async_seals_published"), 3);
    ck_assert_uint_ge(info_u64(r, "async_seal_max_wait_us"), 1000000);
    ck_assert_uint_eq(info_u64(r, "async_seals_waiting"), 0);
    gkv_client_close(c);
    gkv_client_close(r);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

START_TEST(one_connection_s_seals_publish_in_order)
{
    gkv_daemon_t d = start();
    gkv_client_t *c = connect_or_fail(d.url), *r = connect_or_fail(d.url);
    gkv_fence_t f1, f2;
    ck_assert_int_eq(gkv_seal_deferred(c, created(c, "o", 64, 'A'), &f1), 0);
    ck_assert_int_eq(gkv_seal_deferred(c, created(c, "o", 64, 'B'), &f2), 0);
    complete(&f2); /* the later one first: it waits for the earlier */
    harness_sleep_ms(50);
    ck_assert_int_eq(first_byte(r, "o"), 0);
    complete(&f1);
    until_none_waits(r);
    ck_assert_int_eq(first_byte(r, "o"), 'B');
    /* A synchronous seal after an asynchronous one waits for it. */
    gkv_fence_t f3;
    ck_assert_int_eq(gkv_seal_deferred(c, created(c, "o", 64, 'C'), &f3), 0);
    gkv_mapping_t *m = created(c, "o", 64, 'D');
    later_t l = {&f3, 150};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, complete_later, &l), 0);
    double t0 = now_s();
    ck_assert_int_eq(gkv_seal(c, m), 0);
    ck_assert_msg(now_s() - t0 > 0.1, "the seal did not wait (%.3f s)", now_s() - t0);
    pthread_join(t, NULL);
    ck_assert_int_eq(first_byte(r, "o"), 'D');
    ck_assert_uint_eq(info_u64(r, "async_seals_published"), 3);
    gkv_client_close(c);
    gkv_client_close(r);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

START_TEST(a_producer_that_goes_away_first_publishes_nothing)
{
    gkv_daemon_t d = start();
    gkv_client_t *r = connect_or_fail(d.url);
    for (int i = 0; i < 3; i++) {
        gkv_client_t *c = connect_or_fail(d.url);
        gkv_fence_t f;
        ck_assert_int_eq(gkv_seal_deferred(c, created(c, "gone", 1 << 20, 'z'), &f), 0);
        gkv_client_close(c); /* as its process dying would: the counter never written */
    }
    until_none_waits(r);
    ck_assert_uint_eq(info_u64(r, "async_seals_waiting"), 0);
    ck_assert_uint_eq(info_u64(r, "async_seals_discarded"), 3);
    char b[1];
    ck_assert_int_eq(gkv_get_wait(r, KEY("gone"), NULL, 200, b, 1, NULL), GKV_ETIMEDOUT);
    ck_assert_uint_eq(info_u64(r, "leases"), 0);
    ck_assert_uint_eq(info_u64(r, "used_bytes"), 0); /* the discarded values' memory is back */
    gkv_client_close(r);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

START_TEST(a_producer_killed_before_its_counter_publishes_nothing)
{
    if (strcmp(harness_backend(), "host") != 0)
        return; /* the child would need CUDA after its parent initialised it: host backend only */
    gkv_daemon_t d = start();
    int ready[2];
    ck_assert_int_eq(pipe(ready), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) { /* the producer: seals, then is killed before its writes are done */
        gkv_client_t *c;
        gkv_mapping_t *m;
        gkv_fence_t f;
        if (gkv_client_connect(d.url, &c) || gkv_create(c, KEY("killed"), 4096, NULL, &m))
            _exit(1);
        memset(m->ptr, 'k', 4096);
        if (gkv_seal_deferred(c, m, &f))
            _exit(2);
        (void)!write(ready[1], "r", 1);
        pause();
        _exit(3);
    }
    char b;
    ck_assert_int_eq(read(ready[0], &b, 1), 1);
    gkv_client_t *r = connect_or_fail(d.url);
    ck_assert_uint_eq(info_u64(r, "async_seals_waiting"), 1);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    until_none_waits(r);
    ck_assert_uint_eq(info_u64(r, "async_seals_discarded"), 1);
    char buf[8];
    ck_assert_int_eq(gkv_get_wait(r, KEY("killed"), NULL, 200, buf, sizeof(buf), NULL),
                     GKV_ETIMEDOUT);
    ck_assert_uint_eq(info_u64(r, "leases"), 0);
    ck_assert_uint_eq(info_u64(r, "used_bytes"), 0);
    close(ready[0]);
    close(ready[1]);
    gkv_client_close(r);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

START_TEST(at_most_64_seals_wait_per_connection)
{
    gkv_daemon_t d = start();
    gkv_client_t *c = connect_or_fail(d.url), *r = connect_or_fail(d.url);
    gkv_fence_t f[64];
    char key[16];
    for (int i = 0; i < 64; i++) {
        snprintf(key, sizeof(key), "b/%d", i);
        ck_assert_int_eq(gkv_seal_deferred(c, created(c, key, 8, 'b'), &f[i]), 0);
    }
    gkv_mapping_t *m = created(c, "b/64", 8, 'b');
    gkv_fence_t extra;
    ck_assert_int_eq(gkv_seal_deferred(c, m, &extra), GKV_EBUSY);
    ck_assert_int_eq(m->writable, 1); /* still the caller's */
    ck_assert_int_eq(gkv_abort(c, m), 0);
    for (int i = 63; i >= 0; i--)
        complete(&f[i]);
    until_none_waits(r);
    ck_assert_uint_eq(info_u64(r, "async_seals_published"), 64);
    ck_assert_uint_eq(info_u64(r, "keys"), 64);
    gkv_client_close(c);
    gkv_client_close(r);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

START_TEST(a_stream_s_earlier_work_comes_before_the_publication)
{
    if (strcmp(harness_backend(), "cuda") != 0)
        return; /* values in host memory have no stream: published at once */
    gkv_daemon_t d = start();
    gkv_client_t *c = connect_or_fail(d.url), *r = connect_or_fail(d.url);
    gkv_mapping_t *m = created(c, "s", 1 << 20, 'a');
    ck_assert_int_eq(m->on_device, 1);
    void *stream = gkv_test_stream_new();
    ck_assert_ptr_nonnull(stream);
    static char src[1 << 20];
    memset(src, 'q', sizeof(src));
    ck_assert_int_eq(gkv_test_stream_write_later(stream, 300, m->ptr, src, sizeof(src)), 0);
    double t0 = now_s();
    ck_assert_int_eq(gkv_seal_async(c, m, stream), 0);
    ck_assert_msg(now_s() - t0 < 0.1, "the seal waited for the stream (%.3f s)", now_s() - t0);
    ck_assert_int_eq(first_byte(r, "s"), 0); /* the stream is still asleep */
    static char buf[1 << 20];
    gkv_value_info_t vi;
    ck_assert_int_eq(gkv_get_wait(r, KEY("s"), NULL, 5000, buf, sizeof(buf), &vi), 0);
    ck_assert_msg(now_s() - t0 > 0.25, "published after %.3f s", now_s() - t0);
    ck_assert(buf[0] == 'q' && buf[sizeof(buf) - 1] == 'q');
    gkv_test_stream_free(stream);
    gkv_client_close(c);
    gkv_client_close(r);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

START_TEST(bad_async_seals_are_refused_and_leave_the_value_writable)
{
    gkv_daemon_t d = start();
    gkv_client_t *c = connect_or_fail(d.url), *r = connect_or_fail(d.url);
    gkv_set_opts_t nx = {.flags = GKV_SET_NX};
    gkv_mapping_t *m;
    ck_assert_int_eq(gkv_create(c, KEY("x"), 8, &nx, &m), 0);
    fill(m, 'n');
    gkv_fence_t f;
    ck_assert_int_eq(gkv_seal_deferred(c, m, &f), GKV_EINVAL); /* NX: decided after the reply */
    ck_assert_int_eq(m->writable, 1);
    ck_assert_int_eq(gkv_seal(c, m), 0); /* a synchronous seal still can */
    ck_assert_int_eq(first_byte(r, "x"), 'n');
    ck_assert_int_eq(gkv_seal_deferred(c, NULL, &f), GKV_EINVAL);
    gkv_client_close(c);

    /* Without a fence page (no HELLO fences), and with a bad async field: refused. */
    int fd = raw_connect(d.sock);
    int fds[16];
    unsigned nfds;
    raw_hello_fds(fd, 1, fds, 16, &nfds);
    for (unsigned i = 0; i < nfds; i++)
        close(fds[i]);
    gkv_response_t resp;
    uint8_t hdr[4096];
    ck_assert_int_eq(raw_request(fd, GKV_OP_CREATE, (raw_fields_t){.key = "y", .size = 8}, &resp,
                                 hdr, sizeof(hdr)),
                     0);
    uint64_t lease = resp.lease;
    for (uint64_t async = 2; async >= 1; async--) {
        gkv_wr_t w;
        gkv_wr_init(&w);
        gkv_wr_begin(&w);
        gkv_wr_uint(&w, GKV_F_OP, GKV_OP_SEAL);
        gkv_wr_uint(&w, GKV_F_ID, 9);
        gkv_wr_uint(&w, GKV_F_LEASE, lease);
        gkv_wr_uint(&w, GKV_F_ASYNC, async);
        gkv_wr_end(&w);
        ck_assert_int_eq(raw_call(fd, &w, &resp, hdr, sizeof(hdr)),
                         async == 2 ? GKV_EINVAL : GKV_ENOTSUP);
        gkv_wr_fini(&w);
    }
    close(fd);
    ck_assert_int_eq(first_byte(r, "y"), 0);
    gkv_client_close(r);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* SEAL with async of lease, naming fence and target, over a raw connection. */
static int64_t raw_seal_async(int fd, uint64_t lease, uint64_t fence, uint64_t target)
{
    gkv_wr_t w;
    gkv_wr_init(&w);
    gkv_wr_begin(&w);
    gkv_wr_uint(&w, GKV_F_OP, GKV_OP_SEAL);
    gkv_wr_uint(&w, GKV_F_ID, 9);
    gkv_wr_uint(&w, GKV_F_LEASE, lease);
    gkv_wr_uint(&w, GKV_F_ASYNC, 1);
    gkv_wr_uint(&w, GKV_F_FENCE, fence);
    gkv_wr_uint(&w, GKV_F_TARGET, target);
    gkv_wr_end(&w);
    gkv_response_t r;
    uint8_t hdr[4096];
    int64_t st = raw_call(fd, &w, &r, hdr, sizeof(hdr));
    gkv_wr_fini(&w);
    return st;
}

START_TEST(the_daemon_checks_the_counter_and_target_a_seal_names)
{
    gkv_daemon_t d = start();
    gkv_client_t *r = connect_or_fail(d.url);
    int fd = raw_connect(d.sock);
    gkv_wr_t w;
    gkv_wr_init(&w);
    gkv_wr_begin(&w);
    gkv_wr_uint(&w, GKV_F_OP, GKV_OP_HELLO);
    gkv_wr_uint(&w, GKV_F_ID, 1);
    gkv_wr_uint(&w, GKV_F_ZC, 1);
    gkv_wr_uint(&w, GKV_F_FENCES, 1);
    gkv_wr_end(&w);
    ck_assert_int_eq(write(fd, w.sb.data, w.sb.size), (ssize_t)w.sb.size);
    gkv_wr_fini(&w);
    int fds[16];
    unsigned nfds = 0;
    uint8_t resp[4096];
    ck_assert_int_gt(gkv_fds_recv(fd, resp, sizeof(resp), fds, 16, &nfds), 0);
    ck_assert_uint_eq(nfds, 2); /* the memory's, then the fence page's */
    volatile uint64_t *page =
        mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fds[nfds - 1], 0);
    ck_assert(page != MAP_FAILED);
    for (unsigned i = 0; i < nfds; i++)
        close(fds[i]);
    gkv_response_t cr;
    uint8_t hdr[4096];
    ck_assert_int_eq(raw_request(fd, GKV_OP_CREATE, (raw_fields_t){.key = "z", .size = 8}, &cr,
                                 hdr, sizeof(hdr)),
                     0);
    uint64_t lease = cr.lease;
    ck_assert_int_eq(raw_seal_async(fd, lease, 4, 1), GKV_EINVAL);       /* not a counter */
    ck_assert_int_eq(raw_seal_async(fd, lease, 64 * 8, 1), GKV_EINVAL);  /* past the page */
    ck_assert_int_eq(raw_seal_async(fd, lease, 8, 0), GKV_EINVAL);       /* not above 0 */
    ck_assert_int_eq(raw_seal_async(fd, lease, 8, 5), 0);
    ck_assert_int_eq(raw_request(fd, GKV_OP_CREATE, (raw_fields_t){.key = "z", .size = 8}, &cr,
                                 hdr, sizeof(hdr)),
                     0);
    ck_assert_int_eq(raw_seal_async(fd, cr.lease, 8, 5), GKV_EINVAL); /* not above 5 */
    ck_assert_int_eq(first_byte(r, "z"), 0);
    page[1] = 7; /* past the target: the work is done */
    char b[8];
    ck_assert_int_eq(gkv_get_wait(r, KEY("z"), NULL, 5000, b, sizeof(b), NULL), 0);
    munmap((void *)page, 4096);
    close(fd);
    gkv_client_close(r);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* A raw MAP of key that waits (5 s) for it and takes an early frame (id 7). */
static void raw_map_early(int fd, const char *key)
{
    gkv_wr_t w;
    gkv_wr_init(&w);
    gkv_wr_begin(&w);
    gkv_wr_uint(&w, GKV_F_OP, GKV_OP_MAP);
    gkv_wr_uint(&w, GKV_F_ID, 7);
    gkv_wr_bin(&w, GKV_F_KEY, key, strlen(key));
    gkv_wr_uint(&w, GKV_F_WAIT, 5000);
    gkv_wr_uint(&w, GKV_F_EARLY, 1);
    gkv_wr_end(&w);
    ck_assert_int_eq(write(fd, w.sb.data, w.sb.size), (ssize_t)w.sb.size);
    gkv_wr_fini(&w);
}

static int raw_zero_copy(const char *sock)
{
    int fd = raw_connect(sock), fds[16];
    unsigned n = 0;
    raw_hello_fds(fd, 1, fds, 16, &n);
    ck_assert_uint_ge(n, 1);
    for (unsigned i = 0; i < n; i++)
        close(fds[i]);
    return fd;
}

/* Early MAPs on the wire: a waiting MAP that asked for it gets one early frame naming the
 * memory of the value an asynchronous seal of its key waits to publish, with a lease; its answer
 * renews that lease. Both orders: the MAP waiting before the seal, and after it. */
START_TEST(a_waiting_map_gets_an_early_frame_and_its_answer_renews_that_lease)
{
    gkv_daemon_t d = start();
    gkv_client_t *c = connect_or_fail(d.url), *r = connect_or_fail(d.url);
    for (int order = 0; order < 2; order++) {
        const char *key = order ? "early/after" : "early/before";
        int fd = raw_zero_copy(d.sock);
        gkv_fence_t f;
        if (order == 0) { /* the MAP waits first */
            raw_map_early(fd, key);
            info_until(r, "waiting_for_keys", 1, 1000);
        }
        ck_assert_int_eq(gkv_seal_deferred(c, created(c, key, 8192, 'e'), &f), 0);
        if (order == 1)
            raw_map_early(fd, key);
        gkv_response_t er, fr;
        uint8_t h1[4096], h2[4096];
        ck_assert_int_eq(raw_read_response(fd, &er, h1, sizeof(h1)), 0);
        ck_assert_uint_eq(er.id, 7);
        ck_assert_uint_eq(er.early, 1);
        ck_assert_uint_gt(er.lease, 0);
        ck_assert_uint_eq(er.size, 8192);
        ck_assert_uint_eq(er.offset, 0);
        ck_assert_uint_eq(er.length, 8192);
        ck_assert_uint_eq(info_u64(r, "key_waits_early"), (uint64_t)order + 1);
        ck_assert_int_eq(first_byte(r, key), 0); /* not published yet */
        complete(&f);
        ck_assert_int_eq(raw_read_response(fd, &fr, h2, sizeof(h2)), 0);
        ck_assert_uint_eq(fr.id, 7);
        ck_assert_uint_eq(fr.early, 0);
        ck_assert_uint_eq(fr.lease, er.lease); /* renewed: the same value, no new lease */
        ck_assert_uint_eq(fr.size, 8192);
        ck_assert_int_eq(raw_request(fd, GKV_OP_RELEASE, (raw_fields_t){.lease = er.lease}, &fr,
                                     h2, sizeof(h2)),
                         0);
        ck_assert_int_eq(first_byte(r, key), 'e');
        close(fd);
    }
    gkv_client_close(c);
    gkv_client_close(r);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

typedef struct {
    const char *url, *key;
    const gkv_range_t *range;
    uint32_t wait_ms;
    int rc;
    size_t length;
    char first, last;
} consumer_t;

/* A consumer's waiting MAP (libgpukv, which asks for early frames), on a connection of its
 * own: what it got, and the first and last bytes of the value mapped. */
static void *consume(void *arg)
{
    consumer_t *k = arg;
    gkv_client_t *c = connect_or_fail(k->url);
    gkv_mapping_t *m;
    k->rc = gkv_map_wait(c, KEY(k->key), k->range, k->wait_ms, &m);
    if (k->rc == 0) {
        char b[2] = {0, 0};
        k->length = m->length;
        if (m->on_device) {
            ck_assert_int_eq(gkv_test_gpu_read(b, m->ptr, 1), 0);
            ck_assert_int_eq(gkv_test_gpu_read(b + 1, (char *)m->ptr + m->length - 1, 1), 0);
        } else {
            b[0] = ((char *)m->ptr)[0];
            b[1] = ((char *)m->ptr)[m->length - 1];
        }
        k->first = b[0];
        k->last = b[1];
        ck_assert_int_eq(gkv_unmap(c, m), 0);
    }
    gkv_client_close(c);
    return NULL;
}


/* Through libgpukv: the consumer imports the value early and maps it once it is published;
 * when the value it imported early is not the one it gets (its producer went away, a SET came
 * instead), or its wait times out, that import and its lease are let go; a MAP of a range takes
 * no early frame. Nothing stays leased after. */
START_TEST(early_maps_through_the_library_and_their_fallbacks)
{
    gkv_daemon_t d = start();
    gkv_client_t *r = connect_or_fail(d.url);
    /* 1. The value imported early is the one mapped. */
    consumer_t k = {.url = d.url, .key = "lib/1", .wait_ms = 5000};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, consume, &k), 0);
    info_until(r, "waiting_for_keys", 1, 1000);
    gkv_client_t *c = connect_or_fail(d.url);
    gkv_fence_t f;
    ck_assert_int_eq(gkv_seal_deferred(c, created(c, "lib/1", 65536, 'a'), &f), 0);
    info_until(r, "key_waits_early", 1, 1000);
    harness_sleep_ms(20);
    ck_assert_uint_eq(info_u64(r, "waiting_for_keys"), 1); /* still waiting */
    complete(&f);
    pthread_join(t, NULL);
    ck_assert_int_eq(k.rc, 0);
    ck_assert_uint_eq(k.length, 65536);
    ck_assert(k.first == 'a' && k.last == 'a');
    /* 2. The producer goes away before its counter; a SET of the key comes instead. */
    consumer_t k2 = {.url = d.url, .key = "lib/2", .wait_ms = 5000};
    ck_assert_int_eq(pthread_create(&t, NULL, consume, &k2), 0);
    info_until(r, "waiting_for_keys", 1, 1000);
    gkv_client_t *p = connect_or_fail(d.url);
    ck_assert_int_eq(gkv_seal_deferred(p, created(p, "lib/2", 65536, 'x'), &f), 0);
    info_until(r, "key_waits_early", 2, 1000);
    gkv_client_close(p); /* discarded, never published */
    until_none_waits(r);
    char v[100];
    memset(v, 'b', sizeof(v));
    ck_assert_int_eq(gkv_set(r, KEY("lib/2"), v, sizeof(v), NULL), 0);
    pthread_join(t, NULL);
    ck_assert_int_eq(k2.rc, 0);
    ck_assert_uint_eq(k2.length, 100);
    ck_assert(k2.first == 'b' && k2.last == 'b');
    /* 3. The wait times out with an early frame taken. */
    consumer_t k3 = {.url = d.url, .key = "lib/3", .wait_ms = 1500};
    ck_assert_int_eq(pthread_create(&t, NULL, consume, &k3), 0);
    info_until(r, "waiting_for_keys", 1, 1000);
    ck_assert_int_eq(gkv_seal_deferred(c, created(c, "lib/3", 4096, 'y'), &f), 0);
    info_until(r, "key_waits_early", 3, 1000);
    pthread_join(t, NULL);
    ck_assert_int_eq(k3.rc, GKV_ETIMEDOUT);
    /* 4. A range: no early frame. */
    gkv_range_t range = {.offset = 1, .length = 2};
    consumer_t k4 = {.url = d.url, .key = "lib/4", .range = &range, .wait_ms = 5000};
    ck_assert_int_eq(pthread_create(&t, NULL, consume, &k4), 0);
    info_until(r, "waiting_for_keys", 1, 1000);
    gkv_fence_t g;
    ck_assert_int_eq(gkv_seal_deferred(c, created(c, "lib/4", 4096, 'z'), &g), 0);
    harness_sleep_ms(20);
    ck_assert_uint_eq(info_u64(r, "key_waits_early"), 3);
    complete(&g);
    complete(&f); /* lib/3 too (it was never waited for again) */
    pthread_join(t, NULL);
    ck_assert_int_eq(k4.rc, 0);
    ck_assert_uint_eq(k4.length, 2);
    ck_assert(k4.first == 'z');
    gkv_client_close(c);
    until_none_waits(r);
    ck_assert_uint_eq(info_u64(r, "leases"), 0);
    gkv_client_close(r);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("seal_async");
    TCase *t = tcase_create("seal_async");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, a_seal_is_published_only_when_its_counter_holds_the_target);
    tcase_add_test(t, one_connection_s_seals_publish_in_order);
    tcase_add_test(t, seals_completed_in_every_phase_of_the_polling_are_published);
    tcase_add_test(t, a_producer_that_goes_away_first_publishes_nothing);
    tcase_add_test(t, a_producer_killed_before_its_counter_publishes_nothing);
    tcase_add_test(t, at_most_64_seals_wait_per_connection);
    tcase_add_test(t, a_stream_s_earlier_work_comes_before_the_publication);
    tcase_add_test(t, bad_async_seals_are_refused_and_leave_the_value_writable);
    tcase_add_test(t, the_daemon_checks_the_counter_and_target_a_seal_names);
    tcase_add_test(t, a_waiting_map_gets_an_early_frame_and_its_answer_renews_that_lease);
    tcase_add_test(t, early_maps_through_the_library_and_their_fallbacks);
    suite_add_tcase(s, t);
    return s;
}

#include "suite_main.h"
