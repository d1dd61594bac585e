/* test_holds.c: held imports (PROTOCOL.md "Held imports") against a real gpukvd, on either
 * backend. On the cuda backend a RELEASE may hold the allocations of the leases it ends: held
 * allocations survive their values (kept, never given back) until unheld or the connection
 * closes; bad holds refuse the whole RELEASE and change nothing; unknown unholds are passed
 * over; libgpukv holds the imports of what it wrote itself (gkv_set_many_from_device) and writes
 * correct values into held memory again. On the host backend (no imports) holds are refused
 * (NOTSUP) and libgpukv holds nothing. */
#include <check.h>
#include <gpukv/gpukv.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_client.h"
#include "commands.h"
#include "fdpass.h"
#include "harness.h"
#include "message.h"
#include "raw_frame.h"

#define KEY(s) s, strlen(s)
#define VALUE (64u << 10) /* past the slab: a MAP's value is an allocation of its own */

static bool on_cuda(void)
{
    return strcmp(harness_backend(), "cuda") == 0;
}

static gkv_daemon_t start(void)
{
    const char *const flags[] = {"--host-zero-copy", "yes", NULL};
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, flags), 0);
    return d;
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

/* The lease of a raw MAP of key. */
static uint64_t raw_map(int fd, const char *key)
{
    gkv_response_t r;
    uint8_t hdr[4096];
    ck_assert_int_eq(raw_request(fd, GKV_OP_MAP, (raw_fields_t){.key = key}, &r, hdr, sizeof(hdr)),
                     0);
    return r.lease;
}

static void ids(gkv_wr_t *w, unsigned field, const uint64_t *v, size_t n)
{
    size_t pos = gkv_wr_array_begin(w, field);
    for (size_t i = 0; i < n; i++)
        msgpack_pack_uint64(&w->pk, v[i]);
    gkv_wr_array_end(w, pos, (uint32_t)n);
}

/* A raw RELEASE of leases (n, may be 0), holding hold (nh), ending the holds unhold (nu). */
static int64_t raw_release(int fd, const uint64_t *leases, size_t n, const uint64_t *hold,
                           size_t nh, const uint64_t *unhold, size_t nu)
{
    gkv_wr_t w;
    gkv_wr_init(&w);
    gkv_wr_begin(&w);
    gkv_wr_uint(&w, GKV_F_OP, GKV_OP_RELEASE);
    gkv_wr_uint(&w, GKV_F_ID, 7);
    if (n)
        ids(&w, GKV_F_LEASES, leases, n);
    if (nh)
        ids(&w, GKV_F_HOLD, hold, nh);
    if (nu)
        ids(&w, GKV_F_UNHOLD, unhold, nu);
    gkv_wr_end(&w);
    gkv_response_t r;
    uint8_t hdr[4096];
    int64_t st = raw_call(fd, &w, &r, hdr, sizeof(hdr));
    gkv_wr_fini(&w);
    return st;
}

/* Deletes one key. */
static void del_one(gkv_client_t *c, const char *key)
{
    const void *k[1] = {key};
    size_t kl[1] = {strlen(key)};
    ck_assert_int_eq(gkv_del(c, k, kl, 1), 1);
}

static void set_value(gkv_client_t *c, const char *key, char b)
{
    char *v = malloc(VALUE);
    memset(v, b, VALUE);
    ck_assert_int_eq(gkv_set(c, KEY(key), v, VALUE, NULL), 0);
    free(v);
}

/* The wire: holds begin with the leases a RELEASE ends, outlive their values, end by unhold or
 * with the connection; a bad hold refuses the whole RELEASE. */
