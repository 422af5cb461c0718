/*
 * testing/py_testing.c - the module's test-only functions, compiled into
 * test builds only (RINGLOADER_TEST_HOOKS=1): device memory and streams
 * without torch (for the fake CUDA runtime's tests) and the I/O layer's
 * read benchmark (benchmarks/bench_io.py), and core/fields.h's member
 * checks on bytes (tests/test_field_checks.py holds them to Python's).
 */
#include "python/module.h"

#include <stdlib.h>
#include <string.h>

#include "deliver/cudart.h"
#include "source/io.h"
#include "testing/iobench.h"

typedef struct {
    PyObject_HEAD void *ptr;
    Py_ssize_t size;
    int device;
    Py_ssize_t exports;
} devbuf_object;

static void devbuf_dealloc(devbuf_object *self)
{
    PyTypeObject *tp = Py_TYPE((PyObject *)self);
    rl_cuda_free(self->device, self->ptr);
    ((freefunc)PyType_GetSlot(tp, Py_tp_free))(self);
    Py_DECREF(tp);
}

static int devbuf_getbuffer(devbuf_object *self, Py_buffer *view, int flags)
{
    return PyBuffer_FillInfo(view, (PyObject *)self, self->ptr, self->size, 0,
                             flags);
}

static PyObject *devbuf_get_ptr(devbuf_object *self, void *closure)
{
    (void)closure;
    return PyLong_FromUnsignedLongLong(
        (unsigned long long)(uintptr_t)self->ptr);
}

static PyGetSetDef devbuf_getset[] = {
    {"ptr", (getter)devbuf_get_ptr, NULL, "Device address.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot devbuf_slots[] = {
    {Py_tp_dealloc, devbuf_dealloc},
    {Py_tp_getset, devbuf_getset},
    {Py_bf_getbuffer, devbuf_getbuffer},
    {Py_tp_doc, "Device memory from cudaMalloc, freed with the object. "
                "Its buffer is only readable where device memory is host "
                "memory (the fake runtime)."},
    {0, NULL},
};

static PyType_Spec devbuf_spec = {
    .name = "ringloader._core.DeviceBuffer",
    .basicsize = sizeof(devbuf_object),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = devbuf_slots,
};

/* cuda_malloc(device, size) -> DeviceBuffer */
static PyObject *py_cuda_malloc(PyObject *module, PyObject *args)
{
    int device;
    Py_ssize_t size;
    if (!PyArg_ParseTuple(args, "in", &device, &size)) {
        return NULL;
    }
    rl_module_state *st = PyModule_GetState(module);
    char msg[RL_MSG_MAX];
    void *p = NULL;
    int rc = rl_cuda_malloc(device, &p, (size_t)size, msg);
    if (rc != 0) {
        return rl__py_raise(st, rc, NULL, msg);
    }
    devbuf_object *b = PyObject_New(devbuf_object, st->devbuf_type);
    if (b == NULL) {
        rl_cuda_free(device, p);
        return NULL;
    }
    b->ptr = p;
    b->size = size;
    b->device = device;
    return (PyObject *)b;
}

/* cuda_stream_create(device) -> int handle */
static PyObject *py_cuda_stream_create(PyObject *module, PyObject *args)
{
    int device;
    if (!PyArg_ParseTuple(args, "i", &device)) {
        return NULL;
    }
    char msg[RL_MSG_MAX];
    uintptr_t s = 0;
    int rc = rl_cuda_stream_create(device, &s, msg);
    if (rc != 0) {
        return rl__py_raise(PyModule_GetState(module), rc, NULL, msg);
    }
    return PyLong_FromUnsignedLongLong((unsigned long long)s);
}

/* cuda_stream_sync(device, stream) */
static PyObject *py_cuda_stream_sync(PyObject *module, PyObject *args)
{
    int device, rc;
    unsigned long long stream;
    if (!PyArg_ParseTuple(args, "iK", &device, &stream)) {
        return NULL;
    }
    char msg[RL_MSG_MAX];
    Py_BEGIN_ALLOW_THREADS
    rc = rl_cuda_stream_sync(device, (uintptr_t)stream, msg);
    Py_END_ALLOW_THREADS
    if (rc != 0) {
        return rl__py_raise(PyModule_GetState(module), rc, NULL, msg);
    }
    Py_RETURN_NONE;
}

/* read_bench(paths, offsets, lengths, backend, threads, batch)
 *   -> (bytes, seconds): the I/O layer alone, for benchmarks/bench_io.py. */
static PyObject *py_read_bench(PyObject *module, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"paths",   "offsets", "lengths", "backend",
                             "threads", "batch",   "direct",  NULL};
    PyObject *paths, *offsets, *lengths;
    const char *backend;
    int threads, batch, direct = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOsii|p", kwlist, &paths,
                                     &offsets, &lengths, &backend, &threads,
                                     &batch, &direct)) {
        return NULL;
    }
    rl_io_backend be = strcmp(backend, "io_uring") == 0 ? RL_IO_URING
                       : strcmp(backend, "pread") == 0  ? RL_IO_PREAD
                                                        : RL_IO_AUTO;
    if (be == RL_IO_AUTO) {
        PyErr_SetString(PyExc_ValueError, "backend: io_uring or pread");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(paths, "paths must be a sequence");
    if (seq == NULL) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Size(seq);
    PyObject **owned = calloc((size_t)n + 1, sizeof(*owned));
    const char **cpaths = calloc((size_t)n + 1, sizeof(*cpaths));
    uint64_t *offs = calloc((size_t)n + 1, sizeof(*offs));
    int64_t *lens = calloc((size_t)n + 1, sizeof(*lens));
    PyObject *result = NULL;
    if (!owned || !cpaths || !offs || !lens) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyUnicode_FSConverter(rl__py_fast_item(seq, i), &owned[i])) {
            goto out;
        }
        cpaths[i] = PyBytes_AsString(owned[i]);
        lens[i] = -1;
        if (offsets != Py_None) {
            PyObject *o = PySequence_GetItem(offsets, i);
            PyObject *l = o ? PySequence_GetItem(lengths, i) : NULL;
            offs[i] = o ? PyLong_AsUnsignedLongLong(o) : 0;
            lens[i] = l ? PyLong_AsLongLong(l) : 0;
            Py_XDECREF(o);
            Py_XDECREF(l);
            if (PyErr_Occurred()) {
                goto out;
            }
        }
    }
    uint64_t bytes = 0;
    double seconds = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = rl_iobench_read(be, threads, batch, direct != 0, cpaths,
                         offsets != Py_None ? offs : NULL,
                         offsets != Py_None ? lens : NULL, (int)n, &bytes,
                         &seconds);
    Py_END_ALLOW_THREADS
    if (rc != 0) {
        rl__py_raise(PyModule_GetState(module), rc, NULL, "read failed");
        goto out;
    }
    result = Py_BuildValue("Kd", (unsigned long long)bytes, seconds);
