/* gpukv_bench.c: one load generator, two codecs (gpukv's protocol, and RESP through hiredis's
 * reader), so that gpukvd and redis-server face the identical workload. Each thread runs an
 * epoll loop over its connections; each connection keeps up to --pipeline requests in flight and
 * streams values from one shared buffer (no per-request copies), so large values cost the
 * generator little. Latency is per request, from its first byte sent to its reply's last byte. */
#include <errno.h>
#include <getopt.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "hostport.h"
#include "message.h"
#include "token.h"

/* Options. */

typedef struct {
    bool redis;
    const char *url;
    int clients, threads, pipeline;
    uint64_t size_min, size_max, keys, requests;
    double seconds, warmup;
    int set_ratio, get_ratio;
    bool zipf, csv, prefill;
    /* --size-mix: each key has one size, drawn by its hash from these classes, so that
     * overwrites keep the total constant (churn at a fixed fill level). */
    int nmix;
    bool per_size;
    int sndbuf; /* --sndbuf: SO_SNDBUF of each Unix socket, 0: the system's default */
    uint64_t mix_size[8];
    double mix_cum[8];
    const char *list_prefix; /* --list-prefix: every request is LIST(prefix, limit 100) */
} opts_t;

static opts_t o = {
    .clients = 50, .threads = 2, .pipeline = 1, .size_min = 64, .size_max = 64, .keys = 100000,
    .seconds = 5, .warmup = 1, .set_ratio = 1, .get_ratio = 1, .prefill = true,
};

/* Latency histogram: log-linear buckets, 32 per power of two (about 3% wide). */

#define HIST_SUB 32
#define HIST_BUCKETS (64 * HIST_SUB)

typedef struct {
    uint64_t n[HIST_BUCKETS];
    uint64_t count;
} hist_t;

static int hist_index(uint64_t ns)
{
    if (ns < HIST_SUB)
        return (int)ns;
    int msb = 63 - __builtin_clzll(ns);
    int sub = (int)((ns >> (msb - 5)) & (HIST_SUB - 1));
    return (msb - 4) * HIST_SUB + sub;
}

static uint64_t hist_value(int i)
{
    if (i < HIST_SUB)
        return (uint64_t)i;
    int msb = i / HIST_SUB + 4, sub = i % HIST_SUB;
    return ((uint64_t)(HIST_SUB + sub) << (msb - 5)) + (1ull << (msb - 5)) / 2;
}

static void hist_add(hist_t *h, uint64_t ns)
{
    h->n[hist_index(ns)]++;
    h->count++;
}

static void hist_merge(hist_t *dst, const hist_t *src)
{
    for (int i = 0; i < HIST_BUCKETS; i++)
        dst->n[i] += src->n[i];
    dst->count += src->count;
}

static double hist_pct(const hist_t *h, double p)
{
    uint64_t want = (uint64_t)ceil(p * (double)h->count), seen = 0;
    for (int i = 0; i < HIST_BUCKETS; i++) {
        seen += h->n[i];
        if (seen >= want && h->n[i])
            return (double)hist_value(i) / 1e3;
    }
    return 0;
}

/* Keys: uniform or zipfian (YCSB's generator, theta 0.99). */

typedef struct {
    double zetan, theta, alpha, eta, half_pow;
} zipf_t;

static zipf_t zipf;

