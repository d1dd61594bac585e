/* mapping.c: _gpukv.Mapping, a zero-copy mapping, and the views it hands out: the CUDA array
 * interface, DLPack and (host memory) the buffer protocol. */
#include "client.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dlpack.h"

static void open_link(MappingObject *self)
{
    ClientObject *c = self->client;
    self->prev = NULL;
    self->next = c->open;
    if (c->open)
        c->open->prev = self;
    c->open = self;
}

static void open_unlink(MappingObject *self)
{
    if (self->prev)
        self->prev->next = self->next;
    else if (self->client->open == self)
        self->client->open = self->next;
    if (self->next)
        self->next->prev = self->prev;
    self->prev = self->next = NULL;
}

PyObject *mapping_new(ClientObject *client, gkv_mapping_t *m, PyObject *key, bool writable)
{
    MappingObject *self = (MappingObject *)MappingType.tp_alloc(&MappingType, 0);
    if (!self)
        return NULL;
    self->meta =
        m->meta ? PyBytes_FromStringAndSize(m->meta, (Py_ssize_t)m->meta_len) : Py_NewRef(Py_None);
    if (!self->meta) {
        Py_TYPE(self)->tp_free((PyObject *)self);
        return NULL;
    }
    self->client = (ClientObject *)Py_NewRef(client);
    self->key = Py_NewRef(key);
    self->m = m;
    self->writable = writable;
    open_link(self);
    return (PyObject *)self;
}

/* Takes the C mapping out of the object (it is ended by the caller). */
static gkv_mapping_t *take(MappingObject *self)
{
    gkv_mapping_t *m = self->m;
    self->m = NULL;
    open_unlink(self);
    return m;
}

/* Ends the C mapping now with end (gkv_unmap, gkv_seal or gkv_abort), as one call on the
 * client. Returns 0, or a negative code with the exception set (if the client could not be
 * entered, the mapping is left as it was). */
static int end_now(MappingObject *self, int (*end)(gkv_client_t *, gkv_mapping_t *))
{
    ClientObject *c = self->client;
    int rc = client_enter(c);
    if (rc < 0)
        return rc;
    gkv_mapping_t *m = take(self);
    NOGIL(rc, end(c->c, m));
    client_leave(c);
    if (rc < 0)
        raise_client(c, rc);
    return rc;
}

void mapping_end_entered(MappingObject *self)
{
    if (!self->m)
        return;
    gkv_client_t *c = self->client->c;
    int (*end)(gkv_client_t *, gkv_mapping_t *) = self->writable ? gkv_abort : gkv_unmap;
    gkv_mapping_t *m = take(self);
    int rc;
    NOGIL(rc, end(c, m));
    (void)rc; /* the client is closing: nobody to tell */
}

static void mapping_dealloc(MappingObject *self)
{
    ClientObject *c = self->client;
    if (self->m) {
        gkv_mapping_t *m = take(self);
        /* In a forked child the connection is the parent's: the child leaves it alone. */
        if (c->c && CLIENT_OURS(c))
            client_defer_end(c, m);
    }
    bool viewed = self->viewed;
    Py_XDECREF(self->key);
    Py_XDECREF(self->meta);
    Py_TYPE(self)->tp_free((PyObject *)self);
    if (viewed)
        client_viewed_gone(c);
    Py_DECREF(c);
}

/* 0 when the mapping can be used, else -1 with ValueError set. */
static int check_open(MappingObject *self)
{
    if (!self->state)
        return 0;
    PyErr_Format(PyExc_ValueError, "the mapping was %s", self->state);
    return -1;
}

/* A read mapping whose pointer or view was handed out: work a framework queued on it may still
 * run when the last view goes, so the free of its import waits for the device
 * (gkv_mapping_guard). A created mapping's views end before seal() (and seal_async must not
 * wait). */
static void guard(MappingObject *self)
{
    if (self->m && self->m->on_device && !self->writable)
        gkv_mapping_guard(self->m);
}

static void mark_viewed(MappingObject *self)
{
    guard(self);
    if (!self->viewed) {
        self->viewed = true;
        self->client->viewed_alive++;
    }
}

