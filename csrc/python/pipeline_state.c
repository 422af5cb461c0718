/*
 * python/pipeline_state.c - the Pipeline object's closing rule
 * (python/pipeline.h): close() while another thread's call runs with the
 * GIL released.
 *
 * DESIGN. submit, next and cancel release the GIL around the core's calls,
 * and another thread may call close() meanwhile. Freeing the core pipeline
 * then would pull it from under the running call, so close() only marks
 * it (close_pending), every later call sees it closed, and the last call
 * to return closes it. The rule lives in one file so that each method
 * keeps to it the same way.
 */
#include "python/pipeline.h"

void rl__py_pipeline_close_now(rl__py_pipeline *self)
{
    rl_pipeline *p = self->p;
    self->p = NULL;
    if (p != NULL) {
        Py_BEGIN_ALLOW_THREADS
        rl_pipeline_destroy(p);
        Py_END_ALLOW_THREADS
    }
    if (self->owners != NULL) {
        PyDict_Clear(self->owners);
    }
}

void rl__py_busy_enter(rl__py_pipeline *self)
{
    self->busy++;
}

void rl__py_busy_leave(rl__py_pipeline *self)
{
    if (--self->busy == 0 && self->close_pending) {
        self->close_pending = false;
        rl__py_pipeline_close_now(self);
    }
}

int rl__py_check_open(rl__py_pipeline *self)
{
    if (self->p == NULL || self->close_pending) {
        /* the words of a wait that the close ended (RL_ECLOSED), whichever
         * side of the call the close came */
        PyErr_SetString(PyExc_RuntimeError, "the loader is closed");
        return -1;
    }
    if (rl_pipeline_forked(self->p)) {
        PyErr_SetString(PyExc_RuntimeError,
                        "this pipeline belongs to the process that forked "
                        "this one: make a new one here");
        return -1;
    }
    return 0;
}
