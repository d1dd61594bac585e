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

/* _map_many(keys, ranges): pipelined MAPs (gkv_map_many) of at most 4096 keys; ranges None or a
 * list as long as keys of None or (offset, length, suffix). Returns a list with a Mapping for
 * each item mapped and the negative error code (an int) for each that was not. */
PyObject *client_map_many(ClientObject *self, PyObject *args)
{
    PyObject *keys, *ranges;
    if (!PyArg_ParseTuple(args, "O!O:_map_many", &PyList_Type, &keys, &ranges))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(keys), got = 0;
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
    gkv_map_item_t *items = PyMem_Calloc((size_t)n, sizeof(*items));
    key_arg_t *ks = PyMem_Calloc((size_t)n, sizeof(*ks));
    PyObject *out = NULL;
    if (!items || !ks) {
        PyErr_NoMemory();
        goto done;
    }
    for (; got < n; got++) {
        PyObject *key = PyList_GET_ITEM(keys, got);
        if (key_get(key, &ks[got]) < 0)
            goto done;
        items[got].key = ks[got].p;
        items[got].klen = (size_t)ks[got].len;
        items[got].range.length = GKV_TO_END;
        PyObject *rg = ranges == Py_None ? Py_None : PyList_GET_ITEM(ranges, got);
        if (rg != Py_None) {
            bool empty;
            if (!PyTuple_Check(rg) || PyTuple_GET_SIZE(rg) != 3) {
                PyErr_SetString(PyExc_TypeError, "a range is None or (offset, length, suffix)");
                got++;
                goto done;
            }
            if (range_get(PyTuple_GET_ITEM(rg, 0), PyTuple_GET_ITEM(rg, 1),
                          PyTuple_GET_ITEM(rg, 2), &items[got].range, &empty) < 0) {
                got++;
                goto done;
            }
            if (empty) {
                PyErr_SetString(PyExc_ValueError, "an empty range cannot be mapped");
                got++;
                goto done;
            }
        }
    }
    int rc = client_enter_map(self);
    if (rc < 0)
        goto done;
    NOGIL(rc, gkv_map_many(self->c, items, (size_t)n));
    client_leave(self);
    if (rc < 0) {
        raise_client(self, rc);
        goto done;
    }
    out = PyList_New(n);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = NULL;
        if (out && items[i].status == 0) {
            PyObject *kb = key_object(PyList_GET_ITEM(keys, i), &ks[i]);
            o = kb ? mapping_new(self, items[i].mapping, kb, false) : NULL;
            Py_XDECREF(kb);
        } else if (out) {
            o = PyLong_FromLong(items[i].status);
        }
        if (!o) {
            /* Whatever was mapped and not handed out ends at the next call. */
            Py_CLEAR(out);
            if (items[i].status == 0)
                client_defer_end(self, items[i].mapping, END_UNMAP);
            continue;
        }
        PyList_SET_ITEM(out, i, o);
    }
done:
    for (Py_ssize_t i = 0; i < got; i++)
        key_release(&ks[i]);
    PyMem_Free(items);
    PyMem_Free(ks);
    return out;
}
