/*
 * python/plan_boxes.c - the private binding of targets/plan_geom.h: boxes
 * and keypoints mapped through the geometry of one view of one sample,
 * read from the plan its pixels are placed by, for the tests and the
 * coming detection pipeline.
 *
 *   plan_boxes(spec, width, height, seed, epoch, index, view, boxes,
 *              format, plan=None) -> (bytes, (h, w))
 *   plan_keypoints(spec, width, height, seed, epoch, index, view,
 *                  points, plan=None) -> (bytes, (h, w))
 * The first seven arguments are _core.plan's; boxes (N, 4) and points
 * (N, 2) are C-contiguous float64 buffers; the result is the mapped
 * values and the output canvas. plan: the sample's boxes (N, 4) XYXY
 * float64 that a RandomIoUCrop's draw reads (plan_boxes: the boxes given,
 * in XYXY, when None); where that crop is drawn, the boxes whose centre
 * it leaves out are zeroed right after it, as torchvision zeroes them,
 * then the flips map them on.
 * Also the pipeline's boxes table (rl__py_plan_box_table).
 */
#include "python/module.h"

#include <stdlib.h>
#include <string.h>

#include "core/plan.h"
#include "targets/plan_geom.h"

/* Plans view `view` of the sample (spec, width, height, seed, epoch,
 * index) and writes its target geometry: 0, or -1 with an exception. */
static int plan_geom(PyObject *spec, int width, int height,
                     unsigned long long seed, long long epoch, long long index,
                     int view, const double *boxes, size_t n, rl_plan *p,
                     rl_target_geom *g)
{
    rl_transform t;
    if (rl__py_parse_transform(spec, &t) != 0)
        return -1;
    char msg[RL_MSG_MAX];
    if (rl_plan_make_boxes(&t, width, height, seed, epoch, index, view, boxes,
                           n, p, msg) != 0) {
        PyErr_SetString(PyExc_ValueError, msg);
        return -1;
    }
    const char *err = NULL;
    if (rl_geom_from_plan(&t, p, width, height, g, &err) != 0) {
        PyErr_Format(PyExc_ValueError, "the %dx%d image's geometry: %s", width,
                     height, err);
        return -1;
    }
    return 0;
}

/* Boxes through g where p drew an IoU crop (g's first step): those whose
 * centre the crop leaves out are zeroed after it, as torchvision zeroes
 * them, before the steps after it. 0, or -1 with MemoryError. */