static PyObject *mapping_unmap(MappingObject *self, PyObject *noargs)
{
    (void)noargs;
    if (self->writable) {
        PyErr_SetString(PyExc_ValueError, "a created mapping ends with seal() or abort()");
        return NULL;
    }
    if (self->state)
        Py_RETURN_NONE;
    self->state = "unmapped";
    /* Views show this memory: the lease ends once they (and this object) are gone. */
    if (self->viewed || !self->m)
        Py_RETURN_NONE;
    if (end_now(self, gkv_unmap) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* A CUDA stream argument as a handle: an int (cudaStream_t), or an object with cuda_stream
 * (PyTorch), ptr (CuPy) or handle. */
static int stream_handle(PyObject *stream, uintptr_t *out)
{
    PyObject *h = NULL;
    if (PyLong_Check(stream)) {
        h = Py_NewRef(stream);
    } else {
        const char *attrs[] = {"cuda_stream", "ptr", "handle"};
        for (size_t i = 0; i < 3 && !h; i++) {
            h = PyObject_GetAttrString(stream, attrs[i]);
            if (!h)
                PyErr_Clear();
        }
        if (!h || !PyLong_Check(h)) {
            Py_XDECREF(h);
            PyErr_Format(PyExc_TypeError,
                         "stream must be an int (cudaStream_t) or a stream object, not %.100s",
                         Py_TYPE(stream)->tp_name);
            return -1;
        }
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(h);
    Py_DECREF(h);
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    *out = (uintptr_t)v;
    return 0;
}

/* seal(wait=False): gkv_seal_async on the stream that wrote (None: the legacy default stream). */
static PyObject *seal_async(MappingObject *self, PyObject *stream)
{
    uintptr_t h = 0;
    if (stream != Py_None && stream_handle(stream, &h) < 0)
        return NULL;
    ClientObject *c = self->client;
    int rc = client_enter(c);
    if (rc < 0)
        return NULL;
    gkv_mapping_t *m = self->m;
    NOGIL(rc, gkv_seal_async(c->c, m, (void *)h));
    /* Refused before anything changed: the mapping is still writable, and still ours. */
    bool kept = rc == GKV_ENOTSUP || rc == GKV_EINVAL || rc == GKV_EBUSY;
    if (!kept) {
        take(self);
        self->state = rc == 0 ? "sealed" : "discarded (its seal failed)";
    }
    client_leave(c);
    if (rc < 0) {
        raise_client(c, rc);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* seal() once its arguments are parsed (also __exit__'s). */
static PyObject *seal(MappingObject *self, PyObject *stream)
{
    if (!self->writable) {
        PyErr_SetString(PyExc_ValueError, "only a created mapping is sealed (this one is read)");
        return NULL;
    }
    if (check_open(self) < 0)
        return NULL;
    if (!self->m)
        return raise_code(GKV_ECLOSED, "the client is closed");
    /* The writes must be finished before the value becomes visible. */
    if (self->m->on_device) {
        bool none = PyLong_Check(stream) && PyLong_AsLong(stream) == -1;
        if (PyErr_Occurred())
            return NULL;
        if (stream == Py_None) {
            if (cuda_sync_device(self->m->device) < 0)
                return NULL;
        } else if (!none) {
            uintptr_t h;
            if (stream_handle(stream, &h) < 0 || cuda_sync_stream(h) < 0)
                return NULL;
        }
    }
    int rc = end_now(self, gkv_seal);
    if (!self->m) /* the seal was sent: the mapping has ended either way */
        self->state = rc == 0 ? "sealed" : "discarded (its seal failed)";
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *mapping_seal(MappingObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"stream", "wait", NULL};
    PyObject *stream = Py_None;
    int wait = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$Op:seal", names, &stream, &wait))
        return NULL;
    if (wait)
        return seal(self, stream);
    if (!self->writable) {
        PyErr_SetString(PyExc_ValueError, "only a created mapping is sealed (this one is read)");
        return NULL;
    }
    if (check_open(self) < 0)
        return NULL;
    if (!self->m)
        return raise_code(GKV_ECLOSED, "the client is closed");
    return seal_async(self, stream);
}

static PyObject *mapping_abort(MappingObject *self, PyObject *noargs)
{
    (void)noargs;
    if (!self->writable) {
        PyErr_SetString(PyExc_ValueError, "only a created mapping is aborted (this one is read)");
        return NULL;
    }
    if (self->state && strcmp(self->state, "aborted") == 0)
        Py_RETURN_NONE;
    if (check_open(self) < 0)
        return NULL;
    self->state = "aborted";
    if (!self->m)
        Py_RETURN_NONE;
    if (end_now(self, gkv_abort) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *mapping_enter(MappingObject *self, PyObject *noargs)
{
    (void)noargs;
    if (check_open(self) < 0)
        return NULL;
    return Py_NewRef(self);
}

static PyObject *mapping_exit(MappingObject *self, PyObject *args)
{
    PyObject *type = Py_None, *value = Py_None, *tb = Py_None;
    if (!PyArg_UnpackTuple(args, "__exit__", 0, 3, &type, &value, &tb))
        return NULL;
    if (self->state)
        Py_RETURN_FALSE; /* ended inside the block already */
    PyObject *r;
    if (!self->writable) {
        r = mapping_unmap(self, NULL);
    } else if (type == Py_None) {
        r = seal(self, Py_None);
    } else {
        /* An exception is on its way out: discard the value, without masking it. */
        r = mapping_abort(self, NULL);
        if (!r) {
            PyErr_Clear();
            r = Py_NewRef(Py_None);
        }
    }
    if (!r)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

/* Getters: each raises ValueError once the mapping has ended. */
#define GETTER(name, expr)                                                                         \
    static PyObject *get_##name(MappingObject *self, void *closure)                                \
    {                                                                                              \
        (void)closure;                                                                             \
        if (check_open(self) < 0)                                                                  \
            return NULL;                                                                           \
        if (!self->m)                                                                              \
            return raise_code(GKV_ECLOSED, "the client is closed");                                \
        const gkv_mapping_t *m = self->m;                                                          \
        return expr;                                                                               \
    }
GETTER(ptr, (guard(self), PyLong_FromVoidPtr(m->ptr)))
GETTER(nbytes, PyLong_FromUnsignedLongLong(m->length))
GETTER(offset, PyLong_FromUnsignedLongLong(m->offset))
GETTER(size, PyLong_FromUnsignedLongLong(m->value_size))
GETTER(device, PyLong_FromLong(m->device))
GETTER(on_device, PyBool_FromLong(m->on_device))
GETTER(gpu_uuid, PyUnicode_FromString(m->gpu_uuid ? m->gpu_uuid : ""))
GETTER(lease, PyLong_FromUnsignedLongLong(m->lease))
GETTER(version, PyLong_FromUnsignedLongLong(m->version))

static PyObject *get_meta(MappingObject *self, void *closure)
{
    (void)closure;
    if (check_open(self) < 0)
        return NULL;
    return Py_NewRef(self->meta);
}

static PyObject *get_key(MappingObject *self, void *closure)
{
    (void)closure;
    return Py_NewRef(self->key);
}

static PyObject *get_writable(MappingObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->writable);
}

static PyObject *get_closed(MappingObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->state != NULL);
}

/* __cuda_array_interface__ (version 3): only on device memory, so that hasattr() tells. */
static PyObject *get_cai(MappingObject *self, void *closure)
{
    (void)closure;
    if (check_open(self) < 0)
        return NULL;
    if (!self->m)
        return raise_code(GKV_ECLOSED, "the client is closed");
    if (!self->m->on_device) {
        PyErr_SetString(PyExc_AttributeError,
                        "host memory has no __cuda_array_interface__: use the buffer protocol");
        return NULL;
    }
    mark_viewed(self);
    const gkv_mapping_t *m = self->m;
    /* GPU frameworks have no read-only arrays (PyTorch refuses one), so a read mapping is
     * exported as writable memory: writing through it would change the value for every reader,
     * which the documentation forbids. */
    return Py_BuildValue("{s:(K),s:s,s:(NO),s:i,s:O}", "shape", (unsigned long long)m->length,
                         "typestr", "|u1", "data", PyLong_FromVoidPtr(m->ptr), Py_False, "version",
                         3, "strides", Py_None);
}

static PyObject *mapping_dlpack_device(MappingObject *self, PyObject *noargs)
{
    (void)noargs;
    if (check_open(self) < 0)
        return NULL;
    if (!self->m)
        return raise_code(GKV_ECLOSED, "the client is closed");
    return self->m->on_device ? Py_BuildValue("(ii)", kDLCUDA, self->m->device)
                              : Py_BuildValue("(ii)", kDLCPU, 0);
}

static PyObject *mapping_dlpack(MappingObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"stream", "max_version", "dl_device", "copy", NULL};
    PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOOO:__dlpack__", names, &stream, &max_version,
                                     &dl_device, &copy))
        return NULL;
    if (check_open(self) < 0)
        return NULL;
    if (!self->m)
        return raise_code(GKV_ECLOSED, "the client is closed");
    const gkv_mapping_t *m = self->m;
    if (copy == Py_True) {
        PyErr_SetString(PyExc_BufferError, "a gpukv mapping is exported in place, never copied");
        return NULL;
    }
    if (dl_device != Py_None) {
        PyObject *mine = mapping_dlpack_device(self, NULL);
        int same = mine ? PyObject_RichCompareBool(mine, dl_device, Py_EQ) : -1;
        Py_XDECREF(mine);
        if (same < 0)
            return NULL;
        if (!same) {
            PyErr_SetString(PyExc_BufferError, "the mapping lives on another device");
            return NULL;
        }
    }
    /* The bytes are complete when MAP answers (a read mapping) or unspecified until written (a
     * created one): there is no pending work to order on the consumer's stream. */
    (void)stream;
    bool versioned = false;
    if (max_version != Py_None) {
        if (!PyTuple_Check(max_version) || PyTuple_GET_SIZE(max_version) < 1) {
            PyErr_SetString(PyExc_TypeError, "max_version must be a (major, minor) tuple");
            return NULL;
        }
        long major = PyLong_AsLong(PyTuple_GET_ITEM(max_version, 0));
        if (major == -1 && PyErr_Occurred())
            return NULL;
        versioned = major >= 1;
    }
    /* Read-only where the consumers can say so (host memory: NumPy); device memory as for the
     * CUDA array interface above. */
    PyObject *cap =
        dlpack_capsule(self, m->ptr, m->length, versioned, !self->writable && !m->on_device);
    if (cap)
        mark_viewed(self);
    return cap;
}

static int mapping_getbuffer(MappingObject *self, Py_buffer *view, int flags)
{
    static char empty[1];
    if (self->state || !self->m) {
        PyErr_Format(PyExc_BufferError, "the mapping was %s",
                     self->state ? self->state : "closed with its client");
        return -1;
    }
    if (self->m->on_device) {
        PyErr_SetString(PyExc_BufferError, "device memory: use __cuda_array_interface__ or "
                                           "DLPack (cupy.asarray, torch.from_dlpack)");
        return -1;
    }
    void *p = self->m->length ? self->m->ptr : empty;
    if (PyBuffer_FillInfo(view, (PyObject *)self, p, (Py_ssize_t)self->m->length, !self->writable,
                          flags) < 0)
        return -1;
    mark_viewed(self);
    return 0;
}

static PyBufferProcs mapping_as_buffer = {(getbufferproc)mapping_getbuffer, NULL};

static Py_ssize_t mapping_len(MappingObject *self)
{
    if (check_open(self) < 0)
        return -1;
    if (!self->m) {
        raise_code(GKV_ECLOSED, "the client is closed");
        return -1;
    }
    return (Py_ssize_t)self->m->length;
}

static PySequenceMethods mapping_as_sequence = {.sq_length = (lenfunc)mapping_len};

static PyObject *mapping_repr(MappingObject *self)
{
    if (self->state || !self->m)
        return PyUnicode_FromFormat("<gpukv.Mapping %R %s>", self->key,
                                    self->state ? self->state : "closed");
    const gkv_mapping_t *m = self->m;
    char where[32];
    if (m->on_device)
        snprintf(where, sizeof(where), "cuda:%d", m->device);
    else
        snprintf(where, sizeof(where), "host");
    return PyUnicode_FromFormat(
        "<gpukv.Mapping %R %llu bytes at %llu of %llu on %s, %s, lease %llu>", self->key,
        (unsigned long long)m->length, (unsigned long long)m->offset,
        (unsigned long long)m->value_size, where, self->writable ? "writable" : "read-only",
        (unsigned long long)m->lease);
}

static PyMethodDef mapping_methods[] = {
    {"unmap", (PyCFunction)mapping_unmap, METH_NOARGS,
     "Ends a read mapping. The caller's GPU work reading it must be finished. If a view was "
     "handed out (CUDA array interface, DLPack, buffer), the lease ends once the views and "
     "this object are gone. Idempotent."},
    {"seal", (PyCFunction)(void (*)(void))mapping_seal, METH_VARARGS | METH_KEYWORDS,
     "seal(*, stream=None, wait=True): publishes a created value atomically. The writes must be "
     "finished: stream=None waits for the whole device, a stream (int handle, torch or CuPy "
     "stream) for that stream, -1 for nothing (the caller synchronised). wait=False returns at "
     "once: the daemon publishes the value when stream (None: the legacy default stream) has "
     "done its earlier work, or discards it if this client goes away first."},
    {"abort", (PyCFunction)mapping_abort, METH_NOARGS, "Discards a created value."},
    {"__enter__", (PyCFunction)mapping_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)mapping_exit, METH_VARARGS,
     "Unmaps a read mapping; seals a created one, or aborts it when an exception leaves the "
     "block."},
    {"__dlpack__", (PyCFunction)(void (*)(void))mapping_dlpack, METH_VARARGS | METH_KEYWORDS,
     "A DLPack capsule: a 1-D uint8 tensor over the mapped bytes (host memory of a read "
     "mapping is marked read-only when the consumer takes versioned capsules)."},
    {"__dlpack_device__", (PyCFunction)mapping_dlpack_device, METH_NOARGS,
     "(2, device) for CUDA memory, (1, 0) for host memory."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef mapping_getset[] = {
    {"ptr", (getter)get_ptr, NULL,
     "Address of the first mapped byte (device or host). Taking it (or a view) guards the "
     "mapping: the free of its import waits for the device (gkv_mapping_guard).",
     NULL},
    {"nbytes", (getter)get_nbytes, NULL, "Bytes mapped.", NULL},
    {"offset", (getter)get_offset, NULL, "Where the mapped bytes start within the value.", NULL},
    {"size", (getter)get_size, NULL, "The whole value's size.", NULL},
    {"device", (getter)get_device, NULL, "This process's CUDA ordinal, -1 for host memory.", NULL},
    {"on_device", (getter)get_on_device, NULL, "True for CUDA device memory.", NULL},
    {"gpu_uuid", (getter)get_gpu_uuid, NULL, "The GPU's UUID, '' on the host backend.", NULL},
    {"lease", (getter)get_lease, NULL, "The server's lease id.", NULL},
    {"version", (getter)get_version, NULL,
     "The value's version (a daemon started with --key-versions), else 0.", NULL},
    {"meta", (getter)get_meta, NULL, "The value's metadata (bytes) or None.", NULL},
    {"key", (getter)get_key, NULL, "The key, as given (str or bytes).", NULL},
    {"writable", (getter)get_writable, NULL, "True for a created mapping.", NULL},
    {"closed", (getter)get_closed, NULL, "True once unmapped, sealed or aborted.", NULL},
    {"__cuda_array_interface__", (getter)get_cai, NULL,
     "CUDA array interface v3 (device memory only): a 1-D uint8 array. GPU frameworks have no "
     "read-only arrays: never write through a read mapping.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject MappingType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gpukv.Mapping",
    .tp_basicsize = sizeof(MappingObject),
    .tp_dealloc = (destructor)mapping_dealloc,
    .tp_repr = (reprfunc)mapping_repr,
    .tp_as_sequence = &mapping_as_sequence,
    .tp_as_buffer = &mapping_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A value mapped in place (Client.map, Client.create); a context manager.",
    .tp_methods = mapping_methods,
    .tp_getset = mapping_getset,
};
