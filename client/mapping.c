/* mapping.c: the zero-copy calls (MAP/RELEASE, CREATE/SEAL/ABORT): mappings made from the
 * server's replies, imports, and the leases that end (one RELEASE for many). What the
 * connection keeps after the caller is done, and when a lease ends, is the lease cache's
 * (lease_cache.h); docs/zero-copy.md tells the whole reuse model. gkv_abort ends a writable
 * lease (RELEASE discards an unsealed value). */
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "commands.h"
#include "error.h"
#include "hash.h"
#include "import.h"
#include "lease_cache.h"
#include "mapping_impl.h"
#include "trace.h"

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
int gkv__mapping_set_meta(mapping_t *m, const void *p, size_t len)
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
    int rc = gkv__mapping_set_meta(m, r->meta.p, r->has_meta ? r->meta.len : 0);
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
    m->pub.version = r->vversion;
    return 0;
}

/* Builds a mapping from a MAP or CREATE response. */
int gkv__mapping_make(gkv_client_t *c, int writable, const void *key, size_t klen,
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
int gkv__mapping_drop(gkv_client_t *c, gkv_mapping_t *pub)
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

/* Ends leases given by id with op (RELEASE, or ABORT of one CREATE lease) and waits for the
 * reply: for leases the server granted that this process cannot use. c->errmsg keeps saying why
 * they could not be used. */
void gkv__lease_send_ends(gkv_client_t *c, unsigned op, const uint64_t *ids, size_t n)
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

/* Held imports (PROTOCOL.md): whether read mapping m's import is held by c past its lease
 * instead of freed (the lease ends in the RELEASE being built). Room is made first by ending
 * c's oldest holds, their ids appended to unhold (*nunhold of them), but never one begun in
 * this RELEASE (the last *fresh of c's holds: the server ends holds before it begins new
 * ones). */
static bool hold_import(gkv_client_t *c, gkv_mapping_t *pub, uint64_t *unhold, size_t *nunhold,
                        size_t *fresh)
{
    mapping_t *m = (mapping_t *)pub;
    uint64_t bytes = pub->value_size;
    if (!m->imp || pub->writable || !c->holds_max || bytes > c->hold_bytes_max ||
        !gkv__cuda_holdable(m->imp))
        return false;
    if (c->nheld == c->held_cap) {
        size_t cap = c->held_cap ? c->held_cap * 2 : 64;
        struct gkv_held *h = realloc(c->held, cap * sizeof(*h));
        if (!h)
            return false;
        c->held = h;
        c->held_cap = cap;
    }
    /* Room: the oldest holds that may end, and whether enough of them can. */
    size_t endable = c->nheld - *fresh, old = 0;
    uint64_t room_bytes = c->held_bytes;
    while (old < endable &&
           (c->nheld - old >= c->holds_max || room_bytes + bytes > c->hold_bytes_max))
        room_bytes -= c->held[old++].bytes;
    if (c->nheld - old >= c->holds_max || room_bytes + bytes > c->hold_bytes_max)
        return false;
    for (size_t i = 0; i < old; i++) {
        c->held_bytes -= c->held[i].bytes;
        unhold[(*nunhold)++] = gkv__cuda_unhold(c->held[i].imp); /* freed first */
    }
    if (old) {
        memmove(c->held, c->held + old, (c->nheld - old) * sizeof(*c->held));
        c->nheld -= old;
    }
    if (!gkv__cuda_hold(m->imp, c, pub->lease))
        return false;
    c->held[c->nheld++] = (struct gkv_held){.imp = m->imp, .bytes = bytes};
    c->held_bytes += bytes;
    (*fresh)++;
    m->imp = NULL; /* held: the mapping goes without its reference */
    return true;
}

/* Ends n mappings (read ones, or spares from the cache): frees their imports (or holds them),
 * then sends one RELEASE without waiting for its reply (gkv__recv reads it before the next one:
 * the server handles requests in order, so the leases have ended before anything this client
 * sends next). */
int gkv__lease_release(gkv_client_t *c, gkv_mapping_t **ms, size_t n)
{
    uint64_t *hold = c->holds_max ? malloc((2 * n + c->nheld) * sizeof(*hold)) : NULL;
    uint64_t *unhold = hold ? hold + n : NULL; /* room for every hold to end */
    size_t nhold = 0, nunhold = 0, fresh = 0;
    gkv__begin(c, GKV_OP_RELEASE);
    size_t pos = gkv_wr_array_begin(&c->wr, GKV_F_LEASES);
    int freed = 0;
    for (size_t i = 0; i < n; i++) {
        msgpack_pack_uint64(&c->wr.pk, ms[i]->lease);
        uint64_t lease = ms[i]->lease;
        if (hold && hold_import(c, ms[i], unhold, &nunhold, &fresh))
            hold[nhold++] = lease;
        /* Our import goes first (unless held): the server may free the memory once the lease
         * ends. */
        freed = gkv__mapping_drop(c, ms[i]) ? GKV_EIO : freed;
    }
    gkv_wr_array_end(&c->wr, pos, (uint32_t)n);
    if (nhold) {
        pos = gkv_wr_array_begin(&c->wr, GKV_F_HOLD);
        for (size_t i = 0; i < nhold; i++)
            msgpack_pack_uint64(&c->wr.pk, hold[i]);
        gkv_wr_array_end(&c->wr, pos, (uint32_t)nhold);
    }
    if (nunhold) {
        pos = gkv_wr_array_begin(&c->wr, GKV_F_UNHOLD);
        for (size_t i = 0; i < nunhold; i++)
            msgpack_pack_uint64(&c->wr.pk, unhold[i]);
        gkv_wr_array_end(&c->wr, pos, (uint32_t)nunhold);
    }
    free(hold);
    int rc = gkv__send(c, NULL, 0);
    if (rc == 0 && c->deferred == 0)
        c->deferred_id = c->next_id;
    if (rc == 0 && ++c->deferred >= 64)
        rc = gkv__read_deferred(c); /* unread replies would fill the socket and stall both sides */
    return rc ? rc : freed;
}

/* Leases to end together: one RELEASE for many (ends_flush). */
typedef struct {
    gkv_client_t *c;
    gkv_mapping_t **m;
    size_t n, cap;
} ends_t;

/* A gkv_lc_end_fn: adds m to the ends arg, or ends it at once when they cannot grow. */
static int end_into(void *arg, gkv_mapping_t *m)
{
    ends_t *e = arg;
    if (e->n == e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 16;
        gkv_mapping_t **a = realloc(e->m, cap * sizeof(*a));
        if (!a)
            return gkv__lease_release(e->c, &m, 1);
        e->m = a;
        e->cap = cap;
    }
    e->m[e->n++] = m;
    return 0;
}

/* Ends what e holds (one RELEASE per GKV_MAX_BATCH leases) and empties it. Returns 0 or the
 * first code release gave. */
static int ends_flush(ends_t *e)
{
    int rc = 0;
    for (size_t i = 0; i < e->n; i += GKV_MAX_BATCH) {
        size_t n = e->n - i < GKV_MAX_BATCH ? e->n - i : GKV_MAX_BATCH;
        int r = gkv__lease_release(e->c, e->m + i, n);
        rc = rc ? rc : r;
    }
    free(e->m);
    e->m = NULL;
    e->n = e->cap = 0;
    return rc;
}

static int first_code(int a, int b)
{
    return a ? a : b;
}

/* Whether gkv_unmap keeps read mapping m in the lease cache. */
static bool cacheable(const gkv_client_t *c, const gkv_mapping_t *m)
{
    return gkv_lc_wants(&c->lc, m) && !c->broken;
}

/* Offers pub to the gkv__lease_cache (as its key's newest), into e what that lets go. */
static int cache_into(gkv_client_t *c, gkv_mapping_t *pub, ends_t *e)
{
    mapping_t *m = (mapping_t *)pub;
    return gkv_lc_put(&c->lc, pub, m->key, m->klen, end_into, e);
}

/* cache_into, ending what it lets go at once. */
int gkv__lease_cache(gkv_client_t *c, gkv_mapping_t *pub)
{
    ends_t e = {.c = c};
    int rc = cache_into(c, pub, &e);
    return first_code(rc, ends_flush(&e));
}

/* Ends the cached lease m. */
static int end_cached(gkv_client_t *c, gkv_mapping_t *m)
{
    gkv_lc_take(&c->lc, m);
    return gkv__lease_release(c, &m, 1);
}

/* Ends every cached lease of key. */
int gkv__lease_end_key(gkv_client_t *c, const void *key, size_t klen)
{
    ends_t e = {.c = c};
    int rc = gkv_lc_end_key(&c->lc, key, klen, end_into, &e);
    return first_code(rc, ends_flush(&e));
}

/* The ends gkv__end_later queued, into e: read mappings as gkv_unmap_many ends them (with
 * cache, the cache keeps what it wants), writable ones discarded (a RELEASE of a writable lease
 * is an ABORT). */
static int end_later(gkv_client_t *c, ends_t *e, bool cache)
{
    gkv_mapping_t **list;
    size_t n = gkv_lc_take_later(&c->lc, &list);
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        gkv_mapping_t *m = list[i];
        int r = cache && !m->writable && cacheable(c, m) ? cache_into(c, m, e) : end_into(e, m);
        rc = first_code(rc, r);
    }
    free(list);
    return rc;
}

