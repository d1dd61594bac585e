/* backend.h: the memory backend interface. Values live in backend memory (GPU memory on the
 * cuda backend, a memfd-backed arena on the host backend); the daemon moves bytes in and out
 * through host staging buffers. CUDA-free: CUDA types appear only in backend_cuda.c. */
#ifndef GKV_COMMON_BACKEND_H
#define GKV_COMMON_BACKEND_H

#include <stdbool.h>
#include <stddef.h>

/* Devices (backends) one daemon may serve at once (--devices). */
#define GKV_MAX_DEVICES 8

/* Largest per-value export blob (cudaMemPoolPtrExportData is 64 bytes); what the wire carries
 * is proto's GKV_MAX_EXPORT, which the daemon checks it fits. */
#define GKV_EXPORT_MAX 64
#include <stdint.h>

/* An address in backend memory: a device pointer on the cuda backend, an arena offset on the
 * host backend. Wrapped so that host code cannot dereference it by mistake. */
typedef struct {
    uint64_t v;
} gkv_devptr_t;

typedef enum { GKV_BACKEND_AUTO = 0, GKV_BACKEND_CUDA, GKV_BACKEND_HOST } gkv_backend_kind_t;

/* An asynchronous copy. The caller owns it and keeps it alive until done is called. done may
 * run on any thread (a CUDA callback thread), even before the starting call returns, or inside
 * gkv_backend_poll on the polling thread (gkv_backend_polling() is then true there, and done may
 * start further work); elsewhere it must not call back into the backend. status is 0 or a
 * negative GKV_E* code. */
typedef struct gkv_copy gkv_copy_t;
struct gkv_copy {
    void (*done)(gkv_copy_t *op, int status);
    void *arg;
    /* Set by the caller: time the copy on the device (cuda: events around it). Then set by the
     * backend before done: how long the copy itself ran, in microseconds (0: not known). */
    bool timed;
    uint64_t run_us;
};

typedef struct gkv_backend gkv_backend_t;

/* The copy lane of batched small copies (copy_batch): alloc with this lane puts the allocation
 * in the batches' stream order. */
#define GKV_LANE_BATCH (-2)
/* The lane of memory handed to other processes (CREATE, and MAP's copy of a value carved from a
 * slab): alloc and copy_shared queue there, and fence_shared says when that work has run. */
#define GKV_LANE_SHARED (-1)

/* One small copy of a batch: len bytes between value memory at dev and the batch buffer at
 * host_off. Laid out for the device: a batch's pieces live in its (pinned) buffer. */
typedef struct {
    uint64_t dev;
    uint32_t host_off;
    uint32_t len;
} gkv_piece_t;

/* A large copy in of a batch: len bytes from host (a staging buffer of its own, pinned on the
 * cuda backend) into value memory at dev. One DMA each on the cuda backend, where the batch
 * kernel's one block per piece would read a large piece over PCIe too slowly. */
typedef struct {
    uint64_t dev;
    const void *host;
    uint64_t len;
} gkv_bulk_t;

