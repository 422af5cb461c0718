/*
 * py_pipeline.c - the Pipeline and Batch types of ringloader._core.
 *
 * DESIGN: a Pipeline wraps one rl_pipeline; a Batch wraps one handed-out
 * slot and exports it without copying, through DLPack (__dlpack__, what
 * torch.from_dlpack uses) and the buffer protocol (numpy). Each export holds
 * its own reference on the slot, released by plain C (rl_slot_release is
 * thread-safe and needs no GIL), so a tensor freed on any thread, with or
 * without the GIL, even after the Pipeline is gone, returns its slot safely.
 * Waiting for a batch releases the GIL and wakes every 50 ms to run Python's
 * signal handlers, so Ctrl-C interrupts a wait promptly.
 */
#include "py_module.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rl_pipeline.h"

/* ---- DLPack (the ABI-stable structs of dlpack.h v0.8, our own copy) ---- */

typedef struct {
    int32_t device_type; /* 1 = kDLCPU */
    int32_t device_id;
} dl_device;

typedef struct {
    uint8_t code; /* 1 = kDLUInt */
    uint8_t bits;
    uint16_t lanes;
} dl_dtype;

typedef struct {
    void *data;
    dl_device device;
    int32_t ndim;
    dl_dtype dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} dl_tensor;

typedef struct dl_managed {
    dl_tensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct dl_managed *self);
} dl_managed;

typedef struct {
    dl_managed m;
    int64_t shape[4];
    int64_t strides[4];
    rl_slot *slot;
} export_ctx;

static void export_delete(dl_managed *m)
{
    export_ctx *e = (export_ctx *)m;
    rl_slot_release(e->slot);
    free(e);
}

static void capsule_destructor(PyObject *capsule)
{
    /* A capsule never consumed still owns its tensor. */
    if (PyCapsule_IsValid(capsule, "dltensor")) {
        dl_managed *m = PyCapsule_GetPointer(capsule, "dltensor");
        m->deleter(m);
    }
}

/* ---- Batch ---- */

typedef struct {
    PyObject_HEAD
    rl_slot *slot;
    PyObject *fallback; /* tuple of positions left for the caller */
    PyObject *failed;   /* tuple of (position, exception) left for it */
    rl_dtype dtype;
    int ndim;
    Py_ssize_t shape[4];
    Py_ssize_t strides[4]; /* elements */
} batch_object;

/* DLPack type codes: kDLUInt 1, kDLFloat 2, kDLBfloat 4. */
static void dl_type_of(rl_dtype t, dl_dtype *out)
{
    out->lanes = 1;
    switch (t) {
    case RL_DTYPE_F32:
        out->code = 2;
        out->bits = 32;
        break;
    case RL_DTYPE_F16:
        out->code = 2;
        out->bits = 16;
        break;
    case RL_DTYPE_BF16:
        out->code = 4;
        out->bits = 16;
        break;
    default:
        out->code = 1;
        out->bits = 8;
        break;
    }
}

