/* peer.c: blocking connections between nodes (peer.h). */
#include "peer.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
/* An idle connection's reply buffer is nobody's: under ASan a read of it (a reply's slice kept
 * past gkv_peer_give, which another thread's next reply may overwrite at any moment) is
 * reported at once, not only when the race is lost. */
#define HDR_IDLE(c) ASAN_POISON_MEMORY_REGION((c)->hdr, (c)->hdr_cap)
#define HDR_TAKEN(c) ASAN_UNPOISON_MEMORY_REGION((c)->hdr, (c)->hdr_cap)
#else
#define HDR_IDLE(c) ((void)(c))
#define HDR_TAKEN(c) ((void)(c))
#endif

#include "commands.h"
#include "error.h"
#include "frame.h"
#include "hostport.h"
#include "log.h"
#include "trace.h"

#define PEER_IDLE_MAX 256     /* connections kept for reuse, every address */
#define PEER_IDLE_PER_ADDR 64 /* to one address */

/* One address's idle connections (newest first); it exists while it has some, or while a fill
 * is asked for (filling). */
struct gkv_peer_addr {
    gkv_peer_addr_t *next;
    gkv_peer_conn_t *idle;
    unsigned nidle;
    bool filling;
    char addr[160];
};

void gkv_peers_init(gkv_peers_t *p, const char *token, size_t token_len, int timeout_ms)
{
    memset(p, 0, sizeof(*p));
    pthread_mutex_init(&p->lock, NULL);
    if (token_len > GKV_TOKEN_MAX)
        token_len = GKV_TOKEN_MAX;
    if (token_len)
        memcpy(p->token, token, token_len);
    p->token_len = token_len;
    p->timeout_ms = timeout_ms;
}

static void conn_free(gkv_peer_conn_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    gkv_wr_fini(&c->wr);
    HDR_TAKEN(c);
    free(c->hdr);
    free(c);
}

void gkv_peers_fini(gkv_peers_t *p)
{
    while (p->addrs) {
        gkv_peer_addr_t *a = p->addrs;
        p->addrs = a->next;
        while (a->idle) {
            gkv_peer_conn_t *c = a->idle;
            a->idle = c->next;
            conn_free(c);
        }
        free(a);
    }
    explicit_bzero(p->token, sizeof(p->token));
    pthread_mutex_destroy(&p->lock);
}

/* Connects fd to sa within timeout_ms. */
static int connect_within(int fd, const struct sockaddr *sa, socklen_t len, int timeout_ms)
{
    int flags = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    int rc = connect(fd, sa, len);
    if (rc && errno == EINPROGRESS) {
        struct pollfd pfd = {fd, POLLOUT, 0};
        int err = 0;
        socklen_t elen = sizeof(err);
        rc = poll(&pfd, 1, timeout_ms) == 1 &&
                     getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) == 0 && err == 0
                 ? 0
                 : -1;
    }
    fcntl(fd, F_SETFL, flags);
    return rc;
}

static int dial(const char *addr, int timeout_ms)
{
    if (!strncmp(addr, "unix:", 5)) {
        struct sockaddr_un un = {.sun_family = AF_UNIX};
        if (strlen(addr + 5) >= sizeof(un.sun_path))
            return -1;
        strcpy(un.sun_path, addr + 5);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && connect_within(fd, (struct sockaddr *)&un, sizeof(un), timeout_ms)) {
            close(fd);
            fd = -1;
        }
        return fd;
    }
    char buf[160];
    const char *host, *port;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    if (gkv_hostport_split(addr, buf, sizeof(buf), &host, &port) ||
        getaddrinfo(host, port, &hints, &res))
        return -1;
    int fd = -1;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd >= 0 && connect_within(fd, ai->ai_addr, ai->ai_addrlen, timeout_ms)) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    return fd;
}

