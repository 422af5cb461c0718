/*
 * py_module.h - what the Python binding files share. Only rl_module.c and
 * py_*.c include Python.h; none of them includes liburing.h or jpeglib.h.
 */
#ifndef RL_PY_MODULE_H
#define RL_PY_MODULE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "rl.h"

/* Per-module state (PEP 489/630): the heap types and the exception. */
typedef struct rl_module_state {
    PyObject *decode_error; /* ringloader.DecodeError, a ValueError */
    PyTypeObject *pipeline_type;
    PyTypeObject *batch_type;
    PyTypeObject *devbuf_type;
} rl_module_state;

/* The state of the module that defines `type` (borrowed). */
rl_module_state *rl__py_state_of(PyTypeObject *type);

/*
 * Sets the Python exception for a C status: -ENOMEM -> MemoryError,
 * -errno -> OSError(errno, msg, path), decode statuses -> DecodeError naming
 * path, RL_ECLOSED -> RuntimeError, anything else -> SystemError. path may be
 * NULL. Always returns NULL, for `return rl__py_raise(...)`.
 */
PyObject *rl__py_raise(rl_module_state *st, int status, const char *path,
                       const char *msg);

/*
 * Parses the transform keywords shared by Pipeline() and plan() from a
 * dict (borrowed). Returns 0, or -1 with an exception set.
 */
int rl__py_parse_transform(PyObject *spec, rl_transform *t);

/* Adds Pipeline and Batch to the module. Returns 0 or -1. */
int rl__py_pipeline_init(PyObject *module, rl_module_state *st);

#endif /* RL_PY_MODULE_H */
