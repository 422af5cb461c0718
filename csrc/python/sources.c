/*
 * python/sources.c - a dataset's table of samples, made into a source of
 * the core (source/source.h) once, when the Pipeline is created.
 *
 * DESIGN: paths go through the file system encoding (PyUnicode_FSConverter)
 * and are copied by the file source, so nothing of Python's is borrowed by
 * the threads; bytes objects of a memory source are borrowed, and kept
 * alive by the list the Pipeline holds.
 */
#include "python/module.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "source/source.h"

/* Sequence item i as an int64 (sequences, numpy arrays). -1 + exception
 * on failure: check PyErr_Occurred. */
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

/* The file source of paths (and optional offsets, lengths). */
rl_source *rl__py_file_source(PyObject *paths, PyObject *offsets,
                              PyObject *lengths, const rl_file_options *opt,
                              char *msg)
{
    Py_ssize_t n = PySequence_Size(paths);
    if (n < 0) {
        return NULL;
    }
    size_t cnt = n > 0 ? (size_t)n : 1;
    PyObject **owned = calloc(cnt, sizeof(*owned));
    const char **cpaths = calloc(cnt, sizeof(*cpaths));
    uint64_t *offs = offsets != Py_None ? calloc(cnt, sizeof(*offs)) : NULL;
    int64_t *lens = offsets != Py_None ? calloc(cnt, sizeof(*lens)) : NULL;
    rl_source *src = NULL;
    if (!owned || !cpaths || (offsets != Py_None && (!offs || !lens))) {
        PyErr_NoMemory();
        goto out_free;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_GetItem(paths, i);
        int ok = item != NULL && PyUnicode_FSConverter(item, &owned[i]);
        Py_XDECREF(item);
        if (!ok) {
            goto out_free;
        }
        cpaths[i] = PyBytes_AsString(owned[i]);
        if ((Py_ssize_t)strlen(cpaths[i]) != PyBytes_Size(owned[i])) {
            PyErr_SetString(PyExc_ValueError, "embedded NUL in a path");
            goto out_free;
        }
        if (offs != NULL) {
            offs[i] = (uint64_t)rl__py_item_i64(offsets, i);
            lens[i] = rl__py_item_i64(lengths, i);
            if (PyErr_Occurred()) {
                goto out_free;
            }
        }
    }
    Py_BEGIN_ALLOW_THREADS
    src = rl_file_source_create(cpaths, offs, lens, n, opt, msg);
    Py_END_ALLOW_THREADS
    if (src == NULL) {
        PyErr_SetString(PyExc_MemoryError, msg);
    }
out_free:
    for (Py_ssize_t i = 0; owned != NULL && i < n; i++) {
        Py_XDECREF(owned[i]);
    }
    free(owned);
    free(cpaths);
    free(offs);
    free(lens);
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

/* UTF-8 pointers to the items of a sequence of str, alive as long as hold
 * (a list they are appended to). NULL + exception on failure; free() the
 * array. */
static const char **utf8_items(PyObject *seq, PyObject *hold, Py_ssize_t *n)
{
    *n = PySequence_Size(seq);
    if (*n < 0) {
        return NULL;
    }
    const char **out = calloc((size_t)(*n > 0 ? *n : 1), sizeof(*out));
    if (out == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < *n; i++) {
        PyObject *s = PySequence_GetItem(seq, i);
        out[i] =
            s != NULL && PyList_Append(hold, s) == 0 ? rl__py_utf8(s) : NULL;
        Py_XDECREF(s);
        if (out[i] == NULL) {
            free(out);
            return NULL;
        }
    }
    return out;
}

/* The options of an http dict (see rl__py_http_source) into o. */
static int http_options(PyObject *http, uint64_t max_file_bytes,
                        rl_http_options *o)
{
    static const char *known[] = {
        "names",           "urls",   "retries", "timeout",   "connect_timeout",
        "max_connections", "verify", "ca_file", "cache_dir", "cache_bytes",
        "block_bytes"};
    rl_http_options_default(o);
    o->max_file_bytes = max_file_bytes;
    PyObject *key, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(http, &pos, &key, &v)) {
        const char *k = PyUnicode_Check(key) ? rl__py_utf8(key) : NULL;
        size_t i = 0;
        while (k != NULL && i < sizeof(known) / sizeof(*known) &&
               strcmp(k, known[i]) != 0) {
            i++;
        }
        if (k == NULL || i == sizeof(known) / sizeof(*known)) {
            PyErr_Format(PyExc_TypeError, "unknown http option %R", key);
            return -1;
        }
        if (v == Py_None || i < 2) {
            continue;
        }
        if (i == 2 || i == 5) {
            long x = PyLong_AsLong(v);
            *(i == 2 ? &o->retries : &o->max_inflight) = (int)x;
        } else if (i == 3 || i == 4) {
            double x = PyFloat_AsDouble(v);
            *(i == 3 ? &o->timeout_s : &o->connect_timeout_s) = x;
        } else if (i == 6) {
            int t = PyObject_IsTrue(v);
            o->verify = t > 0;
            if (t < 0) {
                return -1;
            }
        } else if (i == 9 || i == 10) {
            *(i == 9 ? &o->cache_bytes : &o->block_bytes) =
                PyLong_AsUnsignedLongLong(v);
        } else {
            const char *s = rl__py_utf8(v);
            if (s == NULL) {
                return -1;
            }
            char *dst = i == 7 ? o->ca_file : o->cache_dir;
            snprintf(dst, sizeof(o->ca_file), "%s", s);
        }
        if (PyErr_Occurred()) {
            return -1;
        }
    }
    if (o->retries < 0 || o->timeout_s <= 0 || o->connect_timeout_s <= 0 ||
        o->max_inflight < 1) {
        PyErr_SetString(PyExc_ValueError,
                        "http options: retries >= 0, timeout > 0, "
                        "connect_timeout > 0, max_connections >= 1");
        return -1;
    }
    return 0;
}

