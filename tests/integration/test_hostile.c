/* test_hostile.c: clients that misbehave on purpose (issue 12's hostile run), each against its
 * own gpukvd started with the limits the case needs. Every case failed on the daemon before the
 * fix it names. Waits poll INFO with a generous deadline: nothing here asserts a timing. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <gpukv/gpukv.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "harness.h"
#include "probe.h"
#include "raw_frame.h"

#define HDR_CAP (64u << 10)

/* A connected TCP socket to "HOST:PORT" (IPv4), or the test fails. */
static int raw_connect_tcp(const char *hostport)
{
    int fd = harness_tcp_connect(hostport);
    ck_assert_msg(fd >= 0, "connect to %s", hostport);
    return fd;
}

static void start(gkv_daemon_t *d, const char *const *extra)
{
    ck_assert_int_eq(harness_start(d, extra), 0);
}

static int64_t del1len(gkv_client_t *c, const void *key, size_t kl)
{
    return gkv_del(c, &key, &kl, 1);
}

static int64_t del1(gkv_client_t *c, const char *key)
{
    return del1len(c, key, strlen(key));
}

static gkv_client_t *connect_to(const gkv_daemon_t *d)
{
    gkv_client_t *c;
    ck_assert_int_eq(gkv_client_connect(d->url, &c), 0);
    return c;
}

/* The number after "field:" in INFO. */
static uint64_t info_u64(const gkv_daemon_t *d, const char *field)
{
    gkv_client_t *c = connect_to(d);
    char *info, pat[64];
    ck_assert_int_eq(gkv_info(c, &info), 0);
    snprintf(pat, sizeof(pat), "\n%s:", field);
    const char *at = strstr(info, pat);
    ck_assert_msg(at != NULL, "INFO has no %s", field);
    uint64_t v = strtoull(at + strlen(pat), NULL, 10);
    gkv_free(info);
    gkv_client_close(c);
    return v;
}

/* Polls INFO until field reaches at least want (up to 20 s); returns the last value. */
static uint64_t wait_info_at_least(const gkv_daemon_t *d, const char *field, uint64_t want)
{
    uint64_t v = 0;
    for (int i = 0; i < 200 && (v = info_u64(d, field)) < want; i++)
        harness_sleep_ms(100);
    return v;
}

/* A request frame: op, id, key and a declared payload (0: none), written on fd. */
static void send_request(int fd, unsigned op, uint64_t id, const char *key, uint64_t payload)
{
    gkv_wr_t w;
    gkv_wr_init(&w);
    gkv_wr_begin(&w);
    gkv_wr_uint(&w, GKV_F_OP, op);
    gkv_wr_uint(&w, GKV_F_ID, id);
    if (key)
        gkv_wr_bin(&w, GKV_F_KEY, key, strlen(key));
    if (payload)
        gkv_wr_uint(&w, GKV_F_PAYLOAD, payload);
    gkv_wr_end(&w);
    ck_assert_int_eq(write(fd, w.sb.data, w.sb.size), (ssize_t)w.sb.size);
    gkv_wr_fini(&w);
}

/* Appends one request frame to w: op, id and, when bytes is not NULL, field as bin. */
static void add_frame(gkv_wr_t *w, unsigned op, uint64_t id, unsigned field, const char *bytes)
{
    gkv_wr_begin(w);
    gkv_wr_uint(w, GKV_F_OP, op);
    gkv_wr_uint(w, GKV_F_ID, id);
    if (bytes)
        gkv_wr_bin(w, field, bytes, strlen(bytes));
    gkv_wr_end(w);
}

/* Writes n requests of op (ids 0..n-1, field = bytes) on fd in one write. */
static void pipeline(int fd, unsigned op, int n, unsigned field, const char *bytes)
{
    gkv_wr_t w;
    gkv_wr_init(&w);
    for (int i = 0; i < n; i++)
        add_frame(&w, op, (uint64_t)i, field, bytes);
    ck_assert_int_eq(write(fd, w.sb.data, w.sb.size), (ssize_t)w.sb.size);
    gkv_wr_fini(&w);
}

/* True once the peer closed fd (EOF or reset), reading and dropping what comes first; waits up
 * to 20 s. */
