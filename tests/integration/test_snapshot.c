/* test_snapshot.c: snapshots (SAVE, --snapshot-dir): every value, its metadata and deadline come
 * back bit-exact after a restart; a corrupted byte is refused at start (or skipped for the
 * older snapshot when asked); a daemon SIGKILLed at random points of a save restarts with the
 * previous snapshot or the new one, never a mix; a graceful stop saves what came after the last
 * SAVE (--snapshot-on-exit); SAVE without --snapshot-dir is NOTSUP. */
#include <check.h>
#include <dirent.h>
#include <stdbool.h>
#include <fcntl.h>
#include <gpukv/gpukv.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_client.h"
#include "harness.h"
#include "suite_main.h"

static char snaps[64];

static void make_dir(void)
{
    ck_assert_int_eq(harness_tmpdir(snaps, NULL, "snap"), 0);
}

static void remove_dir(void)
{
    ck_assert_int_eq(harness_rmdir(snaps), 0);
}

/* A daemon on the test's snapshot directory; skip: --snapshot-skip-corrupt; the save at a
 * graceful stop (--snapshot-on-exit) only when on_exit. */
static int start_with(gkv_daemon_t *d, const char *skip, bool on_exit)
{
    const char *const args[] = {"--snapshot-dir", snaps, "--maxmemory", "512M",
                                "--snapshot-skip-corrupt", skip, "--snapshot-on-exit",
                                on_exit ? "yes" : "no", NULL};
    return harness_start(d, args);
}

static int start(gkv_daemon_t *d, const char *skip)
{
    return start_with(d, skip, false);
}

/* Saves and waits until the save has ended; returns INFO's saves afterwards. */
static uint64_t save(gkv_client_t *c)
{
    uint64_t before = info_u64(c, "saves");
    ck_assert_int_eq(gkv_save(c), 0);
    for (int i = 0; i < 3000 && info_u64(c, "saving"); i++)
        harness_sleep_ms(10);
    ck_assert_uint_eq(info_u64(c, "saving"), 0);
    ck_assert_uint_eq(info_u64(c, "save_failures"), 0);
    uint64_t after = info_u64(c, "saves");
    ck_assert_uint_eq(after, before + 1);
    return after;
}

static const size_t sizes[] = {0, 1, 100, 4096, 65536, 1u << 20, 5u << 20};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static void write_values(gkv_client_t *c, uint64_t gen)
{
    for (size_t i = 0; i < NSIZES; i++) {
        char key[32], meta[32];
        snprintf(key, sizeof(key), "v/%zu", i);
        snprintf(meta, sizeof(meta), "gen %llu", (unsigned long long)gen);
        uint8_t *v = malloc(sizes[i] + 1);
        harness_fill(v, sizes[i], gen * 100 + i);
        gkv_set_opts_t o = {.meta = meta, .meta_len = strlen(meta), .ttl_ms = i == 2 ? 3600000 : 0};
        ck_assert_int_eq(gkv_set(c, key, strlen(key), v, sizes[i], &o), 0);
        free(v);
    }
}

/* The generation every value holds (all the same), or the test fails. */
static uint64_t read_values(gkv_client_t *c)
{
    uint64_t gen = 0;
    for (size_t i = 0; i < NSIZES; i++) {
        char key[32];
        snprintf(key, sizeof(key), "v/%zu", i);
        uint8_t *got = malloc(sizes[i] + 1), *want = malloc(sizes[i] + 1);
        gkv_value_info_t vi;
        ck_assert_int_eq(gkv_get(c, key, strlen(key), NULL, got, sizes[i], &vi), 0);
        ck_assert_uint_eq(vi.size, sizes[i]);
        unsigned long long g = 0;
        ck_assert_int_eq(sscanf(vi.meta ? (const char *)vi.meta : "", "gen %llu", &g), 1);
        if (i == 0)
            gen = g;
        ck_assert_uint_eq(g, gen); /* one snapshot's values, not a mix */
        harness_fill(want, sizes[i], gen * 100 + i);
        ck_assert_msg(memcmp(got, want, sizes[i]) == 0, "%s: other bytes", key);
        uint64_t ttl;
        ck_assert_int_eq(gkv_ttl(c, key, strlen(key), &ttl), 0);
        if (i == 2)
            ck_assert(ttl > 3000000 && ttl <= 3600000);
        else
            ck_assert_uint_eq(ttl, GKV_NO_TTL);
        free(got);
        free(want);
    }
    return gen;
}

