/* test_metrics.c: --metrics-listen and INFO's Prometheus form against a real gpukvd: counts and
 * histograms follow the requests made, the HTTP side answers only GET/HEAD /metrics, needs the
 * bearer token when the server has one, and bounds what a scraper can hold. A non-loopback
 * --metrics-listen without a token is refused in test_hostile (listening_beyond_loopback_...). */
#include <arpa/inet.h>
#include <check.h>
#include <gpukv/gpukv.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check_client.h"
#include "harness.h"
#include "probe.h"

#define RESP_CAP (256u << 10)

/* The address --metrics-listen bound, from INFO. */
static void metrics_addr(const gkv_daemon_t *d, char *out, size_t cap)
{
    gkv_client_t *c = connect_or_fail(d->url);
    char *text;
    ck_assert_int_eq(gkv_info(c, &text), 0);
    const char *p = strstr(text, "\nmetrics_listen:");
    ck_assert_ptr_nonnull(p);
    p += strlen("\nmetrics_listen:");
    snprintf(out, cap, "%.*s", (int)strcspn(p, "\r\n"), p);
    gkv_free(text);
    gkv_client_close(c);
}

static int connect_addr(const char *hostport)
{
    int fd = harness_tcp_connect(hostport);
    ck_assert_msg(fd >= 0, "connect to %s", hostport);
    return fd;
}

/* Reads until the server closes (at most 20 s). Returns the bytes read. */
static size_t read_all(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    for (int waited = 0; n + 1 < cap && waited < 20000;) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 100) == 0) {
            waited += 100;
            continue;
        }
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    buf[n] = 0;
    return n;
}

/* Sends request as is; returns the HTTP status, the whole response in resp (RESP_CAP). */
static int http(const char *addr, const char *request, char *resp)
{
    int fd = connect_addr(addr);
    ck_assert_int_eq(write(fd, request, strlen(request)), (ssize_t)strlen(request));
    read_all(fd, resp, RESP_CAP);
    close(fd);
    int status = 0;
    sscanf(resp, "HTTP/1.1 %d", &status);
    return status;
}

