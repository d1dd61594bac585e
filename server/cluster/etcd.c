/* etcd.c: etcd's v3 JSON gateway through libcurl (etcd.h). One easy handle per client, reused
 * (keeps the connection); cJSON builds the requests and reads the answers. */
#include "etcd.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "log.h"

/* An answer larger than this is refused (a member list is a few KiB per node). */
#define ETCD_MAX_ANSWER (16u << 20)

struct gkv_etcd {
    CURL *curl;
    char *endpoints[GKV_ETCD_MAX_ENDPOINTS];
    size_t n, last; /* endpoints, and the one that last answered */
    long timeout_ms;
};

typedef struct {
    char *buf;
    size_t len, cap;
    /* Watch: called after each complete line (one JSON object each). */
    int (*on_line)(void *arg, const char *line, size_t len);
    void *arg;
    volatile int *stop;
    int stopped; /* on_line or *stop asked to stop */
} answer_t;

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

void gkv_base64_encode(const void *in, size_t len, char *out)
{
    const uint8_t *p = in;
    size_t i = 0;
    for (; i + 2 < len; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        *out++ = B64[v >> 18];
        *out++ = B64[(v >> 12) & 63];
        *out++ = B64[(v >> 6) & 63];
        *out++ = B64[v & 63];
    }
    if (i < len) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < len ? (uint32_t)p[i + 1] << 8 : 0);
        *out++ = B64[v >> 18];
        *out++ = B64[(v >> 12) & 63];
        *out++ = i + 1 < len ? B64[(v >> 6) & 63] : '=';
        *out++ = '=';
    }
    *out = 0;
}

static int b64_value(char c)
{
    const char *at = c ? strchr(B64, c) : NULL;
    return at ? (int)(at - B64) : -1;
}

long gkv_base64_decode(const char *in, void *out)
{
    size_t n = strlen(in);
    uint8_t *o = out;
    long len = 0;
    if (n % 4)
        return -1;
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int j = 0; j < 4; j++) {
            if (in[i + j] == '=' && i + 4 == n && j >= 2) {
                v[j] = 0;
                pad++;
            } else if (pad || (v[j] = b64_value(in[i + j])) < 0) {
                return -1;
            }
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | v[3];
        o[len++] = (uint8_t)(w >> 16);
        if (pad < 2)
            o[len++] = (uint8_t)(w >> 8);
        if (pad < 1)
            o[len++] = (uint8_t)w;
    }
    return len;
}

gkv_etcd_t *gkv_etcd_alloc(const char *endpoints, long timeout_ms)
{
    gkv_etcd_t *e = calloc(1, sizeof(*e));
    if (!e)
        return NULL;
    e->timeout_ms = timeout_ms;
    const char *p = endpoints;
    while (p && *p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (!len || len > 255 || e->n == GKV_ETCD_MAX_ENDPOINTS)
            goto fail;
        if (!(e->endpoints[e->n] = malloc(len + 1)))
            goto fail;
        memcpy(e->endpoints[e->n], p, len);
        e->endpoints[e->n++][len] = 0;
        p = end ? end + 1 : NULL;
    }
    if (!e->n || !(e->curl = curl_easy_init()))
        goto fail;
    return e;
fail:
    gkv_etcd_free(e);
    return NULL;
}

void gkv_etcd_free(gkv_etcd_t *e)
{
    if (!e)
        return;
    if (e->curl)
        curl_easy_cleanup(e->curl);
    for (size_t i = 0; i < e->n; i++)
        free(e->endpoints[i]);
    free(e);
}

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
    answer_t *a = arg;
    size_t len = size * n;
    if (a->len + len + 1 > ETCD_MAX_ANSWER)
        return 0; /* curl fails the transfer */
    if (a->len + len + 1 > a->cap) {
        size_t cap = a->cap ? a->cap : 4096;
        while (cap < a->len + len + 1)
            cap *= 2;
        char *b = realloc(a->buf, cap);
        if (!b)
            return 0;
        a->buf = b;
        a->cap = cap;
    }
    memcpy(a->buf + a->len, data, len);
    a->len += len;
    a->buf[a->len] = 0;
    if (!a->on_line)
        return len;
    char *nl;
    while ((nl = memchr(a->buf, '\n', a->len))) {
        size_t line = (size_t)(nl - a->buf);
        *nl = 0;
        if (a->on_line(a->arg, a->buf, line))
            a->stopped = 1;
        memmove(a->buf, nl + 1, a->len - line - 1);
        a->len -= line + 1;
        a->buf[a->len] = 0;
        if (a->stopped)
            return 0;
    }
    return len;
}