static void batch_dealloc(batch_object *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    if (self->slot != NULL) {
        rl_slot_release(self->slot);
    }
    Py_XDECREF(self->fallback);
    Py_XDECREF(self->failed);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static PyObject *batch_dlpack(batch_object *self, PyObject *args,
                              PyObject *kw)
{
    /* stream, max_version, dl_device and copy are accepted and ignored:
     * the memory is on the CPU, so there is no stream to order against,
     * and the unversioned capsule is what every consumer understands. */
    (void)args;
    (void)kw;
    export_ctx *e = calloc(1, sizeof(*e));
    if (e == NULL) {
        return PyErr_NoMemory();
    }
    e->slot = self->slot;
    rl_slot_retain(e->slot);
    for (int i = 0; i < self->ndim; i++) {
        e->shape[i] = self->shape[i];
        e->strides[i] = self->strides[i];
    }
    e->m.dl_tensor.data = rl_slot_data(self->slot);
    e->m.dl_tensor.device.device_type = 1;
    e->m.dl_tensor.device.device_id = 0;
    e->m.dl_tensor.ndim = self->ndim;
    dl_type_of(self->dtype, &e->m.dl_tensor.dtype);
    e->m.dl_tensor.shape = e->shape;
    e->m.dl_tensor.strides = e->strides;
    e->m.manager_ctx = e;
    e->m.deleter = export_delete;
    PyObject *cap = PyCapsule_New(&e->m, "dltensor", capsule_destructor);
    if (cap == NULL) {
        export_delete(&e->m);
    }
    return cap;
}

static PyObject *batch_dlpack_device(batch_object *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return Py_BuildValue("ii", 1, 0);
}

static int batch_getbuffer(batch_object *self, Py_buffer *view, int flags)
{
    /* Python's buffer protocol has no bfloat16: it is exported as uint16
     * ("H"); DLPack carries the real type. */
    static char *formats[] = {"B", "f", "e", "H"};
    Py_ssize_t itemsize = (Py_ssize_t)rl_dtype_size(self->dtype);
    /* The strides array must live as long as the view: keep it in
     * view->internal, freed by releasebuffer. */
    Py_ssize_t *bytes = PyMem_Malloc(sizeof(Py_ssize_t) * 4);
    if (bytes == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (int i = 0; i < self->ndim; i++) {
        bytes[i] = self->strides[i] * itemsize;
    }
    /* Writable exports are fine: the slot belongs to the consumer now. */
    view->buf = rl_slot_data(self->slot);
    view->obj = Py_NewRef(self);
    view->len = itemsize;
    for (int i = 0; i < self->ndim; i++) {
        view->len *= self->shape[i];
    }
    view->readonly = 0;
    view->itemsize = itemsize;
    view->format = (flags & PyBUF_FORMAT) ? formats[self->dtype] : NULL;
    view->ndim = self->ndim;
    view->shape = (flags & PyBUF_ND) ? self->shape : NULL;
    view->strides = (flags & PyBUF_STRIDES) ? bytes : NULL;
    view->suboffsets = NULL;
    view->internal = bytes;
    return 0;
}

static void batch_releasebuffer(batch_object *self, Py_buffer *view)
{
    (void)self;
    PyMem_Free(view->internal);
}

static PyObject *batch_get_shape(batch_object *self, void *closure)
{
    (void)closure;
    PyObject *t = PyTuple_New(self->ndim);
    if (t == NULL) {
        return NULL;
    }
    for (int i = 0; i < self->ndim; i++) {
        PyTuple_SET_ITEM(t, i, PyLong_FromSsize_t(self->shape[i]));
    }
    return t;
}

static PyMethodDef batch_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))batch_dlpack,
     METH_VARARGS | METH_KEYWORDS, "Export as a DLPack capsule (zero copy)."},
    {"__dlpack_device__", (PyCFunction)batch_dlpack_device, METH_NOARGS,
     "(device_type, device_id) of the data: (1, 0), the CPU."},
    {NULL, NULL, 0, NULL},
};

static PyObject *batch_get_fallback(batch_object *self, void *closure)
{
    (void)closure;
    return Py_NewRef(self->fallback);
}

static PyObject *batch_get_failed(batch_object *self, void *closure)
{
    (void)closure;
    return Py_NewRef(self->failed);
}

