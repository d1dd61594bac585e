/* client_keys.c: the Client calls about keys rather than bytes: exists, delete, sizes,
 * flush, INFO and LIST. */
#include "client.h"

#include <string.h>

/* EXISTS or DEL of a list of at most 4096 keys; returns the count. */
static PyObject *keys_op(ClientObject *self, PyObject *keys, bool del)
{
    batch_arg_t b;
    const void **ps = NULL;
    size_t *lens = NULL;
    PyObject *out = NULL;
    if (batch_get(keys, Py_None, &b) < 0)
        goto done;
    size_t n = (size_t)b.n;
    if (n == 0) {
        out = PyLong_FromLong(0);
        goto done;
    }
    ps = PyMem_Calloc(n, sizeof(*ps));
    lens = PyMem_Calloc(n, sizeof(*lens));
    if (!ps || !lens) {
        PyErr_NoMemory();
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        ps[i] = b.keys[i].p;
        lens[i] = (size_t)b.keys[i].len;
    }
    int64_t r;
    CLIENT_CALL(client_enter, self, r,
                del ? gkv_del(self->c, ps, lens, n) : gkv_exists(self->c, ps, lens, n));
    if (r >= 0)
        out = PyLong_FromLongLong(r);
done:
    PyMem_Free(ps);
    PyMem_Free(lens);
    batch_release(&b);
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
    int rc;
    CLIENT_CALL(client_enter, self, rc, gkv_getsize(self->c, k.p, (size_t)k.len, &size));
    key_release(&k);
    return rc < 0 ? NULL : PyLong_FromUnsignedLongLong(size);
}

/* locate(key) -> (size, gpu). */
PyObject *client_locate(ClientObject *self, PyObject *key)
{
    key_arg_t k;
    if (key_get(key, &k) < 0)
        return NULL;
    uint64_t size = 0;
    int gpu = 0, rc;
    CLIENT_CALL(client_enter, self, rc, gkv_locate(self->c, k.p, (size_t)k.len, &size, &gpu));
    key_release(&k);
    return rc < 0 ? NULL : Py_BuildValue("(Ki)", (unsigned long long)size, gpu);
}

/* tier(key) -> "gpu", "host" or "disk": where the daemon keeps the value now. */
PyObject *client_tier(ClientObject *self, PyObject *key)
{
    key_arg_t k;
    if (key_get(key, &k) < 0)
        return NULL;
    uint64_t size = 0;
    int gpu = 0, tier = 0, rc;
    CLIENT_CALL(client_enter, self, rc,
                gkv_locate_tier(self->c, k.p, (size_t)k.len, &size, &gpu, &tier));
    key_release(&k);
    return rc < 0 ? NULL
                  : PyUnicode_FromString(tier == GKV_TIER_HOST   ? "host"
                                         : tier == GKV_TIER_DISK ? "disk"
                                                                 : "gpu");
}

/* move(key, gpu) -> True (moved) or False (it was there). */
PyObject *client_move(ClientObject *self, PyObject *args)
{
    PyObject *key;
    int gpu;
    if (!PyArg_ParseTuple(args, "Oi:move", &key, &gpu))
        return NULL;
    key_arg_t k;
    if (key_get(key, &k) < 0)
        return NULL;
    int rc;
    CLIENT_CALL(client_enter, self, rc, gkv_move(self->c, k.p, (size_t)k.len, gpu));
    key_release(&k);
    return rc < 0 ? NULL : PyBool_FromLong(rc);
}

int prefix_get(PyObject *obj, key_arg_t *k)
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
    int rc;
    CLIENT_CALL(client_enter, self, rc,
                gkv_getsize_prefix(self->c, k.p, (size_t)k.len, &bytes, &count));
    key_release(&k);
    return rc < 0 ? NULL : Py_BuildValue("KK", (unsigned long long)bytes, (unsigned long long)count);
}

PyObject *client_flush(ClientObject *self, PyObject *noargs)
{
    (void)noargs;
    int rc;
    CLIENT_CALL(client_enter, self, rc, gkv_flush(self->c));
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

PyObject *client_save(ClientObject *self, PyObject *noargs)
{
    (void)noargs;
    int rc;
    CLIENT_CALL(client_enter, self, rc, gkv_save(self->c));
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* _expire(key, ms) -> 1 or 0; _persist(key) -> 1 or 0; _pttl(key) -> ms left or None. */
PyObject *client_expire(ClientObject *self, PyObject *args)
{
    PyObject *key;
    unsigned long long ms;
    if (!PyArg_ParseTuple(args, "OK:_expire", &key, &ms))
        return NULL;
    key_arg_t k;
    if (key_get(key, &k) < 0)
        return NULL;
    int rc;
    CLIENT_CALL(client_enter, self, rc, gkv_expire(self->c, k.p, (size_t)k.len, ms));
    key_release(&k);
    return rc < 0 ? NULL : PyLong_FromLong(rc);
}

PyObject *client_persist(ClientObject *self, PyObject *args)
{
    PyObject *key;
    if (!PyArg_ParseTuple(args, "O:_persist", &key))
        return NULL;
    key_arg_t k;
    if (key_get(key, &k) < 0)
        return NULL;
    int rc;
    CLIENT_CALL(client_enter, self, rc, gkv_persist(self->c, k.p, (size_t)k.len));
    key_release(&k);
    return rc < 0 ? NULL : PyLong_FromLong(rc);
}

PyObject *client_delete_prefix(ClientObject *self, PyObject *args)
{
    PyObject *prefix;
    if (!PyArg_ParseTuple(args, "O:_delete_prefix", &prefix))
        return NULL;
    key_arg_t k;
    if (prefix_get(prefix, &k) < 0)
        return NULL;
    uint64_t count = 0;
    int rc;
    CLIENT_CALL(client_enter, self, rc, gkv_del_prefix(self->c, k.p, (size_t)k.len, &count));
    key_release(&k);
    return rc < 0 ? NULL : PyLong_FromUnsignedLongLong(count);
}

PyObject *client_pttl(ClientObject *self, PyObject *args)
{
    PyObject *key;
    if (!PyArg_ParseTuple(args, "O:_pttl", &key))
        return NULL;
    key_arg_t k;
    if (key_get(key, &k) < 0)
        return NULL;
    uint64_t left = 0;
    int rc;
    CLIENT_CALL(client_enter, self, rc, gkv_ttl(self->c, k.p, (size_t)k.len, &left));
    key_release(&k);
    if (rc < 0)
        return NULL;
    if (left == GKV_NO_TTL)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(left);
}

PyObject *client_info_text(ClientObject *self, PyObject *args)
{
    int prometheus = 0;
    if (!PyArg_ParseTuple(args, "|p:_info", &prometheus))
        return NULL;
    char *text = NULL;
    int rc;
    CLIENT_CALL(client_enter, self, rc,
                prometheus ? gkv_metrics(self->c, &text) : gkv_info(self->c, &text));
    if (rc < 0)
        return NULL;
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
    int rc;
    CLIENT_CALL(client_enter, self, rc,
                gkv_list_open(self->c, k.p, (size_t)k.len, delim, page, &it));
    key_release(&k);
    return rc < 0 ? NULL : list_iter_new(self, it);
}
