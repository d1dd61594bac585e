/* metrics_http.c: GET /metrics on --metrics-listen. One request per connection: read the head
 * (up to GKV_HTTP_REQUEST bytes), answer, shut the socket down, close. Nothing here touches the
 * store: the body is rendered from counters when the request is complete. */
#include "metrics_http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "log.h"
#include "prometheus.h"
#include "token.h"

struct gkv_http_conn {
    uv_tcp_t tcp;
    uv_write_t wr;
    uv_shutdown_t sd;
    gkv_server_t *srv;
    gkv_http_conn_t *prev, *next;
    uint64_t started; /* uv_now at accept: the deadline counts from here */
    bool answered;    /* the head was complete: no more reading */
    char head[256];   /* the response's status line and headers */
    gkv_text_t body;
    size_t len; /* bytes of req received */
    char req[GKV_HTTP_REQUEST];
};

static void on_closed(uv_handle_t *h)
{
    gkv_http_conn_t *c = h->data;
    gkv_server_t *s = c->srv;
    if (c->prev)
        c->prev->next = c->next;
    else
        s->http_conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    gkv_text_free(&c->body);
    free(c);
}

/* Closes c; it stops counting against GKV_HTTP_CONNS at once (its fd is closed now, the
 * memory in the close callback). */
static void drop(gkv_http_conn_t *c)
{
    if (!uv_is_closing((uv_handle_t *)&c->tcp)) {
        c->srv->nhttp--;
        uv_close((uv_handle_t *)&c->tcp, on_closed);
    }
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    (void)status;
    drop(req->data);
}

static void on_written(uv_write_t *req, int status)
{
    gkv_http_conn_t *c = req->data;
    if (status || uv_shutdown(&c->sd, (uv_stream_t *)&c->tcp, on_shutdown))
        drop(c);
}

/* Sends the answer: status ("200 OK"), extra header lines (each ending in \r\n), and the body
 * in c->body unless head_only. */
static void answer(gkv_http_conn_t *c, const char *status, const char *extra, bool head_only)
{
    c->answered = true;
    uv_read_stop((uv_stream_t *)&c->tcp);
    if (c->body.failed) {
        drop(c);
        return;
    }
    snprintf(c->head, sizeof(c->head),
             "HTTP/1.1 %s\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
             "Content-Length: %zu\r\n%sConnection: close\r\n\r\n",
             status, c->body.len, extra);
    uv_buf_t bufs[2] = {uv_buf_init(c->head, (unsigned)strlen(c->head)),
                        uv_buf_init(c->body.p, (unsigned)c->body.len)};
    c->wr.data = c->sd.data = c;
    if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, bufs, head_only || !c->body.len ? 1 : 2,
                 on_written))
        drop(c);
}

/* The value of header name (lower case, with the colon) in the head, or NULL; *len its length. */
static const char *header(const char *head, const char *name, size_t *len)
{
    size_t n = strlen(name);
    for (const char *l = strstr(head, "\r\n"); l; l = strstr(l, "\r\n")) {
        l += 2;
        if (strncasecmp(l, name, n) != 0)
            continue;
        const char *v = l + n;
        while (*v == ' ' || *v == '\t')
            v++;
        const char *end = strstr(v, "\r\n");
        size_t vl = end ? (size_t)(end - v) : strlen(v);
        while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
            vl--;
        *len = vl;
        return v;
    }
    return NULL;
}

static bool authorized(gkv_http_conn_t *c)
{
    gkv_server_t *s = c->srv;
    if (!s->token_len)
        return true;
    size_t len;
    const char *v = header(c->req, "authorization:", &len);
    if (!v || len < 7 || strncasecmp(v, "bearer ", 7) != 0)
        return false;
    return gkv_token_equal(v + 7, len - 7, s->token, s->token_len);
}

