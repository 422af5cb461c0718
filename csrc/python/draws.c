/*
 * python/draws.c - the private binding of targets/draws.h: one function a
 * detection op, for the tests and the detection pipeline to come.
 *
 * Each takes the image's canvas (height, width), the stream's (seed,
 * epoch, index) and optionally view, then the op's options as keywords
 * named and defaulted as torchvision's constructor names and defaults
 * them, and returns a dict (make_params' keys where it has them). A call
 * draws from the start of the plan stream of its view (rng.h), as one op
 * of a sample's plan would; options out of range raise ValueError naming
 * the option.
 *   detect_draw_iou_crop(canvas, boxes, seed, epoch, index, view=0,
 *       min_scale=0.3, max_scale=1.0, min_aspect_ratio=0.5,
 *       max_aspect_ratio=2.0, sampler_options=None, trials=40)
 *     boxes: XYXY rows (a sequence of 4 numbers each)
 *     -> {crop: (top, left, height, width) or None, option, rounds,
 *         limited}
 *   detect_draw_zoom_out(canvas, seed, epoch, index, view=0,
 *       side_range=(1.0, 4.0), p=0.5)
 *     -> {applied, ratio, canvas: (h, w), padding: [l, t, r, b]}
 *        (ratio, canvas and padding None when not applied)
 *   detect_draw_scale_jitter(canvas, seed, epoch, index, view=0, *,
 *       target_size, scale_range=(0.1, 2.0)) -> {scale, size: (h, w)}
 *   detect_draw_shortest_size(canvas, seed, epoch, index, view=0, *,
 *       min_size, max_size=None) -> {min_size, size: (h, w)}
 *   detect_draw_fixed_size_crop(canvas, seed, epoch, index, view=0, *,
 *       size) -> {crop: (top, left, h, w) or None, padding: [0, 0, r, b]}
 *   detect_draw_photometric(canvas, seed, epoch, index, view=0,
 *       brightness=(0.875, 1.125), contrast=(0.5, 1.5),
 *       saturation=(0.5, 1.5), hue=(-0.05, 0.05), p=0.5, channels=3)
 *     -> {brightness_factor, contrast_factor, saturation_factor,
 *         hue_factor (each None when not applied), contrast_before,
 *         channel_permutation: tuple or None}
 */
#include "python/module.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "targets/draws.h"

typedef struct {
    int w, h;
    unsigned long long seed;
    long long epoch, index;
    int view;
} draw_where;

/* The stream of `where`; -1 with an exception for a bad canvas or view. */
static int start(const draw_where *at, rl_rng *g)
{
    if (at->w < 1 || at->h < 1) {
        PyErr_SetString(PyExc_ValueError, "canvas must be at least 1x1");
        return -1;
    }
    if (at->view < 0 || at->view >= RL_MAX_VIEWS) {
        PyErr_Format(PyExc_ValueError, "view must be 0 .. %d",
                     RL_MAX_VIEWS - 1);
        return -1;
    }
    rl_rng_init(g, at->seed, at->epoch, at->index,
                rl_rng_view(RL_RNG_PLAN, at->view));
    return 0;
}

/* o as an int; -1 with an exception when it is none or out of range. */
static int as_int(PyObject *o, const char *name, int *v)
{
    long x = PyLong_AsLong(o);
    if (x == -1 && PyErr_Occurred())
        return -1;
    if (x < INT_MIN || x > INT_MAX) {
        PyErr_Format(PyExc_ValueError, "%s: %ld is out of range", name, x);
        return -1;
    }
    *v = (int)x;
    return 0;
}

static int refused(const char *msg)
{
    if (!msg)
        return 0;
    PyErr_SetString(PyExc_ValueError, msg);
    return -1;
}

/* A (lo, hi) pair of numbers; o NULL keeps the defaults in v. */
static int parse_pair(PyObject *o, const char *name, double v[2])
{
    if (!o)
        return 0;
    PyObject *seq = PySequence_Fast(o, name);
    if (!seq)
        return -1;
    int rc = -1;
    if (PySequence_Size(seq) == 2) {
        v[0] = PyFloat_AsDouble(rl__py_fast_item(seq, 0));
        v[1] = PyFloat_AsDouble(rl__py_fast_item(seq, 1));
        rc = PyErr_Occurred() ? -1 : 0;
    }
    Py_DECREF(seq);
    if (rc < 0 && !PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "%s must be a pair of numbers", name);
    return rc;
}

/* The numbers of sequence o (doubles, or ints when ints is set), in a
 * malloc'd array of *n; NULL with an exception. */
