/* create.c: values written in place (CREATE, SEAL, ABORT): a writable lease on new memory, or a
 * spare the lease cache kept (no request), sealed under the key with the key's cached read lease
 * offered as the next spare. */
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "commands.h"
#include "error.h"
#include "mapping_impl.h"

/* Takes the cached spare sm for a value of size bytes with opts (no request: the server made
 * it writable and this connection's alone). */
static int take_spare(gkv_client_t *c, gkv_mapping_t *sm, uint64_t size, const gkv_set_opts_t *opts,
                      gkv_mapping_t **out)
{
    mapping_t *m = (mapping_t *)sm;
    int rc = gkv__mapping_set_meta(m, opts ? opts->meta : NULL, opts ? opts->meta_len : 0);
    if (rc)
        return rc;
    gkv_lc_take(&c->lc, sm);
    m->pub.ptr = m->base;
    m->pub.offset = 0;
    m->pub.length = size;
    m->flags = opts ? opts->flags : 0;
    m->ttl_ms = opts ? opts->ttl_ms : 0;
    *out = &m->pub;
    return 0;
}

int gkv__create_check(gkv_client_t *c, const void *key, size_t klen,
                      const gkv_set_opts_t *opts)
{
    int rc = gkv__check_key(c, key, klen);
    if (rc)
        return rc;
    if (opts && opts->meta_len > GKV_MAX_META)
        return GKV_ETOOBIG;
    if (opts && (opts->flags & ~(unsigned)(GKV_SET_NX | GKV_SET_XX)))
        return GKV_EINVAL;
    return 0;
}

int gkv__create_spare(gkv_client_t *c, const void *key, size_t klen, uint64_t size,
                      const gkv_set_opts_t *opts, gkv_mapping_t **out)
{
    int gpu = opts && opts->gpu > 0 ? opts->gpu - 1 : -1;
    gkv_mapping_t *spare = size ? gkv_lc_spare(&c->lc, key, klen, size, gpu) : NULL;
    if (!spare)
        return 0;
    int rc = take_spare(c, spare, size, opts, out);
    return rc ? rc : 1;
}

void gkv__create_put(gkv_client_t *c, const void *key, size_t klen, uint64_t size,
                     const gkv_set_opts_t *opts)
{
    gkv_wr_bin(&c->wr, GKV_F_KEY, key, klen);
    gkv_wr_uint(&c->wr, GKV_F_SIZE, size);
    gkv__put_set_opts(c, opts);
}

int gkv__create_made(gkv_client_t *c, const void *key, size_t klen, const gkv_set_opts_t *opts,
                     gkv_mapping_t **out, uint64_t *refused)
{
    int rc = gkv__mapping_make(c, 1, key, klen, out);
    if (rc) {
        *refused = c->broken ? 0 : c->resp.lease;
        return rc;
    }
    ((mapping_t *)*out)->ttl_ms = opts ? opts->ttl_ms : 0;
    return 0;
}

int gkv_create(gkv_client_t *c, const void *key, size_t klen, uint64_t size,
               const gkv_set_opts_t *opts, gkv_mapping_t **out)
{
    int rc = gkv__create_check(c, key, klen, opts);
    if (rc)
        return rc;
    if ((rc = gkv__need_zero_copy(c)) || (rc = gkv__end_later_if_due(c)))
        return rc;
    if ((rc = gkv__create_spare(c, key, klen, size, opts, out))) {
        if (rc > 0 && !c->internal)
            gkv__import_shown(((mapping_t *)*out)->imp);
        return rc < 0 ? rc : 0;
    }
    gkv__begin(c, GKV_OP_CREATE);
    gkv__create_put(c, key, klen, size, opts);
    if ((rc = gkv__send(c, NULL, 0)) || (rc = gkv__recv(c))) {
        if (!c->broken)
            gkv__lease_end_key(c, key, klen); /* e.g. OOM: the key's cached memory goes back */
        return rc;
    }
    uint64_t refused = 0;
    if ((rc = gkv__create_made(c, key, klen, opts, out, &refused)) && refused)
        gkv__lease_send_ends(c, GKV_OP_ABORT, &refused, 1);
    if (rc == 0 && !c->internal) /* the caller has the pointer: its import is never held */
        gkv__import_shown(((mapping_t *)*out)->imp);
    return rc;
}

