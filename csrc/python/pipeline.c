/*
 * python/pipeline.c - the Pipeline type: one rl_pipeline, its source made
 * once from the dataset's table, batches submitted by sample id.
 *
 * DESIGN: the table of samples (paths, or byte ranges of files, or bytes
 * objects) crosses into C once, at creation, so a batch is only its ids and
 * keys. Waiting for a batch releases the GIL and wakes every 50 ms to run
 * Python's signal handlers, so Ctrl-C interrupts a wait promptly. With a
 * device, the allocator given at creation is called at submit, with the GIL
 * held, for the batch's device buffer; its owner waits in a dict under the
 * batch's ticket until next() puts it in the Batch the core reports with
 * that ticket. Nothing here is kept in step with the core by order alone:
 * a batch names itself (ticket, ids), so an exception between two calls
 * (Ctrl-C in a wait) can never pair one batch with another's owner or
 * ids. close() from another thread while a call of ours runs with the GIL
 * released only marks the pipeline; the last such call to return closes
 * it.
 */
#include "python/module.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    PyObject_HEAD rl_pipeline *p;
    rl_place_config places[RL_MAX_VIEWS]; /* each view's, for its Batch */
    int nviews;
    int busy; /* our calls running with the GIL released */
    bool close_pending;
    int device;            /* CUDA device of the device delivery, or -1 */
    uintptr_t copy_stream; /* device: the delivery's own copy stream */
    PyObject *allocator;   /* device: nbytes -> (owner, pointer) */
    PyObject *owners;      /* device: {ticket: (owner, pointer)} */
    PyObject *keep;        /* what C borrows: the fallback, memory buffers */
    rl_source *http;       /* the HTTP source (owned by p), or NULL */
    rl_decoder_def fallback_def;
} pipeline_object;

/* ---- creation and closing ---- */

/* pipeline_new, with the views it parses left in *views for the caller to
 * free (the core copies them). */
