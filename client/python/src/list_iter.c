/* list_iter.c: _gpukv.ListIter, the LIST iterator (gkv_list_*): (key bytes, size, is_dir). */
#include "module.h"

typedef struct {
    PyObject_HEAD
    ClientObject *client; /* strong: the C iterator borrows its connection */
    gkv_list_t *it;       /* NULL once exhausted or failed */
} ListIterObject;

PyObject *list_iter_new(ClientObject *client, gkv_list_t *it)
{
    ListIterObject *self = (ListIterObject *)ListIterType.tp_alloc(&ListIterType, 0);
    if (!self) {
        gkv_list_close(it);
        return NULL;
    }
    self->client = (ClientObject *)Py_NewRef(client);
    self->it = it;
    return (PyObject *)self;
}

static void end(ListIterObject *self)
{
    /* Frees only the iterator's own memory: no I/O, safe whatever the client's state. */
    gkv_list_close(self->it);
    self->it = NULL;
}

static void list_iter_dealloc(ListIterObject *self)
{
    end(self);
    Py_XDECREF(self->client);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *list_iter_next(ListIterObject *self)
{
    if (!self->it)
        return NULL;
    if (client_enter(self->client) < 0) {
        end(self);
        return NULL;
    }
    gkv_list_entry_t e;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = gkv_list_next(self->it, &e);
    Py_END_ALLOW_THREADS
    PyObject *out = NULL;
    if (rc == 1)
        out = Py_BuildValue("(y#KO)", (const char *)e.key, (Py_ssize_t)e.klen,
                            (unsigned long long)e.size, e.is_dir ? Py_True : Py_False);
    client_leave(self->client);
    if (rc <= 0) {
        end(self);
        if (rc < 0)
            raise_client(self->client, rc);
    }
    return out;
}

PyTypeObject ListIterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gpukv._gpukv.ListIter",
    .tp_basicsize = sizeof(ListIterObject),
    .tp_dealloc = (destructor)list_iter_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Keys under a prefix, in byte order, fetched a page at a time.",
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)list_iter_next,
};