/* SEAL's fields after the frame's op and id. */
static void seal_fields(gkv_client_t *c, gkv_mapping_t *pub, unsigned flags)
{
    const mapping_t *m = (const mapping_t *)pub;
    gkv_wr_uint(&c->wr, GKV_F_LEASE, pub->lease);
    gkv_wr_uint(&c->wr, GKV_F_FLAGS, flags);
    if (pub->meta_len)
        gkv_wr_bin(&c->wr, GKV_F_META, pub->meta, (uint32_t)pub->meta_len);
    if (m->ttl_ms)
        gkv_wr_uint(&c->wr, GKV_F_TTL, m->ttl_ms);
}

void gkv__seal_begin(gkv_client_t *c, gkv_mapping_t *pub, unsigned flags)
{
    gkv__begin(c, GKV_OP_SEAL);
    seal_fields(c, pub, flags);
}

uint64_t gkv__seal_put(gkv_client_t *c, gkv_mapping_t *pub)
{
    mapping_t *m = (mapping_t *)pub;
    /* The lease is kept and cached with the import: as a read lease on the sealed value, or
     * (NX/XX refused it) as a spare on the discarded one; the server frees nothing under it.
     * The key's newest cached read lease is most likely on the value this seal replaces: the
     * server makes it a spare when nothing else holds it. */
    gkv_mapping_t *cm = gkv_lc_read(&c->lc, m->key, m->klen);
    seal_fields(c, pub, GKV_SEAL_KEEP | m->flags);
    if (cm)
        gkv_wr_uint(&c->wr, GKV_F_SPARE, cm->lease);
    return cm ? cm->lease : 0;
}

int gkv__seal_done(gkv_client_t *c, gkv_mapping_t *pub, uint64_t asked, int rc, uint64_t spare)
{
    mapping_t *m = (mapping_t *)pub;
    if (c->broken || rc == GKV_ENOLEASE) {
        int drc = gkv__mapping_drop(c, pub); /* no lease is held for it */
        return rc ? rc : drc;
    }
    if (rc && rc != GKV_EEXISTS && rc != GKV_ENOTFOUND) {
        gkv__lease_release(c, &pub,
                           1); /* refused (checked here first, so unexpected): end the lease */
        return rc;
    }
    /* The lease offered, made a spare by the server: writable now, if still cached (looked up
     * again: in a batch another seal's caching may have ended it). */
    gkv_mapping_t *cm = rc == 0 && asked && spare == asked ? gkv_lc_read(&c->lc, m->key, m->klen)
                                                           : NULL;
    if (cm && cm->lease == asked) {
        cm->writable = 1;
        gkv__mapping_set_meta((mapping_t *)cm, NULL, 0);
    }
    m->flags = 0;
    m->ttl_ms = 0;
    pub->writable = rc != 0; /* NX/XX: the discarded value is a spare now */
    int crc = gkv__lease_cache(c, pub);
    return rc ? rc : crc;
}

int gkv_seal(gkv_client_t *c, gkv_mapping_t *pub)
{
    if (!pub || !pub->writable)
        return GKV_EINVAL;
    if (c->broken) {
        gkv__mapping_drop(c, pub); /* the connection's end ended the lease */
        return GKV_ECLOSED;
    }
    (void)gkv__end_later_now(c);
    gkv__begin(c, GKV_OP_SEAL);
    uint64_t asked = gkv__seal_put(c, pub);
    int rc = gkv__send(c, NULL, 0);
    if (rc == 0)
        rc = gkv__recv(c);
    return gkv__seal_done(c, pub, asked, rc, rc == 0 ? c->resp.spare : 0);
}

int gkv_abort(gkv_client_t *c, gkv_mapping_t *pub)
{
    if (!pub || !pub->writable)
        return GKV_EINVAL;
    if (c->broken) {
        gkv__mapping_drop(c, pub);
        return GKV_ECLOSED;
    }
    (void)gkv__end_later_now(c);
    return gkv__lease_release(c, &pub, 1); /* RELEASE of a writable lease discards its value */
}
