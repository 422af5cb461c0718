/*
 * python/batch.c - the Batch type: one batch, on the host or on a device,
 * exported without copying.
 *
 * DESIGN: a host Batch wraps one handed-out slot and exports it through
 * DLPack (__dlpack__, what torch.from_dlpack uses) and the buffer protocol
 * (numpy). Each export holds its own reference on the slot, released by
 * plain C (rl_slot_release is thread-safe and needs no GIL), so a tensor
 * freed on any thread, with or without the GIL, even after the Pipeline is
 * gone, returns its slot safely. A device Batch describes the device
 * buffer its batch was copied into (the consumer's stream already waits for
 * the copy) and keeps the buffer's owner, the object the Pipeline's
 * allocator returned, alive for as long as the Batch or an export of it
 * lives; that export's deleter is the one path from C back into Python,
 * and takes the GIL first. Both kinds report the same things: shape,
 * fallback positions and replaced samples.
 *
 * A batch of a pipeline with several views (core/sample.h) is one Batch
 * per view, each exporting its own region of the slot or buffer (its
 * offset, shape and dtype) and holding its own reference on the slot or
 * owner; the first view's Batch is the one next() returns, and its `views`
 * lists them all. A one-view batch is its own only view.
 *
 * A varying batch (core/pipeline.h: each sample its own size) is exported
 * sample by sample: its `samples` are one Batch each, (C, h, w) or
 * (h, w, C) at the sample's own address in the slot's arena or its own
 * buffer (rl_slot_sample), each holding its own reference on the slot
 * (on a device: at its offset in the device buffer, rl_batch_report's
 * places, each keeping the buffer's owner alive, or, for a sample past
 * the arena, the spill buffer's owner); the batch itself
 * exports nothing (BufferError: its samples have no one
 * shape).
 */
#include "python/module.h"

#include <stdlib.h>
#include <string.h>

/* ---- DLPack (the ABI-stable structs of dlpack.h v0.8, our own copy) ---- */

enum { DL_CPU = 1, DL_CUDA = 2 };

typedef struct {
    int32_t device_type;
    int32_t device_id;
} dl_device;

typedef struct {
    uint8_t code; /* 1 = kDLUInt, 2 = kDLFloat, 4 = kDLBfloat */
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
    rl_slot *slot;   /* host: a reference on the slot */
    PyObject *owner; /* device: a reference on the buffer's owner */
} export_ctx;

static void export_delete(dl_managed *m)
{
    export_ctx *e = (export_ctx *)m;
    if (e->slot != NULL) {
        rl_slot_release(e->slot);
    }
    if (e->owner != NULL && Py_IsInitialized()) {
        PyGILState_STATE g = PyGILState_Ensure();
        Py_DECREF(e->owner);
        PyGILState_Release(g);
    }
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
    PyObject_HEAD rl_slot *slot; /* host batches */
    void *dev_ptr;               /* device batches */
    size_t offset;               /* of this view's region, in bytes */
    PyObject *others;            /* the first view's: the other views */
    int device;                  /* CUDA device, or -1 on the host */
    PyObject *owner;    /* device batches: the buffer's owner, or None */
    PyObject *fallback; /* tuple of positions decoded by a fallback */
    PyObject *replaced; /* tuple of (position, id, exception) */
    PyObject *ids;      /* tuple: the id of each position's sample */
    PyObject *keys;     /* tuple: each position's random key, or None */
    PyObject *fields;   /* tuple of bytes (a sample's field bytes), or None */
    unsigned long long ticket; /* its submission number */
    rl_dtype dtype;
    int ndim;
    Py_ssize_t shape[4];
    Py_ssize_t strides[4]; /* elements */
    uint8_t *at;           /* a varying batch's sample: its first byte */
    PyObject *samples;     /* a varying batch's: a Batch per sample, or NULL */
} batch_object;

/* The first byte a host Batch exports. */
static uint8_t *host_data(const batch_object *self)
{
    return self->at != NULL ? self->at
                            : rl_slot_data(self->slot) + self->offset;
}