/* Ends the later ends now (at the start of every call but MAP and CREATE; before a request
 * that is not a mapping call, gkv__cache_flush does it). */
int gkv__end_later_now(gkv_client_t *c)
{
    if (c->broken)
        return 0;
    ends_t e = {.c = c};
    int rc = end_later(c, &e, true);
    return first_code(rc, ends_flush(&e));
}

/* MAP and CREATE end the later ends only once enough wait (lease_cache.h): a reader of many
 * chunks then frees their imports and ends their leases in batches. */
int gkv__end_later_if_due(gkv_client_t *c)
{
    return gkv_lc_later_due(&c->lc) ? gkv__end_later_now(c) : 0;
}

int gkv__end_later(gkv_client_t *c, gkv_mapping_t *m)
{
    return gkv_lc_later(&c->lc, m);
}

int gkv__cache_flush(gkv_client_t *c)
{
    if (c->broken)
        return 0;
    ends_t e = {.c = c};
    int rc = end_later(c, &e, false); /* the cache ends everything here: none goes through it */
    rc = first_code(rc, gkv_lc_end_all(&c->lc, end_into, &e));
    return first_code(rc, ends_flush(&e));
}

void gkv__mappings_close(gkv_client_t *c)
{
    gkv_lc_fini(&c->lc); /* closing the socket ends the leases */
    while (c->mappings)
        gkv__mapping_drop(c, &c->mappings->pub);
    gkv__import_unhold_all(c); /* and the holds: the imports go first */
    gkv__import_detach(c);
}

