/* test_library.c: libgpukv behaviours beyond single commands, against a real gpukvd:
 * receiving into the caller's allocator (gkv_get_with, gkv_mget_with), pipelined MAPs
 * (gkv_map_many) and bounded waits (gkv_client_connect_timeout, gkv_client_set_timeout). */
#include <check.h>
#include <gpukv/gpukv.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "check_client.h"
#include "harness.h"
#define GKV_CHECK_NO_MAIN
#include "../unit/check_main.h"

#define KEY(s) (s), strlen(s)

/* An allocator that records what it was asked for and refuses one index on request. */
typedef struct {
    int calls;
    size_t index[8];
    uint64_t len[8];
    size_t refuse; /* index to refuse, or SIZE_MAX */
    char mem[8][64];
} recorder_t;

static void *record(void *arg, size_t index, uint64_t len)
{
    recorder_t *r = arg;
    ck_assert_int_lt(r->calls, 8);
    ck_assert_uint_le(len, 64);
    r->index[r->calls] = index;
    r->len[r->calls] = len;
    r->calls++;
    return index == r->refuse ? NULL : r->mem[index];
}

START_TEST(get_with_receives_into_the_callers_memory)
{
    gkv_client_t *c = connect_or_fail(shared_url(_i));
    ck_assert_int_eq(gkv_set(c, KEY("w/a"), "abcdefghij", 10, NULL), 0);
    ck_assert_int_eq(gkv_set(c, KEY("w/empty"), "", 0, NULL), 0);
    recorder_t r = {.refuse = SIZE_MAX};
    gkv_value_info_t vi;
    gkv_range_t tail = {.suffix = 4};
    ck_assert_int_eq(gkv_get_with(c, KEY("w/a"), &tail, record, &r, &vi), 0);
    ck_assert_int_eq(r.calls, 1);
    ck_assert_uint_eq(r.index[0], 0);
    ck_assert_uint_eq(r.len[0], 4);
    ck_assert_int_eq(memcmp(r.mem[0], "ghij", 4), 0);
    ck_assert_uint_eq(vi.size, 10);
    /* A zero-length value still asks (for 0 bytes); a missing key never does. */
    ck_assert_int_eq(gkv_get_with(c, KEY("w/empty"), NULL, record, &r, &vi), 0);
    ck_assert_int_eq(r.calls, 2);
    ck_assert_uint_eq(r.len[1], 0);
    ck_assert_int_eq(gkv_get_with(c, KEY("w/none"), NULL, record, &r, &vi), GKV_ENOTFOUND);
    ck_assert_int_eq(r.calls, 2);
    /* Refused: the bytes are dropped and the connection stays in step. */
    r.refuse = 0;
    ck_assert_int_eq(gkv_get_with(c, KEY("w/a"), NULL, record, &r, &vi), GKV_ENOMEM);
    ck_assert_int_eq(gkv_ping(c), 0);
    ck_assert_int_eq(gkv_get_with(c, KEY("w/a"), NULL, NULL, NULL, &vi), GKV_EINVAL);
    gkv_client_close(c);
}
END_TEST

START_TEST(mget_with_allocates_each_found_item)
{
    gkv_client_t *c = connect_or_fail(shared_url(_i));
    ck_assert_int_eq(gkv_set(c, KEY("m/a"), "0123456789", 10, NULL), 0);
    ck_assert_int_eq(gkv_set(c, KEY("m/b"), "xyz", 3, NULL), 0);
    gkv_mget_item_t items[4] = {
        {.key = "m/a", .klen = 3, .range = {.offset = 2, .length = 3}},
        {.key = "m/none", .klen = 6},
        {.key = "m/b", .klen = 3, .buf = (void *)1, .cap = 99}, /* ignored on input */
        {.key = "m/a", .klen = 3, .range = {.suffix = 2}},
    };
    recorder_t r = {.refuse = 2};
    ck_assert_int_eq(gkv_mget_with(c, items, 4, record, &r), 0);
    ck_assert_int_eq(r.calls, 3); /* not for the missing key */
    ck_assert_uint_eq(r.index[0], 0);
    ck_assert_uint_eq(r.index[1], 2);
    ck_assert_uint_eq(r.index[2], 3);
    ck_assert_int_eq(items[0].status, 0);
    ck_assert_uint_eq(items[0].len, 3);
    ck_assert_ptr_eq(items[0].buf, r.mem[0]);
    ck_assert_int_eq(memcmp(r.mem[0], "234", 3), 0);
    ck_assert_int_eq(items[1].status, GKV_ENOTFOUND);
    ck_assert_ptr_null(items[1].buf);
    ck_assert_int_eq(items[2].status, GKV_ENOMEM); /* refused: dropped, stream in step */
    ck_assert_ptr_null(items[2].buf);
    ck_assert_int_eq(items[3].status, 0);
    ck_assert_int_eq(memcmp(r.mem[3], "89", 2), 0);
    ck_assert_int_eq(gkv_ping(c), 0);
    ck_assert_int_eq(gkv_mget_with(c, items, 4, NULL, NULL), GKV_EINVAL);
    gkv_client_close(c);
}
END_TEST