static PyObject *pipeline_make(PyTypeObject *type, PyObject *args, PyObject *kw,
                               rl_view **views)
{
    static char *kwlist[] = {"transform",
                             "paths",
                             "offsets",
                             "lengths",
                             "buffers",
                             "names",
                             "num_threads",
                             "layout",
                             "seed",
                             "io",
                             "max_pixels",
                             "max_scans",
                             "max_file_bytes",
                             "allow_truncated",
                             "dtype",
                             "mul",
                             "add",
                             "device",
                             "allocator",
                             "fallback",
                             "direct_io",
                             "skip_errors",
                             "max_consecutive_errors",
                             "http",
                             "fields",
                             "parts",
                             NULL};
    PyObject *spec, *paths = Py_None, *offsets = Py_None, *lengths = Py_None;
    PyObject *buffers = Py_None, *names = Py_None, *mul = Py_None;
    PyObject *add = Py_None, *allocator = Py_None, *fallback = Py_None;
    PyObject *http = Py_None, *fields = Py_None, *parts = Py_None;
    const char *dtype = "uint8", *layout = "NCHW", *io = "auto";
    int device = -1, direct_io = 0, skip_errors = 0, max_consecutive = 16;
    int nthreads = 1, allow_truncated = 0, max_scans = RL_DEFAULT_MAX_SCANS;
    unsigned long long seed = 0;
    unsigned long long max_pixels = RL_DEFAULT_MAX_PIXELS;
    unsigned long long max_file_bytes = RL_DEFAULT_MAX_FILE_BYTES;
    if (!PyArg_ParseTupleAndKeywords(
            args, kw, "O|$OOOOOisKsKiKpsOOiOOppiOOO", kwlist, &spec, &paths,
            &offsets, &lengths, &buffers, &names, &nthreads, &layout, &seed,
            &io, &max_pixels, &max_scans, &max_file_bytes, &allow_truncated,
            &dtype, &mul, &add, &device, &allocator, &fallback, &direct_io,
            &skip_errors, &max_consecutive, &http, &fields, &parts)) {
        return NULL;
    }
    rl_pipeline_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    rl_file_options fopt = {RL_IO_AUTO, direct_io != 0, max_file_bytes};
    if (rl__py_parse_views(spec, dtype, mul, add, layout, views,
                           &cfg.sample.nviews) != 0 ||
        rl__py_parse_io(io, &fopt.io) != 0) {
        return NULL;
    }
    cfg.sample.views = *views;
    if ((paths == Py_None) == (buffers == Py_None)) {
        PyErr_SetString(PyExc_TypeError, "give either paths or buffers");
        return NULL;
    }
    if (device >= 0 && !PyCallable_Check(allocator)) {
        PyErr_SetString(PyExc_TypeError, "a device needs an allocator");
        return NULL;
    }
    pipeline_object *self = (pipeline_object *)PyType_GenericAlloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->device = device;
    self->nviews = cfg.sample.nviews;
    for (int v = 0; v < self->nviews; v++) {
        self->places[v] = (*views)[v].place;
    }
    self->keep = PyList_New(0);
    self->owners = PyDict_New();
    self->allocator = Py_NewRef(allocator);
    if (self->keep == NULL || self->owners == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    rl_decode_add_native(&cfg.decoders);
    if (fallback != Py_None) {
        if (rl__py_fallback_def(fallback, &self->fallback_def) != 0 ||
            PyList_Append(self->keep, fallback) < 0) {
            Py_DECREF(self);
            return NULL;
        }
        cfg.decoders.defs[cfg.decoders.n++] = &self->fallback_def;
    }
    char msg[RL_MSG_MAX] = "";
    cfg.source = paths == Py_None
                     ? rl__py_memory_source(buffers, names, self->keep)
                 : http != Py_None
                     ? rl__py_http_source(paths, offsets, lengths, http,
                                          max_file_bytes, msg)
                     : rl__py_file_source(paths, offsets, lengths, &fopt, msg);
    self->http = http != Py_None ? cfg.source : NULL;
    if (cfg.source == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    if (rl__py_fields(fields, &cfg) != 0 || rl__py_parts(parts, &cfg) != 0) {
        rl__py_fields_free(&cfg);
        rl_source_destroy(cfg.source);
        self->http = NULL;
        Py_DECREF(self);
        return NULL;
    }
    if (device >= 0) {
        Py_BEGIN_ALLOW_THREADS
        cfg.deliver = rl_deliver_cuda_create(device, msg);
        Py_END_ALLOW_THREADS
        if (cfg.deliver == NULL) {
            rl__py_fields_free(&cfg);
            rl_source_destroy(cfg.source);
            Py_DECREF(self);
            PyErr_SetString(PyExc_RuntimeError, msg);
            return NULL;
        }
        self->copy_stream = rl_deliver_cuda_stream(cfg.deliver);
    }
    cfg.nthreads = nthreads;
    cfg.sample.seed = seed;
    cfg.sample.limits.max_pixels = max_pixels;
    cfg.sample.limits.max_scans = max_scans;
    cfg.sample.limits.max_file_bytes = max_file_bytes;
    cfg.sample.limits.allow_truncated = allow_truncated != 0;
    cfg.skip_errors = skip_errors != 0;
    cfg.max_consecutive_errors = max_consecutive;
    int status;
    Py_BEGIN_ALLOW_THREADS
    self->p = rl_pipeline_create(&cfg, &status, msg);
    Py_END_ALLOW_THREADS
    rl__py_fields_free(&cfg);
    if (self->p == NULL) {
        Py_DECREF(self);
        /* RL_ECONFIG a ValueError, -ENOMEM a MemoryError with msg. */
        rl__py_raise(rl__py_state_of(type), status, NULL, msg);
        return NULL;
    }
    return (PyObject *)self;
}

static PyObject *pipeline_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    rl_view *views = NULL;
    PyObject *self = pipeline_make(type, args, kw, &views);
    free(views);
    return self;
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
    if (self->owners != NULL) {
        PyDict_Clear(self->owners);
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
    PyTypeObject *tp = Py_TYPE((PyObject *)self);
    pipeline_close_impl(self);
    Py_XDECREF(self->allocator);
    Py_XDECREF(self->owners);
    Py_XDECREF(self->keep); /* after the threads that borrowed from it */
    ((freefunc)PyType_GetSlot(tp, Py_tp_free))(self);
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

/* ---- batches ---- */

/* ids and keys as int64 arrays (malloc'd into *ids, *keys). 0 or -1. */
static int parse_ids(PyObject *ids, PyObject *keys, int64_t **out_ids,
                     int64_t **out_keys, Py_ssize_t *n)
{
    *n = PySequence_Size(ids);
    if (*n < 0 || PySequence_Size(keys) != *n || *n < 1 || *n > (1 << 20)) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError,
                            "ids and keys must be non-empty and of the "
                            "same length");
        }
        return -1;
    }
    *out_ids = malloc(sizeof(int64_t) * (size_t)*n);
    *out_keys = malloc(sizeof(int64_t) * (size_t)*n);
    if (*out_ids == NULL || *out_keys == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < *n; i++) {
        (*out_ids)[i] = rl__py_item_i64(ids, i);
        (*out_keys)[i] = rl__py_item_i64(keys, i);
        if (PyErr_Occurred()) {
            return -1;
        }
    }
    return 0;
}

