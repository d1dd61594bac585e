/* test_zc_clients.c: zero-copy clients that die or misbehave: leases and unsealed values
 * given back after SIGKILL, descriptors sent to the daemon not kept. */
#include <check.h>
#include <gpukv/gpukv.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "fdpass.h"
#include "zc_daemon.h"

/* A child that takes leases, reports ready on a pipe, then waits to be killed. */
static pid_t spawn_holder(int nmaps, int create, int *ready_fd)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(p[0]);
        gkv_client_t *c;
        if (gkv_client_connect(d.url, &c))
            _exit(2);
        gkv_mapping_t *m;
        for (int i = 0; i < nmaps; i++)
            if (gkv_map(c, KEY("kill/v"), NULL, &m))
                _exit(3);
        if (create && gkv_create(c, KEY("kill/pending"), 1 << 20, NULL, &m))
            _exit(4);
        if (write(p[1], "r", 1) != 1)
            _exit(5);
        pause();
        _exit(0);
    }
    close(p[1]);
    *ready_fd = p[0];
    return pid;
}

static void wait_ready(int fd)
{
    char ch;
    ck_assert_int_eq(read(fd, &ch, 1), 1);
    close(fd);
}

/* Polls INFO until no lease, no unsealed create and the baseline memory; returns ms taken. */
static long wait_released(gkv_client_t *c, uint64_t used)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        long ms = (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
        if (info_u64(c, "leases") == 0 && info_u64(c, "unsealed_creates") == 0 &&
            info_u64(c, "used_bytes") == used)
            return ms;
        if (ms > 1000)
            return ms;
        usleep(5000);
    }
}

static int open_fds(pid_t pid)
{
    char cmd[64];
    snprintf(cmd, sizeof(cmd), "ls /proc/%d/fd | wc -l", (int)pid);
    FILE *f = popen(cmd, "r");
    int n = -1;
    ck_assert_int_eq(fscanf(f, "%d", &n), 1);
    pclose(f);
    return n;
}

START_TEST(killed_client_gives_back_leases_and_creates)
{
    gkv_client_t *c = conn(d.url);
    ck_assert_int_eq(gkv_flush(c), 0);
    ck_assert_int_eq(gkv_set(c, KEY("kill/v"), "leased", 6, NULL), 0);
    uint64_t used = info_u64(c, "used_bytes");
    int ready;
    pid_t pid = spawn_holder(1000, 1, &ready);
    wait_ready(ready);
    ck_assert_uint_eq(info_u64(c, "leases"), 1001);
    ck_assert_uint_eq(info_u64(c, "used_bytes"), used + (1 << 20));
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    long ms = wait_released(c, used);
    fprintf(stderr, "1000 leases and a 1 MiB CREATE given back %ld ms after SIGKILL\n", ms);
    ck_assert_int_le(ms, 1000);
    const void *k[] = {"kill/pending"};
    size_t kl[] = {12};
    ck_assert_int_eq(gkv_exists(c, k, kl, 1), 0);
    gkv_client_close(c);
}
END_TEST

START_TEST(hundred_clients_killed_at_once)
{
    enum { N = 100 };
    gkv_client_t *c = conn(d.url);
    ck_assert_int_eq(gkv_set(c, KEY("kill/v"), "leased", 6, NULL), 0);
    uint64_t used = info_u64(c, "used_bytes");
    pid_t pids[N];
    int ready[N];
    for (int i = 0; i < N; i++)
        pids[i] = spawn_holder(10, 0, &ready[i]);
    for (int i = 0; i < N; i++)
        wait_ready(ready[i]);
    ck_assert_uint_eq(info_u64(c, "leases"), N * 10);
    for (int i = 0; i < N; i++)
        kill(pids[i], SIGKILL);
    for (int i = 0; i < N; i++)
        waitpid(pids[i], NULL, 0);
    long ms = wait_released(c, used);
    fprintf(stderr, "%d clients x 10 leases given back %ld ms after SIGKILL\n", N, ms);
    ck_assert_int_le(ms, 1000);
    gkv_client_close(c);
}
END_TEST

START_TEST(descriptors_sent_by_clients_are_not_kept)
{
    gkv_client_t *c = conn(d.url);
    int before = open_fds(d.pid);
    int fd = raw_zc_connect();
    gkv_wr_t w;
    gkv_wr_init(&w);
    gkv_wr_begin(&w);
    gkv_wr_uint(&w, GKV_F_OP, GKV_OP_PING);
    gkv_wr_uint(&w, GKV_F_ID, 1);
    gkv_wr_end(&w);
    for (int i = 0; i < 20; i++) {
        int passed = dup(1);
        ck_assert_int_eq(gkv_fd_send(fd, w.sb.data, w.sb.size, passed), (ssize_t)w.sb.size);
        close(passed);
        uint8_t resp[64];
        ck_assert_int_gt(recv(fd, resp, sizeof(resp), 0), 0);
    }
    gkv_wr_fini(&w);
    ck_assert_int_eq(gkv_ping(c), 0);
    ck_assert_int_le(open_fds(d.pid), before + 1); /* only the new connection itself */
    close(fd);
    gkv_client_close(c);
}
END_TEST

/* Issue 12, failure 1: a zero-copy client that shrinks the arena's memfd it was passed must not
 * crash the daemon (SIGBUS on its next copy): the memfd is sealed against resizing. */
START_TEST(a_client_cannot_resize_the_shared_arena)
{
    gkv_client_t *c = conn(d.url);
    static char big[1 << 20];
    memset(big, 'b', sizeof(big));
    ck_assert_int_eq(gkv_set(c, KEY("resize/big"), big, sizeof(big), NULL), 0);
    int fd = raw_zc_connect(), arena = -1;
    unsigned n;
    raw_hello_fds(fd, 1, &arena, 1, &n);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_ge(arena, 0);
    ck_assert_int_ne(ftruncate(arena, 0), 0);
    ck_assert_int_ne(ftruncate(arena, (off_t)1 << 40), 0);
    close(arena);
    close(fd);
    static char back[1 << 20];
    gkv_value_info_t vi;
    ck_assert_int_eq(gkv_get(c, KEY("resize/big"), NULL, back, sizeof(back), &vi), 0);
    ck_assert_int_eq(memcmp(back, big, sizeof(big)), 0);
    ck_assert_int_eq(gkv_set(c, KEY("resize/small"), "s", 1, NULL), 0);
    ck_assert_int_eq(gkv_ping(c), 0);
    gkv_client_close(c);
}
END_TEST

int main(void)
{
    const TTest *const tests[] = {
        killed_client_gives_back_leases_and_creates,
        hundred_clients_killed_at_once,
        descriptors_sent_by_clients_are_not_kept,
        a_client_cannot_resize_the_shared_arena,
    };
    return zc_run_suite("zc_clients", tests, sizeof(tests) / sizeof(tests[0]));
}
