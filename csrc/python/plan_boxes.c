/*
 * python/plan_boxes.c - the private binding of targets/plan_geom.h: boxes
 * and keypoints mapped through the geometry of one view of one sample,
 * read from the plan its pixels are placed by, and the index maps a mask
 * is sampled through; for the tests and the detection front door.
 *
 *   plan_boxes(spec, width, height, seed, epoch, index, view, boxes,
 *              format, plan=None, *, whole=False, single=False)
 *       -> (bytes, (h, w))
 *   plan_keypoints(spec, width, height, seed, epoch, index, view,
 *                  points, plan=None, *, single=False) -> (bytes, (h, w))
 *   plan_maps(spec, width, height, seed, epoch, index, view=0, plan=None)
 *       -> (row_map, col_map)
 * The first seven arguments are _core.plan's; boxes (N, 4) and points
 * (N, 2) are C-contiguous float64 buffers; the result is the mapped
 * values and the output canvas; plan_maps' are int32 bytes (-1: padding),
 * the index maps targets/mask.h samples a mask through. plan: the
 * sample's boxes (N, 4) XYXY float64 that a RandomIoUCrop's draw reads
 * (plan_boxes: the boxes given, in XYXY, when None; the others: none);
 * where that crop is drawn, the boxes whose centre it leaves out are
 * zeroed right after it, as torchvision zeroes them, then the flips map
 * them on. whole: boxes of an integer dtype, truncated after a resize;
 * single: float32 values, rounded to float32 after every step as
 * torchvision's float32 tensors are (targets/boxes.h).
 * Also the pipeline's boxes table (rl__py_plan_box_table).
 */
#include "python/module.h"

#include <stdlib.h>
#include <string.h>

#include "core/plan.h"
#include "targets/plan_geom.h"

/* Plans view `view` of the sample (spec, width, height, seed, epoch,
 * index; boxes: the n XYXY rows a RandomIoUCrop's draw reads) and writes
 * its transform, plan and target geometry: 0, or -1 with an exception. */
static int plan_geom(PyObject *spec, int width, int height,
                     unsigned long long seed, long long epoch, long long index,
                     int view, const double *boxes, size_t n, rl_transform *t,
                     rl_plan *p, rl_target_geom *g)
{
    if (rl__py_parse_transform(spec, t) != 0)
        return -1;
    char msg[RL_MSG_MAX];
    if (rl_plan_make_boxes(t, width, height, seed, epoch, index, view, boxes, n,
                           p, msg) != 0) {
        PyErr_SetString(PyExc_ValueError, msg);
        return -1;
    }
    const char *err = NULL;
    if (rl_geom_from_plan(t, p, width, height, g, &err) != 0) {
        PyErr_Format(PyExc_ValueError, "the %dx%d image's geometry: %s", width,
                     height, err);
        return -1;
    }
    return 0;
}

/* How mapped values are held between steps: float64, float32 (the
 * `single` keyword), or whole numbers (`whole`: an integer dtype). */
enum { AS_DOUBLE, AS_SINGLE, AS_WHOLE };

/* Boxes through g, held as `as` says. */
static void map_boxes(const rl_target_geom *g, double *v, size_t n,
                      rl_box_format fmt, int as)
{
    if (as == AS_WHOLE)
        rl_boxes_map_whole(g, v, n, fmt);
    else if (as == AS_SINGLE)
        rl_boxes_map_f32(g, v, n, fmt);
    else
        rl_boxes_map(g, v, n, fmt);
}

/* Steps [k0, k1) of g, as a geometry of their own. */
static rl_target_geom geom_part(const rl_target_geom *g, int k0, int k1)
{
    rl_target_geom part = *g;
    part.n = k1 - k0;
    for (int k = 0; k < part.n; k++)
        part.step[k] = g->step[k0 + k];
    return part;
}

/* Boxes through g where p drew an IoU crop (g's first step, or its second
 * after a zoom-out's padding): those whose centre the crop leaves out
 * (of the boxes it sees: padded) are zeroed after it, as torchvision
 * zeroes them, before the steps after it. 0, or -1 with MemoryError. */