static void dl_type_of(rl_dtype t, dl_dtype *out)
{
    static const uint8_t codes[] = {1, 2, 2, 4}, bits[] = {8, 32, 16, 16};
    out->lanes = 1;
    out->code = codes[t];
    out->bits = bits[t];
}

static void batch_dealloc(batch_object *self)
{
    PyTypeObject *tp = Py_TYPE((PyObject *)self);
    if (self->slot != NULL) {
        rl_slot_release(self->slot);
    }
    Py_XDECREF(self->owner);
    Py_XDECREF(self->fallback);
    Py_XDECREF(self->replaced);
    Py_XDECREF(self->ids);
    Py_XDECREF(self->keys);
    Py_XDECREF(self->fields);
    Py_XDECREF(self->others);
    Py_XDECREF(self->samples);
    ((freefunc)PyType_GetSlot(tp, Py_tp_free))(self);
    Py_DECREF(tp);
}

/* A varying batch's samples have their own sizes: it has no one buffer
 * (its shape's zeros would export nothing). -1 with a BufferError. */
static int refuse_varying(const batch_object *self)
{
    if (self->samples == NULL) {
        return 0;
    }
    PyErr_SetString(PyExc_BufferError,
                    "a batch of varying sizes has no one buffer: export each "
                    "of its .samples");
    return -1;
}

static PyObject *batch_dlpack(batch_object *self, PyObject *args, PyObject *kw)
{
    /* stream, max_version, dl_device and copy are accepted and ignored:
     * host memory has no stream to order against, and a device batch's
     * consumer stream already waits for its copy (Pipeline.next); the
     * unversioned capsule is what every consumer understands. */
    (void)args;
    (void)kw;
    if (refuse_varying(self) != 0) {
        return NULL;
    }
    export_ctx *e = calloc(1, sizeof(*e));
    if (e == NULL) {
        return PyErr_NoMemory();
    }
    if (self->slot != NULL) {
        e->slot = self->slot;
        rl_slot_retain(e->slot);
        e->m.dl_tensor.data = host_data(self);
        e->m.dl_tensor.device.device_type = DL_CPU;
    } else {
        e->owner = Py_NewRef(self->owner);
        e->m.dl_tensor.data = (uint8_t *)self->dev_ptr + self->offset;
        e->m.dl_tensor.device.device_type = DL_CUDA;
        e->m.dl_tensor.device.device_id = self->device;
    }
    for (int i = 0; i < self->ndim; i++) {
        e->shape[i] = self->shape[i];
        e->strides[i] = self->strides[i];
    }
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
    (void)unused;
    if (self->slot != NULL) {
        return Py_BuildValue("ii", DL_CPU, 0);
    }
    return Py_BuildValue("ii", DL_CUDA, self->device);
}

static int batch_getbuffer(batch_object *self, Py_buffer *view, int flags)
{
    if (refuse_varying(self) != 0) {
        return -1;
    }
    if (self->slot == NULL) {
        PyErr_SetString(PyExc_BufferError,
                        "a device batch has no host buffer: use DLPack");
        return -1;
    }
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
    view->len = itemsize;
    for (int i = 0; i < self->ndim; i++) {
        bytes[i] = self->strides[i] * itemsize;
        view->len *= self->shape[i];
    }
    /* Writable exports are fine: the slot belongs to the consumer now. */
    view->buf = host_data(self);
    view->obj = Py_NewRef((PyObject *)self);
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
    for (int i = 0; t != NULL && i < self->ndim; i++) {
        PyTuple_SetItem(t, i, PyLong_FromSsize_t(self->shape[i]));
    }
    return t;
}

static PyObject *batch_get_fallback(batch_object *self, void *closure)
{
    (void)closure;
    return Py_NewRef(self->fallback);
}

static PyObject *batch_get_fields(batch_object *self, void *closure)
{
    (void)closure;
    return Py_NewRef(self->fields);
}

static PyObject *batch_get_replaced(batch_object *self, void *closure)
{
    (void)closure;
    return Py_NewRef(self->replaced);
}

