/* client_keys.c: the Client calls about keys rather than bytes: exists, delete, sizes,
 * flush, INFO and LIST. */
#include "client.h"

#include <string.h>

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

PyObject *client_exists(ClientObject *self, PyObject *keys)
{
    return keys_op(self, keys, false);
}

PyObject *client_delete(ClientObject *self, PyObject *keys)
{
    return keys_op(self, keys, true);
}

PyObject *client_getsize(ClientObject *self, PyObject *key)
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

PyObject *client_getsize_prefix(ClientObject *self, PyObject *prefix)
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

PyObject *client_flush(ClientObject *self, PyObject *noargs)
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

PyObject *client_info_text(ClientObject *self, PyObject *noargs)
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

PyObject *client_list(ClientObject *self, PyObject *args)
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
