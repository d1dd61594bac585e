/* mapping.c: the zero-copy calls (MAP/RELEASE, CREATE/SEAL/ABORT) and the connection's lease
 * cache. docs/zero-copy.md tells the whole reuse model; libgpukv's part of it is here:
 *
 * The lease cache keeps, per connection, up to GKV_CACHE_SLOTS leases (gkv_client_set_lease_cache
 * changes the sizes) with their imports after the caller is done with them:
 * - read leases: of values up to GKV_CACHE_MAX_BYTES after gkv_unmap, so that the next MAP of the
 *   key offers the lease and the server names it again while the key still has that value (one
 *   round trip, no import); and of what gkv_seal published (any size), which the next seal of the
 *   key names as `spare`;
 * - spares: writable leases the server made of such a read lease once the value was replaced
 *   and nothing else held it (SEAL's reply says so). gkv_create of the same key and size takes
 *   one without a request and writes into memory this process has imported already; so a key
 *   rewritten in a loop costs one round trip (SEAL) and two values of memory.
 * At most GKV_CACHE_PER_KEY entries per key. The cache ends its leases (imports freed first,
 * then one RELEASE, which also discards spares) on eviction, when a MAP or CREATE of the key
 * fails, before any request that is not a mapping call (gkv__cache_flush), and at close.
 * gkv_abort ends a writable lease the same way (RELEASE discards an unsealed value). */
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "commands.h"
#include "error.h"
#include "hash.h"
#include "import.h"

/* A mapping and what the library keeps beside it. */
typedef struct mapping {
    gkv_mapping_t pub; /* first: the caller's pointer is this */
    gkv_import_t *imp;
    void *base; /* the value's first byte (ptr is base + offset) */
    uint8_t *meta;
    unsigned flags;  /* a spare taken by gkv_create: its NX/XX, sent with the SEAL */
    uint64_t ttl_ms; /* gkv_create's ttl, sent again with the SEAL (a spare had no CREATE) */
    struct mapping *prev, *next; /* the connection's live mappings (freed at close) */
    size_t klen;
    uint8_t key[]; /* the key it was mapped under */
} mapping_t;

/* The lease cache's index: one cached key's entries, oldest first. It makes a lookup by key
 * cost the same with 4096 cached leases as with 8 (a scan of the array compared every key). */
typedef struct cache_key {
    UT_hash_handle hh;
    int n;
    gkv_mapping_t *m[GKV_CACHE_PER_KEY];
    uint8_t key[]; /* the hash's key */
} cache_key_t;

static void link_mapping(gkv_client_t *c, mapping_t *m)
{
    m->prev = NULL;
    m->next = c->mappings;
    if (c->mappings)
        c->mappings->prev = m;
    c->mappings = m;
}

/* Gives m a copy of len bytes of metadata at p (none when len is 0). Returns 0 or GKV_ENOMEM
 * (m unchanged). */
static int set_meta(mapping_t *m, const void *p, size_t len)
{
    uint8_t *meta = NULL;
    if (len && !(meta = malloc(len)))
        return GKV_ENOMEM;
    if (len)
        memcpy(meta, p, len);
    free(m->meta);
    m->meta = meta;
    m->pub.meta = meta;
    m->pub.meta_len = len;
    return 0;
}

/* Points pub at the response's range of the value whose first byte is base. */
static int fill_mapping(gkv_client_t *c, mapping_t *m, void *base)
{
    const gkv_response_t *r = &c->resp;
    if (r->offset > r->size || r->length > r->size - r->offset)
        return gkv__break(c, GKV_EPROTO);
    int rc = set_meta(m, r->meta.p, r->has_meta ? r->meta.len : 0);
    if (rc)
        return rc;
    m->base = base;
    m->pub.ptr = r->length ? (uint8_t *)base + r->offset : NULL;
    m->pub.length = r->length;
    m->pub.offset = r->offset;
    m->pub.value_size = r->size;
    m->pub.gpu = r->gpu > 0 ? (int)r->gpu : 0; /* checked by gkv__import_get */
    m->pub.gpu_uuid = c->info.gpu_uuids[m->pub.gpu];
    m->pub.lease = r->lease;
    return 0;
}