/* submit(ids, keys, epoch) -> ticket: queue a batch. */
static PyObject *pipeline_submit(pipeline_object *self, PyObject *args)
{
    PyObject *ids, *keys;
    long long epoch;
    if (!PyArg_ParseTuple(args, "OOL", &ids, &keys, &epoch) ||
        check_open(self) != 0) {
        return NULL;
    }
    int64_t *cids = NULL, *ckeys = NULL;
    Py_ssize_t n = 0;
    PyObject *result = NULL, *owner = NULL, *ticket_obj = NULL;
    uintptr_t dst = 0;
    if (parse_ids(ids, keys, &cids, &ckeys, &n) != 0) {
        goto out_free;
    }
    if (self->device >= 0) {
        size_t nbytes = rl_pipeline_batch_bytes(self->p, (int)n);
        if ((owner = rl__py_device_buffer(self->allocator, nbytes, &dst)) ==
            NULL) {
            goto out_free;
        }
    }
    int rc;
    uint64_t ticket = 0;
    rl_pipeline *p = self->p;
    busy_enter(self);
    Py_BEGIN_ALLOW_THREADS
    rc =
        rl_pipeline_submit(p, cids, ckeys, (int)n, epoch, (void *)dst, &ticket);
    Py_END_ALLOW_THREADS
    busy_leave(self);
    if (rc != 0) {
        rl__py_raise_submit(rl__py_state_of(Py_TYPE((PyObject *)self)), rc, p,
                            (int)n);
        goto out_free;
    }
    ticket_obj = PyLong_FromUnsignedLongLong(ticket);
    if (ticket_obj != NULL && owner != NULL && self->owners != NULL &&
        PyDict_SetItem(self->owners, ticket_obj, owner) < 0) {
        Py_CLEAR(ticket_obj); /* next() will find no owner: it raises */
    }
    result = ticket_obj;
out_free:
    Py_XDECREF(owner);
    free(cids);
    free(ckeys);
    return result;
}