/* Leases the server counts on every connection (INFO), through a connection of its own. */
static uint64_t server_leases(const char *url)
{
    gkv_client_t *c = connect_or_fail(url);
    char *info;
    ck_assert_int_eq(gkv_info(c, &info), 0);
    const char *p = strstr(info, "\nleases:");
    ck_assert_ptr_nonnull(p);
    uint64_t n = strtoull(p + 8, NULL, 10);
    gkv_free(info);
    gkv_client_close(c);
    return n;
}

START_TEST(map_many_pipelines_maps_and_reports_each_item)
{
    static const char *const zc[] = {"--host-zero-copy", "yes", NULL};
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, zc), 0);
    gkv_client_t *c = connect_or_fail(d.url);
    ck_assert_int_eq(gkv_set(c, KEY("p/a"), "0123456789", 10, NULL), 0);
    ck_assert_int_eq(gkv_set(c, KEY("p/b"), "abc", 3, NULL), 0);
    ck_assert_int_eq(gkv_set(c, KEY("p/empty"), "", 0, NULL), 0);
    /* A RELEASE sent without waiting goes first: its reply comes before the MAP replies. */
    gkv_mapping_t *pre;
    ck_assert_int_eq(gkv_map(c, KEY("p/a"), NULL, &pre), 0);
    ck_assert_int_eq(gkv_unmap_batch(c, &pre, 1), 0);
    gkv_map_item_t items[6] = {
        {.key = "p/a", .klen = 3},
        {.key = "p/missing", .klen = 9},
        {.key = "p/a", .klen = 3, .range = {.offset = 2, .length = 3}},
        {.key = "p/b", .klen = 3, .range = {.suffix = 2}},
        {.key = "p/b", .klen = 3, .range = {.offset = 4}},
        {.key = "p/empty", .klen = 7},
    };
    ck_assert_int_eq(gkv_map_many(c, items, 6), 0);
    ck_assert_int_eq(items[0].status, 0);
    ck_assert_int_eq(memcmp(items[0].mapping->ptr, "0123456789", 10), 0);
    ck_assert_int_eq(items[1].status, GKV_ENOTFOUND);
    ck_assert_ptr_null(items[1].mapping);
    ck_assert_int_eq(items[2].status, 0);
    ck_assert_uint_eq(items[2].mapping->length, 3);
    ck_assert_int_eq(memcmp(items[2].mapping->ptr, "234", 3), 0);
    ck_assert_int_eq(memcmp(items[3].mapping->ptr, "bc", 2), 0);
    ck_assert_int_eq(items[4].status, GKV_ERANGE);
    ck_assert_int_eq(items[5].status, 0);
    ck_assert_uint_eq(items[5].mapping->length, 0);
    ck_assert_uint_eq(server_leases(d.url), 4);
    /* The stream is in step: the next request gets its own reply. */
    ck_assert_int_eq(gkv_ping(c), 0);
    gkv_mapping_t *ms[4] = {items[0].mapping, items[2].mapping, items[3].mapping,
                            items[5].mapping};
    ck_assert_int_eq(gkv_unmap_batch(c, ms, 4), 0);
    ck_assert_int_eq(gkv_ping(c), 0);
    ck_assert_uint_eq(server_leases(d.url), 0);
    /* A bad key refuses the whole call before anything is sent. */
    gkv_map_item_t bad[2] = {{.key = "p/a", .klen = 3}, {.key = "", .klen = 0}};
    ck_assert_int_eq(gkv_map_many(c, bad, 2), GKV_EINVAL);
    ck_assert_int_eq(gkv_map_many(c, bad, 0), GKV_EINVAL);
    /* Many at once, each mapped. */
    enum { N = 1000 };
    static gkv_map_item_t many[N];
    static char keys[N][16];
    for (int i = 0; i < N; i++) {
        snprintf(keys[i], sizeof(keys[i]), "p/m%04d", i);
        ck_assert_int_eq(gkv_set(c, keys[i], strlen(keys[i]), keys[i], strlen(keys[i]), NULL), 0);
        many[i] = (gkv_map_item_t){.key = keys[i], .klen = strlen(keys[i])};
    }
    ck_assert_int_eq(gkv_map_many(c, many, N), 0);
    static gkv_mapping_t *all[N];
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(many[i].status, 0);
        ck_assert_int_eq(memcmp(many[i].mapping->ptr, keys[i], strlen(keys[i])), 0);
        all[i] = many[i].mapping;
    }
    ck_assert_uint_eq(server_leases(d.url), N);
    ck_assert_int_eq(gkv_unmap_batch(c, all, N), 0);
    ck_assert_int_eq(gkv_ping(c), 0);
    ck_assert_uint_eq(server_leases(d.url), 0);
    gkv_client_close(c);
    /* Without zero-copy every item says why, and nothing is left leased. */
    c = connect_or_fail(d.tcp_url);
    ck_assert_int_eq(gkv_map_many(c, items, 2), 0);
    ck_assert_int_eq(items[0].status, GKV_ENOTSUP);
    ck_assert_int_eq(items[1].status, GKV_ENOTSUP);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