static int map_iou_cropped(const rl_target_geom *g, const rl_plan *p, double *v,
                           size_t n, rl_box_format fmt)
{
    uint8_t *in = malloc(n ? n : 1);
    if (in == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    rl_boxes_centers_within(v, n, fmt, (int)p->y, (int)p->x, (int)p->h,
                            (int)p->w, in);
    rl_target_geom head = *g, tail = *g;
    head.n = 1;
    tail.n = g->n - 1;
    for (int k = 0; k < tail.n; k++)
        tail.step[k] = g->step[k + 1];
    rl_boxes_map(&head, v, n, fmt);
    rl_boxes_zero_outside(v, n, in);
    rl_boxes_map(&tail, v, n, fmt);
    free(in);
    return 0;
}

/* The boxes a plan reads: plan_o's rows, or (None) the boxes v in fmt
 * as XYXY (keypoints: none). A malloc'd copy in *out (NULL for none);
 * 0, or -1 with an exception. */
static int plan_rows(PyObject *plan_o, const double *v, size_t n, size_t per,
                     rl_box_format fmt, double **out, size_t *nout)
{
    *out = NULL;
    *nout = 0;
    if (plan_o != NULL && plan_o != Py_None) {
        *out = rl__py_float64_rows(plan_o, 4, "plan", nout);
        return *out ? 0 : -1;
    }
    if (per != 4)
        return 0;
    if ((*out = malloc(n ? 4 * n * sizeof(double) : 1)) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(*out, v, 4 * n * sizeof(double));
    rl_boxes_convert(*out, n, fmt, RL_BOX_XYXY);
    *nout = n;
    return 0;
}

/* The mapped rows of `per` values (boxes: 4, in format fmt; keypoints: 2)
 * and the canvas. */
static PyObject *map_rows(PyObject *args, size_t per)
{
    PyObject *spec, *values, *fmt_o = NULL, *plan_o = NULL;
    int width, height, view;
    unsigned long long seed;
    long long epoch, index;
    rl_box_format fmt = RL_BOX_XYXY;
    rl_target_geom g;
    rl_plan p;
    size_t n, np;
    double *pb = NULL;
    int ok = per == 4 ? PyArg_ParseTuple(args, "OiiKLLiOO|O:plan_boxes", &spec,
                                         &width, &height, &seed, &epoch, &index,
                                         &view, &values, &fmt_o, &plan_o)
                      : PyArg_ParseTuple(args, "OiiKLLiO|O:plan_keypoints",
                                         &spec, &width, &height, &seed, &epoch,
                                         &index, &view, &values, &plan_o);
    if (!ok || (fmt_o && rl__py_box_format(fmt_o, &fmt) < 0))
        return NULL;
    double *v =
        rl__py_float64_rows(values, per, per == 4 ? "boxes" : "keypoints", &n);
    if (!v)
        return NULL;
    if (plan_rows(plan_o, v, n, per, fmt, &pb, &np) < 0 ||
        plan_geom(spec, width, height, seed, epoch, index, view, pb, np, &p,
                  &g) < 0) {
        free(pb);
        free(v);
        return NULL;
    }
    free(pb);
    if (per == 4 && p.iou_crop) {
        if (map_iou_cropped(&g, &p, v, n, fmt) < 0) {
            free(v);
            return NULL;
        }
    } else if (per == 4) {
        rl_boxes_map(&g, v, n, fmt);
    } else {
        rl_keypoints_map(&g, v, n);
    }
    return rl__py_mapped(v, n, per, rl_geom_out_width(&g),
                         rl_geom_out_height(&g));
}

int rl__py_plan_box_table(PyObject *table, rl_pipeline_config *cfg)
{
    PyObject *boxes, *offsets;
    if (table == Py_None)
        return 0;
    if (!PyTuple_Check(table) || PyTuple_Size(table) != 2) {
        PyErr_SetString(PyExc_TypeError,
                        "plan_boxes must be a (boxes, offsets) pair");
        return -1;
    }
    boxes = PyTuple_GetItem(table, 0);
    offsets = PyTuple_GetItem(table, 1);
    Py_buffer b;
    if (rl__py_array(offsets, "plan_boxes offsets", RL_PY_I64,
                     (Py_ssize_t)cfg->source->count + 1, &b) != 0)
        return -1;
    size_t n;
    double *rows = rl__py_float64_rows(boxes, 4, "plan_boxes boxes", &n);
    int64_t *o = rows ? malloc((size_t)b.len) : NULL;
    if (o != NULL)
        memcpy(o, b.buf, (size_t)b.len);
    PyBuffer_Release(&b);
    if (o == NULL) {
        free(rows);
        return rows ? (PyErr_NoMemory(), -1) : -1;
    }
    cfg->plan_boxes = rows;
    cfg->plan_box_offsets = o;
    cfg->plan_box_rows = (int64_t)n;
    return 0;
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
     "format, plan=None) -> (bytes, (h, w)): float64 boxes mapped through "
     "the trim, resize, crop, padding and flips that view of that sample's "
     "pixels go through, as torchvision's v2 kernels map them (a "
     "RandomIoUCrop drawn from plan, the sample's XYXY boxes, default "
     "these: the boxes whose centre it leaves out zeroed)."},
    {"plan_keypoints", py_plan_keypoints, METH_VARARGS,
     "plan_keypoints(spec, width, height, seed, epoch, index, view, "
     "points, plan=None) -> (bytes, (h, w)): the same for (x, y) "
     "keypoints."},
    {NULL, NULL, 0, NULL},
};
