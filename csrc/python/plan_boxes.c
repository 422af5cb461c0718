/*
 * python/plan_boxes.c - the private binding of targets/plan_geom.h: boxes
 * and keypoints mapped through the geometry of one view of one sample,
 * read from the plan its pixels are placed by, for the tests and the
 * coming detection pipeline.
 *
 *   plan_boxes(spec, width, height, seed, epoch, index, view, boxes,
 *              format) -> (bytes, (h, w))
 *   plan_keypoints(spec, width, height, seed, epoch, index, view,
 *                  points) -> (bytes, (h, w))
 * The first seven arguments are _core.plan's; boxes (N, 4) and points
 * (N, 2) are C-contiguous float64 buffers; the result is the mapped
 * values and the output canvas.
 */
#include "python/module.h"

#include <stdlib.h>

#include "core/plan.h"
#include "targets/plan_geom.h"

/* Plans view `view` of the sample (spec, width, height, seed, epoch,
 * index) and writes its target geometry: 0, or -1 with an exception. */
static int plan_geom(PyObject *spec, int width, int height,
                     unsigned long long seed, long long epoch, long long index,
                     int view, rl_target_geom *g)
{
    rl_transform t;
    if (rl__py_parse_transform(spec, &t) != 0)
        return -1;
    rl_plan p;
    char msg[RL_MSG_MAX];
    if (rl_plan_make(&t, width, height, seed, epoch, index, view, &p, msg) !=
        0) {
        PyErr_SetString(PyExc_ValueError, msg);
        return -1;
    }
    const char *err = NULL;
    if (rl_geom_from_plan(&t, &p, width, height, g, &err) != 0) {
        PyErr_Format(PyExc_ValueError, "the %dx%d image's geometry: %s", width,
                     height, err);
        return -1;
    }
    return 0;
}

/* The mapped rows of `per` values (boxes: 4, in format fmt; keypoints: 2)
 * and the canvas. */
static PyObject *map_rows(PyObject *args, size_t per)
{
    PyObject *spec, *values, *fmt_o = NULL;
    int width, height, view;
    unsigned long long seed;
    long long epoch, index;
    rl_box_format fmt = RL_BOX_XYXY;
    rl_target_geom g;
    size_t n;
    int ok = per == 4 ? PyArg_ParseTuple(args, "OiiKLLiOO:plan_boxes", &spec,
                                         &width, &height, &seed, &epoch, &index,
                                         &view, &values, &fmt_o)
                      : PyArg_ParseTuple(args, "OiiKLLiO:plan_keypoints", &spec,
                                         &width, &height, &seed, &epoch, &index,
                                         &view, &values);
    if (!ok || (fmt_o && rl__py_box_format(fmt_o, &fmt) < 0) ||
        plan_geom(spec, width, height, seed, epoch, index, view, &g) < 0) {
        return NULL;
    }
    double *v =
        rl__py_float64_rows(values, per, per == 4 ? "boxes" : "keypoints", &n);
    if (!v)
        return NULL;
    if (per == 4)
        rl_boxes_map(&g, v, n, fmt);
    else
        rl_keypoints_map(&g, v, n);
    return rl__py_mapped(v, n, per, rl_geom_out_width(&g),
                         rl_geom_out_height(&g));
}

static PyObject *py_plan_boxes(PyObject *self, PyObject *args)
{
    (void)self;
    return map_rows(args, 4);
}

static PyObject *py_plan_keypoints(PyObject *self, PyObject *args)
{
    (void)self;
    return map_rows(args, 2);
}

PyMethodDef rl__py_plan_boxes_methods[] = {
    {"plan_boxes", py_plan_boxes, METH_VARARGS,
     "plan_boxes(spec, width, height, seed, epoch, index, view, boxes, "
     "format) -> (bytes, (h, w)): float64 boxes mapped through the trim, "
     "resize, crop, padding and flips that view of that sample's pixels "
     "go through, as torchvision's v2 kernels map them."},
    {"plan_keypoints", py_plan_keypoints, METH_VARARGS,
     "plan_keypoints(spec, width, height, seed, epoch, index, view, "
     "points) -> (bytes, (h, w)): the same for (x, y) keypoints."},
    {NULL, NULL, 0, NULL},
};