static void zipf_init(uint64_t n)
{
    double theta = 0.99, zeta2 = 1 + pow(0.5, theta), z = 0;
    for (uint64_t i = 1; i <= n; i++)
        z += 1.0 / pow((double)i, theta);
    zipf = (zipf_t){z, theta, 1.0 / (1.0 - theta),
                    (1 - pow(2.0 / (double)n, 1 - theta)) / (1 - zeta2 / z), pow(0.5, theta)};
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static double rng_unit(uint64_t *s)
{
    return (double)(rng_next(s) >> 11) / 9007199254740992.0;
}

static uint64_t pick_key(uint64_t *s)
{
    if (!o.zipf)
        return rng_next(s) % o.keys;
    double u = rng_unit(s), uz = u * zipf.zetan;
    if (uz < 1)
        return 0;
    if (uz < 1 + zipf.half_pow)
        return 1;
    uint64_t k = (uint64_t)((double)o.keys * pow(zipf.eta * u - zipf.eta + 1, zipf.alpha));
    return k < o.keys ? k : o.keys - 1;
}

/* Connections. */

static uint8_t *value_buf; /* o.size_max bytes, shared by every SET */

enum { RD_PREFIX, RD_HEADER, RD_SKIP };

typedef struct {
    int fd;
    /* The request being sent: header bytes, then payload bytes from value_buf. */
    uint8_t hdr[512];
    size_t hdr_len, hdr_off;
    uint64_t pay_len, pay_off;
    bool sending, want_out;
    /* Small requests are gathered here and written together (a pipeline in one write). */
    uint8_t *ob;
    size_t ob_len, ob_off, ob_cap;
    /* Replies. */
    uint8_t *in;
    size_t in_len, in_cap;
    int rd;
    uint32_t need;
    uint64_t skip;
    redisReader *rr;
    /* Send times of the requests in flight, a ring of o.pipeline, and (--size-mix) the size
     * class of each. */
    uint64_t *sent;
    uint8_t *cls;
    uint8_t cur_cls; /* the class of the request make_request built last */
    uint32_t head, inflight;
    uint64_t next_id;
    uint64_t remaining; /* requests this connection may still start (prefill, --requests) */
} conn_t;

typedef struct {
    pthread_t tid;
    int id, nconns, ep;
    conn_t *conns;
    uint64_t rng, ops, errors, misses;
    hist_t hist;
    hist_t mix_hist[8]; /* --per-size: one per --size-mix class */
    bool prefill;
    uint64_t prefill_next, prefill_end;
} worker_t;

static volatile int phase; /* 0 warm-up, 1 measuring, 2 stop */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int dial(const char *url)
{
    if (strncmp(url, "unix:", 5) == 0) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (strlen(url + 5) >= sizeof(sa.sun_path))
            return -1;
        strcpy(sa.sun_path, url + 5);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && o.sndbuf)
            setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &o.sndbuf, sizeof(o.sndbuf));
        if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
            return fd;
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (strncmp(url, "tcp:", 4) != 0)
        return -1;
    char buf[256];
    const char *host, *port;
    if (gkv_hostport_split(url + 4, buf, sizeof(buf), &host, &port))
        return -1;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res;
    if (getaddrinfo(host, port, &hints, &res))
        return -1;
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    return fd;
}

/* The size of key k's value; with --size-mix, *cls gets its class (else 0). */
static uint64_t size_of_key(uint64_t k, uint64_t *rng, uint8_t *cls)
{
    *cls = 0;
    if (o.nmix) {
        uint64_t h = (k + 1) * 0x9E3779B97F4A7C15ULL;
        double u = (double)(h >> 11) / 9007199254740992.0;
        int i = 0;
        while (i < o.nmix - 1 && u >= o.mix_cum[i])
            i++;
        *cls = (uint8_t)i;
        return o.mix_size[i];
    }
    uint64_t size = o.size_min;
    if (o.size_max > o.size_min)
        size += rng_next(rng) % (o.size_max - o.size_min + 1);
    return size;
}

static size_t key_text(char *buf, uint64_t k)
{
    return (size_t)sprintf(buf, "key:%012llu", (unsigned long long)k);
}

/* Builds the next request into c->hdr (and the payload to follow). */
static void make_request(worker_t *w, conn_t *c)
{
    char key[32];
    bool set;
    uint64_t k;
    if (w->prefill) {
        k = w->prefill_next++;
        set = true;
    } else {
        k = pick_key(&w->rng);
        set = (int)(rng_next(&w->rng) % (uint64_t)(o.set_ratio + o.get_ratio)) < o.set_ratio;
    }
    size_t klen = key_text(key, k);
    uint64_t size = size_of_key(k, &w->rng, &c->cur_cls);
    c->pay_len = set ? size : 0;
    c->pay_off = 0;
    c->hdr_off = 0;
    if (o.redis) {
        if (set)
            c->hdr_len = (size_t)sprintf((char *)c->hdr, "*3\r\n$3\r\nSET\r\n$%zu\r\n%s\r\n$%llu\r\n",
                                         klen, key, (unsigned long long)size);
        else
            c->hdr_len =
                (size_t)sprintf((char *)c->hdr, "*2\r\n$3\r\nGET\r\n$%zu\r\n%s\r\n", klen, key);
        return;
    }
    gkv_wr_t wr;
    gkv_wr_init(&wr);
    gkv_wr_begin(&wr);
    if (o.list_prefix && !w->prefill) {
        gkv_wr_uint(&wr, GKV_F_OP, GKV_OP_LIST);
        gkv_wr_uint(&wr, GKV_F_ID, ++c->next_id);
        gkv_wr_bin(&wr, GKV_F_PREFIX, o.list_prefix, strlen(o.list_prefix));
        gkv_wr_uint(&wr, GKV_F_LIMIT, 100);
        c->pay_len = 0;
        gkv_wr_end(&wr);
        memcpy(c->hdr, wr.sb.data, wr.sb.size);
        c->hdr_len = wr.sb.size;
        gkv_wr_fini(&wr);
        return;
    }
    gkv_wr_uint(&wr, GKV_F_OP, set ? GKV_OP_SET : GKV_OP_GET);
    gkv_wr_uint(&wr, GKV_F_ID, ++c->next_id);
    gkv_wr_bin(&wr, GKV_F_KEY, key, klen);
    if (set)
        gkv_wr_uint(&wr, GKV_F_PAYLOAD, size);
    gkv_wr_end(&wr);
    memcpy(c->hdr, wr.sb.data, wr.sb.size);
    c->hdr_len = wr.sb.size;
    gkv_wr_fini(&wr);
}

