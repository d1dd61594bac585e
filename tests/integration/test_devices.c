/* test_devices.c: one gpukvd over several devices (--devices), on the host backend, whose arenas
 * stand for GPUs (labelled HOST-i): values land where the placement (or the request) says, each
 * device counts its own memory and keys, a full device is OOM (naming it) while the other has
 * room, values of every size read back exact from both, MGET spans them, replies say where a
 * value is, MOVE keeps the bytes under concurrent readers, and zero-copy reaches every device
 * (clients of one descriptor only the first). */
#include <check.h>
#include <gpukv/gpukv.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_client.h"
#include "commands.h"
#include "fdpass.h"
#include "harness.h"
#include "raw_frame.h"
#include "suite_main.h"

/* A figure of INFO's "gpuI:" line (name=value,...), or the test fails. */
static uint64_t gpu_field(gkv_client_t *c, unsigned i, const char *name)
{
    char *text, pat[32], want[40];
    ck_assert_int_eq(gkv_info(c, &text), 0);
    snprintf(pat, sizeof(pat), "\ngpu%u:", i);
    const char *line = strstr(text, pat);
    ck_assert_msg(line != NULL, "INFO has no gpu%u line", i);
    const char *end = strstr(line + 1, "\r\n");
    snprintf(want, sizeof(want), "%s=", name);
    const char *at = strstr(line, want);
    ck_assert_msg(at && (!end || at < end), "gpu%u has no %s", i, name);
    uint64_t v = strtoull(at + strlen(want), NULL, 10);
    gkv_free(text);
    return v;
}

static bool info_has(gkv_client_t *c, const char *s)
{
    char *text;
    ck_assert_int_eq(gkv_info(c, &text), 0);
    bool yes = strstr(text, s) != NULL;
    gkv_free(text);
    return yes;
}

static void set_on(gkv_client_t *c, const char *key, size_t n, uint64_t seed, int gpu)
{
    uint8_t *v = malloc(n ? n : 1);
    harness_fill(v, n, seed);
    gkv_set_opts_t o = {.gpu = gpu};
    ck_assert_int_eq(gkv_set(c, key, strlen(key), v, n, &o), 0);
    free(v);
}

static void set_value(gkv_client_t *c, const char *key, size_t n, uint64_t seed)
{
    set_on(c, key, n, seed, 0);
}

static int where(gkv_client_t *c, const char *key)
{
    uint64_t size;
    int gpu = -1;
    ck_assert_int_eq(gkv_locate(c, key, strlen(key), &size, &gpu), 0);
    return gpu;
}

static void check_value(gkv_client_t *c, const char *key, size_t n, uint64_t seed)
{
    uint8_t *v = malloc(n ? n : 1), *got = malloc(n ? n : 1);
    harness_fill(v, n, seed);
    gkv_value_info_t info;
    ck_assert_int_eq(gkv_get(c, key, strlen(key), NULL, got, n, &info), 0);
    ck_assert_uint_eq(info.length, n);
    ck_assert_msg(memcmp(v, got, n) == 0, "%s read back other bytes", key);
    free(v);
    free(got);
}