static PyGetSetDef batch_getset[] = {
    {"shape", (getter)batch_get_shape, NULL, "Shape of the batch.", NULL},
    {"fallback", (getter)batch_get_fallback, NULL,
     "Positions of samples that are not JPEG, left for the caller.", NULL},
    {"failed", (getter)batch_get_failed, NULL,
     "(position, exception) of samples that failed, left for the caller "
     "(skip_errors=True).",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot batch_slots[] = {
    {Py_tp_dealloc, batch_dealloc},
    {Py_tp_methods, batch_methods},
    {Py_tp_getset, batch_getset},
    {Py_bf_getbuffer, batch_getbuffer},
    {Py_bf_releasebuffer, batch_releasebuffer},
    {Py_tp_doc, "A batch of uint8 images in a batch slot; export it with "
                "torch.from_dlpack() or numpy.asarray()."},
    {0, NULL},
};

static PyType_Spec batch_spec = {
    .name = "ringloader._core.Batch",
    .basicsize = sizeof(batch_object),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = batch_slots,
};

/* ---- Pipeline ---- */

typedef struct {
    PyObject_HEAD
    rl_pipeline *p;
    rl_layout layout;
    rl_dtype dtype;
    int out_h, out_w;
    /* Calls of ours running with the GIL released (submit, next, fill,
     * cancel). close() from another thread meanwhile only sets
     * close_pending; the last of those calls to return closes. */
    int busy;
    bool close_pending;
    int device;  /* CUDA device of the GPU path, or -1 */
    char io_reason[RL_MSG_MAX];
} pipeline_object;

static int parse_io(const char *s, rl_io_backend *out)
{
    if (strcmp(s, "auto") == 0) {
        *out = RL_IO_AUTO;
    } else if (strcmp(s, "io_uring") == 0) {
        *out = RL_IO_URING;
    } else if (strcmp(s, "pread") == 0) {
        *out = RL_IO_PREAD;
    } else {
        PyErr_Format(PyExc_ValueError,
                     "io must be 'auto', 'io_uring' or 'pread', not '%s'", s);
        return -1;
    }
    return 0;
}

/* dtype name and the per-channel affine map of float outputs. */
static int parse_dtype(const char *name, PyObject *mul, PyObject *add,
                       rl_pipeline_config *cfg)
{
    static const char *names[] = {"uint8", "float32", "float16", "bfloat16"};
    int found = -1;
    for (int i = 0; i < 4; i++) {
        if (strcmp(name, names[i]) == 0) {
            found = i;
        }
    }
    if (found < 0) {
        PyErr_Format(PyExc_ValueError,
                     "dtype must be uint8, float32, float16 or bfloat16, "
                     "not '%s'", name);
        return -1;
    }
    cfg->dtype = (rl_dtype)found;
    for (int c = 0; c < 3; c++) {
        cfg->mul[c] = 1.0f;
        cfg->add[c] = 0.0f;
    }
    if (mul != Py_None && !PyArg_ParseTuple(mul, "fff", &cfg->mul[0],
                                            &cfg->mul[1], &cfg->mul[2])) {
        return -1;
    }
    if (add != Py_None && !PyArg_ParseTuple(add, "fff", &cfg->add[0],
                                            &cfg->add[1], &cfg->add[2])) {
        return -1;
    }
    return 0;
}

static PyObject *pipeline_new(PyTypeObject *type, PyObject *args,
                              PyObject *kw)
{
    static char *kwlist[] = {"transform", "num_threads", "layout", "seed",
                             "io", "max_pixels", "max_scans",
                             "max_file_bytes", "allow_truncated", "dtype",
                             "mul", "add", "device", "copy_stream",
                             "fallback", "direct_io", "skip_errors", NULL};
    PyObject *spec, *mul = Py_None, *add = Py_None;
    const char *dtype = "uint8";
    int device = -1, fallback = 1, direct_io = 0, skip_errors = 0;
    unsigned long long copy_stream = 0;
    int nthreads = 1, allow_truncated = 0, max_scans = RL_DEFAULT_MAX_SCANS;
    const char *layout = "NCHW", *io = "auto";
    unsigned long long seed = 0, max_pixels = RL_DEFAULT_MAX_PIXELS,
                       max_file_bytes = RL_DEFAULT_MAX_FILE_BYTES;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$isKsKiKpsOOiKppp", kwlist,
                                     &spec, &nthreads, &layout, &seed, &io,
                                     &max_pixels, &max_scans, &max_file_bytes,
                                     &allow_truncated, &dtype, &mul, &add,
                                     &device, &copy_stream, &fallback,
                                     &direct_io, &skip_errors)) {
        return NULL;
    }
    rl_pipeline_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    if (parse_dtype(dtype, mul, add, &cfg) != 0) {
        return NULL;
    }
    if (rl__py_parse_transform(spec, &cfg.transform) != 0 ||
        parse_io(io, &cfg.io) != 0) {
        return NULL;
    }
    if (strcmp(layout, "NCHW") == 0) {
        cfg.layout = RL_LAYOUT_NCHW;
    } else if (strcmp(layout, "NHWC") == 0) {
        cfg.layout = RL_LAYOUT_NHWC;
    } else {
        PyErr_SetString(PyExc_ValueError, "layout must be 'NCHW' or 'NHWC'");
        return NULL;
    }
    cfg.nthreads = nthreads;
    cfg.seed = seed;
    cfg.cuda = device >= 0;
    cfg.fallback = fallback != 0;
    cfg.direct_io = direct_io != 0;
    cfg.skip_errors = skip_errors != 0;
    cfg.cuda_device = device;
    cfg.copy_stream = (uintptr_t)copy_stream;
    cfg.limits.max_pixels = max_pixels;
    cfg.limits.max_scans = max_scans;
    cfg.limits.max_file_bytes = max_file_bytes;
    cfg.limits.allow_truncated = allow_truncated != 0;

    pipeline_object *self = (pipeline_object *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->layout = cfg.layout;
    self->dtype = cfg.dtype;
    self->out_h = cfg.transform.out_h;
    self->out_w = cfg.transform.out_w;
    char msg[RL_MSG_MAX];
    Py_BEGIN_ALLOW_THREADS
    self->p = rl_pipeline_create(&cfg, msg);
    Py_END_ALLOW_THREADS
    if (self->p == NULL) {
        Py_DECREF(self);
        PyErr_SetString(device >= 0 ? PyExc_RuntimeError : PyExc_ValueError,
                        msg);
        return NULL;
    }
    self->device = device;
    snprintf(self->io_reason, sizeof(self->io_reason), "%s", msg);
    return (PyObject *)self;
}

static void pipeline_close_impl(pipeline_object *self)
{
    rl_pipeline *p = self->p;
    self->p = NULL;
    if (p != NULL) {
        Py_BEGIN_ALLOW_THREADS
        rl_pipeline_destroy(p);
        Py_END_ALLOW_THREADS
    }
}

/* Around every call that releases the GIL with self->p in use. */
static void busy_enter(pipeline_object *self)
{
    self->busy++;
}

static void busy_leave(pipeline_object *self)
{
    if (--self->busy == 0 && self->close_pending) {
        self->close_pending = false;
        pipeline_close_impl(self);
    }
}

static void pipeline_dealloc(pipeline_object *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    pipeline_close_impl(self);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static int check_open(pipeline_object *self)
{
    if (self->p == NULL || self->close_pending) {
        PyErr_SetString(PyExc_RuntimeError, "the pipeline is closed");
        return -1;
    }
    if (rl_pipeline_forked(self->p)) {
        PyErr_SetString(PyExc_RuntimeError,
                        "this pipeline belongs to the process that forked "
                        "this one: make a new one here");
        return -1;
    }
    return 0;
}

/* Converts a path-like item to an owned bytes object (new reference). */
static PyObject *fs_bytes(PyObject *item)
{
    PyObject *out = NULL;
    if (!PyUnicode_FSConverter(item, &out)) {
        return NULL;
    }
    return out;
}

/* submit(paths, indices, epoch, offsets=None, lengths=None) */
static PyObject *pipeline_submit(pipeline_object *self, PyObject *args,
                                 PyObject *kw)
{
    static char *kwlist[] = {"paths", "indices", "epoch", "offsets",
                             "lengths", "device_buffer", NULL};
    PyObject *paths, *indices, *offsets = Py_None, *lengths = Py_None;
    long long epoch;
    unsigned long long dev_ptr = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOL|OO$K", kwlist, &paths,
                                     &indices, &epoch, &offsets, &lengths,
                                     &dev_ptr) ||
        check_open(self) != 0) {
        return NULL;
    }
    PyObject *pseq = PySequence_Fast(paths, "paths must be a sequence");
    PyObject *iseq = pseq ? PySequence_Fast(indices,
                                            "indices must be a sequence")
                          : NULL;
    PyObject *oseq = NULL, *lseq = NULL;
    PyObject **owned = NULL;
    rl_source *src = NULL;
    PyObject *result = NULL;
    Py_ssize_t n = 0, i;
    if (iseq == NULL) {
        goto out;
    }
    n = PySequence_Fast_GET_SIZE(pseq);
    if (n < 1 || n != PySequence_Fast_GET_SIZE(iseq)) {
        PyErr_SetString(PyExc_ValueError,
                        "paths and indices must be non-empty and of the "
                        "same length");
        goto out;
    }
    if (offsets != Py_None) {
        oseq = PySequence_Fast(offsets, "offsets must be a sequence");
        lseq = oseq ? PySequence_Fast(lengths, "lengths must be a sequence")
                    : NULL;
        if (lseq == NULL) {
            goto out;
        }
        if (PySequence_Fast_GET_SIZE(oseq) != n ||
            PySequence_Fast_GET_SIZE(lseq) != n) {
            PyErr_SetString(PyExc_ValueError,
                            "offsets and lengths must match paths");
            goto out;
        }
    }
    owned = calloc((size_t)n, sizeof(*owned));
    src = calloc((size_t)n, sizeof(*src));
    if (owned == NULL || src == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    for (i = 0; i < n; i++) {
        owned[i] = fs_bytes(PySequence_Fast_GET_ITEM(pseq, i));
        if (owned[i] == NULL) {
            goto out;
        }
        src[i].path = PyBytes_AS_STRING(owned[i]);
        if ((Py_ssize_t)strlen(src[i].path) != PyBytes_GET_SIZE(owned[i])) {
            PyErr_SetString(PyExc_ValueError, "embedded NUL in a path");
            goto out;
        }
        src[i].index = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(iseq, i));
        src[i].length = -1;
        if (oseq != NULL) {
            src[i].offset = PyLong_AsUnsignedLongLong(
                PySequence_Fast_GET_ITEM(oseq, i));
            src[i].length =
                PyLong_AsLongLong(PySequence_Fast_GET_ITEM(lseq, i));
        }
        if (PyErr_Occurred()) {
            goto out;
        }
    }
    int rc;
    rl_pipeline *pl = self->p;
    /* May wait for an in-flight copy before refilling a pinned slot. */
    busy_enter(self);
    Py_BEGIN_ALLOW_THREADS
    rc = self->device >= 0
             ? rl_pipeline_submit_to(pl, src, (int)n, epoch,
                                     (void *)(uintptr_t)dev_ptr)
             : rl_pipeline_submit(pl, src, (int)n, epoch);
    Py_END_ALLOW_THREADS
    busy_leave(self);
    if (rc != 0) {
        rl__py_raise(rl__py_state_of(Py_TYPE(self)), rc, NULL,
                     "cannot submit the batch");
        goto out;
    }
    result = Py_NewRef(Py_None);
out:
    if (owned != NULL) {
        for (i = 0; i < n; i++) {
            Py_XDECREF(owned[i]);
        }
    }
    free(owned);
    free(src);
    Py_XDECREF(pseq);
    Py_XDECREF(iseq);
    Py_XDECREF(oseq);
    Py_XDECREF(lseq);
    return result;
}

