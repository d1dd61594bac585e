/* client_values.c: the Client calls that move a value's bytes: set (host bytes or device
 * memory), get (into a new bytes object, a caller's buffer or device memory), mget. */
#include "client.h"

#include <stdio.h>
#include <string.h>

int set_opts_get(PyObject *nx, PyObject *xx, PyObject *meta, gkv_set_opts_t *o,
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

PyObject *client_set(ClientObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"key", "value", "nx", "xx", "meta", "ttl_ms", "gpu", NULL};
    PyObject *key, *value, *nx = Py_False, *xx = Py_False, *meta = Py_None;
    unsigned long long ttl_ms = 0;
    int gpu = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|$OOOKi:set", names, &key, &value, &nx, &xx,
                                     &meta, &ttl_ms, &gpu))
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
    o.ttl_ms = ttl_ms;
    o.gpu = gpu >= 0 ? GKV_GPU(gpu) : 0;
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
    int rc;
    CLIENT_CALL(client_enter, self, rc, gkv_set(self->c, k.p, (size_t)k.len, vp, (size_t)vlen, &o));
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

PyObject *client_set_from_device(ClientObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"key", "ptr", "nbytes", "nx", "xx", "meta", "ttl_ms", "gpu", NULL};
    PyObject *key, *nx = Py_False, *xx = Py_False, *meta = Py_None;
    unsigned long long ptr, nbytes, ttl_ms = 0;
    int gpu = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OKK|$OOOKi:_set_from_device", names, &key, &ptr,
                                     &nbytes, &nx, &xx, &meta, &ttl_ms, &gpu))
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
    o.ttl_ms = ttl_ms;
    o.gpu = gpu >= 0 ? GKV_GPU(gpu) : 0;
    int rc;
    CLIENT_CALL(client_enter, self, rc,
                gkv_set_from_device(self->c, k.p, (size_t)k.len, (const void *)(uintptr_t)ptr,
                                    (size_t)nbytes, &o));
    if (has_meta)
        PyBuffer_Release(&mv);
    key_release(&k);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* _set_many_from_device(keys, ptrs, nbytes, *, nx, xx, meta, ttl_ms, gpu): pipelined CREATEs,
 * copies and SEALs (gkv_set_many_from_device) of at most 4096 device buffers; keys a list,
 * ptrs and nbytes lists of ints as long. Returns a list with 0 or the negative error code of
 * each item. */
PyObject *client_set_many_from_device(ClientObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"keys", "ptrs", "nbytes", "nx", "xx", "meta", "ttl_ms", "gpu", NULL};
    PyObject *keys, *ptrs, *sizes, *nx = Py_False, *xx = Py_False, *meta = Py_None;
    unsigned long long ttl_ms = 0;
    int gpu = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O!O!|$OOOKi:_set_many_from_device", names,
                                     &PyList_Type, &keys, &PyList_Type, &ptrs, &PyList_Type,
                                     &sizes, &nx, &xx, &meta, &ttl_ms, &gpu))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(keys);
    if (PyList_GET_SIZE(ptrs) != n || PyList_GET_SIZE(sizes) != n) {
        PyErr_SetString(PyExc_ValueError, "keys, ptrs and nbytes differ in length");
        return NULL;
    }
    if (n == 0)
        return PyList_New(0);
    batch_arg_t b;
    if (batch_get(keys, Py_None, &b) < 0)
        return NULL;
    PyObject *out = NULL;
    Py_buffer mv;
    bool has_meta = false;
    gkv_set_opts_t o;
    gkv_set_item_t *items = PyMem_Calloc((size_t)n, sizeof(*items));
    if (!items) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned long long ptr = PyLong_AsUnsignedLongLong(PyList_GET_ITEM(ptrs, i));
        unsigned long long len = PyLong_AsUnsignedLongLong(PyList_GET_ITEM(sizes, i));
        if (PyErr_Occurred())
            goto done;
        if (!ptr && len) {
            PyErr_SetString(PyExc_ValueError, "a NULL device pointer");
            goto done;
        }
        items[i] = (gkv_set_item_t){.key = b.keys[i].p, .klen = (size_t)b.keys[i].len,
                                    .dptr = (const void *)(uintptr_t)ptr, .len = (size_t)len};
    }
    if (set_opts_get(nx, xx, meta, &o, &mv, &has_meta) < 0)
        goto done;
    o.ttl_ms = ttl_ms;
    o.gpu = gpu >= 0 ? GKV_GPU(gpu) : 0;
    int rc;
    CLIENT_CALL(client_enter, self, rc, gkv_set_many_from_device(self->c, items, (size_t)n, &o));
    if (rc < 0)
        goto done;
    if (!(out = PyList_New(n)))
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *st = PyLong_FromLong(items[i].status);
        if (!st) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, i, st);
    }