static double ms_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) * 1e3 + (double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

START_TEST(a_server_that_never_answers_times_out)
{
    /* A listener that accepts nothing and says nothing: HELLO gets no answer. */
    char dir[] = "/tmp/gkv-mute-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/mute.sock", dir);
    int l = socket(AF_UNIX, SOCK_STREAM, 0);
    ck_assert_int_eq(bind(l, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(l, 4), 0);
    char url[160];
    snprintf(url, sizeof(url), "unix:%s", sa.sun_path);
    gkv_client_t *c = NULL;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ck_assert_int_eq(gkv_client_connect_timeout(url, 200, &c), GKV_ETIMEDOUT);
    double ms = ms_since(&t0);
    ck_assert_msg(ms >= 150 && ms < 2000, "timed out after %.0f ms", ms);
    ck_assert_ptr_null(c);
    close(l);
    unlink(sa.sun_path);
    rmdir(dir);
}
END_TEST

START_TEST(a_stopped_daemon_times_out_and_the_connection_closes)
{
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, NULL), 0);
    gkv_client_t *c = NULL;
    ck_assert_int_eq(gkv_client_connect_timeout(d.url, 300, &c), 0);
    ck_assert_int_eq(gkv_ping(c), 0);
    kill(d.pid, SIGSTOP);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ck_assert_int_eq(gkv_ping(c), GKV_ETIMEDOUT);
    double ms = ms_since(&t0);
    ck_assert_msg(ms >= 250 && ms < 2000, "timed out after %.0f ms", ms);
    ck_assert_int_eq(gkv_ping(c), GKV_ECLOSED); /* a late PONG could not be told apart */
    kill(d.pid, SIGCONT);
    gkv_client_close(c);
    /* Without a timeout the default is to wait; setting one on a live client works too. */
    ck_assert_int_eq(gkv_client_connect(d.url, &c), 0);
    ck_assert_int_eq(gkv_client_set_timeout(c, 5000), 0);
    char big[1 << 16];
    memset(big, 7, sizeof(big));
    ck_assert_int_eq(gkv_set(c, KEY("t/big"), big, sizeof(big), NULL), 0);
    ck_assert_int_eq(gkv_client_set_timeout(c, 0), 0);
    ck_assert_int_eq(gkv_ping(c), 0);
    gkv_client_close(c);
    /* A daemon that died is an error at once, never a wait. */
    ck_assert_int_eq(gkv_client_connect_timeout(d.url, 10000, &c), 0);
    harness_kill(&d);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = gkv_ping(c);
    ck_assert_msg(rc == GKV_ECLOSED, "ping after kill: %s", gkv_err_name(rc));
    ck_assert_msg(ms_since(&t0) < 1000, "took %.0f ms", ms_since(&t0));
    gkv_client_close(c);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("library");
    TCase *t = tcase_create("allocators");
    tcase_add_unchecked_fixture(t, start_shared, stop_shared);
    tcase_add_loop_test(t, get_with_receives_into_the_callers_memory, 0, 2);
    tcase_add_loop_test(t, mget_with_allocates_each_found_item, 0, 2);
    suite_add_tcase(s, t);
    t = tcase_create("pipelined maps");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, map_many_pipelines_maps_and_reports_each_item);
    suite_add_tcase(s, t);
    t = tcase_create("timeouts");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, a_server_that_never_answers_times_out);
    tcase_add_test(t, a_stopped_daemon_times_out_and_the_connection_closes);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    return harness_run_end(gkv_check_run(make_suite()));
}
