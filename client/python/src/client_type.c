/* client_type.c: _gpukv.Client, one libgpukv connection; the commands that move bytes. */
#include "module.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Runs expr (a libgpukv call) with the GIL released. */
#define NOGIL(rc, expr)                                                                            \
    do {                                                                                           \
        Py_BEGIN_ALLOW_THREADS rc = (expr);                                                        \
        Py_END_ALLOW_THREADS                                                                       \
    } while (0)

static PyObject *raise_closed(void)
{
    return raise_code(GKV_ECLOSED, "the client is closed");
}

/* Ends the queued mappings (lock held, GIL held; releases the GIL for the I/O): the read ones
 * with gkv_unmap_batch (their imports freed, then one RELEASE), created ones with gkv_abort. */
static void end_pending(ClientObject *self)
{
    pending_end_t *list = self->pending;
    Py_ssize_t n = self->npending;
    if (!n)
        return;
    self->pending = NULL;
    self->npending = self->cap_pending = 0;
    self->pending_bytes = 0;
    gkv_client_t *c = self->c;
    Py_BEGIN_ALLOW_THREADS
    gkv_mapping_t *reads[64];
    size_t nr = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        /* Errors cannot be reported to anyone here; the server ends leases at close anyway. */
        if (list[i].op == END_ABORT) {
            (void)gkv_abort(c, list[i].m);
            continue;
        }
        reads[nr++] = list[i].m;
        if (nr == sizeof(reads) / sizeof(reads[0]) || i == n - 1) {
            (void)gkv_unmap_batch(c, reads, nr);
            nr = 0;
        }
    }
    if (nr)
        (void)gkv_unmap_batch(c, reads, nr);
    PyMem_RawFree(list);
    Py_END_ALLOW_THREADS
}

static void lock_nogil(ClientObject *self)
{
    if (!PyThread_acquire_lock(self->lock, NOWAIT_LOCK)) {
        Py_BEGIN_ALLOW_THREADS
        PyThread_acquire_lock(self->lock, WAIT_LOCK);
        Py_END_ALLOW_THREADS
    }
}

static int enter(ClientObject *self, bool map)
{
    if (!self->c || self->closing) {
        raise_closed();
        return -1;
    }
    if (!CLIENT_OURS(self)) {
        raise_code(GKV_ENOTSUP, "this client was connected by another process (before a fork): "
                                "connect again in this one");
        return -1;
    }
    lock_nogil(self);
    if (!self->c || self->closing) { /* closed by another thread while we waited */
        PyThread_release_lock(self->lock);
        raise_closed();
        return -1;
    }
    if (!map || self->npending >= PENDING_MAX || self->pending_bytes >= PENDING_BYTES)
        end_pending(self);
    return 0;
}

int client_enter(ClientObject *self)
{
    return enter(self, false);
}

int client_enter_map(ClientObject *self)
{
    return enter(self, true);
}

void client_leave(ClientObject *self)
{
    PyThread_release_lock(self->lock);
}

int client_defer_end(ClientObject *self, gkv_mapping_t *m, int op)
{
    if (self->npending == self->cap_pending) {
        Py_ssize_t cap = self->cap_pending ? self->cap_pending * 2 : 8;
        pending_end_t *p = PyMem_RawRealloc(self->pending, (size_t)cap * sizeof(*p));
        if (!p)
            return -1; /* the lease then ends with the connection */
        self->pending = p;
        self->cap_pending = cap;
    }
    self->pending[self->npending++] = (pending_end_t){m, op};
    self->pending_bytes += m->length;
    return 0;
}

/* Closes the C client (lock held): ends what is pending, then frees every import. */
static void close_c(ClientObject *self)
{
    end_pending(self);
    gkv_client_t *c = self->c;
    self->c = NULL;
    Py_BEGIN_ALLOW_THREADS
    gkv_client_close(c);
    Py_END_ALLOW_THREADS
}

void client_viewed_gone(ClientObject *self)
{
    if (--self->viewed_alive > 0 || !self->closing || !self->c)
        return;
    /* close() was called while views were alive: the last of them is gone now. */
    lock_nogil(self);
    if (self->c)
        close_c(self);
    PyThread_release_lock(self->lock);
}

static PyObject *client_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    (void)args;
    (void)kw;
    ClientObject *self = (ClientObject *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->lock = PyThread_allocate_lock();
    if (!self->lock) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    self->gen = fork_generation;
    return (PyObject *)self;
}

