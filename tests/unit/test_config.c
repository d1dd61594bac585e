/* test_config.c: gpukvd flags and config files. */
#include <gpukv/gpukv.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "config.h"
#include "log.h"

static int parse(gkv_config_t *cfg, char *err, int argc, ...)
{
    char *argv[32];
    va_list ap;
    va_start(ap, argc);
    argv[0] = "gpukvd";
    for (int i = 1; i < argc; i++)
        argv[i] = va_arg(ap, char *);
    va_end(ap);
    gkv_config_defaults(cfg);
    return gkv_config_parse_args(cfg, argc, argv, err, 256);
}

START_TEST(defaults)
{
    gkv_config_t cfg;
    gkv_config_defaults(&cfg);
    ck_assert_uint_eq(cfg.max_key, 1024);
    ck_assert_uint_eq(cfg.maxclients, 10000);
    ck_assert_int_eq(cfg.backend, GKV_BACKEND_AUTO);
    ck_assert_uint_eq(cfg.maxmemory, 0);
    ck_assert_str_eq(cfg.listen, "");
    ck_assert(strstr(cfg.socket_path, "gpukv.sock") != NULL);
}
END_TEST

START_TEST(flags)
{
    gkv_config_t cfg;
    char err[256];
    ck_assert_int_eq(parse(&cfg, err, 13, "--socket", "/tmp/x.sock", "--listen", "127.0.0.1:0",
                           "--backend", "host", "--maxmemory", "512M", "--max-key-size", "64",
                           "--log-level", "debug"),
                     0);
    ck_assert_str_eq(cfg.socket_path, "/tmp/x.sock");
    ck_assert_str_eq(cfg.listen, "127.0.0.1:0");
    ck_assert_int_eq(cfg.backend, GKV_BACKEND_HOST);
    ck_assert_uint_eq(cfg.maxmemory, 512u << 20);
    ck_assert_uint_eq(cfg.max_key, 64);
    ck_assert_int_eq(cfg.log_level, GKV_LOG_DEBUG);
    ck_assert_uint_eq(cfg.prealloc, 0);
    ck_assert_int_eq(parse(&cfg, err, 3, "--prealloc", "4G"), 0);
    ck_assert_uint_eq(cfg.prealloc, 4ull << 30);
    ck_assert_int_eq(parse(&cfg, err, 3, "--prealloc", "some"), GKV_EINVAL);
    ck_assert(strstr(err, "prealloc") != NULL);
    ck_assert_uint_eq(cfg.busy_poll_us, 0);
    ck_assert_int_eq(parse(&cfg, err, 3, "--busy-poll", "50"), 0);
    ck_assert_uint_eq(cfg.busy_poll_us, 50);
    ck_assert_int_eq(cfg.key_order_thread, GKV_AUTO);
    ck_assert_int_eq(parse(&cfg, err, 3, "--key-order-thread", "no"), 0);
    ck_assert_int_eq(cfg.key_order_thread, GKV_NO);
    ck_assert_int_eq(parse(&cfg, err, 3, "--key-order-thread", "yes"), 0);
    ck_assert_int_eq(cfg.key_order_thread, GKV_YES);
    ck_assert_int_eq(parse(&cfg, err, 1), 0);
    ck_assert_uint_eq(cfg.host_copy, GKV_SIZE_AUTO);
    ck_assert_uint_eq(cfg.host_copy_max_value, 64u << 10);
    ck_assert_int_eq(parse(&cfg, err, 5, "--host-copy", "1G", "--host-copy-max-value", "16K"), 0);
    ck_assert_uint_eq(cfg.host_copy, 1u << 30);
    ck_assert_uint_eq(cfg.host_copy_max_value, 16u << 10);
    ck_assert_int_eq(parse(&cfg, err, 3, "--host-copy", "0"), 0);
    ck_assert_uint_eq(cfg.host_copy, 0);
    ck_assert_int_eq(parse(&cfg, err, 3, "--host-copy", "auto"), 0);
    ck_assert_uint_eq(cfg.host_copy, GKV_SIZE_AUTO);
}
END_TEST

START_TEST(bad_flags_are_errors_with_a_reason)
{
    gkv_config_t cfg;
    char err[256];
    ck_assert_int_eq(parse(&cfg, err, 3, "--backend", "tpu"), GKV_EINVAL);
    ck_assert(strstr(err, "backend") != NULL);
    ck_assert_int_eq(parse(&cfg, err, 3, "--maxmemory", "lots"), GKV_EINVAL);
    ck_assert(strstr(err, "maxmemory") != NULL);
    ck_assert_int_eq(parse(&cfg, err, 3, "--max-key-size", "70000"), GKV_EINVAL);
    ck_assert_int_eq(parse(&cfg, err, 3, "--maxclients", "0"), GKV_EINVAL);
    ck_assert_int_eq(parse(&cfg, err, 3, "--listen", "nocolon"), GKV_EINVAL);
    ck_assert_int_eq(parse(&cfg, err, 2, "--bogus"), GKV_EINVAL);
    ck_assert_int_eq(parse(&cfg, err, 2, "stray"), GKV_EINVAL);
    ck_assert_int_eq(parse(&cfg, err, 2, "--socket"), GKV_EINVAL);
    ck_assert_int_eq(parse(&cfg, err, 3, "--busy-poll", "-1"), GKV_EINVAL);
    ck_assert(strstr(err, "busy-poll") != NULL);
    ck_assert_int_eq(parse(&cfg, err, 3, "--busy-poll", "2000000"), GKV_EINVAL);
    ck_assert_int_eq(parse(&cfg, err, 3, "--key-order-thread", "maybe"), GKV_EINVAL);
    ck_assert(strstr(err, "key-order-thread") != NULL);
    ck_assert_int_eq(parse(&cfg, err, 3, "--host-copy", "some"), GKV_EINVAL);
    ck_assert(strstr(err, "host-copy") != NULL);
    ck_assert_int_eq(parse(&cfg, err, 3, "--host-copy-max-value", "512"), GKV_EINVAL);
    ck_assert_int_eq(parse(&cfg, err, 3, "--host-copy-max-value", "2M"), GKV_EINVAL);
}
END_TEST