int gkv_client_set_lease_cache(gkv_client_t *c, uint32_t slots, uint64_t max_value,
                               uint64_t max_bytes)
{
    if (!c || slots > GKV_CACHE_SLOTS_MAX)
        return GKV_EINVAL;
    (void)gkv__end_later_now(c);
    ends_t e = {.c = c};
    int rc = gkv_lc_configure(&c->lc, slots, max_value, max_bytes, end_into, &e);
    return first_code(rc, ends_flush(&e));
}

/* The server renewed the lease of cached mapping cm (the reply just read): it is the caller's
 * mapping again, import and all, out of the cache. Returns 0, or fill_mapping's code (it stays
 * cached). */
static int take_renewed(gkv_client_t *c, gkv_mapping_t *cm, gkv_mapping_t **out)
{
    mapping_t *m = (mapping_t *)cm;
    int rc = fill_mapping(c, m, m->base);
    if (rc == 0) {
        gkv_lc_take(&c->lc, cm);
        *out = cm;
    }
    return rc;
}

/* GKV_ENOTSUP, with the daemon's reason (HELLO's zero_copy_why: "start gpukvd with
 * --host-zero-copy yes", "zero-copy needs a Unix socket ..."), when this connection was given
 * no memory to map; else 0. Checked before sending, so the caller reads why, not protocol. */
int gkv__need_zero_copy(gkv_client_t *c)
{
    if (c->nshared)
        return 0;
    snprintf(c->errmsg, sizeof(c->errmsg), "no zero-copy on this connection: %s",
             c->info.zero_copy_why[0] ? c->info.zero_copy_why : "the server did not offer it");
    return GKV_ENOTSUP;
}