/*
 * The failed samples of a batch as a tuple of (position, exception), the
 * exception being what next() would have raised for it (a DecodeError or
 * an OSError naming the file, with .index set). New reference, or NULL
 * with an exception set.
 */
static PyObject *failures_to_tuple(rl_module_state *st,
                                   const rl_sample_failure *f, int n)
{
    PyObject *out = PyTuple_New(n);
    for (int i = 0; out != NULL && i < n; i++) {
        rl__py_raise(st, f[i].status, f[i].path[0] ? f[i].path : NULL,
                     f[i].msg);
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        PyObject *idx = PyLong_FromLongLong(f[i].index);
        PyObject *item = NULL;
        if (value != NULL && idx != NULL &&
            PyObject_SetAttrString(value, "index", idx) == 0) {
            item = Py_BuildValue("(iO)", f[i].pos, value);
        }
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        Py_XDECREF(idx);
        if (item == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyTuple_SET_ITEM(out, i, item);
    }
    return out;
}

/* next(timeout=None) -> Batch, or None when no batch is in flight. */
static PyObject *pipeline_next(pipeline_object *self, PyObject *args,
                               PyObject *kw)
{
    static char *kwlist[] = {"timeout", "consumer_stream", NULL};
    PyObject *timeout = Py_None;
    unsigned long long consumer = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O$K", kwlist, &timeout,
                                     &consumer) ||
        check_open(self) != 0) {
        return NULL;
    }
    double limit = -1.0;
    if (timeout != Py_None) {
        limit = PyFloat_AsDouble(timeout);
        if (limit == -1.0 && PyErr_Occurred()) {
            return NULL;
        }
    }
    rl_module_state *st = rl__py_state_of(Py_TYPE(self));
    rl_batch_error *err = PyMem_Calloc(1, sizeof(*err));
    if (err == NULL) {
        return PyErr_NoMemory();
    }
    rl_slot *slot = NULL;
    int rc;
    double waited = 0.0;
    for (;;) {
        rl_pipeline *p = self->p;
        busy_enter(self);
        Py_BEGIN_ALLOW_THREADS
        rc = self->device >= 0
                 ? rl_pipeline_next_device(p, 50, (uintptr_t)consumer, err)
                 : rl_pipeline_next(p, 50, &slot, err);
        Py_END_ALLOW_THREADS
        if (rc != RL_ETIMEDOUT) {
            busy_leave(self); /* a batch taken stays valid if this closes */
            break;
        }
        busy_leave(self);
        waited += 0.05;
        if (PyErr_CheckSignals() != 0) {
            PyMem_Free(err);
            return NULL; /* KeyboardInterrupt; the batch stays in flight */
        }
        if (self->p == NULL || self->close_pending) {
            PyMem_Free(err);
            return rl__py_raise(st, RL_ECLOSED, NULL, "");
        }
        if (limit >= 0 && waited >= limit) {
            PyMem_Free(err);
            PyErr_SetString(PyExc_TimeoutError,
                            "no batch ready within the timeout");
            return NULL;
        }
    }
    if (rc == RL_ECLOSED) {
        PyMem_Free(err);
        Py_RETURN_NONE;
    }
    if (rc != 0) {
        free(err->fallback);
        free(err->failed);
        rl__py_raise(st, rc, err->path[0] ? err->path : NULL, err->msg);
        if (err->pos >= 0) {
            /* Which sample failed, so the caller can describe it (a tar
             * member, say) beyond the file name. */
            PyObject *type, *value, *tb;
            PyErr_Fetch(&type, &value, &tb);
            PyErr_NormalizeException(&type, &value, &tb);
            PyObject *idx = PyLong_FromLongLong(err->index);
            if (value != NULL && idx != NULL) {
                PyObject_SetAttrString(value, "index", idx);
            }
            Py_XDECREF(idx);
            PyErr_Restore(type, value, tb);
        }
        PyMem_Free(err);
        return NULL;
    }
    PyObject *fb = PyTuple_New(err->n_fallback);
    for (int i = 0; fb != NULL && i < err->n_fallback; i++) {
        PyTuple_SET_ITEM(fb, i, PyLong_FromLong(err->fallback[i]));
    }
    PyObject *failed =
        fb ? failures_to_tuple(st, err->failed, err->n_failed) : NULL;
    free(err->fallback);
    free(err->failed);
    PyMem_Free(err);
    if (fb == NULL || failed == NULL) {
        if (slot != NULL) {
            rl_slot_release(slot);
        }
        Py_XDECREF(fb);
        Py_XDECREF(failed);
        return NULL;
    }
    if (self->device >= 0) {
        /* The batch is in the caller's device buffer. */
        PyObject *pair = PyTuple_Pack(2, fb, failed);
        Py_DECREF(fb);
        Py_DECREF(failed);
        return pair;
    }
    batch_object *b = PyObject_New(batch_object, st->batch_type);
    if (b == NULL) {
        rl_slot_release(slot);
        Py_DECREF(fb);
        Py_DECREF(failed);
        return NULL;
    }
    b->slot = slot;
    b->fallback = fb;
    b->failed = failed;
    b->dtype = self->dtype;
    b->ndim = 4;
    Py_ssize_t n = rl_slot_count(slot), h = self->out_h, w = self->out_w;
    if (self->layout == RL_LAYOUT_NHWC) {
        Py_ssize_t shape[4] = {n, h, w, 3};
        Py_ssize_t strides[4] = {h * w * 3, w * 3, 3, 1};
        memcpy(b->shape, shape, sizeof(shape));
        memcpy(b->strides, strides, sizeof(strides));
    } else {
        Py_ssize_t shape[4] = {n, 3, h, w};
        Py_ssize_t strides[4] = {3 * h * w, h * w, w, 1};
        memcpy(b->shape, shape, sizeof(shape));
        memcpy(b->strides, strides, sizeof(strides));
    }
    return (PyObject *)b;
}

