/*
 * python/spec.c - the transform spec: one schema, shared by Python and C.
 *
 * DESIGN: the spec is a dict that ringloader.transforms builds from the
 * user's transforms. Its fields are listed once, in the table below, with
 * their defaults; the module exports the table as TRANSFORM_FIELDS so the
 * Python side builds dicts with exactly these keys (and a test checks it),
 * and the values are checked once, by the core's rl_transform_check, the
 * same check a C caller of the pipeline gets.
 */
#include "python/module.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "augment/augment.h"
#include "core/plan.h"
#include "place/place.h"
#include "simd.h"

typedef enum {
    FIELD_INT,
    FIELD_FLOAT,
    FIELD_PAIR,
    FIELD_SIZES,
    FIELD_FLOATS, /* RandomIoUCrop's sampler_options (its own layout) */
} field_type;

/* RandomIoUCrop's default sampler_options, torchvision's. */
static const double iou_options[] = {0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0};
#define N_IOU_DEFAULT (int)(sizeof(iou_options) / sizeof(iou_options[0]))

typedef struct field {
    const char *name;
    field_type type;
    size_t offset; /* of the (first) value in rl_transform */
    double dflt[2];
    const char *doc;
} field;

#define AT(member) offsetof(rl_transform, member)

static const field fields[] = {
    {"resize_short",
     FIELD_INT,
     AT(resize_short),
     {0, 0},
     "Resize: the shorter side, or 0"},
    {"resize_max",
     FIELD_INT,
     AT(resize_max),
     {0, 0},
     "Resize: max_size, the longer side's limit, or 0"},
    {"resize_short_hi",
     FIELD_INT,
     AT(resize_short_hi),
     {0, 0},
     "RandomResize: the shorter side drawn in [resize_short, this), or 0"},
    {"short_sizes",
     FIELD_SIZES,
     AT(n_short_sizes),
     {0, 0},
     "RandomShortestSize's min_size: a list of sizes, one drawn per sample"},
    {"jitter_w",
     FIELD_INT,
     AT(jitter_w),
     {0, 0},
     "ScaleJitter's target_size[0] (it divides the width), or 0"},
    {"jitter_h",
     FIELD_INT,
     AT(jitter_h),
     {0, 0},
     "ScaleJitter's target_size[1] (it divides the height)"},
    {"jitter_scale",
     FIELD_PAIR,
     AT(jitter_scale),
     {0.1, 2.0},
     "ScaleJitter's scale_range"},
    {"resize_h", FIELD_INT, AT(resize_h), {0, 0}, "Resize: (h, w), or 0"},
    {"resize_w", FIELD_INT, AT(resize_w), {0, 0}, "Resize: (h, w), or 0"},
    {"out_h", FIELD_INT, AT(out_h), {0, 0}, "output height"},
    {"out_w", FIELD_INT, AT(out_w), {0, 0}, "output width"},
    {"scale",
     FIELD_PAIR,
     AT(scale_lo),
     {0.08, 1.0},
     "RandomResizedCrop's area range"},
    {"ratio",
     FIELD_PAIR,
     AT(ratio_lo),
     {3.0 / 4.0, 4.0 / 3.0},
     "RandomResizedCrop's aspect range"},
    {"flip_p", FIELD_FLOAT, AT(flip_p), {0, 0}, "RandomHorizontalFlip's p"},
    {"vflip_p", FIELD_FLOAT, AT(vflip_p), {0, 0}, "RandomVerticalFlip's p"},
    {"pad_left", FIELD_INT, AT(pad[0]), {0, 0}, "RandomCrop's padding"},
    {"pad_top", FIELD_INT, AT(pad[1]), {0, 0}, "RandomCrop's padding"},
    {"pad_right", FIELD_INT, AT(pad[2]), {0, 0}, "RandomCrop's padding"},
    {"pad_bottom", FIELD_INT, AT(pad[3]), {0, 0}, "RandomCrop's padding"},
    {"pad_if_needed",
     FIELD_INT,
     AT(pad_if_needed),
     {0, 0},
     "RandomCrop's pad_if_needed: 0, 1 (both sides) or 2 (bottom and right "
     "only: PadIfSmaller before a RandomCrop of its size)"},
    {"pad_flips_first",
     FIELD_INT,
     AT(pad_flips_first),
     {0, 0},
     "pad_if_needed 2: the flips that run before the pad, 1 horizontal, 2 "
     "vertical (its padding stays at the output's bottom and right)"},
    {"pad_mode",
     FIELD_INT,
     AT(pad_mode),
     {0, 0},
     "RandomCrop's padding_mode: its index in PAD_MODES"},
    {"pad_twice",
     FIELD_INT,
     AT(pad_twice),
     {0, 0},
     "RandomCrop pads padding, then pad_if_needed's (v1's), not both at once "
     "(0 or 1)"},
    {"fill_r", FIELD_INT, AT(fill[0]), {0, 0}, "RandomCrop's fill, 0..255"},
    {"fill_g", FIELD_INT, AT(fill[1]), {0, 0}, "RandomCrop's fill, 0..255"},
    {"fill_b", FIELD_INT, AT(fill[2]), {0, 0}, "RandomCrop's fill, 0..255"},
    {"filter",
     FIELD_INT,
     AT(filter),
     {0, 0},
     "the resize's interpolation: its index in INTERPOLATIONS"},
    {"filter_random",
     FIELD_INT,
     AT(filter_random),
     {0, 0},
     "1: bilinear or bicubic drawn per sample, after the box (timm's "
     "interpolation='random')"},
    {"keep_ratio",
     FIELD_INT,
     AT(keep_ratio),
     {0, 0},
     "1: resize_h, resize_w are timm's ResizeKeepRatio target (0 or 1)"},
    {"keep_longest",
     FIELD_FLOAT,
     AT(keep_longest),
     {0, 0},
     "ResizeKeepRatio's longest, in [0, 1]"},
    {"keep_scale_p",
     FIELD_FLOAT,
     AT(keep_scale_p),
     {0, 0},
     "ResizeKeepRatio's random_scale_prob (keep_ratio 1)"},
    {"keep_scale",
     FIELD_PAIR,
     AT(keep_scale_lo),
     {1.0, 1.0},
     "ResizeKeepRatio's random_scale_range"},
    {"keep_scale_area",
     FIELD_INT,
     AT(keep_scale_area),
     {0, 0},
     "ResizeKeepRatio's random_scale_area (0 or 1)"},
    {"keep_aspect_p",
     FIELD_FLOAT,
     AT(keep_aspect_p),
     {0, 0},
     "ResizeKeepRatio's random_aspect_prob (keep_ratio 1)"},
    {"keep_aspect",
     FIELD_PAIR,
     AT(keep_aspect_lo),
     {1.0, 1.0},
     "ResizeKeepRatio's random_aspect_range"},
    {"window",
     FIELD_INT,
     AT(window),
     {0, 0},
     "where resize_random_crop's window lies: its index in WINDOWS "
     "(torchvision's RandomCrop, timm's CenterCropOrPad or RandomCropOrPad, "
     "the detection reference's FixedSizeCrop)"},
    {"trim",
     FIELD_INT,
     AT(trim),
     {0, 0},
     "timm's TrimBorder: pixels cut from each side of the image first"},
    {"passes",
     FIELD_INT,
     AT(passes),
     {0, 0},
     "the resize's pass order: 0 Pillow 13's, 1 horizontal first (Pillow "
     "12 and older)"},
    {"varying",
     FIELD_INT,
     AT(varying),
     {0, 0},
     "1: no crop, each sample its own size (its resize's, or its own; "
     "out_h, out_w 0)"},
    {"iou_crop",
     FIELD_INT,
     AT(iou_crop),
     {0, 0},
     "1: v2's RandomIoUCrop, drawn per sample from its boxes (varying 1)"},
    {"iou_scale",
     FIELD_PAIR,
     AT(iou_scale_lo),
     {0.3, 1.0},
     "RandomIoUCrop's min_scale, max_scale"},
    {"iou_aspect",
     FIELD_PAIR,
     AT(iou_aspect_lo),
     {0.5, 2.0},
     "RandomIoUCrop's min_aspect_ratio, max_aspect_ratio"},
    {"iou_options",
     FIELD_FLOATS,
     AT(n_iou_options),
     {0, 0},
     "RandomIoUCrop's sampler_options (torchvision's when unset)"},
    {"iou_trials",
     FIELD_INT,
     AT(iou_trials),
     {40, 0},
     "RandomIoUCrop's trials"},
    {"zoom_out",
     FIELD_INT,
     AT(zoom_out),
     {0, 0},
     "1: v2's RandomZoomOut, its canvas drawn per sample and filled with "
     "fill_r, fill_g, fill_b (varying 1; a RandomIoUCrop may follow)"},
    {"zoom_p", FIELD_FLOAT, AT(zoom_p), {0.5, 0}, "RandomZoomOut's p"},
    {"zoom_side",
     FIELD_PAIR,
     AT(zoom_side),
     {1.0, 4.0},
     "RandomZoomOut's side_range"},
};

