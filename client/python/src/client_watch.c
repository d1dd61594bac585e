/* client_watch.c: the C half of gpukv.Watch (client.py): WATCH on this connection, its events
 * one at a time, UNWATCH. */
#include "client.h"

PyObject *client_watch(ClientObject *self, PyObject *args)
{
    PyObject *prefix;
    int local = 0;
    if (!PyArg_ParseTuple(args, "O|p", &prefix, &local))
        return NULL;
    key_arg_t k;
    if (prefix_get(prefix, &k) < 0)
        return NULL;
    uint64_t seq = 0;
    int rc;
    CLIENT_CALL(client_enter, self, rc,
                local ? gkv_watch_local(self->c, k.p, (size_t)k.len, &seq)
                      : gkv_watch(self->c, k.p, (size_t)k.len, &seq));
    key_release(&k);
    return rc < 0 ? NULL : PyLong_FromUnsignedLongLong(seq);
}

PyObject *client_watch_next(ClientObject *self, PyObject *arg)
{
    long t = PyLong_AsLong(arg);
    if (t == -1 && PyErr_Occurred())
        return NULL;
    if (t < -1 || t > 3600000) {
        PyErr_SetString(PyExc_ValueError, "timeout_ms is -1 (forever) or 0 .. 3600000");
        return NULL;
    }
    int timeout_ms = (int)t;
    gkv_event_t ev;
    int rc;
    CLIENT_CALL(client_enter, self, rc, gkv_watch_next(self->c, &ev, timeout_ms));
    if (rc == GKV_ETIMEDOUT) { /* the watch goes on: nothing came in time */
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (rc < 0)
        return NULL;
    return Py_BuildValue("(iy#KKsK)", (int)ev.kind, (const char *)ev.key, (Py_ssize_t)ev.klen,
                         (unsigned long long)ev.size, (unsigned long long)ev.seq,
                         gkv_watch_node(self->c),
                         (unsigned long long)gkv_watch_version(self->c));
}

PyObject *client_unwatch(ClientObject *self, PyObject *noargs)
{
    (void)noargs;
    int rc;
    CLIENT_CALL(client_enter, self, rc, gkv_unwatch(self->c));
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}
