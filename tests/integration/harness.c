/* harness.c: daemon lifecycle for integration tests. */
#include "harness.h"

#include "fdpass.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gpukv/gpukv.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

const char *harness_backend(void)
{
    const char *b = getenv("GKV_TEST_BACKEND");
    return b && *b ? b : "host";
}

void harness_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* In the child: m's descriptors as 3.. and the variables systemd would set. */
static void pass_stored(harness_sm_t *m)
{
    int tmp[HARNESS_SM_FDS];
    char names[HARNESS_SM_FDS * 65] = "";
    for (unsigned i = 0; i < m->n; i++) /* out of the way of 3.. first */
        tmp[i] = fcntl(m->fds[i], F_DUPFD, 3 + HARNESS_SM_FDS);
    for (unsigned i = 0; i < m->n; i++) {
        dup2(tmp[i], 3 + (int)i); /* without FD_CLOEXEC */
        close(tmp[i]);
        strcat(names, i ? ":" : "");
        strcat(names, m->names[i]);
    }
    char v[32];
    setenv("NOTIFY_SOCKET", m->path, 1);
    if (m->n) {
        snprintf(v, sizeof(v), "%u", m->n);
        setenv("LISTEN_FDS", v, 1);
        setenv("LISTEN_FDNAMES", names, 1);
        snprintf(v, sizeof(v), "%d", (int)getpid());
        setenv("LISTEN_PID", v, 1);
    }
}

static int start_daemon(gkv_daemon_t *d, const char *dir, const char *sock,
                        const char *const *extra, harness_sm_t *m);

int harness_start_at(gkv_daemon_t *d, const char *dir, const char *sock, const char *const *extra)
{
    return start_daemon(d, dir, sock, extra, NULL);
}

int harness_start_sm(gkv_daemon_t *d, const char *dir, const char *sock, const char *const *extra,
                     harness_sm_t *m)
{
    return start_daemon(d, dir, sock, extra, m);
}

int harness_sm_open(harness_sm_t *m, const char *dir)
{
    memset(m, 0, sizeof(*m));
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(m->path, sizeof(m->path), "%s/notify", dir);
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", m->path);
    unlink(m->path);
    m->sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (m->sock < 0 || bind(m->sock, (struct sockaddr *)&a, sizeof(a)) != 0)
        return -1;
    return 0;
}

static void sm_remove(harness_sm_t *m, const char *name)
{
    for (unsigned i = 0; i < m->n;) {
        if (strcmp(m->names[i], name) == 0) {
            close(m->fds[i]);
            m->n--;
            m->fds[i] = m->fds[m->n];
            memcpy(m->names[i], m->names[m->n], sizeof(m->names[i]));
        } else {
            i++;
        }
    }
}

void harness_sm_poll(harness_sm_t *m, int ms)
{
    for (;;) {
        struct pollfd p = {.fd = m->sock, .events = POLLIN};
        if (poll(&p, 1, ms) <= 0)
            return;
        ms = 0;
        char buf[512];
        int fds[8];
        unsigned nfds = 0;
        ssize_t n = gkv_fds_recv(m->sock, buf, sizeof(buf) - 1, fds, 8, &nfds);
        if (n <= 0)
            return;
        buf[n] = 0;
        const char *name = strstr(buf, "FDNAME=");
        char nm[64] = "";
        if (name)
            snprintf(nm, sizeof(nm), "%.*s", (int)strcspn(name + 7, "\n"), name + 7);
        if (strstr(buf, "READY=1"))
            m->ready++;
        if (strstr(buf, "FDSTOREREMOVE=1"))
            sm_remove(m, nm);
        for (unsigned i = 0; i < nfds; i++) {
            if (strstr(buf, "FDSTORE=1") && m->n < HARNESS_SM_FDS) {
                m->fds[m->n] = fds[i];
                snprintf(m->names[m->n++], sizeof(m->names[0]), "%s", nm);
            } else {
                close(fds[i]);
            }
        }
    }
}

void harness_sm_close(harness_sm_t *m)
{
    for (unsigned i = 0; i < m->n; i++)
        close(m->fds[i]);
    m->n = 0;
    if (m->sock >= 0)
        close(m->sock);
    m->sock = -1;
    unlink(m->path);
}

