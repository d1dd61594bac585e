/* test_integration.c: every command through libgpukv against a real gpukvd, large values with
 * bounded daemon memory, 200 concurrent clients, hostile input, OOM, limits and shutdown. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <gpukv/gpukv.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "check_client.h"
#include "harness.h"
#include "probe.h"
#include "raw_frame.h"
#include "message.h"

#define KEY(s) (s), strlen(s)

START_TEST(every_command_through_the_library)
{
    gkv_client_t *c = connect_or_fail(shared_url(_i));
    const gkv_server_info_t *info = gkv_client_info(c);
    ck_assert_uint_eq(info->protocol, 2); /* the newest: libgpukv asks for it */
    ck_assert_str_eq(info->backend, harness_backend());
    ck_assert_uint_eq(info->max_key, 1024);
    /* Zero-copy: over a Unix socket on the cuda backend (the host one shares its arena only
     * with --host-zero-copy); never over TCP. */
    bool want_zc = strncmp(shared_url(_i), "unix:", 5) == 0 &&
                   strcmp(harness_backend(), "cuda") == 0;
    ck_assert_str_eq(info->zero_copy, want_zc ? "cuda-pool-fd" : "none");
    if (!want_zc)
        ck_assert_uint_gt(strlen(info->zero_copy_why), 0);
    ck_assert_int_eq(gkv_flush(c), 0);
    ck_assert_int_eq(gkv_ping(c), 0);

    /* SET / GET, binary keys and values, zero-length values, metadata. */
    const char bin_key[] = {'b', 0, 'k'};
    const char bin_val[] = {0, 1, 2, (char)255, 0};
    ck_assert_int_eq(gkv_set(c, bin_key, 3, bin_val, 5, NULL), 0);
    char buf[64];
    gkv_value_info_t vi;
    ck_assert_int_eq(gkv_get(c, bin_key, 3, NULL, buf, sizeof(buf), &vi), 0);
    ck_assert_uint_eq(vi.length, 5);
    ck_assert_int_eq(memcmp(buf, bin_val, 5), 0);
    ck_assert_int_eq(gkv_set(c, KEY("empty"), "", 0, NULL), 0);
    ck_assert_int_eq(gkv_get(c, KEY("empty"), NULL, buf, sizeof(buf), &vi), 0);
    ck_assert_uint_eq(vi.size, 0);
    gkv_set_opts_t so = {.meta = "dtype=f4;shape=2", .meta_len = 16};
    ck_assert_int_eq(gkv_set(c, KEY("t/a"), "abcdefghij", 10, &so), 0);
    ck_assert_int_eq(gkv_get(c, KEY("t/a"), NULL, buf, sizeof(buf), &vi), 0);
    ck_assert_uint_eq(vi.meta_len, 16);
    ck_assert_int_eq(memcmp(vi.meta, "dtype=f4;shape=2", 16), 0);

    /* Ranges: offset+length, to the end, suffix, clamping, past the end. */
    gkv_range_t r = {.offset = 2, .length = 3};
    ck_assert_int_eq(gkv_get(c, KEY("t/a"), &r, buf, sizeof(buf), &vi), 0);
    ck_assert_uint_eq(vi.length, 3);
    ck_assert_int_eq(memcmp(buf, "cde", 3), 0);
    r = (gkv_range_t){.offset = 7, .length = GKV_TO_END};
    ck_assert_int_eq(gkv_get(c, KEY("t/a"), &r, buf, sizeof(buf), &vi), 0);
    ck_assert_int_eq(memcmp(buf, "hij", 3), 0);
    r = (gkv_range_t){.suffix = 4};
    ck_assert_int_eq(gkv_get(c, KEY("t/a"), &r, buf, sizeof(buf), &vi), 0);
    ck_assert_uint_eq(vi.offset, 6);
    ck_assert_int_eq(memcmp(buf, "ghij", 4), 0);
    r = (gkv_range_t){.offset = 8, .length = 100};
    ck_assert_int_eq(gkv_get(c, KEY("t/a"), &r, buf, sizeof(buf), &vi), 0);
    ck_assert_uint_eq(vi.length, 2);
    r = (gkv_range_t){.offset = 11};
    ck_assert_int_eq(gkv_get(c, KEY("t/a"), &r, buf, sizeof(buf), &vi), GKV_ERANGE);
    ck_assert_int_eq(gkv_get(c, KEY("t/a"), NULL, buf, 4, &vi), GKV_ENOSPACE);
    ck_assert_uint_eq(vi.length, 10);
    void *heap;
    ck_assert_int_eq(gkv_get_alloc(c, KEY("t/a"), NULL, &heap, &vi), 0);
    ck_assert_int_eq(memcmp(heap, "abcdefghij", 10), 0);
    gkv_free(heap);
    ck_assert_int_eq(gkv_get(c, KEY("missing"), NULL, buf, sizeof(buf), &vi), GKV_ENOTFOUND);
    ck_assert_str_eq(gkv_client_errmsg(c), "no such key 'missing'"); /* it names the key */

    /* NX / XX. */
    gkv_set_opts_t nx = {.flags = GKV_SET_NX}, xx = {.flags = GKV_SET_XX};
    ck_assert_int_eq(gkv_set(c, KEY("t/a"), "z", 1, &nx), GKV_EEXISTS);
    ck_assert_int_eq(gkv_set(c, KEY("t/new"), "z", 1, &xx), GKV_ENOTFOUND);
    ck_assert_int_eq(gkv_set(c, KEY("t/new"), "z", 1, &nx), 0);
    ck_assert_int_eq(gkv_set(c, KEY("t/new"), "zz", 2, &xx), 0);

    /* MGET with a missing key, a range and a too-small buffer. */
    char b1[16], b2[16], b3[2], b4[16];
    gkv_mget_item_t items[4] = {
        {.key = "t/a", .klen = 3, .buf = b1, .cap = sizeof(b1)},
        {.key = "nope", .klen = 4, .buf = b2, .cap = sizeof(b2)},
        {.key = "t/a", .klen = 3, .buf = b3, .cap = sizeof(b3)},
        {.key = "t/new", .klen = 5, .range = {.suffix = 1}, .buf = b4, .cap = sizeof(b4)},
    };
    ck_assert_int_eq(gkv_mget(c, items, 4), 0);
    ck_assert_int_eq(items[0].status, 0);
    ck_assert_uint_eq(items[0].len, 10);
    ck_assert_int_eq(memcmp(b1, "abcdefghij", 10), 0);
    ck_assert_int_eq(items[1].status, GKV_ENOTFOUND);
    ck_assert_int_eq(items[2].status, GKV_ENOSPACE);
    ck_assert_int_eq(items[3].status, 0);
    ck_assert_int_eq(b4[0], 'z');

    /* EXISTS / DEL of several keys. */
    const void *keys[] = {"t/a", "nope", "t/new"};
    size_t lens[] = {3, 4, 5};
    ck_assert_int_eq(gkv_exists(c, keys, lens, 3), 2);
    ck_assert_int_eq(gkv_del(c, keys, lens, 3), 2);
    ck_assert_int_eq(gkv_exists(c, keys, lens, 3), 0);

    /* LIST: flat, directory mode and paging across many keys. */
    char k[64];
    for (int i = 0; i < 250; i++) {
        snprintf(k, sizeof(k), "ls/%s/%03d", i % 2 ? "odd" : "even", i);
        ck_assert_int_eq(gkv_set(c, KEY(k), k, strlen(k), NULL), 0);
    }
    ck_assert_int_eq(gkv_set(c, KEY("ls/top"), "x", 1, NULL), 0);
    gkv_list_t *it;
    gkv_list_entry_t e;
    ck_assert_int_eq(gkv_list_open(c, KEY("ls/"), 0, 7, &it), 0);
    int n = 0;
    char prev[64] = "";
    while (gkv_list_next(it, &e) == 1) {
        char cur[64];
        snprintf(cur, sizeof(cur), "%.*s", (int)e.klen, (const char *)e.key);
        ck_assert_int_lt(strcmp(prev, cur), 0);
        ck_assert_uint_eq(e.size, strcmp(cur, "ls/top") == 0 ? 1 : e.klen);
        strcpy(prev, cur);
        n++;
    }
    gkv_list_close(it);
    ck_assert_int_eq(n, 251);
    ck_assert_int_eq(gkv_list_open(c, KEY("ls/"), '/', 1, &it), 0);
    const char *want[] = {"ls/even/", "ls/odd/", "ls/top"};
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(gkv_list_next(it, &e), 1);
        ck_assert_uint_eq(e.klen, strlen(want[i]));
        ck_assert_int_eq(memcmp(e.key, want[i], e.klen), 0);
        ck_assert_int_eq(e.is_dir, i < 2);
    }
    ck_assert_int_eq(gkv_list_next(it, &e), 0);
    gkv_list_close(it);

    /* GETSIZE of a key and of a prefix. */
    uint64_t size, bytes, count;
    ck_assert_int_eq(gkv_getsize(c, KEY("ls/top"), &size), 0);
    ck_assert_uint_eq(size, 1);
    ck_assert_int_eq(gkv_getsize(c, KEY("nope"), &size), GKV_ENOTFOUND);
    ck_assert_int_eq(gkv_getsize_prefix(c, KEY("ls/odd/"), &bytes, &count), 0);
    ck_assert_uint_eq(count, 125);
    ck_assert_uint_eq(bytes, 125 * strlen("ls/odd/001"));

    /* INFO and FLUSH. */
    char *text;
    ck_assert_int_eq(gkv_info(c, &text), 0);
    ck_assert(strstr(text, "# Memory") && strstr(text, "keys:"));
    ck_assert(strstr(text, harness_backend()));
    gkv_free(text);
    ck_assert_int_eq(gkv_flush(c), 0);
    ck_assert_int_eq(gkv_getsize_prefix(c, "", 0, &bytes, &count), 0);
    ck_assert_uint_eq(count, 0);
    ck_assert_uint_eq(bytes, 0);

    /* Client-side checks need no round trip. */
    char longkey[1100];
    memset(longkey, 'k', sizeof(longkey));
    ck_assert_int_eq(gkv_set(c, longkey, sizeof(longkey), "v", 1, NULL), GKV_ETOOBIG);
    ck_assert_int_eq(gkv_set(c, "", 0, "v", 1, NULL), GKV_EINVAL);
    ck_assert_int_eq(gkv_ping(c), 0);
    gkv_client_close(c);
}
END_TEST