static int scrape(const char *addr, char *resp)
{
    return http(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", resp);
}

/* The value of the sample whose line starts with series followed by a space, or -1. */
static double sample(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (strncmp(l, series, n) == 0 && l[n] == ' ')
            return strtod(l + n + 1, NULL);
    return -1;
}

/* The daemon answers a scrape and a client after what a test did to it; then it stops cleanly.
 * Frees resp. */
static void still_serves_then_stop(gkv_daemon_t *d, const char *addr, char *resp)
{
    ck_assert_int_eq(scrape(addr, resp), 200);
    gkv_client_t *c = connect_or_fail(d->url);
    ck_assert_int_eq(gkv_ping(c), 0);
    gkv_client_close(c);
    free(resp);
    ck_assert_int_eq(harness_stop(d), 0);
}

/* A gpukvd with --metrics-listen on a free loopback port (and --auth-token-file token_file
 * unless NULL); the address bound goes into addr (cap bytes). */
static gkv_daemon_t start_metrics(const char *token_file, char *addr, size_t cap)
{
    const char *const extra[] = {"--metrics-listen", "127.0.0.1:0", "--auth-token-file", token_file,
                                 NULL};
    gkv_daemon_t d;
    if (!token_file)
        ck_assert_int_eq(harness_start(&d, (const char *const[]){extra[0], extra[1], NULL}), 0);
    else
        ck_assert_int_eq(harness_start(&d, extra), 0);
    metrics_addr(&d, addr, cap);
    return d;
}

START_TEST(counts_and_histograms_follow_the_requests)
{
    char addr[128];
    gkv_daemon_t d = start_metrics(NULL, addr, sizeof(addr));
    gkv_client_t *c = connect_or_fail(d.url);
    size_t big = 3u << 20; /* through staging, not a copy batch */
    char *v = malloc(big);
    harness_fill(v, big, 7);
    ck_assert_int_eq(gkv_set(c, "a", 1, "x", 1, NULL), 0);
    ck_assert_int_eq(gkv_set(c, "b", 1, "yy", 2, NULL), 0);
    ck_assert_int_eq(gkv_set(c, "big", 3, v, big, NULL), 0);
    ck_assert_int_eq(gkv_get(c, "big", 3, NULL, v, big, NULL), 0);
    ck_assert_int_eq(gkv_get(c, "a", 1, NULL, v, 1, NULL), 0);
    ck_assert_int_eq(gkv_get(c, "none", 4, NULL, v, 1, NULL), GKV_ENOTFOUND);
    ck_assert_int_eq(gkv_ping(c), 0);

    char *resp = malloc(RESP_CAP);
    ck_assert_int_eq(scrape(addr, resp), 200);
    ck_assert_ptr_nonnull(strstr(resp, "Content-Type: text/plain; version=0.0.4"));
    ck_assert(sample(resp, "gpukv_commands_total{command=\"set\"}") == 3);
    ck_assert(sample(resp, "gpukv_commands_total{command=\"get\"}") == 3);
    ck_assert(sample(resp, "gpukv_command_errors_total{command=\"get\"}") == 1);
    ck_assert(sample(resp, "gpukv_command_errors_total{command=\"set\"}") == 0);
    ck_assert(sample(resp, "gpukv_commands_total{command=\"ping\"}") == 1);
    /* Each histogram: buckets never decrease and end at _count, which equals the calls. */
    ck_assert(sample(resp, "gpukv_command_duration_seconds_count{command=\"set\"}") == 3);
    ck_assert(sample(resp, "gpukv_command_duration_seconds_bucket{command=\"set\",le=\"+Inf\"}") ==
              3);
    ck_assert(sample(resp, "gpukv_command_duration_seconds_count{command=\"get\"}") == 3);
    ck_assert(sample(resp, "gpukv_command_duration_seconds_sum{command=\"get\"}") > 0);
    double prev = 0;
    int buckets = 0;
    const char *get_bucket = "gpukv_command_duration_seconds_bucket{command=\"get\",";
    for (const char *l = strstr(resp, get_bucket);
         l && strncmp(l, get_bucket, strlen(get_bucket)) == 0; l = strchr(l, '\n') + 1, buckets++) {
        double n = strtod(strchr(l, ' ') + 1, NULL);
        ck_assert(n >= prev);
        prev = n;
    }
    ck_assert_int_eq(buckets, 21);
    ck_assert(prev == 3);
    ck_assert(sample(resp, "gpukv_keys") == 3);
    char series[160];
    if (strcmp(harness_backend(), "cuda") == 0)
        ck_assert_ptr_nonnull(strstr(resp, "gpukv_memory_used_bytes{backend=\"cuda\",device=\"0\","
                                           "gpu_uuid=\"GPU-"));
    snprintf(series, sizeof(series), "gpukv_memory_used_bytes{backend=\"%s\"", harness_backend());
    const char *used = strstr(resp, series);
    ck_assert_ptr_nonnull(used);
    ck_assert(strtod(strchr(used, ' ') + 1, NULL) >= (double)(big + 3));
    ck_assert(sample(resp, "gpukv_connections") >= 1);
    ck_assert(sample(resp, "gpukv_received_bytes_total") > (double)big);
    ck_assert(sample(resp, "gpukv_sent_bytes_total") > (double)big);
    ck_assert(sample(resp, "gpukv_metrics_scrapes_total") == 1);
    /* The loop's busy turns (server/daemon/looplag.h): a few requests make none of 10 ms. */
    ck_assert(sample(resp, "gpukv_loop_busy_max_seconds") > 0);
    ck_assert(sample(resp, "gpukv_loop_busy_max_seconds") < 10);
    ck_assert(sample(resp, "gpukv_loop_stalls_total") >= 0);

    /* INFO's Prometheus form is the same text (one more scrape counted, one INFO more). */
    char *text;
    ck_assert_int_eq(gkv_metrics(c, &text), 0);
    ck_assert(sample(text, "gpukv_commands_total{command=\"set\"}") == 3);
    ck_assert(sample(text, "gpukv_commands_total{command=\"info\"}") >= 1);
    ck_assert_ptr_nonnull(strstr(text, "# TYPE gpukv_command_duration_seconds histogram\n"));
    gkv_free(text);
    gkv_client_close(c);
    free(resp);
    free(v);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* Issue 32: persistence (snapshots, the fd store) and the process_* series exporters carry. */
START_TEST(persistence_and_process_series_are_exported)
{
    char dir[64];
    ck_assert_int_eq(harness_tmpdir(dir, NULL, "mp"), 0);
    const char *const extra[] = {"--snapshot-dir", dir, NULL};
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, extra), 0);
    gkv_client_t *c = connect_or_fail(d.url);
    ck_assert_int_eq(gkv_set(c, "k", 1, "value", 5, NULL), 0);
    char *text;
    ck_assert_int_eq(gkv_metrics(c, &text), 0);
    ck_assert(sample(text, "gpukv_snapshot_saves_total{result=\"ok\"}") == 0);
    ck_assert(sample(text, "gpukv_snapshot_last_success_timestamp_seconds") == 0);
    ck_assert(sample(text, "gpukv_fd_store_enabled") == 0);
    gkv_free(text);
    time_t before = time(NULL);
    ck_assert_int_eq(gkv_save(c), 0);
    double saves = 0;
    for (int i = 0; i < 200 && saves < 1; i++) {
        ck_assert_int_eq(gkv_metrics(c, &text), 0);
        saves = sample(text, "gpukv_snapshot_saves_total{result=\"ok\"}");
        if (saves < 1)
            gkv_free(text);
        harness_sleep_ms(saves < 1 ? 50 : 0);
    }
    ck_assert(saves == 1);
    double at = sample(text, "gpukv_snapshot_last_success_timestamp_seconds");
    ck_assert_msg(at >= (double)before - 1 && at <= (double)time(NULL) + 1, "last save at %f", at);
    ck_assert(sample(text, "gpukv_snapshot_last_keys") == 1);
    ck_assert(sample(text, "gpukv_snapshot_saving") == 0);
    ck_assert(sample(text, "gpukv_snapshot_last_failed") == 0);
    ck_assert(sample(text, "process_resident_memory_bytes") > 1e6);
    ck_assert(sample(text, "process_virtual_memory_bytes") > 1e6);
    ck_assert(sample(text, "process_open_fds") >= 3);
    ck_assert(sample(text, "process_max_fds") >= sample(text, "process_open_fds"));
    ck_assert(sample(text, "process_cpu_seconds_total") >= 0);
    double started = sample(text, "process_start_time_seconds");
    ck_assert_msg(started > (double)before - 600 && started <= (double)time(NULL) + 1,
                  "started at %f", started);
    ck_assert_ptr_nonnull(strstr(text, "# TYPE process_cpu_seconds_total counter\n"));
    gkv_free(text);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
    ck_assert_int_eq(harness_rmdir(dir), 0);
}
END_TEST

