/* import.h: libgpukv's half of zero-copy (not installed): reaching the daemon's memory through
 * the descriptor it passed with HELLO (the cuda pool or the host arena, attached once per
 * connection) and importing values into this process (once per process, shared by every
 * mapping of every connection: one registry under one lock). */
#ifndef GKV_CLIENT_IMPORT_H
#define GKV_CLIENT_IMPORT_H

#include <stdbool.h>

#include "client.h"

/* One value imported into this process, refcounted by the mappings that use it. */
typedef struct gkv_import gkv_import_t;

/* Makes the value a MAP or CREATE response r describes reachable. Attaches c to the server's
 * pool or arena at the first call. On success *base is the value's first byte in this process,
 * *imp the reference to give back with gkv__import_put (NULL when nothing was imported: the
 * host arena, or an empty value), *on_device and *device say where it lives. Returns 0,
 * GKV_ENOTSUP (c->errmsg says why), GKV_ENOMEM, GKV_EIO, or GKV_EPROTO (c is then broken). */
int gkv__import_get(gkv_client_t *c, const gkv_response_t *r, void **base, gkv_import_t **imp,
                    int *on_device, int *device);
/* Drops a reference from gkv__import_get (NULL allowed); the last frees the import, which must
 * happen before the lease that covers it ends. Returns 0, or GKV_EIO when freeing failed. */
int gkv__import_put(gkv_import_t *imp);
/* The caller is given a mapping of imp (NULL allowed): imp is never held. */
void gkv__import_shown(gkv_import_t *imp);
/* GPU work the library cannot see may read imp (NULL allowed): its free waits for the device
 * (gkv_mapping_guard). */
void gkv__import_guard(gkv_import_t *imp);
/* Ends every hold of c (before its pool is detached: at close). */
void gkv__import_unhold_all(gkv_client_t *c);
/* Detaches c from the server's pool or arena (after every mapping of c was dropped). */
void gkv__import_detach(gkv_client_t *c);

/* The CUDA half (import_cuda.c, or import_nocuda.c in builds without CUDA). */
typedef struct gkv_cuda_pool gkv_cuda_pool_t;
/* Imports the pool behind fd on the GPU named uuid, or takes another reference on the same pool
 * imported by an earlier connection of this process; *device is this process's ordinal of it. */
int gkv__cuda_attach(int fd, const char *uuid, gkv_cuda_pool_t **out, int *device, char *why,
                     size_t cap);
/* Takes a reference on the value named by its export data (len bytes), importing it when no
 * mapping of this process holds it. *ptr is its first byte. */
int gkv__cuda_import(gkv_cuda_pool_t *z, const void *data, size_t len, gkv_import_t **out,
                     void **ptr);
/* Drops a reference; the last frees the import, unless a connection holds it (below). Returns 0
 * or GKV_EIO. */
int gkv__cuda_unimport(gkv_import_t *v);
/* Held imports (PROTOCOL.md "Held imports"). An import whose mapping was shown to the caller
 * (gkv_map, gkv_create: the pointer left the library) is never held: a pointer kept past its
 * unmap then faults rather than reading what the daemon put in that memory since. */
void gkv__cuda_import_shown(gkv_import_t *v);
/* v's free waits for its device first (gkv_mapping_guard). */
void gkv__cuda_import_guard(gkv_import_t *v);
/* The mapping that holds v's last reference ends with its lease (id lease) on connection
 * holder: true when v may be held instead of freed (not shown, held by no one, this reference
 * the last); it is then held by holder under id lease, its reference dropped without freeing
 * (the mapping is freed without gkv__import_put). */
bool gkv__cuda_hold(gkv_import_t *v, const void *holder, uint64_t lease);
/* Whether gkv__cuda_hold would hold v now (a hint: another thread may change it). */
bool gkv__cuda_holdable(gkv_import_t *v);
/* Ends holder's hold of v: frees the import unless a mapping uses it. Returns its hold id. */
uint64_t gkv__cuda_unhold(gkv_import_t *v);
/* Drops the connection's reference on the pool; the last destroys the pool's import. */
void gkv__cuda_detach(gkv_cuda_pool_t *z);
/* Copies len bytes between a mapping's memory mptr (of import v) and buf: into the mapping
 * (into) or out of it, on the legacy default stream of the GPU that holds the mapping (the one
 * GPU its pool is reachable from by default: import_cuda.c), peer to peer when buf is on
 * another GPU, after the work on the legacy stream of the caller's current GPU (waited for
 * first when that is another GPU); waited for when wait (else gkv__cuda_device_sync of
 * gkv__cuda_import_device(v) waits). v NULL (nothing imported: the host arena): gkv__cuda_copy or gkv__cuda_copy_async.
 * Returns 0 or GKV_EIO. */
int gkv__cuda_mapping_copy(gkv_import_t *v, void *mptr, void *buf, size_t len, bool into,
                           bool wait);
/* The CUDA ordinal of the GPU holding import v, or -1 (v NULL). */
int gkv__cuda_import_device(const gkv_import_t *v);
/* Waits for the legacy default stream of GPU dev (-1: the current one). 0 or GKV_EIO. */
int gkv__cuda_device_sync(int dev);
/* The UUID ("GPU-...") of the GPU whose memory p is, into uuid (cap bytes). Returns 0, or
 * GKV_ENOTSUP when p is not device memory (or CUDA is not there). */
int gkv__cuda_ptr_uuid(const void *p, char *uuid, size_t cap);
/* Registered buffers (buffer.c): the CUDA IPC handle (GKV_IPC_HANDLE_LEN bytes into handle) of
 * the cudaMalloc allocation device memory p lies in, p's offset in it (*off) and the
 * allocation's size, and the UUID of p's GPU (cap bytes). Returns 0, GKV_ENOTSUP (not device
 * memory, or no CUDA) or GKV_EINVAL (device memory with no such handle: from a memory pool,
 * cudaMallocAsync or the VMM API). */
#define GKV_IPC_HANDLE_LEN 64
int gkv__cuda_ipc_handle(const void *p, uint8_t *handle, uint64_t *off, uint64_t *size, char *uuid,
                         size_t cap);
/* cudaMemcpy with the direction inferred from the pointers; GKV_EIO or GKV_ENOTSUP on failure.
 * In a process with no usable GPU both are host memory: memcpy (import_cuda.c). */
int gkv__cuda_copy(void *dst, const void *src, size_t len);
/* The same copy enqueued on the legacy default stream, not waited for (gkv__cuda_stream_sync
 * with NULL waits). */
int gkv__cuda_copy_async(void *dst, const void *src, size_t len);
/* Fences (fence.c). Makes n bytes of page-aligned host memory at p reachable by every GPU's
 * streams; *dev is their device address. 0, GKV_ENOTSUP (no CUDA or no GPU) or GKV_EIO. */
int gkv__cuda_host_register(void *p, size_t n, void **dev);
void gkv__cuda_host_unregister(void *p);
/* Enqueues on stream (a cudaStream_t; NULL: the legacy default stream) a write of value into
 * the 8 bytes at dev, after a system-wide memory fence, once the stream's earlier work is done
 * (cuStreamWriteValue64). 0, GKV_ENOTSUP or GKV_EIO. */
int gkv__cuda_write_value(void *stream, void *dev, uint64_t value);
/* Waits for stream's work (NULL: the legacy default stream). 0 or GKV_EIO. */
int gkv__cuda_stream_sync(void *stream);

#endif