/* A waiting MAP's early frame (PROTOCOL.md, "Early MAPs"): the memory of the value an
 * asynchronous seal of the key is about to publish, imported now, while the producer's work
 * runs; the answer then renews its lease when that value is the one returned. */
typedef struct {
    const void *key;
    size_t klen;
    gkv_mapping_t *m;   /* the import of the early frame's value, or NULL */
    uint64_t lease;     /* the early frame's lease, when its import failed (else m's) */
} early_t;

/* gkv_early_fn: imports the early frame's value. An import that fails costs nothing but the
 * lease, ended once the answer is read. */
static int on_early(gkv_client_t *c, void *arg)
{
    early_t *e = arg;
    if (e->m || e->lease || c->resp.status != 0 || !c->resp.lease)
        return gkv__break(c, GKV_EPROTO); /* one early frame per request, with a lease */
    int rc = gkv__mapping_make(c, 0, e->key, e->klen, &e->m);
    if (rc) {
        if (c->broken)
            return rc;
        e->m = NULL;
        e->lease = c->resp.lease;
    }
    gkv_trace("c_early", c->resp.size, (uint64_t)rc); /* GPUKV_TRACE: the early import done */
    return 0;
}

/* What an early frame left that the answer did not renew: its import freed and its lease
 * ended (after the answer was read and used; gkv_last_version still says the answer's). */
static int end_early(gkv_client_t *c, early_t *e)
{
    int rc = 0;
    uint64_t version = c->last_version;
    if (e->m && c->broken)
        rc = gkv__mapping_drop(c, e->m);
    else if (e->m)
        rc = gkv__lease_release(c, &e->m, 1); /* its import goes first */
    else if (e->lease && !c->broken)
        gkv__lease_send_ends(c, GKV_OP_RELEASE, &e->lease, 1);
    c->last_version = version;
    e->m = NULL;
    e->lease = 0;
    return rc;
}

/* Whether range names the whole value (no range field is sent). */
static bool whole(const gkv_range_t *range)
{
    return !range || (!range->suffix && !range->offset &&
                      (!range->length || range->length == GKV_TO_END));
}

static int map_one(gkv_client_t *c, const void *key, size_t klen, const gkv_range_t *range,
                   gkv_mapping_t **out);

int gkv_map(gkv_client_t *c, const void *key, size_t klen, const gkv_range_t *range,
            gkv_mapping_t **out)
{
    int rc = map_one(c, key, klen, range, out);
    if (rc == 0 && !c->internal) /* the caller has the pointer: its import is never held */
        gkv__import_shown(((mapping_t *)*out)->imp);
    return rc;
}

