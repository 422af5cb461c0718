/*
 * rl_module.c - the ringloader._core module: state, error conversion and
 * the stateless functions (decode, plan, io_probe).
 *
 * DESIGN: multi-phase initialisation with per-module state and heap types
 * (PEP 489/630), so the module can be loaded in subinterpreters and its
 * types are freed with it. Every C status becomes a Python exception in one
 * function, rl__py_raise(). Arguments are parsed with the GIL held; the
 * decoding itself runs with the GIL released, on memory from malloc, never
 * from Python's allocator.
 */
#include "py_module.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rl_cuda.h"
#include "rl_decode.h"
#include "rl_io.h"
#include "rl_iobench.h"
#include "rl_plan.h"
#include "rl_resize.h"
#include "rl_sample.h"

rl_module_state *rl__py_state_of(PyTypeObject *type)
{
    return PyType_GetModuleState(type);
}

PyObject *rl__py_raise(rl_module_state *st, int status, const char *path,
                       const char *msg)
{
    if (status == -ENOMEM) {
        return PyErr_NoMemory();
    }
    if (status < 0) {
        /* OSError(errno, text, filename) picks the subclass
         * (FileNotFoundError, IsADirectoryError...) and keeps the name. */
        PyObject *p = path ? PyUnicode_DecodeFSDefault(path) : NULL;
        if (path != NULL && p == NULL) {
            return NULL;
        }
        PyObject *exc =
            p ? PyObject_CallFunction(PyExc_OSError, "isO", -status, msg, p)
              : PyObject_CallFunction(PyExc_OSError, "is", -status, msg);
        Py_XDECREF(p);
        if (exc != NULL) {
            PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
            Py_DECREF(exc);
        }
        return NULL;
    }
    switch (status) {
    case RL_EDECODE:
    case RL_ETRUNCATED:
    case RL_ETOOBIG:
    case RL_EFORMAT: {
        PyObject *p = path ? PyUnicode_DecodeFSDefault(path)
                           : Py_NewRef(Py_None);
        PyObject *text = p == NULL ? NULL
                         : path    ? PyUnicode_FromFormat(
                                      "cannot decode %U: %s", p, msg)
                                   : PyUnicode_FromString(msg);
        PyObject *exc = text ? PyObject_CallOneArg(st->decode_error, text)
                             : NULL;
        const char *kind = status == RL_ETRUNCATED ? "truncated"
                           : status == RL_ETOOBIG  ? "too_big"
                           : status == RL_EFORMAT  ? "not_jpeg"
                                                   : "corrupt";
        PyObject *r = PyUnicode_FromString(msg);
        PyObject *k = PyUnicode_FromString(kind);
        if (exc != NULL && r != NULL && k != NULL &&
            PyObject_SetAttrString(exc, "path", p) == 0 &&
            PyObject_SetAttrString(exc, "reason", r) == 0 &&
            PyObject_SetAttrString(exc, "kind", k) == 0) {
            PyErr_SetObject(st->decode_error, exc);
        }
        Py_XDECREF(p);
        Py_XDECREF(text);
        Py_XDECREF(exc);
        Py_XDECREF(r);
        Py_XDECREF(k);
        return NULL;
    }
    case RL_ECUDA:
        PyErr_Format(PyExc_RuntimeError, "CUDA: %s", msg ? msg : "");
        return NULL;
    case RL_ECLOSED:
        PyErr_SetString(PyExc_RuntimeError, "the loader is closed");
        return NULL;
    default:
        PyErr_Format(PyExc_SystemError, "ringloader internal error %d: %s",
                     status, msg ? msg : "");
        return NULL;
    }
}