static int on_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    (void)dt, (void)dn, (void)ut, (void)un;
    answer_t *a = arg;
    if (a->stop && *a->stop) {
        a->stopped = 1;
        return 1;
    }
    return 0;
}

/* POSTs body (JSON) to path on the endpoints in turn; the answer's JSON into *out (caller
 * frees with cJSON_Delete). stream: no overall timeout (a watch), lines go to a->on_line. */
static int post(gkv_etcd_t *e, const char *path, cJSON *body, cJSON **out, answer_t *a)
{
    char *json = cJSON_PrintUnformatted(body);
    answer_t own = {0};
    if (!a)
        a = &own;
    if (!json)
        return GKV_ENOMEM;
    int rc = GKV_EUNAVAILABLE;
    for (size_t k = 0; k < e->n && rc == GKV_EUNAVAILABLE && !a->stopped; k++) {
        size_t i = (e->last + k) % e->n;
        char url[320];
        snprintf(url, sizeof(url), "http://%s%s", e->endpoints[i], path);
        curl_easy_reset(e->curl);
        curl_easy_setopt(e->curl, CURLOPT_URL, url);
        curl_easy_setopt(e->curl, CURLOPT_POSTFIELDS, json);
        curl_easy_setopt(e->curl, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(e->curl, CURLOPT_WRITEDATA, a);
        curl_easy_setopt(e->curl, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(e->curl, CURLOPT_CONNECTTIMEOUT_MS, e->timeout_ms);
        curl_easy_setopt(e->curl, CURLOPT_PROTOCOLS_STR, "http");
        if (a->on_line) {
            curl_easy_setopt(e->curl, CURLOPT_XFERINFOFUNCTION, on_progress);
            curl_easy_setopt(e->curl, CURLOPT_XFERINFODATA, a);
            curl_easy_setopt(e->curl, CURLOPT_NOPROGRESS, 0L);
            /* A watch that hears nothing for this long is taken for a dead endpoint; etcd
             * sends progress notifications well within it (--experimental-watch-progress). */
            curl_easy_setopt(e->curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
            curl_easy_setopt(e->curl, CURLOPT_LOW_SPEED_TIME, 3600L);
        } else {
            curl_easy_setopt(e->curl, CURLOPT_TIMEOUT_MS, e->timeout_ms);
        }
        a->len = 0;
        CURLcode cc = curl_easy_perform(e->curl);
        long status = 0;
        curl_easy_getinfo(e->curl, CURLINFO_RESPONSE_CODE, &status);
        if (a->stopped) {
            rc = 0;
        } else if (cc != CURLE_OK || status == 0 || status >= 500) {
            GKV_DEBUG("etcd %s: %s", url, cc != CURLE_OK ? curl_easy_strerror(cc) : "server error");
        } else {
            e->last = i;
            rc = 0;
            if (out && !(*out = cJSON_ParseWithLength(a->buf ? a->buf : "", a->len)))
                rc = GKV_EPROTO;
        }
    }
    free(own.buf);
    cJSON_free(json);
    return rc;
}

/* etcd's int64 fields come as strings; an absent one is 0. */
static int64_t num(const cJSON *obj, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (cJSON_IsString(v))
        return strtoll(v->valuestring, NULL, 10);
    if (cJSON_IsNumber(v))
        return (int64_t)v->valuedouble;
    return 0;
}

static void add_num(cJSON *obj, const char *name, int64_t v)
{
    char s[24];
    snprintf(s, sizeof(s), "%" PRId64, v);
    cJSON_AddStringToObject(obj, name, s);
}

static int add_b64(cJSON *obj, const char *name, const void *bytes, size_t len)
{
    char *s = malloc(len / 3 * 4 + 8);
    if (!s)
        return GKV_ENOMEM;
    gkv_base64_encode(bytes, len, s);
    cJSON *v = cJSON_AddStringToObject(obj, name, s);
    free(s);
    return v ? 0 : GKV_ENOMEM;
}

/* An answer carrying "error" is etcd refusing the request. */
static int refused(const cJSON *ans, const char *what)
{
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(ans, "error");
    if (!err)
        return 0;
    GKV_WARN("etcd refused %s: %s", what, cJSON_IsString(err) ? err->valuestring : "?");
    return GKV_EPROTO;
}

int gkv_etcd_grant(gkv_etcd_t *e, int64_t ttl, int64_t *id)
{
    cJSON *req = cJSON_CreateObject(), *ans = NULL;
    if (!req)
        return GKV_ENOMEM;
    add_num(req, "TTL", ttl);
    int rc = post(e, "/v3/lease/grant", req, &ans, NULL);
    if (!rc && !(rc = refused(ans, "a lease")))
        rc = (*id = num(ans, "ID")) ? 0 : GKV_EPROTO;
    cJSON_Delete(ans);
    cJSON_Delete(req);
    return rc;
}

int gkv_etcd_keepalive(gkv_etcd_t *e, int64_t id, int64_t *ttl)
{
    cJSON *req = cJSON_CreateObject(), *ans = NULL;
    if (!req)
        return GKV_ENOMEM;
    add_num(req, "ID", id);
    int rc = post(e, "/v3/lease/keepalive", req, &ans, NULL);
    if (!rc && !(rc = refused(ans, "a keepalive"))) {
        /* One streamed message: {"result": {..., "TTL": "5"}}; no TTL once the lease is gone. */
        const cJSON *res = cJSON_GetObjectItemCaseSensitive(ans, "result");
        *ttl = res ? num(res, "TTL") : 0;
        rc = res ? 0 : GKV_EPROTO;
    }
    cJSON_Delete(ans);
    cJSON_Delete(req);
    return rc;
}

int gkv_etcd_revoke(gkv_etcd_t *e, int64_t id)
{
    cJSON *req = cJSON_CreateObject(), *ans = NULL;
    if (!req)
        return GKV_ENOMEM;
    add_num(req, "ID", id);
    int rc = post(e, "/v3/lease/revoke", req, &ans, NULL);
    cJSON_Delete(ans); /* a lease already gone is fine */
    cJSON_Delete(req);
    return rc;
}

int gkv_etcd_put(gkv_etcd_t *e, const char *key, const void *value, size_t len, int64_t lease,
                 int only_if_new, int *created)
{
    cJSON *put = cJSON_CreateObject(), *ans = NULL, *req = put;
    int rc = GKV_ENOMEM;
    if (!put || add_b64(put, "key", key, strlen(key)) || add_b64(put, "value", value, len))
        goto out;
    if (lease)
        add_num(put, "lease", lease);
    if (!only_if_new) {
        if ((rc = post(e, "/v3/kv/put", put, &ans, NULL)) == 0)
            rc = refused(ans, "a put");
        if (created)
            *created = !rc;
        goto out;
    }
    /* A transaction: put only while the key's create_revision is 0 (it does not exist). */
    if (!(req = cJSON_CreateObject()))
        goto out;
    cJSON *cmp = cJSON_AddArrayToObject(req, "compare"), *c = cJSON_CreateObject();
    cJSON *succ = cJSON_AddArrayToObject(req, "success"), *op = cJSON_CreateObject();
    if (!cmp || !c || !succ || !op) {
        cJSON_Delete(c);
        cJSON_Delete(op);
        goto out;
    }
    cJSON_AddItemToArray(cmp, c);
    cJSON_AddItemToArray(succ, op);
    add_b64(c, "key", key, strlen(key));
    cJSON_AddStringToObject(c, "target", "CREATE");
    cJSON_AddStringToObject(c, "create_revision", "0");
    cJSON_AddItemToObject(op, "request_put", put);
    put = NULL; /* req owns it now */
    if ((rc = post(e, "/v3/kv/txn", req, &ans, NULL)) == 0 && !(rc = refused(ans, "a put")))
        *created = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ans, "succeeded"));
out:
    cJSON_Delete(ans);
    if (req != put)
        cJSON_Delete(req);
    cJSON_Delete(put);
    return rc;
}

int gkv_etcd_delete(gkv_etcd_t *e, const char *key)
{
    cJSON *req = cJSON_CreateObject(), *ans = NULL;
    int rc = GKV_ENOMEM;
    if (req && !add_b64(req, "key", key, strlen(key)) &&
        (rc = post(e, "/v3/kv/deleterange", req, &ans, NULL)) == 0)
        rc = refused(ans, "a delete");
    cJSON_Delete(ans);
    cJSON_Delete(req);
    return rc;
}

/* range_end of a prefix: the prefix with its last byte incremented (no 0xff bytes here). */
static int add_prefix(cJSON *req, const char *prefix)
{
    size_t n = strlen(prefix);
    char end[256];
    if (!n || n >= sizeof(end))
        return GKV_EINVAL;
    memcpy(end, prefix, n);
    end[n - 1]++;
    if (add_b64(req, "key", prefix, n) || add_b64(req, "range_end", end, n))
        return GKV_ENOMEM;
    return 0;
}

/* A kv of etcd's JSON into out (decoded). */
static int read_kv(const cJSON *kv, gkv_etcd_kv_t *out)
{
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(kv, "key");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(kv, "value");
    const char *ks = cJSON_IsString(k) ? k->valuestring : NULL;
    const char *vs = cJSON_IsString(v) ? v->valuestring : ""; /* an empty value is left out */
    if (!ks)
        return GKV_EPROTO;
    out->key = malloc(strlen(ks) / 4 * 3 + 1);
    out->value = malloc(strlen(vs) / 4 * 3 + 1);
    if (!out->key || !out->value)
        return GKV_ENOMEM;
    long kl = gkv_base64_decode(ks, out->key), vl = gkv_base64_decode(vs, out->value);
    if (kl < 0 || vl < 0)
        return GKV_EPROTO;
    out->key[kl] = 0;
    out->value[vl] = 0;
    out->key_len = (size_t)kl;
    out->value_len = (size_t)vl;
    out->lease = num(kv, "lease");
    out->mod_revision = num(kv, "mod_revision");
    return 0;
}

int gkv_etcd_range_prefix(gkv_etcd_t *e, const char *prefix, gkv_etcd_range_t *r)
{
    cJSON *req = cJSON_CreateObject(), *ans = NULL;
    memset(r, 0, sizeof(*r));
    int rc = req ? add_prefix(req, prefix) : GKV_ENOMEM;
    if (!rc && (rc = post(e, "/v3/kv/range", req, &ans, NULL)) == 0 &&
        !(rc = refused(ans, "a range"))) {
        const cJSON *kvs = cJSON_GetObjectItemCaseSensitive(ans, "kvs"), *kv;
        r->revision = num(cJSON_GetObjectItemCaseSensitive(ans, "header"), "revision");
        int n = cJSON_IsArray(kvs) ? cJSON_GetArraySize(kvs) : 0;
        if (n && !(r->kvs = calloc((size_t)n, sizeof(*r->kvs))))
            rc = GKV_ENOMEM;
        cJSON_ArrayForEach(kv, kvs)
        {
            if (rc || (rc = read_kv(kv, &r->kvs[r->n++])))
                break;
        }
    }
    if (rc)
        gkv_etcd_range_fini(r);
    cJSON_Delete(ans);
    cJSON_Delete(req);
    return rc;
}

void gkv_etcd_range_fini(gkv_etcd_range_t *r)
{
    for (size_t i = 0; i < r->n; i++) {
        free(r->kvs[i].key);
        free(r->kvs[i].value);
    }
    free(r->kvs);
    memset(r, 0, sizeof(*r));
}

typedef struct {
    int (*on_event)(void *arg);
    void *arg;
    int created, failed;
} watch_t;

/* One streamed message: {"result": {"created": true} | {"events": [...]} | {"canceled": ..}}. */
static int watch_line(void *arg, const char *line, size_t len)
{
    watch_t *w = arg;
    cJSON *msg = cJSON_ParseWithLength(line, len);
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(msg, "result");
    int stop = 0;
    if (!res) {
        w->failed = 1;
        stop = 1;
    } else if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "canceled"))) {
        w->failed = 1; /* compacted past from_rev, or refused: the caller ranges again */
        stop = 1;
    } else if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "created"))) {
        w->created = 1;
    } else if (cJSON_GetObjectItemCaseSensitive(res, "events")) {
        stop = w->on_event(w->arg);
    }
    cJSON_Delete(msg);
    return stop;
}

int gkv_etcd_watch(gkv_etcd_t *e, const char *prefix, int64_t from_rev,
                   int (*on_event)(void *arg), void *arg, volatile int *stop)
{
    cJSON *req = cJSON_CreateObject(), *create = cJSON_CreateObject();
    watch_t w = {on_event, arg, 0, 0};
    answer_t a = {.on_line = watch_line, .arg = &w, .stop = stop};
    int rc = req && create ? add_prefix(create, prefix) : GKV_ENOMEM;
    if (!rc) {
        add_num(create, "start_revision", from_rev);
        cJSON_AddItemToObject(req, "create_request", create);
        create = NULL;
        rc = post(e, "/v3/watch", req, NULL, &a);
        if (!rc && !a.stopped)
            rc = GKV_EUNAVAILABLE; /* the stream ended: etcd went away */
        if (!rc && w.failed)
            rc = GKV_EUNAVAILABLE;
    }
    free(a.buf);
    cJSON_Delete(create);
    cJSON_Delete(req);
    return rc;
}
