/*
 * python/errors.c - C statuses to Python exceptions, in one place.
 *
 * DESIGN: worker threads never raise; they leave a status and a message in
 * the job, and the Python-facing call that collects them turns them into
 * an exception here: -ENOMEM a MemoryError, -errno an OSError naming the
 * file (so FileNotFoundError and friends keep their subclass), decode
 * statuses a ringloader.DecodeError naming the file with .path, .reason and
 * .kind, a configuration refused a ValueError, a fallback decoder's wrong
 * result a TypeError naming the file (with .path), our own closed/CUDA
 * statuses a RuntimeError, and anything else an internal error.
 */
#include "python/module.h"

#include <errno.h>
#include <stdio.h>

PyObject *rl__py_raise(rl_module_state *st, int status, const char *path,
                       const char *msg)
{
    if (status == -ENOMEM) {
        /* With what asked for how much, when the core said; making the
         * message may fail too, which raises a bare MemoryError. */
        if (msg != NULL && msg[0] != '\0') {
            PyErr_SetString(PyExc_MemoryError, msg);
            return NULL;
        }
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
    case RL_EFORMAT:
    case RL_EFIELD: {
        PyObject *p =
            path ? PyUnicode_DecodeFSDefault(path) : Py_NewRef(Py_None);
        PyObject *text =
            p == NULL ? NULL
            : path    ? PyUnicode_FromFormat("cannot decode %U: %s", p, msg)
                      : PyUnicode_FromString(msg);
        PyObject *exc =
            text ? PyObject_CallFunctionObjArgs(st->decode_error, text, NULL)
                 : NULL;
        const char *kind = status == RL_ETRUNCATED ? "truncated"
                           : status == RL_ETOOBIG  ? "too_big"
                           : status == RL_EFORMAT  ? "not_jpeg"
                           : status == RL_EFIELD   ? "field"
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
    case RL_ECONFIG:
        PyErr_SetString(PyExc_ValueError, msg ? msg : "invalid configuration");
        return NULL;
    case RL_EFALLBACK: {
        /* The callable is at fault, not the file: a TypeError, as Python
         * raises for a function that returns the wrong type, naming the
         * file it was given so the sample can be found. */
        PyObject *p =
            path ? PyUnicode_DecodeFSDefault(path) : Py_NewRef(Py_None);
        PyObject *text = p == NULL ? NULL
                         : path
                             ? PyUnicode_FromFormat("%s (decoding %U)", msg, p)
                             : PyUnicode_FromString(msg);
        PyObject *exc =
            text ? PyObject_CallFunctionObjArgs(PyExc_TypeError, text, NULL)
                 : NULL;
        Py_XDECREF(text);
        if (exc != NULL && PyObject_SetAttrString(exc, "path", p) == 0) {
            PyErr_SetObject(PyExc_TypeError, exc);
        }
        Py_XDECREF(p);
        Py_XDECREF(exc);
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

/* A tuple of the report's n int64s at v, or None for no array. */
static PyObject *int64_tuple(const int64_t *v, int n)
{
    if (v == NULL) {
        return Py_NewRef(Py_None);
    }
    PyObject *t = PyTuple_New(n);
    for (int i = 0; t != NULL && i < n; i++) {
        PyObject *item = PyLong_FromLongLong(v[i]);
        if (item == NULL) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SetItem(t, i, item);
    }
    return t;
}

PyObject *rl__py_batch_ids(const rl_batch_report *rep)
{
    return int64_tuple(rep->ids, rep->n);
}

PyObject *rl__py_batch_keys(const rl_batch_report *rep)
{
    return int64_tuple(rep->keys, rep->n);
}

PyObject *rl__py_sample_error(rl_module_state *st, const rl_sample_error *e)
{
    rl__py_raise(st, e->status, e->where[0] ? e->where : NULL, e->msg);
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *idx = PyLong_FromLongLong(e->id);
    int ok = value != NULL && idx != NULL &&
             PyObject_SetAttrString(value, "index", idx) == 0;
    Py_XDECREF(type);
    Py_XDECREF(tb);
    Py_XDECREF(idx);
    if (!ok) {
        Py_XDECREF(value);
        return NULL;
    }
    return value;
}

/* Sets attribute `name` of exc to v (stolen); 0, or -1 with an exception. */
static int set_stolen(PyObject *exc, const char *name, PyObject *v)
{
    int rc = v != NULL ? PyObject_SetAttrString(exc, name, v) : -1;
    Py_XDECREF(v);
    return rc;
}

void rl__py_exception_text(char *msg, bool typed, const char *otherwise)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *text = value ? PyObject_Str(value) : NULL;
    const char *s = text ? rl__py_utf8(text) : NULL;
    PyObject *name =
        typed && type ? PyType_GetName((PyTypeObject *)type) : NULL;
    const char *n = name ? rl__py_utf8(name) : NULL;
    if (n != NULL) {
        snprintf(msg, RL_MSG_MAX, "%s: %s", n, s ? s : otherwise);
    } else {
        snprintf(msg, RL_MSG_MAX, "%s", s ? s : otherwise);
    }
    PyErr_Clear(); /* of making the text, if that failed */
    Py_XDECREF(name);
    Py_XDECREF(text);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}

PyObject *rl__py_raise_batch(rl_module_state *st, int status,
                             const rl_batch_report *rep)
{
    if (rep->error.pos >= 0) {
        PyObject *exc = rl__py_sample_error(st, &rep->error);
        if (exc != NULL) {
            PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
            Py_DECREF(exc);
        }
    } else {
        rl__py_raise(st, status, NULL, rep->error.msg);
    }
    /* Which batch failed, and what was decoded how before it did. */
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *fb = PyTuple_New(rep->n_fallback);
    for (int i = 0; fb != NULL && i < rep->n_fallback; i++) {
        PyTuple_SetItem(fb, i, PyLong_FromLong(rep->fallback[i]));
    }
    if (value == NULL || rep->ids == NULL) {
        Py_XDECREF(fb);
    } else if (set_stolen(value, "fallback", fb) != 0 ||
               set_stolen(value, "batch", rl__py_batch_ids(rep)) != 0 ||
               set_stolen(value, "ticket",
                          PyLong_FromUnsignedLongLong(rep->ticket)) != 0) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        return NULL; /* the exception of setting an attribute */
    }
    PyErr_Restore(type, value, tb);
    return NULL;
}

PyObject *rl__py_raise_submit(rl_module_state *st, int status,
                              const rl_pipeline *p, int n)
{
    char why[RL_MSG_MAX];
    if (status == -ENOMEM && rl_pipeline_sample_bytes(p) == 0) {
        /* A varying batch's slot is its arena (core/pipeline.h). */
        snprintf(why, sizeof(why),
                 "out of memory for a batch's arena of %zu bytes; each batch "
                 "in flight (prefetch) holds one: lower arena_bytes or "
                 "prefetch",
                 rl_pipeline_batch_bytes(p, n));
    } else if (status == -ENOMEM) {
        /* The batch's slot, almost always: say its size. */
        snprintf(why, sizeof(why),
                 "out of memory for a batch of %d samples: %zu bytes (%zu "
                 "bytes a sample); each batch in flight (prefetch) holds "
                 "one: lower batch_size, prefetch or the output size",
                 n, rl_pipeline_batch_bytes(p, n), rl_pipeline_sample_bytes(p));
    } else {
        snprintf(why, sizeof(why), "%s",
                 status == -EINVAL ? "a sample id is out of range"
                                   : "cannot submit the batch");
    }
    return rl__py_raise(st, status, NULL, why);
}