static int start_daemon(gkv_daemon_t *d, const char *dir, const char *sock,
                        const char *const *extra, harness_sm_t *m)
{
    const char *argv[48];
    int n = 0;
    snprintf(d->dir, sizeof(d->dir), "%s", dir);
    snprintf(d->sock, sizeof(d->sock), "%s", sock);
    snprintf(d->url, sizeof(d->url), "unix:%s", sock);
    snprintf(d->log, sizeof(d->log), "%s/gpukvd.log", dir);
    argv[n++] = GKV_DAEMON_PATH;
    argv[n++] = "--socket";
    argv[n++] = d->sock;
    argv[n++] = "--listen";
    argv[n++] = "127.0.0.1:0";
    argv[n++] = "--backend";
    argv[n++] = harness_backend();
    /* The key order on its helper thread (auto would keep it on the loop of a 2-core CI
     * machine): the integration suites exercise it under the sanitizers. */
    argv[n++] = "--key-order-thread";
    argv[n++] = "yes";
    /* Host copies of small values (hostcopy.h), which auto gives only to the cuda backend: every
     * suite's SETs, GETs, seals and spares cross them, so a stale copy would fail them. */
    argv[n++] = "--host-copy";
    argv[n++] = "8M";
    for (int i = 0; extra && extra[i] && n < 46; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    d->pid = fork();
    if (d->pid < 0)
        return -1;
    if (d->pid == 0) {
        /* The daemon must not outlive a crashed test, nor hold the test runner's pipes. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int log = open(d->log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (log >= 0) {
            dup2(log, 1);
            dup2(log, 2);
            close(log);
        }
        if (m)
            pass_stored(m);
        execv(GKV_DAEMON_PATH, (char *const *)argv);
        _exit(127);
    }
    /* Wait until it answers: context creation on a GPU takes a while. */
    for (int tries = 0; tries < 300; tries++) {
        int status;
        if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
            d->pid = 0;
            return -1;
        }
        gkv_client_t *c;
        if (m)
            harness_sm_poll(m, 0);
        if (gkv_client_connect(d->url, &c) == 0) {
            char *info;
            d->tcp_url[0] = 0;
            if (gkv_info(c, &info) == 0) {
                const char *t = strstr(info, "tcp_listen:");
                if (t)
                    snprintf(d->tcp_url, sizeof(d->tcp_url), "tcp:%.*s", (int)strcspn(t + 11, "\r\n"),
                             t + 11);
                gkv_free(info);
            }
            gkv_client_close(c);
            return 0;
        }
        harness_sleep_ms(50);
    }
    harness_kill(d);
    return -1;
}

/* The run's directory (harness_tmpdir), made before main, so that the tests Check forks share
 * it; its maker's pid, the one process that may remove it. */
static char run_dir[32];
static pid_t run_maker;

__attribute__((constructor)) static void run_dir_make(void)
{
    snprintf(run_dir, sizeof(run_dir), "/tmp/gkv-run-XXXXXX");
    if (!mkdtemp(run_dir)) {
        run_dir[0] = 0;
        return;
    }
    chmod(run_dir, 0711); /* other users reach the sockets of directories opened to them */
    run_maker = getpid();
}

/* A program that made no daemon directory (a helper, a skipped run) leaves no trace. */
__attribute__((destructor)) static void run_dir_drop_empty(void)
{
    if (run_dir[0] && getpid() == run_maker)
        rmdir(run_dir); /* fails, as it should, where something is left in it */
}

int harness_run_end(int rc)
{
    if (!run_dir[0] || getpid() != run_maker)
        return rc;
    if ((rc != 0 && rc != 77) || getenv("GKV_TEST_KEEP")) {
        fprintf(stderr, "the daemons' directories and logs are kept in %s\n", run_dir);
        return rc;
    }
    if (harness_rmdir(run_dir) == 0)
        run_dir[0] = 0;
    return rc;
}

int harness_tmpdir(char dir[64], char *sock, const char *tag)
{
    if (run_dir[0])
        snprintf(dir, 64, "%s/%s-XXXXXX", run_dir, tag);
    else
        snprintf(dir, 64, "/tmp/gkv-%s-XXXXXX", tag);
    if (!mkdtemp(dir))
        return -1;
    if (sock)
        snprintf(sock, 128, "%s/gpukv.sock", dir);
    return 0;
}

int harness_rmdir(const char *dir)
{
    if (getenv("GKV_TEST_KEEP"))
        return 0;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

int harness_start(gkv_daemon_t *d, const char *const *extra)
{
    char dir[64], sock[128];
    if (harness_tmpdir(dir, sock, "it"))
        return -1;
    return harness_start_at(d, dir, sock, extra);
}

const char *harness_url(const gkv_daemon_t *d, int i)
{
    return i ? d->tcp_url : d->url;
}

int harness_wait_exit(gkv_daemon_t *d, int ms)
{
    for (int i = 0; d->pid > 0 && i < ms / 10; i++) {
        int status;
        if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
            d->pid = 0;
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        harness_sleep_ms(10);
    }
    return -1;
}

int harness_stop(gkv_daemon_t *d)
{
    if (d->pid <= 0)
        return -1;
    kill(d->pid, SIGTERM);
    int rc = harness_wait_exit(d, 15000);
    if (rc < 0)
        harness_kill(d);
    return rc;
}

void harness_kill(gkv_daemon_t *d)
{
    if (d->pid > 0) {
        kill(d->pid, SIGKILL);
        waitpid(d->pid, NULL, 0);
        d->pid = 0;
    }
}

long long harness_proc_number(pid_t pid, const char *file, const char *name)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
    FILE *f = fopen(path, "r");
    long long v = -1;
    while (f && fgets(line, sizeof(line), f))
        if (!strncmp(line, name, strlen(name))) {
            char *p = line + strlen(name);
            while (*p && (*p < '0' || *p > '9'))
                p++;
            v = *p ? atoll(p) : -1;
            break;
        }
    if (f)
        fclose(f);
    return v;
}

long harness_rss_anon_kb(const gkv_daemon_t *d)
{
    return (long)harness_proc_number(d->pid, "status", "RssAnon:");
}

uint64_t harness_fnv(uint64_t h, const void *p, size_t n)
{
    /* FNV-1a over 8-byte words (then the tail bytes): fast enough for gigabytes. */
    const uint8_t *b = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h ^= w;
        h *= 0x100000001b3ULL;
    }
    for (; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

void harness_fill(void *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;
    uint8_t *b = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(b + i, &x, 8);
    }
    for (; i < n; i++)
        b[i] = (uint8_t)(seed + i);
}

void harness_read_log(const gkv_daemon_t *d, char *buf, size_t cap)
{
    buf[0] = 0;
    FILE *f = fopen(d->log, "r");
    if (!f)
        return;
    buf[fread(buf, 1, cap - 1, f)] = 0;
    fclose(f);
}

int harness_tcp_connect(const char *hostport)
{
    char host[64];
    int port;
    if (sscanf(hostport, "%63[^:]:%d", host, &port) != 2)
        return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return -1;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

static void *reader(void *arg)
{
    harness_readers_t *r = arg;
    gkv_client_t *c = NULL;
    if (gkv_client_connect(r->url, &c) != 0) {
        atomic_fetch_add(&r->wrong, 1);
        return NULL;
    }
    uint8_t *want[HARNESS_READ_KEYS] = {0}, *got = NULL;
    size_t most = 1;
    bool ok = true;
    for (int i = 0; i < r->nkeys; i++) {
        most = r->sizes[i] > most ? r->sizes[i] : most;
        if ((want[i] = malloc(r->sizes[i] ? r->sizes[i] : 1)))
            harness_fill(want[i], r->sizes[i], r->seeds[i]);
        ok = ok && want[i];
    }
    ok = ok && (got = malloc(most));
    if (!ok)
        atomic_fetch_add(&r->wrong, 1);
    while (ok && !atomic_load(&r->stop)) {
        for (int i = 0; i < r->nkeys; i++) {
            gkv_value_info_t vi;
            if (gkv_get(c, r->keys[i], strlen(r->keys[i]), NULL, got, r->sizes[i], &vi) != 0 ||
                vi.length != r->sizes[i] || memcmp(got, want[i], r->sizes[i]) != 0)
                atomic_fetch_add(&r->wrong, 1);
        }
        atomic_fetch_add(&r->reads, 1);
    }
    for (int i = 0; i < r->nkeys; i++)
        free(want[i]);
    free(got);
    gkv_client_close(c);
    return NULL;
}

int harness_readers_start(harness_readers_t *r, int n)
{
    r->nthreads = 0;
    for (int i = 0; i < n && i < HARNESS_READERS; i++)
        if (pthread_create(&r->threads[r->nthreads], NULL, reader, r) == 0)
            r->nthreads++;
    while (r->nthreads && atomic_load(&r->reads) < n && !atomic_load(&r->wrong))
        harness_sleep_ms(1);
    return r->nthreads ? 0 : -1;
}

void harness_readers_stop(harness_readers_t *r)
{
    atomic_store(&r->stop, true);
    for (int i = 0; i < r->nthreads; i++)
        pthread_join(r->threads[i], NULL);
    r->nthreads = 0;
}
