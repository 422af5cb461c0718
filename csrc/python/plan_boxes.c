/*
 * python/plan_boxes.c - the private binding of targets/plan_geom.h: boxes
 * and keypoints mapped through the geometry of one view of one sample,
 * read from the plan its pixels are placed by, for the tests and the
 * coming detection pipeline.
 *
 *   plan_boxes(spec, width, height, seed, epoch, index, view, boxes,
 *              format, whole=False) -> (bytes, (h, w))
 *   plan_keypoints(spec, width, height, seed, epoch, index, view,
 *                  points) -> (bytes, (h, w))
 *   plan_maps(spec, width, height, seed, epoch, index, view=0)
 *       -> (row_map, col_map)
 * The first seven arguments are _core.plan's; boxes (N, 4) and points
 * (N, 2) are C-contiguous float64 buffers; the result is the mapped
 * values and the output canvas; plan_maps' are int32 bytes (-1: padding),
 * the index maps targets/mask.h samples a mask through.
 */
#include "python/module.h"

#include <stdlib.h>

#include "core/plan.h"
#include "targets/plan_geom.h"

/* Plans view `view` of the sample (spec, width, height, seed, epoch,
 * index) and writes its target geometry: 0, or -1 with an exception. */
static int plan_geom(PyObject *spec, int width, int height,
                     unsigned long long seed, long long epoch, long long index,
                     int view, rl_transform *t, rl_target_geom *g)
{
    if (rl__py_parse_transform(spec, t) != 0)
        return -1;
    rl_plan p;
    char msg[RL_MSG_MAX];
    if (rl_plan_make(t, width, height, seed, epoch, index, view, &p, msg) !=
        0) {
        PyErr_SetString(PyExc_ValueError, msg);
        return -1;
    }
    const char *err = NULL;
    if (rl_geom_from_plan(t, &p, width, height, g, &err) != 0) {
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
    rl_transform t;
    rl_target_geom g;
    size_t n;
    int whole = 0;
    int ok = per == 4 ? PyArg_ParseTuple(args, "OiiKLLiOO|p:plan_boxes", &spec,
                                         &width, &height, &seed, &epoch, &index,
                                         &view, &values, &fmt_o, &whole)
                      : PyArg_ParseTuple(args, "OiiKLLiO:plan_keypoints", &spec,
                                         &width, &height, &seed, &epoch, &index,
                                         &view, &values);
    if (!ok || (fmt_o && rl__py_box_format(fmt_o, &fmt) < 0) ||
        plan_geom(spec, width, height, seed, epoch, index, view, &t, &g) < 0) {
        return NULL;
    }
    double *v =
        rl__py_float64_rows(values, per, per == 4 ? "boxes" : "keypoints", &n);
    if (!v)
        return NULL;
    if (per == 4 && whole)
        rl_boxes_map_whole(&g, v, n, fmt);
    else if (per == 4)
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

static PyObject *py_plan_maps(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kwlist[] = {"spec",  "width", "height", "seed",
                             "epoch", "index", "view",   NULL};
    PyObject *spec;
    int width, height, view = 0;
    unsigned long long seed;
    long long epoch, index;
    rl_transform t;
    rl_target_geom g;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OiiKLL|i:plan_maps", kwlist,
                                     &spec, &width, &height, &seed, &epoch,
                                     &index, &view) ||
        plan_geom(spec, width, height, seed, epoch, index, view, &t, &g) < 0) {
        return NULL;
    }
    int oh = rl_geom_out_height(&g), ow = rl_geom_out_width(&g);
    PyObject *rows = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)oh * 4);
    PyObject *cols = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)ow * 4);
    const char *err = NULL;
    if (rows && cols &&
        rl_geom_maps(&g, &t, (int32_t *)PyBytes_AsString(rows),
                     (int32_t *)PyBytes_AsString(cols), &err) != 0) {
        PyErr_Format(PyExc_ValueError, "the %dx%d image's maps: %s", width,
                     height, err);
    }
    if (!rows || !cols || err) {
        Py_XDECREF(rows);
        Py_XDECREF(cols);
        return NULL;
    }
    return Py_BuildValue("(NN)", rows, cols);
}

PyMethodDef rl__py_plan_boxes_methods[] = {
    {"plan_boxes", py_plan_boxes, METH_VARARGS,
     "plan_boxes(spec, width, height, seed, epoch, index, view, boxes, "
     "format, whole=False) -> (bytes, (h, w)): float64 boxes mapped "
     "through the trim, resize, crop, padding and flips that view of that "
     "sample's pixels go through, as torchvision's v2 kernels map them "
     "(whole: boxes of an integer dtype, truncated after a resize)."},
    {"plan_keypoints", py_plan_keypoints, METH_VARARGS,
     "plan_keypoints(spec, width, height, seed, epoch, index, view, "
     "points) -> (bytes, (h, w)): the same for (x, y) keypoints."},
    {"plan_maps", (PyCFunction)(void (*)(void))py_plan_maps,
     METH_VARARGS | METH_KEYWORDS,
     "plan_maps(spec, width, height, seed, epoch, index, view=0) -> "
     "(row_map, col_map): int32 bytes, the input row and column of each "
     "output pixel of that view of that sample (-1: padding), through the "
     "same geometry; a mask sampled through them is torchvision's ops on "
     "a tv_tensors.Mask."},
    {NULL, NULL, 0, NULL},
};