/* fill(dst, rgb, width, height, epoch, index): place an image decoded
 * elsewhere into dst, a writable buffer of one sample. */
static PyObject *pipeline_fill(pipeline_object *self, PyObject *args)
{
    Py_buffer dst, rgb;
    int w, h;
    long long epoch, index;
    if (check_open(self) != 0 ||
        !PyArg_ParseTuple(args, "w*y*iiLL", &dst, &rgb, &w, &h, &epoch,
                          &index)) {
        return NULL;
    }
    int rc = 0;
    char msg[RL_MSG_MAX] = "";
    if ((size_t)dst.len < rl_pipeline_sample_bytes(self->p) ||
        w <= 0 || h <= 0 || rgb.len < (Py_ssize_t)w * h * 3) {
        PyBuffer_Release(&dst);
        PyBuffer_Release(&rgb);
        PyErr_SetString(PyExc_ValueError, "fill: buffer sizes do not match");
        return NULL;
    }
    rl_pipeline *p = self->p;
    busy_enter(self);
    Py_BEGIN_ALLOW_THREADS
    rc = rl_pipeline_fill(p, dst.buf, rgb.buf, w, h, epoch, index, msg);
    Py_END_ALLOW_THREADS
    busy_leave(self);
    PyBuffer_Release(&dst);
    PyBuffer_Release(&rgb);
    if (rc != 0) {
        return rl__py_raise(rl__py_state_of(Py_TYPE(self)), rc, NULL, msg);
    }
    Py_RETURN_NONE;
}

