/*
 * python/owners.c - the device buffers of a Pipeline's batches in flight.
 *
 * DESIGN: on the GPU path each batch is copied into a device buffer that
 * the Loader's allocator (torch's caching allocator) hands out at submit,
 * as an (owner, pointer) pair; the owner must live until the Batch that
 * describes the buffer is made, and then as long as that Batch. Between
 * the two the pair waits in a dict under the batch's ticket, the number
 * the core gives the batch at submit and reports with it at next: a batch
 * finds its own buffer whatever happened in between (a batch cancelled, an
 * exception between two calls), never its neighbour's.
 */
#include "python/module.h"

PyObject *rl__py_device_buffer(PyObject *allocator, size_t nbytes,
                               uintptr_t *ptr)
{
    PyObject *r = PyObject_CallFunction(allocator, "n", (Py_ssize_t)nbytes);
    PyObject *owner;
    unsigned long long p = 0;
    if (r == NULL || !PyArg_ParseTuple(r, "OK", &owner, &p)) {
        Py_XDECREF(r);
        return NULL;
    }
    if (p == 0) {
        Py_DECREF(r);
        PyErr_SetString(PyExc_ValueError, "the allocator returned NULL");
        return NULL;
    }
    *ptr = (uintptr_t)p;
    return r;
}

PyObject *rl__py_pop_owner(PyObject *owners, uint64_t ticket)
{
    PyObject *key = PyLong_FromUnsignedLongLong(ticket);
    PyObject *o = key ? PyDict_GetItemWithError(owners, key) : NULL;
    if (o != NULL) {
        Py_INCREF(o);
        if (PyDict_DelItem(owners, key) < 0) {
            Py_CLEAR(o);
        }
    }
    Py_XDECREF(key);
    return o;
}
