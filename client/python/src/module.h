/* module.h: the _gpukv extension's types and helpers, shared by its source files. The
 * extension binds libgpukv (it links libgpukv.a); it never speaks the protocol itself. */
#ifndef GKV_PY_MODULE_H
#define GKV_PY_MODULE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <gpukv/gpukv.h>
#include <lease_cache.h> /* libgpukv's later ends (the repository's client/) */
#include <pythread.h>
#include <stdbool.h>
#include <sys/types.h>

typedef struct MappingObject MappingObject;

/* _gpukv.Client: one connection (gkv_client_t). Calls are serialised by `lock`, taken with the
 * GIL released, so a client shared by threads is safe (one client per thread is faster). The
 * GIL is released around every libgpukv call. */
typedef struct {
    PyObject_HEAD gkv_client_t *c; /* NULL once closed at the C level */
    PyThread_type_lock lock;
    unsigned long gen; /* fork_generation when connected: a forked child connects again */
    bool closing;      /* close() was called: every call raises ConnectionClosed */
    PyObject *url;     /* str, as given (or the default) */
    /* Open mappings (their C mapping not ended yet), so that close() can end them. */
    MappingObject *open;
    /* Mapping objects alive that handed out a view: their memory must stay mapped, so the C
     * close (which frees every import, and on the host backend unmaps the arena) waits for the
     * last of them to be deallocated. */
    Py_ssize_t viewed_alive;
    PyObject *weakrefs;
} ClientObject;

/* _gpukv.Mapping: a zero-copy mapping (gkv_map) or a writable one (gkv_create). After
 * unmap/seal/abort its own methods raise ValueError. A view handed out (CUDA array interface,
 * DLPack, buffer protocol) holds a reference to the mapping object; once one was handed out,
 * ending a read mapping is deferred to the object's deallocation, so no view ever outlives the
 * memory it shows. Views of a writable mapping are for writing it: after seal or abort they
 * must not be used (as in C). */
struct MappingObject {
    PyObject_HEAD ClientObject *client; /* strong reference */
    gkv_mapping_t *m;  /* NULL once the C mapping has ended or its end was deferred */
    PyObject *key;     /* bytes */
    PyObject *meta;    /* bytes or None */
    const char *state; /* NULL while open, else "unmapped", "sealed" or "aborted" */
    bool writable;
    bool viewed;                /* a view was handed out */
    MappingObject *prev, *next; /* in client->open while m is set */
};

extern PyTypeObject ClientType, MappingType, ListIterType, DeviceViewType;

/* Bumped in every child after fork() (pthread_atfork): a client compares it with the value it
 * connected under, which costs no system call (getpid() is one). */
extern unsigned long fork_generation;
/* True when the client belongs to this process (not inherited through fork). */
#define CLIENT_OURS(cl) ((cl)->gen == fork_generation)

/* Parses (key, *, offset=None, length=None, suffix=None, wait=None, after=None) of a vectorcall
 * method named fname (wait NULL: the method takes no wait, nor after). Returns 0 or -1 with
 * TypeError set. */
int parse_key_range(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, const char *fname,
                    PyObject **key, PyObject **off, PyObject **len, PyObject **suf,
                    PyObject **wait, PyObject **after);
/* A wait keyword (seconds, int or float; None: no wait, 0) in milliseconds, rounded up, 1 ..
 * 3,600,000 (an hour). Returns 0 or -1 with ValueError/TypeError set. */
int wait_get(PyObject *wait, uint32_t *ms);
/* The wait and after keywords of a read: how long, and for a version above what. */
typedef struct {
    uint32_t ms;
    uint64_t after;
    bool newer; /* after was given */
} wait_arg_t;
/* wait_get, and after (None, or a version: an int >= 0, which needs a wait). Returns 0 or -1
 * with ValueError/TypeError set. */
int wait_args(PyObject *wait, PyObject *after, wait_arg_t *w);
/* Arms w for c's next GET or MAP (gkv_wait_next or gkv_wait_newer). */
static inline int wait_arm(gkv_client_t *c, const wait_arg_t *w)
{
    return w->newer ? gkv_wait_newer(c, w->ms, w->after) : gkv_wait_next(c, w->ms);
}