static int client_init(ClientObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"url", "timeout", NULL};
    PyObject *url = Py_None, *timeout = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O$O:Client", names, &url, &timeout))
        return -1;
    if (self->c || self->closing) {
        PyErr_SetString(PyExc_RuntimeError, "a Client connects once: make a new one");
        return -1;
    }
    const char *u = NULL;
    if (url != Py_None) {
        if (!PyUnicode_Check(url)) {
            PyErr_Format(PyExc_TypeError, "url must be a str, not %.100s", Py_TYPE(url)->tp_name);
            return -1;
        }
        Py_ssize_t ulen;
        if (!(u = PyUnicode_AsUTF8AndSize(url, &ulen)))
            return -1;
        if (strlen(u) != (size_t)ulen) {
            PyErr_SetString(PyExc_ValueError, "url must not contain NUL");
            return -1;
        }
        if (!*u)
            u = NULL; /* "" means the default, as in libgpukv */
    }
    uint32_t ms = 0;
    if (timeout != Py_None) {
        double t = PyFloat_AsDouble(timeout);
        if (t == -1.0 && PyErr_Occurred())
            return -1;
        if (!(t > 0) || t > 4e6) {
            PyErr_SetString(PyExc_ValueError, "timeout must be a positive number of seconds");
            return -1;
        }
        ms = (uint32_t)ceil(t * 1000.0);
    }
    gkv_client_t *c = NULL;
    int rc;
    NOGIL(rc, gkv_client_connect_timeout(u, ms, &c));
    if (rc < 0) {
        char msg[600];
        char def[512] = "";
        if (!u && gkv_default_socket(def, sizeof(def)) >= 0 && !getenv("GPUKV_URL"))
            snprintf(msg, sizeof(msg), "cannot connect to unix:%s: %s", def, gkv_strerror(rc));
        else
            snprintf(msg, sizeof(msg), "cannot connect to %s: %s",
                     u ? u : (getenv("GPUKV_URL") ? getenv("GPUKV_URL") : "?"), gkv_strerror(rc));
        raise_code(rc, msg);
        return -1;
    }
    self->c = c;
    if (u) {
        Py_INCREF(url);
        /* keep the caller's spelling */
        Py_XSETREF(self->url, url);
    } else {
        const char *env = getenv("GPUKV_URL");
        char def[520];
        char path[512];
        if (env && *env)
            snprintf(def, sizeof(def), "%s", env);
        else if (gkv_default_socket(path, sizeof(path)) >= 0)
            snprintf(def, sizeof(def), "unix:%s", path);
        else
            def[0] = 0;
        Py_XSETREF(self->url, PyUnicode_DecodeFSDefault(def));
    }
    return self->url ? 0 : -1;
}

static void client_dealloc(ClientObject *self)
{
    if (self->weakrefs)
        PyObject_ClearWeakRefs((PyObject *)self);
    /* No mapping or iterator is alive (each holds a reference to the client). */
    if (self->c && CLIENT_OURS(self)) {
        PyThread_acquire_lock(self->lock, WAIT_LOCK);
        close_c(self);
        PyThread_release_lock(self->lock);
    }
    /* In a forked child the connection is the parent's: leave it alone. */
    PyMem_RawFree(self->pending);
    if (self->lock)
        PyThread_free_lock(self->lock);
    Py_XDECREF(self->url);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *client_close(ClientObject *self, PyObject *noargs)
{
    (void)noargs;
    if (!self->c || self->closing)
        Py_RETURN_NONE;
    if (!CLIENT_OURS(self)) {
        /* A forked child's copy: the parent still uses the connection. */
        self->closing = true;
        self->c = NULL;
        Py_RETURN_NONE;
    }
    lock_nogil(self);
    self->closing = true;
    end_pending(self);
    /* End every open mapping that handed out no view; the others end with their objects. */
    MappingObject *m = self->open;
    while (m) {
        MappingObject *next = m->next;
        if (!m->viewed)
            mapping_end_entered(m);
        if (!m->state)
            m->state = "closed with its client";
        m = next;
    }
    if (self->viewed_alive == 0)
        close_c(self);
    PyThread_release_lock(self->lock);
    Py_RETURN_NONE;
}

static PyObject *client_ping(ClientObject *self, PyObject *noargs)
{
    (void)noargs;
    if (client_enter(self) < 0)
        return NULL;
    int rc;
    NOGIL(rc, gkv_ping(self->c));
    client_leave(self);
    if (rc < 0)
        return raise_client(self, rc);
    Py_RETURN_TRUE;
}

/* nx/xx/meta keywords into SET options; meta_view (when meta is given) must be released. */
static int set_opts_get(PyObject *nx, PyObject *xx, PyObject *meta, gkv_set_opts_t *o,
                        Py_buffer *meta_view, bool *has_meta)
{
    *o = (gkv_set_opts_t){0};
    *has_meta = false;
    int n = PyObject_IsTrue(nx), x = PyObject_IsTrue(xx);
    if (n < 0 || x < 0)
        return -1;
    if (n && x) {
        PyErr_SetString(PyExc_ValueError, "nx and xx exclude each other");
        return -1;
    }
    o->flags = (n ? GKV_SET_NX : 0) | (x ? GKV_SET_XX : 0);
    if (meta != Py_None) {
        if (PyUnicode_Check(meta)) {
            Py_ssize_t len;
            const char *p = PyUnicode_AsUTF8AndSize(meta, &len);
            if (!p)
                return -1;
            o->meta = p;
            o->meta_len = (size_t)len;
            return 0;
        }
        if (PyObject_GetBuffer(meta, meta_view, PyBUF_SIMPLE) != 0) {
            PyErr_Format(PyExc_TypeError, "meta must be bytes-like or str, not %.100s",
                         Py_TYPE(meta)->tp_name);
            return -1;
        }
        *has_meta = true;
        o->meta = meta_view->buf;
        o->meta_len = (size_t)meta_view->len;
    }
    return 0;
}

static PyObject *client_set(ClientObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"key", "value", "nx", "xx", "meta", NULL};
    PyObject *key, *value, *nx = Py_False, *xx = Py_False, *meta = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|$OOO:set", names, &key, &value, &nx, &xx,
                                     &meta))
        return NULL;
    key_arg_t k;
    Py_buffer v, mv;
    bool has_meta, has_v = false;
    gkv_set_opts_t o;
    const char *vp;
    Py_ssize_t vlen;
    if (key_get(key, &k) < 0)
        return NULL;
    if (set_opts_get(nx, xx, meta, &o, &mv, &has_meta) < 0)
        goto fail_key;
    if (PyUnicode_Check(value)) {
        if (!(vp = PyUnicode_AsUTF8AndSize(value, &vlen)))
            goto fail_meta;
    } else if (PyObject_CheckBuffer(value)) {
        if (PyObject_GetBuffer(value, &v, PyBUF_C_CONTIGUOUS) != 0) {
            PyErr_Clear();
            PyErr_SetString(PyExc_ValueError, "value must be C-contiguous memory");
            goto fail_meta;
        }
        has_v = true;
        vp = v.buf;
        vlen = v.len;
    } else {
        PyErr_Format(PyExc_TypeError,
                     "value must be bytes-like, str or a device array, not %.100s",
                     Py_TYPE(value)->tp_name);
        goto fail_meta;
    }
    int rc = client_enter(self);
    if (rc == 0) {
        NOGIL(rc, gkv_set(self->c, k.p, (size_t)k.len, vp, (size_t)vlen, &o));
        client_leave(self);
        if (rc < 0)
            raise_client(self, rc);
    }
    if (has_v)
        PyBuffer_Release(&v);
    if (has_meta)
        PyBuffer_Release(&mv);
    key_release(&k);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
