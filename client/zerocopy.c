/* zerocopy.c: MAP/RELEASE and CREATE/SEAL/ABORT, and the device copy helpers built on them. */
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "commands.h"
#include "error.h"
#include "zc.h"

#define DEV_CHUNK (8u << 20)

/* A mapping and what the library keeps beside it. */
typedef struct {
    gkv_mapping_t pub; /* first: the caller's pointer is this */
    gkv_zc_import_t *imp;
    void *base; /* the value's first byte (ptr is base + offset) */
    uint8_t *meta;
    bool own;         /* parked: the server said no one else holds it (a spare, ours alone) */
    bool spare_write; /* writable: an own spare taken by gkv_create without a round trip;
                         SEAL of its MAP lease publishes it */
    size_t klen;
    uint8_t key[]; /* for parking: the key it was mapped under */
} mapping_t;

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
    m->pub.gpu_uuid = c->info.gpu_uuid;
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
    int rc = gkv__zc_import(c, &c->resp, &base, &m->imp, &m->pub.on_device, &m->pub.device);
    if (rc) {
        free(m);
        return rc;
    }
    if ((rc = fill_mapping(c, m, base))) {
        gkv__zc_unimport(c, m->imp);
        free(m);
        return rc;
    }
    m->pub.writable = writable;
    *out = &m->pub;
    return 0;
}

/* Frees the import and the mapping (not the lease). Returns 0 or GKV_EIO. */
static int drop_mapping(gkv_client_t *c, gkv_mapping_t *pub)
{
    mapping_t *m = (mapping_t *)pub;
    int rc = gkv__zc_unimport(c, m->imp);
    free(m->meta);
    free(m);
    return rc;
}

/* Leases the server granted but this process cannot use are given back at once with op
 * (RELEASE, or ABORT of one CREATE lease), waiting for the reply; c->errmsg keeps saying why
 * they could not be used. */
static void give_back(gkv_client_t *c, unsigned op, const uint64_t *ids, size_t n)
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

/* The lease of the response just read, given back with op. */
static void give_back_granted(gkv_client_t *c, unsigned op)
{
    uint64_t lease = c->resp.lease;
    give_back(c, op, &lease, 1);
}

/* Ends n read mappings: frees their imports, then sends one RELEASE without waiting for its
 * reply (gkv__recv reads it before the next one: the server handles requests in order, so the
 * leases have ended before anything this client sends next). */
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
        rc = gkv__settle(c); /* unread replies would fill the socket and stall both sides */
    return rc ? rc : freed;
}

/* Parking: gkv_unmap keeps the lease (and the import) of a small value, so that mapping the
 * same key again costs one round trip and no import: the next MAP of the key offers the lease,
 * and the server names it again when the key still has that value. gkv_seal keeps the lease
 * of what it sealed (any size) the same way; once a later seal replaces that value, the next
 * CREATE of the key offers it, and the server writes the new value into the same memory, which
 * this process has imported already (double buffering: a key's value and one spare). When the
 * SEAL reply says the spare is this connection's alone (field spare), the next gkv_create of
 * the key takes it without a round trip and gkv_seal publishes it: one round trip a write. A
 * parked lease ends when it is evicted (GKV_PARK_SLOTS per connection, GKV_PARK_PER_KEY per
 * key), when a MAP of its key finds another value or fails, when a CREATE of its key fails,
 * before any request other than MAP, RELEASE, CREATE, SEAL and ABORT, and at close. */
static bool parked_is(const gkv_client_t *c, int i, const void *key, size_t klen)
{
    const mapping_t *m = (const mapping_t *)c->parked[i];
    return m->klen == klen && memcmp(m->key, key, klen) == 0;
}

/* The newest parked lease of key that is not known to be a spare (the likeliest to be on its
 * value now), or -1. */
static int parked_newest(const gkv_client_t *c, const void *key, size_t klen)
{
    for (int i = c->nparked - 1; i >= 0; i--)
        if (parked_is(c, i, key, klen) && !((const mapping_t *)c->parked[i])->own)
            return i;
    return -1;
}

/* The oldest parked lease of key on a value of `size` bytes (the likeliest to be replaced
 * already), only among those known to be spares when own_only, or -1. */
static int parked_sized(const gkv_client_t *c, const void *key, size_t klen, uint64_t size,
                        bool own_only)
{
    for (int i = 0; i < c->nparked; i++)
        if (parked_is(c, i, key, klen) && c->parked[i]->value_size == size &&
            (!own_only || ((const mapping_t *)c->parked[i])->own))
            return i;
    return -1;
}