START_TEST(only_get_and_head_of_metrics_are_served)
{
    char addr[128];
    gkv_daemon_t d = start_metrics(NULL, addr, sizeof(addr));
    char *resp = malloc(RESP_CAP);
    ck_assert_int_eq(http(addr, "GET /other HTTP/1.1\r\n\r\n", resp), 404);
    ck_assert_int_eq(http(addr, "GET /metricsx HTTP/1.1\r\n\r\n", resp), 404);
    ck_assert_int_eq(http(addr, "GET /metrics?x=1 HTTP/1.1\r\n\r\n", resp), 200);
    ck_assert_int_eq(http(addr, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", resp), 405);
    ck_assert_ptr_nonnull(strstr(resp, "Allow: GET, HEAD"));
    ck_assert_int_eq(http(addr, "garbage\r\n\r\n", resp), 400);
    ck_assert_int_eq(http(addr, "GET /metrics SPDY/3\r\n\r\n", resp), 400);
    /* HEAD: the headers of a scrape and no body. */
    ck_assert_int_eq(http(addr, "HEAD /metrics HTTP/1.1\r\n\r\n", resp), 200);
    const char *body = strstr(resp, "\r\n\r\n");
    ck_assert_ptr_nonnull(body);
    ck_assert_str_eq(body, "\r\n\r\n");
    /* A head over 8 KiB: 431, and the connection closes. */
    size_t n = 10000;
    char *huge = malloc(n + 32);
    memcpy(huge, "GET /metrics HTTP/1.1\r\nX: ", 26);
    memset(huge + 26, 'a', n);
    strcpy(huge + 26 + n, "\r\n\r\n");
    ck_assert_int_eq(http(addr, huge, resp), 431);
    free(huge);
    /* The daemon still serves its clients and scrapes. */
    still_serves_then_stop(&d, addr, resp);
}
END_TEST

START_TEST(scrapes_need_the_token_when_the_server_has_one)
{
    char path[] = "/tmp/gkv-mtoken-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    const char *token = "metrics-token-0123456789abcdef";
    ck_assert_int_eq(write(fd, token, strlen(token)), (ssize_t)strlen(token));
    close(fd);
    chmod(path, 0600);
    setenv("GPUKV_TOKEN_FILE", path, 1); /* for the harness's own connections */
    char addr[128];
    gkv_daemon_t d = start_metrics(path, addr, sizeof(addr));
    char *resp = malloc(RESP_CAP);
    ck_assert_int_eq(scrape(addr, resp), 401);
    ck_assert_ptr_nonnull(strstr(resp, "WWW-Authenticate: Bearer"));
    ck_assert_ptr_null(strstr(resp, "gpukv_"));
    ck_assert_int_eq(
        http(addr, "GET /metrics HTTP/1.1\r\nAuthorization: Bearer wrong\r\n\r\n", resp), 401);
    char req[256];
    snprintf(req, sizeof(req), "GET /metrics HTTP/1.1\r\nauthorization:  bearer %s \r\n\r\n",
             token);
    ck_assert_int_eq(http(addr, req, resp), 200);
    ck_assert(sample(resp, "gpukv_auth_failures_total") == 2);
    free(resp);
    ck_assert_int_eq(harness_stop(&d), 0);
    unsetenv("GPUKV_TOKEN_FILE");
    unlink(path);
}
END_TEST

START_TEST(silent_scrapers_are_bounded_and_dropped)
{
    char addr[128];
    gkv_daemon_t d = start_metrics(NULL, addr, sizeof(addr));
    /* 40 connections that send half a request and stop: past 16 they are closed at once. */
    int fds[40];
    for (int i = 0; i < 40; i++) {
        fds[i] = connect_addr(addr);
        ck_assert_int_eq(write(fds[i], "GET /met", 8), 8);
    }
    harness_sleep_ms(300);
    int closed = 0;
    char *resp = malloc(RESP_CAP);
    for (int i = 0; i < 40; i++) {
        struct pollfd p = {fds[i], POLLIN, 0};
        if (poll(&p, 1, 0) == 1 && read(fds[i], resp, 16) <= 0)
            closed++;
    }
    ck_assert_int_ge(closed, 40 - 16);
    /* The 16 the server kept are dropped at their deadline (10 s); then scrapes work again. */
    for (int i = 0; i < 40; i++) {
        ck_assert_uint_eq(read_all(fds[i], resp, RESP_CAP), 0);
        close(fds[i]);
    }
    still_serves_then_stop(&d, addr, resp);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("metrics");
    TCase *tc = tcase_create("metrics");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, counts_and_histograms_follow_the_requests);
    tcase_add_test(tc, persistence_and_process_series_are_exported);
    tcase_add_test(tc, only_get_and_head_of_metrics_are_served);
    tcase_add_test(tc, scrapes_need_the_token_when_the_server_has_one);
    tcase_add_test(tc, silent_scrapers_are_bounded_and_dropped);
    suite_add_tcase(s, tc);
    return s;
}

#include "suite_main.h"
