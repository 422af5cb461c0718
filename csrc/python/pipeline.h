/*
 * python/pipeline.h - the Pipeline object, shared by the files that make
 * up the type: pipeline.c (the type: creation, closing, properties),
 * pipeline_config.c (the constructor's keywords made into a core
 * configuration), pipeline_batches.c (submit and next) and
 * pipeline_state.c (the rule for closing while a call runs).
 *
 * The closing rule: a call that releases the GIL with self->p in use
 * counts itself in `busy` (rl__py_busy_enter/leave); close() from another
 * thread meanwhile only sets close_pending, and the last such call to
 * return closes the pipeline. Every method but close and cancel checks
 * first that the pipeline is open (rl__py_check_open).
 */
#ifndef RL_PY_PIPELINE_H
#define RL_PY_PIPELINE_H

#include "python/module.h"

typedef struct rl__py_pipeline {
    PyObject_HEAD rl_pipeline *p;
    rl_place_config places[RL_MAX_VIEWS]; /* each view's, for its Batch */
    int nviews;
    int busy; /* our calls running with the GIL released */
    bool close_pending;
    int device;            /* CUDA device of the device delivery, or -1 */
    uintptr_t copy_stream; /* device: the delivery's own copy stream */
    PyObject *allocator;   /* device: nbytes -> (owner, pointer) */
    /* An exception that is no Exception (KeyboardInterrupt, SystemExit)
     * raised by the allocator when next() asked for a spill buffer: type,
     * value, traceback, raised as it was by that next(). */
    PyObject *spill_exc[3];
    PyObject *owners; /* device: {ticket: (owner, pointer)} */
    PyObject *keep;   /* what C borrows: the fallback, memory buffers */
    rl_source *http;  /* the HTTP source (owned by p), or NULL */
    rl__py_held held; /* the table's arrays the core borrows */
    rl_decoder_def fallback_def;
} rl__py_pipeline;

/* ---- pipeline_state.c ---- */

/* Destroys the core pipeline (GIL released while its threads join) and
 * drops the device owners; the object stays, closed. Idempotent. */
void rl__py_pipeline_close_now(rl__py_pipeline *self);
/* Around every call that releases the GIL with self->p in use; the leave
 * of the last one closes the pipeline if close() came meanwhile. */
void rl__py_busy_enter(rl__py_pipeline *self);
void rl__py_busy_leave(rl__py_pipeline *self);
/* 0 when the pipeline is open and this process's; else -1 with a
 * RuntimeError (closed, or inherited across fork()). */
int rl__py_check_open(rl__py_pipeline *self);

/* ---- pipeline_config.c ---- */

/* Parses Pipeline()'s arguments (the transform spec and the keywords,
 * python/pipeline.c's Py_tp_doc) and makes a new object of `type` with
 * what the core borrows kept in it (the fallback, memory buffers, the
 * device allocator), and in *cfg the core configuration: the views (left
 * in *views, the caller's to free), the source, the decoders, the fields
 * and parts (rl__py_fields_free's to free after rl_pipeline_create), the
 * device delivery. Returns the object, its `p` still NULL, or NULL with an
 * exception and nothing of cfg left to free but *views. */
rl__py_pipeline *rl__py_pipeline_build(PyTypeObject *type, PyObject *args,
                                       PyObject *kw, rl_pipeline_config *cfg,
                                       rl_view **views);

/* ---- pipeline_batches.c ---- */

/* submit(ids, keys, epoch) -> ticket. */
PyObject *rl__py_pipeline_submit(rl__py_pipeline *self, PyObject *args);
/* next(timeout=None, consumer_stream=0) -> Batch | None. */
PyObject *rl__py_pipeline_next(rl__py_pipeline *self, PyObject *args,
                               PyObject *kw);

#endif /* RL_PY_PIPELINE_H */
