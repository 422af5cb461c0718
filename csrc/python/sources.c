/*
 * python/sources.c - a dataset's table of samples, made into a source of
 * the core (source/source.h) once, when the Pipeline is created.
 *
 * DESIGN: the table crosses into C through the buffer protocol, with no
 * Python object and no C copy per sample: the file names come as one
 * blob of fs-encoded bytes with their offsets (a prefix, such as the data
 * set's root, once), shards as their first sample each (starts), and the
 * byte ranges and field columns as int64 arrays. The file source borrows
 * these arrays: their views are held by the Pipeline (rl__py_held) until
 * the source is gone, and released on every path. What the core copies
 * anyway (the fields) is read from the same views; the HTTP source's
 * table is python/http_table.c's, over the same helpers. A plain sequence of str is still taken: it is packed into a
 * blob here, one item at a time. Bytes objects of a memory source are
 * borrowed, and kept alive by the list the Pipeline holds.
 */
#include "python/module.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "source/shard_records.h"
#include "source/source.h"

/* Sequence item i as an int64 (a batch's ids given as a list, a field's
 * few kinds). -1 + exception on failure: check PyErr_Occurred. */
int64_t rl__py_item_i64(PyObject *seq, Py_ssize_t i)
{
    PyObject *v = PySequence_GetItem(seq, i);
    if (v == NULL) {
        return -1;
    }
    int64_t x = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return x;
}

/* Whether a buffer's struct format names dtype in native order ("@", "="
 * or, on a little-endian machine, "<" before it; numpy writes int64 as
 * "l", or "q" where long is 4 bytes). */
static bool format_is(const char *f, rl__py_dtype dtype)
{
    static const uint16_t one = 1;
    f = f != NULL ? f : "B";
    if (f[0] == '@' || f[0] == '=' || (f[0] == '<' && *(const uint8_t *)&one)) {
        f++;
    }
    switch (dtype) {
    case RL_PY_I64:
        return strcmp(f, "q") == 0 ||
               (strcmp(f, "l") == 0 && sizeof(long) == 8);
    case RL_PY_I8:
        return strcmp(f, "b") == 0;
    case RL_PY_I32:
        return strcmp(f, "i") == 0 ||
               (strcmp(f, "l") == 0 && sizeof(long) == 4);
    default:
        return strcmp(f, "B") == 0;
    }
}