static PyObject *pipeline_cancel(pipeline_object *self, PyObject *unused)
{
    (void)unused;
    if (self->busy > 0) {
        PyErr_SetString(PyExc_RuntimeError,
                        "cancel() while another thread uses the pipeline");
        return NULL;
    }
    if (self->p != NULL) {
        rl_pipeline *p = self->p;
        busy_enter(self);
        Py_BEGIN_ALLOW_THREADS
        rl_pipeline_cancel(p);
        Py_END_ALLOW_THREADS
        busy_leave(self);
    }
    Py_RETURN_NONE;
}

static PyObject *pipeline_close(pipeline_object *self, PyObject *unused)
{
    (void)unused;
    if (self->busy > 0) {
        /* Another thread is inside submit/next/fill/cancel with the GIL
         * released: the pipeline is freed when that call returns, and
         * from now on every call sees it closed. */
        self->close_pending = true;
        Py_RETURN_NONE;
    }
    pipeline_close_impl(self);
    Py_RETURN_NONE;
}

static PyObject *pipeline_stats(pipeline_object *self, PyObject *unused)
{
    (void)unused;
    if (check_open(self) != 0) {
        return NULL;
    }
    rl_pipeline_stats s;
    rl_pipeline_stats_get(self->p, &s);
    return Py_BuildValue(
        "{sKsKsKsKsdsdsisisKsK}", "samples", (unsigned long long)s.samples,
        "batches", (unsigned long long)s.batches, "bytes_read",
        (unsigned long long)s.bytes_read, "errors",
        (unsigned long long)s.errors, "read_seconds", s.read_ns / 1e9,
        "decode_seconds", s.decode_ns / 1e9, "inflight", s.inflight, "ready",
        s.ready, "direct_refused", (unsigned long long)s.direct_refused,
        "truncated", (unsigned long long)s.truncated);
}

