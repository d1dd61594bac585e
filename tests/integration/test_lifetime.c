/* test_lifetime.c: the connection-lifetime rule (server/conn.h): clients that go away at every
 * stage of a transfer (before, during and after the backend copies of a GET or a SET, a MAP's
 * fence, a CREATE) never make the daemon touch a freed connection, and what they held comes back:
 * staging buffers, reservations, leases. Run under AddressSanitizer in CI (host backend) and on the
 * cuda backend as gpu_lifetime, where copies complete on other threads. Issue 32's first defect
 * (a use-after-free when 5 clients pipelining 10,000 GETs of 64 KiB closed without reading) is the
 * first case. */
#include <check.h>
#include <gpukv/gpukv.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check_client.h"
#include "commands.h"
#include "harness.h"
#include "raw_frame.h"
#include "suite_main.h"

#define BIG (9u << 20) /* three staging chunks: copies ahead on a GET, flights on a SET */

static const size_t sizes[] = {100, 16u << 10, 64u << 10, BIG};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

/* How a client leaves: close(), close after shutting its writing side, or a reset. */
enum { LEAVE_CLOSE, LEAVE_SHUTDOWN, LEAVE_RESET, NLEAVES };

static void leave(int fd, int how)
{
    if (how == LEAVE_SHUTDOWN)
        shutdown(fd, SHUT_WR);
    if (how == LEAVE_RESET) {
        struct linger l = {1, 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    }
    close(fd);
}

/* Appends one request to w: op, id, key, and a declared payload (0: none). */
static void add_request(gkv_wr_t *w, unsigned op, uint64_t id, const char *key, uint64_t payload)
{
    gkv_wr_begin(w);
    gkv_wr_uint(w, GKV_F_OP, op);
    gkv_wr_uint(w, GKV_F_ID, id);
    if (key)
        gkv_wr_bin(w, GKV_F_KEY, key, strlen(key));
    if (payload)
        gkv_wr_uint(w, GKV_F_PAYLOAD, payload);
    gkv_wr_end(w);
}

/* Writes what it can of n bytes without blocking (the daemon may stop reading a client that
 * does not read); returns how many went. */
static size_t write_some(int fd, const void *p, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t w = send(fd, (const char *)p + done, n - done, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    return done;
}

/* Reads and drops up to n bytes, waiting at most 200 ms for each piece. */
static void read_some(int fd, size_t n)
{
    static uint8_t sink[1 << 16];
    while (n) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 200) != 1)
            return;
        ssize_t r = recv(fd, sink, n < sizeof(sink) ? n : sizeof(sink), 0);
        if (r <= 0)
            return;
        n -= (size_t)r;
    }
}

static uint8_t *value_of(size_t size, uint64_t seed)
{
    uint8_t *v = malloc(size);
    ck_assert_ptr_nonnull(v);
    harness_fill(v, size, seed);
    return v;
}

static char *info_text(gkv_client_t *c, bool prometheus)
{
    char *text;
    ck_assert_int_eq(prometheus ? gkv_metrics(c, &text) : gkv_info(c, &text), 0);
    return text;
}

/* The number after "name" (an INFO "name:" or a metrics line's label set) in text, or -1. */
static long long number_after(const char *text, const char *name)
{
    const char *at = strstr(text, name);
    return at ? strtoll(at + strlen(name), NULL, 10) : -1;
}

/* Waits (up to 20 s) until the daemon holds nothing for connections that went away: one client
 * (c), no staging buffer in use, no lease, no unsealed CREATE; then checks that used_bytes is
 * what the stored values take. */
static void assert_nothing_held(gkv_client_t *c, uint64_t stored)
{
    long long clients = -1, staging = -1, leases = -1, creates = -1, used = -1;
    for (int i = 0; i < 200; i++) {
        char *info = info_text(c, false), *metrics = info_text(c, true);
        clients = number_after(info, "\nconnected_clients:");
        leases = number_after(info, "\nleases:");
        creates = number_after(info, "\nunsealed_creates:");
        used = number_after(info, "\nused_bytes:");
        staging = number_after(metrics, "gpukv_staging_buffers{state=\"in_use\"} ");
        gkv_free(info);
        gkv_free(metrics);
        if (clients == 1 && staging == 0 && leases == 0 && creates == 0 &&
            used == (long long)stored)
            return;
        harness_sleep_ms(100);
    }
    ck_abort_msg("still held: %lld clients, %lld staging buffers, %lld leases, %lld creates, "
                 "%lld bytes used (stored %llu)",
                 clients, staging, leases, creates, used, (unsigned long long)stored);
}

