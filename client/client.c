/* client.c: connecting, HELLO, and the blocking frame I/O of libgpukv. */
#include "client.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "error.h"
#include "fdpass.h"
#include "hostport.h"
#include "zc.h"

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

/* Reads len bytes like gkv__recv_raw, keeping a descriptor passed with them (SCM_RIGHTS) in
 * c->zc_fd. Any further descriptor is closed: a client takes at most one. */
static int recv_with_fd(gkv_client_t *c, void *buf, size_t len)
{
    uint8_t *b = buf;
    while (len) {
        ssize_t n = gkv_fd_recv(c->fd, b, len, &c->zc_fd);
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
static ssize_t recv_spin(int fd, void *b, size_t len)
{
    uint64_t until = 0;
    for (;;) {
        ssize_t n = recv(fd, b, len, MSG_DONTWAIT);
        if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
            return n;
        uint64_t now = mono_ns();
        if (!until)
            until = now + GKV_SPIN_NS;
        else if (now > until)
            return recv(fd, b, len, 0);
    }
}

int gkv__recv_raw(gkv_client_t *c, void *buf, size_t len)
{
    uint8_t *b = buf;
    while (len) {
        ssize_t n = recv_spin(c->fd, b, len);
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
    /* Parked leases live only across zero-copy requests: any other request ends them first,
     * so what it sees (INFO's leases, a DEL's freed memory) is what the caller's unmaps and
     * seals left. */
    if (c->nparked && op != GKV_OP_MAP && op != GKV_OP_RELEASE && op != GKV_OP_CREATE &&
        op != GKV_OP_SEAL && op != GKV_OP_ABORT)
        gkv__release_parked(c, true);
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

int gkv__settle(gkv_client_t *c)
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
    int rc = gkv__settle(c);
    return rc ? rc : recv_one(c);
}

static int recv_one(gkv_client_t *c)
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
    if (c->resp.status < 0) {
        snprintf(c->errmsg, sizeof(c->errmsg), "%.*s", (int)c->resp.message.len,
                 (const char *)c->resp.message.p);
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

static void copy_slice(char *dst, size_t cap, gkv_slice_t s)
{
    snprintf(dst, cap, "%.*s", (int)s.len, (const char *)s.p);
}

static int hello(gkv_client_t *c)
{
    gkv__begin(c, GKV_OP_HELLO);
    gkv_wr_uint(&c->wr, GKV_F_VERSION, GKV_PROTOCOL_VERSION);
    if (c->local)
        gkv_wr_uint(&c->wr, GKV_F_ZC, 1);
    int rc = gkv__send(c, NULL, 0);
    if (rc == GKV_ECLOSED && c->fd >= 0) {
        /* A server refusing the connection (max clients) writes its reason and closes,
         * possibly before our HELLO arrives: read the reason if it is there. */
        c->broken = false;
        int why = gkv__recv(c);
        return why < 0 && why != GKV_ECLOSED && why != GKV_EPROTO ? why : rc;
    }
    if (rc || (rc = gkv__recv(c)))
        return rc;
    gkv_response_t *r = &c->resp;
    gkv_server_info_t *in = &c->info;
    copy_slice(c->s_server, sizeof(c->s_server), r->server);
    copy_slice(c->s_backend, sizeof(c->s_backend), r->backend);
    copy_slice(c->s_zc, sizeof(c->s_zc), r->zc);
    copy_slice(c->s_zc_why, sizeof(c->s_zc_why), r->zc_why);
    c->s_uuid[0] = 0;
    if (r->gpus.len) {
        gkv_mpr_t it;
        uint32_t n;
        gkv_slice_t s;
        gkv_mpr_init(&it, r->gpus.p, r->gpus.len);
        if (gkv_mpr_array(&it, &n) == 0 && n && gkv_mpr_bin(&it, &s) == 0)
            copy_slice(c->s_uuid, sizeof(c->s_uuid), s);
    }
    in->protocol = (uint32_t)r->version;
    in->server = c->s_server;
    in->backend = c->s_backend;
    in->device = (int)r->device;
    in->gpu_uuid = c->s_uuid;
    in->zero_copy = c->s_zc;
    in->zero_copy_why = c->s_zc_why;
    in->max_key = r->max_key;
    in->max_value = r->max_value;
    in->max_meta = r->max_meta;
    c->arena_size = r->arena_size;
    /* A descriptor without a granted mechanism (or the reverse) is not trusted. */
    if ((c->zc_fd >= 0) != (strcmp(c->s_zc, "none") != 0)) {
        if (c->zc_fd >= 0)
            close(c->zc_fd);
        c->zc_fd = -1;
        snprintf(c->s_zc, sizeof(c->s_zc), "none");
        snprintf(c->s_zc_why, sizeof(c->s_zc_why), "the server did not pass its memory");
    }
    return 0;
}

/* Sets both directions' timeouts of fd (0: none). Returns 0 or GKV_ESYS. */
static int set_timeouts(int fd, uint32_t ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (suseconds_t)(ms % 1000) * 1000};
    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0)
        return GKV_ESYS;
    return 0;
}

/* Connects a new socket to addr. SO_SNDTIMEO bounds connect() too. Returns the fd or a code. */
static int dial(int family, int type, int proto, const struct sockaddr *addr, socklen_t len,
                uint32_t timeout_ms)
{
    int fd = socket(family, type | SOCK_CLOEXEC, proto);
    if (fd < 0)
        return GKV_ESYS;
    if (timeout_ms && set_timeouts(fd, timeout_ms) != 0) {
        close(fd);
        return GKV_ESYS;
    }
    if (connect(fd, addr, len) != 0) {
        int timed_out = errno == EINPROGRESS || errno == EAGAIN;
        close(fd);
        return timed_out ? GKV_ETIMEDOUT : GKV_ECONNECT;
    }
    return fd;
}

static int dial_unix(const char *path, uint32_t timeout_ms)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path))
        return GKV_EINVAL;
    strcpy(sa.sun_path, path);
    return dial(AF_UNIX, SOCK_STREAM, 0, (struct sockaddr *)&sa, sizeof(sa), timeout_ms);
}

