/* client_type.c: _gpukv.Client, one libgpukv connection: its lifecycle, the lock that
 * serialises its calls, deferred mapping ends (libgpukv's), properties and method table. */
#include "client.h"

#include <errno.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

PyObject *raise_closed(void)
{
    return raise_code(GKV_ECLOSED, "the client is closed");
}

static void lock_nogil(ClientObject *self)
{
    if (!PyThread_acquire_lock(self->lock, NOWAIT_LOCK)) {
        Py_BEGIN_ALLOW_THREADS PyThread_acquire_lock(self->lock, WAIT_LOCK);
        Py_END_ALLOW_THREADS
    }
}

static int enter(ClientObject *self)
{
    if (!self->c || self->closing) {
        raise_closed();
        return -1;
    }
    if (!CLIENT_OURS(self)) {
        raise_code(GKV_ENOTSUP, "this client was connected by another process (before a fork): "
                                "connect again in this one");
        return -1;
    }
    lock_nogil(self);
    if (!self->c || self->closing) { /* closed by another thread while we waited */
        PyThread_release_lock(self->lock);
        raise_closed();
        return -1;
    }
    return 0;
}

/* The pending exception (a ConnectionError, an OSError) gets errno e, as OSErrors raised by
 * Python's own socket calls carry it. */
static void set_errno(int e)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *n = PyLong_FromLong(e);
    if (value && n && PyObject_SetAttrString(value, "errno", n) < 0)
        PyErr_Clear();
    Py_XDECREF(n);
    PyErr_Restore(type, value, tb);
}

int client_enter(ClientObject *self)
{
    return enter(self);
}

int client_defer_end(ClientObject *self, gkv_mapping_t *m)
{
    return gkv__end_later(self->c, m) ? -1 : 0; /* else the lease ends with the connection */
}

void client_leave(ClientObject *self)
{
    PyThread_release_lock(self->lock);
}

/* Closes the C client (lock held): frees every import; the socket's end ends the leases. */
static void close_c(ClientObject *self)
{
    gkv_client_t *c = self->c;
    self->c = NULL;
    Py_BEGIN_ALLOW_THREADS gkv_client_close(c);
    Py_END_ALLOW_THREADS
}

void client_viewed_gone(ClientObject *self)
{
    if (--self->viewed_alive > 0 || !self->closing || !self->c)
        return;
    /* close() was called while views were alive: the last of them is gone now. */
    lock_nogil(self);
    if (self->c)
        close_c(self);
    PyThread_release_lock(self->lock);
}

static PyObject *client_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    (void)args;
    (void)kw;
    ClientObject *self = (ClientObject *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->lock = PyThread_allocate_lock();
    if (!self->lock) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    self->gen = fork_generation;
    return (PyObject *)self;
}

