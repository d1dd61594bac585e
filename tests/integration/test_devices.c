/* test_devices.c: one gpukvd over several devices (--devices), on the host backend, whose arenas
 * stand for GPUs (labelled HOST-i): values land where the placement says, each device counts
 * its own memory and keys, a full device is OOM (naming it) while the other has room, values of
 * every size read back exact from both, MGET spans them, and zero-copy stays with device 0. */
#include <check.h>
#include <gpukv/gpukv.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_client.h"
#include "harness.h"
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

static void set_value(gkv_client_t *c, const char *key, size_t n, uint64_t seed)
{
    uint8_t *v = malloc(n ? n : 1);
    harness_fill(v, n, seed);
    ck_assert_int_eq(gkv_set(c, key, strlen(key), v, n, NULL), 0);
    free(v);
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
    /* Zero-copy reaches device 0's values; device 1's get NOTSUP, naming the device. */
    gkv_client_t *z = NULL;
    ck_assert_int_eq(gkv_client_connect(d.url, &z), 0);
    gkv_mapping_t *m = NULL;
    ck_assert_str_eq(gkv_client_info(z)->zero_copy, "host-memfd");
    {
        ck_assert_int_eq(gkv_map(z, "other", 5, NULL, &m), 0);
        ck_assert_int_eq(memcmp(m->ptr, wb, sizeof(wb)), 0);
        ck_assert_int_eq(gkv_unmap(z, m), 0);
        ck_assert_int_eq(gkv_map(z, "big1", 4, NULL, &m), GKV_ENOTSUP);
        ck_assert_ptr_nonnull(strstr(gkv_client_errmsg(z), "device 1"));
    }
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
    tcase_add_test(t, a_maxmemory_list_of_the_wrong_length_is_a_start_error);
    suite_add_tcase(s, t);
    return s;
}