static int dial_tcp(const char *hostport, uint32_t timeout_ms)
{
    char buf[256];
    const char *h, *port;
    if (gkv_hostport_split(hostport, buf, sizeof(buf), &h, &port))
        return GKV_EINVAL;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res, *ai;
    if (getaddrinfo(h, port, &hints, &res) != 0)
        return GKV_ECONNECT;
    int fd = GKV_ECONNECT;
    for (ai = res; ai && fd < 0; ai = ai->ai_next)
        fd = dial(ai->ai_family, ai->ai_socktype, ai->ai_protocol, ai->ai_addr, ai->ai_addrlen,
                  timeout_ms);
    freeaddrinfo(res);
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    return fd;
}

int gkv_client_connect(const char *url, gkv_client_t **out)
{
    return gkv_client_connect_timeout(url, 0, out);
}

int gkv_client_connect_timeout(const char *url, uint32_t timeout_ms, gkv_client_t **out)
{
    char def[512];
    if (!url || !*url)
        url = getenv("GPUKV_URL");
    if (!url || !*url) {
        if (gkv_default_socket(def, sizeof(def)) < 0)
            return GKV_EINVAL;
        url = def;
    }
    int fd;
    if (strncmp(url, "unix:", 5) == 0)
        fd = dial_unix(url + 5, timeout_ms);
    else if (strncmp(url, "tcp:", 4) == 0)
        fd = dial_tcp(url + 4, timeout_ms);
    else if (url[0] == '/' || url[0] == '.')
        fd = dial_unix(url, timeout_ms);
    else
        return GKV_EINVAL;
    if (fd < 0)
        return fd;
    gkv_client_t *c = calloc(1, sizeof(*c));
    if (!c) {
        close(fd);
        return GKV_ENOMEM;
    }
    c->fd = fd;
    c->zc_fd = -1;
    c->local = strncmp(url, "tcp:", 4) != 0;
    gkv_wr_init(&c->wr);
    int rc = hello(c);
    if (rc) {
        gkv_client_close(c);
        return rc == GKV_ECLOSED ? GKV_ECONNECT : rc;
    }
    *out = c;
    return 0;
}

int gkv_client_set_timeout(gkv_client_t *c, uint32_t timeout_ms)
{
    if (c->fd < 0)
        return GKV_ECLOSED;
    return set_timeouts(c->fd, timeout_ms);
}

void gkv_client_close(gkv_client_t *c)
{
    if (!c)
        return;
    gkv__release_parked(c, false); /* closing the socket ends the leases */
    gkv__zc_detach(c);
    if (c->zc_fd >= 0)
        close(c->zc_fd);
    if (c->fd >= 0)
        close(c->fd);
    gkv_wr_fini(&c->wr);
    free(c->hdr);
    free(c->meta);
    free(c);
}

const gkv_server_info_t *gkv_client_info(const gkv_client_t *c)
{
    return &c->info;
}

const char *gkv_client_errmsg(const gkv_client_t *c)
{
    return c->errmsg;
}

void gkv_client_set_progress(gkv_client_t *c, gkv_progress_fn fn, void *arg)
{
    c->progress = fn;
    c->progress_arg = arg;
}

void gkv_free(void *p)
{
    free(p);
}