typedef struct {
    /* Reserves size (> 0) bytes of value memory. Returns 0, GKV_EOOM or GKV_EIO. */
    int (*alloc)(gkv_backend_t *b, uint64_t size, int lane, gkv_devptr_t *out);
    /* Returns memory from alloc; nothing may still be copying to or from it. */
    void (*free)(gkv_backend_t *b, gkv_devptr_t p, uint64_t size, int lane);
    /* Host address of value memory when host_visible, else NULL. */
    void *(*host_view)(gkv_backend_t *b, gkv_devptr_t p);
    /* Copies len bytes from host memory src (a staging buffer, borrowed until done) into
     * dst+off, in order with the other copies of the same lane. Returns 0 when started (done
     * will be called) or a negative code (done will not be called). */
    int (*copy_in)(gkv_backend_t *b, gkv_devptr_t dst, uint64_t off, const void *src, size_t len,
                   int lane, gkv_copy_t *op);
    /* Copies len bytes from src+off into host memory dst, like copy_in. */
    int (*copy_out)(gkv_backend_t *b, void *dst, gkv_devptr_t src, uint64_t off, size_t len,
                    int lane, gkv_copy_t *op);
    /* Many copies as one operation with one completion: first every bulk copy and every `in`
     * piece (buf -> value memory), then every `out` piece (value memory -> buf). buf comes from
     * staging_alloc and holds the piece arrays too; all of it, and the bulk copies' host
     * buffers, is borrowed until done. Batches run in order; copy_in and copy_out start after
     * every batch started before them. Returns 0 (done will be called) or a negative code (done
     * will not be called). */
    int (*copy_batch)(gkv_backend_t *b, void *buf, const gkv_piece_t *in, uint32_t nin,
                      const gkv_piece_t *out, uint32_t nout, const gkv_bulk_t *bulk, uint32_t nbulk,
                      gkv_copy_t *op);
    /* NULL when every copy reports through done by itself. Else copy_in, copy_out and
     * copy_batch report only here: calls done, on the calling thread, for each that has
     * finished, and returns how many are still in flight (call again while that is not 0).
     * Never blocks. Call through gkv_backend_poll. */
    int (*poll)(gkv_backend_t *b);
    /* Blocks until every batch started so far has run: only for shutting down. */
    void (*batch_wait)(gkv_backend_t *b);
    /* Host staging buffers suited to copies (pinned on the cuda backend). NULL on failure. */
    void *(*staging_alloc)(gkv_backend_t *b, size_t size);
    void (*staging_free)(gkv_backend_t *b, void *p, size_t size);
    /* Zero-copy. A new file descriptor (the caller closes it) through which a process on this
     * machine reaches value memory: the cuda pool's POSIX handle, the host arena's memfd.
     * Returns 0, or GKV_ENOTSUP with a sentence in why. */
    int (*share)(gkv_backend_t *b, int *fd, char *why, size_t cap);
    /* The bytes another process needs to import the value at p (size bytes, as allocated) into
     * its address space (cuda: the pool's pointer export data), at most cap; *len = 0 when the
     * address itself is enough (host: an arena offset). Returns 0 or GKV_EIO. */
    int (*export_ptr)(gkv_backend_t *b, gkv_devptr_t p, uint64_t size, uint8_t *out, size_t cap,
                      size_t *len);
    /* NULL, or (cuda): a client process holds (delta +1) or stops holding (-1) its import of
     * the allocation at p past its lease (exports.h gkv_exports_hold): it is not given back
     * while held. Returns 0, or GKV_ENOTSUP when p is no export this backend remembers. */
    int (*hold)(gkv_backend_t *b, gkv_devptr_t p, int delta);
    /* False when the memory at p is shared with other values (carved from a slab) and so must
     * not be handed to another process; export_ptr then does not apply. */
    int (*exportable)(gkv_backend_t *b, gkv_devptr_t p);
    /* Queues a copy of len bytes between values on the shared lane, after every batch started
     * before (src may have been written by one). It has run once a later fence_shared reports.
     * Returns 0 or GKV_EIO. */
    int (*copy_shared)(gkv_backend_t *b, gkv_devptr_t dst, gkv_devptr_t src, uint64_t len);
    /* NULL, or: copies len bytes of a published value at src into device memory dst of the
     * same device (a client's buffer from foreign_open) on lane, after every batch started
     * before, like copy_out: not behind the shared lane's clears. Returns 0 (op->done will be
     * called) or a negative code (it will not). */
    int (*copy_dev)(gkv_backend_t *b, gkv_devptr_t dst, gkv_devptr_t src, uint64_t len,
                    int lane, gkv_copy_t *op);
    /* Queues a copy of len bytes from src, value memory of the backend `from` (another device's,
     * of the same kind), to dst on this backend's shared lane, after every batch started before
     * on either (one may write src). It has run once a later fence_shared of this backend
     * reports. The cuda backend copies device to device (cudaMemcpyPeerAsync: directly where the
     * GPUs reach each other, else through host memory, as the driver decides). Returns 0 or
     * GKV_EIO. */
    int (*copy_from)(gkv_backend_t *b, gkv_devptr_t dst, gkv_backend_t *from, gkv_devptr_t src,
                     uint64_t len);
    /* Blocking copies for snapshots, callable from any thread: read_sync copies len bytes of
     * value memory at src into host memory dst (pinned from staging_alloc for speed) once
     * every batch that may write src has run (the caller waits for them with batch_wait first);
     * write_sync copies host memory into dst, memory from alloc on GKV_LANE_SHARED, and returns
     * once the bytes are there; it uses the shared lane, so only while nothing else does (at
     * start, loading a snapshot, before the loop runs). Return 0 or GKV_EIO. */
    int (*read_sync)(gkv_backend_t *b, void *dst, gkv_devptr_t src, size_t len);
    int (*write_sync)(gkv_backend_t *b, gkv_devptr_t dst, const void *src, size_t len);
    /* NULL where copies need nothing of host memory (host), or: page-locks the host memory
     * [addr, addr + len) for every device's copies (cuda: cudaHostRegister, portable), so that
     * read_sync and write_sync with it run at the link's speed rather than through the
     * driver's bounce buffers (the host tier, tier.c); unpin_host undoes it before the memory
     * goes. Return 0 or GKV_EIO. */
    int (*pin_host)(gkv_backend_t *b, void *addr, size_t len);
    void (*unpin_host)(gkv_backend_t *b, void *addr);
    /* NULL, or: lets copies run by peer's device read and write b's value memory directly
     * where the two devices reach each other (cuda: the pool's access for peer's GPU, when
     * cudaDeviceCanAccessPeer says yes). Returns 1 when they do, 0 when copies between them go
     * through host memory, or GKV_EIO. */
    int (*link)(gkv_backend_t *b, gkv_backend_t *peer);
    /* Queues zeroing of size bytes at p (from alloc, called right after it) on the shared
     * lane, done once a later fence_shared reports: memory handed to a CREATE never shows an
     * earlier value's bytes. A backend may clear freed memory earlier, off the reply's path
     * (cuda: kept exports are cleared as they are kept) and then queue nothing here.
     * Returns 0 or GKV_EIO. */
    int (*zero_shared)(gkv_backend_t *b, gkv_devptr_t p, uint64_t size);
    /* NULL, or: true when memory p (size bytes, just allocated on the shared lane by alloc)
     * shows no earlier value's bytes to a process that imports it from now on, without waiting
     * for the GPU (host: cleared here; cuda: a kept allocation whose clear has run); false when
     * saying so would take waiting (nothing is queued then). An early frame names memory that
     * is still being written only when this said true (PROTOCOL.md, "Early MAPs"). */
    bool (*zeroed_now)(gkv_backend_t *b, gkv_devptr_t p, uint64_t size);
    /* Calls op->done once the work queued on the shared lane so far (allocations, copies) has
     * run, and with after_batches every batch started so far too: memory allocated or written
     * there is then usable by another process. Never blocks. Returns 0 (done will be called,
     * perhaps before this returns), 1 (nothing is pending: done will not be called) or a
     * negative code (done will not be called). */
    int (*fence_shared)(gkv_backend_t *b, int after_batches, gkv_copy_t *op);
    /* NULL, or: work ahead of need, off every reply's path: the daemon calls it once a loop
     * turn, after the turn's replies went out and before the loop waits. Cheap when there is
     * nothing to do (cuda: the clear-ahead stock, backend_cuda.c). A little at a time (a
     * request arriving meanwhile waits for one turn's share): true when work is left, and the
     * loop then turns again without waiting for I/O. */
    bool (*ahead)(gkv_backend_t *b);
    /* Values that outlive the process (the daemon's fd store, server/fdstore.h). origin: the
     * allocation that value memory p (size bytes) lies in, as a successor process needs it to
     * find p in the memory that share handed out: its base address and size, and the export
     * data that imports it (at most cap bytes; *len 0 when offsets need none, as on the host
     * backend, whose base is 0 and size the arena's). Returns 0 or GKV_EIO. */
    int (*origin)(gkv_backend_t *b, gkv_devptr_t p, uint64_t size, uint64_t *base,
                  uint64_t *base_size, uint8_t *exp, size_t cap, size_t *len);
    /* A successor's side. adopt_open opens the memory a predecessor's share returned (fd,
     * borrowed) for copies out of it; *src is the caller's until adopt_close. Returns 0 or
     * GKV_EIO with why (cap bytes). adopt_copy queues a copy of len bytes at the predecessor's
     * address addr, inside the allocation origin described (base, base_size, exp), into dst
     * (memory from alloc on GKV_LANE_SHARED); GKV_EINVAL when the range lies outside that
     * allocation or the memory, GKV_EIO when the import fails: nothing is copied then.
     * adopt_close waits for the queued copies, closes what adopt_open opened, and returns 0, or
     * GKV_EIO when a copy failed (none of them can be trusted then). */
    int (*adopt_open)(gkv_backend_t *b, int fd, void **src, char *why, size_t cap);
    int (*adopt_copy)(gkv_backend_t *b, void *src, uint64_t base, uint64_t base_size,
                      const uint8_t *exp, size_t exp_len, uint64_t addr, uint64_t len,
                      gkv_devptr_t dst);
    int (*adopt_close)(gkv_backend_t *b, void *src);
    /* Transfer arenas (server/plane/): memory that another node's transfers reach through
     * NIXL, which zero-copy transports reach only in plain allocations (cudaMalloc, not a
     * pool; page-aligned host memory on the host backend). arena_alloc reserves size bytes
     * (the cuda backend rounds up to whole 2 MiB pages, which NVLink moves fastest),
     * *addr its address in this process; arena_free returns it. Returns 0, GKV_EOOM or
     * GKV_EIO. Both only at start and stop. */
    int (*arena_alloc)(gkv_backend_t *b, uint64_t size, void **addr);
    void (*arena_free)(gkv_backend_t *b, void *addr, uint64_t size);
    /* A blocking copy of len bytes between arena memory (from arena_alloc) and value memory
     * p+off, from any thread but the loop's (a worker's; each thread copies on a stream of its
     * own): to_value copies arena -> value, after the work mark after stands for (a
     * shared_mark taken once p was allocated and its clear queued), or with after NULL after
     * all the work queued on GKV_LANE_SHARED so far (where p was allocated); else value ->
     * arena (p published: its bytes written, or in a batch started before the call, which the
     * copy waits for; after unused). The caller keeps p alive. Returns 0 or GKV_EIO. */
    int (*arena_copy)(gkv_backend_t *b, gkv_devptr_t p, uint64_t off, void *arena, size_t len,
                      int to_value, void *after);
    /* NULL, or: a mark of the work queued on GKV_LANE_SHARED so far, taken on the loop once a
     * new value's memory is allocated there and its clear (zero_shared) queued. Given to
     * arena_copy and shared_wait on a worker, it makes them wait for that work alone, not for
     * what the loop queues on the lane after it (the clear of another value freed meanwhile:
     * ~0.4 ms for 1 GiB on the H200, which a remote read's first copy used to wait for).
     * mark_free gives it back, from any thread. Returns 0, or GKV_EIO (*mark NULL). */
    int (*shared_mark)(gkv_backend_t *b, void **mark);
    void (*mark_free)(gkv_backend_t *b, void *mark);
    /* NULL, or: waits until the work mark stands for (NULL: all the work queued on
     * GKV_LANE_SHARED so far, such as an allocation's clear from zero_shared) has run, from
     * any thread but the loop's (a worker's, like arena_copy). Returns 0 or GKV_EIO. */
    int (*shared_wait)(gkv_backend_t *b, void *mark);
    /* Memory of a client process that the daemon writes values into (BUFFER, GET with into:
     * PROTOCOL.md "Reading into a registered buffer"). NULL (host), or (cuda): foreign_open
     * opens the CUDA IPC handle another process exported (cudaIpcGetMemHandle, len bytes) on
     * this device: *p the whole allocation's address here, *size its bytes. Returns 0,
     * GKV_EINVAL (not a handle of memory on this device: nothing is open) or GKV_EIO.
     * copy_shared and copy_from may then write p's memory. foreign_close closes it; the caller
     * makes sure first that the copies queued into it have run (a fence_shared reported). */
    int (*foreign_open)(gkv_backend_t *b, const uint8_t *handle, size_t len, gkv_devptr_t *p,
                        uint64_t *size);
    void (*foreign_close)(gkv_backend_t *b, gkv_devptr_t p);
    /* Waits for every copy, frees everything and b itself. */
    void (*close)(gkv_backend_t *b);
} gkv_backend_ops_t;

