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

/* The Mapping object for m, which the library just returned for key (k its bytes). If it cannot
 * be made, m is ended at the client's next call and NULL returned with the exception set. */
static PyObject *wrap(ClientObject *self, gkv_mapping_t *m, PyObject *key, const key_arg_t *k,
                      bool writable)
{
    PyObject *kb = key_object(key, k);
    PyObject *out = kb ? mapping_new(self, m, kb, writable) : NULL;
    Py_XDECREF(kb);
    if (!out)
        client_defer_end(self, m);
    return out;
}

PyObject *client_map(ClientObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *key, *off, *len, *suf, *wait, *after;
    if (parse_key_range(args, nargs, kwnames, "map", &key, &off, &len, &suf, &wait, &after) < 0)
        return NULL;
    gkv_range_t r;
    bool empty;
    key_arg_t k;
    wait_arg_t wa;
    if (range_get(off, len, suf, &r, &empty) < 0 || wait_args(wait, after, &wa) < 0)
        return NULL;
    if (empty) {
        PyErr_SetString(PyExc_ValueError, "an empty range cannot be mapped (length=0, suffix=0)");
        return NULL;
    }
    if (key_get(key, &k) < 0)
        return NULL;
    gkv_mapping_t *m = NULL;
    int rc;
    CLIENT_CALL(client_enter, self, rc,
                (wait_arm(self->c, &wa), gkv_map(self->c, k.p, (size_t)k.len, &r, &m)));
    PyObject *out = rc == 0 ? wrap(self, m, key, &k, false) : NULL;
    key_release(&k);
    return out;
}

PyObject *client_create(ClientObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"key", "nbytes", "nx", "xx", "meta", "ttl_ms", NULL};
    PyObject *key, *nbytes, *nx = Py_False, *xx = Py_False, *meta = Py_None;
    unsigned long long ttl_ms = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|$OOOK:create", names, &key, &nbytes, &nx, &xx,
                                     &meta, &ttl_ms))
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
    o.ttl_ms = ttl_ms;
    gkv_mapping_t *m = NULL;
    int rc;
    CLIENT_CALL(client_enter, self, rc,
                gkv_create(self->c, k.p, (size_t)k.len, (uint64_t)size, &o, &m));
    PyObject *out = rc == 0 ? wrap(self, m, key, &k, true) : NULL;
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
    batch_arg_t b;
    gkv_map_item_t *items = NULL;
    PyObject *out = NULL;
    if (batch_get(keys, ranges, &b) < 0)
        goto done;
    Py_ssize_t n = b.n;
    if (n == 0) {
        out = PyList_New(0);
        goto done;
    }
    if (!(items = PyMem_Calloc((size_t)n, sizeof(*items)))) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (b.empty[i]) {
            PyErr_SetString(PyExc_ValueError, "an empty range cannot be mapped");
            goto done;
        }
        items[i] = (gkv_map_item_t){
            .key = b.keys[i].p, .klen = (size_t)b.keys[i].len, .range = b.range[i]};
    }
    int rc;
    CLIENT_CALL(client_enter, self, rc, gkv_map_many(self->c, items, (size_t)n));
    if (rc < 0)
        goto done;
    out = PyList_New(n);
    for (Py_ssize_t i = 0; i < n; i++) {
        bool mapped = items[i].status == 0;
        PyObject *o = NULL;
        if (out && mapped)
            o = wrap(self, items[i].mapping, PyList_GET_ITEM(keys, i), &b.keys[i], false);
        else if (out)
            o = PyLong_FromLong(items[i].status);
        else if (mapped) /* the list failed: whatever was mapped ends at the next call */
            client_defer_end(self, items[i].mapping);
        if (!o) {
            Py_CLEAR(out);
            continue;
        }
        PyList_SET_ITEM(out, i, o);
    }
done:
    PyMem_Free(items);
    batch_release(&b);
    return out;
}
