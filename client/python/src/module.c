/* module.c: the _gpukv module: error translation, argument helpers and module functions. */
#include "module.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

unsigned long fork_generation;

static void forked_child(void)
{
    fork_generation++;
}

/* code (negative int) -> exception class, registered by gpukv/_errors.py at import. */
static PyObject *error_classes;
static PyObject *error_base;

PyObject *raise_code(int code, const char *message)
{
    if (!message || !*message)
        message = gkv_strerror(code);
    PyObject *cls = NULL;
    if (error_classes) {
        PyObject *k = PyLong_FromLong(code);
        cls = k ? PyDict_GetItemWithError(error_classes, k) : NULL;
        Py_XDECREF(k);
        if (!cls && PyErr_Occurred())
            return NULL;
    }
    bool generic = !cls;
    if (!cls)
        cls = error_base ? error_base : PyExc_RuntimeError;
    /* One argument: some classes are also OSErrors, which read a second as an errno. */
    PyObject *exc = PyObject_CallFunction(cls, "(s)", message);
    if (exc && generic && error_base) {
        PyObject *c = PyLong_FromLong(code);
        if (!c || PyObject_SetAttrString(exc, "code", c) < 0)
            Py_CLEAR(exc);
        Py_XDECREF(c);
    }
    if (exc) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return NULL;
}

PyObject *raise_client(ClientObject *self, int code)
{
    const char *msg = self->c ? gkv_client_errmsg(self->c) : NULL;
    return raise_code(code, msg);
}

int key_get(PyObject *obj, key_arg_t *k)
{
    memset(k, 0, sizeof(*k));
    k->obj = obj;
    if (PyUnicode_Check(obj)) {
        k->p = PyUnicode_AsUTF8AndSize(obj, &k->len);
        if (!k->p) {
            /* Keys listed from the server that are not UTF-8 come back as str with surrogate
             * escapes: they must name the same bytes again. */
            if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
                return -1;
            PyErr_Clear();
            k->tmp = PyUnicode_AsEncodedString(obj, "utf-8", "surrogateescape");
            if (!k->tmp)
                return -1;
            k->p = PyBytes_AS_STRING(k->tmp);
            k->len = PyBytes_GET_SIZE(k->tmp);
        }
    } else if (PyObject_CheckBuffer(obj)) {
        if (PyObject_GetBuffer(obj, &k->view, PyBUF_SIMPLE) != 0)
            return -1;
        k->has_view = true;
        k->p = k->view.buf;
        k->len = k->view.len;
    } else {
        PyErr_Format(PyExc_TypeError, "a key must be str or bytes-like, not %.100s",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    if (k->len == 0) {
        key_release(k);
        PyErr_SetString(PyExc_ValueError, "a key must not be empty");
        return -1;
    }
    return 0;
}

/* Sets the key attribute of a pending NotFound to key. */
static void note_key(PyObject *key)
{
    PyObject *code = PyLong_FromLong(GKV_ENOTFOUND);
    PyObject *cls = code && error_classes ? PyDict_GetItemWithError(error_classes, code) : NULL;
    Py_XDECREF(code);
    if (!cls || !PyErr_ExceptionMatches(cls))
        return;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value && PyObject_SetAttrString(value, "key", key) < 0)
        PyErr_Clear();
    PyErr_Restore(type, value, tb);
}

void key_release(key_arg_t *k)
{
    if (k->obj && PyErr_Occurred())
        note_key(k->obj);
    k->obj = NULL;
    if (k->has_view)
        PyBuffer_Release(&k->view);
    Py_CLEAR(k->tmp);
    k->has_view = false;
}

/* A non-negative integer argument (None: absent). Returns 1 if present, 0 if None, -1 on
 * error. */
static int get_count(PyObject *obj, const char *name, uint64_t *out)
{
    if (!obj || obj == Py_None)
        return 0;
    if (!PyLong_Check(obj) || PyBool_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", name,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow < 0 || (!overflow && v < 0)) {
        PyErr_Format(PyExc_ValueError, "%s must not be negative", name);
        return -1;
    }
    if (overflow) {
        unsigned long long u = PyLong_AsUnsignedLongLong(obj);
        if (u == (unsigned long long)-1 && PyErr_Occurred())
            return -1;
        *out = u;
    } else {
        *out = (uint64_t)v;
    }
    return 1;
}

int parse_key_range(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                    const char *fname, PyObject **key, PyObject **off, PyObject **len,
                    PyObject **suf, PyObject **wait, PyObject **after)
{
    *key = nargs >= 1 ? args[0] : NULL;
    *off = *len = *suf = Py_None;
    if (wait)
        *wait = *after = Py_None;
    if (nargs > 1) {
        PyErr_Format(PyExc_TypeError, "%s() takes one positional argument (the key)", fname);
        return -1;
    }
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i), *v = args[nargs + i];
        if (PyUnicode_CompareWithASCIIString(name, "offset") == 0)
            *off = v;
        else if (PyUnicode_CompareWithASCIIString(name, "length") == 0)
            *len = v;
        else if (PyUnicode_CompareWithASCIIString(name, "suffix") == 0)
            *suf = v;
        else if (wait && PyUnicode_CompareWithASCIIString(name, "wait") == 0)
            *wait = v;
        else if (wait && PyUnicode_CompareWithASCIIString(name, "after") == 0)
            *after = v;
        else if (PyUnicode_CompareWithASCIIString(name, "key") == 0 && !*key)
            *key = v;
        else {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument %R", fname,
                         name);
            return -1;
        }
    }
    if (!*key) {
        PyErr_Format(PyExc_TypeError, "%s() missing the key", fname);
        return -1;
    }
    return 0;
}

