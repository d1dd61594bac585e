/* takeover.c: handing the daemon over to a successor (TAKEOVER, gpukvd --takeover); see
 * takeover.h. */
#include "takeover.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "admin.h"
#include "conn.h"
#include "demoter.h"
#include "error.h"
#include "fdpass.h"
#include "frame.h"
#include "journal.h"
#include "log.h"
#include "message.h"
#include "metrics_http.h"
#include "server.h"

#define FETCH_TRIES 6000 /* 10 ms apart: a minute */

void gkv_takeover_init(gkv_server_t *s)
{
    gkv_takeover_t *t = &s->takeover;
    t->unix_fd = t->tcp_fd = t->sock = t->listen_unix = t->listen_tcp = t->disk_fd = -1;
    t->exit_now = _exit;
    uv_timer_init(s->loop, &t->grace);
    t->grace.data = s;
}

bool gkv_takeover_refusing(const gkv_server_t *s, const gkv_conn_t *c)
{
    return s->shutting_down || (s->takeover.draining && c->id != s->takeover.conn_id);
}

/* The running daemon's side. */

static void on_grace(uv_timer_t *h)
{
    gkv_server_t *s = h->data;
    gkv_net_stop_conns(&s->net, s->takeover.conn_id, true);
}

static void begin(gkv_server_t *s, uint64_t conn_id, int pid)
{
    gkv_takeover_t *t = &s->takeover;
    t->conn_id = conn_id;
    t->draining = true;
    gkv_server_pause_listening(s, &t->unix_fd, &t->tcp_fd);
    gkv_metrics_http_close(s);
    GKV_INFO("takeover: pid %d takes over; not accepting, %llu connections finish their request",
             (int)pid, (unsigned long long)(s->net.nconns - 1));
    gkv_net_stop_conns(&s->net, conn_id, false);
    uv_timer_start(&t->grace, on_grace, s->cfg.shutdown_grace_ms, 0);
}

/* Why the hand-over must wait, or NULL when everything before it has finished. */
static const char *not_ready(gkv_server_t *s, char *why, size_t cap)
{
    if (s->net.nconns > 1) {
        snprintf(why, cap, "%llu connections are finishing their request",
                 (unsigned long long)(s->net.nconns - 1));
        return why;
    }
    for (unsigned i = 0; i < s->devs.n; i++)
        if (gkv_batch_writes_pending(&s->devs.dev[i].batcher))
            return "copies are in flight";
    if (s->fdstore.journal && !gkv_journal_idle(s->fdstore.journal))
        return "the journal has records to commit";
    return NULL;
}

static int add_fd(gkv_reply_t *rep, char *names, size_t cap, int fd, const char *name)
{
    if (fd < 0)
        return GKV_ESYS;
    if (rep->nfds == GKV_REPLY_FDS) {
        close(fd);
        return GKV_ESYS;
    }
    rep->fds[rep->nfds++] = fd;
    size_t n = strlen(names);
    snprintf(names + n, cap - n, "%s%s", n ? ":" : "", name);
    return 0;
}