START_TEST(values_metadata_and_deadlines_survive_a_restart)
{
    make_dir();
    gkv_daemon_t d;
    ck_assert_int_eq(start(&d, "no"), 0);
    gkv_client_t *c = connect_or_fail(d.url);
    write_values(c, 1);
    save(c);
    ck_assert_uint_eq(info_u64(c, "last_save_keys"), NSIZES);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
    ck_assert_int_eq(start(&d, "no"), 0);
    c = connect_or_fail(d.url);
    ck_assert_uint_eq(read_values(c), 1);
    ck_assert_uint_eq(info_u64(c, "loaded_keys"), NSIZES);
    ck_assert_uint_eq(info_u64(c, "keys"), NSIZES);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
    remove_dir();
}
END_TEST

/* The newest snapshot's path into p. */
static void newest(char *p, size_t cap)
{
    DIR *d = opendir(snaps);
    struct dirent *de;
    char best[256] = "";
    while ((de = readdir(d)))
        if (strncmp(de->d_name, "gpukv-", 6) == 0 && strcmp(de->d_name, best) > 0)
            snprintf(best, sizeof(best), "%s", de->d_name);
    closedir(d);
    ck_assert(best[0]);
    snprintf(p, cap, "%s/%s", snaps, best);
}

START_TEST(a_corrupted_byte_is_refused_or_skipped_for_the_older_snapshot)
{
    make_dir();
    gkv_daemon_t d;
    ck_assert_int_eq(start(&d, "no"), 0);
    gkv_client_t *c = connect_or_fail(d.url);
    write_values(c, 1);
    save(c);
    harness_sleep_ms(2); /* the next snapshot's name (its millisecond) sorts after */
    write_values(c, 2);
    save(c);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
    /* One byte of the newest's largest value flipped. */
    char p[512];
    newest(p, sizeof(p));
    struct stat st;
    ck_assert_int_eq(stat(p, &st), 0);
    int fd = open(p, O_RDWR);
    uint8_t b;
    off_t at = st.st_size - 32 - 4 - 1000;
    ck_assert_int_eq(pread(fd, &b, 1, at), 1);
    b ^= 0x40;
    ck_assert_int_eq(pwrite(fd, &b, 1, at), 1);
    close(fd);
    ck_assert_int_eq(start(&d, "no"), -1);
    char log[8192];
    harness_read_log(&d, log, sizeof(log));
    ck_assert_ptr_nonnull(strstr(log, "is corrupt or unreadable: record 6's checksum is wrong"));
    /* Asked to skip it, the daemon loads the older one, whole. */
    ck_assert_int_eq(start(&d, "yes"), 0);
    c = connect_or_fail(d.url);
    ck_assert_uint_eq(read_values(c), 1);
    ck_assert_uint_eq(info_u64(c, "skipped_corrupt_snapshots"), 1);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
    remove_dir();
}
END_TEST

START_TEST(a_save_killed_at_random_points_leaves_the_old_snapshot_or_the_new)
{
    make_dir();
    srand(1234);
    gkv_daemon_t d;
    ck_assert_int_eq(start(&d, "no"), 0);
    gkv_client_t *c = connect_or_fail(d.url);
    write_values(c, 1);
    save(c);
    /* The kills fall within twice the time a save takes here (at least 2 ms). */
    uint64_t save_us = info_u64(c, "last_save_ms") * 1000 + 1000;
    uint64_t saved = 1, newer = 0, older = 0;
    for (uint64_t round = 2; round < 14; round++) {
        write_values(c, round);
        ck_assert_int_eq(gkv_save(c), 0);
        usleep((useconds_t)((uint64_t)rand() % (2 * save_us)));
        gkv_client_close(c);
        harness_kill(&d);
        ck_assert_int_eq(start(&d, "no"), 0);
        c = connect_or_fail(d.url);
        uint64_t gen = read_values(c);
        ck_assert(gen == saved || gen == round);
        if (gen == round)
            newer++;
        else
            older++;
        saved = gen;
        write_values(c, saved); /* the store as the snapshot it loaded */
    }
    fprintf(stderr,
            "12 saves killed at random points: %llu restarted from the new snapshot, "
            "%llu from the one before\n",
            (unsigned long long)newer, (unsigned long long)older);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
    /* What a killed save left behind is gone: only whole snapshots remain. */
    DIR *dir = opendir(snaps);
    struct dirent *de;
    while ((de = readdir(dir)))
        ck_assert_msg(strstr(de->d_name, ".tmp") == NULL, "%s left behind", de->d_name);
    closedir(dir);
    remove_dir();
}
END_TEST