#define NFIELDS (sizeof(fields) / sizeof(fields[0]))

/* A list of sizes: its count at n[0], the sizes after it (out of range:
 * -1, which rl_transform_check refuses). */
static int parse_sizes(PyObject *v, int *n)
{
    Py_ssize_t len = PySequence_Check(v) ? PySequence_Size(v) : -1;
    if (len < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError,
                            "short_sizes must be a list of ints");
        return -1;
    }
    if (len > RL_MAX_SHORT_SIZES) {
        PyErr_Format(PyExc_ValueError, "short_sizes: at most %d sizes",
                     RL_MAX_SHORT_SIZES);
        return -1;
    }
    n[0] = (int)len;
    for (Py_ssize_t i = 0; i < len; i++) {
        PyObject *item = PySequence_GetItem(v, i);
        long x = item ? PyLong_AsLong(item) : -1;
        Py_XDECREF(item);
        if (x == -1 && PyErr_Occurred()) {
            return -1;
        }
        n[1 + i] = x < 1 || x > 1 << 20 ? -1 : (int)x;
    }
    return 0;
}

/* RandomIoUCrop's sampler_options into t (unset: torchvision's). */
static int parse_options(PyObject *v, rl_transform *t)
{
    if (v == NULL || v == Py_None) {
        t->n_iou_options = N_IOU_DEFAULT;
        memcpy(t->iou_options, iou_options, sizeof(iou_options));
        return 0;
    }
    PyObject *seq = PySequence_Fast(v, "iou_options must be a list of floats");
    if (seq == NULL)
        return -1;
    Py_ssize_t len = PySequence_Size(seq);
    int rc = 0;
    if (len > RL_MAX_IOU_OPTIONS) {
        PyErr_Format(PyExc_ValueError, "iou_options: at most %d values",
                     RL_MAX_IOU_OPTIONS);
        rc = -1;
    }
    for (Py_ssize_t i = 0; rc == 0 && i < len; i++) {
        t->iou_options[i] = PyFloat_AsDouble(rl__py_fast_item(seq, i));
        rc = PyErr_Occurred() ? -1 : 0;
    }
    t->n_iou_options = (int)len;
    Py_DECREF(seq);
    return rc;
}