int rl__py_array(PyObject *obj, const char *what, rl__py_dtype dtype,
                 Py_ssize_t need, Py_buffer *view)
{
    static const char *names[] = {"int64", "uint8", "int8", "int32"};
    static const Py_ssize_t sizes[] = {8, 1, 1, 4};
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
        PyErr_Clear(); /* said below, with the argument's name */
        PyErr_Format(PyExc_TypeError,
                     "%s must be a C-contiguous %s array (numpy.%s), not %S",
                     what, names[dtype], names[dtype],
                     (PyObject *)Py_TYPE(obj));
        return -1;
    }
    if (view->ndim != 1 || view->itemsize != sizes[dtype] ||
        !format_is(view->format, dtype)) {
        PyErr_Format(PyExc_TypeError,
                     "%s must be a 1-d %s array (numpy.%s), not a %d-d "
                     "array of format '%s'",
                     what, names[dtype], names[dtype], view->ndim,
                     view->format != NULL ? view->format : "B");
        PyBuffer_Release(view);
        return -1;
    }
    if (need >= 0 && view->shape[0] != need) {
        PyErr_Format(PyExc_ValueError,
                     "%s has %zd entries where %zd are needed", what,
                     view->shape[0], need);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

int rl__py_hold(rl__py_held *h, PyObject *obj, const char *what,
                rl__py_dtype dtype, Py_ssize_t need, const void **data,
                Py_ssize_t *len)
{
    *data = NULL;
    if (len != NULL) {
        *len = 0;
    }
    if (obj == Py_None) {
        return 0;
    }
    if (h->n == h->cap) {
        int cap = h->cap > 0 ? 2 * h->cap : 8;
        Py_buffer *v = realloc(h->v, sizeof(*v) * (size_t)cap);
        if (v == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        h->v = v;
        h->cap = cap;
    }
    if (rl__py_array(obj, what, dtype, need, &h->v[h->n]) != 0) {
        return -1;
    }
    *data = h->v[h->n].buf;
    if (len != NULL) {
        *len = h->v[h->n].shape[0];
    }
    h->n++;
    return 0;
}

void rl__py_held_release(rl__py_held *h)
{
    for (int i = 0; i < h->n; i++) {
        PyBuffer_Release(&h->v[i]);
    }
    free(h->v);
    h->v = NULL;
    h->n = h->cap = 0;
}

/* RL_IO_* of "auto", "io_uring" or "pread"; -1 + ValueError. */
int rl__py_parse_io(const char *s, rl_io_backend *out)
{
    static const char *names[] = {"auto", "io_uring", "pread"};
    for (int i = 0; i < 3; i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = (rl_io_backend)i;
            return 0;
        }
    }
    PyErr_Format(PyExc_ValueError,
                 "io must be 'auto', 'io_uring' or 'pread', not '%s'", s);
    return -1;
}

/* A sequence of str packed into a blob of fs-encoded names and their
 * offsets (bytearrays, new references in *blob and *at). 0 or -1. */
static int pack_paths(PyObject *paths, PyObject **blob, PyObject **at)
{
    Py_ssize_t n = PySequence_Size(paths), used = 0;
    *blob = n >= 0 ? PyByteArray_FromStringAndSize(NULL, 0) : NULL;
    *at = *blob != NULL ? PyByteArray_FromStringAndSize(
                              NULL, (Py_ssize_t)sizeof(int64_t) * (n + 1))
                        : NULL;
    if (*at == NULL) {
        return -1;
    }
    int64_t pos = 0;
    memcpy(PyByteArray_AsString(*at), &pos, sizeof(pos));
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_GetItem(paths, i), *b = NULL;
        int ok = item != NULL && PyUnicode_FSConverter(item, &b);
        Py_XDECREF(item);
        if (!ok) {
            return -1;
        }
        Py_ssize_t len = PyBytes_Size(b);
        /* bytearray grows by a share of its size: amortised O(1). */
        ok = PyByteArray_Resize(*blob, used + len) == 0;
        if (ok) {
            memcpy(PyByteArray_AsString(*blob) + used, PyBytes_AsString(b),
                   (size_t)len);
            used += len;
            pos = used;
            memcpy(PyByteArray_AsString(*at) + sizeof(pos) * (size_t)(i + 1),
                   &pos, sizeof(pos));
        }
        Py_DECREF(b);
        if (!ok) {
            return -1;
        }
    }
    return 0;
}

/* Strings (what: "paths", "http['names']", "urls"; a (blob, offsets,
 * prefix) tuple or a sequence of str) into t, their views held in held;
 * *prefix is the fs-encoded prefix (new reference, alive until the
 * source copied it). */
int rl__py_strings(PyObject *paths, const char *what, rl__py_held *held,
                   rl_strings *t, PyObject **prefix)
{
    PyObject *blob = NULL, *at = NULL, *pre = NULL;
    bool packed = !PyTuple_Check(paths);
    char wb[64], wa[64];
    snprintf(wb, sizeof(wb), "%s' blob", what);
    snprintf(wa, sizeof(wa), "%s' offsets", what);
    if (packed) {
        if (pack_paths(paths, &blob, &at) != 0) {
            Py_XDECREF(blob);
            Py_XDECREF(at);
            return -1;
        }
    } else if (PyTuple_Size(paths) != 3 ||
               !PyUnicode_Check(pre = PyTuple_GetItem(paths, 2))) {
        PyErr_Format(PyExc_TypeError,
                     "%s must be (blob, offsets, prefix) or a sequence of str",
                     what);
        return -1;
    } else {
        blob = PyTuple_GetItem(paths, 0);
        at = PyTuple_GetItem(paths, 1);
    }
    const void *names, *pos;
    Py_ssize_t nblob, nat;
    int rc = rl__py_hold(held, blob, wb, RL_PY_U8, -1, &names, &nblob);
    if (rc == 0) {
        rc = packed ? rl__py_hold(held, at, wa, RL_PY_U8, -1, &pos, &nat)
                    : rl__py_hold(held, at, wa, RL_PY_I64, -1, &pos, &nat);
        nat /= packed ? (Py_ssize_t)sizeof(int64_t) : 1;
    }
    if (packed) {
        Py_DECREF(blob); /* the held views keep them */
        Py_DECREF(at);
    }
    if (rc != 0) {
        return -1;
    }
    if (nat < 1) {
        PyErr_Format(PyExc_ValueError,
                     "%s' offsets need one entry more than the names "
                     "(count + 1), at least [0]",
                     what);
        return -1;
    }
    /* FSConverter refuses a NUL in the prefix (ValueError). */
    if (pre != NULL && !PyUnicode_FSConverter(pre, prefix)) {
        return -1;
    }
    t->bytes = names;
    t->len = (size_t)nblob;
    t->at = pos;
    t->n = nat - 1;
    t->prefix = *prefix != NULL ? PyBytes_AsString(*prefix) : "";
    return 0;
}

