/*
 * python/shared.c - what every binding file uses, at the bottom of the
 * bindings (it calls none of them): the module state a heap type reaches,
 * and a str's UTF-8 text as C may use it.
 */
#include "python/module.h"

#include <string.h>

rl_module_state *rl__py_state_of(PyTypeObject *type)
{
    return PyType_GetModuleState(type);
}

const char *rl__py_utf8(PyObject *o)
{
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(o, &n);
    if (s != NULL && (size_t)n != strlen(s)) {
        PyErr_SetString(PyExc_ValueError, "embedded null character");
        return NULL;
    }
    return s;
}