static int client_init(ClientObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"url", "timeout", NULL};
    PyObject *url = Py_None, *timeout = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O$O:Client", names, &url, &timeout))
        return -1;
    if (self->c || self->closing) {
        PyErr_SetString(PyExc_RuntimeError, "a Client connects once: make a new one");
        return -1;
    }
    const char *u = NULL;
    if (url != Py_None) {
        if (!PyUnicode_Check(url)) {
            PyErr_Format(PyExc_TypeError, "url must be a str, not %.100s", Py_TYPE(url)->tp_name);
            return -1;
        }
        Py_ssize_t ulen;
        if (!(u = PyUnicode_AsUTF8AndSize(url, &ulen)))
            return -1;
        if (strlen(u) != (size_t)ulen) {
            PyErr_SetString(PyExc_ValueError, "url must not contain NUL");
            return -1;
        }
        if (!*u)
            u = NULL; /* "" means the default, as in libgpukv */
    }
    uint32_t ms = 0;
    if (timeout != Py_None) {
        double t = PyFloat_AsDouble(timeout);
        if (t == -1.0 && PyErr_Occurred())
            return -1;
        if (!(t > 0) || t > 4e6) {
            PyErr_SetString(PyExc_ValueError, "timeout must be a positive number of seconds");
            return -1;
        }
        ms = (uint32_t)ceil(t * 1000.0);
    }
    gkv_client_t *c = NULL;
    int rc;
    int sys = 0;
    Py_BEGIN_ALLOW_THREADS errno = 0;
    rc = gkv_client_connect_timeout(u, ms, &c);
    sys = errno;
    Py_END_ALLOW_THREADS if (rc < 0)
    {
        /* The system's reason too (No such file or directory, Connection refused, Permission
         * denied), as the CLI shows it: a user needs it to tell a stopped daemon from a socket
         * they may not open. */
        char msg[700], why[160] = "";
        char def[512] = "";
        if (rc == GKV_ECONNECT && sys)
            snprintf(why, sizeof(why), " (%s)", strerror(sys));
        if (!u && gkv_default_socket(def, sizeof(def)) >= 0 && !getenv("GPUKV_URL"))
            snprintf(msg, sizeof(msg), "cannot connect to unix:%s (the default socket): %s%s", def,
                     gkv_strerror(rc), why);
        else
            snprintf(msg, sizeof(msg), "cannot connect to %s: %s%s",
                     u ? u : (getenv("GPUKV_URL") ? getenv("GPUKV_URL") : "?"), gkv_strerror(rc),
                     why);
        raise_code(rc, msg);
        if (rc == GKV_ECONNECT && sys)
            set_errno(sys);
        return -1;
    }
    self->c = c;
    if (u) {
        Py_INCREF(url);
        /* keep the caller's spelling */
        Py_XSETREF(self->url, url);
    } else {
        const char *env = getenv("GPUKV_URL");
        char def[520];
        char path[512];
        if (env && *env)
            snprintf(def, sizeof(def), "%s", env);
        else if (gkv_default_socket(path, sizeof(path)) >= 0)
            snprintf(def, sizeof(def), "unix:%s", path);
        else
            def[0] = 0;
        Py_XSETREF(self->url, PyUnicode_DecodeFSDefault(def));
    }
    return self->url ? 0 : -1;
}