static gkv_mapping_t *unpark(gkv_client_t *c, int i)
{
    gkv_mapping_t *m = c->parked[i];
    memmove(&c->parked[i], &c->parked[i + 1], (size_t)(c->nparked - i - 1) * sizeof(*c->parked));
    c->nparked--;
    return m;
}

/* Ends the parked lease in slot i. */
static int release_parked_at(gkv_client_t *c, int i)
{
    gkv_mapping_t *m = unpark(c, i);
    return release(c, &m, 1);
}

/* Ends every parked lease of key. */
static int release_parked_key(gkv_client_t *c, const void *key, size_t klen)
{
    int rc = 0;
    for (int i = c->nparked - 1; i >= 0; i--)
        if (parked_is(c, i, key, klen))
            rc = release_parked_at(c, i) ? GKV_EIO : rc;
    return rc;
}

int gkv__release_parked(gkv_client_t *c, bool send)
{
    if (c->nparked == 0)
        return 0;
    int n = c->nparked;
    c->nparked = 0;
    if (send)
        return release(c, c->parked, (size_t)n);
    int rc = 0;
    for (int i = 0; i < n; i++)
        rc = drop_mapping(c, c->parked[i]) ? GKV_EIO : rc;
    return rc;
}

/* Parks pub as its key's newest, ending the key's oldest past GKV_PARK_PER_KEY and the
 * connection's oldest past GKV_PARK_SLOTS. */
static int park(gkv_client_t *c, gkv_mapping_t *pub)
{
    mapping_t *m = (mapping_t *)pub;
    int rc = 0, same = 0, oldest = -1;
    for (int i = 0; i < c->nparked; i++)
        if (parked_is(c, i, m->key, m->klen) && same++ == 0)
            oldest = i;
    if (same >= GKV_PARK_PER_KEY)
        rc = release_parked_at(c, oldest);
    else if (c->nparked == GKV_PARK_SLOTS)
        rc = release_parked_at(c, 0);
    c->parked[c->nparked++] = pub;
    return rc;
}

int gkv_map(gkv_client_t *c, const void *key, size_t klen, const gkv_range_t *range,
            gkv_mapping_t **out)
{
    int rc = gkv__check_key(c, key, klen);
    if (rc)
        return rc;
    int pi = parked_newest(c, key, klen);
    gkv__begin(c, GKV_OP_MAP);
    gkv__put_key_range(c, key, klen, range);
    if (pi >= 0)
        gkv_wr_uint(&c->wr, GKV_F_LEASE, c->parked[pi]->lease);
    if ((rc = gkv__send(c, NULL, 0)) || (rc = gkv__recv(c))) {
        if (pi >= 0 && !c->broken)
            release_parked_at(c, pi); /* e.g. the key is gone: its old value need not stay */
        return rc;
    }
    if (pi >= 0 && c->resp.lease == c->parked[pi]->lease) {
        /* Renewed: the parked mapping is this one, import and all. */
        mapping_t *m = (mapping_t *)c->parked[pi];
        if ((rc = fill_mapping(c, m, m->base)))
            return rc;
        *out = unpark(c, pi);
        return 0;
    }
    if ((rc = make_mapping(c, 0, key, klen, out)) && !c->broken)
        give_back_granted(c, GKV_OP_RELEASE);
    if (pi >= 0) {
        int urc = release_parked_at(c, pi);
        rc = rc ? rc : urc;
    }
    return rc;
}

int gkv_map_many(gkv_client_t *c, gkv_map_item_t *items, size_t n)
{
    if (!items || n == 0 || n > GKV_MAX_BATCH)
        return GKV_EINVAL;
    for (size_t i = 0; i < n; i++) {
        int rc = gkv__check_key(c, items[i].key, items[i].klen);
        if (rc)
            return rc;
        items[i].status = 0;
        items[i].mapping = NULL;
    }
    uint64_t *refused = malloc(n * sizeof(*refused));
    if (!refused)
        return GKV_ENOMEM;
    size_t nrefused = 0;
    /* Every request in one buffer and one send; the server answers them in order. */
    uint64_t first = 0;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (i == 0) {
            gkv__begin(c, GKV_OP_MAP);
            first = c->next_id;
        } else {
            gkv__begin_more(c, GKV_OP_MAP);
        }
        gkv__put_key_range(c, items[i].key, items[i].klen, &items[i].range);
        if (i + 1 < n)
            rc = gkv__end_frame(c);
    }
    if (rc || (rc = gkv__send(c, NULL, 0))) {
        free(refused);
        return rc;
    }
    for (size_t i = 0; i < n; i++) {
        c->next_id = first + i; /* the id this reply carries */
        int st = gkv__recv(c);
        if (c->broken) {
            rc = st ? st : GKV_ECLOSED;
            break;
        }
        if (st < 0) {
            items[i].status = st;
            continue;
        }
        st = make_mapping(c, 0, items[i].key, items[i].klen, &items[i].mapping);
        if (st) {
            items[i].status = st;
            if (c->broken) {
                rc = st;
                break;
            }
            /* Granted, but this process cannot use it: ended once every reply is read. */
            refused[nrefused++] = c->resp.lease;
        }
    }
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
        give_back(c, GKV_OP_RELEASE, refused, nrefused);
    }
    free(refused);
    return rc;
}