static int parse_field(PyObject *spec, const field *f, rl_transform *t)
{
    char *base = (char *)t + f->offset;
    PyObject *v = PyDict_GetItemString(spec, f->name); /* borrowed */
    bool unset = v == NULL || v == Py_None;
    if (f->type == FIELD_INT) {
        long x = unset ? (long)f->dflt[0] : PyLong_AsLong(v);
        if (x == -1 && PyErr_Occurred()) {
            return -1;
        }
        *(int *)base = x < -1 || x > 1 << 20 ? -1 : (int)x;
        return 0;
    }
    if (f->type == FIELD_SIZES) {
        return unset ? 0 : parse_sizes(v, (int *)base);
    }
    if (f->type == FIELD_FLOATS) {
        return parse_options(v, t);
    }
    double *d = (double *)base;
    if (f->type == FIELD_FLOAT) {
        d[0] = unset ? f->dflt[0] : PyFloat_AsDouble(v);
        return d[0] == -1.0 && PyErr_Occurred() ? -1 : 0;
    }
    if (unset) {
        d[0] = f->dflt[0];
        d[1] = f->dflt[1];
        return 0;
    }
    return PyArg_ParseTuple(v, "dd", &d[0], &d[1]) ? 0 : -1;
}

int rl__py_parse_transform(PyObject *spec, rl_transform *t)
{
    memset(t, 0, sizeof(*t));
    if (!PyDict_Check(spec)) {
        PyErr_SetString(PyExc_TypeError, "transform spec must be a dict");
        return -1;
    }
    PyObject *kind = PyDict_GetItemString(spec, "kind");
    const char *k = kind ? rl__py_utf8(kind) : NULL;
    if (k == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "transform spec needs a kind");
        }
        return -1;
    }
    if (strcmp(k, "resize_crop") == 0) {
        t->kind = RL_T_RESIZE_CROP;
    } else if (strcmp(k, "random_crop") == 0) {
        t->kind = RL_T_RANDOM_CROP;
    } else if (strcmp(k, "resize_random_crop") == 0) {
        t->kind = RL_T_RESIZE_RANDOM_CROP;
    } else {
        PyErr_Format(PyExc_ValueError, "unknown transform kind %s", k);
        return -1;
    }
    for (size_t i = 0; i < NFIELDS; i++) {
        if (parse_field(spec, &fields[i], t) != 0) {
            return -1;
        }
    }
    char msg[RL_MSG_MAX];
    if (rl_transform_check(t, msg) != 0) {
        PyErr_SetString(PyExc_ValueError, msg);
        return -1;
    }
    return 0;
}