/* The HTTP source: paths[i] names sample i's object, one of http["names"]
 * (display names, for messages), fetched from the same position of
 * http["urls"]; offsets/lengths as for files; the other keys of http are
 * its options (retries, timeout, connect_timeout, max_connections, verify,
 * ca_file). */
rl_source *rl__py_http_source(PyObject *paths, PyObject *offsets,
                              PyObject *lengths, PyObject *http,
                              uint64_t max_file_bytes, char *msg)
{
    PyObject *names =
        PyDict_Check(http) ? PyDict_GetItemString(http, "names") : NULL;
    PyObject *urls = names ? PyDict_GetItemString(http, "urls") : NULL;
    if (urls == NULL) {
        PyErr_SetString(PyExc_TypeError,
                        "http must be a dict with names and urls");
        return NULL;
    }
    rl_http_options opt;
    if (http_options(http, max_file_bytes, &opt) != 0) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Size(paths), nobj, nurl;
    PyObject *hold = PyList_New(0), *index = PyDict_New();
    PyObject *prev = NULL; /* consecutive samples of one shard: one lookup */
    const char **cnames = NULL, **curls = NULL;
    int64_t *obj = NULL, *lens = NULL;
    uint64_t *offs = NULL;
    rl_source *src = NULL;
    if (n < 0 || hold == NULL || index == NULL ||
        (cnames = utf8_items(names, hold, &nobj)) == NULL ||
        (curls = utf8_items(urls, hold, &nurl)) == NULL) {
        goto out;
    }
    if (nurl != nobj) {
        PyErr_SetString(PyExc_ValueError, "http: one url per name");
        goto out;
    }
    for (Py_ssize_t j = 0; j < nobj; j++) {
        PyObject *jj = PyLong_FromSsize_t(j);
        int rc = jj ? PyDict_SetItem(index, PyList_GetItem(hold, j), jj) : -1;
        Py_XDECREF(jj);
        if (rc < 0) {
            goto out;
        }
    }
    size_t cnt = n > 0 ? (size_t)n : 1;
    obj = malloc(cnt * sizeof(*obj));
    offs = offsets != Py_None ? malloc(cnt * sizeof(*offs)) : NULL;
    lens = offsets != Py_None ? malloc(cnt * sizeof(*lens)) : NULL;
    if (obj == NULL || (offsets != Py_None && (!offs || !lens))) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *p = PySequence_GetItem(paths, i);
        if (p == NULL) {
            goto out;
        }
        if (p != prev || i == 0) {
            PyObject *j = PyDict_GetItemWithError(index, p);
            if (j == NULL) {
                if (!PyErr_Occurred()) {
                    PyErr_Format(PyExc_ValueError,
                                 "sample %zd: %R is not among the http names",
                                 i, p);
                }
                Py_DECREF(p);
                goto out;
            }
            obj[i] = PyLong_AsLongLong(j);
        } else {
            obj[i] = obj[i - 1];
        }
        Py_XDECREF(prev); /* p holds its own reference */
        prev = p;
        if (offs != NULL) {
            offs[i] = (uint64_t)rl__py_item_i64(offsets, i);
            lens[i] = rl__py_item_i64(lengths, i);
            if (PyErr_Occurred()) {
                goto out;
            }
        }
    }
    int status;
    Py_BEGIN_ALLOW_THREADS
    src = rl_http_source_create(cnames, curls, nobj, obj, offs, lens, n, &opt,
                                &status, msg);
    Py_END_ALLOW_THREADS
    if (src == NULL) {
        /* RL_ECONFIG a ValueError, -ENOMEM a MemoryError, -errno an
         * OSError: no decode status, which alone needs the module's. */
        rl__py_raise(NULL, status, NULL, msg);
    }