static int map_iou_cropped(const rl_target_geom *g, const rl_plan *p, double *v,
                           size_t n, rl_box_format fmt, int as)
{
    uint8_t *in = malloc(n ? n : 1);
    if (in == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    int c = p->zoom_out ? 1 : 0; /* the crop's step */
    rl_target_geom pad = geom_part(g, 0, c), crop = geom_part(g, c, c + 1);
    rl_target_geom tail = geom_part(g, c + 1, g->n);
    map_boxes(&pad, v, n, fmt, as);
    rl_boxes_centers_within(v, n, fmt, p->iou_y, p->iou_x, p->iou_h, p->iou_w,
                            in);
    map_boxes(&crop, v, n, fmt, as);
    rl_boxes_zero_outside(v, n, in);
    map_boxes(&tail, v, n, fmt, as);
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
static PyObject *map_rows(PyObject *args, PyObject *kw, size_t per)
{
    static char *box_kw[] = {"spec",  "width",  "height", "seed",   "epoch",
                             "index", "view",   "boxes",  "format", "plan",
                             "whole", "single", NULL};
    static char *point_kw[] = {"spec",  "width",  "height", "seed",
                               "epoch", "index",  "view",   "points",
                               "plan",  "single", NULL};
    PyObject *spec, *values, *fmt_o = NULL, *plan_o = NULL;
    int width, height, view, whole = 0, single = 0;
    unsigned long long seed;
    long long epoch, index;
    rl_box_format fmt = RL_BOX_XYXY;
    rl_transform t;
    rl_target_geom g;
    rl_plan p;
    size_t n, np;
    double *pb = NULL;
    int ok = per == 4 ? PyArg_ParseTupleAndKeywords(
                            args, kw, "OiiKLLiOO|O$pp:plan_boxes", box_kw,
                            &spec, &width, &height, &seed, &epoch, &index,
                            &view, &values, &fmt_o, &plan_o, &whole, &single)
                      : PyArg_ParseTupleAndKeywords(
                            args, kw, "OiiKLLiO|O$p:plan_keypoints", point_kw,
                            &spec, &width, &height, &seed, &epoch, &index,
                            &view, &values, &plan_o, &single);
    if (!ok || (fmt_o && rl__py_box_format(fmt_o, &fmt) < 0))
        return NULL;
    if (whole && single) {
        PyErr_SetString(PyExc_ValueError,
                        "plan_boxes: whole (an integer dtype) and single "
                        "(float32) exclude each other");
        return NULL;
    }
    int as = whole ? AS_WHOLE : single ? AS_SINGLE : AS_DOUBLE;
    double *v =
        rl__py_float64_rows(values, per, per == 4 ? "boxes" : "keypoints", &n);
    if (!v)
        return NULL;
    if (plan_rows(plan_o, v, n, per, fmt, &pb, &np) < 0 ||
        plan_geom(spec, width, height, seed, epoch, index, view, pb, np, &t, &p,
                  &g) < 0) {
        free(pb);
        free(v);
        return NULL;
    }
    free(pb);
    if (per == 4 && p.iou_crop) {
        if (map_iou_cropped(&g, &p, v, n, fmt, as) < 0) {
            free(v);
            return NULL;
        }
    } else if (per == 4) {
        map_boxes(&g, v, n, fmt, as);
    } else if (single) {
        rl_keypoints_map_f32(&g, v, n);
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

static PyObject *py_plan_boxes(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    return map_rows(args, kw, 4);
}

static PyObject *py_plan_keypoints(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    return map_rows(args, kw, 2);
}

static PyObject *py_plan_maps(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kwlist[] = {"spec",  "width", "height", "seed", "epoch",
                             "index", "view",  "plan",   NULL};
    PyObject *spec, *plan_o = NULL;
    int width, height, view = 0;
    unsigned long long seed;
    long long epoch, index;
    rl_transform t;
    rl_plan p;
    rl_target_geom g;
    double *pb = NULL;
    size_t np = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OiiKLL|iO:plan_maps", kwlist,
                                     &spec, &width, &height, &seed, &epoch,
                                     &index, &view, &plan_o) ||
        plan_rows(plan_o, NULL, 0, 2, RL_BOX_XYXY, &pb, &np) < 0) {
        return NULL;
    }
    int rc = plan_geom(spec, width, height, seed, epoch, index, view, pb, np,
                       &t, &p, &g);
    free(pb);
    if (rc < 0)
        return NULL;
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
    {"plan_boxes", (PyCFunction)(void (*)(void))py_plan_boxes,
     METH_VARARGS | METH_KEYWORDS,
     "plan_boxes(spec, width, height, seed, epoch, index, view, boxes, "
     "format, plan=None, *, whole=False) -> (bytes, (h, w)): float64 boxes "
     "mapped through the trim, resize, crop, padding and flips that view of "
     "that sample's pixels go through, as torchvision's v2 kernels map them "
     "(a RandomIoUCrop drawn from plan, the sample's XYXY boxes, default "
     "these: the boxes whose centre it leaves out zeroed; whole: boxes of "
     "an integer dtype, truncated after a resize)."},
    {"plan_keypoints", (PyCFunction)(void (*)(void))py_plan_keypoints,
     METH_VARARGS | METH_KEYWORDS,
     "plan_keypoints(spec, width, height, seed, epoch, index, view, "
     "points, plan=None) -> (bytes, (h, w)): the same for (x, y) "
     "keypoints."},
    {"plan_maps", (PyCFunction)(void (*)(void))py_plan_maps,
     METH_VARARGS | METH_KEYWORDS,
     "plan_maps(spec, width, height, seed, epoch, index, view=0, plan=None) "
     "-> (row_map, col_map): int32 bytes, the input row and column of each "
     "output pixel of that view of that sample (-1: padding), through the "
     "same geometry (plan: the sample's XYXY boxes a RandomIoUCrop reads); "
     "a mask sampled through them is torchvision's ops on a "
     "tv_tensors.Mask."},
    {NULL, NULL, 0, NULL},
};
