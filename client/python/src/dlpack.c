/* dlpack.c: DLPack both ways. Producer: a mapping's bytes as a capsule. Consumer: DeviceView,
 * which takes a capsule from another library's __dlpack__ and shows its address and size (and,
 * for host memory, the buffer protocol), calling the producer's deleter when closed. */
#include "module.h"

#include "dlpack.h"

typedef struct {
    DLManagedTensorVersioned t;
    int64_t shape[1];
} managed_v_t;

typedef struct {
    DLManagedTensor t;
    int64_t shape[1];
} managed_t;

/* The deleters may run on any thread, with or without the GIL. */
static void deleter_v(DLManagedTensorVersioned *t)
{
    PyGILState_STATE g = PyGILState_Ensure();
    Py_XDECREF((PyObject *)t->manager_ctx);
    PyGILState_Release(g);
    PyMem_RawFree(t);
}

static void deleter(DLManagedTensor *t)
{
    PyGILState_STATE g = PyGILState_Ensure();
    Py_XDECREF((PyObject *)t->manager_ctx);
    PyGILState_Release(g);
    PyMem_RawFree(t);
}

/* A capsule that nobody consumed still owns its tensor. */
static void capsule_gone(PyObject *cap)
{
    if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
        DLManagedTensorVersioned *t = PyCapsule_GetPointer(cap, "dltensor_versioned");
        if (t && t->deleter)
            t->deleter(t);
    } else if (PyCapsule_IsValid(cap, "dltensor")) {
        DLManagedTensor *t = PyCapsule_GetPointer(cap, "dltensor");
        if (t && t->deleter)
            t->deleter(t);
    }
}

static void fill_tensor(DLTensor *t, int64_t *shape, const gkv_mapping_t *m, void *data,
                        uint64_t len)
{
    shape[0] = (int64_t)len;
    t->data = data;
    t->device = m->on_device ? (DLDevice){kDLCUDA, m->device} : (DLDevice){kDLCPU, 0};
    t->ndim = 1;
    t->dtype = (DLDataType){kDLUInt, 8, 1};
    t->shape = shape;
    t->strides = NULL;
    t->byte_offset = 0;
}

PyObject *dlpack_capsule(MappingObject *self, void *data, uint64_t len, bool versioned,
                         bool readonly)
{
    if (len > (uint64_t)INT64_MAX) {
        PyErr_SetString(PyExc_BufferError, "too large for DLPack");
        return NULL;
    }
    PyObject *cap;
    if (versioned) {
        managed_v_t *mt = PyMem_RawCalloc(1, sizeof(*mt));
        if (!mt)
            return PyErr_NoMemory();
        mt->t.version = (DLPackVersion){DLPACK_MAJOR, DLPACK_MINOR};
        mt->t.manager_ctx = Py_NewRef(self);
        mt->t.deleter = deleter_v;
        mt->t.flags = readonly ? DLPACK_FLAG_BITMASK_READ_ONLY : 0;
        fill_tensor(&mt->t.dl_tensor, mt->shape, self->m, data, len);
        cap = PyCapsule_New(&mt->t, "dltensor_versioned", capsule_gone);
        if (!cap)
            deleter_v(&mt->t);
    } else {
        managed_t *mt = PyMem_RawCalloc(1, sizeof(*mt));
        if (!mt)
            return PyErr_NoMemory();
        mt->t.manager_ctx = Py_NewRef(self);
        mt->t.deleter = deleter;
        fill_tensor(&mt->t.dl_tensor, mt->shape, self->m, data, len);
        cap = PyCapsule_New(&mt->t, "dltensor", capsule_gone);
        if (!cap)
            deleter(&mt->t);
    }
    return cap;
}

/* _gpukv.DeviceView(capsule, writable=False): the consumer side. */
typedef struct {
    PyObject_HEAD
    DLManagedTensorVersioned *tv; /* one of the two, owned (deleter called at close) */
    DLManagedTensor *t;
    DLTensor *dl;
    uint64_t nbytes;
    bool readonly;
    Py_ssize_t exports;
} DeviceViewObject;

/* Bytes of a compact, row-major tensor; -1 with ValueError set if it is not one. */
static int compact_bytes(const DLTensor *dl, uint64_t *out)
{
    if (dl->ndim < 0 || dl->ndim > 64 || dl->dtype.lanes == 0 || dl->dtype.bits % 8 != 0) {
        PyErr_SetString(PyExc_ValueError, "unsupported DLPack tensor (dtype or rank)");
        return -1;
    }
    uint64_t item = (uint64_t)dl->dtype.bits / 8 * dl->dtype.lanes, n = 1;
    for (int i = 0; i < dl->ndim; i++) {
        if (dl->shape[i] < 0) {
            PyErr_SetString(PyExc_ValueError, "negative DLPack shape");
            return -1;
        }
        n *= (uint64_t)dl->shape[i];
    }
    if (dl->strides && n) {
        int64_t want = 1;
        for (int i = dl->ndim - 1; i >= 0; i--) {
            if (dl->shape[i] != 1 && dl->strides[i] != want) {
                PyErr_SetString(PyExc_ValueError, "the array must be C-contiguous");
                return -1;
            }
            want *= dl->shape[i];
        }
    }
    *out = n * item;
    return 0;
}

