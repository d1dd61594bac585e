/* client_buffer.c: registered buffers (gkv_buffer_register, gkv_get_into): device memory of
 * this process that the daemon writes values into itself. gpukv.Client.register_buffer and
 * get_to_buffer (client.py) keep the memory's owner alive while it is registered. */
#include <stdio.h>

#include "client.h"

PyObject *client_buffer_register(ClientObject *self, PyObject *args)
{
    unsigned long long ptr, len;
    if (!PyArg_ParseTuple(args, "KK:_buffer_register", &ptr, &len))
        return NULL;
    uint64_t id = 0;
    int rc;
    CLIENT_CALL(client_enter, self, rc,
                gkv_buffer_register(self->c, (void *)(uintptr_t)ptr, (size_t)len, &id));
    if (rc < 0)
        return NULL;
    return PyLong_FromUnsignedLongLong(id);
}

PyObject *client_buffer_drop(ClientObject *self, PyObject *arg)
{
    unsigned long long id = PyLong_AsUnsignedLongLong(arg);
    if (id == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    int rc;
    CLIENT_CALL(client_enter, self, rc, gkv_buffer_drop(self->c, id));
    if (rc < 0)
        return NULL;
    return PyBool_FromLong(rc);
}

PyObject *client_get_to_buffer(ClientObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"key",    "id",     "at",   "offset", "length",
                            "suffix", "wait",   "after", NULL};
    PyObject *key, *off = Py_None, *len = Py_None, *suf = Py_None, *wait = Py_None,
                   *after = Py_None;
    unsigned long long id, at;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OKK|$OOOOO:_get_to_buffer", names, &key, &id, &at,
                                     &off, &len, &suf, &wait, &after))
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
        NOGIL(rc, (wait_arm(self->c, &wa),
                   gkv_get_into(self->c, k.p, (size_t)k.len, &r, id, at, &info)));
        client_leave(self);
        if (rc == GKV_ENOSPACE)
            raise_code(rc, "the bytes do not fit between at and the buffer's end");
        else if (rc < 0)
            raise_client(self, rc);
    }
    key_release(&k);
    if (rc < 0)
        return NULL;
    return PyLong_FromUnsignedLongLong(info.length);
}