static void client_dealloc(ClientObject *self)
{
    if (self->weakrefs)
        PyObject_ClearWeakRefs((PyObject *)self);
    /* No mapping or iterator is alive (each holds a reference to the client). */
    if (self->c && CLIENT_OURS(self)) {
        PyThread_acquire_lock(self->lock, WAIT_LOCK);
        close_c(self);
        PyThread_release_lock(self->lock);
    }
    /* In a forked child the connection is the parent's: leave it alone. */
    if (self->lock)
        PyThread_free_lock(self->lock);
    Py_XDECREF(self->url);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *client_close(ClientObject *self, PyObject *noargs)
{
    (void)noargs;
    if (!self->c || self->closing)
        Py_RETURN_NONE;
    if (!CLIENT_OURS(self)) {
        /* A forked child's copy: the parent still uses the connection. */
        self->closing = true;
        self->c = NULL;
        Py_RETURN_NONE;
    }
    lock_nogil(self);
    self->closing = true;
    /* End every open mapping that handed out no view; the others end with their objects. */
    MappingObject *m = self->open;
    while (m) {
        MappingObject *next = m->next;
        if (!m->viewed)
            mapping_end_entered(m);
        if (!m->state)
            m->state = "closed with its client";
        m = next;
    }
    if (self->viewed_alive == 0)
        close_c(self);
    PyThread_release_lock(self->lock);
    Py_RETURN_NONE;
}

static PyObject *client_ping(ClientObject *self, PyObject *noargs)
{
    (void)noargs;
    int rc;
    CLIENT_CALL(client_enter, self, rc, gkv_ping(self->c));
    if (rc < 0)
        return NULL;
    Py_RETURN_TRUE;
}

static PyObject *client_get_url(ClientObject *self, void *closure)
{
    (void)closure;
    return Py_NewRef(self->url ? self->url : Py_None);
}

static PyObject *client_get_closed(ClientObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(!self->c || self->closing);
}

/* The HELLO strings most asked for, without building server_info's dict. */
static PyObject *client_get_zero_copy(ClientObject *self, void *closure)
{
    (void)closure;
    if (!self->c || self->closing)
        return raise_closed();
    return PyUnicode_FromString(gkv_client_info(self->c)->zero_copy);
}

static PyObject *client_get_backend(ClientObject *self, void *closure)
{
    (void)closure;
    if (!self->c || self->closing)
        return raise_closed();
    return PyUnicode_FromString(gkv_client_info(self->c)->backend);
}

static PyObject *client_get_last_version(ClientObject *self, void *closure)
{
    (void)closure;
    if (!self->c || self->closing)
        return raise_closed();
    return PyLong_FromUnsignedLongLong(gkv_last_version(self->c));
}

static PyObject *client_get_server_info(ClientObject *self, void *closure)
{
    (void)closure;
    if (!self->c || self->closing)
        return raise_closed();
    const gkv_server_info_t *in = gkv_client_info(self->c);
    PyObject *gpus = PyList_New(in->gpus);
    if (!gpus)
        return NULL;
    for (uint32_t i = 0; i < in->gpus; i++) {
        PyObject *u = PyUnicode_FromString(in->gpu_uuids[i]);
        if (!u) {
            Py_DECREF(gpus);
            return NULL;
        }
        PyList_SET_ITEM(gpus, i, u);
    }
    return Py_BuildValue(
        "{s:I,s:s,s:s,s:i,s:s,s:N,s:s,s:s,s:K,s:K,s:K}", "protocol", in->protocol, "server",
        in->server, "backend", in->backend, "device", in->device, "gpu_uuid", in->gpu_uuid, "gpus",
        gpus, "zero_copy", in->zero_copy, "zero_copy_why", in->zero_copy_why, "max_key",
        (unsigned long long)in->max_key, "max_value", (unsigned long long)in->max_value, "max_meta",
        (unsigned long long)in->max_meta);
}

static PyObject *client_set_timeout(ClientObject *self, PyObject *arg)
{
    uint32_t ms = 0;
    if (arg != Py_None) {
        double t = PyFloat_AsDouble(arg);
        if (t == -1.0 && PyErr_Occurred())
            return NULL;
        if (!(t > 0) || t > 4e6) {
            PyErr_SetString(PyExc_ValueError, "timeout must be a positive number of seconds");
            return NULL;
        }
        ms = (uint32_t)ceil(t * 1000.0);
    }
    if (client_enter(self) < 0)
        return NULL;
    int rc = gkv_client_set_timeout(self->c, ms);
    client_leave(self);
    if (rc < 0)
        return raise_client(self, rc);
    Py_RETURN_NONE;
}

static PyObject *client_set_lease_cache(ClientObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"slots", "max_value", "max_bytes", NULL};
    unsigned long long slots, max_value, max_bytes = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "KK|K:set_lease_cache", names, &slots, &max_value,
                                     &max_bytes))
        return NULL;
    if (slots > 4096) {
        PyErr_SetString(PyExc_ValueError, "slots must be 0..4096");
        return NULL;
    }
    if (client_enter(self) < 0)
        return NULL;
    int rc = gkv_client_set_lease_cache(self->c, (uint32_t)slots, max_value, max_bytes);
    client_leave(self);
    if (rc < 0)
        return raise_client(self, rc);
    Py_RETURN_NONE;
}