START_TEST(a_release_holds_allocations_until_unhold_or_close)
{
    gkv_daemon_t d = start();
    gkv_client_t *c = connect_or_fail(d.url);
    set_value(c, "h/1", 'a');
    set_value(c, "h/2", 'b');
    int fd = raw_zero_copy(d.sock);
    uint64_t l1 = raw_map(fd, "h/1"), l2 = raw_map(fd, "h/2");
    if (!on_cuda()) { /* nothing to hold: the arena is mapped whole */
        ck_assert_int_eq(raw_release(fd, &l1, 1, &l1, 1, NULL, 0), GKV_ENOTSUP);
        ck_assert_int_eq(raw_release(fd, &l1, 1, NULL, 0, NULL, 0), 0); /* the lease was kept */
        ck_assert_uint_eq(info_u64(c, "held_imports"), 0);
        close(fd);
        gkv_client_close(c);
        ck_assert_int_eq(harness_stop(&d), 0);
        return;
    }
    /* Bad holds change nothing: a lease this RELEASE does not end, one named twice. */
    ck_assert_int_eq(raw_release(fd, &l1, 1, &l2, 1, NULL, 0), GKV_EINVAL);
    uint64_t twice[2] = {l1, l1};
    ck_assert_int_eq(raw_release(fd, &l1, 1, twice, 2, NULL, 0), GKV_EINVAL);
    ck_assert_uint_eq(info_u64(c, "leases"), 2);
    ck_assert_uint_eq(info_u64(c, "held_imports"), 0);
    /* A hold outlives its lease and its value. */
    ck_assert_int_eq(raw_release(fd, &l1, 1, &l1, 1, NULL, 0), 0);
    ck_assert_uint_eq(info_u64(c, "leases"), 1);
    ck_assert_uint_eq(info_u64(c, "held_imports"), 1);
    char *metrics = NULL; /* the same count in the metrics, per GPU */
    ck_assert_int_eq(gkv_metrics(c, &metrics), 0);
    const char *line = strstr(metrics, "\ngpukv_held_imports{backend=\"cuda\",device=\"0\",");
    ck_assert_msg(line && strncmp(strchr(line, '}'), "} 1\n", 4) == 0,
                  "no gpukv_held_imports of 1 in the metrics");
    gkv_free(metrics);
    del_one(c, "h/1");
    ck_assert_uint_eq(info_u64(c, "held_imports"), 1);
    /* Ids not held are passed over; a RELEASE may only end holds. */
    uint64_t unknown = 987654321;
    ck_assert_int_eq(raw_release(fd, NULL, 0, NULL, 0, &unknown, 1), 0);
    ck_assert_uint_eq(info_u64(c, "held_imports"), 1);
    ck_assert_int_eq(raw_release(fd, NULL, 0, NULL, 0, &l1, 1), 0);
    ck_assert_uint_eq(info_u64(c, "held_imports"), 0);
    /* Holds end with the connection. */
    ck_assert_int_eq(raw_release(fd, &l2, 1, &l2, 1, NULL, 0), 0);
    ck_assert_uint_eq(info_u64(c, "held_imports"), 1);
    close(fd);
    info_until(c, "held_imports", 0, 1000);
    char b[1];
    gkv_range_t one = {.offset = 0, .length = 1};
    ck_assert_int_eq(gkv_get(c, KEY("h/2"), &one, b, 1, NULL), 0);
    ck_assert_int_eq(b[0], 'b');
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

#define N 8

/* Writes N values of byte b under prefix/i through gkv_set_many_from_device (host buffers: the
 * copy is cudaMemcpyDefault's, or memcpy without CUDA). */
static void write_many(gkv_client_t *c, const char *prefix, char b)
{
    static char keys[N][32];
    char *buf = malloc((size_t)N * VALUE);
    memset(buf, b, (size_t)N * VALUE);
    gkv_set_item_t items[N];
    for (int i = 0; i < N; i++) {
        snprintf(keys[i], sizeof(keys[i]), "%s/%d", prefix, i);
        items[i] = (gkv_set_item_t){.key = keys[i], .klen = strlen(keys[i]),
                                    .dptr = buf + (size_t)i * VALUE, .len = VALUE};
    }
    ck_assert_int_eq(gkv_set_many_from_device(c, items, N, NULL), 0);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(items[i].status, 0);
    free(buf);
}

static void check_many(gkv_client_t *r, const char *prefix, char b)
{
    char *v = malloc(VALUE);
    for (int i = 0; i < N; i++) {
        char key[32];
        snprintf(key, sizeof(key), "%s/%d", prefix, i);
        ck_assert_int_eq(gkv_get(r, KEY(key), NULL, v, VALUE, NULL), 0);
        ck_assert(v[0] == b && v[VALUE / 2] == b && v[VALUE - 1] == b);
    }
    free(v);
}

/* libgpukv holds the imports of its own writes once their leases end, and the daemon's kept
 * memory they are on takes later values, written correctly; a mapping shown to the caller is
 * never held; closing ends the holds. */
START_TEST(the_library_holds_the_imports_of_its_writes)
{
    gkv_daemon_t d = start();
    gkv_client_t *w = connect_or_fail(d.url), *r = connect_or_fail(d.url);
    write_many(w, "a", 'x');
    check_many(r, "a", 'x');
    for (int i = 0; i < N; i++) { /* a non-mapping call: w's cached leases end first */
        char key[32];
        snprintf(key, sizeof(key), "a/%d", i);
        del_one(w, key);
    }
    uint64_t held = info_u64(r, "held_imports");
    ck_assert_uint_eq(held, on_cuda() ? N : 0);
    uint64_t reuses = info_u64(r, "kept_export_reuses");
    write_many(w, "b", 'y'); /* into the held memory, kept when its values went */
    check_many(r, "b", 'y');
    if (on_cuda())
        ck_assert_uint_ge(info_u64(r, "kept_export_reuses"), reuses + N);
    /* A value mapped by the caller: its import is never held. */
    gkv_mapping_t *m;
    ck_assert_int_eq(gkv_map(w, KEY("b/0"), NULL, &m), 0);
    ck_assert_int_eq(gkv_unmap(w, m), 0);
    del_one(w, "b/1"); /* the cache's leases end (and are held) */
    /* held: the first values' allocations, and any of the second's that were new */
    ck_assert_uint_le(info_u64(r, "held_imports"), on_cuda() ? 2 * N : 0);
    gkv_client_close(w);
    info_until(r, "held_imports", 0, 1000);
    ck_assert_uint_eq(info_u64(r, "leases"), 0);
    gkv_client_close(r);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("holds");
    TCase *t = tcase_create("holds");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, a_release_holds_allocations_until_unhold_or_close);
    tcase_add_test(t, the_library_holds_the_imports_of_its_writes);
    suite_add_tcase(s, t);
    return s;
}

#include "suite_main.h"