/* Builds a mapping from a MAP or CREATE response. */
static int make_mapping(gkv_client_t *c, int writable, const void *key, size_t klen,
                        gkv_mapping_t **out)
{
    mapping_t *m = calloc(1, sizeof(*m) + klen);
    if (!m)
        return GKV_ENOMEM;
    memcpy(m->key, key, klen);
    m->klen = klen;
    void *base;
    int rc = gkv__import_get(c, &c->resp, &base, &m->imp, &m->pub.on_device, &m->pub.device);
    if (rc) {
        free(m);
        return rc;
    }
    if ((rc = fill_mapping(c, m, base))) {
        gkv__import_put(m->imp);
        free(m);
        return rc;
    }
    m->pub.writable = writable;
    link_mapping(c, m);
    *out = &m->pub;
    return 0;
}

/* Frees the import and the mapping (not the lease). Returns 0 or GKV_EIO. */
static int drop_mapping(gkv_client_t *c, gkv_mapping_t *pub)
{
    mapping_t *m = (mapping_t *)pub;
    if (m->prev)
        m->prev->next = m->next;
    else
        c->mappings = m->next;
    if (m->next)
        m->next->prev = m->prev;
    int rc = gkv__import_put(m->imp);
    free(m->meta);
    free(m);
    return rc;
}

static void index_clear(gkv_client_t *c);

void gkv__mappings_close(gkv_client_t *c)
{
    c->ncached = 0; /* closing the socket ends the leases */
    c->cached_bytes = 0;
    index_clear(c);
    while (c->mappings)
        drop_mapping(c, &c->mappings->pub);
    free(c->cached);
    c->cached = NULL;
    c->cache_cap = 0;
    gkv__import_detach(c);
}

/* Ends leases given by id with op (RELEASE, or ABORT of one CREATE lease) and waits for the
 * reply: for leases the server granted that this process cannot use. c->errmsg keeps saying why
 * they could not be used. */
static void send_lease_ends(gkv_client_t *c, unsigned op, const uint64_t *ids, size_t n)
{
    char why[sizeof(c->errmsg)];
    memcpy(why, c->errmsg, sizeof(why));
    gkv__begin(c, op);
    if (n == 1) {
        gkv_wr_uint(&c->wr, GKV_F_LEASE, ids[0]);
    } else {
        size_t pos = gkv_wr_array_begin(&c->wr, GKV_F_LEASES);
        for (size_t i = 0; i < n; i++)
            msgpack_pack_uint64(&c->wr.pk, ids[i]);
        gkv_wr_array_end(&c->wr, pos, (uint32_t)n);
    }
    if (gkv__send(c, NULL, 0) == 0)
        gkv__recv(c);
    memcpy(c->errmsg, why, sizeof(why));
}

/* Ends n mappings (read ones, or spares from the cache): frees their imports, then sends one
 * RELEASE without waiting for its reply (gkv__recv reads it before the next one: the server
 * handles requests in order, so the leases have ended before anything this client sends next). */
static int release(gkv_client_t *c, gkv_mapping_t **ms, size_t n)
{
    gkv__begin(c, GKV_OP_RELEASE);
    size_t pos = gkv_wr_array_begin(&c->wr, GKV_F_LEASES);
    int freed = 0;
    for (size_t i = 0; i < n; i++) {
        msgpack_pack_uint64(&c->wr.pk, ms[i]->lease);
        /* Our import goes first: the server may free the memory once the lease ends. */
        freed = drop_mapping(c, ms[i]) ? GKV_EIO : freed;
    }
    gkv_wr_array_end(&c->wr, pos, (uint32_t)n);
    int rc = gkv__send(c, NULL, 0);
    if (rc == 0 && c->deferred == 0)
        c->deferred_id = c->next_id;
    if (rc == 0 && ++c->deferred >= 64)
        rc = gkv__read_deferred(c); /* unread replies would fill the socket and stall both sides */
    return rc ? rc : freed;
}

/* The lease cache, oldest first, and its index. */

static cache_key_t *index_find(const gkv_client_t *c, const void *key, size_t klen)
{
    cache_key_t *k;
    HASH_FIND(hh, c->cache_index, key, klen, k);
    return k;
}

/* Adds cached mapping pub to the index as its key's newest entry (its key has fewer than
 * GKV_CACHE_PER_KEY). Returns 0 or GKV_ENOMEM (nothing added). */