static bool closed_by_peer(int fd)
{
    static uint8_t sink[1 << 16];
    for (int i = 0; i < 200; i++) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 100) == 1) {
            ssize_t n = recv(fd, sink, sizeof(sink), 0);
            if (n <= 0)
                return true;
        }
    }
    return false;
}

/* Failure 5: a prefix size counts at most GKV_SIZE_WALK keys per request and continues from a
 * cursor; the library sums the pages. The whole keyspace's size is kept, not walked. */
START_TEST(getsize_of_a_prefix_pages_with_a_cursor)
{
    gkv_daemon_t d;
    start(&d, NULL);
    gkv_client_t *c = connect_to(&d);
    uint8_t v[64] = {0};
    uint64_t want = 0;
    char key[32];
    for (int i = 0; i < 5000; i++) {
        snprintf(key, sizeof(key), "p/%05d", i);
        ck_assert_int_eq(gkv_set(c, key, strlen(key), v, (size_t)(i % 61) + 1, NULL), 0);
        want += (uint64_t)(i % 61) + 1;
    }
    ck_assert_int_eq(gkv_set(c, "q", 1, v, 7, NULL), 0);
    uint64_t bytes = 0, count = 0;
    ck_assert_int_eq(gkv_getsize_prefix(c, "p/", 2, &bytes, &count), 0);
    ck_assert_uint_eq(count, 5000);
    ck_assert_uint_eq(bytes, want);
    /* Overwrites and deletes keep the whole keyspace's sum right. */
    ck_assert_int_eq(gkv_set(c, "p/00000", 7, v, 60, NULL), 0);
    ck_assert_int_eq(del1(c, "p/00001"), 1);
    want += 60 - 1 - 2;
    ck_assert_int_eq(gkv_getsize_prefix(c, "", 0, &bytes, &count), 0);
    ck_assert_uint_eq(count, 5000);
    ck_assert_uint_eq(bytes, want + 7);
    /* One request: a page and a cursor. */
    int fd = raw_connect(d.sock);
    gkv_wr_t w;
    gkv_wr_init(&w);
    add_frame(&w, GKV_OP_GETSIZE, 1, GKV_F_PREFIX, "p/");
    static uint8_t hdr[HDR_CAP];
    gkv_response_t r;
    ck_assert_int_eq(raw_call(fd, &w, &r, hdr, sizeof(hdr)), 0);
    ck_assert_uint_eq(r.count, GKV_SIZE_WALK);
    ck_assert(r.has_cursor && r.cursor.len > 0);
    gkv_wr_fini(&w);
    close(fd);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* Failure 5: 2,000 pipelined prefix sizes do not hold the loop: another client's GET is answered
 * while most of them are still to come (each connection handles GKV_FRAMES_PER_TURN requests,
 * then the others get their turn). */
START_TEST(a_pipelining_client_does_not_starve_others)
{
    enum { KEYS = 5000, PIPELINED = 2000 };
    gkv_daemon_t d;
    start(&d, NULL);
    gkv_client_t *c = connect_to(&d);
    char key[32];
    for (int i = 0; i < KEYS; i++) {
        snprintf(key, sizeof(key), "p/%05d", i);
        ck_assert_int_eq(gkv_set(c, key, strlen(key), "x", 1, NULL), 0);
    }
    int fd = raw_connect(d.sock);
    pipeline(fd, GKV_OP_GETSIZE, PIPELINED, GKV_F_PREFIX, "p/");
    char got[4];
    ck_assert_int_eq(gkv_get(c, "p/00042", 7, NULL, got, sizeof(got), NULL), 0);
    /* The replies the pipelining client could read by then. */
    static uint8_t hdr[HDR_CAP];
    gkv_response_t r;
    int early = 0;
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 0) != 1)
            break;
        ck_assert_int_eq(raw_read_response(fd, &r, hdr, sizeof(hdr)), 0);
        early++;
    }
    ck_assert_msg(early < PIPELINED, "the GET waited for all %d pipelined requests", PIPELINED);
    for (int i = early; i < PIPELINED; i++) {
        ck_assert_int_eq(raw_read_response(fd, &r, hdr, sizeof(hdr)), 0);
        ck_assert_uint_eq(r.id, (uint64_t)i);
        ck_assert_uint_eq(r.count, GKV_SIZE_WALK);
    }
    close(fd);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* Issue 32: a client that pipelines more GETs than --output-buffer-limit holds and then waits
 * for its replies gets every one. Requests read while the output was full stayed in the input
 * buffer and were handled only when more input came: 3,000 GETs of 4 KiB got 1,018 replies. */