static PyObject *batch_get_ids(batch_object *self, void *closure)
{
    (void)closure;
    return Py_NewRef(self->ids);
}

static PyObject *batch_get_keys(batch_object *self, void *closure)
{
    (void)closure;
    return Py_NewRef(self->keys);
}

static PyObject *batch_get_ticket(batch_object *self, void *closure)
{
    (void)closure;
    return PyLong_FromUnsignedLongLong(self->ticket);
}

static PyObject *batch_get_owner(batch_object *self, void *closure)
{
    (void)closure;
    return Py_NewRef(self->owner ? self->owner : Py_None);
}

static PyObject *batch_get_views(batch_object *self, void *closure)
{
    (void)closure;
    Py_ssize_t n = self->others ? PyTuple_Size(self->others) : 0;
    PyObject *t = PyTuple_New(1 + n);
    if (t != NULL) {
        PyTuple_SetItem(t, 0, Py_NewRef((PyObject *)self));
        for (Py_ssize_t i = 0; i < n; i++) {
            PyTuple_SetItem(t, 1 + i,
                            Py_NewRef(PyTuple_GetItem(self->others, i)));
        }
    }
    return t;
}

static PyObject *batch_get_samples(batch_object *self, void *closure)
{
    (void)closure;
    return Py_NewRef(self->samples ? self->samples : Py_None);
}

static PyObject *batch_get_offset(batch_object *self, void *closure)
{
    (void)closure;
    return PyLong_FromSize_t(self->offset);
}

static PyObject *batch_get_device(batch_object *self, void *closure)
{
    (void)closure;
    return PyLong_FromLong(self->device);
}