fail_meta:
    if (has_meta)
        PyBuffer_Release(&mv);
fail_key:
    key_release(&k);
    return NULL;
}

static PyObject *client_set_from_device(ClientObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"key", "ptr", "nbytes", "nx", "xx", "meta", NULL};
    PyObject *key, *nx = Py_False, *xx = Py_False, *meta = Py_None;
    unsigned long long ptr, nbytes;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OKK|$OOO:_set_from_device", names, &key, &ptr,
                                     &nbytes, &nx, &xx, &meta))
        return NULL;
    if (!ptr && nbytes) {
        PyErr_SetString(PyExc_ValueError, "a NULL device pointer");
        return NULL;
    }
    key_arg_t k;
    Py_buffer mv;
    bool has_meta;
    gkv_set_opts_t o;
    if (key_get(key, &k) < 0)
        return NULL;
    if (set_opts_get(nx, xx, meta, &o, &mv, &has_meta) < 0) {
        key_release(&k);
        return NULL;
    }
    int rc = client_enter(self);
    if (rc == 0) {
        NOGIL(rc, gkv_set_from_device(self->c, k.p, (size_t)k.len, (const void *)(uintptr_t)ptr,
                                      (size_t)nbytes, &o));
        client_leave(self);
        if (rc < 0)
            raise_client(self, rc);
    }
    if (has_meta)
        PyBuffer_Release(&mv);
    key_release(&k);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* gkv_alloc_fn: a bytes object of the value's size (taking the GIL for it), or a 1-byte
 * scratch when the caller asked for no bytes. */
typedef struct {
    PyObject *obj;
    bool empty;
    char scratch[1];
} bytes_sink_t;

static void *alloc_bytes(void *arg, size_t index, uint64_t len)
{
    (void)index;
    bytes_sink_t *s = arg;
    if (s->empty)
        return s->scratch;
    if (len > (uint64_t)PY_SSIZE_T_MAX)
        return NULL;
    PyGILState_STATE g = PyGILState_Ensure();
    s->obj = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)len);
    void *p = s->obj ? PyBytes_AS_STRING(s->obj) : NULL;
    if (!p)
        PyErr_Clear(); /* reported as NoMemory by the caller */
    PyGILState_Release(g);
    return p;
}

/* GET key [range] into a new bytes object; *info gets what the server said. Returns the bytes
 * (b"" when the range asked for none) or NULL with an exception. */
static PyObject *get_bytes(ClientObject *self, PyObject *key, PyObject *off, PyObject *len,
                           PyObject *suf, gkv_value_info_t *info, PyObject **meta)
{
    key_arg_t k;
    gkv_range_t r;
    bytes_sink_t sink = {0};
    if (range_get(off, len, suf, &r, &sink.empty) < 0 || key_get(key, &k) < 0)
        return NULL;
    int rc = client_enter(self);
    if (rc == 0) {
        NOGIL(rc, gkv_get_with(self->c, k.p, (size_t)k.len, &r, alloc_bytes, &sink, info));
        if (rc == 0 && meta) {
            *meta = info->meta ? PyBytes_FromStringAndSize(info->meta, (Py_ssize_t)info->meta_len)
                               : Py_NewRef(Py_None);
            if (!*meta)
                rc = GKV_ENOMEM;
        }
        client_leave(self);
    }
    key_release(&k);
    if (rc < 0) {
        Py_XDECREF(sink.obj);
        if (!PyErr_Occurred())
            raise_client(self, rc);
        return NULL;
    }
    if (sink.empty) {
        /* One byte was asked for to check the key and offset; none is returned, from where the
         * caller's range starts. */
        if (r.suffix)
            info->offset = info->size;
        info->length = 0;
        return PyBytes_FromStringAndSize(NULL, 0);
    }
    return sink.obj;
}