#define WAIT_MAX_MS 3600000u /* the protocol's bound on a wait (PROTOCOL.md) */

int wait_get(PyObject *wait, uint32_t *ms)
{
    *ms = 0;
    if (wait == Py_None)
        return 0;
    if (PyBool_Check(wait) || !PyNumber_Check(wait)) {
        PyErr_Format(PyExc_TypeError, "wait is a number of seconds or None, not %.100s",
                     Py_TYPE(wait)->tp_name);
        return -1;
    }
    double s = PyFloat_AsDouble(wait);
    if (s == -1.0 && PyErr_Occurred())
        return -1;
    if (!(s > 0) || s > WAIT_MAX_MS / 1000.0) {
        PyErr_Format(PyExc_ValueError, "wait is seconds, above 0 and at most 3600, not %R", wait);
        return -1;
    }
    double m = ceil(s * 1000.0);
    *ms = m > WAIT_MAX_MS ? WAIT_MAX_MS : (uint32_t)m;
    return 0;
}

int wait_args(PyObject *wait, PyObject *after, wait_arg_t *w)
{
    *w = (wait_arg_t){0};
    if (wait_get(wait, &w->ms) < 0)
        return -1;
    if (after == Py_None)
        return 0;
    if (PyBool_Check(after) || !PyLong_Check(after)) {
        PyErr_Format(PyExc_TypeError, "after is a version (an int) or None, not %.100s",
                     Py_TYPE(after)->tp_name);
        return -1;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(after);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "after is a version, 0 .. 2**64-1, not %R", after);
        return -1;
    }
    if (!w->ms) {
        PyErr_SetString(PyExc_ValueError, "after needs a wait (seconds)");
        return -1;
    }
    w->after = v;
    w->newer = true;
    return 0;
}

int range_get(PyObject *offset, PyObject *length, PyObject *suffix, gkv_range_t *r, bool *empty)
{
    uint64_t off = 0, len = 0, suf = 0;
    int has_off, has_len, has_suf;
    if ((has_off = get_count(offset, "offset", &off)) < 0 ||
        (has_len = get_count(length, "length", &len)) < 0 ||
        (has_suf = get_count(suffix, "suffix", &suf)) < 0)
        return -1;
    *empty = false;
    *r = (gkv_range_t){.offset = off, .length = GKV_TO_END};
    if (has_suf) {
        if ((has_off && off) || has_len) {
            PyErr_SetString(PyExc_ValueError, "suffix cannot be combined with offset or length");
            return -1;
        }
        /* The last 0 bytes: ask for the last byte, so the key is still checked. */
        *empty = suf == 0;
        *r = (gkv_range_t){.suffix = suf ? suf : 1};
        return 0;
    }
    if (has_len) {
        if (len == GKV_TO_END) {
            PyErr_SetString(PyExc_OverflowError, "length too large");
            return -1;
        }
        /* No bytes at offset: ask for one there, so the key and the offset are still checked
         * (offset == size gives none, past it RANGE). */
        *empty = len == 0;
        r->length = len ? len : 1;
    }
    return 0;
}

int batch_get(PyObject *keys, PyObject *ranges, batch_arg_t *b)
{
    memset(b, 0, sizeof(*b));
    if (!PyList_Check(keys)) {
        PyErr_SetString(PyExc_TypeError, "keys must be a list");
        return -1;
    }
    Py_ssize_t n = PyList_GET_SIZE(keys);
    if (n > 4096) {
        PyErr_SetString(PyExc_ValueError, "at most 4096 items per request");
        return -1;
    }
    if (ranges != Py_None && (!PyList_Check(ranges) || PyList_GET_SIZE(ranges) != n)) {
        PyErr_SetString(PyExc_ValueError, "ranges must be a list as long as keys");
        return -1;
    }
    b->n = n;
    if (n == 0)
        return 0;
    b->keys = PyMem_Calloc((size_t)n, sizeof(*b->keys));
    b->range = PyMem_Calloc((size_t)n, sizeof(*b->range));
    b->empty = PyMem_Calloc((size_t)n, sizeof(*b->empty));
    if (!b->keys || !b->range || !b->empty) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (key_get(PyList_GET_ITEM(keys, i), &b->keys[i]) < 0)
            return -1;
        b->got++;
        b->range[i].length = GKV_TO_END;
        PyObject *rg = ranges == Py_None ? Py_None : PyList_GET_ITEM(ranges, i);
        if (rg == Py_None)
            continue;
        if (!PyTuple_Check(rg) || PyTuple_GET_SIZE(rg) != 3) {
            PyErr_SetString(PyExc_TypeError, "a range is None or (offset, length, suffix)");
            return -1;
        }
        if (range_get(PyTuple_GET_ITEM(rg, 0), PyTuple_GET_ITEM(rg, 1), PyTuple_GET_ITEM(rg, 2),
                      &b->range[i], &b->empty[i]) < 0)
            return -1;
    }
    return 0;
}

