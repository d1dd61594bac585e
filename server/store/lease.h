/* lease.h: zero-copy leases of one connection. A lease holds a reference on an entry, so the
 * entry's memory outlives deletes, overwrites and FLUSH until the lease ends. A read lease (MAP)
 * never sees its bytes change. A writable lease (CREATE, or a spare: docs/zero-copy.md) holds an
 * unpublished entry that only this connection can reach, published under its key at SEAL. */
#ifndef GKV_SERVER_LEASE_H
#define GKV_SERVER_LEASE_H

#include <stdbool.h>
#include <stdint.h>
#include <uthash.h>

#include "store.h"

typedef struct gkv_lease {
    uint64_t id;
    gkv_entry_t *entry; /* one reference */
    bool writable;      /* CREATE: unpublished until SEAL */
    unsigned flags;     /* writable: GKV_SET_NX / GKV_SET_XX of its CREATE, checked at SEAL */
    bool marked;        /* RELEASE: already named in this batch */
    uint64_t bytes;     /* what it counts in leased bytes: its value's size when it began
                           (publishing may move another value into the entry) */
    UT_hash_handle hh;
} gkv_lease_t;

/* Server-wide totals, updated by every connection's table. */
typedef struct {
    uint64_t leases, bytes, creates;
    uint64_t last_id; /* lease ids are unique server-wide: another connection's id never
                         names one of ours */
} gkv_lease_totals_t;

/* A held import (PROTOCOL.md "Held imports"): the connection's process keeps its import of the
 * allocation a lease was on after that lease ended, so the allocation is not given back while
 * the hold lasts (it may hold other values meanwhile: the process reads it only under a new
 * lease). Named by the id of the lease it began with. */
typedef struct gkv_hold {
    uint64_t id;
    gkv_devptr_t mem; /* the allocation (backend memory of device dev) */
    uint8_t dev;
    uint64_t bytes;
    bool marked; /* RELEASE: already named in this request's unhold */
    UT_hash_handle hh;
} gkv_hold_t;

typedef struct {
    gkv_lease_t *table;
    uint64_t count, bytes;
    gkv_lease_totals_t *totals; /* borrowed */
    gkv_hold_t *holds;
    uint64_t nholds, held_bytes;
} gkv_leases_t;

void gkv_leases_init(gkv_leases_t *ls, gkv_lease_totals_t *totals);
/* Ends every lease (entries are unref'd, unsealed creates discarded) and every hold. */
void gkv_leases_fini(gkv_leases_t *ls, gkv_store_t *st);
/* Lease l's allocation is held from now on, under l's id (l itself is ended by the caller).
 * Returns 0, GKV_ENOTSUP (its backend keeps no holds, or the memory is no export it
 * remembers: then the importer could not have imported it), or GKV_ENOMEM. */
int gkv_hold_add(gkv_leases_t *ls, gkv_store_t *st, const gkv_lease_t *l);
/* The most bytes one connection may hold: the kept share of its devices' memory (an eighth:
 * what the cuda backend keeps of freed exports anyway, common/mem/backend_cuda.c). */
uint64_t gkv_hold_cap(const gkv_store_t *st);
/* The hold begun with lease id, or NULL. */
gkv_hold_t *gkv_hold_find(gkv_leases_t *ls, uint64_t id);
/* Ends hold h. */
void gkv_hold_drop(gkv_leases_t *ls, gkv_store_t *st, gkv_hold_t *h);
/* Adds a lease on e, taking over the caller's reference. Returns 0 with *out (borrowed, valid
 * until dropped) or GKV_ENOMEM (the reference is then still the caller's). */
int gkv_lease_add(gkv_leases_t *ls, gkv_entry_t *e, bool writable, unsigned flags,
                  gkv_lease_t **out);
/* The lease with this id on this connection, or NULL. */
gkv_lease_t *gkv_lease_find(gkv_leases_t *ls, uint64_t id);
/* Ends one lease and drops its reference. */
void gkv_lease_drop(gkv_leases_t *ls, gkv_store_t *st, gkv_lease_t *l);
/* SEAL with keep: turns writable lease l into a read lease on e, the entry that now holds its
 * value (l's own entry, or the key's entry the value moved into), keeping its id and count. */
void gkv_lease_to_read(gkv_leases_t *ls, gkv_store_t *st, gkv_lease_t *l, gkv_entry_t *e);
/* Makes read lease l a spare: writable, no NX/XX, keeping its id and count. Only for a lease
 * whose entry no key names and nothing else holds (its entry readied by gkv_store_entry_renew). */
void gkv_lease_to_write(gkv_leases_t *ls, gkv_lease_t *l);

#endif