static PyObject *client_get(ClientObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    PyObject *key, *off, *len, *suf;
    if (parse_key_range(args, nargs, kwnames, "get", &key, &off, &len, &suf) < 0)
        return NULL;
    gkv_value_info_t info;
    return get_bytes(self, key, off, len, suf, &info, NULL);
}

static PyTypeObject ValueType;
static PyStructSequence_Field value_fields[] = {
    {"data", "the bytes read"},
    {"meta", "the value's metadata (bytes), or None"},
    {"size", "the whole value's size"},
    {"offset", "where data starts within the value"},
    {NULL, NULL},
};
static PyStructSequence_Desc value_desc = {"gpukv.Value", "A value read with its metadata.",
                                           value_fields, 4};

static PyObject *client_get_value(ClientObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames)
{
    PyObject *key, *off, *len, *suf, *meta = NULL;
    if (parse_key_range(args, nargs, kwnames, "get_value", &key, &off, &len, &suf) < 0)
        return NULL;
    gkv_value_info_t info;
    PyObject *data = get_bytes(self, key, off, len, suf, &info, &meta);
    if (!data)
        return NULL;
    PyObject *v = PyStructSequence_New(&ValueType);
    if (!v) {
        Py_DECREF(data);
        Py_DECREF(meta);
        return NULL;
    }
    PyStructSequence_SET_ITEM(v, 0, data);
    PyStructSequence_SET_ITEM(v, 1, meta);
    PyStructSequence_SET_ITEM(v, 2, PyLong_FromUnsignedLongLong(info.size));
    PyStructSequence_SET_ITEM(v, 3, PyLong_FromUnsignedLongLong(info.offset));
    if (!PyStructSequence_GET_ITEM(v, 2) || !PyStructSequence_GET_ITEM(v, 3)) {
        Py_DECREF(v);
        return NULL;
    }
    return v;
}

static PyObject *client_get_into(ClientObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"key", "buffer", "offset", "length", "suffix", NULL};
    PyObject *key, *buffer, *off = Py_None, *len = Py_None, *suf = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|$OOO:get_into", names, &key, &buffer, &off,
                                     &len, &suf))
        return NULL;
    gkv_range_t r;
    bool empty;
    key_arg_t k;
    Py_buffer b;
    if (range_get(off, len, suf, &r, &empty) < 0)
        return NULL;
    if (PyObject_GetBuffer(buffer, &b, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) != 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "buffer must be writable, C-contiguous memory, not %.100s",
                     Py_TYPE(buffer)->tp_name);
        return NULL;
    }
    if (key_get(key, &k) < 0) {
        PyBuffer_Release(&b);
        return NULL;
    }
    gkv_value_info_t info = {0};
    char scratch[1];
    int rc = client_enter(self);
    if (rc == 0) {
        NOGIL(rc, gkv_get(self->c, k.p, (size_t)k.len, &r, empty ? scratch : b.buf,
                          empty ? sizeof(scratch) : (size_t)b.len, &info));
        client_leave(self);
        if (rc == GKV_ENOSPACE) {
            char msg[160];
            snprintf(msg, sizeof(msg), "%llu bytes do not fit in a buffer of %zd",
                     (unsigned long long)info.length, b.len);
            raise_code(rc, msg);
        } else if (rc < 0) {
            raise_client(self, rc);
        }
    }
    PyBuffer_Release(&b);
    key_release(&k);
    if (rc < 0)
        return NULL;
    return PyLong_FromUnsignedLongLong(empty ? 0 : info.length);
}

static PyObject *client_get_to_device(ClientObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"key", "ptr", "cap", "offset", "length", "suffix", NULL};
    PyObject *key, *off = Py_None, *len = Py_None, *suf = Py_None;
    unsigned long long ptr, cap;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OKK|$OOO:_get_to_device", names, &key, &ptr, &cap,
                                     &off, &len, &suf))
        return NULL;
    gkv_range_t r;
    bool empty;
    key_arg_t k;
    if (range_get(off, len, suf, &r, &empty) < 0 || key_get(key, &k) < 0)
        return NULL;
    gkv_value_info_t info = {0};
    int rc = client_enter(self);
    if (rc == 0) {
        if (empty) {
            /* Nothing to copy: check the key and the offset through host memory. */
            bytes_sink_t sink = {.empty = true};
            NOGIL(rc, gkv_get_with(self->c, k.p, (size_t)k.len, &r, alloc_bytes, &sink, &info));
        } else {
            NOGIL(rc, gkv_get_to_device(self->c, k.p, (size_t)k.len, &r,
                                        (void *)(uintptr_t)ptr, (size_t)cap, &info));
        }
        client_leave(self);
        if (rc == GKV_ENOSPACE) {
            char msg[160];
            snprintf(msg, sizeof(msg), "%llu bytes do not fit in a device buffer of %llu",
                     (unsigned long long)info.length, cap);
            raise_code(rc, msg);
        } else if (rc < 0) {
            raise_client(self, rc);
        }
    }
    key_release(&k);
    if (rc < 0)
        return NULL;
    return PyLong_FromUnsignedLongLong(empty ? 0 : info.length);
}