static void *parse_numbers(PyObject *o, const char *name, int ints,
                           Py_ssize_t *n)
{
    PyObject *seq = PySequence_Fast(o, name);
    if (!seq)
        return NULL;
    *n = PySequence_Size(seq);
    size_t each = ints ? sizeof(int) : sizeof(double);
    void *v = malloc(((size_t)*n + 1) * each);
    if (!v) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < *n && !PyErr_Occurred(); i++) {
        PyObject *x = rl__py_fast_item(seq, i);
        if (ints)
            as_int(x, name, (int *)v + i);
        else
            ((double *)v)[i] = PyFloat_AsDouble(x);
    }
    Py_DECREF(seq);
    if (PyErr_Occurred()) {
        free(v);
        return NULL;
    }
    return v;
}

/* boxes: rows of 4 numbers, flattened into a malloc'd array. */
static double *parse_boxes(PyObject *o, size_t *n)
{
    PyObject *seq = PySequence_Fast(o, "boxes must be a sequence of rows");
    if (!seq)
        return NULL;
    Py_ssize_t rows = PySequence_Size(seq);
    double *v = malloc(((size_t)rows + 1) * 4 * sizeof(double));
    if (!v) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < rows && !PyErr_Occurred(); i++) {
        Py_ssize_t k;
        double *row = parse_numbers(rl__py_fast_item(seq, i),
                                    "a box is 4 numbers", 0, &k);
        if (row && k != 4)
            PyErr_SetString(PyExc_ValueError,
                            "boxes must be rows of 4 numbers (XYXY)");
        else if (row)
            memcpy(v + 4 * i, row, 4 * sizeof(double));
        free(row);
    }
    Py_DECREF(seq);
    if (PyErr_Occurred()) {
        free(v);
        return NULL;
    }
    *n = (size_t)rows;
    return v;
}

#define WHERE_KW "canvas", "seed", "epoch", "index", "view"
#define WHERE_FMT "(ii)KLL|i"
#define WHERE_ARGS &at.h, &at.w, &at.seed, &at.epoch, &at.index, &at.view

static PyObject *crop_or_none(int crop, int top, int left, int h, int w)
{
    if (!crop)
        Py_RETURN_NONE;
    return Py_BuildValue("(iiii)", top, left, h, w);
}

static PyObject *py_iou_crop(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kws[] = {"canvas",
                          "boxes",
                          "seed",
                          "epoch",
                          "index",
                          "view",
                          "min_scale",
                          "max_scale",
                          "min_aspect_ratio",
                          "max_aspect_ratio",
                          "sampler_options",
                          "trials",
                          NULL};
    static const double defaults[] = {0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0};
    draw_where at = {0};
    PyObject *boxes_o, *options_o = Py_None;
    rl_iou_crop_opts o = {0.3, 1.0, 0.5, 2.0, defaults, 7, 40};
    if (!PyArg_ParseTupleAndKeywords(
            args, kw, "(ii)OKLL|iddddOi:detect_draw_iou_crop", kws, &at.h,
            &at.w, &boxes_o, &at.seed, &at.epoch, &at.index, &at.view,
            &o.min_scale, &o.max_scale, &o.min_aspect_ratio,
            &o.max_aspect_ratio, &options_o, &o.trials)) {
        return NULL;
    }
    rl_rng g;
    if (start(&at, &g) < 0)
        return NULL;
    double *options = NULL;
    if (options_o != Py_None) {
        Py_ssize_t k;
        options =
            parse_numbers(options_o, "sampler_options must be a list", 0, &k);
        if (!options)
            return NULL;
        o.options = options;
        o.n_options = (int)k;
    }
    size_t n = 0;
    double *boxes = NULL;
    if (refused(rl_iou_crop_check(&o)) == 0)
        boxes = parse_boxes(boxes_o, &n);
    PyObject *res = NULL;
    if (boxes) {
        rl_iou_crop_draw d;
        rl_draw_iou_crop(&g, &o, at.w, at.h, boxes, n, &d);
        res = Py_BuildValue(
            "{s:N,s:d,s:i,s:O}", "crop",
            crop_or_none(d.crop, d.top, d.left, d.height, d.width), "option",
            d.option, "rounds", d.rounds, "limited",
            d.limited ? Py_True : Py_False);
    }
    free(boxes);
    free(options);
    return res;
}