static bool may_start(worker_t *w, conn_t *c)
{
    if (c->inflight >= (uint32_t)o.pipeline || phase == 2)
        return false;
    if (w->prefill)
        return w->prefill_next < w->prefill_end;
    if (o.requests)
        return c->remaining > 0;
    return true;
}

#define SMALL_REQ (64u << 10)

static void ob_put(conn_t *c, const void *p, size_t n)
{
    if (c->ob_len + n > c->ob_cap) {
        c->ob_cap = (c->ob_len + n) * 2;
        c->ob = realloc(c->ob, c->ob_cap);
    }
    memcpy(c->ob + c->ob_len, p, n);
    c->ob_len += n;
}

/* Sends as much as the socket takes; starts new requests while the pipeline has room. Small
 * requests are gathered and written at once; a large one streams its payload from value_buf. */
static int pump_out(worker_t *w, conn_t *c)
{
    for (;;) {
        if (c->ob_off < c->ob_len) {
            ssize_t r = write(c->fd, c->ob + c->ob_off, c->ob_len - c->ob_off);
            if (r < 0)
                return (errno == EAGAIN || errno == EWOULDBLOCK) ? 1 : -1;
            c->ob_off += (size_t)r;
            continue;
        }
        c->ob_len = c->ob_off = 0;
        while (!c->sending && may_start(w, c) && c->ob_len < SMALL_REQ) {
            make_request(w, c);
            c->sent[(c->head + c->inflight) % (uint32_t)o.pipeline] = now_ns();
            c->cls[(c->head + c->inflight) % (uint32_t)o.pipeline] = c->cur_cls;
            c->inflight++;
            if (o.requests && !w->prefill)
                c->remaining--;
            if (c->pay_len > SMALL_REQ) {
                c->sending = true; /* streamed below, after what is gathered */
                break;
            }
            ob_put(c, c->hdr, c->hdr_len);
            ob_put(c, value_buf, (size_t)c->pay_len);
            if (o.redis && c->pay_len)
                ob_put(c, "\r\n", 2);
        }
        if (c->ob_len)
            continue;
        if (!c->sending)
            return 0;
        struct iovec iov[2];
        int n = 0;
        if (c->hdr_off < c->hdr_len)
            iov[n++] = (struct iovec){c->hdr + c->hdr_off, c->hdr_len - c->hdr_off};
        if (c->pay_off < c->pay_len)
            iov[n++] = (struct iovec){value_buf + c->pay_off, (size_t)(c->pay_len - c->pay_off)};
        static const char crlf[] = "\r\n";
        bool redis_tail = o.redis && c->pay_len && c->pay_off == c->pay_len &&
                          c->hdr_off == c->hdr_len;
        if (redis_tail) { /* the bulk string's closing CRLF, sent as the request's last bytes */
            memcpy(c->hdr, crlf, 2);
            c->hdr_len = 2;
            c->hdr_off = 0;
            c->pay_len = 0;
            c->pay_off = 0;
            continue;
        }
        if (n == 0) {
            c->sending = false;
            continue;
        }
        ssize_t r = writev(c->fd, iov, n);
        if (r < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 1;
            return -1;
        }
        size_t done = (size_t)r;
        size_t h = c->hdr_len - c->hdr_off < done ? c->hdr_len - c->hdr_off : done;
        c->hdr_off += h;
        c->pay_off += done - h;
    }
}