START_TEST(a_graceful_stop_saves_every_write_for_the_restart)
{
    make_dir();
    gkv_daemon_t d;
    ck_assert_int_eq(start_with(&d, "no", true), 0);
    gkv_client_t *c = connect_or_fail(d.url);
    write_values(c, 1);
    save(c);
    write_values(c, 2); /* after the last SAVE: only the save at exit keeps it */
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
    ck_assert_int_eq(start_with(&d, "no", true), 0);
    c = connect_or_fail(d.url);
    ck_assert_uint_eq(read_values(c), 2);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
    remove_dir();
}
END_TEST

/* More keys than one loop turn lists (16384): the listing goes on across turns, all of them. */
START_TEST(keys_listed_across_loop_turns_all_come_back)
{
    make_dir();
    gkv_daemon_t d;
    ck_assert_int_eq(start(&d, "no"), 0);
    gkv_client_t *c = connect_or_fail(d.url);
    char key[32], val[32];
    for (int i = 0; i < 40000; i++) {
        int kl = snprintf(key, sizeof(key), "many/%05d", i);
        int vl = snprintf(val, sizeof(val), "value %d", i);
        ck_assert_int_eq(gkv_set(c, key, (size_t)kl, val, (size_t)vl, NULL), 0);
    }
    save(c);
    ck_assert_uint_eq(info_u64(c, "last_save_keys"), 40000);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
    ck_assert_int_eq(start(&d, "no"), 0);
    c = connect_or_fail(d.url);
    ck_assert_uint_eq(info_u64(c, "keys"), 40000);
    for (int i = 0; i < 40000; i += 997) {
        int kl = snprintf(key, sizeof(key), "many/%05d", i);
        int vl = snprintf(val, sizeof(val), "value %d", i);
        char got[32];
        gkv_value_info_t vi;
        ck_assert_int_eq(gkv_get(c, key, (size_t)kl, NULL, got, sizeof(got), &vi), 0);
        ck_assert_uint_eq(vi.length, (uint64_t)vl);
        ck_assert_int_eq(memcmp(got, val, (size_t)vl), 0);
    }
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
    remove_dir();
}
END_TEST

/* --snapshot-interval set by SIGHUP (from the --config file) starts saving without a restart. */
START_TEST(a_reloaded_interval_starts_saving)
{
    make_dir();
    char conf[128];
    snprintf(conf, sizeof(conf), "%s/gpukvd.conf", snaps);
    FILE *f = fopen(conf, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "snapshot-dir = %s\n", snaps);
    fclose(f);
    gkv_daemon_t d;
    const char *const args[] = {"--config", conf, "--snapshot-on-exit", "no", NULL};
    ck_assert_int_eq(harness_start(&d, args), 0);
    gkv_client_t *c = connect_or_fail(d.url);
    ck_assert_int_eq(gkv_set(c, "k", 1, "v", 1, NULL), 0);
    harness_sleep_ms(300);
    ck_assert_uint_eq(info_u64(c, "saves"), 0);
    f = fopen(conf, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "snapshot-dir = %s\nsnapshot-interval = 100ms\n", snaps);
    fclose(f);
    kill(d.pid, SIGHUP);
    uint64_t saves = 0;
    for (int i = 0; i < 100 && (saves = info_u64(c, "saves")) < 2; i++)
        harness_sleep_ms(50);
    ck_assert_uint_ge(saves, 2);
    ck_assert_uint_eq(info_u64(c, "snapshot_interval_ms"), 100);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
    remove_dir();
}
END_TEST

START_TEST(save_without_a_snapshot_dir_is_notsup)
{
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, NULL), 0);
    gkv_client_t *c = connect_or_fail(d.url);
    ck_assert_int_eq(gkv_save(c), GKV_ENOTSUP);
    ck_assert_ptr_nonnull(strstr(gkv_client_errmsg(c), "no --snapshot-dir"));
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("snapshot");
    TCase *t = tcase_create("host");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, values_metadata_and_deadlines_survive_a_restart);
    tcase_add_test(t, a_corrupted_byte_is_refused_or_skipped_for_the_older_snapshot);
    tcase_add_test(t, a_save_killed_at_random_points_leaves_the_old_snapshot_or_the_new);
    tcase_add_test(t, a_graceful_stop_saves_every_write_for_the_restart);
    tcase_add_test(t, keys_listed_across_loop_turns_all_come_back);
    tcase_add_test(t, a_reloaded_interval_starts_saving);
    tcase_add_test(t, save_without_a_snapshot_dir_is_notsup);
    suite_add_tcase(s, t);
    return s;
}
