/* zc.h: libgpukv's half of zero-copy: reaching the daemon's memory through the descriptor it
 * passed with HELLO, and importing values (not installed). */
#ifndef GKV_CLIENT_ZC_H
#define GKV_CLIENT_ZC_H

#include "backend.h" /* GKV_EXPORT_MAX */
#include "client.h"

/* What one connection holds of an imported value: every mapping of it on this connection
 * (refcounted), and one reference on the process-wide import. */
typedef struct gkv_zc_import gkv_zc_import_t;

/* Imports what a MAP or CREATE response r describes. On success *base is the value's first
 * byte in this process, *imp the import to give back with gkv__zc_unimport, *on_device and
 * *device say where it lives. Attaches the pool or arena at the first call. Returns 0,
 * GKV_ENOTSUP (c->errmsg says why) or GKV_EIO. */
int gkv__zc_import(gkv_client_t *c, const gkv_response_t *r, void **base,
                   gkv_zc_import_t **imp, int *on_device, int *device);
/* Drops one reference; the last frees the import. Call before the lease is released.
 * Returns 0, or GKV_EIO when freeing the import failed. */
int gkv__zc_unimport(gkv_client_t *c, gkv_zc_import_t *imp);
/* Frees every import and the pool or arena mapping. */
void gkv__zc_detach(gkv_client_t *c);

/* The CUDA half (zc_cuda.c, or zc_nocuda.c in builds without CUDA). Both the imported pools
 * and the imported values are shared by every connection of the process (a registry under one
 * mutex): importing one pool twice yields the same handle, so it is destroyed only when its
 * last connection detaches, and a value is imported once however many connections map it. */
typedef struct gkv_zc_cuda gkv_zc_cuda_t;
/* One value imported into this process, refcounted by the connections that use it. */
typedef struct gkv_cuda_value gkv_cuda_value_t;
/* Imports the pool behind fd on the GPU named uuid (or takes another reference on the same
 * pool imported by an earlier connection); *device is this process's ordinal of it. */
int gkv__cuda_attach(int fd, const char *uuid, gkv_zc_cuda_t **out, int *device, char *why,
                     size_t cap);
/* Takes a reference on the value named by its export data (len bytes), importing it when no
 * connection of this process holds it yet. *ptr is its first byte. */
int gkv__cuda_import(gkv_zc_cuda_t *z, const void *data, size_t len, gkv_cuda_value_t **out,
                     void **ptr);
/* Drops a reference; the last frees the import. Returns 0 or GKV_EIO. */
int gkv__cuda_unimport(gkv_cuda_value_t *v);
/* Drops the connection's reference on the pool; the last destroys the import. */
void gkv__cuda_detach(gkv_zc_cuda_t *z);
/* cudaMemcpy with the direction inferred from the pointers; GKV_EIO or GKV_ENOTSUP on failure. */
int gkv__cuda_copy(void *dst, const void *src, size_t len);

#endif