/* Feeds a pipe with `total` generated bytes (producer) or checksums what comes out of one. */
typedef struct {
    int fd;
    uint64_t total, sum;
} pump_t;

static void *produce(void *arg)
{
    pump_t *p = arg;
    size_t chunk = 1 << 20;
    uint8_t *buf = malloc(chunk);
    p->sum = HARNESS_FNV_INIT;
    for (uint64_t off = 0; off < p->total; off += chunk) {
        size_t n = p->total - off < chunk ? (size_t)(p->total - off) : chunk;
        harness_fill(buf, n, off);
        p->sum = harness_fnv(p->sum, buf, n);
        for (size_t w = 0; w < n;) {
            ssize_t r = write(p->fd, buf + w, n - w);
            if (r <= 0)
                goto out;
            w += (size_t)r;
        }
    }
out:
    close(p->fd);
    free(buf);
    return NULL;
}

static void *consume(void *arg)
{
    pump_t *p = arg;
    size_t chunk = 1 << 20;
    uint8_t *buf = malloc(chunk);
    p->sum = HARNESS_FNV_INIT;
    p->total = 0;
    ssize_t r;
    while ((r = read(p->fd, buf, chunk)) > 0) {
        p->sum = harness_fnv(p->sum, buf, (size_t)r);
        p->total += (uint64_t)r;
    }
    free(buf);
    return NULL;
}

