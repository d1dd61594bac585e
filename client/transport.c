/* transport.c: libgpukv's blocking frame I/O: building requests, sending them, reading
 * replies (and the descriptor HELLO's reply carries). */
#include "client.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "error.h"
#include "fdpass.h"

int gkv__break(gkv_client_t *c, int code)
{
    c->broken = true;
    if (c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
    return code;
}

int gkv__send_raw(gkv_client_t *c, const void *p, size_t len)
{
    const uint8_t *b = p;
    while (len) {
        /* MSG_NOSIGNAL: a closed server must give an error, never SIGPIPE the application. */
        ssize_t n = send(c->fd, b, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) /* SO_SNDTIMEO ran out */
                return gkv__break(c, GKV_ETIMEDOUT);
            /* Keep the socket open: the server may have said why it closed (hello). */
            c->broken = true;
            return GKV_ECLOSED;
        }
        b += n;
        len -= (size_t)n;
    }
    return 0;
}

/* What a failed or empty receive means: the peer closed, or SO_RCVTIMEO ran out. */
static int recv_error(ssize_t n)
{
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? GKV_ETIMEDOUT : GKV_ECLOSED;
}

/* Reads len bytes like gkv__recv_raw, keeping descriptors passed with them (SCM_RIGHTS) in
 * c->shared_fds. Any beyond GKV_FDPASS_MAX is closed: a server cannot fill our table. */