out:
    Py_XDECREF(prev);
    Py_XDECREF(hold);
    Py_XDECREF(index);
    free(cnames);
    free(curls);
    free(obj);
    free(offs);
    free(lens);
    return src;
}

/* Pipeline.set_urls: new fetch URLs for an HTTP source. */
PyObject *rl__py_http_set_urls(rl_source *src, PyObject *urls)
{
    if (src == NULL) {
        PyErr_SetString(PyExc_TypeError, "not an HTTP pipeline");
        return NULL;
    }
    PyObject *hold = PyList_New(0);
    Py_ssize_t n;
    const char **curls = hold ? utf8_items(urls, hold, &n) : NULL;
    int rc = curls ? rl_http_source_set_urls(src, curls, n) : 0;
    free(curls);
    Py_XDECREF(hold);
    if (curls == NULL) {
        return NULL;
    }
    if (rc == -ENOMEM) {
        return PyErr_NoMemory();
    }
    if (rc != 0) {
        PyErr_SetString(PyExc_ValueError, "set_urls: one url per object");
        return NULL;
    }
    Py_RETURN_NONE;
}

PyObject *rl__py_http_set_keys(rl_source *src, PyObject *args)
{
    if (src == NULL) {
        PyErr_SetString(PyExc_TypeError, "not an HTTP pipeline");
        return NULL;
    }
    const char *region = NULL, *access = NULL, *secret = NULL, *token = NULL;
    if (!PyArg_ParseTuple(args, "z|ssz:set_keys", &region, &access, &secret,
                          &token)) {
        return NULL;
    }
    if (region != NULL && (access == NULL || secret == NULL)) {
        PyErr_SetString(PyExc_TypeError,
                        "set_keys(region, access_key, secret_key, token)");
        return NULL;
    }
    int rc = rl_http_source_set_keys(src, region, access, secret, token);
    if (rc == -ENOMEM) {
        return PyErr_NoMemory();
    }
    if (rc == -ENOTSUP) {
        PyErr_Format(PyExc_NotImplementedError,
                     "libcurl %s cannot sign requests (SigV4 needs 7.75)",
                     rl_http_library());
        return NULL;
    }
    if (rc != 0) {
        /* The values are not named: they are credentials. */
        PyErr_SetString(PyExc_ValueError,
                        "set_keys: a region, access key, secret or token "
                        "that is empty, too long or holds a control "
                        "character (or ':' in the region or access key)");
        return NULL;
    }
    Py_RETURN_NONE;
}

/* One (at, len, ext, exts, kinds) tuple into c (zeroed, n samples). */
static int py_check(PyObject *t, Py_ssize_t n, rl_field_check *c)
{
    PyObject *at, *len, *ext, *exts, *kinds;
    if (!PyArg_ParseTuple(t, "OOOOO", &at, &len, &ext, &exts, &kinds)) {
        return -1;
    }
    Py_ssize_t ne = PySequence_Length(exts);
    if (ne < 1 || ne > RL_FIELD_MAX_EXTS || PySequence_Length(kinds) != ne ||
        PySequence_Length(at) != n || PySequence_Length(len) != n ||
        PySequence_Length(ext) != n) {
        PyErr_Clear();
        PyErr_SetString(PyExc_ValueError,
                        "a check needs at, len and ext one a sample and 1..16 "
                        "extensions with their kinds");
        return -1;
    }
    int64_t *a = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    int64_t *l = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    int8_t *e = malloc((size_t)(n ? n : 1));
    c->at = a;
    c->len = l;
    c->ext = e;
    if (a == NULL || l == NULL || e == NULL) {
        PyErr_NoMemory();
        return -1;
    }
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
    for (Py_ssize_t i = 0; i < n; i++) {
        a[i] = rl__py_item_i64(at, i);
        l[i] = rl__py_item_i64(len, i);
        e[i] = (int8_t)rl__py_item_i64(ext, i);
        if (PyErr_Occurred()) {
            return -1;
        }
    }
    return 0;
}