out:
    if (owned) {
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_XDECREF(owned[i]);
        }
    }
    free(owned);
    free(cpaths);
    free(offs);
    free(lens);
    Py_DECREF(seq);
    return result;
}

/* check_member(kind, data, max_digits=0) -> None or why. */
static PyObject *py_check_member(PyObject *self, PyObject *args)
{
    (void)self;
    int kind, max_digits = 0;
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "iy*|i", &kind, &data, &max_digits)) {
        return NULL;
    }
    char why[RL_MSG_MAX] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc =
        rl_field_check_bytes(kind, data.buf, (size_t)data.len, max_digits, why);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    if (rc == 0) {
        Py_RETURN_NONE;
    }
    return PyUnicode_FromString(why);
}

PyMethodDef rl__py_testing_methods[] = {
    {"check_member", py_check_member, METH_VARARGS,
     "check_member(kind, data, max_digits=0) -> None, or why the member "
     "fails core/fields.h's check of that kind (1 UTF-8, 2 JSON, 3 int)."},
    {"read_bench", (PyCFunction)(void (*)(void))py_read_bench,
     METH_VARARGS | METH_KEYWORDS,
     "read_bench(paths, offsets, lengths, backend, threads, batch, "
     "direct=False) -> (bytes, seconds)."},
    {"cuda_malloc", py_cuda_malloc, METH_VARARGS,
     "cuda_malloc(device, size) -> DeviceBuffer."},
    {"cuda_stream_create", py_cuda_stream_create, METH_VARARGS,
     "cuda_stream_create(device) -> stream handle."},
    {"cuda_stream_sync", py_cuda_stream_sync, METH_VARARGS,
     "cuda_stream_sync(device, stream)."},
    {NULL, NULL, 0, NULL},
};

int rl__py_testing_init(PyObject *module, rl_module_state *st)
{
    st->devbuf_type =
        (PyTypeObject *)PyType_FromModuleAndSpec(module, &devbuf_spec, NULL);
    if (st->devbuf_type == NULL) {
        return -1;
    }
    if (PyModule_AddType(module, st->devbuf_type) < 0 ||
        PyModule_AddFunctions(module, rl__py_testing_methods) < 0) {
        return -1;
    }
    return PyModule_AddIntConstant(module, "test_hooks", 1);
}