static PyMethodDef client_methods[] = {
    {"set_lease_cache", (PyCFunction)(void (*)(void))client_set_lease_cache,
     METH_VARARGS | METH_KEYWORDS,
     "set_lease_cache(slots, max_value, max_bytes=0): after unmap, keep up to slots leases of "
     "values up to max_value bytes (max_bytes in all, 0: no total) with their imports, so that "
     "mapping the key again while it has that value needs no import (gkv_client_set_lease_cache)."},
    {"close", (PyCFunction)client_close, METH_NOARGS,
     "Closes the connection. Mappings still open are ended; those that handed out views end "
     "when the last view is gone. Idempotent."},
    {"ping", (PyCFunction)client_ping, METH_NOARGS, "Checks that the server answers (True)."},
    {"set", (PyCFunction)(void (*)(void))client_set, METH_VARARGS | METH_KEYWORDS,
     "set(key, value, *, nx=False, xx=False, meta=None): stores bytes-like value (or str, as "
     "UTF-8) under key, atomically."},
    {"_set_from_device", (PyCFunction)(void (*)(void))client_set_from_device,
     METH_VARARGS | METH_KEYWORDS, "Stores nbytes of device memory at ptr (gkv_set_from_device)."},
    {"_set_many_from_device", (PyCFunction)(void (*)(void))client_set_many_from_device,
     METH_VARARGS | METH_KEYWORDS,
     "Stores many device buffers, pipelined (gkv_set_many_from_device): each item's status."},
    {"get", (PyCFunction)(void (*)(void))client_get, METH_FASTCALL | METH_KEYWORDS,
     "get(key, *, offset=None, length=None, suffix=None, wait=None, after=None) -> bytes: the "
     "value, or a byte range of it. Raises NotFound; with wait (seconds, up to 3600) a key that "
     "does not exist yet is waited for, then TimedOut; with after (a version: last_version, "
     "Mapping.version, Event.version) too, a value newer than that one is waited for (a daemon "
     "started with --key-versions)."},
    {"get_value", (PyCFunction)(void (*)(void))client_get_value, METH_FASTCALL | METH_KEYWORDS,
     "get_value(key, *, offset=None, length=None, suffix=None, wait=None, after=None) -> "
     "Value(data, meta, size, offset)."},
    {"get_into", (PyCFunction)(void (*)(void))client_get_into, METH_VARARGS | METH_KEYWORDS,
     "get_into(key, buffer, *, offset=None, length=None, suffix=None, wait=None, after=None) -> "
     "int: reads into a writable buffer; returns the bytes stored (NoSpace if they do not "
     "fit)."},
    {"_get_to_device", (PyCFunction)(void (*)(void))client_get_to_device,
     METH_VARARGS | METH_KEYWORDS, "Reads into cap bytes of device memory at ptr."},
    {"_mget", (PyCFunction)client_mget, METH_VARARGS, "One MGET of at most 4096 items."},
    {"_buffer_register", (PyCFunction)client_buffer_register, METH_VARARGS,
     "Registers len bytes of device memory at ptr (BUFFER); returns its id."},
    {"_buffer_drop", (PyCFunction)client_buffer_drop, METH_O,
     "Drops a registered buffer; True when it was registered."},
    {"_get_to_buffer", (PyCFunction)(void (*)(void))client_get_to_buffer,
     METH_VARARGS | METH_KEYWORDS, "GET into registered buffer id at byte at."},
    {"_exists", (PyCFunction)client_exists, METH_O, "EXISTS of a list of at most 4096 keys."},
    {"_delete", (PyCFunction)client_delete, METH_O, "DEL of a list of at most 4096 keys."},
    {"getsize", (PyCFunction)client_getsize, METH_O,
     "getsize(key) -> int: the value's size. Raises NotFound."},
    {"locate", (PyCFunction)client_locate, METH_O,
     "locate(key) -> (size, gpu): the value's size and the daemon's ordinal of its GPU "
     "(an index of gpus). Raises NotFound."},
    {"tier", (PyCFunction)client_tier, METH_O,
     "tier(key) -> str: 'gpu' (the value is on a GPU), 'host' or 'disk' (in the daemon's host "
     "or disk tier: brought back to a GPU when read). Raises NotFound."},
    {"move", (PyCFunction)client_move, METH_VARARGS,
     "move(key, gpu) -> bool: moves the value to the daemon's GPU gpu; False when it was "
     "there. Raises NotFound, InvalidArgument (no such GPU), OutOfMemory."},
    {"_getsize_prefix", (PyCFunction)client_getsize_prefix, METH_O,
     "(bytes, count) of the keys under a prefix."},
    {"flush", (PyCFunction)client_flush, METH_NOARGS, "Deletes every key of the server."},
    {"save", (PyCFunction)client_save, METH_NOARGS,
     "save(): starts a snapshot of every key to the server's --snapshot-dir (info() shows "
     "its progress). Raises NotSupported without one, Busy while a save runs."},
    {"_expire", (PyCFunction)client_expire, METH_VARARGS, "EXPIRE key ms: 1, or 0 (no key)."},
    {"_persist", (PyCFunction)client_persist, METH_VARARGS, "PERSIST key: 1, or 0 (none)."},
    {"_pttl", (PyCFunction)client_pttl, METH_VARARGS, "TTL key: milliseconds left or None."},
    {"_delete_prefix", (PyCFunction)client_delete_prefix, METH_VARARGS,
     "DEL of every key under a prefix: how many existed."},
    {"_info", (PyCFunction)client_info_text, METH_VARARGS,
     "INFO as text; _info(True): the Prometheus metrics text."},
    {"_list", (PyCFunction)client_list, METH_VARARGS, "A LIST iterator: (prefix, delim, page)."},
    {"_watch", (PyCFunction)client_watch, METH_VARARGS,
     "WATCH prefix [local] on this connection: the daemon's count of changes (gkv_watch, "
     "gkv_watch_local)."},
    {"_watch_next", (PyCFunction)client_watch_next, METH_O,
     "The next event (kind, key, size, seq, node, version) within timeout_ms (-1: forever), or "
     "None."},
    {"_unwatch", (PyCFunction)client_unwatch, METH_NOARGS, "Ends the watch (gkv_unwatch)."},
    {"map", (PyCFunction)(void (*)(void))client_map, METH_FASTCALL | METH_KEYWORDS,
     "map(key, *, offset=None, length=None, suffix=None, wait=None, after=None) -> Mapping: "
     "leases the value (or a range) for reading in place (local connections only)."},
    {"_map_many", (PyCFunction)client_map_many, METH_VARARGS,
     "Pipelined MAPs of at most 4096 keys: a Mapping or an error code for each."},
    {"create", (PyCFunction)(void (*)(void))client_create, METH_VARARGS | METH_KEYWORDS,
     "create(key, nbytes, *, nx=False, xx=False, meta=None) -> Mapping: a new value, writable "
     "in place and invisible until sealed (local connections only)."},
    {"set_timeout", (PyCFunction)client_set_timeout, METH_O,
     "set_timeout(seconds or None): bounds every wait for the server from now on."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef client_getset[] = {
    {"url", (getter)client_get_url, NULL, "The server's URL.", NULL},
    {"closed", (getter)client_get_closed, NULL, "True once closed.", NULL},
    {"server_info", (getter)client_get_server_info, NULL, "What the server said in HELLO (a dict).",
     NULL},
    {"zero_copy", (getter)client_get_zero_copy, NULL,
     "The zero-copy mechanism granted to this connection (cuda-pool-fd, host-memfd), or none.",
     NULL},
    {"backend", (getter)client_get_backend, NULL, "The server's memory backend: cuda or host.",
     NULL},
    {"last_version", (getter)client_get_last_version, NULL,
     "The version of the value the last get, map or getsize on this client read (a daemon "
     "started with --key-versions), else 0: what after= names to wait for a newer one.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject ClientType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gpukv._gpukv.Client",
    .tp_basicsize = sizeof(ClientObject),
    .tp_dealloc = (destructor)client_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Client(url=None, *, timeout=None): one connection to a gpukvd.",
    .tp_methods = client_methods,
    .tp_getset = client_getset,
    .tp_init = (initproc)client_init,
    .tp_new = client_new,
    .tp_weaklistoffset = offsetof(ClientObject, weakrefs),
};

/* Called from module init. */
int client_types_ready(PyObject *module)
{
    return value_type_ready(module);
}