static int get_int(PyObject *spec, const char *key, int dflt, int *out)
{
    PyObject *v = PyDict_GetItemString(spec, key); /* borrowed */
    if (v == NULL || v == Py_None) {
        *out = dflt;
        return 0;
    }
    long x = PyLong_AsLong(v);
    if (x == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (x < 0 || x > 65535) {
        PyErr_Format(PyExc_ValueError, "%s must be in 0..65535, not %ld", key,
                     x);
        return -1;
    }
    *out = (int)x;
    return 0;
}

static int get_pair(PyObject *spec, const char *key, double d0, double d1,
                    double *a, double *b)
{
    PyObject *v = PyDict_GetItemString(spec, key);
    if (v == NULL || v == Py_None) {
        *a = d0;
        *b = d1;
        return 0;
    }
    return PyArg_ParseTuple(v, "dd", a, b) ? 0 : -1;
}

int rl__py_parse_transform(PyObject *spec, rl_transform *t)
{
    memset(t, 0, sizeof(*t));
    if (!PyDict_Check(spec)) {
        PyErr_SetString(PyExc_TypeError, "transform spec must be a dict");
        return -1;
    }
    PyObject *kind = PyDict_GetItemString(spec, "kind");
    const char *k = kind ? PyUnicode_AsUTF8(kind) : NULL;
    if (k == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "transform spec needs a kind");
        }
        return -1;
    }
    if (strcmp(k, "resize_crop") == 0) {
        t->kind = RL_T_RESIZE_CROP;
    } else if (strcmp(k, "random_crop") == 0) {
        t->kind = RL_T_RANDOM_CROP;
    } else {
        PyErr_Format(PyExc_ValueError, "unknown transform kind %s", k);
        return -1;
    }
    PyObject *flip = PyDict_GetItemString(spec, "flip_p");
    t->flip_p = flip ? PyFloat_AsDouble(flip) : 0.0;
    if (PyErr_Occurred()) {
        return -1;
    }
    if (get_int(spec, "resize_short", 0, &t->resize_short) ||
        get_int(spec, "resize_h", 0, &t->resize_h) ||
        get_int(spec, "resize_w", 0, &t->resize_w) ||
        get_int(spec, "out_h", 0, &t->out_h) ||
        get_int(spec, "out_w", 0, &t->out_w) ||
        get_pair(spec, "scale", 0.08, 1.0, &t->scale_lo, &t->scale_hi) ||
        get_pair(spec, "ratio", 3.0 / 4.0, 4.0 / 3.0, &t->ratio_lo,
                 &t->ratio_hi)) {
        return -1;
    }
    if (t->out_h <= 0 || t->out_w <= 0) {
        PyErr_SetString(PyExc_ValueError,
                        "transform needs an output size (out_h, out_w)");
        return -1;
    }
    if (t->ratio_lo <= 0 || t->ratio_hi <= 0 || t->scale_lo < 0 ||
        t->scale_hi < t->scale_lo || t->flip_p < 0 || t->flip_p > 1) {
        PyErr_SetString(PyExc_ValueError, "invalid scale, ratio or flip_p");
        return -1;
    }
    return 0;
}

/* decode(data, *, max_pixels, max_scans, allow_truncated)
 *   -> (bytes, height, width): the full image in RGB, for tests and tools. */
static PyObject *py_decode(PyObject *module, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"data", "max_pixels", "max_scans",
                             "allow_truncated", NULL};
    Py_buffer view;
    unsigned long long max_pixels = RL_DEFAULT_MAX_PIXELS;
    int max_scans = RL_DEFAULT_MAX_SCANS, allow_truncated = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*|$Kip", kwlist, &view,
                                     &max_pixels, &max_scans,
                                     &allow_truncated)) {
        return NULL;
    }
    rl_module_state *st = PyModule_GetState(module);
    rl_limits lim = {max_pixels, max_scans, RL_DEFAULT_MAX_FILE_BYTES,
                     allow_truncated != 0};
    uint8_t *out = NULL;
    int w = 0, h = 0, rc;
    char msg[RL_MSG_MAX];
    Py_BEGIN_ALLOW_THREADS
    rl_decoder *d = rl_decoder_create();
    if (d == NULL) {
        rc = -ENOMEM;
    } else {
        rc = rl_sample_decode_full(d, view.buf, (size_t)view.len, &lim, &out,
                                   &w, &h, msg);
        rl_decoder_destroy(d);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (rc != 0) {
        return rl__py_raise(st, rc, NULL, msg);
    }
    PyObject *bytes = PyBytes_FromStringAndSize((const char *)out,
                                                (Py_ssize_t)w * h * 3);
    free(out);
    if (bytes == NULL) {
        return NULL;
    }
    return Py_BuildValue("Nii", bytes, h, w);
}