static int recv_with_fd(gkv_client_t *c, void *buf, size_t len)
{
    uint8_t *b = buf;
    while (len) {
        ssize_t n = gkv_fds_recv(c->fd, b, len, c->shared_fds, GKV_FDPASS_MAX, &c->nshared);
        if (n <= 0)
            return gkv__break(c, recv_error(n));
        b += n;
        len -= (size_t)n;
    }
    return 0;
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Waits for a reply by polling the socket for up to GKV_SPIN_NS before sleeping in recv:
 * replies to small requests arrive within microseconds, and waking a blocked thread costs
 * several of them. */
#define GKV_SPIN_NS 50000
static ssize_t recv_spin(int fd, void *b, size_t len, uint64_t spin_ns)
{
    uint64_t until = 0;
    for (;;) {
        ssize_t n = recv(fd, b, len, MSG_DONTWAIT);
        if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
            return n;
        uint64_t now = mono_ns();
        if (!until)
            until = now + spin_ns;
        else if (now > until)
            return recv(fd, b, len, 0);
    }
}

int gkv__recv_raw(gkv_client_t *c, void *buf, size_t len)
{
    uint8_t *b = buf;
    while (len) {
        ssize_t n = recv_spin(c->fd, b, len, c->spin_ns ? c->spin_ns : GKV_SPIN_NS);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return gkv__break(c, recv_error(n));
        b += n;
        len -= (size_t)n;
    }
    return 0;
}

int gkv__drain(gkv_client_t *c, uint64_t len)
{
    uint8_t buf[16384];
    while (len) {
        size_t n = len < sizeof(buf) ? (size_t)len : sizeof(buf);
        int rc = gkv__recv_raw(c, buf, n);
        if (rc)
            return rc;
        len -= n;
    }
    return 0;
}

void gkv__begin(gkv_client_t *c, unsigned op)
{
    gkv_wr_reset(&c->wr);
    gkv__begin_more(c, op);
}

void gkv__begin_more(gkv_client_t *c, unsigned op)
{
    gkv_wr_begin(&c->wr);
    gkv_wr_uint(&c->wr, GKV_F_OP, op);
    gkv_wr_uint(&c->wr, GKV_F_ID, ++c->next_id);
}

int gkv__check_key(const gkv_client_t *c, const void *key, size_t klen)
{
    if (!key || klen == 0)
        return GKV_EINVAL;
    if (c->info.max_key && klen > c->info.max_key)
        return GKV_ETOOBIG;
    return 0;
}

void gkv__put_key_range(gkv_client_t *c, const void *key, size_t klen, const gkv_range_t *range)
{
    gkv_wr_bin(&c->wr, GKV_F_KEY, key, klen);
    if (range && range->suffix) {
        gkv_wr_uint(&c->wr, GKV_F_SUFFIX, range->suffix);
    } else if (range) {
        /* Absent fields mean offset 0 and "to the end" (PROTOCOL.md). */
        if (range->offset)
            gkv_wr_uint(&c->wr, GKV_F_OFFSET, range->offset);
        if (range->length && range->length != GKV_TO_END)
            gkv_wr_uint(&c->wr, GKV_F_LENGTH, range->length);
    }
}

void gkv__put_set_opts(gkv_client_t *c, const gkv_set_opts_t *opts)
{
    if (opts && opts->flags)
        gkv_wr_uint(&c->wr, GKV_F_FLAGS, opts->flags);
    if (opts && opts->meta_len)
        gkv_wr_bin(&c->wr, GKV_F_META, opts->meta, opts->meta_len);
    if (opts && opts->ttl_ms)
        gkv_wr_uint(&c->wr, GKV_F_TTL, opts->ttl_ms);
    if (opts && opts->gpu > 0)
        gkv_wr_uint(&c->wr, GKV_F_GPU, (uint64_t)(opts->gpu - 1));
}

int gkv__end_frame(gkv_client_t *c)
{
    int rc = gkv_wr_end(&c->wr);
    return rc == 0 ? 0 : rc == GKV_ETOOBIG ? GKV_ETOOBIG : GKV_ENOMEM;
}

int gkv__send_frame(gkv_client_t *c)
{
    if (c->broken)
        return GKV_ECLOSED;
    if (c->watch_id) /* its replies could not be told from its events: gkv_unwatch first */
        return GKV_EINVAL;
    int rc = gkv__end_frame(c);
    return rc ? rc : gkv__send_raw(c, c->wr.sb.data, c->wr.sb.size);
}

int gkv__send(gkv_client_t *c, const void *payload, size_t len)
{
    int rc = gkv__send_frame(c);
    if (rc == 0 && len)
        rc = gkv__send_raw(c, payload, len);
    return rc;
}

static int recv_one(gkv_client_t *c);

int gkv__read_deferred(gkv_client_t *c)
{
    /* Replies to requests sent without waiting (RELEASE) come first, in order. */
    while (c->deferred) {
        uint64_t want = c->next_id;
        c->deferred--;
        c->next_id = c->deferred_id++; /* the id that reply carries */
        int rc = recv_one(c);
        c->next_id = want;
        /* A server error on a library-built RELEASE cannot be acted on: it is dropped. */
        if (rc < 0 && c->broken)
            return rc;
    }
    return 0;
}

int gkv__recv(gkv_client_t *c)
{
    int rc = gkv__read_deferred(c);
    return rc ? rc : recv_one(c);
}

static int recv_one(gkv_client_t *c)
{
    int rc = gkv__recv_any(c);
    if (rc)
        return rc;
    if (c->resp.status < 0) {
        /* An error with id 0 answers no request: the server is refusing the connection. */
        if (c->resp.id == 0)
            return gkv__break(c, (int)c->resp.status);
        if (c->resp.id != c->next_id)
            return gkv__break(c, GKV_EPROTO);
        return (int)c->resp.status;
    }
    if (c->resp.id != c->next_id)
        return gkv__break(c, GKV_EPROTO);
    return 0;
}

int gkv__recv_any(gkv_client_t *c)
{
    uint8_t prefix[GKV_FRAME_PREFIX];
    c->errmsg[0] = 0;
    if (c->broken)
        return GKV_ECLOSED;
    int rc = c->local && c->next_id == 1 ? recv_with_fd(c, prefix, sizeof(prefix))
                                         : gkv__recv_raw(c, prefix, sizeof(prefix));
    if (rc)
        return rc;
    uint32_t len = gkv_frame_get_len(prefix);
    if (gkv_frame_check_len(len, GKV_MAX_HEADER))
        return gkv__break(c, GKV_EPROTO);
    if (len > c->hdr_cap) {
        uint8_t *h = realloc(c->hdr, len);
        if (!h)
            return gkv__break(c, GKV_ENOMEM);
        c->hdr = h;
        c->hdr_cap = len;
    }
    if ((rc = gkv__recv_raw(c, c->hdr, len)))
        return rc;
    if (gkv_resp_decode(c->hdr, len, &c->resp))
        return gkv__break(c, GKV_EPROTO);
    c->last_version = c->resp.vversion;
    if (c->resp.status < 0)
        snprintf(c->errmsg, sizeof(c->errmsg), "%.*s", (int)c->resp.message.len,
                 (const char *)c->resp.message.p);
    return 0;
}

/* Waits for a key (gkv_wait_next): armed here, taken by the GET or MAP being built. */
int gkv_wait_next(gkv_client_t *c, uint32_t wait_ms)
{
    if (wait_ms > GKV_MAX_WAIT_MS)
        return GKV_EINVAL;
    c->wait_ms = wait_ms;
    c->wait_newer = false;
    return 0;
}

int gkv_wait_newer(gkv_client_t *c, uint32_t wait_ms, uint64_t after)
{
    if (!wait_ms || wait_ms > GKV_MAX_WAIT_MS)
        return GKV_EINVAL;
    c->wait_ms = wait_ms;
    c->wait_after = after;
    c->wait_newer = true;
    return 0;
}

uint64_t gkv_last_version(const gkv_client_t *c)
{
    return c->last_version;
}

/* How long a waiting GET or MAP polls its socket before it sleeps: GKV_WAIT_SPIN_NS, or
 * GPUKV_WAIT_SPIN_US microseconds (a consumer whose producer works longer than 2 ms and that
 * would rather spend a core than a thread's wake-up from a deep idle state). */
static uint64_t wait_spin_env;
static pthread_once_t wait_spin_once = PTHREAD_ONCE_INIT;

static void wait_spin_read(void)
{
    const char *e = getenv("GPUKV_WAIT_SPIN_US");
    wait_spin_env = e && *e ? strtoull(e, NULL, 10) * 1000 : 0;
}

static uint64_t wait_spin_ns(void)
{
    pthread_once(&wait_spin_once, wait_spin_read);
    return wait_spin_env ? wait_spin_env : GKV_WAIT_SPIN_NS;
}

/* The armed wait goes into the request being built, and the socket's receive timeout (when one
 * is set) is raised by as much; *saved is what wait_end puts back. Nothing when none is armed. */
static void wait_take(gkv_client_t *c, struct timeval *saved)
{
    saved->tv_sec = saved->tv_usec = 0;
    uint32_t wait_ms = c->wait_ms;
    if (!wait_ms)
        return;
    c->wait_ms = 0;
    gkv_wr_uint(&c->wr, GKV_F_WAIT, wait_ms);
    if (c->wait_newer)
        gkv_wr_uint(&c->wr, GKV_F_AFTER, c->wait_after); /* a MAP's `early` is map_one's */
    c->wait_newer = false;
    c->spin_ns = wait_spin_ns();
    socklen_t len = sizeof(*saved);
    if (getsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, saved, &len) ||
        (!saved->tv_sec && !saved->tv_usec)) {
        saved->tv_sec = saved->tv_usec = 0;
        return;
    }
    struct timeval more = *saved;
    more.tv_sec += wait_ms / 1000;
    more.tv_usec += (wait_ms % 1000) * 1000;
    if (more.tv_usec >= 1000000) {
        more.tv_sec++;
        more.tv_usec -= 1000000;
    }
    (void)setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &more, sizeof(more));
}

static void wait_end(gkv_client_t *c, const struct timeval *saved)
{
    c->spin_ns = 0;
    if (saved->tv_sec || saved->tv_usec)
        (void)setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, saved, sizeof(*saved));
}

int gkv__send_waiting_early(gkv_client_t *c, gkv_early_fn fn, void *arg)
{
    struct timeval saved;
    wait_take(c, &saved);
    int rc = gkv__send(c, NULL, 0);
    while (!rc && !(rc = gkv__recv(c)) && c->resp.early) {
        if (!fn) {
            rc = gkv__break(c, GKV_EPROTO); /* not asked for */
            break;
        }
        rc = fn(c, arg);
    }
    wait_end(c, &saved);
    return rc;
}

int gkv__send_waiting(gkv_client_t *c)
{
    return gkv__send_waiting_early(c, NULL, NULL);
}
