/* test_metrics.c: --metrics-listen and INFO's Prometheus form against a real gpukvd: counts and
 * histograms follow the requests made, the HTTP side answers only GET/HEAD /metrics, needs the
 * bearer token when the server has one, and bounds what a scraper can hold. */
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

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

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
    char host[64];
    int port;
    ck_assert_int_eq(sscanf(hostport, "%63[^:]:%d", host, &port), 2);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    ck_assert_int_eq(inet_pton(AF_INET, host, &sa.sin_addr), 1);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
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

static gkv_daemon_t start_with(const char *const *extra)
{
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, extra), 0);
    return d;
}

START_TEST(counts_and_histograms_follow_the_requests)
{
    const char *const extra[] = {"--metrics-listen", "127.0.0.1:0", NULL};
    gkv_daemon_t d = start_with(extra);
    char addr[128];
    metrics_addr(&d, addr, sizeof(addr));
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

START_TEST(only_get_and_head_of_metrics_are_served)
{
    const char *const extra[] = {"--metrics-listen", "127.0.0.1:0", NULL};
    gkv_daemon_t d = start_with(extra);
    char addr[128];
    metrics_addr(&d, addr, sizeof(addr));
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
    ck_assert_int_eq(scrape(addr, resp), 200);
    gkv_client_t *c = connect_or_fail(d.url);
    ck_assert_int_eq(gkv_ping(c), 0);
    gkv_client_close(c);
    free(resp);
    ck_assert_int_eq(harness_stop(&d), 0);
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
    const char *const extra[] = {"--metrics-listen", "127.0.0.1:0", "--auth-token-file", path,
                                 NULL};
    setenv("GPUKV_TOKEN_FILE", path, 1); /* for the harness's own connections */
    gkv_daemon_t d = start_with(extra);
    char addr[128];
    metrics_addr(&d, addr, sizeof(addr));
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
    const char *const extra[] = {"--metrics-listen", "127.0.0.1:0", NULL};
    gkv_daemon_t d = start_with(extra);
    char addr[128];
    metrics_addr(&d, addr, sizeof(addr));
    /* 40 connections that send half a request and stop: past 16 they are closed at once. */
    int fds[40];
    for (int i = 0; i < 40; i++) {
        fds[i] = connect_addr(addr);
        ck_assert_int_eq(write(fds[i], "GET /met", 8), 8);
    }
    sleep_ms(300);
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
    ck_assert_int_eq(scrape(addr, resp), 200);
    gkv_client_t *c = connect_or_fail(d.url);
    ck_assert_int_eq(gkv_ping(c), 0);
    gkv_client_close(c);
    free(resp);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

START_TEST(a_public_metrics_address_needs_a_token)
{
    gkv_daemon_t d;
    const char *const open_extra[] = {"--metrics-listen", "0.0.0.0:0", NULL};
    ck_assert_int_eq(harness_start(&d, open_extra), -1);
    char log[4096] = "";
    FILE *f = fopen(d.log, "r");
    ck_assert_ptr_nonnull(f);
    log[fread(log, 1, sizeof(log) - 1, f)] = 0;
    fclose(f);
    ck_assert_msg(strstr(log, "metrics-listen: 0.0.0.0:0 is reachable") != NULL, "%s", log);
    const char *const insecure[] = {"--metrics-listen", "0.0.0.0:0", "--insecure-listen", "yes",
                                    NULL};
    d = start_with(insecure);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    if (strcmp(harness_backend(), "cuda") == 0 && !gkv_test_gpu_usable()) {
        fprintf(stderr, "no usable GPU: the cuda run of the metrics suite is skipped\n");
        return 77;
    }
    Suite *s = suite_create("metrics");
    TCase *tc = tcase_create("metrics");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, counts_and_histograms_follow_the_requests);
    tcase_add_test(tc, only_get_and_head_of_metrics_are_served);
    tcase_add_test(tc, scrapes_need_the_token_when_the_server_has_one);
    tcase_add_test(tc, silent_scrapers_are_bounded_and_dropped);
    tcase_add_test(tc, a_public_metrics_address_needs_a_token);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