/* plan(spec, width, height, seed, epoch, index)
 *   -> (top, left, height, width, flip): the source box of one sample, as
 *   torchvision's get_params would give it. */
static PyObject *py_plan(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *spec;
    int width, height;
    unsigned long long seed;
    long long epoch, index;
    if (!PyArg_ParseTuple(args, "OiiKLL", &spec, &width, &height, &seed,
                          &epoch, &index)) {
        return NULL;
    }
    rl_transform t;
    if (rl__py_parse_transform(spec, &t) != 0) {
        return NULL;
    }
    rl_plan p;
    if (rl_plan_make(&t, width, height, seed, epoch, index, &p) != 0) {
        PyErr_SetString(PyExc_ValueError, "cannot plan this transform");
        return NULL;
    }
    return Py_BuildValue("ddddO", p.y, p.x, p.h, p.w,
                         p.flip ? Py_True : Py_False);
}

/* io_probe() -> (available: bool, reason: str) */
static PyObject *py_io_probe(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    char why[RL_MSG_MAX];
    bool ok;
    Py_BEGIN_ALLOW_THREADS
    ok = rl_io_uring_probe(why);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("Os", ok ? Py_True : Py_False, why);
}

/* cuda_probe() -> (available, message, library, device_count) */
static PyObject *py_cuda_probe(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    char msg[RL_MSG_MAX];
    const char *path = NULL;
    int n = 0, rc;
    Py_BEGIN_ALLOW_THREADS
    rc = rl_cuda_load(msg, &path);
    if (rc == 0) {
        rc = rl_cuda_device_count(&n, msg);
    }
    Py_END_ALLOW_THREADS
    return Py_BuildValue("Ossi", rc == 0 ? Py_True : Py_False, msg,
                         path ? path : "", n);
}

/* ---- device memory without torch (the fake runtime's tests) ---- */

typedef struct {
    PyObject_HEAD
    void *ptr;
    Py_ssize_t size;
    int device;
    Py_ssize_t exports;
} devbuf_object;