static int index_add(gkv_client_t *c, gkv_mapping_t *pub)
{
    mapping_t *m = (mapping_t *)pub;
    cache_key_t *k = index_find(c, m->key, m->klen);
    if (!k) {
        if (!(k = calloc(1, sizeof(*k) + m->klen)))
            return GKV_ENOMEM;
        memcpy(k->key, m->key, m->klen);
        gkv__hash_oom = 0;
        HASH_ADD_KEYPTR(hh, c->cache_index, k->key, m->klen, k);
        if (gkv__hash_oom) {
            free(k);
            return GKV_ENOMEM;
        }
    }
    k->m[k->n++] = pub;
    return 0;
}

static void index_remove(gkv_client_t *c, gkv_mapping_t *pub)
{
    mapping_t *m = (mapping_t *)pub;
    cache_key_t *k = index_find(c, m->key, m->klen);
    if (!k)
        return;
    int i = 0;
    while (i < k->n && k->m[i] != pub)
        i++;
    if (i == k->n)
        return;
    memmove(&k->m[i], &k->m[i + 1], (size_t)(k->n - i - 1) * sizeof(k->m[0]));
    if (--k->n == 0) {
        HASH_DEL(c->cache_index, k);
        free(k);
    }
}

static void index_clear(gkv_client_t *c)
{
    cache_key_t *k, *tmp;
    HASH_ITER(hh, c->cache_index, k, tmp)
    {
        HASH_DEL(c->cache_index, k);
        free(k);
    }
}

/* The newest cached read lease of key (the likeliest to be on its value now), or NULL. */
static gkv_mapping_t *cached_read(const gkv_client_t *c, const void *key, size_t klen)
{
    const cache_key_t *k = index_find(c, key, klen);
    for (int i = k ? k->n - 1 : -1; i >= 0; i--)
        if (!k->m[i]->writable)
            return k->m[i];
    return NULL;
}

/* A cached spare of key for a value of size bytes on the GPU opts names (if any), or NULL. */
static gkv_mapping_t *cached_spare(const gkv_client_t *c, const void *key, size_t klen,
                                   uint64_t size, const gkv_set_opts_t *opts)
{
    int gpu = opts && opts->gpu > 0 ? opts->gpu - 1 : -1;
    const cache_key_t *k = index_find(c, key, klen);
    for (int i = 0; k && i < k->n; i++)
        if (k->m[i]->writable && k->m[i]->value_size == size && (gpu < 0 || k->m[i]->gpu == gpu))
            return k->m[i];
    return NULL;
}

/* The slot of cached mapping m, or -1. */
static int cached_slot(const gkv_client_t *c, const gkv_mapping_t *m)
{
    for (int i = 0; i < c->ncached; i++)
        if (c->cached[i] == m)
            return i;
    return -1;
}

static gkv_mapping_t *uncache(gkv_client_t *c, int i)
{
    gkv_mapping_t *m = c->cached[i];
    memmove(&c->cached[i], &c->cached[i + 1], (size_t)(c->ncached - i - 1) * sizeof(*c->cached));
    c->ncached--;
    c->cached_bytes -= m->value_size;
    index_remove(c, m);
    return m;
}

static uint32_t cache_slots(const gkv_client_t *c)
{
    return c->cache_set ? c->cache_slots : GKV_CACHE_SLOTS;
}

static uint64_t cache_max_value(const gkv_client_t *c)
{
    return c->cache_set ? c->cache_max_value : GKV_CACHE_MAX_BYTES;
}

/* Ends the cached lease in slot i. */
static int end_cached(gkv_client_t *c, int i)
{
    gkv_mapping_t *m = uncache(c, i);
    return release(c, &m, 1);
}

/* Ends every cached lease of key. */
static int end_cached_key(gkv_client_t *c, const void *key, size_t klen)
{
    int rc = 0, i;
    for (cache_key_t *k; (k = index_find(c, key, klen)) && (i = cached_slot(c, k->m[0])) >= 0;)
        rc = end_cached(c, i) ? GKV_EIO : rc;
    return rc;
}

int gkv__cache_flush(gkv_client_t *c)
{
    if (c->ncached == 0 || c->broken)
        return 0;
    int n = c->ncached;
    c->ncached = 0;
    c->cached_bytes = 0;
    index_clear(c);
    return release(c, c->cached, (size_t)n);
}

