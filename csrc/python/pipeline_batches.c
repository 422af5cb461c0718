/*
 * python/pipeline_batches.c - Pipeline.submit and Pipeline.next
 * (python/pipeline.h): batches in by sample id, out as Batch objects.
 *
 * DESIGN. Waiting for a batch releases the GIL and wakes every 50 ms to
 * run Python's signal handlers, so Ctrl-C interrupts a wait promptly. With
 * a device, the allocator given at creation is called at submit, with the
 * GIL held, for the batch's device buffer; its owner waits in a dict under
 * the batch's ticket until next() puts it in the Batch the core reports
 * with that ticket. A varying batch's samples past its arena lie in a
 * spill buffer the core asks the same allocator for during next()
 * (owners.c); the Batch keeps it as their owner. Nothing here is kept in
 * step with the core by order alone: a batch names itself (ticket, ids),
 * so an exception between two calls (Ctrl-C in a wait) can never pair one
 * batch with another's owner or ids.
 */
#include "python/pipeline.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* One of ids, keys into out (n entries): an int64 array through the
 * buffer protocol, or a short sequence of ints (a list) item by item. */
static int parse_column(PyObject *col, const char *what, Py_ssize_t n,
                        int64_t *out)
{
    if (PyObject_CheckBuffer(col)) {
        Py_buffer v;
        if (rl__py_array(col, what, RL_PY_I64, n, &v) != 0) {
            return -1;
        }
        memcpy(out, v.buf, sizeof(*out) * (size_t)n);
        PyBuffer_Release(&v);
        return 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        out[i] = rl__py_item_i64(col, i);
        if (PyErr_Occurred()) {
            return -1;
        }
    }
    return 0;
}

/* ids and keys as int64 arrays (malloc'd into *ids, *keys). 0 or -1. */
static int parse_ids(PyObject *ids, PyObject *keys, int64_t **out_ids,
                     int64_t **out_keys, Py_ssize_t *n)
{
    *n = PyObject_Length(ids);
    if (*n < 0 || PyObject_Length(keys) != *n || *n < 1 || *n > (1 << 20)) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError,
                            "ids and keys must be non-empty and of the "
                            "same length");
        }
        return -1;
    }
    *out_ids = malloc(sizeof(int64_t) * (size_t)*n);
    *out_keys = malloc(sizeof(int64_t) * (size_t)*n);
    if (*out_ids == NULL || *out_keys == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    return parse_column(ids, "ids", *n, *out_ids) != 0 ||
                   parse_column(keys, "keys", *n, *out_keys) != 0
               ? -1
               : 0;
}

/* submit(ids, keys, epoch) -> ticket: queue a batch. */
PyObject *rl__py_pipeline_submit(rl__py_pipeline *self, PyObject *args)
{
    PyObject *ids, *keys;
    long long epoch;
    if (!PyArg_ParseTuple(args, "OOL", &ids, &keys, &epoch) ||
        rl__py_check_open(self) != 0) {
        return NULL;
    }
    int64_t *cids = NULL, *ckeys = NULL;
    Py_ssize_t n = 0;
    PyObject *result = NULL, *owner = NULL, *ticket_obj = NULL;
    uintptr_t dst = 0;
    if (parse_ids(ids, keys, &cids, &ckeys, &n) != 0) {
        goto out_free;
    }
    if (self->device >= 0) {
        size_t nbytes = rl_pipeline_batch_bytes(self->p, (int)n);
        if ((owner = rl__py_device_buffer(self->allocator, nbytes, &dst)) ==
            NULL) {
            goto out_free;
        }
    }
    int rc;
    uint64_t ticket = 0;
    rl_pipeline *p = self->p;
    rl__py_busy_enter(self);
    Py_BEGIN_ALLOW_THREADS
    rc =
        rl_pipeline_submit(p, cids, ckeys, (int)n, epoch, (void *)dst, &ticket);
    Py_END_ALLOW_THREADS
    rl__py_busy_leave(self);
    if (rc != 0) {
        rl__py_raise_submit(rl__py_state_of(Py_TYPE((PyObject *)self)), rc, p,
                            (int)n);
        goto out_free;
    }
    ticket_obj = PyLong_FromUnsignedLongLong(ticket);
    if (ticket_obj != NULL && owner != NULL && self->owners != NULL &&
        PyDict_SetItem(self->owners, ticket_obj, owner) < 0) {
        Py_CLEAR(ticket_obj); /* next() will find no owner: it raises */
    }
    result = ticket_obj;
out_free:
    Py_XDECREF(owner);
    free(cids);
    free(ckeys);
    return result;
}