static double seconds_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

/* A value larger than 4 GiB (by default; GKV_TEST_BIG_MB) streamed in from a pipe and out to
 * one: the daemon never holds it in its private memory. */
START_TEST(large_value_streams_without_buffering)
{
    const char *mb_env = getenv("GKV_TEST_BIG_MB");
    uint64_t mb = mb_env ? strtoull(mb_env, NULL, 10) : 4200;
    gkv_daemon_t *d = &shared;
    uint64_t total = mb << 20;
    int in[2], out[2];
    ck_assert_int_eq(pipe(in), 0);
    ck_assert_int_eq(pipe(out), 0);
    fcntl(in[0], F_SETPIPE_SZ, 1 << 20);
    fcntl(out[0], F_SETPIPE_SZ, 1 << 20);
    gkv_client_t *c = connect_or_fail(d->url);
    long rss0 = harness_rss_anon_kb(d);
    pump_t src = {in[1], total, 0}, dst = {out[0], 0, 0};
    pthread_t tp, tc;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pthread_create(&tp, NULL, produce, &src);
    ck_assert_int_eq(gkv_set_from_fd(c, KEY("big"), in[0], total, NULL), 0);
    double set_s = seconds_since(&t0);
    pthread_join(tp, NULL);
    close(in[0]);
    long rss1 = harness_rss_anon_kb(d);
    pthread_create(&tc, NULL, consume, &dst);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    gkv_value_info_t vi;
    ck_assert_int_eq(gkv_get_to_fd(c, KEY("big"), NULL, out[1], &vi), 0);
    double get_s = seconds_since(&t0);
    close(out[1]);
    pthread_join(tc, NULL);
    close(out[0]);
    long rss2 = harness_rss_anon_kb(d);
    ck_assert_uint_eq(vi.size, total);
    ck_assert_uint_eq(dst.total, total);
    ck_assert_uint_eq(dst.sum, src.sum);
    fprintf(stderr,
            "large value %llu MiB (%s): set from a pipe %.2f GB/s, get to a pipe %.2f GB/s "
            "(generating and checksumming included); RssAnon %ld -> %ld -> %ld KiB\n",
            (unsigned long long)mb, harness_backend(),
            (double)total / set_s / 1e9, (double)total / get_s / 1e9, rss0, rss1, rss2);
    /* The daemon's private memory must not grow anywhere near the value's size. */
    long growth = (rss1 > rss2 ? rss1 : rss2) - rss0;
    ck_assert_msg(growth < (long)(total >> 10) / 4 && growth < 200 * 1024,
                  "RssAnon grew by %ld KiB for a %llu MiB value", growth, (unsigned long long)mb);
    const void *k[] = {"big"};
    size_t kl[] = {3};
    ck_assert_int_eq(gkv_del(c, k, kl, 1), 1);
    gkv_client_close(c);
}
END_TEST