struct gkv_backend {
    const gkv_backend_ops_t *ops;
    const char *name;  /* "cuda" or "host" */
    int device;        /* CUDA ordinal, -1 on host */
    char gpu_uuid[48]; /* "GPU-..." or "" */
    char gpu_name[64]; /* device name or "host" */
    int lanes;         /* independent copy queues (CUDA streams) */
    int host_visible;  /* host_view works: the daemon can read and write values directly */
    const char *share_mechanism; /* "cuda-pool-fd" or "host-memfd" */
    uint64_t capacity;           /* bytes this backend may hand out (the memory limit) */
    uint64_t device_total;       /* total memory of the device (or RAM) */
    uint64_t kept_bytes;         /* freed exported allocations kept for reuse (cuda; exports.h) */
    uint64_t kept_reuses;        /* allocations served from them so far */
    uint64_t kept_ahead;         /* allocations made, cleared and kept ahead of a CREATE */
    uint64_t held;               /* holds on allocations by client processes (gkv_exports_hold) */
};

typedef struct {
    gkv_backend_kind_t kind;
    int device;     /* CUDA device ordinal */
    uint64_t limit; /* bytes of value memory; 0 = 90% of the GPU's free memory (or RAM) */
    /* Host memory the daemon needs besides values (keys, the index): the host backend's default
     * limit is 90% of usable RAM (ram.h) less this, so that values and keys together fit. */
    uint64_t host_reserve;
    /* Bytes each GPU's value pool takes at open and keeps (--prealloc; 0: none, grown as
     * values come): a value the kept memory covers needs nothing new from the driver. At most
     * limit. cuda only. */
    uint64_t prealloc;
} gkv_backend_config_t;