/* Leases to end together: one RELEASE for all of them (ends_flush). */
typedef struct ends {
    gkv_mapping_t **m;
    size_t n, cap;
} ends_t;

/* Adds m to e, or ends it at once when e cannot grow. Returns 0 or release's code. */
static int ends_add(gkv_client_t *c, ends_t *e, gkv_mapping_t *m)
{
    if (e->n == e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 16;
        gkv_mapping_t **a = realloc(e->m, cap * sizeof(*a));
        if (!a)
            return release(c, &m, 1);
        e->m = a;
        e->cap = cap;
    }
    e->m[e->n++] = m;
    return 0;
}

/* Ends what e holds (one RELEASE per GKV_MAX_BATCH leases) and empties it. Returns 0 or the
 * first code release gave. */
static int ends_flush(gkv_client_t *c, ends_t *e)
{
    int rc = 0;
    for (size_t i = 0; i < e->n; i += GKV_MAX_BATCH) {
        size_t n = e->n - i < GKV_MAX_BATCH ? e->n - i : GKV_MAX_BATCH;
        int r = release(c, e->m + i, n);
        rc = rc ? rc : r;
    }
    free(e->m);
    *e = (ends_t){0};
    return rc;
}

/* Takes the oldest cached leases out, into e, until at most keep remain and `more` bytes more
 * fit under the byte total. Returns 0 or ends_add's code. */
static int evict(gkv_client_t *c, uint32_t keep, uint64_t more, ends_t *e)
{
    int rc = 0;
    while (c->ncached && ((uint32_t)c->ncached > keep ||
                          (c->cache_max_bytes && c->cached_bytes + more > c->cache_max_bytes))) {
        int r = ends_add(c, e, uncache(c, 0));
        rc = rc ? rc : r;
    }
    return rc;
}

/* Caches pub as its key's newest; the key's oldest past GKV_CACHE_PER_KEY and the connection's
 * oldest past its slots or bytes (or pub itself, when the cache is off) go into e, to end. */
static int cache_into(gkv_client_t *c, gkv_mapping_t *pub, ends_t *e)
{
    mapping_t *m = (mapping_t *)pub;
    int rc = 0;
    if (c->cache_cap < (int)cache_slots(c)) {
        gkv_mapping_t **a = realloc(c->cached, cache_slots(c) * sizeof(*a));
        if (!a)
            return ends_add(c, e, pub);
        c->cached = a;
        c->cache_cap = (int)cache_slots(c);
    }
    const cache_key_t *k = index_find(c, m->key, m->klen);
    int oldest = k && k->n >= GKV_CACHE_PER_KEY ? cached_slot(c, k->m[0]) : -1;
    if (oldest >= 0)
        rc = ends_add(c, e, uncache(c, oldest));
    uint32_t slots = cache_slots(c);
    int erc = evict(c, slots ? slots - 1 : 0, pub->value_size, e); /* room for pub */
    rc = rc ? rc : erc;
    if (!cache_slots(c) ||
        (c->cache_max_bytes && pub->value_size > c->cache_max_bytes) || /* off, or too large */
        index_add(c, pub))
        return ends_add(c, e, pub);
    c->cached[c->ncached++] = pub;
    c->cached_bytes += pub->value_size;
    return rc;
}

/* cache_into, ending what it lets go at once. */
static int cache(gkv_client_t *c, gkv_mapping_t *pub)
{
    ends_t e = {0};
    int rc = cache_into(c, pub, &e);
    int frc = ends_flush(c, &e);
    return rc ? rc : frc;
}

int gkv_client_set_lease_cache(gkv_client_t *c, uint32_t slots, uint64_t max_value,
                               uint64_t max_bytes)
{
    if (!c || slots > GKV_CACHE_SLOTS_MAX)
        return GKV_EINVAL;
    c->cache_set = true;
    c->cache_slots = slots;
    c->cache_max_value = max_value;
    c->cache_max_bytes = max_bytes;
    ends_t e = {0};
    int rc = evict(c, slots, 0, &e);
    int frc = ends_flush(c, &e);
    return rc ? rc : frc;
}

/* The server renewed the lease of the cached mapping in slot ci (the reply just read): it is
 * the caller's mapping again, import and all, out of the cache. Returns 0, or fill_mapping's
 * code (it stays cached). */