typedef struct {
    const char *url;
    int id, errors;
    char what[160];
} worker_t;

#define WORKER_FAIL(w, ...)                                                                        \
    do {                                                                                           \
        snprintf((w)->what, sizeof((w)->what), __VA_ARGS__);                                      \
        (w)->errors++;                                                                             \
        goto done;                                                                                 \
    } while (0)

static void *worker(void *arg)
{
    worker_t *w = arg;
    gkv_client_t *c = NULL;
    char key[64], val[9000], got[9000];
    if (gkv_client_connect(w->url, &c))
        WORKER_FAIL(w, "connect");
    for (int j = 0; j < 20; j++) {
        size_t len = (size_t)(w->id * 37 + j * 101) % 8192 + 1;
        snprintf(key, sizeof(key), "w%03d/k%02d", w->id, j);
        harness_fill(val, len, (uint64_t)(w->id * 100 + j));
        if (gkv_set(c, KEY(key), val, len, NULL))
            WORKER_FAIL(w, "set %s", key);
        gkv_value_info_t vi;
        if (gkv_get(c, KEY(key), NULL, got, sizeof(got), &vi) || vi.length != len ||
            memcmp(got, val, len) != 0)
            WORKER_FAIL(w, "get %s returned other bytes", key);
        uint64_t size;
        if (gkv_getsize(c, KEY(key), &size) || size != len)
            WORKER_FAIL(w, "getsize %s", key);
    }
    snprintf(key, sizeof(key), "w%03d/", w->id);
    uint64_t bytes, count;
    if (gkv_getsize_prefix(c, KEY(key), &bytes, &count) || count != 20)
        WORKER_FAIL(w, "prefix count %llu", (unsigned long long)count);
    for (int j = 0; j < 20; j += 2) {
        snprintf(key, sizeof(key), "w%03d/k%02d", w->id, j);
        const void *k[] = {key};
        size_t kl[] = {strlen(key)};
        if (gkv_del(c, k, kl, 1) != 1)
            WORKER_FAIL(w, "del %s", key);
    }
    gkv_list_t *it;
    gkv_list_entry_t e;
    snprintf(key, sizeof(key), "w%03d/", w->id);
    if (gkv_list_open(c, KEY(key), 0, 3, &it))
        WORKER_FAIL(w, "list");
    int n = 0;
    while (gkv_list_next(it, &e) == 1)
        n += e.key && ((const char *)e.key)[e.klen - 1] % 2 == 1; /* only odd ones left */
    gkv_list_close(it);
    if (n != 10)
        WORKER_FAIL(w, "list saw %d odd keys", n);
done:
    gkv_client_close(c);
    return NULL;
}