START_TEST(values_spread_over_two_devices_with_their_own_limits)
{
    const char *const extra[] = {"--devices",        "0,1", "--maxmemory", "8M,24M",
                                 "--host-zero-copy", "yes", NULL};
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, extra), 0);
    gkv_client_t *c = connect_or_fail(d.url);
    ck_assert(info_has(c, "\ngpus:2\r\n"));
    ck_assert(info_has(c, "gpu0:uuid=HOST-0,"));
    ck_assert(info_has(c, "gpu1:uuid=HOST-1,"));
    ck_assert(info_has(c, ",peers=0x03\r\n")); /* arenas: every copy is a memcpy */
    ck_assert_uint_eq(gpu_field(c, 0, "maxmemory"), 8u << 20);
    ck_assert_uint_eq(gpu_field(c, 1, "maxmemory"), 24u << 20);
    ck_assert_uint_eq(info_u64(c, "maxmemory"), 32u << 20);
    /* New keys go to the device with the most room: 1 until it has less room than 0. */
    set_value(c, "big1", 17u << 20, 1); /* staged: 1 has 7 MiB of room left, 0 has 8 */
    ck_assert_uint_eq(gpu_field(c, 1, "keys"), 1);
    ck_assert_uint_eq(gpu_field(c, 1, "used"), 17u << 20);
    set_value(c, "small", 100, 2);      /* batched, on 0 */
    set_value(c, "mid", 200u << 10, 3); /* staged, on 0 */
    ck_assert_uint_eq(gpu_field(c, 0, "keys"), 2);
    ck_assert_uint_eq(gpu_field(c, 0, "used"), 100 + (200u << 10));
    set_value(c, "other", 4096, 4); /* 0 has 7.8 MiB of room, 1 has 7: on 0 */
    ck_assert_uint_eq(gpu_field(c, 0, "keys"), 3);
    /* An overwrite stays on the key's device while it fits there. */
    set_value(c, "big1", 6u << 20, 5);
    ck_assert_uint_eq(gpu_field(c, 1, "keys"), 1);
    ck_assert_uint_eq(gpu_field(c, 1, "used"), 6u << 20);
    /* Every value reads back exact, whichever device holds it, alone or in one MGET. */
    check_value(c, "big1", 6u << 20, 5);
    check_value(c, "small", 100, 2);
    check_value(c, "mid", 200u << 10, 3);
    check_value(c, "other", 4096, 4);
    uint8_t a[100], b[4096], wa[100], wb[4096];
    harness_fill(wa, sizeof(wa), 2);
    harness_fill(wb, sizeof(wb), 4);
    ck_assert_int_eq(gkv_set(c, "small1", 6, wa, sizeof(wa), NULL), 0); /* on device 1 */
    ck_assert_uint_eq(gpu_field(c, 1, "keys"), 2);
    gkv_mget_item_t items[2] = {{.key = "small1", .klen = 6, .buf = a, .cap = sizeof(a)},
                                {.key = "other", .klen = 5, .buf = b, .cap = sizeof(b)}};
    ck_assert_int_eq(gkv_mget(c, items, 2), 0);
    ck_assert_int_eq(items[0].status, 0);
    ck_assert_int_eq(items[1].status, 0);
    ck_assert_int_eq(memcmp(a, wa, sizeof(a)), 0);
    ck_assert_int_eq(memcmp(b, wb, sizeof(b)), 0);
    /* A value that fits on no device is OOM and says which device it was placed on. */
    uint8_t *huge = calloc(1, 20u << 20);
    ck_assert_int_eq(gkv_set(c, "huge", 4, huge, 20u << 20, NULL), GKV_EOOM);
    ck_assert_ptr_nonnull(strstr(gkv_client_errmsg(c), "device 1 (HOST-1)"));
    ck_assert_uint_eq(gpu_field(c, 1, "oom_errors"), 1);
    ck_assert_uint_eq(gpu_field(c, 0, "oom_errors"), 0);
    free(huge);
    /* Zero-copy reaches both devices' values, each through its own arena. */
    gkv_client_t *z = NULL;
    ck_assert_int_eq(gkv_client_connect(d.url, &z), 0);
    gkv_mapping_t *m = NULL;
    ck_assert_str_eq(gkv_client_info(z)->zero_copy, "host-memfd");
    ck_assert_uint_eq(gkv_client_info(z)->gpus, 2);
    ck_assert_str_eq(gkv_client_info(z)->gpu_uuids[1], "HOST-1");
    ck_assert_int_eq(gkv_map(z, "other", 5, NULL, &m), 0);
    ck_assert_int_eq(memcmp(m->ptr, wb, sizeof(wb)), 0);
    ck_assert_int_eq(m->gpu, 0);
    ck_assert_int_eq(gkv_unmap(z, m), 0);
    ck_assert_int_eq(gkv_map(z, "small1", 6, NULL, &m), 0);
    ck_assert_int_eq(m->gpu, 1);
    ck_assert_str_eq(m->gpu_uuid, "HOST-1");
    ck_assert_int_eq(memcmp(m->ptr, wa, sizeof(wa)), 0);
    ck_assert_int_eq(gkv_unmap(z, m), 0);
    gkv_client_close(z);
    /* DEL gives each device's memory back. */
    const void *keys[] = {"big1", "small", "mid", "other", "small1"};
    size_t klens[] = {4, 5, 3, 5, 6};
    ck_assert_int_eq(gkv_del(c, keys, klens, 5), 5);
    ck_assert_uint_eq(gpu_field(c, 0, "used") + gpu_field(c, 1, "used"), 0);
    ck_assert_uint_eq(gpu_field(c, 0, "keys") + gpu_field(c, 1, "keys"), 0);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* A raw request of op on fd with a key and gpu (an ordinal, or a UUID when uuid is set). */