static int take_renewed(gkv_client_t *c, int ci, gkv_mapping_t **out)
{
    mapping_t *m = (mapping_t *)c->cached[ci];
    int rc = fill_mapping(c, m, m->base);
    if (rc == 0)
        *out = uncache(c, ci);
    return rc;
}

/* GKV_ENOTSUP, with the daemon's reason (HELLO's zero_copy_why: "start gpukvd with
 * --host-zero-copy yes", "zero-copy needs a Unix socket ..."), when this connection was given
 * no memory to map; else 0. Checked before sending, so the caller reads why, not protocol. */
static int need_zero_copy(gkv_client_t *c)
{
    if (c->nshared)
        return 0;
    snprintf(c->errmsg, sizeof(c->errmsg), "no zero-copy on this connection: %s",
             c->info.zero_copy_why[0] ? c->info.zero_copy_why : "the server did not offer it");
    return GKV_ENOTSUP;
}

int gkv_map(gkv_client_t *c, const void *key, size_t klen, const gkv_range_t *range,
            gkv_mapping_t **out)
{
    int rc = gkv__check_key(c, key, klen);
    if (rc || (rc = need_zero_copy(c)))
        return rc;
    gkv_mapping_t *cm = cached_read(c, key, klen);
    int ci = cm ? cached_slot(c, cm) : -1;
    gkv__begin(c, GKV_OP_MAP);
    gkv__put_key_range(c, key, klen, range);
    if (ci >= 0)
        gkv_wr_uint(&c->wr, GKV_F_LEASE, c->cached[ci]->lease);
    if ((rc = gkv__send(c, NULL, 0)) || (rc = gkv__recv(c))) {
        if (ci >= 0 && !c->broken)
            end_cached(c, ci); /* e.g. the key is gone: its old value need not stay */
        return rc;
    }
    if (ci >= 0 && c->resp.lease == c->cached[ci]->lease)
        return take_renewed(c, ci, out);
    if ((rc = make_mapping(c, 0, key, klen, out)) && !c->broken) {
        uint64_t lease = c->resp.lease;
        send_lease_ends(c, GKV_OP_RELEASE, &lease, 1);
    }
    if (ci >= 0) {
        int urc = end_cached(c, ci);
        rc = rc ? rc : urc;
    }
    return rc;
}

/* Sends n MAP requests in one buffer and one send, each offering the cached lease offered[i]
 * (or none); the server answers them in order. Returns 0 with *first the first request's id, or
 * a code (nothing sent). */
static int send_maps(gkv_client_t *c, const gkv_map_item_t *items, size_t n,
                     gkv_mapping_t *const *offered, uint64_t *first)
{
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (i == 0) {
            gkv__begin(c, GKV_OP_MAP);
            *first = c->next_id;
        } else {
            gkv__begin_more(c, GKV_OP_MAP);
        }
        gkv__put_key_range(c, items[i].key, items[i].klen, &items[i].range);
        if (offered[i])
            gkv_wr_uint(&c->wr, GKV_F_LEASE, offered[i]->lease);
        if (i + 1 < n)
            rc = gkv__end_frame(c);
    }
    return rc ? rc : gkv__send(c, NULL, 0);
}