static PyObject *py_zoom_out(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kws[] = {WHERE_KW, "side_range", "p", NULL};
    draw_where at = {0};
    PyObject *side_o = NULL;
    double side[2] = {1.0, 4.0};
    rl_zoom_out_opts o = {0, 0, 0.5};
    rl_rng g;
    if (!PyArg_ParseTupleAndKeywords(args, kw,
                                     WHERE_FMT "Od:detect_draw_zoom_out", kws,
                                     WHERE_ARGS, &side_o, &o.p) ||
        parse_pair(side_o, "side_range", side) < 0) {
        return NULL;
    }
    o.side_lo = side[0];
    o.side_hi = side[1];
    if (refused(rl_zoom_out_check(&o)) < 0 || start(&at, &g) < 0)
        return NULL;
    rl_zoom_out_draw d;
    rl_draw_zoom_out(&g, &o, at.w, at.h, &d);
    if (!d.applied) {
        return Py_BuildValue("{s:O,s:O,s:O,s:O}", "applied", Py_False, "ratio",
                             Py_None, "canvas", Py_None, "padding", Py_None);
    }
    return Py_BuildValue("{s:O,s:d,s:(ii),s:[iiii]}", "applied", Py_True,
                         "ratio", (double)d.ratio, "canvas", d.canvas_height,
                         d.canvas_width, "padding", d.left, d.top, d.right,
                         d.bottom);
}

static PyObject *py_scale_jitter(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kws[] = {WHERE_KW, "target_size", "scale_range", NULL};
    draw_where at = {0};
    PyObject *range_o = NULL;
    double range[2] = {0.1, 2.0};
    rl_scale_jitter_opts o = {{0, 0}, 0, 0};
    rl_rng g;
    if (!PyArg_ParseTupleAndKeywords(
            args, kw, WHERE_FMT "$(ii)O:detect_draw_scale_jitter", kws,
            WHERE_ARGS, &o.target_size[0], &o.target_size[1], &range_o) ||
        parse_pair(range_o, "scale_range", range) < 0) {
        return NULL;
    }
    o.scale_lo = range[0];
    o.scale_hi = range[1];
    if (refused(rl_scale_jitter_check(&o)) < 0 || start(&at, &g) < 0)
        return NULL;
    rl_scale_jitter_draw d;
    rl_draw_scale_jitter(&g, &o, at.w, at.h, &d);
    return Py_BuildValue("{s:d,s:(ii)}", "scale", (double)d.scale, "size",
                         d.height, d.width);
}

static PyObject *py_shortest_size(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kws[] = {WHERE_KW, "min_size", "max_size", NULL};
    draw_where at = {0};
    PyObject *sizes_o = NULL, *max_o = Py_None;
    rl_rng g;
    if (!PyArg_ParseTupleAndKeywords(args, kw,
                                     WHERE_FMT "$OO:detect_draw_shortest_size",
                                     kws, WHERE_ARGS, &sizes_o, &max_o) ||
        start(&at, &g) < 0) {
        return NULL;
    }
    rl_shortest_size_opts o = {0};
    if (max_o != Py_None) {
        if (as_int(max_o, "max_size", &o.max_size) < 0)
            return NULL;
        if (o.max_size == 0)
            o.max_size = -1; /* refused below: 0 means None here */
    }
    Py_ssize_t k = 1;
    int one;
    int *sizes = NULL;
    if (!sizes_o) {
        PyErr_SetString(PyExc_TypeError, "min_size is required");
        return NULL;
    }
    if (PyLong_Check(sizes_o)) {
        if (as_int(sizes_o, "min_size", &one) < 0)
            return NULL;
    } else {
        sizes =
            parse_numbers(sizes_o, "min_size must be an int or a list", 1, &k);
        if (!sizes)
            return NULL;
    }
    o.min_size = sizes ? sizes : &one;
    o.n_sizes = (int)k;
    PyObject *res = NULL;
    if (refused(rl_shortest_size_check(&o)) == 0) {
        rl_shortest_size_draw d;
        rl_draw_shortest_size(&g, &o, at.w, at.h, &d);
        res = Py_BuildValue("{s:i,s:(ii)}", "min_size", d.min_size, "size",
                            d.height, d.width);
    }
    free(sizes);
    return res;
}