static void completed(worker_t *w, conn_t *c, bool error, bool miss)
{
    uint64_t t = now_ns() - c->sent[c->head];
    uint8_t cls = c->cls[c->head];
    c->head = (c->head + 1) % (uint32_t)o.pipeline;
    c->inflight--;
    if (w->prefill)
        return;
    if (phase == 1) {
        w->ops++;
        w->errors += error;
        w->misses += miss;
        hist_add(&w->hist, t);
        if (o.nmix)
            hist_add(&w->mix_hist[cls], t);
    }
}

/* Parses replies; returns -1 on a broken stream. */
static int parse_in(worker_t *w, conn_t *c)
{
    if (o.redis) {
        if (redisReaderFeed(c->rr, (const char *)c->in, c->in_len) != REDIS_OK)
            return -1;
        c->in_len = 0;
        void *reply;
        for (;;) {
            if (redisReaderGetReply(c->rr, &reply) != REDIS_OK)
                return -1;
            if (!reply)
                return 0;
            int type = ((redisReply *)reply)->type;
            completed(w, c, type == REDIS_REPLY_ERROR, type == REDIS_REPLY_NIL);
            freeReplyObject(reply);
        }
    }
    size_t pos = 0;
    while (pos < c->in_len) {
        size_t avail = c->in_len - pos;
        if (c->rd == RD_SKIP) {
            size_t n = avail < c->skip ? avail : (size_t)c->skip;
            pos += n;
            c->skip -= n;
            if (!c->skip) {
                c->rd = RD_PREFIX;
                completed(w, c, false, false);
            }
            continue;
        }
        if (c->rd == RD_PREFIX) {
            if (avail < 4)
                break;
            c->need = gkv_frame_get_len(c->in + pos);
            if (gkv_frame_check_len(c->need, GKV_MAX_HEADER))
                return -1;
            pos += 4;
            c->rd = RD_HEADER;
            continue;
        }
        if (avail < c->need)
            break;
        gkv_response_t r;
        if (gkv_resp_decode(c->in + pos, c->need, &r))
            return -1;
        pos += c->need;
        if (r.payload_len) {
            c->skip = r.payload_len;
            c->rd = RD_SKIP;
            /* The error flag is decided now; SKIP completes the request later. */
            if (r.status < 0)
                w->errors += phase == 1;
        } else {
            c->rd = RD_PREFIX;
            completed(w, c, r.status < 0 && r.status != -2, r.status == -2);
        }
    }
    memmove(c->in, c->in + pos, c->in_len - pos);
    c->in_len -= pos;
    if (c->rd == RD_HEADER && c->need + 4 > c->in_cap) {
        c->in_cap = c->need + 4;
        c->in = realloc(c->in, c->in_cap);
    }
    return 0;
}

static int pump_in(worker_t *w, conn_t *c)
{
    for (;;) {
        ssize_t r = read(c->fd, c->in + c->in_len, c->in_cap - c->in_len);
        if (r == 0)
            return -1;
        if (r < 0)
            return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
        c->in_len += (size_t)r;
        if (parse_in(w, c))
            return -1;
    }
}

static void arm(worker_t *w, conn_t *c, bool out)
{
    if (out == c->want_out)
        return;
    struct epoll_event ev = {.events = EPOLLIN | (out ? EPOLLOUT : 0), .data.ptr = c};
    epoll_ctl(w->ep, EPOLL_CTL_MOD, c->fd, &ev);
    c->want_out = out;
}

static bool all_done(worker_t *w)
{
    for (int i = 0; i < w->nconns; i++)
        if (w->conns[i].inflight || may_start(w, &w->conns[i]))
            return false;
    return true;
}

