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
        cpaths[i] = PyBytes_AS_STRING(owned[i]);
        if ((Py_ssize_t)strlen(cpaths[i]) != PyBytes_GET_SIZE(owned[i])) {
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
    Py_BEGIN_ALLOW_THREADS src =
        rl_file_source_create(cpaths, offs, lens, n, opt, msg);
    Py_END_ALLOW_THREADS if (src == NULL)
    {
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
        data[i] = (const uint8_t *)PyBytes_AS_STRING(b);
        len[i] = (size_t)PyBytes_GET_SIZE(b);
        Py_DECREF(b); /* keep holds it */
        if (cnames != NULL) {
            PyObject *nm = PySequence_GetItem(names, i);
            cnames[i] = nm ? PyUnicode_AsUTF8(nm) : NULL;
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