/* Opens the backend cfg asks for. AUTO takes cuda when a GPU is usable, else host. On success
 * *out is owned by the caller (close with (*out)->ops->close). On failure why (cap bytes,
 * borrowed) says why in one sentence. Returns 0, GKV_ENOTSUP (cuda asked for but not usable or
 * not built in), GKV_EINVAL, GKV_ENOMEM, GKV_EIO or GKV_ESYS. */
int gkv_backend_open(const gkv_backend_config_t *cfg, gkv_backend_t **out, char *why, size_t cap);

/* How many devices kind offers: CUDA devices for cuda (0 when none is usable), 1 for host,
 * and for auto the CUDA devices, or 1 (host) when there are none. */
int gkv_backend_count(gkv_backend_kind_t kind);
/* The CUDA devices this process sees, or 0 (no driver, no device, or built without CUDA). */
int gkv_backend_cuda_count(void);

/* Runs b's poll (0 when b has none) with gkv_backend_polling() true on this thread meanwhile. */
int gkv_backend_poll(gkv_backend_t *b);
/* True inside gkv_backend_poll on the thread running it: a done callback runs there. */
int gkv_backend_polling(void);

/* The two implementations; gkv_backend_open picks. Same contract as gkv_backend_open. */
int gkv_backend_host_open(const gkv_backend_config_t *cfg, gkv_backend_t **out, char *why,
                          size_t cap);