int gkv_unmap_batch(gkv_client_t *c, gkv_mapping_t **ms, size_t n)
{
    if (n == 0 || n > GKV_MAX_BATCH)
        return GKV_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!ms[i] || ms[i]->writable)
            return GKV_EINVAL;
    return release(c, ms, n);
}

int gkv_unmap(gkv_client_t *c, gkv_mapping_t *m)
{
    if (!m)
        return 0;
    if (m->writable)
        return GKV_EINVAL;
    if (m->value_size <= GKV_PARK_MAX_BYTES && !c->broken)
        return park(c, m);
    return release(c, &m, 1);
}

/* Sets a spare taken for writing to show the value it will be: size bytes, opts' metadata. */
static int take_spare(gkv_client_t *c, int i, uint64_t size, const gkv_set_opts_t *opts,
                      gkv_mapping_t **out)
{
    mapping_t *m = (mapping_t *)c->parked[i];
    int rc = set_meta(m, opts ? opts->meta : NULL, opts ? opts->meta_len : 0);
    if (rc)
        return rc;
    unpark(c, i);
    m->pub.ptr = m->base;
    m->pub.offset = 0;
    m->pub.length = size;
    m->pub.writable = 1;
    m->own = false;
    m->spare_write = true;
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
    /* A spare of our own takes the value at once (NX/XX are for the server to check now:
     * CREATE, offering the spare). */
    int oi = size && !(opts && opts->flags) ? parked_sized(c, key, klen, size, true) : -1;
    if (oi >= 0)
        return take_spare(c, oi, size, opts, out);
    int si = size ? parked_sized(c, key, klen, size, false) : -1;
    gkv__begin(c, GKV_OP_CREATE);
    gkv_wr_bin(&c->wr, GKV_F_KEY, key, klen);
    gkv_wr_uint(&c->wr, GKV_F_SIZE, size);
    gkv__put_set_opts(c, opts);
    if (si >= 0)
        gkv_wr_uint(&c->wr, GKV_F_LEASE, c->parked[si]->lease);
    if ((rc = gkv__send(c, NULL, 0)) || (rc = gkv__recv(c))) {
        if (!c->broken)
            release_parked_key(c, key, klen); /* e.g. OOM: the spares' memory goes back */
        return rc;
    }
    if (si >= 0 && c->resp.lease == c->parked[si]->lease) {
        /* Reused: the new value lives in the spare's memory, imported already. */
        mapping_t *m = (mapping_t *)c->parked[si];
        if ((rc = fill_mapping(c, m, m->base)))
            return rc;
        m->pub.writable = 1;
        m->own = false;
        *out = unpark(c, si);
        return 0;
    }
    if ((rc = make_mapping(c, 1, key, klen, out)) && !c->broken)
        give_back_granted(c, GKV_OP_ABORT);
    return rc;
}

/* Frees a created mapping's import, then ends its lease with op (ABORT, or SEAL without
 * keeping the lease). */
static int end_create(gkv_client_t *c, gkv_mapping_t *m, unsigned op)
{
    uint64_t lease = m->lease;
    if (drop_mapping(c, m)) {
        /* Our import may still be alive: the value must not be published or freed. */
        return GKV_EIO;
    }
    gkv__begin(c, op);
    gkv_wr_uint(&c->wr, GKV_F_LEASE, lease);
    int rc = gkv__send(c, NULL, 0);
    return rc ? rc : gkv__recv(c);
}