/* The names of the file table (see rl__py_strings) into t. */
static int file_names(PyObject *paths, rl__py_held *held, rl_file_table *t,
                      PyObject **prefix)
{
    rl_strings v;
    if (rl__py_strings(paths, "paths", held, &v, prefix) != 0) {
        return -1;
    }
    t->names = v.bytes;
    t->names_len = v.len;
    t->at = v.at;
    t->nfiles = v.n;
    t->prefix = v.prefix;
    return 0;
}

/* The int64 arrays offsets and lengths, each with n entries (lengths alone:
 * offset 0 everywhere), held in held. */
int rl__py_file_ranges(PyObject *offsets, PyObject *lengths, int64_t n,
                       rl__py_held *held, const int64_t **offs,
                       const int64_t **lens)
{
    if (offsets != Py_None && lengths == Py_None) {
        PyErr_SetString(PyExc_TypeError, "offsets need lengths");
        return -1;
    }
    const void *o, *l;
    if (rl__py_hold(held, offsets, "offsets", RL_PY_I64, (Py_ssize_t)n, &o,
                    NULL) != 0 ||
        rl__py_hold(held, lengths, "lengths", RL_PY_I64, (Py_ssize_t)n, &l,
                    NULL) != 0) {
        return -1;
    }
    *offs = o;
    *lens = l;
    return 0;
}

/* A table over the record files of `records`, (files, sizes, mtimes, tag
 * bytes or None), for k shards starting at starts (borrowed, k + 1
 * values); the sizes' and mtimes' views held in held. tag None (remote
 * shards, whose record files each carry their shard's ETag in the tag):
 * no size, mtime or tag is checked, sizes and mtimes are not read. NULL
 * with an exception. */
static rl_shard_records *records_table(PyObject *records, const int64_t *starts,
                                       Py_ssize_t k, rl__py_held *held)
{
    PyObject *files, *sizes, *mtimes, *tag;
    if (!PyTuple_Check(records) ||
        !PyArg_ParseTuple(records, "OOOO", &files, &sizes, &mtimes, &tag) ||
        (!PyBytes_Check(tag) && tag != Py_None)) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError,
                        "records must be (files, sizes, mtimes, tag bytes)");
        return NULL;
    }
    const void *sz = NULL, *mt = NULL;
    if (PySequence_Size(files) != k) {
        if (!PyErr_Occurred()) {
            PyErr_Format(PyExc_ValueError,
                         "records: %zd record files for %zd shards",
                         PySequence_Size(files), k);
        }
        return NULL;
    }
    if (tag != Py_None &&
        (rl__py_hold(held, sizes, "records' sizes", RL_PY_I64, k, &sz, NULL) ||
         rl__py_hold(held, mtimes, "records' mtimes", RL_PY_I64, k, &mt,
                     NULL))) {
        return NULL;
    }
    /* One path a shard (O(shards)), copied by the table. */
    PyObject **owned = calloc((size_t)(k ? k : 1), sizeof(*owned));
    const char **paths = calloc((size_t)(k ? k : 1), sizeof(*paths));
    rl_shard_records *t = NULL;
    if (owned == NULL || paths == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t s = 0; s < k; s++) {
        PyObject *item = PySequence_GetItem(files, s);
        int ok = item != NULL && PyUnicode_FSConverter(item, &owned[s]);
        Py_XDECREF(item);
        if (!ok) {
            goto out;
        }
        paths[s] = PyBytes_AsString(owned[s]);
    }
    t = rl_shard_records_new(starts, paths, (size_t)k, 0);
    if (t == NULL || (tag != Py_None &&
                      rl_shard_records_expect(
                          t, sz, mt, (const uint8_t *)PyBytes_AsString(tag),
                          (size_t)PyBytes_Size(tag)) != 0)) {
        rl_shard_records_destroy(t);
        t = NULL;
        PyErr_NoMemory();
    }