int gkv_backend_cuda_open(const gkv_backend_config_t *cfg, gkv_backend_t **out, char *why,
                          size_t cap);

/* The disk tier's memory (backend_disk.c, backend_disk_open.c): records (a 64-byte header, the
 * value, its key and metadata, in whole 4 KiB blocks) in one file, dir/gpukv-tier-PID.bin,
 * locked (flock) while open and kept at close for the next start. With io & GKV_DISK_DIRECT,
 * the records are copied with O_DIRECT where the filesystem takes it (gkv_backend_disk_direct),
 * else through the page cache; with GKV_DISK_URING too, through io_uring, several pieces of a
 * record in flight at once, where gpukvd was built with liburing and the kernel allows it
 * (gkv_backend_disk_uring). Only alloc, free, read_sync, write_sync and close; not
 * host-visible. Each value is written with a checksum; gkv_backend_disk_read_value reads a
 * whole value (p from alloc, len its size) and checks it: GKV_EIO (logged) when the file is
 * damaged or unreadable. With reload, a file that a daemon now gone left in dir (unlocked) is
 * taken over: its live records are listed (gkv_backend_disk_found) and their space kept until
 * gkv_backend_disk_found_done; without it, such files are removed. capacity: the records'
 * bytes. Returns 0, GKV_EINVAL (dir is not a directory), GKV_ESYS or GKV_ENOMEM, with why (cap
 * bytes). */
#define GKV_DISK_DIRECT 1u
#define GKV_DISK_URING 2u
int gkv_backend_disk_open(const char *dir, uint64_t capacity, bool reload, unsigned io,
                          gkv_backend_t **out, char *why, size_t cap);
/* Whether b copies with O_DIRECT, and whether through io_uring. */
bool gkv_backend_disk_direct(const gkv_backend_t *b);
bool gkv_backend_disk_uring(const gkv_backend_t *b);
/* The records' state changes (retire, make live: a read and a write of a block each, on the
 * caller's thread) so far: how many, their time in all and the longest, in microseconds. */
