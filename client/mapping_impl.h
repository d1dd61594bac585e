/* mapping_impl.h: between mapping.c (mappings, MAP, unmapping, the lease cache's glue) and
 * create.c (CREATE, SEAL, ABORT). Private to libgpukv. */
#ifndef GKV_CLIENT_MAPPING_IMPL_H
#define GKV_CLIENT_MAPPING_IMPL_H

#include "client.h"
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

/* Gives m a copy of len bytes of metadata at p (none when len is 0). Returns 0 or GKV_ENOMEM
 * (m unchanged). */
int gkv__mapping_set_meta(mapping_t *m, const void *p, size_t len);
/* Builds a mapping from a MAP or CREATE response (c->resp). */
int gkv__mapping_make(gkv_client_t *c, int writable, const void *key, size_t klen,
                      gkv_mapping_t **out);
/* Frees the import and the mapping (not the lease). Returns 0 or GKV_EIO. */
int gkv__mapping_drop(gkv_client_t *c, gkv_mapping_t *pub);
/* Ends n mappings (read ones, writable ones: discarded, or spares): frees their imports, then
 * sends one RELEASE without waiting for its reply. */
int gkv__lease_release(gkv_client_t *c, gkv_mapping_t **ms, size_t n);
/* Ends leases given by id with op (RELEASE, or ABORT of one CREATE lease) and waits for the
 * reply: for leases the server granted that this process cannot use. */
void gkv__lease_send_ends(gkv_client_t *c, unsigned op, const uint64_t *ids, size_t n);
/* Starts a SEAL of created mapping pub in c->wr: its lease, flags, and the metadata and deadline
 * its CREATE was given (create.c); the caller adds its own fields and sends it. */
void gkv__seal_begin(gkv_client_t *c, gkv_mapping_t *pub, unsigned flags);

/* The parts of gkv_create and gkv_seal, for those and for the pipelined gkv_set_many_from_device
 * (set_many.c), which sends many frames before reading any reply and so acts on a reply only
 * once every reply is read (a request sent between would take a reply's place). */
/* Checks a CREATE's key and options (no round trip). */
int gkv__create_check(gkv_client_t *c, const void *key, size_t klen, const gkv_set_opts_t *opts);
/* Takes the connection's writable spare for key and size into *out, when it has one (no
 * request): 1 when taken, 0 when none, or a code. */
int gkv__create_spare(gkv_client_t *c, const void *key, size_t klen, uint64_t size,
                      const gkv_set_opts_t *opts, gkv_mapping_t **out);
/* A CREATE's fields after the frame's op and id. */
void gkv__create_put(gkv_client_t *c, const void *key, size_t klen, uint64_t size,
                     const gkv_set_opts_t *opts);
/* The writable mapping of the CREATE reply just read (c->resp) into *out. On a code, *refused is
 * the lease granted that this process cannot use (to be ended), or 0. */
int gkv__create_made(gkv_client_t *c, const void *key, size_t klen, const gkv_set_opts_t *opts,
                     gkv_mapping_t **out, uint64_t *refused);
/* Adds a SEAL's fields for pub to the frame the caller began (gkv__begin or gkv__begin_more),
 * offering the key's cached read lease as the next spare. Returns that lease, or 0. */
uint64_t gkv__seal_put(gkv_client_t *c, gkv_mapping_t *pub);
/* What a SEAL's answer rc (with reply field spare) leaves of pub: cached as a read lease, a spare
 * (NX/XX), or ended; asked is what gkv__seal_put returned. May send requests. Returns rc, or a
 * code of the caching. */
int gkv__seal_done(gkv_client_t *c, gkv_mapping_t *pub, uint64_t asked, int rc, uint64_t spare);
/* Offers pub to the lease cache as its key's newest, ending at once what that lets go. */
int gkv__lease_cache(gkv_client_t *c, gkv_mapping_t *pub);
/* Ends every cached lease of key. */
int gkv__lease_end_key(gkv_client_t *c, const void *key, size_t klen);
/* Ends the later ends (lease_cache.h) now: at the start of every call but MAP and CREATE. */
int gkv__end_later_now(gkv_client_t *c);
/* MAP and CREATE: the later ends once enough wait. */
int gkv__end_later_if_due(gkv_client_t *c);
/* GKV_ENOTSUP, with the daemon's reason, when this connection was given no memory to map. */
int gkv__need_zero_copy(gkv_client_t *c);

#endif
