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
 *   plan_maps(spec, width, height, seed, epoch, index, view=0, plan=None,
 *             *, pil=False) -> (row_map, col_map)
 *   plan_warp_masks(spec, seed, epoch, index, view, masks, count, fill,
 *                   *, size=None) -> bytes
 * The first seven arguments are _core.plan's; boxes (N, 4) and points
 * (N, 2) are C-contiguous float64 buffers; the result is the mapped
 * values and the output canvas; plan_maps' are int32 bytes (-1: padding),
 * the index maps targets/mask.h samples a mask through (pil: resized as
 * Pillow resizes a PIL mask, targets/plan_geom.h). plan: the
 * sample's boxes (N, 4) XYXY float64 that a RandomIoUCrop's draw reads
 * (plan_boxes: the boxes given, in XYXY, when None; the others: none);
 * where that crop is drawn, the boxes whose centre it leaves out are
 * zeroed right after it, as torchvision zeroes them, then the flips map
 * them on. whole: boxes of an integer dtype, truncated after a resize;
 * single: float32 values, rounded to float32 after every step as
 * torchvision's float32 tensors are (targets/boxes.h). Boxes and
 * keypoints then follow the warps of the spec's augment chain
 * (augment.h's rl_augment_warps: RandomAffine, RandomRotation, in or out
 * of groups), drawn as the pixels drew them; an op that moves pixels
 * without a warp is refused, naming it. The maps are the plan's alone (no
 * index map expresses a warp): plan_warp_masks warps the masks sampled
 * through them, with the kernel that warps the pixels.
 * Also the pipeline's boxes table (rl__py_plan_box_table).
 */
#include "python/module.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "augment/augment.h"
#include "core/plan.h"
#include "targets/plan_geom.h"

/* The warps of the spec's augment chain for view `view` of sample
 * (seed, epoch, index) of w x h pixels (the sample's output size, its
 * plan's: core/sample.c draws on it) into out[RL_AUGMENT_MAX_WARPS]: how
 * many, or -1 with an exception naming the op the targets cannot
 * follow. */
static int chain_warps(PyObject *spec, int w, int h, unsigned long long seed,
                       long long epoch, long long index, int view,
                       rl_op_warp *out)
{
    rl_augment a;
    if (rl__py_parse_ops(spec, &a) != 0)
        return -1;
    if (a.n == 0)
        return 0;
    a.view = view;
    double params[RL_AUGMENT_MAX_OPS * RL_OP_MAX_PARAMS];
    char msg[RL_MSG_MAX];
    rl_augment_draw(&a, seed, epoch, index, w, h, params);
    int n = rl_augment_warps(&a, params, w, h, out, msg);
    if (n < 0)
        PyErr_Format(PyExc_ValueError, "the targets' geometry: %s", msg);
    return n;
}

/* Appends to g the n warps of a chain (in the order they ran): each
 * torchvision's affine_bounding_boxes, rotate_bounding_boxes
 * (expand=False) or perspective_bounding_boxes on g's output canvas,
 * clamping to it. 0, or -1 with *err
 * (too many steps, a non-positive scale, a non-finite parameter). */
static int geom_warps(rl_target_geom *g, const rl_op_warp *warps, int n,
                      const char **err)
{
    for (int k = 0; k < n; k++) {
        const rl_op_warp *w = &warps[k];
        const double *c = w->centered ? w->center : NULL;
        int rc = w->kind == RL_WARP_ROTATE ? rl_geom_rotate(g, w->angle, c, err)
                 : w->kind == RL_WARP_PERSPECTIVE
                     ? rl_geom_perspective(g, w->coeffs, err)
                     : rl_geom_affine(g, w->angle, w->tx, w->ty, w->scale,
                                      w->shear_x, w->shear_y, c, err);
        if (rc != 0)
            return -1;
    }
    return 0;
}

/* Plans view `view` of the sample (spec, width, height, seed, epoch,
 * index; boxes: the n XYXY rows a RandomIoUCrop's draw reads) and writes
 * its transform, plan and target geometry (with `warps`, the warps of its
 * augment chain after the plan's steps): 0, or -1 with an exception. */