START_TEST(service_bounds_and_access)
{
    gkv_config_t cfg;
    char err[256];
    ck_assert_int_eq(parse(&cfg, err, 1), 0);
    ck_assert_uint_eq(cfg.frame_timeout_ms, 30000);
    ck_assert_uint_eq(cfg.write_timeout_ms, 60000);
    ck_assert_uint_eq(cfg.idle_timeout_ms, 0);
    ck_assert_uint_eq(cfg.shutdown_grace_ms, 5000);
    ck_assert_int_eq(parse(&cfg, err, 7, "--frame-timeout=250ms", "--idle-timeout", "2m",
                           "--allow-uid", "0,1000", "--allow-gid="),
                     0);
    ck_assert_uint_eq(cfg.frame_timeout_ms, 250);
    ck_assert_uint_eq(cfg.idle_timeout_ms, 120000);
    ck_assert_uint_eq(cfg.n_allow_uids, 2);
    ck_assert_uint_eq(cfg.allow_uids[1], 1000);
    ck_assert_uint_eq(cfg.n_allow_gids, 0);
    ck_assert_int_eq(parse(&cfg, err, 3, "--frame-timeout", "1.5s"), GKV_EINVAL);
    ck_assert(strstr(err, "frame-timeout") != NULL);
    ck_assert_int_eq(parse(&cfg, err, 3, "--allow-uid", "0,,1"), GKV_EINVAL);
    ck_assert_int_eq(parse(&cfg, err, 3, "--allow-uid", "root"), GKV_EINVAL);
    ck_assert_int_eq(
        parse(&cfg, err, 3, "--allow-uid", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17"),
        GKV_EINVAL);
    ck_assert_int_eq(parse(&cfg, err, 3, "--insecure-listen", "maybe"), GKV_EINVAL);
}
END_TEST

START_TEST(sighup_applies_only_reloadable_settings)
{
    gkv_config_t live, next;
    char err[256];
    ck_assert_int_eq(parse(&live, err, 5, "--maxclients", "5", "--backend", "host"), 0);
    ck_assert_int_eq(parse(&next, err, 9, "--maxclients", "7", "--backend", "cuda", "--allow-uid",
                           "42", "--idle-timeout", "9s"),
                     0);
    ck_assert(gkv_config_reloadable("maxclients"));
    ck_assert(!gkv_config_reloadable("backend"));
    ck_assert(!gkv_config_reloadable("no-such-key"));
    ck_assert_int_eq(gkv_config_apply_reloadable(&live, &next), 3);
    ck_assert_uint_eq(live.maxclients, 7);
    ck_assert_uint_eq(live.idle_timeout_ms, 9000);
    ck_assert_uint_eq(live.n_allow_uids, 1);
    ck_assert_uint_eq(live.allow_uids[0], 42);
    ck_assert_int_eq(live.backend, GKV_BACKEND_HOST); /* needs a restart */
    ck_assert_int_eq(gkv_config_apply_reloadable(&live, &next), 0);
}
END_TEST

START_TEST(config_file_then_flags)
{
    char path[] = "/tmp/gkv-conf-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "# comment\n[gpukvd]\nmaxmemory = 2G\nmaxclients = 12\nbackend = host\n");
    fclose(f);
    gkv_config_t cfg;
    char err[256];
    ck_assert_int_eq(parse(&cfg, err, 5, "--maxclients", "99", "--config", path), 0);
    ck_assert_uint_eq(cfg.maxmemory, 2ull << 30);
    ck_assert_uint_eq(cfg.maxclients, 99); /* the flag wins although it came first */
    ck_assert_int_eq(cfg.backend, GKV_BACKEND_HOST);
    f = fopen(path, "w");
    fprintf(f, "maxmemory = 2G\nnonsense = 1\n");
    fclose(f);
    ck_assert_int_eq(parse(&cfg, err, 3, "--config", path), GKV_EINVAL);
    ck_assert(strstr(err, ":2:") != NULL);
    ck_assert(strstr(err, "nonsense") != NULL);
    unlink(path);
    ck_assert_int_eq(parse(&cfg, err, 3, "--config", "/nonexistent/gpukvd.conf"), GKV_EINVAL);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("config");
    TCase *t = tcase_create("flags");
    tcase_add_test(t, defaults);
    tcase_add_test(t, flags);
    tcase_add_test(t, bad_flags_are_errors_with_a_reason);
    tcase_add_test(t, service_bounds_and_access);
    tcase_add_test(t, sighup_applies_only_reloadable_settings);
    suite_add_tcase(s, t);
    t = tcase_create("file");
    tcase_add_test(t, config_file_then_flags);
    suite_add_tcase(s, t);
    return s;
}
