/*
 * python/pipeline.c - the Pipeline type: one rl_pipeline, its source made
 * once from the dataset's table, batches submitted by sample id.
 *
 * DESIGN: this file is the type itself: its slots, methods and properties,
 * creation (the arguments made into a configuration by pipeline_config.c,
 * then rl_pipeline_create with the GIL released) and closing. Batches go
 * in and out through pipeline_batches.c. close() from another thread while
 * a call of ours runs with the GIL released only marks the pipeline; the
 * last such call to return closes it (pipeline_state.c).
 */
#include "python/pipeline.h"

#include <stdlib.h>

/* pipeline_new, with the views it parses left in *views for the caller to
 * free (the core copies them). */
static PyObject *pipeline_make(PyTypeObject *type, PyObject *args, PyObject *kw,
                               rl_view **views)
{
    rl_pipeline_config cfg;
    rl__py_pipeline *self = rl__py_pipeline_build(type, args, kw, &cfg, views);
    if (self == NULL) {
        return NULL;
    }
    char msg[RL_MSG_MAX] = "";
    int status;
    Py_BEGIN_ALLOW_THREADS
    self->p = rl_pipeline_create(&cfg, &status, msg);
    Py_END_ALLOW_THREADS
    cfg.field_records = NULL; /* create's, whether it succeeded or not */
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

static void pipeline_dealloc(rl__py_pipeline *self)
{
    PyTypeObject *tp = Py_TYPE((PyObject *)self);
    rl__py_pipeline_close_now(self);
    Py_XDECREF(self->allocator);
    for (int i = 0; i < 3; i++)
        Py_XDECREF(self->spill_exc[i]);
    Py_XDECREF(self->owners);
    Py_XDECREF(self->keep); /* after the threads that borrowed from it */
    rl__py_held_release(&self->held); /* after the source, which reads them */
    ((freefunc)PyType_GetSlot(tp, Py_tp_free))(self);
    Py_DECREF(tp);
}

/* ---- batches ---- */

static PyObject *pipeline_cancel(rl__py_pipeline *self, PyObject *unused)
{
    (void)unused;
    if (self->busy > 0) {
        PyErr_SetString(PyExc_RuntimeError,
                        "cancel() while another thread uses the pipeline");
        return NULL;
    }
    if (self->p != NULL) {
        rl_pipeline *p = self->p;
        rl__py_busy_enter(self);
        Py_BEGIN_ALLOW_THREADS
        rl_pipeline_cancel(p);
        Py_END_ALLOW_THREADS
        rl__py_busy_leave(self);
        PyDict_Clear(self->owners);
    }
    Py_RETURN_NONE;
}

static PyObject *pipeline_close(rl__py_pipeline *self, PyObject *unused)
{
    (void)unused;
    if (self->busy > 0) {
        /* Another thread is inside submit/next/cancel with the GIL
         * released: the pipeline is freed when that call returns, and
         * from now on every call sees it closed. */
        self->close_pending = true;
        Py_RETURN_NONE;
    }
    rl__py_pipeline_close_now(self);
    Py_RETURN_NONE;
}

static PyObject *pipeline_stats(rl__py_pipeline *self, PyObject *unused)
{
    (void)unused;
    if (rl__py_check_open(self) != 0) {
        return NULL;
    }
    rl_pipeline_stats s;
    rl_pipeline_stats_get(self->p, &s);
    return rl__py_stats_dict(&s);
}

static PyObject *pipeline_get_io(rl__py_pipeline *self, void *closure)
{
    (void)closure;
    if (rl__py_check_open(self) != 0) {
        return NULL;
    }
    return PyUnicode_FromString(rl_pipeline_io_name(self->p));
}

static PyObject *pipeline_get_io_reason(rl__py_pipeline *self, void *closure)
{
    (void)closure;
    if (rl__py_check_open(self) != 0) {
        return NULL;
    }
    return PyUnicode_FromString(rl_pipeline_io_reason(self->p));
}

static PyObject *pipeline_get_inflight(rl__py_pipeline *self, void *closure)
{
    (void)closure;
    return PyLong_FromLong(self->p ? rl_pipeline_inflight(self->p) : 0);
}

static PyObject *pipeline_get_pinned(rl__py_pipeline *self, void *closure)
{
    (void)closure;
    if (self->p == NULL || self->device < 0 || rl_pipeline_forked(self->p)) {
        return PyLong_FromLong(0);
    }
    rl_pipeline_stats s;
    rl_pipeline_stats_get(self->p, &s);
    return PyLong_FromLong(s.slots);
}

static PyObject *pipeline_get_copy_stream(rl__py_pipeline *self, void *closure)
{
    (void)closure;
    bool live = self->p != NULL && !rl_pipeline_forked(self->p);
    return PyLong_FromUnsignedLongLong(live ? self->copy_stream : 0);
}

static PyObject *pipeline_get_closed(rl__py_pipeline *self, void *closure)
{
    (void)closure;
    /* A pipeline inherited across fork() is closed for the child. */
    return PyBool_FromLong(self->p == NULL || self->close_pending ||
                           rl_pipeline_forked(self->p));
}

/* The HTTP source's URLs and keys (a TypeError for another source). */
static PyObject *pipeline_set_urls(rl__py_pipeline *self, PyObject *urls)
{
    if (rl__py_check_open(self)) {
        return NULL;
    }
    /* The URLs are copied with the GIL released: a close() meanwhile
     * waits for this call (busy) before it frees the source. */
    rl__py_busy_enter(self);
    PyObject *r = rl__py_http_set_urls(self->http, urls);
    rl__py_busy_leave(self);
    return r;
}

static PyObject *pipeline_set_keys(rl__py_pipeline *self, PyObject *args)
{
    return rl__py_check_open(self) ? NULL
                                   : rl__py_http_set_keys(self->http, args);
}

static PyMethodDef pipeline_methods[] = {
    {"submit", (PyCFunction)rl__py_pipeline_submit, METH_VARARGS,
     "submit(ids, keys, epoch) -> ticket: queue a batch of samples of the "
     "table; its Batch (or the exception of its failure) carries the "
     "ticket."},
    {"next", (PyCFunction)(void (*)(void))rl__py_pipeline_next,
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
     "fields=None, parts=None, starts=None, records=None, arena_bytes=0)"},
    {0, NULL},
};

static PyType_Spec pipeline_spec = {
    .name = "ringloader._core.Pipeline",
    .basicsize = sizeof(rl__py_pipeline),
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