/* The reply that hands everything over: the names as the payload, the descriptors with it. */
static int hand_over(gkv_server_t *s, const gkv_request_t *req, gkv_reply_t *rep)
{
    /* Moves down in flight end first (the journal passed on then has them); no more start:
     * a successor that fails leaves this daemon moving values on writes only. */
    gkv_demoter_close(s->demoter);
    gkv_takeover_t *t = &s->takeover;
    char names[1024] = "", name[48], why[160];
    int rc = 0;
    if (t->unix_fd >= 0)
        rc = add_fd(rep, names, sizeof(names), fcntl(t->unix_fd, F_DUPFD_CLOEXEC, 3),
                    "gpukv-listen-unix");
    if (!rc && t->tcp_fd >= 0)
        rc = add_fd(rep, names, sizeof(names), fcntl(t->tcp_fd, F_DUPFD_CLOEXEC, 3),
                    "gpukv-listen-tcp");
    uint32_t epoch = s->fdstore.journal ? s->fdstore.epoch : 0;
    gkv_backend_t *mem[GKV_MAX_DEVICES];
    const char *uuid[GKV_MAX_DEVICES];
    unsigned nmem = gkv_persist_memories(&s->persist, mem, uuid);
    for (unsigned i = 0; i < nmem && !rc; i++) {
        gkv_backend_t *be = mem[i];
        int fd = -1;
        if (be->ops->share(be, &fd, why, sizeof(why)))
            return gkv_reply_fail(rep, GKV_ENOTSUP, "memory %u's (%s) cannot be passed: %s", i,
                                  i < s->devs.n ? "a device" : "the host tier", why);
        gkv_fdstore_name(name, sizeof(name), 'm', epoch, i);
        rc = add_fd(rep, names, sizeof(names), fd, name);
    }
    /* The disk tier's file: the successor takes it over (its values are not in the journal). */
    if (!rc && s->disk_tier)
        rc = add_fd(rep, names, sizeof(names),
                    fcntl(gkv_backend_disk_fd(s->disk_tier), F_DUPFD_CLOEXEC, 3),
                    "gpukv-tier-disk");
    /* Without the fd store, a journal made now, from an index no request changes any more. */
    gkv_journal_t *j = s->fdstore.journal, *made = NULL;
    uint32_t gen = j ? s->fdstore.gen : 0;
    if (!rc && !j && !(j = made = gkv_fdstore_journal_now(&s->persist)))
        return gkv_reply_fail(rep, GKV_ENOMEM, "out of memory for the journal");
    if (!rc) {
        gkv_fdstore_name(name, sizeof(name), 'j', epoch, gen);
        rc = add_fd(rep, names, sizeof(names), fcntl(gkv_journal_fd(j), F_DUPFD_CLOEXEC, 3), name);
    }
    if (made)
        gkv_journal_close(made); /* its memfd lives on in the descriptor passed */
    if (rc)
        return gkv_reply_fail(rep, GKV_ESYS, "passing the descriptors failed: %s", strerror(errno));
    GKV_INFO("takeover: handing over %u descriptors (%s)", rep->nfds, names);
    gkv_wr_t *w = rep->wr;
    gkv_reply_ok(w, req->id);
    gkv_wr_uint(w, GKV_F_PAYLOAD, strlen(names));
    if ((rc = gkv_wr_end(w)))
        return rc;
    return msgpack_sbuffer_write(&w->sb, names, strlen(names)) ? GKV_ENOMEM : 0;
}

int gkv_cmd_takeover(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    gkv_server_t *srv = ctx->owner;
    gkv_takeover_t *t = &srv->takeover;
    uint64_t c = rep->in.conn_id;
    if (!rep->in.local)
        return gkv_reply_fail(rep, GKV_ENOTSUP, "TAKEOVER is only for the Unix socket");
    if (rep->in.peer_uid < 0 || (uid_t)rep->in.peer_uid != geteuid())
        return gkv_reply_fail(rep, GKV_EAUTH, "TAKEOVER only from the daemon's own user (uid %u)",
                              (unsigned)geteuid());
    if (t->conn_id && t->conn_id != c)
        return gkv_reply_fail(rep, GKV_EBUSY, "another process is taking over");
    if (srv->shutting_down)
        return gkv_reply_fail(rep, GKV_ESHUTDOWN, "the daemon is shutting down");
    if (req->flags != GKV_TAKEOVER_BEGIN && !t->conn_id)
        return gkv_reply_fail(rep, GKV_EINVAL, "send TAKEOVER with flags 0 first");
    char why[96];
    const char *wait;
    switch (req->flags) {
    case GKV_TAKEOVER_BEGIN:
        if (!t->conn_id)
            begin(srv, c, rep->in.peer_pid);
        gkv_reply_ok(rep->wr, req->id);
        return gkv_wr_end(rep->wr);
    case GKV_TAKEOVER_FETCH:
        if ((wait = not_ready(srv, why, sizeof(why))))
            return gkv_reply_fail(rep, GKV_EBUSY, "not yet: %s", wait);
        return hand_over(srv, req, rep);
    case GKV_TAKEOVER_DONE:
        /* Nothing is freed: the successor has copied the values, and zero-copy clients may
         * still map this daemon's memory, which lives on while they import it. */
        GKV_INFO("takeover: the successor serves; exiting");
        if (srv->disk_tier) /* the successor took the file over (renamed), or has its own */
            gkv_backend_disk_discard(srv->disk_tier);
        t->exiting = true; /* once this request has ended: gkv_takeover_request_done */
        return gkv_reply_fail(rep, GKV_ESHUTDOWN, "the daemon is exiting");
    default:
        return gkv_reply_fail(rep, GKV_EINVAL, "TAKEOVER flags are 0, 1 or 2");
    }
}