int gkv_map_many(gkv_client_t *c, gkv_map_item_t *items, size_t n)
{
    if (!items || n == 0 || n > GKV_MAX_BATCH)
        return GKV_EINVAL;
    int zc = need_zero_copy(c); /* then every item says why, as the server would have */
    for (size_t i = 0; i < n; i++) {
        int rc = gkv__check_key(c, items[i].key, items[i].klen);
        if (rc)
            return rc;
        items[i].status = zc;
        items[i].mapping = NULL;
    }
    if (zc)
        return 0;
    uint64_t *refused = malloc(n * sizeof(*refused));
    gkv_mapping_t **offered = calloc(n, sizeof(*offered));
    if (!refused || !offered) {
        free(refused);
        free(offered);
        return GKV_ENOMEM;
    }
    /* Each key's cached read lease, offered for renewal (once: a key asked twice renews once). */
    for (size_t i = 0; i < n; i++) {
        if (!(offered[i] = cached_read(c, items[i].key, items[i].klen)))
            continue;
        for (size_t j = 0; j < i && offered[i]; j++)
            if (offered[j] == offered[i])
                offered[i] = NULL;
    }
    size_t nrefused = 0;
    uint64_t first = 0;
    int rc = send_maps(c, items, n, offered, &first);
    for (size_t i = 0; i < n && rc == 0; i++) {
        c->next_id = first + i; /* the id this reply carries */
        int st = gkv__recv(c);
        if (c->broken) {
            rc = st ? st : GKV_ECLOSED;
            break;
        }
        if (st == 0 && offered[i] && c->resp.lease == offered[i]->lease) {
            if ((st = take_renewed(c, cached_slot(c, offered[i]), &items[i].mapping)) == 0)
                offered[i] = NULL;
            items[i].status = st;
            continue;
        }
        if (st == 0 &&
            (st = make_mapping(c, 0, items[i].key, items[i].klen, &items[i].mapping)) != 0) {
            if (c->broken) {
                rc = st;
                break;
            }
            /* Granted, but this process cannot use it: ended once every reply is read. */
            refused[nrefused++] = c->resp.lease;
        }
        items[i].status = st;
    }
    if (first)
        c->next_id = first + n - 1;
    if (rc) {
        /* The connection is gone, and its leases with it: let go of the imports. */
        for (size_t i = 0; i < n; i++) {
            if (items[i].mapping)
                drop_mapping(c, items[i].mapping);
            items[i].mapping = NULL;
            items[i].status = rc;
        }
    } else if (nrefused) {
        send_lease_ends(c, GKV_OP_RELEASE, refused, nrefused);
    }
    /* Offered and not renewed (the key has another value now, or is gone): ended, with one
     * RELEASE. */
    ends_t e = {0};
    for (size_t i = 0; i < n && rc == 0 && !c->broken; i++) {
        int ci = offered[i] ? cached_slot(c, offered[i]) : -1;
        if (ci >= 0)
            (void)ends_add(c, &e, uncache(c, ci));
    }
    (void)ends_flush(c, &e);
    free(refused);
    free(offered);
    return rc;
}

/* 0 when ms holds 1..GKV_MAX_BATCH read mappings, else GKV_EINVAL. */
static int check_reads(gkv_mapping_t *const *ms, size_t n)
{
    if (n == 0 || n > GKV_MAX_BATCH)
        return GKV_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!ms[i] || ms[i]->writable)
            return GKV_EINVAL;
    return 0;
}

int gkv_unmap_batch(gkv_client_t *c, gkv_mapping_t **ms, size_t n)
{
    int rc = check_reads(ms, n);
    return rc ? rc : release(c, ms, n);
}

/* Whether gkv_unmap keeps read mapping m in the lease cache. */
static bool cacheable(const gkv_client_t *c, const gkv_mapping_t *m)
{
    return cache_slots(c) && m->value_size <= cache_max_value(c) && !c->broken;
}

int gkv_unmap(gkv_client_t *c, gkv_mapping_t *m)
{
    if (!m)
        return 0;
    if (m->writable)
        return GKV_EINVAL;
    return cacheable(c, m) ? cache(c, m) : release(c, &m, 1);
}

int gkv_unmap_many(gkv_client_t *c, gkv_mapping_t **ms, size_t n)
{
    int rc = check_reads(ms, n);
    if (rc)
        return rc;
    /* What the cache does not take, and what it lets go to take the others, end together. */
    ends_t e = {0};
    for (size_t i = 0; i < n; i++) {
        int r = cacheable(c, ms[i]) ? cache_into(c, ms[i], &e) : ends_add(c, &e, ms[i]);
        rc = rc ? rc : r;
    }
    int frc = ends_flush(c, &e);
    return rc ? rc : frc;
}

/* Takes the cached spare in slot i for a value of size bytes with opts (no request: the server
 * made it writable and this connection's alone). */
static int take_spare(gkv_client_t *c, int i, uint64_t size, const gkv_set_opts_t *opts,
                      gkv_mapping_t **out)
{
    mapping_t *m = (mapping_t *)c->cached[i];
    int rc = set_meta(m, opts ? opts->meta : NULL, opts ? opts->meta_len : 0);
    if (rc)
        return rc;
    uncache(c, i);
    m->pub.ptr = m->base;
    m->pub.offset = 0;
    m->pub.length = size;
    m->flags = opts ? opts->flags : 0;
    m->ttl_ms = opts ? opts->ttl_ms : 0;
    *out = &m->pub;
    return 0;
}