void gkv_backend_disk_state_stats(const gkv_backend_t *b, uint64_t *writes, uint64_t *us,
                                  uint64_t *max_us);
int gkv_backend_disk_read_value(gkv_backend_t *b, void *dst, gkv_devptr_t p, uint64_t len);
/* Values found damaged, and I/O errors, so far. */
uint64_t gkv_backend_disk_corrupt(const gkv_backend_t *b);
uint64_t gkv_backend_disk_errors(const gkv_backend_t *b);
/* What the next allocation's record carries (copied): its key (klen >= 1), metadata and
 * wall-clock deadline (0: none). An allocation without a label is never reloaded. */
void gkv_backend_disk_label(gkv_backend_t *b, const void *key, uint32_t klen, const void *meta,
                            uint32_t mlen, uint64_t expire_unix_ms);
/* A value's write into the disk off the loop: begun on the loop (p from alloc after its label;
 * src stays valid and unchanged until the end), run on any thread (one write at a time per
 * write object; the backend's other calls may go on meanwhile), ended on the loop with run's
 * result. The record is written PENDING: no reload brings it back until
 * gkv_backend_disk_make_live. begin returns NULL when out of host memory. */
typedef struct gkv_disk_write gkv_disk_write_t;
gkv_disk_write_t *gkv_backend_disk_write_begin(gkv_backend_t *b, gkv_devptr_t p, const void *src,
                                               uint64_t len);
int gkv_backend_disk_write_run(gkv_disk_write_t *w); /* 0 or an errno (end: < 0, not run) */
void gkv_backend_disk_write_end(gkv_backend_t *b, gkv_disk_write_t *w, int rc);
/* A value's read from the disk off the loop, like a write above: begun on the loop (dst stays
 * valid until the end), run on any thread (0, an errno, or -1: it fails its checksum), ended
 * on the loop with run's result, which it counts and logs: 0 or GKV_EIO (the value cannot be
 * read back, as gkv_backend_disk_read_value). begin returns NULL when out of host memory. */
typedef struct gkv_disk_read gkv_disk_read_t;
gkv_disk_read_t *gkv_backend_disk_read_begin(gkv_backend_t *b, gkv_devptr_t p, void *dst,
                                             uint64_t len);
int gkv_backend_disk_read_run(gkv_disk_read_t *r);
int gkv_backend_disk_read_end(gkv_backend_t *b, gkv_disk_read_t *r, int rc);
/* Marks p's PENDING record (a write that ended well) live: a reload brings it back. 0 or
 * GKV_EIO. */
int gkv_backend_disk_make_live(gkv_backend_t *b, gkv_devptr_t p);
/* Marks p's record retired in the file (its key left it): no reload brings it back. */
void gkv_backend_disk_retire(gkv_backend_t *b, gkv_devptr_t p);
/* A live record found at open. */
typedef struct {
    gkv_devptr_t mem;
    uint64_t size, seq, expire_unix_ms;
    const uint8_t *key, *meta; /* the backend's until gkv_backend_disk_found_done */
    uint32_t klen, mlen;
} gkv_disk_found_t;
/* The records found at open, newest (highest sequence) first: how many, *found borrowed. */
size_t gkv_backend_disk_found(const gkv_backend_t *b, const gkv_disk_found_t **found);
/* The next allocation (of found record i's size) is record i's own memory: a reload adopts it. */
void gkv_backend_disk_adopt_next(gkv_backend_t *b, size_t i);
/* The found records not adopted are retired and their space freed; the list goes. */
void gkv_backend_disk_found_done(gkv_backend_t *b);
/* Removes the file now (it stays open): a takeover's predecessor leaves nothing under its name
 * a later start could take for newer than it is (a successor took the file over under its own
 * name, or has one of its own). */
void gkv_backend_disk_discard(gkv_backend_t *b);
/* The file's descriptor (borrowed): a takeover passes it to the successor. */
int gkv_backend_disk_fd(const gkv_backend_t *b);
/* Takes over the file of fd (a predecessor's, passed in a takeover; fd is b's from now on, and
 * closed on failure) in place of b's own, which must hold nothing yet: renamed to b's name,
 * its live records listed as gkv_backend_disk_open with reload lists them. Returns 0, or
 * GKV_EINVAL (b holds values, or fd is no tier's file) or GKV_ESYS with why (cap bytes). */
int gkv_backend_disk_take(gkv_backend_t *b, int fd, char *why, size_t cap);

#endif
