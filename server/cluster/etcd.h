/* etcd.h: the few calls of etcd's v3 API gpukvd needs (leases, a guarded put, prefix ranges,
 * deletes, a watch), over its JSON gateway (`POST /v3/...`) with libcurl. Every call blocks for
 * at most the client's timeout and tries each endpoint in turn, starting with the one that last
 * answered; it is meant for the membership thread, never the loop. Keys and values are bytes
 * (base64 on the wire, done here); etcd's 64-bit numbers travel as JSON strings. */
#ifndef GKV_CLUSTER_ETCD_H
#define GKV_CLUSTER_ETCD_H

#include <stddef.h>
#include <stdint.h>

#define GKV_ETCD_MAX_ENDPOINTS 8

typedef struct gkv_etcd gkv_etcd_t;

/* One key-value pair of a range. key and value are NUL-terminated (for the JSON member records
 * stored under them), owned by the range. */
typedef struct {
    char *key, *value;
    size_t key_len, value_len;
    int64_t lease, mod_revision;
} gkv_etcd_kv_t;

typedef struct {
    gkv_etcd_kv_t *kvs;
    size_t n;
    int64_t revision; /* the store's revision the range was read at */
} gkv_etcd_range_t;

/* A client for endpoints ("host:port,host:port", borrowed; copied), each call limited to
 * timeout_ms. Returns the client (free with gkv_etcd_free) or NULL on a bad list (at most
 * GKV_ETCD_MAX_ENDPOINTS) or no memory. */
gkv_etcd_t *gkv_etcd_alloc(const char *endpoints, long timeout_ms);
void gkv_etcd_free(gkv_etcd_t *e);

/* A lease of ttl seconds: *id gets its id. 0, or GKV_EUNAVAILABLE when no endpoint answered,
 * GKV_EPROTO on an answer that is not what etcd sends. */
int gkv_etcd_grant(gkv_etcd_t *e, int64_t ttl, int64_t *id);
/* Keeps lease id alive: *ttl gets what is left of it, 0 when etcd no longer has it. */
int gkv_etcd_keepalive(gkv_etcd_t *e, int64_t id, int64_t *ttl);
int gkv_etcd_revoke(gkv_etcd_t *e, int64_t id);
/* Puts value under key attached to lease (0: none). only_if_new: only if key does not exist
 * (*created says whether it was written); else always (created may be NULL). */
int gkv_etcd_put(gkv_etcd_t *e, const char *key, const void *value, size_t len, int64_t lease,
                 int only_if_new, int *created);
int gkv_etcd_delete(gkv_etcd_t *e, const char *key);
/* Every pair whose key starts with prefix (borrowed), into *r (free with gkv_etcd_range_fini). */
int gkv_etcd_range_prefix(gkv_etcd_t *e, const char *prefix, gkv_etcd_range_t *r);
void gkv_etcd_range_fini(gkv_etcd_range_t *r);

/* Watches prefix from revision from_rev on, calling on_event(arg) for each batch of events
 * etcd sends, until on_event returns non-zero, the stream breaks, or *stop (read between
 * events and at least every second) becomes non-zero. Returns 0 when stopped by on_event or
 * *stop, else like the calls above (GKV_EUNAVAILABLE: the stream broke or never began). */
int gkv_etcd_watch(gkv_etcd_t *e, const char *prefix, int64_t from_rev,
                   int (*on_event)(void *arg), void *arg, volatile int *stop);

/* Base64 (RFC 4648, padded), as etcd's JSON carries bytes. encode writes 4*ceil(len/3)+1 bytes
 * (NUL-terminated) into out; decode returns the decoded length or -1 on bad input, writing at
 * most 3*strlen(in)/4 bytes. */
void gkv_base64_encode(const void *in, size_t len, char *out);
long gkv_base64_decode(const char *in, void *out);

#endif