static void devbuf_dealloc(devbuf_object *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    rl_cuda_free(self->device, self->ptr);
    tp->tp_free(self);
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
    return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)self->ptr);
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
static PyObject *py_read_bench(PyObject *module, PyObject *args,
                               PyObject *kw)
{
    static char *kwlist[] = {"paths", "offsets", "lengths", "backend",
                             "threads", "batch", "direct", NULL};
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
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
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
        if (!PyUnicode_FSConverter(PySequence_Fast_GET_ITEM(seq, i),
                                   &owned[i])) {
            goto out;
        }
        cpaths[i] = PyBytes_AS_STRING(owned[i]);
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

/* resample_simd(cap=None) -> the resampler's SIMD level ("c", "sse2",
 * "avx2"); with cap, first lowers it to at most cap (for tests: call it
 * when no loader is running). */
static PyObject *py_resample_simd(PyObject *module, PyObject *args)
{
    (void)module;
    const char *cap = NULL;
    if (!PyArg_ParseTuple(args, "|z", &cap)) {
        return NULL;
    }
    if (cap != NULL) {
        rl_simd level;
        if (strcmp(cap, "c") == 0) {
            level = RL_SIMD_C;
        } else if (strcmp(cap, "sse2") == 0) {
            level = RL_SIMD_SSE2;
        } else if (strcmp(cap, "avx2") == 0) {
            level = RL_SIMD_AVX2;
        } else {
            PyErr_Format(PyExc_ValueError,
                         "unknown SIMD level %R: use 'c', 'sse2' or 'avx2'",
                         PyTuple_GET_ITEM(args, 0));
            return NULL;
        }
        rl_resample_set_simd(level);
    }
    return PyUnicode_FromString(rl_simd_name(rl_resample_simd()));
}

static PyMethodDef module_methods[] = {
    {"resample_simd", py_resample_simd, METH_VARARGS,
     "resample_simd(cap=None) -> 'c' | 'sse2' | 'avx2': the resampler's "
     "SIMD level, first capped at cap if given."},
    {"read_bench", (PyCFunction)(void (*)(void))py_read_bench,
     METH_VARARGS | METH_KEYWORDS,
     "read_bench(paths, offsets, lengths, backend, threads, batch, "
     "direct=False) -> (bytes, seconds)."},
    {"cuda_probe", py_cuda_probe, METH_NOARGS,
     "cuda_probe() -> (available, message, library, device_count)."},
    {"cuda_malloc", py_cuda_malloc, METH_VARARGS,
     "cuda_malloc(device, size) -> DeviceBuffer."},
    {"cuda_stream_create", py_cuda_stream_create, METH_VARARGS,
     "cuda_stream_create(device) -> stream handle."},
    {"cuda_stream_sync", py_cuda_stream_sync, METH_VARARGS,
     "cuda_stream_sync(device, stream)."},
    {"decode", (PyCFunction)(void (*)(void))py_decode,
     METH_VARARGS | METH_KEYWORDS,
     "decode(data) -> (rgb_bytes, height, width): full RGB decode."},
    {"plan", py_plan, METH_VARARGS,
     "plan(spec, width, height, seed, epoch, index) -> (top, left, h, w, "
     "flip)."},
    {"io_probe", py_io_probe, METH_NOARGS,
     "io_probe() -> (io_uring_available, reason_if_not)."},
    {NULL, NULL, 0, NULL},
};

static int module_exec(PyObject *m)
{
    rl_module_state *st = PyModule_GetState(m);
    st->decode_error = PyErr_NewExceptionWithDoc(
        "ringloader.DecodeError",
        "An image could not be decoded. Attributes: path (the file), reason "
        "(libjpeg's message), kind ('corrupt', 'truncated', 'too_big', "
        "'not_jpeg').",
        PyExc_ValueError, NULL);
    if (st->decode_error == NULL ||
        PyModule_AddObjectRef(m, "DecodeError", st->decode_error) < 0) {
        return -1;
    }
    if (PyModule_AddStringConstant(m, "libjpeg_version",
                                   rl_decode_libjpeg_version()) < 0 ||
        PyModule_AddIntConstant(m, "DEFAULT_MAX_PIXELS",
                                (long)RL_DEFAULT_MAX_PIXELS) < 0 ||
        PyModule_AddIntConstant(m, "DEFAULT_MAX_SCANS",
                                RL_DEFAULT_MAX_SCANS) < 0) {
        return -1;
    }
#ifdef RL_HAVE_LIBURING
    if (PyModule_AddIntConstant(m, "built_with_liburing", 1) < 0) {
        return -1;
    }
#else
    if (PyModule_AddIntConstant(m, "built_with_liburing", 0) < 0) {
        return -1;
    }
#endif
    st->devbuf_type = (PyTypeObject *)PyType_FromModuleAndSpec(
        m, &devbuf_spec, NULL);
    if (st->devbuf_type == NULL ||
        PyModule_AddType(m, st->devbuf_type) < 0) {
        return -1;
    }
    return rl__py_pipeline_init(m, st);
}

static int module_traverse(PyObject *m, visitproc visit, void *arg)
{
    rl_module_state *st = PyModule_GetState(m);
    Py_VISIT(st->decode_error);
    Py_VISIT(st->pipeline_type);
    Py_VISIT(st->batch_type);
    Py_VISIT(st->devbuf_type);
    return 0;
}

static int module_clear(PyObject *m)
{
    rl_module_state *st = PyModule_GetState(m);
    Py_CLEAR(st->decode_error);
    Py_CLEAR(st->pipeline_type);
    Py_CLEAR(st->batch_type);
    Py_CLEAR(st->devbuf_type);
    return 0;
}

static void module_free(void *m)
{
    module_clear((PyObject *)m);
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ringloader._core",
    .m_doc = "ringloader's C core: io_uring reads, libjpeg-turbo decode with "
             "fused transforms, batch slots. Private: use the ringloader "
             "package.",
    .m_size = sizeof(rl_module_state),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC PyInit__core(void)
{
    return PyModuleDef_Init(&module_def);
}