static int plan_geom(PyObject *spec, int width, int height,
                     unsigned long long seed, long long epoch, long long index,
                     int view, const double *boxes, size_t n, bool warps,
                     rl_transform *t, rl_plan *p, rl_target_geom *g)
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
    rl_op_warp w[RL_AUGMENT_MAX_WARPS];
    int nw = 0;
    if (rl_geom_from_plan(t, p, width, height, g, &err) == 0 && warps) {
        nw = chain_warps(spec, p->out_w, p->out_h, seed, epoch, index, view, w);
        if (nw < 0)
            return -1;
    }
    if (err == NULL && nw > 0)
        geom_warps(g, w, nw, &err);
    if (err != NULL) {
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
        plan_geom(spec, width, height, seed, epoch, index, view, pb, np, true,
                  &t, &p, &g) < 0) {
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
                             "index", "view",  "plan",   "pil",  NULL};
    PyObject *spec, *plan_o = NULL;
    int width, height, view = 0, pil = 0;
    unsigned long long seed;
    long long epoch, index;
    rl_transform t;
    rl_plan p;
    rl_target_geom g;
    double *pb = NULL;
    size_t np = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OiiKLL|iO$p:plan_maps", kwlist,
                                     &spec, &width, &height, &seed, &epoch,
                                     &index, &view, &plan_o, &pil) ||
        plan_rows(plan_o, NULL, 0, 2, RL_BOX_XYXY, &pb, &np) < 0) {
        return NULL;
    }
    int rc = plan_geom(spec, width, height, seed, epoch, index, view, pb, np,
                       false, &t, &p, &g);
    free(pb);
    if (rc < 0)
        return NULL;
    int oh = rl_geom_out_height(&g), ow = rl_geom_out_width(&g);
    PyObject *rows = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)oh * 4);
    PyObject *cols = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)ow * 4);
    const char *err = NULL;
    if (rows && cols &&
        rl_geom_maps(&g, &t, pil != 0, (int32_t *)PyBytes_AsString(rows),
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

/* Masks m[count][h][w] warped in place by the n warps, three at a time
 * (the channels of one image: nearest moves each alone). 0, or a status
 * with msg. Called without the GIL. */
static int warp_masks(uint8_t *m, Py_ssize_t count, int w, int h,
                      const rl_op_warp *warps, int n, double fill, char *msg)
{
    size_t plane = (size_t)w * (size_t)h;
    uint8_t *rgb = malloc(plane * 3);
    if (rgb == NULL) {
        snprintf(msg, RL_MSG_MAX, "out of memory");
        return -ENOMEM;
    }
    const double fills[3] = {fill, fill, fill};
    int rc = 0;
    for (Py_ssize_t k0 = 0; rc == 0 && k0 < count; k0 += 3) {
        int c3 = count - k0 < 3 ? (int)(count - k0) : 3;
        memset(rgb, 0, plane * 3);
        for (int c = 0; c < c3; c++) {
            const uint8_t *in = m + (size_t)(k0 + c) * plane;
            for (size_t i = 0; i < plane; i++)
                rgb[3 * i + (size_t)c] = in[i];
        }
        rl_image img = {rgb, w, h, (size_t)w * 3};
        for (int k = 0; rc == 0 && k < n; k++)
            rc = rl_augment_warp_nearest(&img, &warps[k], fills, msg);
        for (int c = 0; rc == 0 && c < c3; c++) {
            uint8_t *o = m + (size_t)(k0 + c) * plane;
            for (size_t i = 0; i < plane; i++)
                o[i] = rgb[3 * i + (size_t)c];
        }
    }
    free(rgb);
    return rc;
}

static PyObject *py_plan_warp_masks(PyObject *self, PyObject *args,
                                    PyObject *kw)
{
    (void)self;
    static char *kwlist[] = {"spec",  "seed",  "epoch", "index", "view",
                             "masks", "count", "fill",  "size",  NULL};
    PyObject *spec, *masks, *size = Py_None;
    int view, fill;
    unsigned long long seed;
    long long epoch, index;
    Py_ssize_t count;
    rl_transform t;
    rl_op_warp warps[RL_AUGMENT_MAX_WARPS];
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OKLLiOni|$O:plan_warp_masks",
                                     kwlist, &spec, &seed, &epoch, &index,
                                     &view, &masks, &count, &fill, &size) ||
        rl__py_parse_transform(spec, &t) != 0)
        return NULL;
    /* The masks' size: the spec's output, or a varying sample's own. */
    int oh = t.out_h, ow = t.out_w;
    if (size != Py_None && !PyTuple_Check(size)) {
        PyErr_SetString(PyExc_TypeError,
                        "plan_warp_masks: size is a tuple (h, w)");
        return NULL;
    }
    if (size != Py_None &&
        !PyArg_ParseTuple(size, "ii;size is (h, w)", &oh, &ow))
        return NULL;
    bool sized = oh > 0 && ow > 0 && oh <= RL_MAX_SIDE && ow <= RL_MAX_SIDE &&
                 (!t.varying || size != Py_None) &&
                 (t.varying || (oh == t.out_h && ow == t.out_w));
    if (fill < 0 || fill > 255 || count < 0 || !sized) {
        PyErr_Format(PyExc_ValueError,
                     "plan_warp_masks: a fill in 0..255, a count >= 0 and the "
                     "output size (the spec's; size=(h, w), a varying "
                     "sample's own) (fill %d, count %zd, size %dx%d, "
                     "varying %d)",
                     fill, count, oh, ow, t.varying);
        return NULL;
    }
    int n = chain_warps(spec, ow, oh, seed, epoch, index, view, warps);
    Py_buffer b;
    if (count > PY_SSIZE_T_MAX / ((Py_ssize_t)ow * oh)) {
        PyErr_Format(PyExc_OverflowError,
                     "plan_warp_masks: %zd masks of %dx%d are too many bytes",
                     count, oh, ow);
        return NULL;
    }
    Py_ssize_t need = count * (Py_ssize_t)ow * oh;
    if (n < 0 || rl__py_array(masks, "masks", RL_PY_U8, need, &b) != 0)
        return NULL;
    PyObject *out = PyBytes_FromStringAndSize(b.buf, need);
    PyBuffer_Release(&b);
    if (out == NULL || n == 0)
        return out;
    char msg[RL_MSG_MAX];
    uint8_t *m = (uint8_t *)PyBytes_AsString(out);
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    rc = warp_masks(m, count, ow, oh, warps, n, fill, msg);
    Py_END_ALLOW_THREADS;
    if (rc != 0) {
        Py_DECREF(out);
        return rc == -ENOMEM ? PyErr_NoMemory()
                             : PyErr_Format(PyExc_ValueError, "%s", msg);
    }
    return out;
}