out:
    for (Py_ssize_t s = 0; owned != NULL && s < k; s++) {
        Py_XDECREF(owned[s]);
    }
    free(owned);
    free(paths);
    return t;
}

/* The record files of a shard table (see rl__py_file_source) into
 * t->records, over t's starts. 0, or -1 with an exception. */
int rl__py_shard_records(PyObject *records, rl_file_table *t, rl__py_held *held)
{
    if (t->starts == NULL) {
        PyErr_SetString(PyExc_ValueError, "records: only for shards (starts)");
        return -1;
    }
    t->records = records_table(records, t->starts, (Py_ssize_t)t->nfiles, held);
    return t->records != NULL ? 0 : -1;
}

/* The file source of paths (see file_names), starts, offsets and lengths
 * or records, their views held in held. */
rl_source *rl__py_file_source(PyObject *paths, PyObject *starts,
                              PyObject *offsets, PyObject *lengths,
                              PyObject *records, const rl_file_options *opt,
                              rl__py_held *held, char *msg)
{
    rl_file_table t = {0};
    PyObject *prefix = NULL;
    const void *st;
    rl_source *src = NULL;
    if (file_names(paths, held, &t, &prefix) != 0 ||
        rl__py_hold(held, starts, "starts", RL_PY_I64, (Py_ssize_t)t.nfiles + 1,
                    &st, NULL) != 0) {
        goto out;
    }
    t.starts = st;
    if (records != Py_None && (rl_file_table_check(&t, msg) != 0 ||
                               rl__py_shard_records(records, &t, held) != 0)) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, msg);
        }
        goto out;
    }
    if (rl_file_table_check(&t, msg) != 0 ||
        rl__py_file_ranges(offsets, lengths, rl_file_table_count(&t), held,
                           &t.offsets, &t.lengths) != 0 ||
        rl_file_table_check(&t, msg) != 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, msg);
        }
        goto out;
    }
    Py_BEGIN_ALLOW_THREADS
    src = rl_file_source_create(&t, opt, msg);
    Py_END_ALLOW_THREADS
    if (src == NULL) {
        PyErr_SetString(PyExc_MemoryError, msg);
    }
out:
    if (src == NULL) {
        rl_shard_records_destroy(t.records); /* the source did not take it */
    }
    Py_XDECREF(prefix);
    return src;
}

/* The memory source of a list of bytes-like objects, kept alive by keep
 * (a list the pipeline holds). */
rl_source *rl__py_memory_source(PyObject *buffers, PyObject *names,
                                PyObject *keep)
{
    Py_ssize_t n = PySequence_Size(buffers);
    if (n < 0) {
        return NULL;
    }
    size_t cnt = n > 0 ? (size_t)n : 1;
    const uint8_t **data = calloc(cnt, sizeof(*data));
    size_t *len = calloc(cnt, sizeof(*len));
    const char **cnames = names != Py_None ? calloc(cnt, sizeof(char *)) : NULL;
    rl_source *src = NULL;
    if (!data || !len || (names != Py_None && !cnames)) {
        PyErr_NoMemory();
        goto out_free;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *b = PySequence_GetItem(buffers, i);
        if (b == NULL || !PyBytes_Check(b) || PyList_Append(keep, b) < 0) {
            if (b != NULL && !PyErr_Occurred()) {
                PyErr_SetString(PyExc_TypeError, "buffers must be bytes");
            }
            Py_XDECREF(b);
            goto out_free;
        }
        data[i] = (const uint8_t *)PyBytes_AsString(b);
        len[i] = (size_t)PyBytes_Size(b);
        Py_DECREF(b); /* keep holds it */
        if (cnames != NULL) {
            PyObject *nm = PySequence_GetItem(names, i);
            cnames[i] = nm ? rl__py_utf8(nm) : NULL;
            if (nm != NULL && PyList_Append(keep, nm) < 0) {
                cnames[i] = NULL;
            }
            Py_XDECREF(nm);
            if (cnames[i] == NULL) {
                goto out_free;
            }
        }
    }
    src = rl_memory_source_create(data, len, cnames, n);
    if (src == NULL) {
        PyErr_NoMemory();
    }
out_free:
    free(data);
    free(len);
    free(cnames);
    return src;
}

/* One (at, len, ext, exts, kinds) tuple into c (zeroed, n samples), the
 * three columns' views held in held; by_record: (column, exts, kinds), the
 * member's place in each sample's record. */