int rl__py_parse_ops(PyObject *spec, rl_augment *a)
{
    memset(a, 0, sizeof(*a));
    PyObject *ops = PyDict_GetItemString(spec, "ops"); /* borrowed */
    if (ops == NULL || ops == Py_None) {
        return 0;
    }
    PyObject *seq = PySequence_Fast(ops, "ops must be a list of (name, args)");
    if (seq == NULL) {
        return -1;
    }
    int rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < PySequence_Size(seq); i++) {
        const char *name;
        PyObject *args;
        double v[RL_OP_MAX_ARGS];
        Py_ssize_t n = 0;
        rc = -1;
        if (!PyArg_ParseTuple(rl__py_fast_item(seq, i), "sO", &name, &args)) {
            break;
        }
        const rl_op_def *def = rl_op_find(name);
        if (def == NULL) {
            PyErr_Format(PyExc_ValueError, "unknown augmentation op %s", name);
            break;
        }
        PyObject *as = PySequence_Fast(args, "op arguments: a sequence");
        n = as ? PySequence_Size(as) : 0;
        for (Py_ssize_t k = 0; as != NULL && k < n && k < RL_OP_MAX_ARGS; k++) {
            v[k] = PyFloat_AsDouble(rl__py_fast_item(as, k));
        }
        Py_XDECREF(as);
        char msg[RL_MSG_MAX];
        if (as == NULL || PyErr_Occurred()) {
            break;
        }
        if (rl_augment_add(a, def, v, (int)n, msg) != 0) {
            PyErr_SetString(PyExc_ValueError, msg);
            break;
        }
        rc = 0;
    }
    Py_DECREF(seq);
    return rc;
}

int rl__py_parse_place(const char *dtype, PyObject *mul, PyObject *add,
                       const char *layout, rl_place_config *c)
{
    static const char *names[] = {"uint8", "float32", "float16", "bfloat16"};
    memset(c, 0, sizeof(*c));
    int found = -1;
    for (int i = 0; i < 4; i++) {
        if (strcmp(dtype, names[i]) == 0) {
            found = i;
        }
    }
    if (found < 0) {
        PyErr_Format(PyExc_ValueError,
                     "dtype must be uint8, float32, float16 or bfloat16, "
                     "not '%s'",
                     dtype);
        return -1;
    }
    c->dtype = (rl_dtype)found;
    for (int i = 0; i < 3; i++) {
        c->mul[i] = 1.0f;
        c->add[i] = 0.0f;
    }
    if (mul != Py_None &&
        !PyArg_ParseTuple(mul, "fff", &c->mul[0], &c->mul[1], &c->mul[2])) {
        return -1;
    }
    if (add != Py_None &&
        !PyArg_ParseTuple(add, "fff", &c->add[0], &c->add[1], &c->add[2])) {
        return -1;
    }
    if (strcmp(layout, "NCHW") == 0) {
        c->layout = RL_LAYOUT_NCHW;
    } else if (strcmp(layout, "NHWC") == 0) {
        c->layout = RL_LAYOUT_NHWC;
    } else {
        PyErr_SetString(PyExc_ValueError, "layout must be 'NCHW' or 'NHWC'");
        return -1;
    }
    return 0;
}

/* One view from its spec dict and output arguments. 0 or -1. */
static int parse_view(PyObject *spec, const char *dtype, PyObject *mul,
                      PyObject *add, const char *layout, int v, rl_view *view)
{
    memset(view, 0, sizeof(*view));
    if (rl__py_parse_transform(spec, &view->transform) != 0 ||
        rl__py_parse_ops(spec, &view->augment) != 0 ||
        rl__py_parse_place(dtype, mul, add, layout, &view->place) != 0) {
        return -1;
    }
    view->augment.view = v;
    view->place.out_w = view->transform.out_w;
    view->place.out_h = view->transform.out_h;
    return 0;
}