int gkv_peer_read(gkv_peer_conn_t *c, void *buf, size_t len)
{
    uint8_t *p = buf;
    c->timed_out = false;
    while (len) {
        ssize_t n = recv(c->fd, p, len, 0);
        if (n <= 0) {
            if (n < 0 && errno == EINTR)
                continue;
            c->timed_out = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
            return GKV_EUNAVAILABLE;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int gkv_peer_write(gkv_peer_conn_t *c, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len) {
        ssize_t n = send(c->fd, p, len, MSG_NOSIGNAL);
        if (n <= 0) {
            if (n < 0 && errno == EINTR)
                continue;
            return GKV_EUNAVAILABLE;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int gkv_peer_recv(gkv_peer_conn_t *c, gkv_response_t *resp)
{
    uint8_t prefix[GKV_FRAME_PREFIX];
    int rc = gkv_peer_read(c, prefix, sizeof(prefix));
    if (rc)
        return rc;
    uint32_t len = gkv_frame_get_len(prefix);
    if (gkv_frame_check_len(len, GKV_MAX_HEADER))
        return GKV_EPROTO;
    if (len > c->hdr_cap) {
        uint8_t *h = realloc(c->hdr, len);
        if (!h)
            return GKV_ENOMEM;
        c->hdr = h;
        c->hdr_cap = len;
    }
    if ((rc = gkv_peer_read(c, c->hdr, len)))
        return rc;
    c->hdr_len = len;
    if (gkv_resp_decode(c->hdr, len, resp))
        return GKV_EPROTO;
    /* One request is outstanding on a connection at a time: a reply to any other (one left
     * unread by an earlier user) would answer the wrong question. */
    if (resp->id == c->next_id)
        return 0;
    c->stray_id = resp->id ? resp->id : UINT64_MAX;
    return GKV_EPROTO;
}

int gkv_peer_reply_keep(const gkv_peer_conn_t *c, gkv_response_t *r, uint8_t **buf, size_t *cap)
{
    if (c->hdr_len > *cap) {
        uint8_t *b = realloc(*buf, c->hdr_len);
        if (!b)
            return GKV_ENOMEM;
        *buf = b;
        *cap = c->hdr_len;
    }
    if (c->hdr_len)
        memcpy(*buf, c->hdr, c->hdr_len);
    /* The same bytes decoded once already: this cannot fail. */
    return gkv_resp_decode(*buf, c->hdr_len, r) ? GKV_EPROTO : 0;
}

static void begin(gkv_peer_conn_t *c, unsigned op)
{
    gkv_wr_reset(&c->wr);
    gkv_wr_begin(&c->wr);
    gkv_wr_uint(&c->wr, GKV_F_OP, op);
    gkv_wr_uint(&c->wr, GKV_F_ID, ++c->next_id);
}

void gkv_peer_begin(gkv_peer_conn_t *c, unsigned op, unsigned node_op, const char *node,
                    uint64_t incarnation)
{
    begin(c, node_op ? GKV_OP_NODE : op);
    if (node_op) {
        gkv_wr_uint(&c->wr, GKV_F_NODE_OP, node_op);
        gkv_wr_str(&c->wr, GKV_F_NODE, node);
        gkv_wr_uint(&c->wr, GKV_F_INCARNATION, incarnation);
    }
}

int gkv_peer_send(gkv_peer_conn_t *c)
{
    if (gkv_wr_end(&c->wr))
        return GKV_ENOMEM;
    return gkv_peer_write(c, c->wr.sb.data, c->wr.sb.size);
}

int gkv_peer_call(gkv_peer_conn_t *c, const void *payload, size_t len, gkv_response_t *resp)
{
    int rc = gkv_peer_send(c);
    if (!rc && len)
        rc = gkv_peer_write(c, payload, len);
    return rc ? rc : gkv_peer_recv(c, resp);
}

/* addr's entry (under p->lock), made when make (NULL when it cannot be). */
static gkv_peer_addr_t *find_addr(gkv_peers_t *p, const char *addr, bool make)
{
    for (gkv_peer_addr_t *a = p->addrs; a; a = a->next)
        if (!strcmp(a->addr, addr))
            return a;
    if (!make || strlen(addr) >= sizeof(p->addrs->addr))
        return NULL;
    gkv_peer_addr_t *a = calloc(1, sizeof(*a));
    if (a) {
        strcpy(a->addr, addr);
        a->next = p->addrs;
        p->addrs = a;
    }
    return a;
}

/* Frees a (under p->lock) once it holds nothing and no fill is asked for. */
static void drop_addr_if_empty(gkv_peers_t *p, gkv_peer_addr_t *a)
{
    if (a->idle || a->filling)
        return;
    for (gkv_peer_addr_t **at = &p->addrs; *at; at = &(*at)->next)
        if (*at == a) {
            *at = a->next;
            free(a);
            return;
        }
}

/* Under p->lock: addr's entry, made where a fill may be asked for (the fill's connections go
 * there); NULL when there is none and none may be. */
static gkv_peer_addr_t *fill_entry(gkv_peers_t *p, const char *addr)
{
    return find_addr(p, addr, p->want && !p->closing);
}

/* Under p->lock: whether a fill of a is to be asked for now (it is then marked asked). */
static bool ask_fill(gkv_peers_t *p, gkv_peer_addr_t *a)
{
    if (!a || a->filling || p->closing || !p->want || a->nidle >= GKV_PEER_SPARE)
        return false;
    a->filling = true;
    return true;
}

/* Under p->lock: addr's fill is over (or was never asked for after all); it may be asked for
 * again. */
static void end_fill(gkv_peers_t *p, const char *addr)
{
    gkv_peer_addr_t *a = find_addr(p, addr, false);
    if (a) {
        a->filling = false;
        drop_addr_if_empty(p, a);
    }
}

/* Called with p->lock held, which it lets go: asks the owner for a fill of a (addr's entry, or
 * NULL) when ask_fill says so, and ends it again when the owner cannot. */
static void want_and_unlock(gkv_peers_t *p, gkv_peer_addr_t *a, const char *addr)
{
    bool want = ask_fill(p, a);
    if (a)
        drop_addr_if_empty(p, a);
    pthread_mutex_unlock(&p->lock);
    if (!want || p->want(p->want_arg, addr))
        return;
    pthread_mutex_lock(&p->lock);
    end_fill(p, addr);
    pthread_mutex_unlock(&p->lock);
}

/* A new connection to addr that said HELLO: 0 and *out, or a code (take's). */
static int dial_hello(gkv_peers_t *p, const char *addr, gkv_peer_conn_t **out)
{
    gkv_peer_conn_t *c = calloc(1, sizeof(*c));
    if (!c || strlen(addr) >= sizeof(c->addr)) {
        free(c);
        return GKV_ENOMEM;
    }
    strcpy(c->addr, addr);
    gkv_wr_init(&c->wr);
    gkv_trace("p_dial", 0, 0); /* GPUKV_TRACE: a new connection to a node, its HELLO answered */
    if ((c->fd = dial(addr, p->timeout_ms)) < 0) {
        conn_free(c);
        return GKV_EUNAVAILABLE;
    }
    struct timeval tv = {p->timeout_ms / 1000, (p->timeout_ms % 1000) * 1000};
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    begin(c, GKV_OP_HELLO);
    gkv_wr_uint(&c->wr, GKV_F_VERSION, GKV_PROTOCOL_VERSION);
    if (p->token_len)
        gkv_wr_bin(&c->wr, GKV_F_TOKEN, p->token, p->token_len);
    gkv_trace("p_dialed", 0, 0);
    gkv_response_t r;
    int rc = gkv_peer_call(c, NULL, 0, &r);
    gkv_trace("p_hello", 0, (uint64_t)rc);
    if (!rc && r.status)
        rc = r.status == GKV_EAUTH ? GKV_EAUTH : GKV_EUNAVAILABLE;
    if (rc) {
        if (rc == GKV_EAUTH)
            GKV_WARN("cluster: node at %s refused our token", addr);
        conn_free(c);
        return rc == GKV_EAUTH ? rc : GKV_EUNAVAILABLE;
    }
    *out = c;
    return 0;
}

/* An idle connection to addr (under p->lock), or NULL; counted as a take that must dial when
 * dial is set. Unlocks p, asking for a fill as a take does. */
static gkv_peer_conn_t *take_locked(gkv_peers_t *p, const char *addr, bool dial)
{
    gkv_peer_addr_t *a = find_addr(p, addr, false);
    gkv_peer_conn_t *c = a ? a->idle : NULL;
    if (c) {
        a->idle = c->next;
        a->nidle--;
        p->nidle--;
        c->next = NULL;
        HDR_TAKEN(c);
    } else if (dial) {
        p->opened++;
        p->waited++;
    }
    want_and_unlock(p, c ? a : fill_entry(p, addr), addr);
    return c;
}

int gkv_peer_take_idle(gkv_peers_t *p, const char *addr, gkv_peer_conn_t **out)
{
    pthread_mutex_lock(&p->lock);
    *out = take_locked(p, addr, false);
    return *out ? 0 : GKV_EUNAVAILABLE;
}

int gkv_peer_take(gkv_peers_t *p, const char *addr, gkv_peer_conn_t **out)
{
    pthread_mutex_lock(&p->lock);
    gkv_peer_conn_t *c = take_locked(p, addr, true);
    if (c) {
        *out = c;
        return 0;
    }
    return dial_hello(p, addr, out);
}

/* Keeps c for reuse (under p->lock) when there is room: true, or false (the caller frees it). */
static bool keep(gkv_peers_t *p, gkv_peer_conn_t *c)
{
    if (p->nidle >= PEER_IDLE_MAX)
        return false;
    gkv_peer_addr_t *a = find_addr(p, c->addr, true);
    if (!a || a->nidle >= PEER_IDLE_PER_ADDR)
        return false;
    c->next = a->idle;
    a->idle = c;
    a->nidle++;
    p->nidle++;
    HDR_IDLE(c);
    return true;
}

void gkv_peer_give(gkv_peers_t *p, gkv_peer_conn_t *c, bool ok)
{
    if (!c)
        return;
    pthread_mutex_lock(&p->lock);
    bool kept = ok && !c->stray_id && keep(p, c);
    if (c->stray_id)
        p->refused++;
    pthread_mutex_unlock(&p->lock);
    if (c->stray_id) /* a peer's bug, or ours: loud (the tests look for it) */
        GKV_WARN("cluster: %s answered request %" PRIu64 " under id %" PRIu64
                 ": reply refused, connection closed",
                 c->addr, c->next_id, c->stray_id);
    if (!kept) {
        gkv_trace("p_drop", ok, 0);
        conn_free(c);
    }
}

void gkv_peer_want(gkv_peers_t *p, const char *addr)
{
    pthread_mutex_lock(&p->lock);
    want_and_unlock(p, fill_entry(p, addr), addr);
}

unsigned gkv_peer_fill(gkv_peers_t *p, const char *addr)
{
    unsigned made = 0;
    for (;;) {
        pthread_mutex_lock(&p->lock);
        gkv_peer_addr_t *a = find_addr(p, addr, false); /* kept by its filling mark */
        bool more = a && !p->closing && a->nidle < GKV_PEER_SPARE && p->nidle < PEER_IDLE_MAX;
        if (!more)
            end_fill(p, addr);
        else
            p->opened++;
        pthread_mutex_unlock(&p->lock);
        if (!more)
            return made;
        gkv_peer_conn_t *c = NULL;
        int rc = dial_hello(p, addr, &c);
        pthread_mutex_lock(&p->lock);
        bool kept = !rc && keep(p, c);
        if (kept) {
            p->ahead++;
            made++;
        } else { /* it failed (or no room): the next take asks again */
            end_fill(p, addr);
        }
        pthread_mutex_unlock(&p->lock);
        if (!kept) {
            if (c)
                conn_free(c);
            return made;
        }
    }
}

void gkv_peers_close(gkv_peers_t *p)
{
    pthread_mutex_lock(&p->lock);
    p->closing = true;
    pthread_mutex_unlock(&p->lock);
}
