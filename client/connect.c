/* connect.c: connecting (Unix socket or TCP), HELLO, timeouts and closing. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "client.h"
#include "commands.h"
#include "error.h"
#include "hostport.h"
#include "token.h"

static void copy_slice(char *dst, size_t cap, gkv_slice_t s)
{
    snprintf(dst, cap, "%.*s", (int)s.len, (const char *)s.p);
}

/* The token HELLO carries: $GPUKV_TOKEN, else the file $GPUKV_TOKEN_FILE names, else none
 * (*len = 0). Returns 0 or GKV_EINVAL with c->errmsg saying why. */
static int find_token(gkv_client_t *c, char *buf, size_t *len)
{
    const char *t = getenv("GPUKV_TOKEN"), *file = getenv("GPUKV_TOKEN_FILE");
    *len = 0;
    if (t && *t) {
        *len = strlen(t);
        if (*len > GKV_TOKEN_MAX) {
            snprintf(c->errmsg, sizeof(c->errmsg), "GPUKV_TOKEN is longer than %d bytes",
                     GKV_TOKEN_MAX);
            return GKV_EINVAL;
        }
        memcpy(buf, t, *len);
    } else if (file && *file && gkv_token_load(file, buf, len, c->errmsg, sizeof(c->errmsg)) != 0) {
        return GKV_EINVAL;
    }
    return 0;
}

static int hello(gkv_client_t *c, unsigned version)
{
    char token[GKV_TOKEN_MAX + 1];
    size_t tlen;
    int rc = find_token(c, token, &tlen);
    if (rc)
        return rc;
    gkv__begin(c, GKV_OP_HELLO);
    gkv_wr_uint(&c->wr, GKV_F_VERSION, version);
    if (c->local) {
        gkv_wr_uint(&c->wr, GKV_F_ZC, GKV_ZC_EVERY_GPU);
        gkv_wr_uint(&c->wr, GKV_F_FENCES, 1); /* a fence page, for gkv_seal_async */
    }
    if (tlen)
        gkv_wr_bin(&c->wr, GKV_F_TOKEN, token, tlen);
    explicit_bzero(token, sizeof(token));
    rc = gkv__send(c, NULL, 0);
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
    copy_slice(c->s_zero_copy, sizeof(c->s_zero_copy), r->zc);
    copy_slice(c->s_zero_copy_why, sizeof(c->s_zero_copy_why), r->zc_why);
    uint32_t ngpus = 0;
    c->s_uuids[0][0] = 0;
    if (r->gpus.len) {
        gkv_reader_t it;
        uint32_t n;
        gkv_slice_t s;
        gkv_read_init(&it, r->gpus.p, r->gpus.len);
        if (gkv_read_array(&it, &n) != 0)
            n = 0;
        for (; ngpus < n && ngpus < GKV_FDPASS_MAX && gkv_read_bin(&it, &s) == 0; ngpus++) {
            copy_slice(c->s_uuids[ngpus], sizeof(c->s_uuids[0]), s);
            c->uuid_ptrs[ngpus] = c->s_uuids[ngpus];
        }
    }
    if (!ngpus) /* the host backend of one arena names none */
        c->uuid_ptrs[0] = c->s_uuids[0];
    in->protocol = (uint32_t)r->version;
    in->server = c->s_server;
    in->backend = c->s_backend;
    in->device = (int)r->device;
    in->gpu_uuid = c->s_uuids[0];
    in->gpus = ngpus ? ngpus : 1;
    in->gpu_uuids = c->uuid_ptrs;
    in->zero_copy = c->s_zero_copy;
    in->zero_copy_why = c->s_zero_copy_why;
    in->max_key = r->max_key;
    in->max_value = r->max_value;
    in->max_meta = r->max_meta;
    c->arena_size = r->arena_size;
    c->holds_max = r->holds < GKV_HOLDS_MAX ? r->holds : GKV_HOLDS_MAX;
    c->hold_bytes_max = r->hold_bytes < GKV_HOLD_BYTES ? r->hold_bytes : GKV_HOLD_BYTES;
    /* The fence page's descriptor comes after the memory's. */
    if (r->fences && c->nshared > 1 && r->fences >= sizeof(uint64_t)) {
        c->fence_fd = c->shared_fds[--c->nshared];
        c->fence_size = r->fences;
    }
    /* Descriptors without a granted mechanism (or the reverse), or neither the first GPU's
     * alone nor one per GPU, are not trusted. */
    bool granted = strcmp(c->s_zero_copy, "none") != 0;
    if (granted != (c->nshared > 0) || (c->nshared > 1 && c->nshared != in->gpus)) {
        while (c->nshared)
            close(c->shared_fds[--c->nshared]);
        snprintf(c->s_zero_copy, sizeof(c->s_zero_copy), "none");
        snprintf(c->s_zero_copy_why, sizeof(c->s_zero_copy_why),
                 "the server did not pass its memory");
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
    int fd = dial(AF_UNIX, SOCK_STREAM, 0, (struct sockaddr *)&sa, sizeof(sa), timeout_ms);
    if (fd >= 0) {
        /* A Unix socket's writer may have only its send buffer in flight (208 KiB by default),
         * so a large SET moved one buffer per round of the daemon's read and this process's
         * wake-up: a 3 MiB SET among small requests took 4 ms at the median where 4 MiB took
         * 1 ms (H100, bench/RESULTS.md, S5). The kernel caps it at net.core.wmem_max; memory
         * is used only while bytes are in flight. */
        int bytes = GKV_CLIENT_SNDBUF;
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
    }
    return fd;
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
    /* The newest protocol first; a server that speaks only protocol 1 answers VERSION, and a
     * new connection asks for 1 (zero-copy is asked for in a connection's first request). This
     * library works with either meaning of protocol 1's spares (PROTOCOL.md, Changelog). */
    int rc = GKV_EVERSION;
    for (unsigned v = GKV_PROTOCOL_VERSION; v >= GKV_PROTOCOL_MIN && rc == GKV_EVERSION; v--) {
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
        c->fence_fd = -1;
        c->local = strncmp(url, "tcp:", 4) != 0;
        gkv_wr_init(&c->wr);
        gkv_lc_init(&c->lc);
        rc = hello(c, v);
        if (rc == 0) {
            *out = c;
            return 0;
        }
        gkv_client_close(c);
    }
    return rc == GKV_ECLOSED ? GKV_ECONNECT : rc;
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
    gkv__mappings_close(c);
    gkv__fence_close(c);
    while (c->nshared)
        close(c->shared_fds[--c->nshared]);
    if (c->fd >= 0)
        close(c->fd);
    gkv_wr_fini(&c->wr);
    free(c->hdr);
    free(c->meta);
    free(c->ev_key);
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