static PyObject *pipeline_get_io(pipeline_object *self, void *closure)
{
    (void)closure;
    if (check_open(self) != 0) {
        return NULL;
    }
    return PyUnicode_FromString(rl_pipeline_io_name(self->p));
}

static PyObject *pipeline_get_io_reason(pipeline_object *self, void *closure)
{
    (void)closure;
    return PyUnicode_FromString(self->io_reason);
}

static PyObject *pipeline_get_inflight(pipeline_object *self, void *closure)
{
    (void)closure;
    return PyLong_FromLong(self->p ? rl_pipeline_inflight(self->p) : 0);
}

static PyObject *pipeline_get_pinned(pipeline_object *self, void *closure)
{
    (void)closure;
    return PyLong_FromLong(self->p ? rl_pipeline_pinned_slots(self->p) : 0);
}

static PyObject *pipeline_get_closed(pipeline_object *self, void *closure)
{
    (void)closure;
    /* A pipeline inherited across fork() is closed for the child. */
    return PyBool_FromLong(self->p == NULL || self->close_pending ||
                           rl_pipeline_forked(self->p));
}

static PyMethodDef pipeline_methods[] = {
    {"submit", (PyCFunction)(void (*)(void))pipeline_submit,
     METH_VARARGS | METH_KEYWORDS,
     "submit(paths, indices, epoch, offsets=None, lengths=None): queue a "
     "batch."},
    {"next", (PyCFunction)(void (*)(void))pipeline_next,
     METH_VARARGS | METH_KEYWORDS,
     "next(timeout=None) -> Batch | None: the oldest batch, in order."},
    {"fill", (PyCFunction)pipeline_fill, METH_VARARGS,
     "fill(dst, rgb, width, height, epoch, index): place a sample decoded "
     "elsewhere."},
    {"cancel", (PyCFunction)pipeline_cancel, METH_NOARGS,
     "Drop every batch in flight."},
    {"close", (PyCFunction)pipeline_close, METH_NOARGS,
     "Stop and join every thread; idempotent."},
    {"stats", (PyCFunction)pipeline_stats, METH_NOARGS,
     "Cumulative counters."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef pipeline_getset[] = {
    {"io_backend", (getter)pipeline_get_io, NULL, "'io_uring' or 'pread'.",
     NULL},
    {"io_reason", (getter)pipeline_get_io_reason, NULL,
     "Why io_uring is not used ('' when it is).", NULL},
    {"inflight", (getter)pipeline_get_inflight, NULL,
     "Batches submitted and not yet returned.", NULL},
    {"closed", (getter)pipeline_get_closed, NULL,
     "True after close(), and in a process forked after it was made.",
     NULL},
    {"pinned_slots", (getter)pipeline_get_pinned, NULL,
     "Pinned host slots allocated (GPU path).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot pipeline_slots[] = {
    {Py_tp_new, pipeline_new},
    {Py_tp_dealloc, pipeline_dealloc},
    {Py_tp_methods, pipeline_methods},
    {Py_tp_getset, pipeline_getset},
    {Py_tp_doc, "Pipeline(transform, *, num_threads=1, layout='NCHW', "
                "seed=0, io='auto', max_pixels=..., max_scans=500, "
                "max_file_bytes=..., allow_truncated=False, dtype='uint8', "
                "mul=None, add=None, device=-1, copy_stream=0, fallback=True, "
                "direct_io=False, skip_errors=False)"},
    {0, NULL},
};

static PyType_Spec pipeline_spec = {
    .name = "ringloader._core.Pipeline",
    .basicsize = sizeof(pipeline_object),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = pipeline_slots,
};

int rl__py_pipeline_init(PyObject *module, rl_module_state *st)
{
    st->pipeline_type = (PyTypeObject *)PyType_FromModuleAndSpec(
        module, &pipeline_spec, NULL);
    st->batch_type = (PyTypeObject *)PyType_FromModuleAndSpec(
        module, &batch_spec, NULL);
    if (st->pipeline_type == NULL || st->batch_type == NULL) {
        return -1;
    }
    if (PyModule_AddType(module, st->pipeline_type) < 0 ||
        PyModule_AddType(module, st->batch_type) < 0) {
        return -1;
    }
    return 0;
}