START_TEST(two_hundred_concurrent_clients)
{
    enum { N = 200 };
    static worker_t w[N];
    pthread_t t[N];
    for (int i = 0; i < N; i++) {
        w[i] = (worker_t){.url = i % 2 ? shared.tcp_url : shared.url, .id = i};
        ck_assert_int_eq(pthread_create(&t[i], NULL, worker, &w[i]), 0);
    }
    int errors = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        if (w[i].errors)
            fprintf(stderr, "worker %d: %s\n", i, w[i].what);
        errors += w[i].errors;
    }
    ck_assert_int_eq(errors, 0);
}
END_TEST

static void read_exact(int fd, void *buf, size_t n)
{
    uint8_t *b = buf;
    while (n) {
        ssize_t r = read(fd, b, n);
        ck_assert_int_gt(r, 0);
        b += r;
        n -= (size_t)r;
    }
}

/* Reads one response frame and returns its status (id in *id). */
static int64_t read_status(int fd, uint64_t *id)
{
    uint8_t pre[4];
    static uint8_t hdr[1 << 16];
    read_exact(fd, pre, 4);
    uint32_t len = gkv_frame_get_len(pre);
    ck_assert_uint_le(len, sizeof(hdr));
    read_exact(fd, hdr, len);
    gkv_response_t r;
    ck_assert_int_eq(gkv_resp_decode(hdr, len, &r), 0);
    if (id)
        *id = r.id;
    return r.status;
}

static void expect_protocol_error_then_close(const void *bytes, size_t n)
{
    int fd = raw_connect(shared.sock);
    ck_assert_int_eq(write(fd, bytes, n), (ssize_t)n);
    ck_assert_int_eq(read_status(fd, NULL), GKV_EPROTO);
    char c;
    ck_assert_int_eq(read(fd, &c, 1), 0); /* then the server closes */
    close(fd);
}