static int py_check(PyObject *t, Py_ssize_t n, bool by_record,
                    rl__py_held *held, rl_field_check *c)
{
    PyObject *at = NULL, *len = NULL, *ext = NULL, *exts, *kinds;
    int column = -1;
    if (by_record
            ? !PyArg_ParseTuple(t, "iOO", &column, &exts, &kinds)
            : !PyArg_ParseTuple(t, "OOOOO", &at, &len, &ext, &exts, &kinds)) {
        return -1;
    }
    Py_ssize_t ne = PySequence_Length(exts);
    if (ne < 1 || ne > RL_FIELD_MAX_EXTS || PySequence_Length(kinds) != ne) {
        PyErr_Clear();
        PyErr_SetString(PyExc_ValueError,
                        "a check needs 1..16 extensions with their kinds");
        return -1;
    }
    c->column = column;
    const void *a, *l, *e;
    if (by_record) {
        a = l = e = NULL; /* read from the records as jobs run */
    } else if (rl__py_hold(held, at, "a check's at", RL_PY_I64, n, &a, NULL) !=
                   0 ||
               rl__py_hold(held, len, "a check's len", RL_PY_I64, n, &l,
                           NULL) != 0 ||
               rl__py_hold(held, ext, "a check's ext", RL_PY_I8, n, &e, NULL) !=
                   0) {
        return -1;
    }
    if (!by_record && (a == NULL || l == NULL || e == NULL)) {
        PyErr_SetString(PyExc_TypeError, "a check needs at, len and ext");
        return -1;
    }
    c->at = a;
    c->len = l;
    c->ext = e;
    c->nexts = (int)ne;
    for (Py_ssize_t k = 0; k < ne; k++) {
        PyObject *name = PySequence_GetItem(exts, k);
        /* Borrowed from the caller's tuple, alive until create copies. */
        c->exts[k] = name != NULL ? rl__py_utf8(name) : NULL;
        Py_XDECREF(name);
        c->kinds[k] = (uint8_t)rl__py_item_i64(kinds, k);
        if (c->exts[k] == NULL || PyErr_Occurred()) {
            return -1;
        }
    }
    return 0;
}

static int py_checks(PyObject *checks, rl_pipeline_config *cfg,
                     rl__py_held *held)
{
    Py_ssize_t nc = PySequence_Length(checks);
    if (nc < 0) {
        return -1;
    }
    rl_field_check *cs = calloc((size_t)nc + 1, sizeof(*cs));
    cfg->checks = cs;
    if (cs == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t k = 0; k < nc; k++) {
        cfg->nchecks = (int)k + 1;
        PyObject *t = PySequence_GetItem(checks, k);
        int rc = t != NULL ? py_check(t, cfg->source->count,
                                      cfg->field_records != NULL, held, &cs[k])
                           : -1;
        Py_XDECREF(t);
        if (rc != 0) {
            return -1;
        }
    }
    return 0;
}

/* The refusals' messages into cfg (borrowed from the caller's sequence,
 * alive until create copies them). 0, or -1 with an exception. */
static int py_refusals(PyObject *refusals, rl_pipeline_config *cfg)
{
    Py_ssize_t nr = refusals == Py_None ? 0 : PySequence_Length(refusals);
    if (nr < 0) {
        return -1;
    }
    const char **why = calloc((size_t)nr + 1, sizeof(char *));
    cfg->refusals = why;
    cfg->nrefusals = (int)nr;
    if (why == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < nr; i++) {
        PyObject *item = PySequence_GetItem(refusals, i);
        why[i] = item != NULL ? rl__py_utf8(item) : NULL;
        Py_XDECREF(item);
        if (why[i] == NULL) {
            return -1;
        }
    }
    return 0;
}

/* The record form of fields: (records, starts, refusals, checks,
 * max_int_digits), the positions read from the version-2 record files of
 * records (files, sizes, mtimes, tag) through a table of the pipeline's
 * own (core/pipeline.h's field_records). */