/* Allocation for _mget: a bytes object per found item (kept in objs[index]), a 1-byte scratch
 * for items that asked for no bytes. */
typedef struct {
    PyObject **objs;
    const bool *empty;
    char scratch[1];
} mget_sink_t;

static void *alloc_item(void *arg, size_t index, uint64_t len)
{
    mget_sink_t *s = arg;
    if (s->empty[index])
        return s->scratch;
    if (len > (uint64_t)PY_SSIZE_T_MAX)
        return NULL;
    PyGILState_STATE g = PyGILState_Ensure();
    s->objs[index] = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)len);
    void *p = s->objs[index] ? PyBytes_AS_STRING(s->objs[index]) : NULL;
    if (!p)
        PyErr_Clear();
    PyGILState_Release(g);
    return p;
}

/* _mget(keys, ranges): keys a list of at most 4096 keys; ranges None or a list of the same
 * length whose items are None or (offset, length, suffix) with None for absent parts. Returns a
 * list: bytes for each item found, None for each missing; any other item error raises. */
static PyObject *client_mget(ClientObject *self, PyObject *args)
{
    PyObject *keys, *ranges;
    if (!PyArg_ParseTuple(args, "O!O:_mget", &PyList_Type, &keys, &ranges))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(keys);
    if (n == 0)
        return PyList_New(0);
    if (n > 4096) {
        PyErr_SetString(PyExc_ValueError, "at most 4096 items per request");
        return NULL;
    }
    if (ranges != Py_None && (!PyList_Check(ranges) || PyList_GET_SIZE(ranges) != n)) {
        PyErr_SetString(PyExc_ValueError, "ranges must be a list as long as keys");
        return NULL;
    }
    gkv_mget_item_t *items = PyMem_Calloc((size_t)n, sizeof(*items));
    key_arg_t *ks = PyMem_Calloc((size_t)n, sizeof(*ks));
    bool *empty = PyMem_Calloc((size_t)n, sizeof(*empty));
    PyObject **objs = PyMem_Calloc((size_t)n, sizeof(*objs));
    PyObject *out = NULL;
    Py_ssize_t got = 0;
    int rc = 0;
    if (!items || !ks || !empty || !objs) {
        PyErr_NoMemory();
        goto done;
    }
    for (; got < n; got++) {
        if (key_get(PyList_GET_ITEM(keys, got), &ks[got]) < 0)
            goto done;
        items[got].key = ks[got].p;
        items[got].klen = (size_t)ks[got].len;
        items[got].range.length = GKV_TO_END;
        PyObject *rg = ranges == Py_None ? Py_None : PyList_GET_ITEM(ranges, got);
        if (rg != Py_None) {
            if (!PyTuple_Check(rg) || PyTuple_GET_SIZE(rg) != 3) {
                PyErr_SetString(PyExc_TypeError, "a range is None or (offset, length, suffix)");
                got++;
                goto done;
            }
            if (range_get(PyTuple_GET_ITEM(rg, 0), PyTuple_GET_ITEM(rg, 1),
                          PyTuple_GET_ITEM(rg, 2), &items[got].range, &empty[got]) < 0) {
                got++;
                goto done;
            }
        }
    }
    mget_sink_t sink = {.objs = objs, .empty = empty};
    if ((rc = client_enter(self)) < 0)
        goto done;
    NOGIL(rc, gkv_mget_with(self->c, items, (size_t)n, alloc_item, &sink));
    client_leave(self);
    if (rc < 0) {
        raise_client(self, rc);
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int st = items[i].status;
        if (st < 0 && st != GKV_ENOTFOUND) {
            char msg[200];
            snprintf(msg, sizeof(msg), "item %zd: %s", i, gkv_strerror(st));
            raise_code(st, msg);
            goto done;
        }
    }
    if (!(out = PyList_New(n)))
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o;
        if (items[i].status == GKV_ENOTFOUND)
            o = Py_NewRef(Py_None);
        else if (empty[i])
            o = PyBytes_FromStringAndSize(NULL, 0);
        else
            o = objs[i], objs[i] = NULL;
        if (!o) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, i, o);
    }
done:
    for (Py_ssize_t i = 0; i < got; i++)
        key_release(&ks[i]);
    for (Py_ssize_t i = 0; objs && i < n; i++)
        Py_XDECREF(objs[i]);
    PyMem_Free(items);
    PyMem_Free(ks);
    PyMem_Free(empty);
    PyMem_Free(objs);
    return out;
}