START_TEST(garbage_gets_an_error_and_a_close_while_others_continue)
{
    gkv_client_t *good = connect_or_fail(shared.url);
    ck_assert_int_eq(gkv_set(good, KEY("keep"), "safe", 4, NULL), 0);
    static const char http[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    expect_protocol_error_then_close(http, sizeof(http) - 1);
    ck_assert_int_eq(gkv_ping(good), 0);
    static const uint8_t bomb[] = {0, 0, 0, 5, 0xdd, 0xff, 0x00, 0x00, 0x00};
    expect_protocol_error_then_close(bomb, sizeof(bomb));
    static const uint8_t huge[] = {0x7f, 0xff, 0xff, 0xff, 0x80};
    expect_protocol_error_then_close(huge, sizeof(huge));
    static const uint8_t zero[] = {0, 0, 0, 0};
    expect_protocol_error_then_close(zero, sizeof(zero));
    static const uint8_t notmap[] = {0, 0, 0, 2, 0x91, 0x01};
    expect_protocol_error_then_close(notmap, sizeof(notmap));
    /* A well-formed unknown command is an error reply, not a disconnect. */
    gkv_wr_t w;
    gkv_wr_init(&w);
    gkv_wr_begin(&w);
    gkv_wr_uint(&w, GKV_F_OP, 200);
    gkv_wr_uint(&w, GKV_F_ID, 1);
    gkv_wr_end(&w);
    gkv_wr_begin(&w);
    gkv_wr_uint(&w, GKV_F_OP, GKV_OP_PING);
    gkv_wr_uint(&w, GKV_F_ID, 2);
    gkv_wr_end(&w);
    int fd = raw_connect(shared.sock);
    ck_assert_int_eq(write(fd, w.sb.data, w.sb.size), (ssize_t)w.sb.size);
    uint64_t id;
    ck_assert_int_eq(read_status(fd, &id), GKV_EUNKNOWNCMD);
    ck_assert_uint_eq(id, 1);
    ck_assert_int_eq(read_status(fd, &id), 0);
    ck_assert_uint_eq(id, 2);
    close(fd);
    gkv_wr_fini(&w);
    char buf[8];
    gkv_value_info_t vi;
    ck_assert_int_eq(gkv_get(good, KEY("keep"), NULL, buf, sizeof(buf), &vi), 0);
    ck_assert_int_eq(memcmp(buf, "safe", 4), 0);
    gkv_client_close(good);
}
END_TEST

START_TEST(pipelined_requests_answer_in_order)
{
    gkv_wr_t w;
    gkv_wr_init(&w);
    for (uint64_t i = 1; i <= 300; i++) {
        gkv_wr_begin(&w);
        gkv_wr_uint(&w, GKV_F_OP, i % 3 ? GKV_OP_PING : GKV_OP_GET);
        gkv_wr_uint(&w, GKV_F_ID, i);
        if (i % 3 == 0)
            gkv_wr_bin(&w, GKV_F_KEY, "absent", 6);
        gkv_wr_end(&w);
    }
    int fd = raw_connect(shared.sock);
    ck_assert_int_eq(write(fd, w.sb.data, w.sb.size), (ssize_t)w.sb.size);
    for (uint64_t i = 1; i <= 300; i++) {
        uint64_t id;
        int64_t st = read_status(fd, &id);
        ck_assert_uint_eq(id, i);
        ck_assert_int_eq(st, i % 3 ? 0 : GKV_ENOTFOUND);
    }
    close(fd);
    gkv_wr_fini(&w);
}
END_TEST

START_TEST(set_beyond_maxmemory_is_oom_and_keeps_values)
{
    static const char *const args[] = {"--maxmemory", "64M", NULL};
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, args), 0);
    gkv_client_t *c = connect_or_fail(d.url);
    size_t len = 20 << 20;
    uint8_t *v = malloc(len), *got = malloc(len);
    char key[8];
    for (int i = 0; i < 3; i++) {
        harness_fill(v, len, (uint64_t)i);
        snprintf(key, sizeof(key), "v%d", i);
        ck_assert_int_eq(gkv_set(c, KEY(key), v, len, NULL), 0);
    }
    ck_assert_int_eq(gkv_set(c, KEY("v3"), v, len, NULL), GKV_EOOM);
    ck_assert(strstr(gkv_client_errmsg(c), "does not fit") != NULL);
    ck_assert_int_eq(gkv_set(c, KEY("huge"), v, 1, NULL), 0); /* small ones still fit */
    gkv_value_info_t vi;
    for (int i = 0; i < 3; i++) {
        harness_fill(v, len, (uint64_t)i);
        snprintf(key, sizeof(key), "v%d", i);
        ck_assert_int_eq(gkv_get(c, KEY(key), NULL, got, len, &vi), 0);
        ck_assert_int_eq(memcmp(got, v, len), 0);
    }
    const void *k[] = {"v0"};
    size_t kl[] = {2};
    ck_assert_int_eq(gkv_del(c, k, kl, 1), 1);
    ck_assert_int_eq(gkv_set(c, KEY("v3"), v, len, NULL), 0);
    /* Larger than max-value-size (= maxmemory): refused before any byte is stored. */
    int fd = open("/dev/zero", O_RDONLY);
    ck_assert_int_eq(gkv_set_from_fd(c, KEY("toobig"), fd, 65ull << 20, NULL), GKV_ETOOBIG);
    close(fd);
    ck_assert_int_eq(gkv_ping(c), 0);
    gkv_client_close(c);
    free(v);
    free(got);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

START_TEST(sigterm_exits_zero_and_removes_the_socket)
{
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, NULL), 0);
    gkv_client_t *c = connect_or_fail(d.url);
    ck_assert_int_eq(gkv_set(c, KEY("k"), "v", 1, NULL), 0);
    struct stat st;
    ck_assert_int_eq(stat(d.sock, &st), 0);
    ck_assert_uint_eq(st.st_mode & 0777, 0660);
    ck_assert_int_eq(harness_stop(&d), 0);
    ck_assert_int_ne(stat(d.sock, &st), 0);
    ck_assert_int_eq(gkv_ping(c), GKV_ECLOSED);
    gkv_client_close(c);
}
END_TEST

START_TEST(stale_socket_is_replaced_live_one_is_not)
{
    gkv_daemon_t a, b;
    ck_assert_int_eq(harness_start(&a, NULL), 0);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "%s --backend host --socket %s 2>/dev/null", GKV_DAEMON_PATH,
             a.sock);
    int status = system(cmd); /* a is alive: the second daemon must refuse and exit */
    ck_assert_int_eq(WEXITSTATUS(status), 1);
    gkv_client_t *c = connect_or_fail(a.url);
    ck_assert_int_eq(gkv_ping(c), 0); /* and a keeps serving on its socket */
    gkv_client_close(c);
    harness_kill(&a); /* leaves the file behind */
    struct stat st;
    ck_assert_int_eq(stat(a.sock, &st), 0);
    ck_assert_int_eq(harness_start_at(&b, a.dir, a.sock, NULL), 0);
    ck_assert_int_eq(harness_stop(&b), 0);
}
END_TEST