static PyObject *py_fixed_crop(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kws[] = {WHERE_KW, "size", NULL};
    draw_where at = {0};
    int sh = 0, sw = 0;
    rl_rng g;
    if (!PyArg_ParseTupleAndKeywords(args, kw,
                                     WHERE_FMT "$(ii):detect_draw_fixed_size_"
                                               "crop",
                                     kws, WHERE_ARGS, &sh, &sw) ||
        refused(rl_fixed_crop_check(sh, sw)) < 0 || start(&at, &g) < 0) {
        return NULL;
    }
    rl_fixed_crop_draw d;
    rl_draw_fixed_crop(&g, sh, sw, at.w, at.h, &d);
    return Py_BuildValue("{s:N,s:[iiii]}", "crop",
                         crop_or_none(d.crop, d.top, d.left, d.height, d.width),
                         "padding", 0, 0, d.pad_right, d.pad_bottom);
}

static PyObject *factor_or_none(const rl_photometric_draw *d, int k)
{
    if (!d->apply[k])
        Py_RETURN_NONE;
    return PyFloat_FromDouble(d->factor[k]);
}

static PyObject *permutation(const rl_photometric_draw *d, int channels)
{
    if (!d->permute)
        Py_RETURN_NONE;
    PyObject *t = PyTuple_New(channels);
    for (int i = 0; t && i < channels; i++) {
        PyObject *x = PyLong_FromLong(d->perm[i]);
        if (!x) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SetItem(t, i, x);
    }
    return t;
}

static PyObject *py_photometric(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kws[] = {WHERE_KW, "brightness", "contrast", "saturation",
                          "hue",    "p",          "channels", NULL};
    static const char *names[4] = {"brightness", "contrast", "saturation",
                                   "hue"};
    draw_where at = {0};
    PyObject *range_o[4] = {NULL, NULL, NULL, NULL};
    rl_photometric_opts o = {
        {0.875, 0.5, 0.5, -0.05}, {1.125, 1.5, 1.5, 0.05}, 0.5, 3};
    rl_rng g;
    if (!PyArg_ParseTupleAndKeywords(
            args, kw, WHERE_FMT "OOOOdi:detect_draw_photometric", kws,
            WHERE_ARGS, &range_o[0], &range_o[1], &range_o[2], &range_o[3],
            &o.p, &o.channels)) {
        return NULL;
    }
    for (int k = 0; k < 4; k++) {
        double v[2] = {o.lo[k], o.hi[k]};
        if (parse_pair(range_o[k], names[k], v) < 0)
            return NULL;
        o.lo[k] = v[0];
        o.hi[k] = v[1];
    }
    if (refused(rl_photometric_check(&o)) < 0 || start(&at, &g) < 0)
        return NULL;
    rl_photometric_draw d;
    rl_draw_photometric(&g, &o, &d);
    return Py_BuildValue(
        "{s:N,s:N,s:N,s:N,s:O,s:N}", "brightness_factor",
        factor_or_none(&d, RL_DISTORT_BRIGHTNESS), "contrast_factor",
        factor_or_none(&d, RL_DISTORT_CONTRAST), "saturation_factor",
        factor_or_none(&d, RL_DISTORT_SATURATION), "hue_factor",
        factor_or_none(&d, RL_DISTORT_HUE), "contrast_before",
        d.contrast_before ? Py_True : Py_False, "channel_permutation",
        permutation(&d, o.channels));
}

PyMethodDef rl__py_draws_methods[] = {
    {"detect_draw_iou_crop", (PyCFunction)(void (*)(void))py_iou_crop,
     METH_VARARGS | METH_KEYWORDS,
     "RandomIoUCrop's draw (targets/draws.h); a dict."},
    {"detect_draw_zoom_out", (PyCFunction)(void (*)(void))py_zoom_out,
     METH_VARARGS | METH_KEYWORDS,
     "RandomZoomOut's draw (targets/draws.h); a dict."},
    {"detect_draw_scale_jitter", (PyCFunction)(void (*)(void))py_scale_jitter,
     METH_VARARGS | METH_KEYWORDS,
     "ScaleJitter's draw (targets/draws.h); a dict."},
    {"detect_draw_shortest_size", (PyCFunction)(void (*)(void))py_shortest_size,
     METH_VARARGS | METH_KEYWORDS,
     "RandomShortestSize's draw (targets/draws.h); a dict."},
    {"detect_draw_fixed_size_crop", (PyCFunction)(void (*)(void))py_fixed_crop,
     METH_VARARGS | METH_KEYWORDS,
     "FixedSizeCrop's draw (targets/draws.h); a dict."},
    {"detect_draw_photometric", (PyCFunction)(void (*)(void))py_photometric,
     METH_VARARGS | METH_KEYWORDS,
     "RandomPhotometricDistort's draw (targets/draws.h); a dict."},
    {NULL, NULL, 0, NULL},
};