/* Waits for the next batch in 50 ms steps, running signal handlers. */
static int wait_next(pipeline_object *self, double limit, uintptr_t consumer,
                     rl_slot **slot, rl_batch_report *rep)
{
    double waited = 0.0;
    for (;;) {
        rl_pipeline *p = self->p;
        int rc;
        busy_enter(self);
        Py_BEGIN_ALLOW_THREADS
        rc = rl_pipeline_next(p, 50, consumer, slot, rep);
        Py_END_ALLOW_THREADS
        busy_leave(self); /* a batch taken stays valid if this closes */
        if (rc != RL_ETIMEDOUT) {
            return rc;
        }
        waited += 0.05;
        if (PyErr_CheckSignals() != 0) {
            return -1; /* KeyboardInterrupt; the batch stays in flight */
        }
        if (self->p == NULL || self->close_pending) {
            rl__py_raise(rl__py_state_of(Py_TYPE((PyObject *)self)), RL_ECLOSED,
                         NULL, "");
            return -1;
        }
        if (limit >= 0 && waited >= limit) {
            PyErr_SetString(PyExc_TimeoutError,
                            "no batch ready within the timeout");
            return -1;
        }
    }
}

/* next(timeout=None, consumer_stream=0) -> Batch, or None when no batch
 * is in flight. */
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
    double limit = timeout == Py_None ? -1.0 : PyFloat_AsDouble(timeout);
    if (limit == -1.0 && PyErr_Occurred()) {
        return NULL;
    }
    rl_module_state *st = rl__py_state_of(Py_TYPE((PyObject *)self));
    rl_batch_report *rep = PyMem_Calloc(1, sizeof(*rep));
    if (rep == NULL) {
        return PyErr_NoMemory();
    }
    rl_slot *slot = NULL;
    int rc = wait_next(self, limit, (uintptr_t)consumer, &slot, rep);
    PyObject *result = NULL;
    if (rc == -1) {
        goto out_free;
    }
    if (rc == RL_ECLOSED) {
        result = Py_NewRef(Py_None);
        goto out_free;
    }
    PyObject *owner = self->device < 0
                          ? Py_NewRef(Py_None)
                          : rl__py_pop_owner(self->owners, rep->ticket);
    if (rc != 0 || owner == NULL) {
        Py_XDECREF(owner);
        if (rc != 0) {
            rl__py_raise_batch(st, rc, rep);
        } else if (!PyErr_Occurred()) { /* closed (owners dropped) */
            rl__py_raise(st, RL_ECLOSED, NULL, "");
        }
        goto out_free;
    }
    PyObject *buf = owner == Py_None ? Py_None : PyTuple_GetItem(owner, 0);
    uintptr_t ptr =
        owner == Py_None
            ? 0
            : (uintptr_t)PyLong_AsUnsignedLongLong(PyTuple_GetItem(owner, 1));
    result = rl__py_batch_new(st, slot, ptr, self->device, buf, rep->n,
                              self->places, self->nviews, rep);
    Py_DECREF(owner);
out_free:
    rl_batch_report_free(rep);
    PyMem_Free(rep);
    return result;
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
        PyDict_Clear(self->owners);
    }
    Py_RETURN_NONE;
}