START_TEST(maxclients_refuses_extra_connections)
{
    static const char *const args[] = {"--maxclients", "2", NULL};
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, args), 0);
    gkv_client_t *c1 = connect_or_fail(d.url), *c2 = connect_or_fail(d.url), *c3 = NULL;
    ck_assert_int_eq(gkv_client_connect(d.url, &c3), GKV_EBUSY);
    gkv_client_close(c1);
    usleep(100000);
    c3 = connect_or_fail(d.url);
    ck_assert_int_eq(gkv_ping(c3), 0);
    gkv_client_close(c2);
    gkv_client_close(c3);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

START_TEST(bad_flags_and_unsafe_socket_dirs_are_refused)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "%s --maxmemory lots 2>/dev/null", GKV_DAEMON_PATH);
    int st = system(cmd);
    ck_assert_int_eq(WEXITSTATUS(st), 2);
    char dir[] = "/tmp/gkv-open-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    chmod(dir, 0777);
    snprintf(cmd, sizeof(cmd), "%s --backend host --socket %s/s.sock 2>/dev/null", GKV_DAEMON_PATH,
             dir);
    st = system(cmd);
    ck_assert_int_eq(WEXITSTATUS(st), 1);
    if (!gkv_test_gpu_usable()) {
        /* Asking for the cuda backend where there is no GPU is a clear error, not a fallback. */
        chmod(dir, 0700);
        char log[160];
        snprintf(log, sizeof(log), "%s/cuda.log", dir);
        snprintf(cmd, sizeof(cmd), "%s --backend cuda --socket %s/s.sock 2>%s", GKV_DAEMON_PATH,
                 dir, log);
        st = system(cmd);
        ck_assert_int_eq(WEXITSTATUS(st), 1);
        FILE *f = fopen(log, "r");
        char line[512] = "";
        ck_assert_ptr_nonnull(f);
        ck_assert_ptr_nonnull(fgets(line, sizeof(line), f));
        fclose(f);
        ck_assert_msg(strstr(line, "GPU") != NULL, "unclear error: %s", line);
        unlink(log);
    }
    rmdir(dir);
}
END_TEST

static int64_t del1(gkv_client_t *c, const char *key)
{
    const void *keys[1] = {key};
    size_t lens[1] = {strlen(key)};
    return gkv_del(c, keys, lens, 1);
}

/* Host copies (hostcopy.h; the harness gives the daemon 8 MiB of them): GETs of values from
 * 1 KiB to 64 KiB are answered from host memory, ranges included (MGET goes to the backend); an
 * overwrite, a larger or smaller value, a DEL and an expiry are seen at once; values outside the
 * range get no copy; INFO counts it all. */