START_TEST(pipelining_past_the_output_limit_gets_every_reply)
{
    static const struct {
        size_t size;
        int n;
    } cases[] = {{4u << 10, 3000}, {16u << 10, 2000}, {64u << 10, 300}, {100, 5000}};
    gkv_daemon_t d;
    const char *const extra[] = {"--output-buffer-limit", "1M", NULL};
    start(&d, extra);
    gkv_client_t *c = connect_to(&d);
    static uint8_t v[64u << 10], got[64u << 10];
    static uint8_t hdr[HDR_CAP];
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        harness_fill(v, cases[k].size, k);
        ck_assert_int_eq(gkv_set(c, "v", 1, v, cases[k].size, NULL), 0);
        int fd = raw_connect(d.sock);
        pipeline(fd, GKV_OP_GET, cases[k].n, GKV_F_KEY, "v");
        harness_sleep_ms(300); /* the daemon fills its output and stops */
        for (int i = 0; i < cases[k].n; i++) {
            struct pollfd p = {fd, POLLIN, 0};
            ck_assert_msg(poll(&p, 1, 10000) == 1, "%zu-byte GETs: reply %d of %d never came",
                          cases[k].size, i, cases[k].n);
            gkv_response_t r;
            ck_assert_int_eq(raw_read_response(fd, &r, hdr, sizeof(hdr)), 0);
            ck_assert_uint_eq(r.id, (uint64_t)i);
            ck_assert_uint_eq(r.payload_len, cases[k].size);
            ck_assert_int_eq(recv(fd, got, r.payload_len, MSG_WAITALL), (ssize_t)r.payload_len);
            ck_assert_int_eq(memcmp(got, v, cases[k].size), 0);
        }
        close(fd);
    }
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* Failure 4: connections that send a header a byte at a time are closed after --frame-timeout. */
START_TEST(a_header_that_never_completes_is_cut_off)
{
    enum { N = 20 };
    gkv_daemon_t d;
    const char *const extra[] = {"--frame-timeout", "1s", NULL};
    start(&d, extra);
    int fds[N];
    for (int i = 0; i < N; i++) {
        fds[i] = raw_connect(d.sock);
        ck_assert_int_eq(write(fds[i], "\x00\x00", 2), 2); /* half a length prefix */
    }
    ck_assert_uint_ge(wait_info_at_least(&d, "frame_timeouts", N), N);
    for (int i = 0; i < N; i++) {
        ck_assert(closed_by_peer(fds[i]));
        close(fds[i]);
    }
    ck_assert_uint_eq(info_u64(&d, "connected_clients"), 1);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* Failure 4: a SET that declares 60 MiB and sends one byte holds a reservation that makes every
 * other SET fail; when its payload stalls past --frame-timeout the connection closes and the
 * reservation is released. */
START_TEST(a_stalled_set_payload_gives_back_its_reservation)
{
    gkv_daemon_t d;
    const char *const extra[] = {"--frame-timeout", "1s", "--maxmemory", "64M", NULL};
    start(&d, extra);
    int fd = raw_connect(d.sock);
    send_request(fd, GKV_OP_SET, 1, "hog", 60u << 20);
    ck_assert_int_eq(write(fd, "x", 1), 1);
    gkv_client_t *c = connect_to(&d);
    size_t n = 8u << 20;
    void *v = calloc(1, n);
    int rc = gkv_set(c, "other", 5, v, n, NULL);
    ck_assert_int_eq(rc, GKV_EOOM); /* the reservation holds */
    for (int i = 0; i < 200 && rc; i++) {
        harness_sleep_ms(100);
        rc = gkv_set(c, "other", 5, v, n, NULL);
    }
    ck_assert_int_eq(rc, 0);
    ck_assert_uint_ge(info_u64(&d, "frame_timeouts"), 1);
    ck_assert(closed_by_peer(fd));
    close(fd);
    free(v);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* Failure 4: a client that asks for a large value and never reads is disconnected after
 * --write-timeout, and the deleted value's memory it pinned comes back. */
START_TEST(a_client_that_never_reads_is_disconnected)
{
    gkv_daemon_t d;
    const char *const extra[] = {"--write-timeout", "1s", NULL};
    start(&d, extra);
    gkv_client_t *c = connect_to(&d);
    size_t n = 8u << 20;
    void *v = calloc(1, n);
    ck_assert_int_eq(gkv_set(c, "big", 3, v, n, NULL), 0);
    int fd = raw_connect(d.sock);
    for (int i = 0; i < 4; i++)
        send_request(fd, GKV_OP_GET, (uint64_t)i, "big", 0);
    harness_sleep_ms(200);
    ck_assert_int_eq(del1(c, "big"), 1);
    ck_assert_uint_ge(wait_info_at_least(&d, "write_timeouts", 1), 1);
    uint64_t used = info_u64(&d, "used_bytes");
    for (int i = 0; i < 200 && used; i++) {
        harness_sleep_ms(100);
        used = info_u64(&d, "used_bytes");
    }
    ck_assert_uint_eq(used, 0);
    close(fd);
    free(v);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* --idle-timeout closes a connection that has nothing in flight; off by default. */
START_TEST(idle_connections_close_after_the_idle_timeout)
{
    gkv_daemon_t d;
    const char *const extra[] = {"--idle-timeout", "1s", NULL};
    start(&d, extra);
    int fd = raw_connect(d.sock);
    ck_assert_uint_ge(wait_info_at_least(&d, "idle_timeouts", 1), 1);
    ck_assert(closed_by_peer(fd));
    close(fd);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* Failure 3: SIGTERM ends within --shutdown-grace although a client pipelines GETs and never
 * reads its replies. */
START_TEST(sigterm_ends_although_a_client_never_reads)
{
    gkv_daemon_t d;
    const char *const extra[] = {"--shutdown-grace", "1s", NULL};
    start(&d, extra);
    gkv_client_t *c = connect_to(&d);
    size_t n = 8u << 10; /* small: replies queue in the connection's output, not in staging */
    void *v = calloc(1, n);
    ck_assert_int_eq(gkv_set(c, "v", 1, v, n, NULL), 0);
    gkv_client_close(c);
    /* 1,000 GETs in one write: 8 MB of replies, more than the output limit and the socket
     * take, so the daemon stops reading with replies queued that nobody reads. */
    int fd = raw_connect(d.sock);
    pipeline(fd, GKV_OP_GET, 1000, GKV_F_KEY, "v");
    harness_sleep_ms(300);
    ck_assert_int_eq(harness_stop(&d), 0); /* -1: it had to be killed after 15 s */
    close(fd);
    free(v);
}
END_TEST

/* Failure 3: a SET still receiving when the grace period ends is answered SHUTDOWN (its value
 * not stored), and requests read but not yet handled are answered SHUTDOWN too. */
START_TEST(sigterm_answers_what_is_pending_with_shutdown)
{
    gkv_daemon_t d;
    const char *const extra[] = {"--shutdown-grace", "1s", "--output-buffer-limit", "64K", NULL};
    start(&d, extra);
    gkv_client_t *c = connect_to(&d);
    char v[32 << 10] = {0};
    ck_assert_int_eq(gkv_set(c, "v", 1, v, sizeof(v), NULL), 0);
    gkv_client_close(c);
    int setter = raw_connect(d.sock);
    send_request(setter, GKV_OP_SET, 99, "late", 4u << 20);
    ck_assert_int_eq(write(setter, v, 100), 100);
    int getter = raw_connect(d.sock);
    /* One write, so the daemon reads all 200 before its output fills up and it stops reading
     * (200 separate writes let it stop after the first few, leaving none to refuse). */
    pipeline(getter, GKV_OP_GET, 200, GKV_F_KEY, "v");
    harness_sleep_ms(
        500); /* the getter's output fills up; the rest of its requests wait in its input */
    kill(d.pid, SIGTERM);
    static uint8_t hdr[HDR_CAP];
    gkv_response_t r;
    int ok = 0, refused = 0;
    for (;;) {
        struct pollfd p = {getter, POLLIN, 0};
        uint8_t pre[4];
        if (poll(&p, 1, 5000) != 1 || recv(getter, pre, 4, MSG_PEEK | MSG_WAITALL) != 4)
            break;
        int64_t st = raw_read_response(getter, &r, hdr, sizeof(hdr));
        if (st == 0) {
            ck_assert_int_eq(refused, 0); /* answers stay in order */
            static char sink[32 << 10];
            ck_assert_int_eq(recv(getter, sink, r.payload_len, MSG_WAITALL),
                             (ssize_t)r.payload_len);
            ok++;
        } else {
            ck_assert_int_eq(st, GKV_ESHUTDOWN);
            refused++;
        }
    }
    ck_assert_msg(ok > 0 && refused > 0, "%d answered, %d refused", ok, refused);
    ck_assert_int_le(ok + refused, 200);
    ck_assert_int_eq(raw_read_response(setter, &r, hdr, sizeof(hdr)), GKV_ESHUTDOWN);
    ck_assert_uint_eq(r.id, 99);
    ck_assert_int_eq(harness_stop(&d), 0);
    close(setter);
    close(getter);
}
END_TEST

/* Failure 2: 32 clients that ask for 8 MiB and never read (or send a SET header and one byte of
 * its payload) held every staging buffer, and every other large transfer waited for as long as
 * they stayed. Now a stalled client gives its buffer to those waiting. */
static void staging_is_not_held_by_stalled_clients(bool by_set)
{
    enum { STALLED = 32 };
    gkv_daemon_t d;
    start(&d, NULL); /* values over 16 KiB move through staging on every backend */
    gkv_client_t *c = connect_to(&d);
    ck_assert_int_eq(gkv_client_set_timeout(c, 20000), 0);
    size_t n = 8u << 20;
    uint8_t *v = malloc(n), *back = malloc(n);
    harness_fill(v, n, 12);
    ck_assert_int_eq(gkv_set(c, "big", 3, v, n, NULL), 0);
    int fds[STALLED];
    for (int i = 0; i < STALLED; i++) {
        fds[i] = raw_connect(d.sock);
        if (by_set) {
            send_request(fds[i], GKV_OP_SET, 1, "stalled", n);
            ck_assert_int_eq(write(fds[i], "x", 1), 1);
        } else {
            send_request(fds[i], GKV_OP_GET, 1, "big", 0);
        }
    }
    harness_sleep_ms(300); /* they take their buffers */
    ck_assert_int_eq(gkv_set(c, "big2", 4, v, n, NULL), 0);
    ck_assert_int_eq(gkv_get(c, "big2", 4, NULL, back, n, NULL), 0);
    ck_assert_int_eq(memcmp(v, back, n), 0);
    ck_assert_uint_ge(info_u64(&d, "staging_yields"), 1);
    for (int i = 0; i < STALLED; i++)
        close(fds[i]);
    /* What the stalled GETs had half sent is not what the others get: a new reader sees all. */
    ck_assert_int_eq(gkv_get(c, "big", 3, NULL, back, n, NULL), 0);
    ck_assert_int_eq(memcmp(v, back, n), 0);
    free(v);
    free(back);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}

START_TEST(readers_that_stall_give_back_staging)
{
    staging_is_not_held_by_stalled_clients(false);
}
END_TEST

START_TEST(writers_that_stall_give_back_staging)
{
    staging_is_not_held_by_stalled_clients(true);
}
END_TEST

/* A reader that stalls, gives its buffer back and later reads gets every byte, in order. More
 * readers than staging buffers: at most 32 of them have their send buffer raised (conn_transfer.c
 * widen_sndbuf), and each is restored when its reply is out. */
START_TEST(a_reader_that_stalls_then_reads_gets_every_byte)
{
    enum { STALLED = 40 };
    gkv_daemon_t d;
    start(&d, NULL); /* values over 16 KiB move through staging on every backend */
    gkv_client_t *c = connect_to(&d);
    size_t n = 12u << 20;
    uint8_t *v = malloc(n), *back = malloc(n);
    harness_fill(v, n, 99);
    ck_assert_int_eq(gkv_set(c, "big", 3, v, n, NULL), 0);
    int fds[STALLED];
    for (int i = 0; i < STALLED; i++) {
        fds[i] = raw_connect(d.sock);
        send_request(fds[i], GKV_OP_GET, 5, "big", 0);
    }
    harness_sleep_ms(300);
    ck_assert_int_eq(gkv_set(c, "other", 5, v, n, NULL), 0); /* makes them yield */
    uint64_t wide = info_u64(&d, "wide_send_buffers");
    ck_assert_uint_ge(wide, 1);
    ck_assert_uint_le(wide, 32);
    static uint8_t hdr[HDR_CAP];
    gkv_response_t r;
    for (int i = 0; i < STALLED; i++) {
        ck_assert_int_eq(raw_read_response(fds[i], &r, hdr, sizeof(hdr)), 0);
        ck_assert_uint_eq(r.payload_len, n);
        ck_assert_int_eq(recv(fds[i], back, n, MSG_WAITALL), (ssize_t)n);
        ck_assert_msg(memcmp(v, back, n) == 0, "reader %d got other bytes", i);
    }
    /* Every reply is out; the daemon restores the last buffers right after their last bytes. */
    for (int i = 0; i < 100 && (wide = info_u64(&d, "wide_send_buffers")) > 0; i++)
        harness_sleep_ms(20);
    ck_assert_uint_eq(wide, 0);
    for (int i = 0; i < STALLED; i++)
        close(fds[i]);
    ck_assert_uint_ge(info_u64(&d, "staging_yields"), 1);
    free(v);
    free(back);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* Failure 8: 100,000 empty values with 1 KiB keys and 4 KiB metadata cost 782 MiB of host
 * memory that no limit counted. Keys and metadata now count against --maxmemory-keys (INFO
 * key_memory); past it a SET is refused with GKV_ENOMEM and nothing stored is lost. */
START_TEST(keys_and_metadata_count_against_a_host_limit)
{
    gkv_daemon_t d;
    const char *const extra[] = {"--maxmemory-keys", "4M", NULL};
    start(&d, extra);
    gkv_client_t *c = connect_to(&d);
    static char key[1000], meta[4096];
    memset(key, 'k', sizeof(key));
    memset(meta, 'm', sizeof(meta));
    gkv_set_opts_t o = {.meta = meta, .meta_len = sizeof(meta)};
    int i, rc = 0;
    for (i = 0; i < 2000; i++) {
        snprintf(key, sizeof(key), "%06d", i);
        key[6] = 'k';
        if ((rc = gkv_set(c, key, sizeof(key), NULL, 0, &o)))
            break;
    }
    ck_assert_int_eq(rc, GKV_ENOMEM);
    ck_assert_msg(strstr(gkv_client_errmsg(c), "maxmemory-keys") != NULL, "%s",
                  gkv_client_errmsg(c));
    ck_assert_int_gt(i, 500); /* 4 MiB holds about 780 of them */
    ck_assert_int_lt(i, 1000);
    ck_assert_uint_le(info_u64(&d, "key_memory"), 4u << 20);
    ck_assert_uint_eq(info_u64(&d, "maxmemory_keys"), 4u << 20);
    ck_assert_uint_eq(info_u64(&d, "keys"), (uint64_t)i);
    /* Deleting makes room again. */
    snprintf(key, sizeof(key), "%06d", 0);
    key[6] = 'k';
    ck_assert_int_eq(del1len(c, key, sizeof(key)), 1);
    snprintf(key, sizeof(key), "%06d", i);
    key[6] = 'k';
    ck_assert_int_eq(gkv_set(c, key, sizeof(key), NULL, 0, &o), 0);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* Writes a token file in d's directory (after start: harness_start makes the directory). */
static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    chmod(path, 0600);
}

#define TOKEN "correct-horse-battery-staple"

/* Failure 6: over a listener anyone can reach, nothing ran without a token. With
 * --auth-token-file only HELLO and PING run before HELLO presents the token; a wrong token is
 * refused (and slowed), big frames before it are refused, libgpukv sends $GPUKV_TOKEN. */
START_TEST(a_token_is_required_when_one_is_set)
{
    char path[] = "/tmp/gkv-token-XXXXXX";
    int tfd = mkstemp(path);
    ck_assert_int_ge(tfd, 0);
    close(tfd);
    write_file(path, TOKEN "\n");
    setenv("GPUKV_TOKEN", TOKEN, 1); /* the harness's own clients */
    gkv_daemon_t d;
    const char *const extra[] = {"--auth-token-file", path, NULL};
    start(&d, extra);
    static uint8_t hdr[HDR_CAP];
    gkv_response_t r;
    for (int via_tcp = 0; via_tcp < 2; via_tcp++) {
        int fd = raw_connect(d.sock);
        if (via_tcp) {
            close(fd);
            fd = raw_connect_tcp(d.tcp_url + 4);
        }
        ck_assert_int_eq(raw_request(fd, GKV_OP_PING, (raw_fields_t){0}, &r, hdr, sizeof(hdr)), 0);
        ck_assert_int_eq(raw_request(fd, GKV_OP_INFO, (raw_fields_t){0}, &r, hdr, sizeof(hdr)),
                         GKV_EAUTH);
        send_request(fd, GKV_OP_SET, 3, "k", 0);
        ck_assert_int_eq(raw_read_response(fd, &r, hdr, sizeof(hdr)), GKV_EAUTH);
        /* A wrong token: refused, then the connection closes. */
        gkv_wr_t w;
        gkv_wr_init(&w);
        add_frame(&w, GKV_OP_HELLO, 4, GKV_F_TOKEN, "wrong-token-0123456789");
        ck_assert_int_eq(raw_call(fd, &w, &r, hdr, sizeof(hdr)), GKV_EAUTH);
        gkv_wr_fini(&w);
        ck_assert(closed_by_peer(fd));
        close(fd);
    }
    /* Headers over 16 KiB are refused before authentication. */
    int fd = raw_connect(d.sock);
    static char big[20000];
    memset(big, 'k', sizeof(big) - 1);
    send_request(fd, GKV_OP_GET, 5, big, 0);
    ck_assert_int_eq(raw_read_response(fd, &r, hdr, sizeof(hdr)), GKV_EPROTO);
    close(fd);
    /* libgpukv with the right token works; with a wrong one connecting fails with GKV_EAUTH. */
    gkv_client_t *c = connect_to(&d);
    ck_assert_int_eq(gkv_set(c, "k", 1, "v", 1, NULL), 0);
    gkv_client_close(c);
    setenv("GPUKV_TOKEN", "not-the-token-at-all", 1);
    ck_assert_int_eq(gkv_client_connect(d.url, &c), GKV_EAUTH);
    unsetenv("GPUKV_TOKEN");
    setenv("GPUKV_TOKEN_FILE", path, 1);
    c = connect_to(&d);
    ck_assert_uint_ge(info_u64(&d, "auth_failures"), 3);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
    unsetenv("GPUKV_TOKEN_FILE");
    unlink(path);
}
END_TEST

/* Failure 6: --listen (and --metrics-listen) on an address other machines reach needs a token
 * or --insecure-listen. */
START_TEST(listening_beyond_loopback_needs_a_token)
{
    static const char *const flags[] = {"--listen", "--metrics-listen"};
    const char *flag = flags[_i];
    gkv_daemon_t d;
    const char *const open_extra[] = {flag, "0.0.0.0:0", NULL};
    ck_assert_int_eq(harness_start(&d, open_extra), -1);
    char log[4096], want[64];
    harness_read_log(&d, log, sizeof(log));
    snprintf(want, sizeof(want), "%s: 0.0.0.0:0 is reachable", flag + 2);
    ck_assert_msg(strstr(log, want) && strstr(log, "--auth-token-file"), "%s", log);
    const char *const insecure[] = {flag, "0.0.0.0:0", "--insecure-listen", "yes", NULL};
    start(&d, insecure);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* Failure 6: SIGHUP killed the daemon (every value lost). Now it reloads the reloadable settings
 * (here --idle-timeout, from the --config file) and keeps every value. */
START_TEST(sighup_reloads_and_keeps_every_value)
{
    char dir[] = "/tmp/gkv-conf-XXXXXX", conf[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(conf, sizeof(conf), "%s/gpukvd.conf", dir);
    write_file(conf, "frame-timeout = 30s\n");
    gkv_daemon_t d;
    const char *const extra[] = {"--config", conf, NULL};
    start(&d, extra);
    gkv_client_t *c = connect_to(&d);
    ck_assert_int_eq(gkv_set(c, "kept", 4, "value", 5, NULL), 0);
    ck_assert_uint_eq(info_u64(&d, "idle_timeout_ms"), 0);
    write_file(conf, "frame-timeout = 30s\nidle-timeout = 1h\n");
    kill(d.pid, SIGHUP);
    uint64_t idle = 0;
    for (int i = 0; i < 100 && (idle = info_u64(&d, "idle_timeout_ms")) == 0; i++)
        harness_sleep_ms(100);
    ck_assert_uint_eq(idle, 3600000);
    char v[8];
    ck_assert_int_eq(gkv_get(c, "kept", 4, NULL, v, sizeof(v), NULL), 0);
    ck_assert_int_eq(memcmp(v, "value", 5), 0);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
    unlink(conf);
    rmdir(dir);
}
END_TEST

/* --allow-uid: a Unix peer of another user is refused before it can send anything (as root
 * only: the test needs a second user). */
START_TEST(peers_outside_allow_uid_are_refused)
{
    if (geteuid() != 0)
        return; /* needs root to act as another user */
    gkv_daemon_t d;
    const char *const extra[] = {"--allow-uid", "4242", NULL};
    start(&d, extra);
    chmod(d.dir, 0711); /* let the other user reach the socket... */
    chmod(d.sock, 0666);
    pid_t pid = fork();
    if (pid == 0) {
        if (setgid(65534) || setuid(65534))
            _exit(10);
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        /* Short: /tmp/gkv-run-XXXXXX/it-XXXXXX/gpukv.sock. */
        memcpy(sa.sun_path, d.sock, strlen(d.sock) + 1);
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
            _exit(11);
        static uint8_t h[HDR_CAP];
        uint8_t pre[4];
        if (recv(fd, pre, 4, MSG_WAITALL) != 4)
            _exit(12);
        uint32_t len = gkv_frame_get_len(pre);
        gkv_response_t r;
        if (len > sizeof(h) || recv(fd, h, len, MSG_WAITALL) != (ssize_t)len ||
            gkv_resp_decode(h, len, &r))
            _exit(13);
        _exit(r.status == GKV_EAUTH ? 0 : 14);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_int_eq(WEXITSTATUS(status), 0);
    ck_assert_uint_eq(info_u64(&d, "rejected_peers"), 1);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("hostile");
    TCase *t = tcase_create("starvation");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, getsize_of_a_prefix_pages_with_a_cursor);
    tcase_add_test(t, a_pipelining_client_does_not_starve_others);
    tcase_add_test(t, pipelining_past_the_output_limit_gets_every_reply);
    suite_add_tcase(s, t);
    t = tcase_create("timeouts");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, a_header_that_never_completes_is_cut_off);
    tcase_add_test(t, a_stalled_set_payload_gives_back_its_reservation);
    tcase_add_test(t, a_client_that_never_reads_is_disconnected);
    tcase_add_test(t, idle_connections_close_after_the_idle_timeout);
    suite_add_tcase(s, t);
    t = tcase_create("staging");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, readers_that_stall_give_back_staging);
    tcase_add_test(t, writers_that_stall_give_back_staging);
    tcase_add_test(t, a_reader_that_stalls_then_reads_gets_every_byte);
    suite_add_tcase(s, t);
    t = tcase_create("host_memory");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, keys_and_metadata_count_against_a_host_limit);
    suite_add_tcase(s, t);
    t = tcase_create("access");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, a_token_is_required_when_one_is_set);
    tcase_add_loop_test(t, listening_beyond_loopback_needs_a_token, 0, 2);
    tcase_add_test(t, sighup_reloads_and_keeps_every_value);
    tcase_add_test(t, peers_outside_allow_uid_are_refused);
    suite_add_tcase(s, t);
    t = tcase_create("shutdown");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, sigterm_ends_although_a_client_never_reads);
    tcase_add_test(t, sigterm_answers_what_is_pending_with_shutdown);
    suite_add_tcase(s, t);
    return s;
}

#include "suite_main.h"