static int map_one(gkv_client_t *c, const void *key, size_t klen, const gkv_range_t *range,
                   gkv_mapping_t **out)
{
    int rc = gkv__check_key(c, key, klen);
    if (rc || (rc = gkv__need_zero_copy(c)))
        return rc;
    if ((rc = gkv__end_later_if_due(c)))
        return rc;
    gkv_mapping_t *cm = gkv_lc_read(&c->lc, key, klen);
    gkv__begin(c, GKV_OP_MAP);
    gkv__put_key_range(c, key, klen, range);
    if (cm)
        gkv_wr_uint(&c->wr, GKV_F_LEASE, cm->lease);
    /* A whole value's MAP takes an early frame when its value is on the way: an asynchronous
     * seal's (with a wait), or a pull from another cluster node's. */
    early_t early = {.key = key, .klen = klen};
    if (whole(range) && !(c->wait_ms && c->wait_newer))
        gkv_wr_uint(&c->wr, GKV_F_EARLY, 1);
    rc = gkv__send_waiting_early(c, on_early, &early);
    if (rc) {
        if (cm && !c->broken)
            end_cached(c, cm); /* e.g. the key is gone: its old value need not stay */
        (void)end_early(c, &early);
        return rc;
    }
    gkv_trace("c_reply", c->resp.size, 0);
    if (cm && c->resp.lease == cm->lease)
        return take_renewed(c, cm, out);
    if (early.m && c->resp.lease == early.m->lease) { /* the value imported early */
        mapping_t *m = (mapping_t *)early.m;
        if ((rc = fill_mapping(c, m, m->base)) == 0)
            *out = early.m;
        else
            (void)end_early(c, &early);
        if (cm) /* the older value's lease ends; as a deferred RELEASE's, its errors are not
                 * the caller's */
            (void)end_cached(c, cm);
        return rc;
    }
    rc = gkv__mapping_make(c, 0, key, klen, out);
    gkv_trace("c_made", c->resp.size, (uint64_t)rc); /* the import done */
    if (rc && !c->broken) {
        uint64_t lease = c->resp.lease;
        gkv__lease_send_ends(c, GKV_OP_RELEASE, &lease, 1);
    }
    if (cm)
        rc = first_code(rc, end_cached(c, cm));
    (void)end_early(c, &early); /* as a deferred RELEASE's, its errors are not the caller's */
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
    int zc = gkv__need_zero_copy(c); /* then every item says why, as the server would have */
    for (size_t i = 0; i < n; i++) {
        int rc = gkv__check_key(c, items[i].key, items[i].klen);
        if (rc)
            return rc;
        items[i].status = zc;
        items[i].mapping = NULL;
    }
    if (zc)
        return 0;
    int lrc = gkv__end_later_if_due(c);
    if (lrc)
        return lrc;
    uint64_t *refused = malloc(n * sizeof(*refused));
    gkv_mapping_t **offered = calloc(n, sizeof(*offered));
    if (!refused || !offered) {
        free(refused);
        free(offered);
        return GKV_ENOMEM;
    }
    /* Each key's cached read lease, offered for renewal (once: a key asked twice renews once). */
    for (size_t i = 0; i < n; i++) {
        if (!(offered[i] = gkv_lc_read(&c->lc, items[i].key, items[i].klen)))
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
            if ((st = take_renewed(c, offered[i], &items[i].mapping)) == 0)
                offered[i] = NULL;
            items[i].status = st;
            continue;
        }
        if (st == 0 &&
            (st = gkv__mapping_make(c, 0, items[i].key, items[i].klen, &items[i].mapping)) != 0) {
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
                gkv__mapping_drop(c, items[i].mapping);
            items[i].mapping = NULL;
            items[i].status = rc;
        }
    } else if (nrefused) {
        gkv__lease_send_ends(c, GKV_OP_RELEASE, refused, nrefused);
    }
    /* Offered and not renewed (the key has another value now, or is gone): ended, with one
     * RELEASE. */
    ends_t e = {.c = c};
    for (size_t i = 0; i < n && rc == 0 && !c->broken; i++)
        if (offered[i] && gkv_lc_take(&c->lc, offered[i]))
            (void)end_into(&e, offered[i]);
    (void)ends_flush(&e);
    free(refused);
    free(offered);
    for (size_t i = 0; i < n; i++) /* the caller has the pointers: never held */
        if (items[i].mapping)
            gkv__import_shown(((mapping_t *)items[i].mapping)->imp);
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
    if (!rc)
        (void)gkv__end_later_now(c);
    return rc ? rc : gkv__lease_release(c, ms, n);
}

int gkv_unmap(gkv_client_t *c, gkv_mapping_t *m)
{
    if (!m)
        return 0;
    if (m->writable)
        return GKV_EINVAL;
    (void)gkv__end_later_now(c);
    return cacheable(c, m) ? gkv__lease_cache(c, m) : gkv__lease_release(c, &m, 1);
}

void gkv_mapping_guard(gkv_mapping_t *m)
{
    if (m)
        gkv__import_guard(((mapping_t *)m)->imp);
}

int gkv_unmap_many(gkv_client_t *c, gkv_mapping_t **ms, size_t n)
{
    int rc = check_reads(ms, n);
    if (rc)
        return rc;
    (void)gkv__end_later_now(c);
    /* What the cache does not take, and what it lets go to take the others, end together. */
    ends_t e = {.c = c};
    for (size_t i = 0; i < n; i++) {
        int r = cacheable(c, ms[i]) ? cache_into(c, ms[i], &e) : end_into(&e, ms[i]);
        rc = first_code(rc, r);
    }
    return first_code(rc, ends_flush(&e));
}