int gkv_create(gkv_client_t *c, const void *key, size_t klen, uint64_t size,
               const gkv_set_opts_t *opts, gkv_mapping_t **out)
{
    int rc = gkv__check_key(c, key, klen);
    if (rc)
        return rc;
    if (opts && opts->meta_len > GKV_MAX_META)
        return GKV_ETOOBIG;
    if (opts && (opts->flags & ~(unsigned)(GKV_SET_NX | GKV_SET_XX)))
        return GKV_EINVAL;
    if ((rc = need_zero_copy(c)))
        return rc;
    gkv_mapping_t *spare = size ? cached_spare(c, key, klen, size, opts) : NULL;
    int si = spare ? cached_slot(c, spare) : -1;
    if (si >= 0)
        return take_spare(c, si, size, opts, out);
    gkv__begin(c, GKV_OP_CREATE);
    gkv_wr_bin(&c->wr, GKV_F_KEY, key, klen);
    gkv_wr_uint(&c->wr, GKV_F_SIZE, size);
    gkv__put_set_opts(c, opts);
    if ((rc = gkv__send(c, NULL, 0)) || (rc = gkv__recv(c))) {
        if (!c->broken)
            end_cached_key(c, key, klen); /* e.g. OOM: the key's cached memory goes back */
        return rc;
    }
    if ((rc = make_mapping(c, 1, key, klen, out)) && !c->broken) {
        uint64_t lease = c->resp.lease;
        send_lease_ends(c, GKV_OP_ABORT, &lease, 1);
    }
    if (rc == 0)
        ((mapping_t *)*out)->ttl_ms = opts ? opts->ttl_ms : 0;
    return rc;
}

int gkv_seal(gkv_client_t *c, gkv_mapping_t *pub)
{
    mapping_t *m = (mapping_t *)pub;
    if (!pub || !pub->writable)
        return GKV_EINVAL;
    if (c->broken) {
        drop_mapping(c, pub); /* the connection's end ended the lease */
        return GKV_ECLOSED;
    }
    /* The lease is kept and cached with the import: as a read lease on the sealed value, or
     * (NX/XX refused it) as a spare on the discarded one; the server frees nothing under it.
     * The key's newest cached read lease is most likely on the value this seal replaces: the
     * server makes it a spare when nothing else holds it. */
    gkv_mapping_t *cm = cached_read(c, m->key, m->klen);
    uint64_t asked = cm ? cm->lease : 0;
    gkv__begin(c, GKV_OP_SEAL);
    gkv_wr_uint(&c->wr, GKV_F_LEASE, pub->lease);
    gkv_wr_uint(&c->wr, GKV_F_FLAGS, GKV_SEAL_KEEP | m->flags);
    if (pub->meta_len)
        gkv_wr_bin(&c->wr, GKV_F_META, pub->meta, (uint32_t)pub->meta_len);
    if (m->ttl_ms)
        gkv_wr_uint(&c->wr, GKV_F_TTL, m->ttl_ms);
    if (cm)
        gkv_wr_uint(&c->wr, GKV_F_SPARE, asked);
    int rc = gkv__send(c, NULL, 0);
    if (rc == 0)
        rc = gkv__recv(c);
    if (c->broken || rc == GKV_ENOLEASE) {
        int drc = drop_mapping(c, pub); /* no lease is held for it */
        return rc ? rc : drc;
    }
    if (rc && rc != GKV_EEXISTS && rc != GKV_ENOTFOUND) {
        release(c, &pub, 1); /* refused (checked here first, so unexpected): end the lease */
        return rc;
    }
    if (rc == 0 && cm && c->resp.spare == asked) {
        cm->writable = 1;
        set_meta((mapping_t *)cm, NULL, 0);
    }
    m->flags = 0;
    m->ttl_ms = 0;
    pub->writable = rc != 0; /* NX/XX: the discarded value is a spare now */
    int crc = cache(c, pub);
    return rc ? rc : crc;
}

int gkv_abort(gkv_client_t *c, gkv_mapping_t *pub)
{
    if (!pub || !pub->writable)
        return GKV_EINVAL;
    if (c->broken) {
        drop_mapping(c, pub);
        return GKV_ECLOSED;
    }
    return release(c, &pub, 1); /* RELEASE of a writable lease discards its value */
}