int rl__py_parse_views(PyObject *transform, const char *dtype, PyObject *mul,
                       PyObject *add, const char *layout, rl_view **views,
                       int *n)
{
    *views = NULL;
    *n = 0;
    if (PyDict_Check(transform)) {
        *views = malloc(sizeof(rl_view));
        if (*views == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        *n = 1;
        return parse_view(transform, dtype, mul, add, layout, 0, *views);
    }
    PyObject *seq =
        PySequence_Fast(transform, "transform: a spec dict, or a list of views "
                                   "(spec, dtype, mul, add, layout)");
    if (seq == NULL) {
        return -1;
    }
    Py_ssize_t count = PySequence_Size(seq);
    if (count < 1 || count > RL_MAX_VIEWS) {
        PyErr_Format(PyExc_ValueError, "a sample has 1..%d views, not %zd",
                     RL_MAX_VIEWS, count);
        Py_DECREF(seq);
        return -1;
    }
    *views = malloc(sizeof(rl_view) * (size_t)count);
    if (*views == NULL) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    *n = (int)count;
    int rc = 0;
    for (Py_ssize_t v = 0; rc == 0 && v < count; v++) {
        PyObject *spec, *vmul, *vadd;
        const char *vdtype, *vlayout;
        rc = PyArg_ParseTuple(rl__py_fast_item(seq, v), "OsOOs", &spec, &vdtype,
                              &vmul, &vadd, &vlayout)
                 ? parse_view(spec, vdtype, vmul, vadd, vlayout, (int)v,
                              &(*views)[v])
                 : -1;
    }
    Py_DECREF(seq);
    return rc;
}

/* Adds module.attr, the tuple of name(0) .. name(n - 1). Returns 0, or -1
 * with a Python error set. */
static int add_names(PyObject *module, const char *attr, int n,
                     const char *(*name)(int))
{
    PyObject *names = PyTuple_New(n);
    for (int i = 0; names != NULL && i < n; i++) {
        PyObject *s = PyUnicode_FromString(name(i));
        if (s == NULL) {
            Py_CLEAR(names);
            break;
        }
        PyTuple_SetItem(names, i, s); /* steals s */
    }
    if (names == NULL) {
        return -1;
    }
    int rc = PyModule_AddObjectRef(module, attr, names);
    Py_DECREF(names);
    return rc;
}

static const char *simd_name(int level)
{
    return rl_simd_name((rl_simd)level);
}

int rl__py_spec_init(PyObject *module)
{
    /* {"kind": ("resize_crop", ...), name: (default, doc)...} */
    PyObject *d =
        Py_BuildValue("{s(sss)s(Os)}", "kind", "resize_crop", "random_crop",
                      "resize_random_crop", "ops", Py_None,
                      "augmentation ops: [(name, args)], or None");
    for (size_t i = 0; d != NULL && i < NFIELDS; i++) {
        const field *f = &fields[i];
        PyObject *dflt =
            f->type == FIELD_INT     ? PyLong_FromLong((long)f->dflt[0])
            : f->type == FIELD_FLOAT ? PyFloat_FromDouble(f->dflt[0])
            : f->type == FIELD_SIZES ? PyTuple_New(0)
            : f->type == FIELD_FLOATS
                ? Py_BuildValue("(ddddddd)", iou_options[0], iou_options[1],
                                iou_options[2], iou_options[3], iou_options[4],
                                iou_options[5], iou_options[6])
                : Py_BuildValue("(dd)", f->dflt[0], f->dflt[1]);
        PyObject *item = dflt ? Py_BuildValue("(Ns)", dflt, f->doc) : NULL;
        if (item == NULL || PyDict_SetItemString(d, f->name, item) < 0) {
            Py_XDECREF(item);
            Py_CLEAR(d);
            break;
        }
        Py_DECREF(item);
    }
    if (d == NULL) {
        return -1;
    }
    int rc = PyModule_AddObjectRef(module, "TRANSFORM_FIELDS", d);
    Py_DECREF(d);
    if (rc != 0) {
        return rc;
    }
    /* The filters', padding modes' and windows' names, in rl_filter's,
     * rl_pad_mode's and rl_window's order: a spec's "filter", "pad_mode"
     * and "window" index them. */
    rc = add_names(module, "INTERPOLATIONS", RL_FILTER_COUNT, rl_filter_name);
    if (rc != 0) {
        return rc;
    }
    rc = add_names(module, "PAD_MODES", RL_PAD_MODE_COUNT, rl_pad_mode_name);
    if (rc != 0) {
        return rc;
    }
    rc = add_names(module, "WINDOWS", RL_WINDOW_COUNT, rl_window_name);
    if (rc != 0) {
        return rc;
    }
    /* The SIMD levels' names, lowest first: what RINGLOADER_SIMD and
     * resample_simd() accept (in any case). */
    return add_names(module, "SIMD_LEVELS", RL_SIMD_COUNT, simd_name);
}