/* EXISTS or DEL of a list of at most 4096 keys; returns the count. */
static PyObject *keys_op(ClientObject *self, PyObject *keys, bool del)
{
    if (!PyList_Check(keys)) {
        PyErr_SetString(PyExc_TypeError, "keys must be a list");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(keys), got = 0;
    if (n == 0)
        return PyLong_FromLong(0);
    if (n > 4096) {
        PyErr_SetString(PyExc_ValueError, "at most 4096 keys per request");
        return NULL;
    }
    key_arg_t *ks = PyMem_Calloc((size_t)n, sizeof(*ks));
    const void **ps = PyMem_Calloc((size_t)n, sizeof(*ps));
    size_t *lens = PyMem_Calloc((size_t)n, sizeof(*lens));
    PyObject *out = NULL;
    if (!ks || !ps || !lens) {
        PyErr_NoMemory();
        goto done;
    }
    for (; got < n; got++) {
        if (key_get(PyList_GET_ITEM(keys, got), &ks[got]) < 0)
            goto done;
        ps[got] = ks[got].p;
        lens[got] = (size_t)ks[got].len;
    }
    if (client_enter(self) < 0)
        goto done;
    int64_t r;
    NOGIL(r, del ? gkv_del(self->c, ps, lens, (size_t)n) : gkv_exists(self->c, ps, lens, (size_t)n));
    client_leave(self);
    out = r < 0 ? raise_client(self, (int)r) : PyLong_FromLongLong(r);
done:
    for (Py_ssize_t i = 0; i < got; i++)
        key_release(&ks[i]);
    PyMem_Free(ks);
    PyMem_Free(ps);
    PyMem_Free(lens);
    return out;
}

static PyObject *client_exists(ClientObject *self, PyObject *keys)
{
    return keys_op(self, keys, false);
}

static PyObject *client_delete(ClientObject *self, PyObject *keys)
{
    return keys_op(self, keys, true);
}

static PyObject *client_getsize(ClientObject *self, PyObject *key)
{
    key_arg_t k;
    if (key_get(key, &k) < 0)
        return NULL;
    uint64_t size = 0;
    int rc = client_enter(self);
    if (rc == 0) {
        NOGIL(rc, gkv_getsize(self->c, k.p, (size_t)k.len, &size));
        client_leave(self);
        if (rc < 0)
            raise_client(self, rc);
    }
    key_release(&k);
    return rc < 0 ? NULL : PyLong_FromUnsignedLongLong(size);
}

/* The bytes of a prefix argument (may be empty, unlike a key). */
static int prefix_get(PyObject *obj, key_arg_t *k)
{
    if ((PyUnicode_Check(obj) && PyUnicode_GET_LENGTH(obj) == 0) ||
        (PyBytes_Check(obj) && PyBytes_GET_SIZE(obj) == 0)) {
        memset(k, 0, sizeof(*k));
        k->p = "";
        return 0;
    }
    return key_get(obj, k);
}

static PyObject *client_getsize_prefix(ClientObject *self, PyObject *prefix)
{
    key_arg_t k;
    if (prefix_get(prefix, &k) < 0)
        return NULL;
    uint64_t bytes = 0, count = 0;
    int rc = client_enter(self);
    if (rc == 0) {
        NOGIL(rc, gkv_getsize_prefix(self->c, k.p, (size_t)k.len, &bytes, &count));
        client_leave(self);
        if (rc < 0)
            raise_client(self, rc);
    }
    key_release(&k);
    return rc < 0 ? NULL : Py_BuildValue("KK", (unsigned long long)bytes, (unsigned long long)count);
}

static PyObject *client_flush(ClientObject *self, PyObject *noargs)
{
    (void)noargs;
    if (client_enter(self) < 0)
        return NULL;
    int rc;
    NOGIL(rc, gkv_flush(self->c));
    client_leave(self);
    if (rc < 0)
        return raise_client(self, rc);
    Py_RETURN_NONE;
}

static PyObject *client_info_text(ClientObject *self, PyObject *noargs)
{
    (void)noargs;
    if (client_enter(self) < 0)
        return NULL;
    char *text = NULL;
    int rc;
    NOGIL(rc, gkv_info(self->c, &text));
    client_leave(self);
    if (rc < 0)
        return raise_client(self, rc);
    PyObject *s = PyUnicode_DecodeUTF8(text, (Py_ssize_t)strlen(text), "replace");
    gkv_free(text);
    return s;
}

static PyObject *client_list(ClientObject *self, PyObject *args)
{
    PyObject *prefix;
    int delim;
    unsigned int page;
    if (!PyArg_ParseTuple(args, "OiI:_list", &prefix, &delim, &page))
        return NULL;
    if (delim < 0 || delim > 255 || page > 10000) {
        PyErr_SetString(PyExc_ValueError, "delimiter is one byte, page at most 10000");
        return NULL;
    }
    key_arg_t k;
    if (prefix_get(prefix, &k) < 0)
        return NULL;
    gkv_list_t *it = NULL;
    int rc = client_enter(self);
    if (rc == 0) {
        NOGIL(rc, gkv_list_open(self->c, k.p, (size_t)k.len, delim, page, &it));
        client_leave(self);
        if (rc < 0)
            raise_client(self, rc);
    }
    key_release(&k);
    return rc < 0 ? NULL : list_iter_new(self, it);
}

/* The key for a Mapping's `key`: the caller's object when it cannot change (str, bytes), else
 * a bytes copy. */
static PyObject *key_object(PyObject *key, const key_arg_t *k)
{
    if (PyUnicode_CheckExact(key) || PyBytes_CheckExact(key))
        return Py_NewRef(key);
    return PyBytes_FromStringAndSize(k->p, k->len);
}

static PyObject *client_map(ClientObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    PyObject *key, *off, *len, *suf;
    if (parse_key_range(args, nargs, kwnames, "map", &key, &off, &len, &suf) < 0)
        return NULL;
    gkv_range_t r;
    bool empty;
    key_arg_t k;
    if (range_get(off, len, suf, &r, &empty) < 0)
        return NULL;
    if (empty) {
        PyErr_SetString(PyExc_ValueError, "an empty range cannot be mapped (length=0, suffix=0)");
        return NULL;
    }
    if (key_get(key, &k) < 0)
        return NULL;
    gkv_mapping_t *m = NULL;
    int rc = client_enter_map(self);
    if (rc == 0) {
        NOGIL(rc, gkv_map(self->c, k.p, (size_t)k.len, &r, &m));
        client_leave(self);
    }
    PyObject *out = NULL;
    if (rc == 0) {
        PyObject *kb = key_object(key, &k);
        out = kb ? mapping_new(self, m, kb, false) : NULL;
        Py_XDECREF(kb);
        if (!out) /* the C mapping is ended at the next call */
            client_defer_end(self, m, END_UNMAP);
    } else if (!PyErr_Occurred()) {
        raise_client(self, rc);
    }
    key_release(&k);
    return out;
}

static PyObject *client_create(ClientObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"key", "nbytes", "nx", "xx", "meta", NULL};
    PyObject *key, *nbytes, *nx = Py_False, *xx = Py_False, *meta = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|$OOO:create", names, &key, &nbytes, &nx, &xx,
                                     &meta))
        return NULL;
    if (!PyLong_Check(nbytes) || PyBool_Check(nbytes)) {
        PyErr_Format(PyExc_TypeError, "nbytes must be an int, not %.100s",
                     Py_TYPE(nbytes)->tp_name);
        return NULL;
    }
    long long size = PyLong_AsLongLong(nbytes);
    if (size == -1 && PyErr_Occurred())
        return NULL;
    if (size < 0) {
        PyErr_SetString(PyExc_ValueError, "nbytes must not be negative");
        return NULL;
    }
    key_arg_t k;
    Py_buffer mv;
    bool has_meta;
    gkv_set_opts_t o;
    if (key_get(key, &k) < 0)
        return NULL;
    if (set_opts_get(nx, xx, meta, &o, &mv, &has_meta) < 0) {
        key_release(&k);
        return NULL;
    }
    gkv_mapping_t *m = NULL;
    int rc = client_enter_map(self);
    if (rc == 0) {
        NOGIL(rc, gkv_create(self->c, k.p, (size_t)k.len, (uint64_t)size, &o, &m));
        client_leave(self);
    }
    PyObject *out = NULL;
    if (rc == 0) {
        PyObject *kb = key_object(key, &k);
        out = kb ? mapping_new(self, m, kb, true) : NULL;
        Py_XDECREF(kb);
        if (!out)
            client_defer_end(self, m, END_ABORT);
    } else if (!PyErr_Occurred()) {
        raise_client(self, rc);
    }
    if (has_meta)
        PyBuffer_Release(&mv);
    key_release(&k);
    return out;
}