static int64_t raw_gpu_request(int fd, unsigned op, const char *key, uint64_t gpu, const char *uuid,
                               gkv_response_t *r, uint8_t *hdr, size_t cap)
{
    gkv_wr_t w;
    gkv_wr_init(&w);
    gkv_wr_begin(&w);
    gkv_wr_uint(&w, GKV_F_OP, op);
    gkv_wr_uint(&w, GKV_F_ID, 9);
    gkv_wr_bin(&w, GKV_F_KEY, key, strlen(key));
    if (uuid)
        gkv_wr_str(&w, GKV_F_GPU, uuid);
    else
        gkv_wr_uint(&w, GKV_F_GPU, gpu);
    gkv_wr_end(&w);
    int64_t st = raw_call(fd, &w, r, hdr, cap);
    gkv_wr_fini(&w);
    return st;
}

START_TEST(requests_name_the_gpu_and_replies_say_where_values_are)
{
    const char *const extra[] = {"--devices",        "0,1", "--maxmemory", "8M,8M",
                                 "--host-zero-copy", "yes", NULL};
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, extra), 0);
    gkv_client_t *c = connect_or_fail(d.url);
    /* Named: on that device, whatever the default would say; GET, GETSIZE and LIST say so. */
    set_on(c, "a", 5000, 1, GKV_GPU(1));
    set_on(c, "b", 3u << 20, 2, GKV_GPU(1));
    set_on(c, "c", 100, 3, GKV_GPU(0));
    ck_assert_int_eq(where(c, "a"), 1);
    ck_assert_int_eq(where(c, "b"), 1);
    ck_assert_int_eq(where(c, "c"), 0);
    uint8_t buf[5000];
    gkv_value_info_t vi;
    ck_assert_int_eq(gkv_get(c, "a", 1, NULL, buf, sizeof(buf), &vi), 0);
    ck_assert_int_eq(vi.gpu, 1);
    gkv_list_t *it;
    gkv_list_entry_t e;
    int want[] = {1, 1, 0}, n = 0;
    ck_assert_int_eq(gkv_list_open(c, "", 0, 0, 0, &it), 0);
    while (gkv_list_next(it, &e) == 1) {
        ck_assert_int_lt(n, 3);
        ck_assert_int_eq(e.gpu, want[n++]);
    }
    gkv_list_close(it);
    ck_assert_int_eq(n, 3);
    /* A GPU the server does not have is INVALID, naming it, and nothing is stored. */
    gkv_set_opts_t o = {.gpu = GKV_GPU(2)};
    ck_assert_int_eq(gkv_set(c, "x", 1, "x", 1, &o), GKV_EINVAL);
    ck_assert_ptr_nonnull(strstr(gkv_client_errmsg(c), "no GPU 2"));
    ck_assert_int_eq(gkv_getsize(c, "x", 1, &(uint64_t){0}), GKV_ENOTFOUND);
    /* A UUID names a GPU too (raw: the library sends ordinals). */
    int fd = raw_connect(d.sock);
    gkv_response_t r;
    uint8_t hdr[4096];
    ck_assert_int_eq(raw_gpu_request(fd, GKV_OP_MOVE, "c", 0, "HOST-1", &r, hdr, sizeof(hdr)), 0);
    ck_assert_int_eq(r.gpu, 1);
    ck_assert_int_eq(where(c, "c"), 1);
    ck_assert_int_eq(raw_gpu_request(fd, GKV_OP_MOVE, "c", 0, "GPU-nope", &r, hdr, sizeof(hdr)),
                     GKV_EINVAL);
    ck_assert_int_eq(raw_gpu_request(fd, GKV_OP_MOVE, "c", 9, NULL, &r, hdr, sizeof(hdr)),
                     GKV_EINVAL);
    close(fd);
    /* CREATE on a named device, through that device's arena. */
    gkv_client_t *z = connect_or_fail(d.url);
    gkv_mapping_t *m;
    gkv_set_opts_t on1 = {.gpu = GKV_GPU(1)};
    ck_assert_int_eq(gkv_create(z, "made", 4, 4096, &on1, &m), 0);
    ck_assert_int_eq(m->gpu, 1);
    harness_fill(m->ptr, 4096, 7);
    ck_assert_int_eq(gkv_seal(z, m), 0);
    ck_assert_int_eq(where(c, "made"), 1);
    check_value(c, "made", 4096, 7);
    gkv_client_close(z);
    /* A client of one descriptor (protocol 1's zero_copy = 1) gets the first device's memory
     * alone: MAP of a value elsewhere is NOTSUP, never another arena's bytes. */
    fd = raw_connect(d.sock);
    int fds[GKV_FDPASS_MAX];
    unsigned nfds;
    raw_hello_fds(fd, 1, fds, GKV_FDPASS_MAX, &nfds);
    ck_assert_uint_eq(nfds, 1);
    close(fds[0]);
    ck_assert_int_eq(raw_request(fd, GKV_OP_MAP, (raw_fields_t){.key = "a"}, &r, hdr, sizeof(hdr)),
                     GKV_ENOTSUP);
    ck_assert_int_eq(
        raw_request(fd, GKV_OP_MAP, (raw_fields_t){.key = "made"}, &r, hdr, sizeof(hdr)),
        GKV_ENOTSUP);
    close(fd);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