void gkv_takeover_request_done(gkv_server_t *s)
{
    gkv_takeover_t *t = &s->takeover;
    if (!t->exiting)
        return;
    t->exiting = false;
    t->exit_now(0);
}

void gkv_takeover_conn_closed(gkv_server_t *s, gkv_conn_t *c)
{
    gkv_takeover_t *t = &s->takeover;
    if (c->id != t->conn_id)
        return;
    t->conn_id = 0;
    t->draining = false;
    uv_timer_stop(&t->grace);
    if (s->shutting_down)
        return;
    GKV_ERROR("takeover: the successor went away before it took over; serving again");
    char err[256];
    if (gkv_server_listen_again(s, t->unix_fd, t->tcp_fd, err, sizeof(err))) {
        GKV_ERROR("takeover: %s; stopping", err);
        gkv_server_stop(s);
    }
    t->unix_fd = t->tcp_fd = -1;
    gkv_server_schedule_expiry(s); /* paused while draining */
}

/* The successor's side: blocking calls at start, before the loop runs. */

static int send_all(int sock, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t w = send(sock, b, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return GKV_ESYS;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

static int request(gkv_server_t *s, uint64_t op, uint64_t id, uint64_t flags)
{
    gkv_wr_t w;
    gkv_wr_init(&w);
    gkv_wr_begin(&w);
    gkv_wr_uint(&w, GKV_F_OP, op);
    gkv_wr_uint(&w, GKV_F_ID, id);
    if (op == GKV_OP_HELLO) {
        /* Protocol 1: the running daemon may be an older version (TAKEOVER means the same in
         * every version). */
        gkv_wr_uint(&w, GKV_F_VERSION, GKV_PROTOCOL_MIN);
        gkv_wr_str(&w, GKV_F_CLIENT, "gpukvd --takeover");
        if (s->token_len)
            gkv_wr_bin(&w, GKV_F_TOKEN, s->token, s->token_len);
    } else {
        gkv_wr_uint(&w, GKV_F_FLAGS, flags);
    }
    int rc = gkv_wr_end(&w);
    if (!rc)
        rc = send_all(s->takeover.sock, w.sb.data, w.sb.size);
    gkv_wr_fini(&w);
    return rc;
}

/* Reads one reply: its status (and message into why), its payload into payload (cap bytes,
 * NUL-terminated), and descriptors passed with it into t->passed. */
static int reply(gkv_server_t *s, char *payload, size_t cap, int *fds, unsigned *nfds, char *why,
                 size_t wcap)
{
    static uint8_t buf[64 << 10];
    size_t have = 0, need = GKV_FRAME_PREFIX;
    gkv_response_t resp;
    for (;;) {
        if (have >= need) {
            if (need == GKV_FRAME_PREFIX) {
                need += gkv_frame_get_len(buf);
                if (need > sizeof(buf))
                    break;
                continue;
            }
            if (gkv_resp_decode(buf + GKV_FRAME_PREFIX, need - GKV_FRAME_PREFIX, &resp))
                break;
            size_t total = need + resp.payload_len;
            if (total > sizeof(buf) || resp.payload_len >= cap)
                break;
            if (have >= total) {
                memcpy(payload, buf + need, resp.payload_len);
                payload[resp.payload_len] = 0;
                if (resp.status)
                    snprintf(why, wcap, "%.*s", (int)resp.message.len,
                             (const char *)resp.message.p);
                return (int)resp.status;
            }
            need = total;
            continue;
        }
        ssize_t n = gkv_fds_recv(s->takeover.sock, buf + have, sizeof(buf) - have, fds,
                                 GKV_TAKEOVER_FDS, nfds);
        if (n <= 0) {
            snprintf(why, wcap, "the running daemon closed the connection");
            return GKV_ECLOSED;
        }
        have += (size_t)n;
    }
    snprintf(why, wcap, "the running daemon's reply is malformed");
    return GKV_EPROTO;
}

int gkv_takeover_fetch(gkv_server_t *s, char *err, size_t cap)
{
    gkv_takeover_t *t = &s->takeover;
    const char *path = s->cfg.socket_path;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(a.sun_path)) {
        snprintf(err, cap, "--takeover: socket path %s is too long", path);
        return GKV_EINVAL;
    }
    memcpy(a.sun_path, path, strlen(path) + 1);
    t->sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (t->sock < 0 || connect(t->sock, (struct sockaddr *)&a, sizeof(a)) != 0) {
        snprintf(err, cap, "--takeover: no gpukvd answers on %s: %s", path, strerror(errno));
        return GKV_EINVAL;
    }
    char payload[1024], why[256] = "";
    int fds[GKV_TAKEOVER_FDS];
    unsigned nfds = 0;
    int rc = request(s, GKV_OP_HELLO, 1, 0);
    if (!rc)
        rc = reply(s, payload, sizeof(payload), fds, &nfds, why, sizeof(why));
    if (!rc && !(rc = request(s, GKV_OP_TAKEOVER, 2, GKV_TAKEOVER_BEGIN)))
        rc = reply(s, payload, sizeof(payload), fds, &nfds, why, sizeof(why));
    if (!rc)
        GKV_INFO("takeover: the daemon on %s drains its connections", path);
    for (int i = 0; !rc && i < FETCH_TRIES; i++) {
        if (!(rc = request(s, GKV_OP_TAKEOVER, 3 + (uint64_t)i, GKV_TAKEOVER_FETCH)))
            rc = reply(s, payload, sizeof(payload), fds, &nfds, why, sizeof(why));
        if (rc != GKV_EBUSY)
            break;
        rc = 0;
        nanosleep(&(struct timespec){0, 10000000}, NULL);
        if (i == FETCH_TRIES - 1)
            rc = GKV_EBUSY;
    }
    if (rc) {
        for (unsigned i = 0; i < nfds; i++)
            close(fds[i]);
        snprintf(err, cap, "--takeover: the daemon on %s did not hand over: %s", path,
                 why[0] ? why : gkv_strerror(rc));
        return rc;
    }
    /* The names, in the order of the descriptors. */
    char *p = payload;
    for (unsigned i = 0; i < nfds; i++) {
        size_t n = strcspn(p, ":");
        char name[48];
        snprintf(name, sizeof(name), "%.*s", (int)n, p);
        p += n + (p[n] == ':');
        if (strcmp(name, "gpukv-listen-unix") == 0)
            t->listen_unix = fds[i];
        else if (strcmp(name, "gpukv-listen-tcp") == 0)
            t->listen_tcp = fds[i];
        else if (strcmp(name, "gpukv-tier-disk") == 0)
            t->disk_fd = fds[i];
        else {
            t->passed[t->npassed].fd = fds[i];
            snprintf(t->passed[t->npassed++].name, sizeof(t->passed[0].name), "%s", name);
        }
    }
    GKV_INFO("takeover: received %u descriptors (%s)", nfds, payload);
    return 0;
}

void gkv_takeover_done(gkv_server_t *s)
{
    gkv_takeover_t *t = &s->takeover;
    if (t->sock < 0)
        return;
    (void)request(s, GKV_OP_TAKEOVER, 9, GKV_TAKEOVER_DONE);
    /* The predecessor exits without answering: its end closing is the answer. */
    struct pollfd p = {t->sock, POLLIN, 0};
    (void)poll(&p, 1, 5000);
    close(t->sock);
    t->sock = -1;
    GKV_INFO("takeover: done; the predecessor has exited");
}

void gkv_takeover_fini(gkv_server_t *s)
{
    gkv_takeover_t *t = &s->takeover;
    if (t->sock >= 0)
        close(t->sock);
    if (t->listen_unix >= 0)
        close(t->listen_unix);
    if (t->listen_tcp >= 0)
        close(t->listen_tcp);
    if (t->unix_fd >= 0)
        close(t->unix_fd);
    if (t->tcp_fd >= 0)
        close(t->tcp_fd);
    if (t->disk_fd >= 0)
        close(t->disk_fd);
    t->sock = t->listen_unix = t->listen_tcp = t->unix_fd = t->tcp_fd = t->disk_fd = -1;
}