void batch_release(batch_arg_t *b)
{
    for (Py_ssize_t i = 0; i < b->got; i++)
        key_release(&b->keys[i]);
    PyMem_Free(b->keys);
    PyMem_Free(b->range);
    PyMem_Free(b->empty);
    memset(b, 0, sizeof(*b));
}

/* _register_errors(base, {code: class}) from gpukv/_errors.py. */
static PyObject *register_errors(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *base, *classes;
    if (!PyArg_ParseTuple(args, "OO!", &base, &PyDict_Type, &classes))
        return NULL;
    Py_INCREF(base);
    Py_INCREF(classes);
    Py_XSETREF(error_base, base);
    Py_XSETREF(error_classes, classes);
    Py_RETURN_NONE;
}

static PyObject *default_socket(PyObject *mod, PyObject *noargs)
{
    (void)mod;
    (void)noargs;
    char buf[512];
    int n = gkv_default_socket(buf, sizeof(buf));
    if (n < 0)
        return raise_code(n, NULL);
    return PyUnicode_DecodeFSDefaultAndSize(buf, n);
}

static PyObject *py_stream_sync(PyObject *mod, PyObject *arg)
{
    (void)mod;
    unsigned long long s = PyLong_AsUnsignedLongLong(arg);
    if (s == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    if (cuda_sync_stream((uintptr_t)s) != 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *py_device_sync(PyObject *mod, PyObject *arg)
{
    (void)mod;
    long d = PyLong_AsLong(arg);
    if (d == -1 && PyErr_Occurred())
        return NULL;
    if (cuda_sync_device((int)d) != 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"_register_errors", register_errors, METH_VARARGS,
     "Registers the base exception class and the class for each error code."},
    {"default_socket", default_socket, METH_NOARGS,
     "The socket path gpukvd and libgpukv use by default."},
    {"stream_synchronize", py_stream_sync, METH_O,
     "Waits for a CUDA stream (a cudaStream_t handle as an int) to finish."},
    {"device_synchronize", py_device_sync, METH_O,
     "Waits for every stream of this process on a CUDA device (an ordinal) to finish."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "gpukv._gpukv",
    "Binding of libgpukv, the C client library of gpukvd. Use the gpukv package.", -1,
    module_methods,
};

/* ERRORS: ((code, name, sentence), ...) from the one list in gpukv.h. */
static PyObject *error_table(void)
{
    static const struct {
        int code;
        const char *name;
    } codes[] = {
#define GKV_PY_ERR(name, num, text) {-(num), #name},
        GKV_ERRNO_MAP(GKV_PY_ERR)
#undef GKV_PY_ERR
    };
    size_t n = sizeof(codes) / sizeof(codes[0]);
    PyObject *t = PyTuple_New((Py_ssize_t)n);
    for (size_t i = 0; t && i < n; i++) {
        PyObject *e = Py_BuildValue("iss", codes[i].code, codes[i].name,
                                    gkv_strerror(codes[i].code));
        if (!e) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, (Py_ssize_t)i, e);
    }
    return t;
}

PyMODINIT_FUNC PyInit__gpukv(void)
{
    if (pthread_atfork(NULL, NULL, forked_child) != 0)
        return PyErr_NoMemory();
    PyTypeObject *types[] = {&ClientType, &MappingType, &ListIterType, &DeviceViewType};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (PyType_Ready(types[i]) < 0)
            return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    PyObject *errors = error_table();
    int rc = errors ? PyModule_AddObjectRef(m, "ERRORS", errors) : -1;
    Py_XDECREF(errors);
    if (rc < 0)
        goto fail;
    const char *names[] = {"Client", "Mapping", "ListIter", "DeviceView"};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (PyModule_AddObjectRef(m, names[i], (PyObject *)types[i]) < 0)
            goto fail;
    if (client_types_ready(m) < 0)
        goto fail;
#ifdef GKV_HAVE_CUDA
    if (PyModule_AddIntConstant(m, "HAVE_CUDA", 1) < 0)
#else
    if (PyModule_AddIntConstant(m, "HAVE_CUDA", 0) < 0)
#endif
        goto fail;
    if (PyModule_AddIntConstant(m, "MAX_BATCH", 4096) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