static int py_fields_by_record(PyObject *fields, rl_pipeline_config *cfg,
                               rl__py_held *held)
{
    PyObject *records, *starts, *refusals, *checks;
    if (!PyArg_ParseTuple(fields, "OOOOi", &records, &starts, &refusals,
                          &checks, &cfg->max_int_digits)) {
        return -1;
    }
    Py_ssize_t k = PyTuple_Check(records) && PyTuple_Size(records) == 4
                       ? PySequence_Size(PyTuple_GetItem(records, 0))
                       : -1;
    const void *st;
    if (k < 0) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError,
                        "fields' records must be (files, sizes, mtimes, tag)");
        return -1;
    }
    if (rl__py_hold(held, starts, "fields' starts", RL_PY_I64, k + 1, &st,
                    NULL) != 0) {
        return -1;
    }
    const int64_t *a = st;
    for (Py_ssize_t s = 0; s < k; s++) {
        if (a[0] != 0 || a[s + 1] < a[s]) {
            PyErr_SetString(PyExc_ValueError,
                            "fields' starts: each shard's first sample, from "
                            "0, never falling");
            return -1;
        }
    }
    if (a[k] != cfg->source->count) {
        PyErr_Format(PyExc_ValueError,
                     "fields' starts give %lld samples, the table has %lld",
                     (long long)a[k], (long long)cfg->source->count);
        return -1;
    }
    cfg->field_records = records_table(records, st, k, held);
    if (cfg->field_records == NULL) {
        return -1;
    }
    /* The pipeline outlives nothing of ours but these: its own starts. */
    if (rl_shard_records_own_starts(cfg->field_records) != 0) {
        PyErr_NoMemory();
        return -1;
    }
    if (py_refusals(refusals, cfg) != 0) {
        return -1;
    }
    return checks == Py_None ? 0 : py_checks(checks, cfg, held);
}

int rl__py_fields(PyObject *fields, rl_pipeline_config *cfg, rl__py_held *held)
{
    PyObject *image_at, *image_len, *refusals, *checks;
    if (fields == Py_None) {
        return 0;
    }
    if (PyTuple_Check(fields) && PyTuple_Size(fields) == 5 &&
        PyTuple_Check(PyTuple_GetItem(fields, 0))) {
        return py_fields_by_record(fields, cfg, held);
    }
    if (!PyArg_ParseTuple(fields, "OOOOi", &image_at, &image_len, &refusals,
                          &checks, &cfg->max_int_digits)) {
        return -1;
    }
    Py_ssize_t n = (Py_ssize_t)cfg->source->count;
    const void *at, *len;
    if (rl__py_hold(held, image_at, "image_at", RL_PY_I64, n, &at, NULL) != 0 ||
        rl__py_hold(held, image_len, "image_len", RL_PY_I64, n, &len, NULL) !=
            0) {
        return -1;
    }
    if (at == NULL || len == NULL) {
        PyErr_SetString(PyExc_TypeError, "fields need image_at and image_len");
        return -1;
    }
    cfg->image_at = at;
    cfg->image_len = len;
    if (py_refusals(refusals, cfg) != 0) {
        return -1;
    }
    return checks == Py_None ? 0 : py_checks(checks, cfg, held);
}

int rl__py_parts(PyObject *parts, rl_pipeline_config *cfg)
{
    if (parts == Py_None) {
        return 0;
    }
    Py_buffer b;
    if (rl__py_array(parts, "parts", RL_PY_I64, -1, &b) != 0) {
        return -1;
    }
    if (b.shape[0] < 2) {
        PyBuffer_Release(&b);
        PyErr_SetString(PyExc_ValueError,
                        "parts needs at least 2 entries: each part's first "
                        "id, then the table's length");
        return -1;
    }
    int64_t *copy = malloc((size_t)b.len);
    if (copy != NULL) {
        memcpy(copy, b.buf, (size_t)b.len);
        cfg->parts = copy;
        cfg->nparts = b.shape[0] - 1;
    }
    PyBuffer_Release(&b);
    return copy != NULL ? 0 : (PyErr_NoMemory(), -1);
}

void rl__py_fields_free(rl_pipeline_config *cfg)
{
    free((void *)cfg->parts);
    cfg->parts = NULL;
    free((void *)cfg->plan_boxes);
    free((void *)cfg->plan_box_offsets);
    cfg->plan_boxes = NULL;
    cfg->plan_box_offsets = NULL;
    cfg->nparts = 0;
    free((void *)cfg->refusals);
    free((void *)cfg->checks);
    cfg->image_at = cfg->image_len = NULL; /* the views, held */
    cfg->refusals = NULL;
    cfg->checks = NULL;
    cfg->nchecks = 0;
    /* Set only when create never took it (pipeline.c clears it after). */
    rl_shard_records_destroy(cfg->field_records);
    cfg->field_records = NULL;
}