/* Raises the gpukv exception for code (negative GKV_E*), with message (NULL: the code's
 * sentence). Returns NULL for `return raise_code(...)`. */
PyObject *raise_code(int code, const char *message);
/* Raises for code with the server's message on c (if any). */
PyObject *raise_client(ClientObject *self, int code);

/* A key argument: str (UTF-8; lone surrogates through surrogateescape) or any bytes-like. On
 * success *owner holds what keeps *p alive (release with key_release). Returns 0, or -1 with
 * TypeError/ValueError set (an empty key is a ValueError, before any request). */
typedef struct {
    const char *p;
    Py_ssize_t len;
    Py_buffer view;
    PyObject *tmp;
    PyObject *obj; /* the key as the caller gave it (borrowed) */
    bool has_view;
} key_arg_t;
int key_get(PyObject *obj, key_arg_t *k);
/* Releases what key_get took. A NotFound raised meanwhile (by the call the key was for) gets
 * the key as its `key` attribute, as KeyError's users expect to find which key was missing. */
void key_release(key_arg_t *k);

/* offset/length/suffix keywords (None where absent) into a range. *empty is set when the caller
 * asked for no bytes (length 0 or suffix 0), which the C API cannot say: then r asks for one
 * byte at that place instead, so that the server still checks the key and the offset, and the
 * caller returns no bytes. Returns 0 or -1 with ValueError/TypeError set. */
int range_get(PyObject *offset, PyObject *length, PyObject *suffix, gkv_range_t *r, bool *empty);

/* The arguments of a batch call: keys, a list of at most 4096 keys, and ranges, None or a list
 * as long of None or (offset, length, suffix). keys[i], range[i] and empty[i] (see range_get)
 * describe item i; release with batch_release, whatever batch_get returned. */
typedef struct {
    Py_ssize_t n, got; /* items, and how many keys are held */
    key_arg_t *keys;
    gkv_range_t *range;
    bool *empty;
} batch_arg_t;
/* Returns 0, or -1 with TypeError/ValueError/MemoryError set. n is 0 for an empty list. */
int batch_get(PyObject *keys, PyObject *ranges, batch_arg_t *b);
void batch_release(batch_arg_t *b);

/* Starts a call on the client: raises when it is closed or was made in another process, and
 * takes the lock (waiting without the GIL). Returns 0 or -1 with an exception set. Every
 * successful enter is paired with client_leave. */
int client_enter(ClientObject *self);
void client_leave(ClientObject *self);
/* Ends m (read: unmapped; writable: aborted) at the client's next call that may end it: libgpukv's
 * later ends (client/lease_cache.h), ended together (read ones with one RELEASE, after freeing
 * their imports: one device synchronisation for all) before the next call that is not a
 * mapping call, by a mapping call once enough wait, and at close. GIL held; never blocks; any
 * thread, even while another is in a call on the client. */
int client_defer_end(ClientObject *self, gkv_mapping_t *m);
/* Called when a mapping object that had handed out views goes away. */
void client_viewed_gone(ClientObject *self);

/* Readies the types defined in client_type.c that the module exports (Value). */
int client_types_ready(PyObject *module);
/* A ListIter over an open LIST iterator (owned by the new object). */
PyObject *list_iter_new(ClientObject *client, gkv_list_t *it);

/* Builds a Mapping for a C mapping the client just returned (the object owns m from then). */
PyObject *mapping_new(ClientObject *client, gkv_mapping_t *m, PyObject *key, bool writable);
/* Ends the mapping's C side now, with the client entered: used by close(). */
void mapping_end_entered(MappingObject *self);

/* The CUDA half (cuda.c): stream and device synchronisation for the device paths. Each returns
 * 0 or raises (NotSupported in a build without CUDA). */
int cuda_sync_stream(uintptr_t stream);
int cuda_sync_device(int device);

/* The DLPack producer (dlpack.c): a capsule showing the mapping's bytes as a 1-D uint8 tensor,
 * holding a reference to it. versioned: DLManagedTensorVersioned ("dltensor_versioned"). */
PyObject *dlpack_capsule(MappingObject *self, void *data, uint64_t len, bool versioned,
                         bool readonly);

#endif
