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
 *
 * A varying batch's samples past its arena need one more buffer, their
 * spill buffer, known only once the batch is done: the core asks for it
 * in next() (rl__py_spill_alloc), on the thread that called next() with
 * the GIL released, which takes the GIL again for the allocator; the
 * pair comes back in the batch's report and next() makes the Batch keep
 * it, or releases it. An exception that is no Exception (a Ctrl-C's
 * KeyboardInterrupt, a SystemExit from a signal handler) raised inside the
 * allocator is not swallowed into the batch's error: it is kept on the
 * Pipeline and next() raises it, as it was, once it holds the GIL.
 */
#include "python/module.h"
#include "python/pipeline.h"

#include <errno.h>
#include <stdio.h>

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

int rl__py_spill_alloc(void *arg, size_t n, void **dst, void **owner, char *msg)
{
    rl__py_pipeline *self = arg;
    PyGILState_STATE g = PyGILState_Ensure();
    uintptr_t ptr = 0;
    PyObject *pair = rl__py_device_buffer(self->allocator, n, &ptr);
    int rc = 0;
    if (pair != NULL) {
        *dst = (void *)ptr;
        *owner = pair;
    } else if (!PyErr_ExceptionMatches(PyExc_Exception)) {
        /* raised as it was by next() */
        for (int i = 0; i < 3; i++)
            Py_CLEAR(self->spill_exc[i]);
        PyErr_Fetch(&self->spill_exc[0], &self->spill_exc[1],
                    &self->spill_exc[2]);
        snprintf(msg, RL_MSG_MAX,
                 "interrupted (the allocator raised KeyboardInterrupt or "
                 "SystemExit)");
        rc = -EINTR;
    } else {
        rl__py_exception_text(msg, true, "the allocator failed");
        rc = -ENOMEM;
    }
    PyGILState_Release(g);
    return rc;
}