PyMethodDef rl__py_plan_boxes_methods[] = {
    {"plan_boxes", (PyCFunction)(void (*)(void))py_plan_boxes,
     METH_VARARGS | METH_KEYWORDS,
     "plan_boxes(spec, width, height, seed, epoch, index, view, boxes, "
     "format, plan=None, *, whole=False, single=False) -> (bytes, (h, w)): "
     "float64 boxes "
     "mapped through the trim, resize, crop, padding and flips that view of "
     "that sample's pixels go through, as torchvision's v2 kernels map them "
     "(a RandomIoUCrop drawn from plan, the sample's XYXY boxes, default "
     "these: the boxes whose centre it leaves out zeroed; whole: boxes of "
     "an integer dtype, truncated after a resize; single: float32 boxes, "
     "rounded to float32 after every step)."},
    {"plan_keypoints", (PyCFunction)(void (*)(void))py_plan_keypoints,
     METH_VARARGS | METH_KEYWORDS,
     "plan_keypoints(spec, width, height, seed, epoch, index, view, "
     "points, plan=None, *, single=False) -> (bytes, (h, w)): the same for "
     "(x, y) keypoints."},
    {"plan_maps", (PyCFunction)(void (*)(void))py_plan_maps,
     METH_VARARGS | METH_KEYWORDS,
     "plan_maps(spec, width, height, seed, epoch, index, view=0, plan=None, "
     "*, pil=False) -> (row_map, col_map): int32 bytes, the input row and "
     "column of each output pixel of that view of that sample (-1: "
     "padding), through the same geometry (plan: the sample's XYXY boxes a "
     "RandomIoUCrop reads); a mask sampled through them is torchvision's "
     "ops on a tv_tensors.Mask (pil: on a PIL mask, resized by Pillow's "
     "NEAREST)."},
    {"plan_warp_masks", (PyCFunction)(void (*)(void))py_plan_warp_masks,
     METH_VARARGS | METH_KEYWORDS,
     "plan_warp_masks(spec, seed, epoch, index, view, masks, count, fill, *, "
     "size=None) -> bytes: count uint8 masks of the output size (a flat "
     "C-contiguous array; size: (h, w), the spec's, or a varying spec's "
     "sample's own, required there), sampled through plan_maps, warped by "
     "the affine and rotation "
     "ops of that view of that sample's augment chain as torchvision warps a "
     "tv_tensors.Mask (nearest, fill outside); the same bytes where the "
     "chain warps nothing."},
    {NULL, NULL, 0, NULL},
};
