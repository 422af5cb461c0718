/*
 * python/pipeline_config.c - Pipeline()'s arguments made into the core's
 * configuration (python/pipeline.h, rl__py_pipeline_build).
 *
 * DESIGN. The table of samples (paths, or byte ranges of files, or bytes
 * objects) crosses into C once, here, at creation, so a batch is only its
 * ids and keys. This file reads the keywords, has the transform spec
 * (spec.c), the source (sources.c), the fallback decoder (fallback.c), the
 * fields and parts (sources.c) made, opens the device delivery, and keeps
 * in the new object whatever the core borrows for its lifetime (the views
 * of the table's arrays among them, released after the source). It does
 * not make the core pipeline: pipeline.c does, with what this returns.
 */
#include "python/pipeline.h"

#include <stdlib.h>
#include <string.h>

/* arena_bytes: None (0, the default) or an int in 0 .. RL_ARENA_MAX_BYTES,
 * checked here (no wrapping of a negative or huge int). 0, or -1 with a
 * TypeError or ValueError naming it. */
static int arena_parse(PyObject *arena, size_t *out)
{
    *out = 0;
    if (arena == Py_None) {
        return 0;
    }
    if (!PyLong_Check(arena) || PyBool_Check(arena)) {
        PyErr_Format(PyExc_TypeError, "arena_bytes must be an int, not %R",
                     arena);
        return -1;
    }
    int overflow = 0;
    long long n = PyLong_AsLongLongAndOverflow(arena, &overflow);
    if (n == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow != 0 || n < 0 || (unsigned long long)n > RL_ARENA_MAX_BYTES) {
        PyErr_Format(PyExc_ValueError,
                     "arena_bytes must be in 0 .. %zu (1 TiB), not %S",
                     RL_ARENA_MAX_BYTES, arena);
        return -1;
    }
    *out = (size_t)n;
    return 0;
}

rl__py_pipeline *rl__py_pipeline_build(PyTypeObject *type, PyObject *args,
                                       PyObject *kw, rl_pipeline_config *out,
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
                             "starts",
                             "records",
                             "arena_bytes",
                             "plan_boxes",
                             NULL};
    PyObject *spec, *paths = Py_None, *offsets = Py_None, *lengths = Py_None;
    PyObject *buffers = Py_None, *names = Py_None, *mul = Py_None;
    PyObject *add = Py_None, *allocator = Py_None, *fallback = Py_None;
    PyObject *http = Py_None, *fields = Py_None, *parts = Py_None;
    PyObject *starts = Py_None, *records = Py_None, *arena = Py_None;
    PyObject *plan_boxes = Py_None;
    const char *dtype = "uint8", *layout = "NCHW", *io = "auto";
    int device = -1, direct_io = 0, skip_errors = 0, max_consecutive = 16;
    int nthreads = 1, allow_truncated = 0, max_scans = RL_DEFAULT_MAX_SCANS;
    unsigned long long seed = 0;
    unsigned long long max_pixels = RL_DEFAULT_MAX_PIXELS;
    unsigned long long max_file_bytes = RL_DEFAULT_MAX_FILE_BYTES;
    if (!PyArg_ParseTupleAndKeywords(
            args, kw, "O|$OOOOOisKsKiKpsOOiOOppiOOOOOOO", kwlist, &spec, &paths,
            &offsets, &lengths, &buffers, &names, &nthreads, &layout, &seed,
            &io, &max_pixels, &max_scans, &max_file_bytes, &allow_truncated,
            &dtype, &mul, &add, &device, &allocator, &fallback, &direct_io,
            &skip_errors, &max_consecutive, &http, &fields, &parts, &starts,
            &records, &arena, &plan_boxes)) {
        return NULL;
    }
    rl_pipeline_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    if (arena_parse(arena, &cfg.arena_bytes) != 0) {
        return NULL;
    }
    rl_file_options fopt = {RL_IO_AUTO, direct_io != 0, max_file_bytes};
    if (rl__py_parse_views(spec, dtype, mul, add, layout, views,
                           &cfg.sample.nviews) != 0 ||
        rl__py_parse_io(io, &fopt.io) != 0) {
        return NULL;
    }
    cfg.sample.views = *views;
    /* An HTTP table may give its samples' objects by starts alone. */
    bool table = paths != Py_None || (http != Py_None && starts != Py_None) ||
                 (PyDict_Check(http) && PyDict_GetItemString(http, "objects"));
    if (table == (buffers != Py_None)) {
        PyErr_SetString(PyExc_TypeError, "give either paths or buffers");
        return NULL;
    }
    if (records != Py_None &&
        (buffers != Py_None || (paths != Py_None && http != Py_None))) {
        PyErr_SetString(PyExc_ValueError,
                        "records are for shards (not buffers; http shards "
                        "given by starts)");
        return NULL;
    }
    if (device >= 0 && !PyCallable_Check(allocator)) {
        PyErr_SetString(PyExc_TypeError, "a device needs an allocator");
        return NULL;
    }
    rl__py_pipeline *self = (rl__py_pipeline *)PyType_GenericAlloc(type, 0);
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
    cfg.source =
        buffers != Py_None ? rl__py_memory_source(buffers, names, self->keep)
        : http != Py_None
            ? rl__py_http_source(paths, starts, offsets, lengths, records, http,
                                 max_file_bytes, &self->held, msg)
            : rl__py_file_source(paths, starts, offsets, lengths, records,
                                 &fopt, &self->held, msg);
    self->http = http != Py_None ? cfg.source : NULL;
    if (cfg.source == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    if (rl__py_fields(fields, &cfg, &self->held) != 0 ||
        rl__py_parts(parts, &cfg) != 0 ||
        rl__py_plan_box_table(plan_boxes, &cfg) != 0) {
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
        /* A varying batch's samples past its arena: their spill buffer. */
        cfg.spill_alloc = rl__py_spill_alloc;
        cfg.spill_arg = self;
    }
    cfg.nthreads = nthreads;
    cfg.sample.seed = seed;
    cfg.sample.limits.max_pixels = max_pixels;
    cfg.sample.limits.max_scans = max_scans;
    cfg.sample.limits.max_file_bytes = max_file_bytes;
    cfg.sample.limits.allow_truncated = allow_truncated != 0;
    cfg.skip_errors = skip_errors != 0;
    cfg.max_consecutive_errors = max_consecutive;
    *out = cfg;
    return self;
}