static int py_checks(PyObject *checks, rl_pipeline_config *cfg)
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
        cfg->nchecks = (int)k + 1; /* what rl__py_fields_free walks */
        PyObject *t = PySequence_GetItem(checks, k);
        int rc = t != NULL ? py_check(t, cfg->source->count, &cs[k]) : -1;
        Py_XDECREF(t);
        if (rc != 0) {
            return -1;
        }
    }
    return 0;
}

int rl__py_fields(PyObject *fields, rl_pipeline_config *cfg)
{
    PyObject *image_at, *image_len, *refusals, *checks;
    if (fields == Py_None) {
        return 0;
    }
    if (!PyArg_ParseTuple(fields, "OOOOi", &image_at, &image_len, &refusals,
                          &checks, &cfg->max_int_digits)) {
        return -1;
    }
    Py_ssize_t n = PySequence_Length(image_at);
    Py_ssize_t nr = refusals == Py_None ? 0 : PySequence_Length(refusals);
    if (n < 0 || nr < 0) {
        return -1;
    }
    if (n != cfg->source->count || PySequence_Length(image_len) != n) {
        PyErr_Format(PyExc_ValueError,
                     "image_at and image_len need %lld entries, one a sample",
                     (long long)cfg->source->count);
        return -1;
    }
    int64_t *at = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    int64_t *len = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    const char **why = calloc((size_t)nr + 1, sizeof(char *));
    cfg->image_at = at;
    cfg->image_len = len;
    cfg->refusals = why;
    cfg->nrefusals = (int)nr;
    if (at == NULL || len == NULL || why == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        at[i] = rl__py_item_i64(image_at, i);
        len[i] = rl__py_item_i64(image_len, i);
        if (PyErr_Occurred()) {
            return -1;
        }
    }
    for (Py_ssize_t i = 0; i < nr; i++) {
        PyObject *item = PySequence_GetItem(refusals, i);
        /* Borrowed from the caller's sequence, alive until create copies. */
        why[i] = item != NULL ? rl__py_utf8(item) : NULL;
        Py_XDECREF(item);
        if (why[i] == NULL) {
            return -1;
        }
    }
    return checks == Py_None ? 0 : py_checks(checks, cfg);
}

int rl__py_parts(PyObject *parts, rl_pipeline_config *cfg)
{
    if (parts == Py_None) {
        return 0;
    }
    Py_buffer b;
    bool ok =
        PyObject_GetBuffer(parts, &b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) == 0;
    int64_t *copy = NULL;
    if (ok) {
        /* int64 in native order, as numpy writes it: "l" or "q" ("@",
         * "=": native order said). */
        const char *f = b.format != NULL ? b.format : "B";
        f += f[0] == '@' || f[0] == '=';
        ok = b.ndim == 1 && b.itemsize == 8 && b.shape[0] >= 2 &&
             (strcmp(f, "l") == 0 || strcmp(f, "q") == 0);
        copy = ok ? malloc((size_t)b.len) : NULL;
        if (copy != NULL) {
            memcpy(copy, b.buf, (size_t)b.len);
            cfg->parts = copy;
            cfg->nparts = b.shape[0] - 1;
        }
        PyBuffer_Release(&b);
    }
    if (!ok) {
        PyErr_Clear(); /* not a buffer: said below */
        PyErr_SetString(PyExc_TypeError,
                        "parts must be a 1-d array of at least 2 int64 "
                        "(numpy.int64): each part's first id, then the "
                        "table's length");
        return -1;
    }
    return copy != NULL ? 0 : (PyErr_NoMemory(), -1);
}

void rl__py_fields_free(rl_pipeline_config *cfg)
{
    free((void *)cfg->parts);
    cfg->parts = NULL;
    cfg->nparts = 0;
    free((void *)cfg->image_at);
    free((void *)cfg->image_len);
    free((void *)cfg->refusals);
    for (int k = 0; cfg->checks != NULL && k < cfg->nchecks; k++) {
        free((void *)cfg->checks[k].at);
        free((void *)cfg->checks[k].len);
        free((void *)cfg->checks[k].ext);
    }
    free((void *)cfg->checks);
    cfg->image_at = cfg->image_len = NULL;
    cfg->refusals = NULL;
    cfg->checks = NULL;
    cfg->nchecks = 0;
}