START_TEST(host_copies_answer_gets_and_never_go_stale)
{
    gkv_client_t *c = connect_or_fail(shared.url);
    static uint8_t a[100000], got[100000];
    gkv_value_info_t vi;
    uint64_t hits0 = info_u64(c, "host_copy_hits"), values0 = info_u64(c, "host_copy_values");
    ck_assert_uint_eq(info_u64(c, "host_copy_limit"), 8u << 20);
    ck_assert_uint_eq(info_u64(c, "host_copy_max_value"), 64u << 10);
    /* Sizes through the batch (<= 16 KiB), the bulk path (one staging chunk) and past the
     * range, each overwritten with other bytes. */
    static const size_t sizes[] = {4096, 40000, 65536, 100000, 4096, 1500};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        for (size_t j = 0; j < sizes[i]; j++)
            a[j] = (uint8_t)(j * 13 + i * 7);
        ck_assert_int_eq(gkv_set(c, KEY("hc/k"), a, sizes[i], NULL), 0);
        for (int twice = 0; twice < 2; twice++) {
            memset(got, 0, sizes[i]);
            ck_assert_int_eq(gkv_get(c, KEY("hc/k"), NULL, got, sizeof(got), &vi), 0);
            ck_assert_uint_eq(vi.length, sizes[i]);
            ck_assert_int_eq(memcmp(got, a, sizes[i]), 0);
        }
        gkv_range_t r = {.offset = 1000, .length = 300};
        ck_assert_int_eq(gkv_get(c, KEY("hc/k"), &r, got, sizeof(got), &vi), 0);
        ck_assert_uint_eq(vi.length, 300);
        ck_assert_int_eq(memcmp(got, a + 1000, 300), 0);
        gkv_range_t suffix = {.suffix = 10};
        ck_assert_int_eq(gkv_get(c, KEY("hc/k"), &suffix, got, sizeof(got), &vi), 0);
        ck_assert_int_eq(memcmp(got, a + sizes[i] - 10, 10), 0);
    }
    /* Every GET of 4096, 4096 and 1500 (written through) and all but the first of 40000 and
     * 65536 (read through) were answered from copies; 100000 is past the range. */
    ck_assert_uint_ge(info_u64(c, "host_copy_hits"), hits0 + 3 * 4 + 2 * 3);
    ck_assert_uint_eq(info_u64(c, "host_copy_values"), values0 + 1);
    /* A small value gets none; DEL and expiry are seen at once. */
    ck_assert_int_eq(gkv_set(c, KEY("hc/tiny"), a, 64, NULL), 0);
    ck_assert_uint_eq(info_u64(c, "host_copy_values"), values0 + 1);
    ck_assert_int_eq(del1(c, "hc/k"), 1);
    ck_assert_int_eq(gkv_get(c, KEY("hc/k"), NULL, got, sizeof(got), &vi), GKV_ENOTFOUND);
    ck_assert_uint_eq(info_u64(c, "host_copy_values"), values0);
    gkv_set_opts_t ttl = {.ttl_ms = 100};
    ck_assert_int_eq(gkv_set(c, KEY("hc/ttl"), a, 2048, &ttl), 0);
    ck_assert_int_eq(gkv_get(c, KEY("hc/ttl"), NULL, got, sizeof(got), &vi), 0);
    harness_sleep_ms(150);
    ck_assert_int_eq(gkv_get(c, KEY("hc/ttl"), NULL, got, sizeof(got), &vi), GKV_ENOTFOUND);
    /* MGET goes through copy batches; its bytes match. */
    ck_assert_int_eq(gkv_set(c, KEY("hc/m1"), a, 3000, NULL), 0);
    ck_assert_int_eq(gkv_set(c, KEY("hc/m2"), a + 5, 3000, NULL), 0);
    static uint8_t m1[3000], m2[3000];
    gkv_mget_item_t items[2] = {{.key = "hc/m1", .klen = 5, .buf = m1, .cap = sizeof(m1)},
                                {.key = "hc/m2", .klen = 5, .buf = m2, .cap = sizeof(m2)}};
    ck_assert_int_eq(gkv_mget(c, items, 2), 0);
    ck_assert_int_eq(memcmp(m1, a, 3000), 0);
    ck_assert_int_eq(memcmp(m2, a + 5, 3000), 0);
    ck_assert_int_eq(del1(c, "hc/m1"), 1);
    ck_assert_int_eq(del1(c, "hc/m2"), 1);
    ck_assert_int_eq(del1(c, "hc/tiny"), 1);
    ck_assert_uint_eq(info_u64(c, "host_copy_values"), values0);
    gkv_client_close(c);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("integration");
    TCase *t = tcase_create("commands");
    tcase_add_unchecked_fixture(t, start_shared, stop_shared);
    tcase_set_timeout(t, 600);
    tcase_add_loop_test(t, every_command_through_the_library, 0, 2);
    tcase_add_test(t, large_value_streams_without_buffering);
    tcase_add_test(t, two_hundred_concurrent_clients);
    tcase_add_test(t, garbage_gets_an_error_and_a_close_while_others_continue);
    tcase_add_test(t, pipelined_requests_answer_in_order);
    tcase_add_test(t, host_copies_answer_gets_and_never_go_stale);
    suite_add_tcase(s, t);
    t = tcase_create("limits and lifecycle");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, set_beyond_maxmemory_is_oom_and_keeps_values);
    tcase_add_test(t, sigterm_exits_zero_and_removes_the_socket);
    tcase_add_test(t, stale_socket_is_replaced_live_one_is_not);
    tcase_add_test(t, maxclients_refuses_extra_connections);
    tcase_add_test(t, bad_flags_and_unsafe_socket_dirs_are_refused);
    suite_add_tcase(s, t);
    return s;
}

#include "suite_main.h"