/* Runs the connections until the phase says stop, or (prefill, --requests) all are done. */
static int run_loop(worker_t *w)
{
    for (int i = 0; i < w->nconns; i++) {
        int rc = pump_out(w, &w->conns[i]);
        if (rc < 0)
            return -1;
        arm(w, &w->conns[i], rc == 1);
    }
    struct epoll_event evs[64];
    while (phase != 2 && !all_done(w)) {
        int n = epoll_wait(w->ep, evs, 64, 100);
        for (int i = 0; i < n; i++) {
            conn_t *c = evs[i].data.ptr;
            if ((evs[i].events & EPOLLIN) && pump_in(w, c))
                return -1;
            int rc = pump_out(w, c);
            if (rc < 0)
                return -1;
            arm(w, c, rc == 1);
        }
    }
    return 0;
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    if (run_loop(w)) {
        fprintf(stderr, "gpukv-bench: thread %d: connection failed\n", w->id);
        exit(1);
    }
    return NULL;
}

/* The token a gpukv connection presents in HELLO, as libgpukv takes it: $GPUKV_TOKEN, else the
 * file $GPUKV_TOKEN_FILE names; none when neither is set (len 0). */
static char token[GKV_TOKEN_MAX + 1];
static size_t token_len;

static int load_token(void)
{
    const char *t = getenv("GPUKV_TOKEN"), *file = getenv("GPUKV_TOKEN_FILE");
    if (t && *t) {
        token_len = strlen(t);
        if (token_len > GKV_TOKEN_MAX)
            return -1;
        memcpy(token, t, token_len);
        return 0;
    }
    char err[256];
    if (file && *file && gkv_token_load(file, token, &token_len, err, sizeof(err))) {
        fprintf(stderr, "gpukv-bench: %s\n", err);
        return -1;
    }
    return 0;
}

/* HELLO with the token on the blocking fd, before the benchmark's requests. 0 or -1. */
static int hello(int fd)
{
    gkv_wr_t w;
    gkv_wr_init(&w);
    gkv_wr_begin(&w);
    gkv_wr_uint(&w, GKV_F_OP, GKV_OP_HELLO);
    gkv_wr_uint(&w, GKV_F_ID, 0);
    gkv_wr_uint(&w, GKV_F_VERSION, 2);
    gkv_wr_bin(&w, GKV_F_TOKEN, token, token_len);
    gkv_wr_end(&w);
    bool ok = write(fd, w.sb.data, w.sb.size) == (ssize_t)w.sb.size;
    gkv_wr_fini(&w);
    uint8_t pre[4];
    static _Thread_local uint8_t hdr[1 << 16];
    if (!ok || recv(fd, pre, 4, MSG_WAITALL) != 4)
        return -1;
    uint32_t len = gkv_frame_get_len(pre);
    gkv_response_t r;
    if (len > sizeof(hdr) || recv(fd, hdr, len, MSG_WAITALL) != (ssize_t)len ||
        gkv_resp_decode(hdr, len, &r) || r.status) {
        fprintf(stderr, "gpukv-bench: HELLO with the token was refused\n");
        return -1;
    }
    return 0;
}

static int setup_worker(worker_t *w, int id, int nconns)
{
    w->id = id;
    w->nconns = nconns;
    w->rng = 0x9E3779B97F4A7C15ULL * (uint64_t)(id + 1);
    w->conns = calloc((size_t)nconns, sizeof(conn_t));
    w->ep = epoll_create1(EPOLL_CLOEXEC);
    for (int i = 0; i < nconns; i++) {
        conn_t *c = &w->conns[i];
        c->fd = dial(o.url);
        if (c->fd < 0) {
            fprintf(stderr, "gpukv-bench: cannot connect to %s\n", o.url);
            return -1;
        }
        if (!o.redis && token_len && hello(c->fd))
            return -1;
        fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
        c->in_cap = 1 << 18;
        c->in = malloc(c->in_cap);
        c->sent = calloc((size_t)o.pipeline, sizeof(uint64_t));
        c->cls = calloc((size_t)o.pipeline, 1);
        if (o.redis)
            c->rr = redisReaderCreate();
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        epoll_ctl(w->ep, EPOLL_CTL_ADD, c->fd, &ev);
    }
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: gpukv-bench --target gpukv|redis --url URL [options]\n"
            "  --url unix:/path | tcp:host:port\n"
            "  --clients N (50)  --threads T (2)  --pipeline P (1)\n"
            "  --size BYTES | MIN-MAX (64)  --keys K (100000)  --dist uniform|zipf (uniform)\n"
            "  --ratio SET:GET (1:1)  --seconds S (5) | --requests N (per connection)\n"
            "  --warmup S (1)  --no-prefill  --csv (one line: ops_per_sec,p50_us,p99_us,p999_us)\n"
            "  --size-mix SIZE:WEIGHT,... (each key keeps one size drawn from these classes)\n"
            "  --per-size (with --size-mix: latency per class, one line each on stderr)\n"
            "  --sndbuf BYTES (SO_SNDBUF of each Unix socket; default: the system's)\n"
            "  --list-prefix P (gpukv only: every request is LIST of up to 100 keys under P)\n"
            "  gpukv connections say HELLO with $GPUKV_TOKEN or $GPUKV_TOKEN_FILE's token when set\n");
}