static PyObject *client_get_url(ClientObject *self, void *closure)
{
    (void)closure;
    return Py_NewRef(self->url ? self->url : Py_None);
}

static PyObject *client_get_closed(ClientObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(!self->c || self->closing);
}

/* The HELLO strings most asked for, without building server_info's dict. */
static PyObject *client_get_zero_copy(ClientObject *self, void *closure)
{
    (void)closure;
    if (!self->c || self->closing)
        return raise_closed();
    return PyUnicode_FromString(gkv_client_info(self->c)->zero_copy);
}

static PyObject *client_get_backend(ClientObject *self, void *closure)
{
    (void)closure;
    if (!self->c || self->closing)
        return raise_closed();
    return PyUnicode_FromString(gkv_client_info(self->c)->backend);
}

static PyObject *client_get_server_info(ClientObject *self, void *closure)
{
    (void)closure;
    if (!self->c || self->closing)
        return raise_closed();
    const gkv_server_info_t *in = gkv_client_info(self->c);
    return Py_BuildValue("{s:I,s:s,s:s,s:i,s:s,s:s,s:s,s:K,s:K,s:K}", "protocol", in->protocol,
                         "server", in->server, "backend", in->backend, "device", in->device,
                         "gpu_uuid", in->gpu_uuid, "zero_copy", in->zero_copy, "zero_copy_why",
                         in->zero_copy_why, "max_key", (unsigned long long)in->max_key,
                         "max_value", (unsigned long long)in->max_value, "max_meta",
                         (unsigned long long)in->max_meta);
}