static PyObject *pipeline_close(pipeline_object *self, PyObject *unused)
{
    (void)unused;
    if (self->busy > 0) {
        /* Another thread is inside submit/next/cancel with the GIL
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
    return rl__py_stats_dict(&s);
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
    if (check_open(self) != 0) {
        return NULL;
    }
    return PyUnicode_FromString(rl_pipeline_io_reason(self->p));
}

static PyObject *pipeline_get_inflight(pipeline_object *self, void *closure)
{
    (void)closure;
    return PyLong_FromLong(self->p ? rl_pipeline_inflight(self->p) : 0);
}

static PyObject *pipeline_get_pinned(pipeline_object *self, void *closure)
{
    (void)closure;
    if (self->p == NULL || self->device < 0 || rl_pipeline_forked(self->p)) {
        return PyLong_FromLong(0);
    }
    rl_pipeline_stats s;
    rl_pipeline_stats_get(self->p, &s);
    return PyLong_FromLong(s.slots);
}

static PyObject *pipeline_get_copy_stream(pipeline_object *self, void *closure)
{
    (void)closure;
    bool live = self->p != NULL && !rl_pipeline_forked(self->p);
    return PyLong_FromUnsignedLongLong(live ? self->copy_stream : 0);
}

static PyObject *pipeline_get_closed(pipeline_object *self, void *closure)
{
    (void)closure;
    /* A pipeline inherited across fork() is closed for the child. */
    return PyBool_FromLong(self->p == NULL || self->close_pending ||
                           rl_pipeline_forked(self->p));
}

/* The HTTP source's URLs and keys (a TypeError for another source). */
static PyObject *pipeline_set_urls(pipeline_object *self, PyObject *urls)
{
    return check_open(self) ? NULL : rl__py_http_set_urls(self->http, urls);
}

static PyObject *pipeline_set_keys(pipeline_object *self, PyObject *args)
{
    return check_open(self) ? NULL : rl__py_http_set_keys(self->http, args);
}

static PyMethodDef pipeline_methods[] = {
    {"submit", (PyCFunction)pipeline_submit, METH_VARARGS,
     "submit(ids, keys, epoch) -> ticket: queue a batch of samples of the "
     "table; its Batch (or the exception of its failure) carries the "
     "ticket."},
    {"next", (PyCFunction)(void (*)(void))pipeline_next,
     METH_VARARGS | METH_KEYWORDS,
     "next(timeout=None, consumer_stream=0) -> Batch | None: the oldest "
     "batch, in order."},
    {"set_urls", (PyCFunction)pipeline_set_urls, METH_O,
     "set_urls(urls): new fetch URLs of an HTTP source's objects."},
    {"set_keys", (PyCFunction)pipeline_set_keys, METH_VARARGS,
     "set_keys(region, access, secret, token=None): S3 GETs signed so."},
    {"cancel", (PyCFunction)pipeline_cancel, METH_NOARGS,
     "Drop every batch in flight."},
    {"close", (PyCFunction)pipeline_close, METH_NOARGS,
     "Stop and join every thread; idempotent."},
    {"stats", (PyCFunction)pipeline_stats, METH_NOARGS, "Cumulative counters."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef pipeline_getset[] = {
    {"io_backend", (getter)pipeline_get_io, NULL,
     "'io_uring', 'pread' or 'memory'.", NULL},
    {"io_reason", (getter)pipeline_get_io_reason, NULL,
     "Why io_uring is not used ('' when it is).", NULL},
    {"inflight", (getter)pipeline_get_inflight, NULL,
     "Batches submitted and not yet returned.", NULL},
    {"closed", (getter)pipeline_get_closed, NULL,
     "True after close(), and in a process forked after it was made.", NULL},
    {"pinned_slots", (getter)pipeline_get_pinned, NULL,
     "Pinned host slots allocated (device delivery).", NULL},
    {"copy_stream", (getter)pipeline_get_copy_stream, NULL,
     "Device delivery: the cudaStream_t handle of the pipeline's own copy "
     "stream (non-blocking, destroyed at close; 0 once closed). Device "
     "buffers are best allocated on it.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot pipeline_slots[] = {
    {Py_tp_new, pipeline_new},
    {Py_tp_dealloc, pipeline_dealloc},
    {Py_tp_methods, pipeline_methods},
    {Py_tp_getset, pipeline_getset},
    {Py_tp_doc,
     "Pipeline(transform, *, paths=None, offsets=None, lengths=None, "
     "buffers=None, names=None, num_threads=1, layout='NCHW', seed=0, "
     "io='auto', max_pixels=..., max_scans=500, max_file_bytes=..., "
     "allow_truncated=False, dtype='uint8', mul=None, add=None, device=-1, "
     "allocator=None, fallback=None, direct_io=False, "
     "skip_errors=False, max_consecutive_errors=16, http=None, "
     "fields=None, parts=None)"},
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
    st->pipeline_type =
        (PyTypeObject *)PyType_FromModuleAndSpec(module, &pipeline_spec, NULL);
    if (st->pipeline_type == NULL) {
        return -1;
    }
    return PyModule_AddType(module, st->pipeline_type);
}