static int parse_size(const char *s, uint64_t *out)
{
    char *end;
    double v = strtod(s, &end);
    uint64_t mul = 1;
    switch (*end) {
    case 'K': case 'k': mul = 1ull << 10; end++; break;
    case 'M': case 'm': mul = 1ull << 20; end++; break;
    case 'G': case 'g': mul = 1ull << 30; end++; break;
    default: break;
    }
    if (end == s || *end || v < 0)
        return -1;
    *out = (uint64_t)(v * (double)mul);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"target", required_argument, 0, 't'},   {"url", required_argument, 0, 'u'},
        {"clients", required_argument, 0, 'c'},  {"threads", required_argument, 0, 'T'},
        {"pipeline", required_argument, 0, 'P'}, {"size", required_argument, 0, 's'},
        {"keys", required_argument, 0, 'k'},     {"ratio", required_argument, 0, 'r'},
        {"seconds", required_argument, 0, 'S'},  {"requests", required_argument, 0, 'n'},
        {"warmup", required_argument, 0, 'w'},   {"dist", required_argument, 0, 'd'},
        {"no-prefill", no_argument, 0, 'N'},     {"csv", no_argument, 0, 'C'},
        {"size-mix", required_argument, 0, 'm'}, {"list-prefix", required_argument, 0, 'L'},
        {"per-size", no_argument, 0, 'Z'},       {"sndbuf", required_argument, 0, 'B'},
        {"help", no_argument, 0, 'h'},           {0, 0, 0, 0},
    };
    const char *target = NULL;
    int ch;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        char *dash;
        switch (ch) {
        case 't': target = optarg; break;
        case 'u': o.url = optarg; break;
        case 'c': o.clients = atoi(optarg); break;
        case 'T': o.threads = atoi(optarg); break;
        case 'P': o.pipeline = atoi(optarg); break;
        case 's':
            dash = strchr(optarg, '-');
            if (dash) {
                *dash = 0;
                if (parse_size(optarg, &o.size_min) || parse_size(dash + 1, &o.size_max))
                    return 2;
            } else if (parse_size(optarg, &o.size_min)) {
                return 2;
            } else {
                o.size_max = o.size_min;
            }
            break;
        case 'k': o.keys = strtoull(optarg, NULL, 10); break;
        case 'r':
            if (sscanf(optarg, "%d:%d", &o.set_ratio, &o.get_ratio) != 2)
                return 2;
            break;
        case 'S': o.seconds = atof(optarg); break;
        case 'n': o.requests = strtoull(optarg, NULL, 10); break;
        case 'w': o.warmup = atof(optarg); break;
        case 'd': o.zipf = strcmp(optarg, "zipf") == 0; break;
        case 'N': o.prefill = false; break;
        case 'L': o.list_prefix = optarg; break;
        case 'm': {
            double total = 0;
            for (char *tok = strtok(optarg, ","); tok && o.nmix < 8; tok = strtok(NULL, ",")) {
                char *colon = strchr(tok, ':');
                if (!colon)
                    return 2;
                *colon = 0;
                if (parse_size(tok, &o.mix_size[o.nmix]))
                    return 2;
                total += atof(colon + 1);
                o.mix_cum[o.nmix++] = total;
            }
            for (int i = 0; i < o.nmix; i++) {
                o.mix_cum[i] /= total;
                if (o.mix_size[i] > o.size_max)
                    o.size_max = o.mix_size[i];
            }
            break;
        }
        case 'C': o.csv = true; break;
        case 'Z':
            o.per_size = true;
            break;
        case 'B':
            o.sndbuf = atoi(optarg);
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!target || !o.url || (strcmp(target, "gpukv") && strcmp(target, "redis")) ||
        o.clients < 1 || o.threads < 1 || o.pipeline < 1 || o.keys < 1 ||
        o.size_max < o.size_min || o.set_ratio + o.get_ratio < 1 ||
        (o.list_prefix && strcmp(target, "gpukv"))) {
        usage(stderr);
        return 2;
    }
    o.redis = strcmp(target, "redis") == 0;
    if (!o.redis && load_token())
        return 2;
    if (o.threads > o.clients)
        o.threads = o.clients;
    if (o.zipf)
        zipf_init(o.keys);
    value_buf = malloc(o.size_max ? o.size_max : 1);
    for (uint64_t i = 0; i < o.size_max; i++)
        value_buf[i] = (uint8_t)(i * 131 + 7);

    /* Prefill every key once (SETs, pipelined) when the workload reads. */
    if (o.prefill && o.get_ratio) {
        worker_t pw = {0};
        if (setup_worker(&pw, 99, o.clients < 8 ? o.clients : 8))
            return 1;
        pw.prefill = true;
        pw.prefill_end = o.keys;
        int save = o.pipeline;
        o.pipeline = o.pipeline < 16 ? 16 : o.pipeline;
        for (int i = 0; i < pw.nconns; i++) {
            free(pw.conns[i].sent);
            pw.conns[i].sent = calloc((size_t)o.pipeline, sizeof(uint64_t));
            pw.conns[i].cls = calloc((size_t)o.pipeline, 1);
        }
        phase = 0;
        if (run_loop(&pw)) {
            fprintf(stderr, "gpukv-bench: prefill failed\n");
            return 1;
        }
        o.pipeline = save;
        for (int i = 0; i < pw.nconns; i++)
            close(pw.conns[i].fd);
    }

    worker_t *ws = calloc((size_t)o.threads, sizeof(worker_t));
    for (int t = 0; t < o.threads; t++) {
        int n = o.clients / o.threads + (t < o.clients % o.threads);
        if (setup_worker(&ws[t], t, n))
            return 1;
        for (int i = 0; i < n; i++)
            ws[t].conns[i].remaining = o.requests;
    }
    phase = o.warmup > 0 && !o.requests ? 0 : 1;
    uint64_t t0 = now_ns(), tm = t0;
    for (int t = 0; t < o.threads; t++)
        pthread_create(&ws[t].tid, NULL, worker_main, &ws[t]);
    if (!o.requests) {
        if (phase == 0) {
            usleep((useconds_t)(o.warmup * 1e6));
            tm = now_ns();
            phase = 1;
        }
        usleep((useconds_t)(o.seconds * 1e6));
        phase = 2;
    }
    for (int t = 0; t < o.threads; t++)
        pthread_join(ws[t].tid, NULL);
    double elapsed = (double)(now_ns() - tm) / 1e9;
    if (!o.requests)
        elapsed = o.seconds;
    hist_t *h = calloc(1, sizeof(hist_t));
    uint64_t ops = 0, errors = 0, misses = 0;
    for (int t = 0; t < o.threads; t++) {
        ops += ws[t].ops;
        errors += ws[t].errors;
        misses += ws[t].misses;
        hist_merge(h, &ws[t].hist);
    }
    double ops_s = (double)ops / elapsed;
    if (o.csv) {
        printf("%.3f,%.1f,%.1f,%.1f\n", ops_s, hist_pct(h, 0.5), hist_pct(h, 0.99),
               hist_pct(h, 0.999));
    } else {
        printf("%s %s: %llu requests in %.2f s: %.3f ops/s; latency p50 %.1f us, p99 %.1f us, "
               "p99.9 %.1f us; errors %llu, misses %llu\n",
               target, o.url, (unsigned long long)ops, elapsed, ops_s, hist_pct(h, 0.5),
               hist_pct(h, 0.99), hist_pct(h, 0.999), (unsigned long long)errors,
               (unsigned long long)misses);
    }
    for (int i = 0; o.per_size && i < o.nmix; i++) {
        hist_t *m = calloc(1, sizeof(hist_t));
        for (int t = 0; t < o.threads; t++)
            hist_merge(m, &ws[t].mix_hist[i]);
        fprintf(stderr, "size %llu: %llu requests, p50 %.1f us, p90 %.1f us, p99 %.1f us\n",
                (unsigned long long)o.mix_size[i], (unsigned long long)m->count, hist_pct(m, 0.5),
                hist_pct(m, 0.9), hist_pct(m, 0.99));
        free(m);
    }
    return errors ? 1 : 0;
}