static PyMethodDef batch_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))batch_dlpack,
     METH_VARARGS | METH_KEYWORDS, "Export as a DLPack capsule (zero copy)."},
    {"__dlpack_device__", (PyCFunction)batch_dlpack_device, METH_NOARGS,
     "(device_type, device_id): (1, 0) the CPU, or (2, N) CUDA device N."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef batch_getset[] = {
    {"shape", (getter)batch_get_shape, NULL, "Shape of the batch.", NULL},
    {"fallback", (getter)batch_get_fallback, NULL,
     "Positions of samples decoded by a fallback decoder (not JPEG).", NULL},
    {"replaced", (getter)batch_get_replaced, NULL,
     "(position, replacement id, exception) of samples that failed and "
     "were replaced (skip_errors=True).",
     NULL},
    {"fields", (getter)batch_get_fields, NULL,
     "Each sample's field bytes (bytes; a tar shard's members beside the "
     "image), or None when the pipeline reads images alone.",
     NULL},
    {"ids", (getter)batch_get_ids, NULL,
     "The id of the sample at each position: those submitted, replacements "
     "put in.",
     NULL},
    {"keys", (getter)batch_get_keys, NULL,
     "The random key each position's sample was drawn with: the one "
     "submitted, or a replacement's own (skip_errors=True).",
     NULL},
    {"ticket", (getter)batch_get_ticket, NULL,
     "The number submit() returned for this batch.", NULL},
    {"owner", (getter)batch_get_owner, NULL,
     "Device batches: the object the allocator returned for its buffer.", NULL},
    {"views", (getter)batch_get_views, NULL,
     "The Batch of each view of the samples (this one first), each its own "
     "region of the batch: a one-view batch is (self,).",
     NULL},
    {"samples", (getter)batch_get_samples, NULL,
     "A varying batch's samples: a Batch each, (C, h, w) or (h, w, C) at its "
     "own size; None for a batch of one size.",
     NULL},
    {"offset", (getter)batch_get_offset, NULL,
     "Where this view's region starts in the slot or buffer, in bytes.", NULL},
    {"device", (getter)batch_get_device, NULL,
     "The CUDA device of a device batch, -1 on the host.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot batch_slots[] = {
    {Py_tp_dealloc, batch_dealloc},
    {Py_tp_methods, batch_methods},
    {Py_tp_getset, batch_getset},
    {Py_bf_getbuffer, batch_getbuffer},
    {Py_bf_releasebuffer, batch_releasebuffer},
    {Py_tp_doc, "A batch of images in a batch slot or a device buffer; "
                "export it with torch.from_dlpack() (or numpy.asarray() on "
                "the host)."},
    {0, NULL},
};

static PyType_Spec batch_spec = {
    .name = "ringloader._core.Batch",
    .basicsize = sizeof(batch_object),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = batch_slots,
};

/* The report's lists as Python tuples into b. 0 or -1. */
static int batch_lists(rl_module_state *st, batch_object *b,
                       const rl_batch_report *rep)
{
    b->ticket = rep->ticket;
    b->fallback = PyTuple_New(rep->n_fallback);
    b->replaced = PyTuple_New(rep->n_replaced);
    b->ids = rl__py_batch_ids(rep);
    b->keys = rl__py_batch_keys(rep);
    b->fields = rep->fields != NULL ? PyTuple_New(rep->n) : Py_NewRef(Py_None);
    if (b->fallback == NULL || b->replaced == NULL || b->ids == NULL ||
        b->keys == NULL || b->fields == NULL) {
        return -1;
    }
    for (int i = 0; rep->fields != NULL && i < rep->n; i++) {
        PyObject *v = PyBytes_FromStringAndSize((const char *)rep->fields[i],
                                                (Py_ssize_t)rep->fields_len[i]);
        if (v == NULL) {
            return -1;
        }
        PyTuple_SetItem(b->fields, i, v);
    }
    for (int i = 0; i < rep->n_fallback; i++) {
        PyObject *v = PyLong_FromLong(rep->fallback[i]);
        if (v == NULL) {
            return -1;
        }
        PyTuple_SetItem(b->fallback, i, v);
    }
    for (int i = 0; i < rep->n_replaced; i++) {
        const rl_replacement *r = &rep->replaced[i];
        PyObject *exc = rl__py_sample_error(st, &r->error);
        PyObject *item =
            exc ? Py_BuildValue("(iLN)", r->error.pos, (long long)r->id, exc)
                : NULL;
        if (item == NULL) {
            return -1;
        }
        PyTuple_SetItem(b->replaced, i, item);
        /* The tuple is new and ours alone: safe to change. */
        PyObject *id = PyLong_FromLongLong(r->id);
        if (id == NULL || PyTuple_SetItem(b->ids, r->error.pos, id) != 0) {
            return -1;
        }
    }
    return 0;
}

/* The Batch of one view: its region at `offset`, its shape from place.
 * The slot reference or owner is its own (taken here). New reference, or
 * NULL with an exception. */
static batch_object *view_new(rl_module_state *st, rl_slot *slot,
                              uintptr_t dev_ptr, int device, PyObject *owner,
                              int n, const rl_place_config *place,
                              size_t offset)
{
    batch_object *b = PyObject_New(batch_object, st->batch_type);
    if (b == NULL) {
        return NULL;
    }
    if (slot != NULL) {
        rl_slot_retain(slot);
    }
    b->slot = slot;
    b->dev_ptr = (void *)dev_ptr;
    b->offset = offset;
    b->others = NULL;
    b->device = slot != NULL ? -1 : device;
    b->owner = slot != NULL ? NULL : Py_NewRef(owner);
    b->fallback = b->replaced = b->ids = b->keys = b->fields = NULL;
    b->at = NULL;
    b->samples = NULL;
    b->dtype = place->dtype;
    b->ndim = 4;
    Py_ssize_t h = place->out_h, w = place->out_w;
    if (place->layout == RL_LAYOUT_NHWC) {
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
    return b;
}

/* A varying batch's samples into b->samples: each a Batch of its own
 * size at its own address (rl_slot_sample), or, for a device batch (slot
 * NULL), at its offset in the device buffer or, past the arena, in the
 * spill buffer owned by spill_owner (rep->places). 0, or -1 with an
 * exception. */
static int batch_samples(rl_module_state *st, batch_object *b, rl_slot *slot,
                         PyObject *spill_owner, int n,
                         const rl_place_config *place,
                         const rl_batch_report *rep)
{
    if ((b->samples = PyTuple_New(n)) == NULL) {
        return -1;
    }
    for (int i = 0; i < n; i++) {
        rl_place_config one = *place;
        uint8_t *at = NULL;
        size_t offset = 0;
        uintptr_t dev_ptr = (uintptr_t)b->dev_ptr;
        PyObject *owner = b->owner;
        if (slot != NULL) {
            at = rl_slot_sample(slot, i, &one.out_w, &one.out_h);
        } else {
            offset = rep->places[i].offset;
            one.out_w = rep->places[i].w;
            one.out_h = rep->places[i].h;
            if (rep->places[i].spilled) {
                if (spill_owner == NULL) {
                    PyErr_SetString(PyExc_SystemError,
                                    "a spilled sample without its buffer");
                    return -1;
                }
                dev_ptr = (uintptr_t)rep->spill;
                owner = spill_owner;
            }
        }
        batch_object *o =
            view_new(st, slot, dev_ptr, b->device, owner, 1, &one, offset);
        if (o == NULL) {
            return -1;
        }
        o->at = at;
        o->ticket = b->ticket; /* the batch's report, as a view's */
        o->fallback = Py_NewRef(b->fallback);
        o->replaced = Py_NewRef(b->replaced);
        o->ids = Py_NewRef(b->ids);
        o->keys = Py_NewRef(b->keys);
        o->fields = Py_NewRef(b->fields);
        /* (C, h, w) or (h, w, C): the one sample's axes */
        o->ndim = 3;
        memmove(o->shape, o->shape + 1, sizeof(o->shape[0]) * 3);
        memmove(o->strides, o->strides + 1, sizeof(o->strides[0]) * 3);
        PyTuple_SetItem(b->samples, i, (PyObject *)o);
    }
    return 0;
}

PyObject *rl__py_batch_new(rl_module_state *st, rl_slot *slot,
                           uintptr_t dev_ptr, int device, PyObject *owner,
                           PyObject *spill_owner, int n,
                           const rl_place_config *places, int nviews,
                           const rl_batch_report *rep)
{
    batch_object *b =
        view_new(st, slot, dev_ptr, device, owner, n, &places[0], 0);
    if (slot != NULL) {
        rl_slot_release(slot); /* each view holds its own reference */
    }
    if (b == NULL || batch_lists(st, b, rep) != 0) {
        Py_XDECREF((PyObject *)b);
        return NULL;
    }
    int w, h;
    bool varying = slot != NULL ? rl_slot_sample(slot, 0, &w, &h) != NULL
                                : rep->places != NULL;
    if (varying &&
        batch_samples(st, b, slot, spill_owner, n, &places[0], rep) != 0) {
        Py_DECREF(b);
        return NULL;
    }
    if (nviews > 1 && (b->others = PyTuple_New(nviews - 1)) == NULL) {
        Py_DECREF(b);
        return NULL;
    }
    for (int v = 1; v < nviews; v++) {
        size_t at = rl_place_view_offset(places, nviews, n, v);
        batch_object *o =
            view_new(st, slot, dev_ptr, device, owner, n, &places[v], at);
        if (o == NULL) {
            Py_DECREF(b);
            return NULL;
        }
        /* The report is the batch's, the same for every view. */
        o->ticket = b->ticket;
        o->fallback = Py_NewRef(b->fallback);
        o->replaced = Py_NewRef(b->replaced);
        o->ids = Py_NewRef(b->ids);
        o->keys = Py_NewRef(b->keys);
        o->fields = Py_NewRef(b->fields);
        PyTuple_SetItem(b->others, v - 1, (PyObject *)o);
    }
    return (PyObject *)b;
}

int rl__py_batch_init(PyObject *module, rl_module_state *st)
{
    st->batch_type =
        (PyTypeObject *)PyType_FromModuleAndSpec(module, &batch_spec, NULL);
    if (st->batch_type == NULL) {
        return -1;
    }
    return PyModule_AddType(module, st->batch_type);
}