/* Every stored value still reads back whole. */
static void assert_values(gkv_client_t *c, uint8_t *const *vals)
{
    uint8_t *back = malloc(BIG);
    char key[16];
    for (size_t i = 0; i < NSIZES; i++) {
        snprintf(key, sizeof(key), "v%zu", i);
        gkv_value_info_t got;
        ck_assert_int_eq(gkv_get(c, key, strlen(key), NULL, back, BIG, &got), 0);
        ck_assert_uint_eq(got.length, sizes[i]);
        ck_assert_int_eq(memcmp(back, vals[i], sizes[i]), 0);
    }
    free(back);
}

static uint64_t store_values(gkv_client_t *c, uint8_t **vals)
{
    char key[16];
    uint64_t total = 0;
    for (size_t i = 0; i < NSIZES; i++) {
        snprintf(key, sizeof(key), "v%zu", i);
        vals[i] = value_of(sizes[i], i + 1);
        ck_assert_int_eq(gkv_set(c, key, strlen(key), vals[i], sizes[i], NULL), 0);
        total += sizes[i];
    }
    return total;
}

/* Issue 32, defect 1: 5 clients each pipeline 10,000 GETs of 64 KiB and close without reading
 * (then the same with the other sizes): the copies completing after the close reached a
 * connection already freed. */
START_TEST(clients_that_close_with_gets_in_flight)
{
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, NULL), 0);
    gkv_client_t *c = connect_or_fail(d.url);
    uint8_t *vals[NSIZES];
    uint64_t stored = store_values(c, vals);
    for (size_t i = 0; i < NSIZES; i++) {
        char key[16];
        snprintf(key, sizeof(key), "v%zu", i);
        gkv_wr_t w;
        gkv_wr_init(&w);
        int n = sizes[i] >= BIG ? 200 : 10000;
        for (int k = 0; k < n; k++)
            add_request(&w, GKV_OP_GET, (uint64_t)k, key, 0);
        for (int round = 0; round < 3; round++) {
            int fds[5];
            for (int k = 0; k < 5; k++) {
                fds[k] = raw_connect(d.sock);
                write_some(fds[k], w.sb.data, w.sb.size);
            }
            for (int k = 0; k < 5; k++)
                leave(fds[k], (round + k) % NLEAVES);
        }
        gkv_wr_fini(&w);
        ck_assert_int_eq(gkv_ping(c), 0);
    }
    assert_nothing_held(c, stored);
    assert_values(c, vals);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
    for (size_t i = 0; i < NSIZES; i++)
        free(vals[i]);
}
END_TEST

/* A GET left at each stage: nothing read, the reply's header read, part of its value read;
 * after 0 to 3 ms, so that the close meets the copies at different points. */
START_TEST(a_get_left_at_every_stage)
{
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, NULL), 0);
    gkv_client_t *c = connect_or_fail(d.url);
    uint8_t *vals[NSIZES];
    uint64_t stored = store_values(c, vals);
    for (size_t i = 0; i < NSIZES; i++) {
        char key[16];
        snprintf(key, sizeof(key), "v%zu", i);
        gkv_wr_t w;
        gkv_wr_init(&w);
        for (int k = 0; k < 4; k++)
            add_request(&w, GKV_OP_GET, (uint64_t)k, key, 0);
        size_t reads[] = {0, 16, 64 + sizes[i] / 2, 64 + sizes[i] + sizes[i] / 3};
        for (size_t r = 0; r < sizeof(reads) / sizeof(reads[0]); r++)
            for (int delay = 0; delay < 4; delay++) {
                int fd = raw_connect(d.sock);
                write_some(fd, w.sb.data, w.sb.size);
                read_some(fd, reads[r]);
                if (delay)
                    harness_sleep_ms(delay);
                leave(fd, (int)(r + (size_t)delay) % NLEAVES);
            }
        gkv_wr_fini(&w);
        ck_assert_int_eq(gkv_ping(c), 0);
    }
    assert_nothing_held(c, stored);
    assert_values(c, vals);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
    for (size_t i = 0; i < NSIZES; i++)
        free(vals[i]);
}
END_TEST