static void handle(gkv_http_conn_t *c)
{
    gkv_server_t *s = c->srv;
    /* The request line: METHOD SP TARGET SP HTTP/1.x CRLF */
    const char *sp1 = strchr(c->req, ' ');
    const char *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
    const char *eol = strstr(c->req, "\r\n");
    if (!sp1 || !sp2 || sp2 > eol || strncmp(sp2, " HTTP/1.", 8) != 0) {
        gkv_text_printf(&c->body, "bad request\n");
        answer(c, "400 Bad Request", "", false);
        return;
    }
    size_t mlen = (size_t)(sp1 - c->req);
    const char *target = sp1 + 1;
    size_t tlen = (size_t)(sp2 - target);
    bool head_only = mlen == 4 && strncmp(c->req, "HEAD", 4) == 0;
    if (!head_only && !(mlen == 3 && strncmp(c->req, "GET", 3) == 0)) {
        gkv_text_printf(&c->body, "only GET and HEAD\n");
        answer(c, "405 Method Not Allowed", "Allow: GET, HEAD\r\n", false);
        return;
    }
    if (tlen < 8 || strncmp(target, "/metrics", 8) != 0 || (tlen > 8 && target[8] != '?')) {
        gkv_text_printf(&c->body, "gpukvd serves /metrics only\n");
        answer(c, "404 Not Found", "", head_only);
        return;
    }
    if (!authorized(c)) {
        s->http_auth_failures++;
        GKV_WARN("metrics: a request without the right bearer token");
        gkv_text_printf(&c->body, "this server needs Authorization: Bearer TOKEN\n");
        answer(c, "401 Unauthorized", "WWW-Authenticate: Bearer realm=\"gpukv\"\r\n", head_only);
        return;
    }
    s->metrics_scrapes++;
    gkv_metrics_render(s, &c->body);
    answer(c, "200 OK", "", head_only);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    gkv_http_conn_t *c = h->data;
    /* One byte is kept for the terminating NUL. */
    *buf = uv_buf_init(c->req + c->len, (unsigned)(sizeof(c->req) - 1 - c->len));
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
    (void)buf;
    gkv_http_conn_t *c = st->data;
    if (n < 0) {
        drop(c);
        return;
    }
    if (c->answered)
        return;
    c->len += (size_t)n;
    c->req[c->len] = 0;
    if (strstr(c->req, "\r\n\r\n"))
        handle(c);
    else if (c->len == sizeof(c->req) - 1) {
        gkv_text_printf(&c->body, "request head over %d bytes\n", GKV_HTTP_REQUEST - 1);
        answer(c, "431 Request Header Fields Too Large", "", false);
    } else if (memchr(c->req, 0, c->len)) {
        gkv_text_printf(&c->body, "bad request\n");
        answer(c, "400 Bad Request", "", false);
    }
}

static void on_connection(uv_stream_t *listener, int status)
{
    gkv_server_t *s = listener->data;
    if (status < 0)
        return;
    gkv_http_conn_t *c = calloc(1, sizeof(*c));
    if (!c) {
        GKV_ERROR("metrics: out of memory for a connection");
        return;
    }
    c->srv = s;
    c->started = uv_now(s->loop);
    uv_tcp_init(s->loop, &c->tcp);
    c->tcp.data = c;
    c->next = s->http_conns;
    if (c->next)
        c->next->prev = c;
    s->http_conns = c;
    s->nhttp++;
    if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0) {
        drop(c);
        return;
    }
    if (s->nhttp > GKV_HTTP_CONNS || s->shutting_down) {
        GKV_DEBUG("metrics: %u connections open, one more refused", GKV_HTTP_CONNS);
        drop(c);
        return;
    }
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read))
        drop(c);
}

int gkv_metrics_http_listen(gkv_server_t *s, char *err, size_t cap)
{
    /* Listening again after a takeover that failed: on the port bound before (port 0 in the
     * flag would pick another one, and scrapers would lose the endpoint). */
    char addr[sizeof(s->cfg.metrics_listen)];
    snprintf(addr, sizeof(addr), "%s",
             s->metrics_bound[0] ? s->metrics_bound : s->cfg.metrics_listen);
    int rc = gkv_server_listen_tcp(s, &s->metrics_listener, "metrics-listen", addr,
                                   "read the server's metrics", on_connection, s->metrics_bound,
                                   err, cap);
    s->metrics_open = uv_handle_get_type((uv_handle_t *)&s->metrics_listener) == UV_TCP;
    return rc;
}

void gkv_metrics_http_close(gkv_server_t *s)
{
    if (s->metrics_open) {
        s->listeners_closing++;
        uv_close((uv_handle_t *)&s->metrics_listener, gkv_server_listener_closed);
        s->metrics_open = false;
    }
    for (gkv_http_conn_t *c = s->http_conns; c; c = c->next)
        drop(c);
}

void gkv_metrics_http_sweep(gkv_server_t *s, uint64_t now)
{
    for (gkv_http_conn_t *c = s->http_conns; c; c = c->next)
        if (now - c->started >= GKV_HTTP_DEADLINE_MS) {
            GKV_DEBUG("metrics: a connection past its %d ms deadline dropped",
                      GKV_HTTP_DEADLINE_MS);
            drop(c);
        }
}