START_TEST(move_keeps_every_byte_under_concurrent_readers)
{
    const char *const extra[] = {"--devices", "0,1", "--maxmemory", "16M,8M", NULL};
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, extra), 0);
    gkv_client_t *c = connect_or_fail(d.url);
    set_on(c, "m", 3u << 20, 11, GKV_GPU(0));
    set_on(c, "s", 100, 12, GKV_GPU(0));
    gkv_set_opts_t ttl = {.ttl_ms = 600000, .meta = "mm", .meta_len = 2};
    ck_assert_int_eq(gkv_set(c, "t", 1, "tt", 2, &ttl), 0);
    /* Readers of the keys being moved back and forth: every GET is the whole value, exact. */
    harness_readers_t rd = {
        .url = d.url, .keys = {"m", "s"}, .sizes = {3u << 20, 100}, .seeds = {11, 12}, .nkeys = 2};
    ck_assert_int_eq(harness_readers_start(&rd, 2), 0);
    for (int i = 0; i < 20; i++) {
        int to = (i & 1) ? 0 : 1;
        ck_assert_int_eq(gkv_move(c, "m", 1, to), 1);
        ck_assert_int_eq(gkv_move(c, "s", 1, to), 1);
        ck_assert_int_eq(where(c, "m"), to);
        ck_assert_int_eq(where(c, "s"), to);
    }
    harness_readers_stop(&rd);
    ck_assert_int_eq(atomic_load(&rd.wrong), 0);
    ck_assert_int_gt(atomic_load(&rd.reads), 0);
    /* The moves left nothing behind: each device holds what is on it now. */
    int tgpu = where(c, "t");
    ck_assert_uint_eq(gpu_field(c, 0, "used"), (3u << 20) + 100 + (tgpu == 0 ? 2 : 0));
    ck_assert_uint_eq(gpu_field(c, 1, "used"), tgpu == 1 ? 2 : 0);
    /* The deadline and metadata move with the value. */
    ck_assert_int_eq(gkv_move(c, "t", 1, 1 - tgpu), 1);
    uint64_t left = 0;
    ck_assert_int_eq(gkv_ttl(c, "t", 1, &left), 0);
    ck_assert(left > 500000 && left <= 600000);
    char tb[2];
    gkv_value_info_t vi;
    ck_assert_int_eq(gkv_get(c, "t", 1, NULL, tb, 2, &vi), 0);
    ck_assert_uint_eq(vi.meta_len, 2);
    ck_assert_int_eq(memcmp(vi.meta, "mm", 2), 0);
    /* Already there, missing, no such GPU, no room: nothing changes. */
    ck_assert_int_eq(gkv_move(c, "m", 1, 0), 0);
    ck_assert_int_eq(gkv_move(c, "nope", 4, 1), GKV_ENOTFOUND);
    ck_assert_int_eq(gkv_move(c, "m", 1, 5), GKV_EINVAL);
    set_on(c, "big", 6u << 20, 13, GKV_GPU(0));
    set_on(c, "fill", 4u << 20, 14, GKV_GPU(1));
    ck_assert_int_eq(gkv_move(c, "big", 3, 1), GKV_EOOM);
    ck_assert_ptr_nonnull(strstr(gkv_client_errmsg(c), "on device 1 (HOST-1)"));
    ck_assert_int_eq(where(c, "big"), 0);
    check_value(c, "big", 6u << 20, 13);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

START_TEST(a_maxmemory_list_of_the_wrong_length_is_a_start_error)
{
    const char *const extra[] = {"--devices", "0,1", "--maxmemory", "8M,8M,8M", NULL};
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, extra), -1);
    char log[4096];
    harness_read_log(&d, log, sizeof(log));
    ck_assert_ptr_nonnull(strstr(log, "--maxmemory lists 3 sizes for 2 devices"));
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("devices");
    TCase *t = tcase_create("host");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, values_spread_over_two_devices_with_their_own_limits);
    tcase_add_test(t, requests_name_the_gpu_and_replies_say_where_values_are);
    tcase_add_test(t, move_keeps_every_byte_under_concurrent_readers);
    tcase_add_test(t, a_maxmemory_list_of_the_wrong_length_is_a_start_error);
    suite_add_tcase(s, t);
    return s;
}