/* A SET left at each stage: its header alone, part of its payload, its payload but one byte, a
 * chunk and a byte, the whole payload without reading the reply. A SET that did not arrive
 * whole is not stored and its reservation comes back. */
START_TEST(a_set_left_at_every_stage)
{
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, NULL), 0);
    gkv_client_t *c = connect_or_fail(d.url);
    uint8_t *vals[NSIZES];
    uint64_t stored = store_values(c, vals);
    uint8_t *payload = value_of(BIG, 99);
    for (size_t i = 0; i < NSIZES; i++) {
        size_t n = sizes[i];
        size_t sent[] = {0, n / 2, n - 1, n > (4u << 20) ? (4u << 20) + 1 : n / 3, n};
        for (size_t s = 0; s < sizeof(sent) / sizeof(sent[0]); s++)
            for (int delay = 0; delay < 3; delay++) {
                gkv_wr_t w;
                gkv_wr_init(&w);
                add_request(&w, GKV_OP_SET, 1, "partial", n);
                int fd = raw_connect(d.sock);
                write_some(fd, w.sb.data, w.sb.size);
                gkv_wr_fini(&w);
                write_some(fd, payload, sent[s]);
                if (delay)
                    harness_sleep_ms(delay);
                leave(fd, (int)(s + (size_t)delay) % NLEAVES);
                /* The whole payload may have been stored before the close: take it away. */
                if (sent[s] == n) {
                    harness_sleep_ms(20);
                    const void *k = "partial";
                    size_t kl = 7;
                    ck_assert_int_ge(gkv_del(c, &k, &kl, 1), 0);
                }
            }
        ck_assert_int_eq(gkv_ping(c), 0);
    }
    const void *k = "partial";
    size_t kl = 7;
    harness_sleep_ms(100);
    ck_assert_int_ge(gkv_del(c, &k, &kl, 1), 0);
    assert_nothing_held(c, stored);
    assert_values(c, vals);
    free(payload);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
    for (size_t i = 0; i < NSIZES; i++)
        free(vals[i]);
}
END_TEST

/* Zero-copy: a client that maps values (a MAP waits for a fence) or creates one and goes away at
 * once: its leases end, its unsealed CREATE is dropped, the values stay. */
START_TEST(a_zero_copy_client_left_at_every_stage)
{
    gkv_daemon_t d;
    const char *const extra[] = {"--host-zero-copy", "yes", NULL};
    ck_assert_int_eq(harness_start(&d, extra), 0);
    gkv_client_t *c = connect_or_fail(d.url);
    uint8_t *vals[NSIZES];
    uint64_t stored = store_values(c, vals);
    for (int round = 0; round < 12; round++) {
        int fd = raw_connect(d.sock);
        int fds[8];
        unsigned nfds = 0;
        raw_hello_fds(fd, 1, fds, 8, &nfds);
        for (unsigned i = 0; i < nfds; i++)
            close(fds[i]);
        gkv_wr_t w;
        gkv_wr_init(&w);
        for (size_t i = 0; i < NSIZES; i++) {
            char key[16];
            snprintf(key, sizeof(key), "v%zu", i);
            add_request(&w, GKV_OP_MAP, 10 + i, key, 0);
        }
        gkv_wr_begin(&w);
        gkv_wr_uint(&w, GKV_F_OP, GKV_OP_CREATE);
        gkv_wr_uint(&w, GKV_F_ID, 20);
        gkv_wr_bin(&w, GKV_F_KEY, "created", 7);
        gkv_wr_uint(&w, GKV_F_SIZE, 1u << 20);
        gkv_wr_end(&w);
        write_some(fd, w.sb.data, w.sb.size);
        gkv_wr_fini(&w);
        read_some(fd, (size_t)round * 40);
        if (round % 3)
            harness_sleep_ms(round % 3);
        leave(fd, round % NLEAVES);
    }
    ck_assert_int_eq(gkv_ping(c), 0);
    assert_nothing_held(c, stored);
    assert_values(c, vals);
    uint8_t b;
    ck_assert_int_eq(gkv_get(c, "created", 7, NULL, &b, 1, NULL), GKV_ENOTFOUND);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
    for (size_t i = 0; i < NSIZES; i++)
        free(vals[i]);
}
END_TEST

