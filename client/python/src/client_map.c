/* client_map.c: the Client calls that open zero-copy mappings: map (read) and create
 * (write); the Mapping type itself is in mapping.c. */
#include "client.h"

/* The key for a Mapping's `key`: the caller's object when it cannot change (str, bytes), else
 * a bytes copy. */
static PyObject *key_object(PyObject *key, const key_arg_t *k)
{
    if (PyUnicode_CheckExact(key) || PyBytes_CheckExact(key))
        return Py_NewRef(key);
    return PyBytes_FromStringAndSize(k->p, k->len);
}

PyObject *client_map(ClientObject *self, PyObject *const *args, Py_ssize_t nargs,
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

PyObject *client_create(ClientObject *self, PyObject *args, PyObject *kw)
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