int gkv_seal(gkv_client_t *c, gkv_mapping_t *pub)
{
    mapping_t *m = (mapping_t *)pub;
    if (!pub || !pub->writable)
        return GKV_EINVAL;
    if (c->broken && m->spare_write) {
        drop_mapping(c, pub);
        return GKV_ECLOSED;
    }
    if (c->broken)
        return end_create(c, pub, GKV_OP_SEAL);
    /* The lease is kept (as a MAP lease on the sealed value) and parked with the import: the
     * server frees nothing under it, whether the seal succeeds or not. The key's newest parked
     * lease is most likely on the value this seal replaces: ask whether it is a spare then. */
    int pi = parked_newest(c, m->key, m->klen);
    uint64_t asked = pi >= 0 ? c->parked[pi]->lease : 0;
    gkv__begin(c, GKV_OP_SEAL);
    gkv_wr_uint(&c->wr, GKV_F_LEASE, pub->lease);
    gkv_wr_uint(&c->wr, GKV_F_FLAGS, GKV_SEAL_KEEP);
    if (m->spare_write && pub->meta_len)
        gkv_wr_bin(&c->wr, GKV_F_META, pub->meta, (uint32_t)pub->meta_len);
    if (pi >= 0)
        gkv_wr_uint(&c->wr, GKV_F_SPARE, asked);
    int rc = gkv__send(c, NULL, 0);
    if (rc == 0)
        rc = gkv__recv(c);
    if (c->broken || rc == GKV_ENOLEASE || (rc == GKV_EINVAL && !m->spare_write)) {
        /* No lease is held for it (or none can be named again): let go of the import. */
        int drc = drop_mapping(c, pub);
        return rc ? rc : drc;
    }
    if (rc == 0 && pi >= 0 && c->resp.spare == asked)
        ((mapping_t *)c->parked[pi])->own = true;
    pub->writable = 0;
    m->spare_write = false;
    int prc = park(c, pub);
    return rc ? rc : prc;
}

int gkv_abort(gkv_client_t *c, gkv_mapping_t *pub)
{
    mapping_t *m = (mapping_t *)pub;
    if (!pub || !pub->writable)
        return GKV_EINVAL;
    if (m->spare_write) {
        /* The server never knew: it is a spare of ours again. */
        pub->writable = 0;
        m->spare_write = false;
        m->own = true;
        return park(c, pub);
    }
    return end_create(c, pub, GKV_OP_ABORT);
}

int gkv_set_from_device(gkv_client_t *c, const void *key, size_t klen, const void *dptr,
                        size_t len, const gkv_set_opts_t *opts)
{
    gkv_mapping_t *m;
    if (c->zc_fd >= 0) {
        int rc = gkv_create(c, key, klen, len, opts, &m);
        if (rc)
            return rc;
        if (len && (rc = gkv__cuda_copy(m->ptr, dptr, len))) {
            gkv_abort(c, m);
            return rc;
        }
        return gkv_seal(c, m);
    }
    /* Remote: through host memory, a chunk at a time. */
    uint8_t *buf = malloc(len < DEV_CHUNK ? (len ? len : 1) : DEV_CHUNK);
    if (!buf)
        return GKV_ENOMEM;
    int rc = len ? gkv__cuda_copy(buf, dptr, len < DEV_CHUNK ? len : DEV_CHUNK) : 0;
    if (rc) {
        free(buf);
        return rc;
    }
    gkv__begin(c, GKV_OP_SET);
    gkv_wr_bin(&c->wr, GKV_F_KEY, key, klen);
    gkv_wr_uint(&c->wr, GKV_F_PAYLOAD, len);
    gkv__put_set_opts(c, opts);
    rc = gkv__send_frame(c);
    for (size_t off = 0; rc == 0 && off < len; off += DEV_CHUNK) {
        size_t n = len - off < DEV_CHUNK ? len - off : DEV_CHUNK;
        if (off && gkv__cuda_copy(buf, (const uint8_t *)dptr + off, n)) {
            free(buf);
            return gkv__break(c, GKV_EIO); /* the payload cannot be completed */
        }
        rc = gkv__send_raw(c, buf, n);
    }
    free(buf);
    return rc ? rc : gkv__recv(c);
}

int gkv_get_to_device(gkv_client_t *c, const void *key, size_t klen, const gkv_range_t *range,
                      void *dptr, size_t cap, gkv_value_info_t *info)
{
    int rc;
    if (c->zc_fd >= 0) {
        gkv_mapping_t *m;
        if ((rc = gkv_map(c, key, klen, range, &m)))
            return rc;
        if (info) {
            info->size = m->value_size;
            info->offset = m->offset;
            info->length = m->length;
            info->meta = NULL;
            info->meta_len = 0;
        }
        rc = m->length > cap ? GKV_ENOSPACE
                             : (m->length ? gkv__cuda_copy(dptr, m->ptr, m->length) : 0);
        int urc = gkv_unmap(c, m);
        return rc ? rc : urc;
    }
    void *host;
    gkv_value_info_t vi;
    if ((rc = gkv_get_alloc(c, key, klen, range, &host, &vi)))
        return rc;
    if (info)
        *info = vi;
    rc = vi.length > cap ? GKV_ENOSPACE : (vi.length ? gkv__cuda_copy(dptr, host, vi.length) : 0);
    free(host);
    return rc;
}