/* A load of clients that come and go mid-transfer while the daemon receives SIGTERM: it exits
 * cleanly (under AddressSanitizer, any touch of a freed connection aborts it). */
typedef struct {
    const char *sock;
    atomic_bool stop;
    int id;
} churn_t;

static void *churn(void *arg)
{
    churn_t *t = arg;
    uint8_t *payload = value_of(BIG, 5);
    for (unsigned round = 0; !atomic_load(&t->stop); round++) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", t->sock);
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
            if (fd >= 0)
                close(fd);
            harness_sleep_ms(5);
            continue;
        }
        gkv_wr_t w;
        gkv_wr_init(&w);
        char key[16];
        snprintf(key, sizeof(key), "v%zu", (round + (size_t)t->id) % NSIZES);
        for (int k = 0; k < 50; k++)
            add_request(&w, GKV_OP_GET, (uint64_t)k, key, 0);
        size_t n = sizes[(round / 2 + (unsigned)t->id) % NSIZES];
        add_request(&w, GKV_OP_SET, 99, "churn", n);
        write_some(fd, w.sb.data, w.sb.size);
        write_some(fd, payload, (round % 3) ? n : n / 2);
        gkv_wr_fini(&w);
        read_some(fd, (round % 5) * 5000);
        leave(fd, (int)(round % NLEAVES));
    }
    free(payload);
    return NULL;
}

START_TEST(sigterm_under_a_load_of_clients_that_come_and_go)
{
    gkv_daemon_t d;
    const char *const extra[] = {"--shutdown-grace", "1s", NULL};
    ck_assert_int_eq(harness_start(&d, extra), 0);
    gkv_client_t *c = connect_or_fail(d.url);
    uint8_t *vals[NSIZES];
    store_values(c, vals);
    gkv_client_close(c);
    enum { THREADS = 4 };
    churn_t t[THREADS];
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
        t[i] = (churn_t){.sock = d.sock, .id = i};
        atomic_init(&t[i].stop, false);
        ck_assert_int_eq(pthread_create(&th[i], NULL, churn, &t[i]), 0);
    }
    harness_sleep_ms(1500);
    kill(d.pid, SIGTERM);
    int rc = harness_wait_exit(&d, 15000);
    for (int i = 0; i < THREADS; i++) {
        atomic_store(&t[i].stop, true);
        pthread_join(th[i], NULL);
    }
    ck_assert_int_eq(rc, 0);
    for (size_t i = 0; i < NSIZES; i++)
        free(vals[i]);
}
END_TEST

START_TEST(the_descriptor_table_is_grown_before_the_first_client)
{
    /* server/daemon/fdreserve.h: sized at start for --maxclients and 1024 more (or the limit),
     * so that no accept4 or socket() later waits for the kernel to grow it. */
    gkv_daemon_t d;
    const char *const extra[] = {"--maxclients", "3000", NULL};
    ck_assert_int_eq(harness_start(&d, extra), 0);
    long long size = harness_proc_number(d.pid, "status", "FDSize:");
    long long limit = harness_proc_number(d.pid, "limits", "Max open files");
    harness_stop(&d);
    ck_assert_int_gt(limit, 0);
    long long want = 3000 + 1024 < limit ? 3000 + 1024 : limit;
    ck_assert_msg(size >= want, "FDSize %lld, want %lld (limit %lld)", size, want, limit);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("lifetime");
    TCase *t = tcase_create("lifetime");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, clients_that_close_with_gets_in_flight);
    tcase_add_test(t, a_get_left_at_every_stage);
    tcase_add_test(t, a_set_left_at_every_stage);
    tcase_add_test(t, a_zero_copy_client_left_at_every_stage);
    tcase_add_test(t, sigterm_under_a_load_of_clients_that_come_and_go);
    tcase_add_test(t, the_descriptor_table_is_grown_before_the_first_client);
    suite_add_tcase(s, t);
    return s;
}