static PyObject *client_set_timeout(ClientObject *self, PyObject *arg)
{
    uint32_t ms = 0;
    if (arg != Py_None) {
        double t = PyFloat_AsDouble(arg);
        if (t == -1.0 && PyErr_Occurred())
            return NULL;
        if (!(t > 0) || t > 4e6) {
            PyErr_SetString(PyExc_ValueError, "timeout must be a positive number of seconds");
            return NULL;
        }
        ms = (uint32_t)ceil(t * 1000.0);
    }
    if (client_enter(self) < 0)
        return NULL;
    int rc = gkv_client_set_timeout(self->c, ms);
    client_leave(self);
    if (rc < 0)
        return raise_client(self, rc);
    Py_RETURN_NONE;
}

static PyMethodDef client_methods[] = {
    {"close", (PyCFunction)client_close, METH_NOARGS,
     "Closes the connection. Mappings still open are ended; those that handed out views end "
     "when the last view is gone. Idempotent."},
    {"ping", (PyCFunction)client_ping, METH_NOARGS, "Checks that the server answers (True)."},
    {"set", (PyCFunction)(void (*)(void))client_set, METH_VARARGS | METH_KEYWORDS,
     "set(key, value, *, nx=False, xx=False, meta=None): stores bytes-like value (or str, as "
     "UTF-8) under key, atomically."},
    {"_set_from_device", (PyCFunction)(void (*)(void))client_set_from_device,
     METH_VARARGS | METH_KEYWORDS, "Stores nbytes of device memory at ptr (gkv_set_from_device)."},
    {"get", (PyCFunction)(void (*)(void))client_get, METH_FASTCALL | METH_KEYWORDS,
     "get(key, *, offset=None, length=None, suffix=None) -> bytes: the value, or a byte range "
     "of it. Raises NotFound."},
    {"get_value", (PyCFunction)(void (*)(void))client_get_value, METH_FASTCALL | METH_KEYWORDS,
     "get_value(key, *, offset=None, length=None, suffix=None) -> Value(data, meta, size, "
     "offset)."},
    {"get_into", (PyCFunction)(void (*)(void))client_get_into, METH_VARARGS | METH_KEYWORDS,
     "get_into(key, buffer, *, offset=None, length=None, suffix=None) -> int: reads into a "
     "writable buffer; returns the bytes stored (NoSpace if they do not fit)."},
    {"_get_to_device", (PyCFunction)(void (*)(void))client_get_to_device,
     METH_VARARGS | METH_KEYWORDS, "Reads into cap bytes of device memory at ptr."},
    {"_mget", (PyCFunction)client_mget, METH_VARARGS, "One MGET of at most 4096 items."},
    {"_exists", (PyCFunction)client_exists, METH_O, "EXISTS of a list of at most 4096 keys."},
    {"_delete", (PyCFunction)client_delete, METH_O, "DEL of a list of at most 4096 keys."},
    {"getsize", (PyCFunction)client_getsize, METH_O,
     "getsize(key) -> int: the value's size. Raises NotFound."},
    {"_getsize_prefix", (PyCFunction)client_getsize_prefix, METH_O,
     "(bytes, count) of the keys under a prefix."},
    {"flush", (PyCFunction)client_flush, METH_NOARGS, "Deletes every key of the server."},
    {"_info", (PyCFunction)client_info_text, METH_NOARGS, "INFO as text."},
    {"_list", (PyCFunction)client_list, METH_VARARGS, "A LIST iterator: (prefix, delim, page)."},
    {"map", (PyCFunction)(void (*)(void))client_map, METH_FASTCALL | METH_KEYWORDS,
     "map(key, *, offset=None, length=None, suffix=None) -> Mapping: leases the value (or a "
     "range) for reading in place (local connections only)."},
    {"create", (PyCFunction)(void (*)(void))client_create, METH_VARARGS | METH_KEYWORDS,
     "create(key, nbytes, *, nx=False, xx=False, meta=None) -> Mapping: a new value, writable "
     "in place and invisible until sealed (local connections only)."},
    {"set_timeout", (PyCFunction)client_set_timeout, METH_O,
     "set_timeout(seconds or None): bounds every wait for the server from now on."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef client_getset[] = {
    {"url", (getter)client_get_url, NULL, "The server's URL.", NULL},
    {"closed", (getter)client_get_closed, NULL, "True once closed.", NULL},
    {"server_info", (getter)client_get_server_info, NULL,
     "What the server said in HELLO (a dict).", NULL},
    {"zero_copy", (getter)client_get_zero_copy, NULL,
     "The zero-copy mechanism granted to this connection (cuda-pool-fd, host-memfd), or none.",
     NULL},
    {"backend", (getter)client_get_backend, NULL, "The server's memory backend: cuda or host.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject ClientType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gpukv._gpukv.Client",
    .tp_basicsize = sizeof(ClientObject),
    .tp_dealloc = (destructor)client_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Client(url=None, *, timeout=None): one connection to a gpukvd.",
    .tp_methods = client_methods,
    .tp_getset = client_getset,
    .tp_init = (initproc)client_init,
    .tp_new = client_new,
    .tp_weaklistoffset = offsetof(ClientObject, weakrefs),
};

/* Called from module init: the Value struct sequence type. */
int client_types_ready(PyObject *module)
{
    if (PyStructSequence_InitType2(&ValueType, &value_desc) < 0)
        return -1;
    return PyModule_AddObjectRef(module, "Value", (PyObject *)&ValueType);
}