static void view_close_tensor(DeviceViewObject *self)
{
    if (self->tv && self->tv->deleter)
        self->tv->deleter(self->tv);
    if (self->t && self->t->deleter)
        self->t->deleter(self->t);
    self->tv = NULL;
    self->t = NULL;
    self->dl = NULL;
}

static int view_init(DeviceViewObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"capsule", NULL};
    PyObject *cap;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:DeviceView", names, &cap))
        return -1;
    if (self->dl) {
        PyErr_SetString(PyExc_RuntimeError, "a DeviceView takes one capsule");
        return -1;
    }
    if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
        self->tv = PyCapsule_GetPointer(cap, "dltensor_versioned");
        if (self->tv->version.major != DLPACK_MAJOR) {
            self->tv = NULL;
            PyErr_SetString(PyExc_BufferError, "unsupported DLPack major version");
            return -1;
        }
        self->dl = &self->tv->dl_tensor;
        self->readonly = (self->tv->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0;
        if (PyCapsule_SetName(cap, "used_dltensor_versioned") < 0)
            return -1;
    } else if (PyCapsule_IsValid(cap, "dltensor")) {
        self->t = PyCapsule_GetPointer(cap, "dltensor");
        self->dl = &self->t->dl_tensor;
        if (PyCapsule_SetName(cap, "used_dltensor") < 0)
            return -1;
    } else {
        PyErr_SetString(PyExc_TypeError, "expected an unconsumed DLPack capsule");
        return -1;
    }
    if (compact_bytes(self->dl, &self->nbytes) < 0) {
        view_close_tensor(self);
        return -1;
    }
    return 0;
}

static void view_dealloc(DeviceViewObject *self)
{
    view_close_tensor(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int view_check(DeviceViewObject *self)
{
    if (self->dl)
        return 0;
    PyErr_SetString(PyExc_ValueError, "the DeviceView is closed");
    return -1;
}

static PyObject *view_close(DeviceViewObject *self, PyObject *noargs)
{
    (void)noargs;
    if (self->exports) {
        PyErr_SetString(PyExc_BufferError, "buffers of this view are still in use");
        return NULL;
    }
    view_close_tensor(self);
    Py_RETURN_NONE;
}

static PyObject *view_ptr(DeviceViewObject *self, void *c)
{
    (void)c;
    if (view_check(self) < 0)
        return NULL;
    return PyLong_FromVoidPtr((char *)self->dl->data + self->dl->byte_offset);
}

static PyObject *view_nbytes(DeviceViewObject *self, void *c)
{
    (void)c;
    return view_check(self) < 0 ? NULL : PyLong_FromUnsignedLongLong(self->nbytes);
}

static PyObject *view_device(DeviceViewObject *self, void *c)
{
    (void)c;
    if (view_check(self) < 0)
        return NULL;
    return Py_BuildValue("(ii)", (int)self->dl->device.device_type, self->dl->device.device_id);
}

static PyObject *view_readonly(DeviceViewObject *self, void *c)
{
    (void)c;
    return view_check(self) < 0 ? NULL : PyBool_FromLong(self->readonly);
}

static int view_getbuffer(DeviceViewObject *self, Py_buffer *view, int flags)
{
    static char empty[1];
    if (!self->dl) {
        PyErr_SetString(PyExc_BufferError, "the DeviceView is closed");
        return -1;
    }
    if (self->dl->device.device_type != kDLCPU && self->dl->device.device_type != kDLCUDAHost) {
        PyErr_SetString(PyExc_BufferError, "not host memory");
        return -1;
    }
    void *p = self->nbytes ? (char *)self->dl->data + self->dl->byte_offset : empty;
    if (PyBuffer_FillInfo(view, (PyObject *)self, p, (Py_ssize_t)self->nbytes, self->readonly,
                          flags) < 0)
        return -1;
    self->exports++;
    return 0;
}

static void view_releasebuffer(DeviceViewObject *self, Py_buffer *view)
{
    (void)view;
    self->exports--;
}

static PyBufferProcs view_as_buffer = {(getbufferproc)view_getbuffer,
                                       (releasebufferproc)view_releasebuffer};

static PyObject *view_enter(PyObject *self, PyObject *noargs)
{
    (void)noargs;
    return Py_NewRef(self);
}

static PyObject *view_exit(DeviceViewObject *self, PyObject *args)
{
    (void)args;
    PyObject *r = view_close(self, NULL);
    if (!r)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

static PyMethodDef view_methods[] = {
    {"close", (PyCFunction)view_close, METH_NOARGS, "Gives the tensor back to its producer."},
    {"__enter__", (PyCFunction)view_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)view_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef view_getset[] = {
    {"ptr", (getter)view_ptr, NULL, "Address of the first byte.", NULL},
    {"nbytes", (getter)view_nbytes, NULL, "Size in bytes (the tensor is compact).", NULL},
    {"device", (getter)view_device, NULL, "(DLPack device type, device id).", NULL},
    {"readonly", (getter)view_readonly, NULL, "The producer marked it read-only.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject DeviceViewType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gpukv._gpukv.DeviceView",
    .tp_basicsize = sizeof(DeviceViewObject),
    .tp_dealloc = (destructor)view_dealloc,
    .tp_as_buffer = &view_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "DeviceView(capsule): the memory of a DLPack capsule (consumed), C-contiguous.",
    .tp_methods = view_methods,
    .tp_getset = view_getset,
    .tp_init = (initproc)view_init,
    .tp_new = PyType_GenericNew,
};