done:
    if (has_meta)
        PyBuffer_Release(&mv);
    PyMem_Free(items);
    batch_release(&b);
    return out;
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
                           PyObject *suf, PyObject *wait, PyObject *after, gkv_value_info_t *info,
                           PyObject **meta)
{
    key_arg_t k;
    gkv_range_t r;
    wait_arg_t wa;
    bytes_sink_t sink = {0};
    if (range_get(off, len, suf, &r, &sink.empty) < 0 || wait_args(wait, after, &wa) < 0 ||
        key_get(key, &k) < 0)
        return NULL;
    int rc = client_enter(self);
    if (rc == 0) {
        NOGIL(rc, (wait_arm(self->c, &wa),
                   gkv_get_with(self->c, k.p, (size_t)k.len, &r, alloc_bytes, &sink, info)));
        if (rc == 0 && meta) {
            *meta = info->meta ? PyBytes_FromStringAndSize(info->meta, (Py_ssize_t)info->meta_len)
                               : Py_NewRef(Py_None);
            if (!*meta)
                rc = GKV_ENOMEM;
        }
        client_leave(self);
    }
    if (rc < 0 && !PyErr_Occurred())
        raise_client(self, rc);
    key_release(&k); /* after the raise: a NotFound gets the key */
    if (rc < 0) {
        Py_XDECREF(sink.obj);
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

PyObject *client_get(ClientObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    PyObject *key, *off, *len, *suf, *wait, *after;
    if (parse_key_range(args, nargs, kwnames, "get", &key, &off, &len, &suf, &wait, &after) < 0)
        return NULL;
    gkv_value_info_t info;
    return get_bytes(self, key, off, len, suf, wait, after, &info, NULL);
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

PyObject *client_get_value(ClientObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames)
{
    PyObject *key, *off, *len, *suf, *wait, *after, *meta = NULL;
    if (parse_key_range(args, nargs, kwnames, "get_value", &key, &off, &len, &suf, &wait,
                        &after) < 0)
        return NULL;
    gkv_value_info_t info;
    PyObject *data = get_bytes(self, key, off, len, suf, wait, after, &info, &meta);
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

PyObject *client_get_into(ClientObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"key", "buffer", "offset", "length", "suffix", "wait", "after", NULL};
    PyObject *key, *buffer, *off = Py_None, *len = Py_None, *suf = Py_None, *wait = Py_None,
                            *after = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|$OOOOO:get_into", names, &key, &buffer, &off,
                                     &len, &suf, &wait, &after))
        return NULL;
    gkv_range_t r;
    bool empty;
    key_arg_t k;
    Py_buffer b;
    wait_arg_t wa;
    if (range_get(off, len, suf, &r, &empty) < 0 || wait_args(wait, after, &wa) < 0)
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
        NOGIL(rc, (wait_arm(self->c, &wa),
                   gkv_get(self->c, k.p, (size_t)k.len, &r, empty ? scratch : b.buf,
                           empty ? sizeof(scratch) : (size_t)b.len, &info)));
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

PyObject *client_get_to_device(ClientObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"key",    "ptr",  "cap",   "offset", "length",
                            "suffix", "wait", "after", NULL};
    PyObject *key, *off = Py_None, *len = Py_None, *suf = Py_None, *wait = Py_None,
                   *after = Py_None;
    unsigned long long ptr, cap;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OKK|$OOOOO:_get_to_device", names, &key, &ptr,
                                     &cap, &off, &len, &suf, &wait, &after))
        return NULL;
    gkv_range_t r;
    bool empty;
    key_arg_t k;
    wait_arg_t wa;
    if (range_get(off, len, suf, &r, &empty) < 0 || wait_args(wait, after, &wa) < 0 ||
        key_get(key, &k) < 0)
        return NULL;
    gkv_value_info_t info = {0};
    int rc = client_enter(self);
    if (rc == 0) {
        if (empty) {
            /* Nothing to copy: check the key and the offset through host memory. */
            bytes_sink_t sink = {.empty = true};
            NOGIL(rc, (wait_arm(self->c, &wa),
                       gkv_get_with(self->c, k.p, (size_t)k.len, &r, alloc_bytes, &sink, &info)));
        } else {
            NOGIL(rc, (wait_arm(self->c, &wa),
                       gkv_get_to_device(self->c, k.p, (size_t)k.len, &r,
                                         (void *)(uintptr_t)ptr, (size_t)cap, &info)));
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
PyObject *client_mget(ClientObject *self, PyObject *args)
{
    PyObject *keys, *ranges;
    if (!PyArg_ParseTuple(args, "O!O:_mget", &PyList_Type, &keys, &ranges))
        return NULL;
    batch_arg_t b;
    gkv_mget_item_t *items = NULL;
    PyObject **objs = NULL, *out = NULL;
    if (batch_get(keys, ranges, &b) < 0)
        goto done;
    Py_ssize_t n = b.n;
    if (n == 0) {
        out = PyList_New(0);
        goto done;
    }
    items = PyMem_Calloc((size_t)n, sizeof(*items));
    objs = PyMem_Calloc((size_t)n, sizeof(*objs));
    if (!items || !objs) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        items[i] = (gkv_mget_item_t){.key = b.keys[i].p, .klen = (size_t)b.keys[i].len,
                                     .range = b.range[i]};
    mget_sink_t sink = {.objs = objs, .empty = b.empty};
    int rc;
    CLIENT_CALL(client_enter, self, rc, gkv_mget_with(self->c, items, (size_t)n, alloc_item, &sink));
    if (rc < 0)
        goto done;
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
        else if (b.empty[i])
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
    for (Py_ssize_t i = 0; objs && i < b.n; i++)
        Py_XDECREF(objs[i]);
    PyMem_Free(items);
    PyMem_Free(objs);
    batch_release(&b);
    return out;
}

int value_type_ready(PyObject *module)
{
    if (PyStructSequence_InitType2(&ValueType, &value_desc) < 0)
        return -1;
    return PyModule_AddObjectRef(module, "Value", (PyObject *)&ValueType);
}