/* Waits for the next batch in 50 ms steps, running signal handlers. */
static int wait_next(rl__py_pipeline *self, double limit, uintptr_t consumer,
                     rl_slot **slot, rl_batch_report *rep)
{
    double waited = 0.0;
    for (;;) {
        rl_pipeline *p = self->p;
        int rc;
        rl__py_busy_enter(self);
        Py_BEGIN_ALLOW_THREADS
        rc = rl_pipeline_next(p, 50, consumer, slot, rep);
        Py_END_ALLOW_THREADS
        rl__py_busy_leave(self); /* a batch taken stays valid if this closes */
        if (rc != RL_ETIMEDOUT) {
            return rc;
        }
        waited += 0.05;
        if (PyErr_CheckSignals() != 0) {
            return -1; /* KeyboardInterrupt; the batch stays in flight */
        }
        if (self->p == NULL || self->close_pending) {
            rl__py_raise(rl__py_state_of(Py_TYPE((PyObject *)self)), RL_ECLOSED,
                         NULL, "");
            return -1;
        }
        if (limit >= 0 && waited >= limit) {
            PyErr_SetString(PyExc_TimeoutError,
                            "no batch ready within the timeout");
            return -1;
        }
    }
}

/* next(timeout=None, consumer_stream=0) -> Batch, or None when no batch
 * is in flight. */
PyObject *rl__py_pipeline_next(rl__py_pipeline *self, PyObject *args,
                               PyObject *kw)
{
    static char *kwlist[] = {"timeout", "consumer_stream", NULL};
    PyObject *timeout = Py_None;
    unsigned long long consumer = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O$K", kwlist, &timeout,
                                     &consumer) ||
        rl__py_check_open(self) != 0) {
        return NULL;
    }
    double limit = timeout == Py_None ? -1.0 : PyFloat_AsDouble(timeout);
    if (limit == -1.0 && PyErr_Occurred()) {
        return NULL;
    }
    rl_module_state *st = rl__py_state_of(Py_TYPE((PyObject *)self));
    rl_batch_report *rep = PyMem_Calloc(1, sizeof(*rep));
    if (rep == NULL) {
        return PyErr_NoMemory();
    }
    rl_slot *slot = NULL;
    int rc = wait_next(self, limit, (uintptr_t)consumer, &slot, rep);
    PyObject *result = NULL;
    /* A varying device batch's spill buffer (owner, pointer): ours from
     * here, whatever the batch's outcome. */
    PyObject *spill = rep->spill_owner;
    rep->spill_owner = NULL;
    if (rc == -1) {
        goto out_free;
    }
    if (rc == RL_ECLOSED) {
        result = Py_NewRef(Py_None);
        goto out_free;
    }
    PyObject *owner = self->device < 0
                          ? Py_NewRef(Py_None)
                          : rl__py_pop_owner(self->owners, rep->ticket);
    if (rc != 0 || owner == NULL) {
        Py_XDECREF(owner);
        if (rc == -EINTR && rep->error.pos < 0 && self->spill_exc[0] != NULL) {
            /* What the spill allocator raised, raised as it was. */
            PyErr_Clear();
            PyErr_Restore(self->spill_exc[0], self->spill_exc[1],
                          self->spill_exc[2]);
            self->spill_exc[0] = self->spill_exc[1] = self->spill_exc[2] = NULL;
        } else if (rc != 0) {
            rl__py_raise_batch(st, rc, rep);
        } else if (!PyErr_Occurred()) { /* closed (owners dropped) */
            rl__py_raise(st, RL_ECLOSED, NULL, "");
        }
        goto out_free;
    }
    PyObject *buf = owner == Py_None ? Py_None : PyTuple_GetItem(owner, 0);
    uintptr_t ptr =
        owner == Py_None
            ? 0
            : (uintptr_t)PyLong_AsUnsignedLongLong(PyTuple_GetItem(owner, 1));
    result = rl__py_batch_new(st, slot, ptr, self->device, buf,
                              spill ? PyTuple_GetItem(spill, 0) : NULL, rep->n,
                              self->places, self->nviews, rep);
    Py_DECREF(owner);
out_free:
    Py_XDECREF(spill);
    rl_batch_report_free(rep);
    PyMem_Free(rep);
    return result;
}
