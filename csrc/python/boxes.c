/*
 * python/boxes.c - the private binding of targets/boxes.h: boxes and
 * keypoints mapped through a list of geometry steps, converted, clamped
 * and sanitized, for the tests and the coming detection pipeline.
 *
 * Steps are tuples, torchvision's arguments in its order:
 *   ("hflip",) ("vflip",) ("resize", h, w) ("crop", top, left, h, w)
 *   ("center_crop", h, w) ("resized_crop", top, left, h, w, out_h, out_w)
 *   ("pad", left, top, right, bottom)
 *   ("affine", angle, tx, ty, scale, shear_x, shear_y, center)
 *   ("rotate", angle, center)        center: (x, y) or None
 *   ("perspective", (c0, ..., c7))
 * Boxes and keypoints are float64 buffers (numpy arrays), C-contiguous.
 */
#include "python/module.h"

#include <stdlib.h>
#include <string.h>

#include "targets/boxes.h"

static const char *const FORMATS[] = {"XYXY", "XYWH", "CXCYWH"};

int rl__py_box_format(PyObject *o, rl_box_format *fmt)
{
    const char *s = PyUnicode_Check(o) ? rl__py_utf8(o) : NULL;
    if (!s && PyErr_Occurred())
        return -1;
    for (int i = 0; s && i < 3; i++) {
        if (strcmp(s, FORMATS[i]) == 0) {
            *fmt = (rl_box_format)i;
            return 0;
        }
    }
    PyErr_SetString(PyExc_ValueError,
                    "box format must be 'XYXY', 'XYWH' or 'CXCYWH'");
    return -1;
}

double *rl__py_float64_rows(PyObject *o, size_t per, const char *what,
                            size_t *n)
{
    Py_buffer view;
    if (PyObject_GetBuffer(o, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        return NULL;
    }
    const char *f = view.format ? view.format : "B";
    int is_d = strcmp(f, "d") == 0 || strcmp(f, "<d") == 0 ||
               strcmp(f, "=d") == 0 || strcmp(f, "@d") == 0;
    size_t count = (size_t)view.len / sizeof(double);
    if (!is_d || count % per) {
        PyErr_Format(PyExc_ValueError,
                     "%s must be a C-contiguous float64 array of shape "
                     "(N, %d) (got format '%s', %zd bytes)",
                     what, (int)per, f, view.len);
        PyBuffer_Release(&view);
        return NULL;
    }
    double *out = malloc(count ? (size_t)view.len : sizeof(double));
    if (!out) {
        PyBuffer_Release(&view);
        PyErr_NoMemory();
        return NULL;
    }
    memcpy(out, view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    *n = count / per;
    return out;
}

static int parse_canvas(PyObject *o, int *w, int *h)
{
    if (!PyArg_ParseTuple(o, "ii;canvas is (height, width)", h, w))
        return -1;
    if (*w < 1 || *h < 1) {
        PyErr_SetString(PyExc_ValueError, "canvas must be at least 1x1");
        return -1;
    }
    return 0;
}

/* center: None or (x, y); *pc NULL for None */
static int parse_center(PyObject *o, double c[2], const double **pc)
{
    *pc = NULL;
    if (o == Py_None)
        return 0;
    if (!PyArg_ParseTuple(o, "dd;center is (x, y) or None", &c[0], &c[1])) {
        return -1;
    }
    *pc = c;
    return 0;
}

static int add_step(rl_target_geom *g, PyObject *t)
{
    if (!PyTuple_Check(t) || PyTuple_Size(t) < 1 ||
        !PyUnicode_Check(PyTuple_GetItem(t, 0))) {
        PyErr_SetString(PyExc_TypeError,
                        "a geometry step is a tuple (name, *arguments)");
        return -1;
    }
    const char *name = rl__py_utf8(PyTuple_GetItem(t, 0));
    if (!name)
        return -1;
    PyObject *args = PyTuple_GetSlice(t, 1, PyTuple_Size(t));
    if (!args)
        return -1;
    const char *err = NULL;
    int a[6], rc = -2;
    double d[6], c[2], p[8];
    const double *pc;
    PyObject *co;
    if (strcmp(name, "hflip") == 0 && PyArg_ParseTuple(args, ":hflip")) {
        rc = rl_geom_hflip(g, &err);
    } else if (strcmp(name, "vflip") == 0 && PyArg_ParseTuple(args, ":vflip")) {
        rc = rl_geom_vflip(g, &err);
    } else if (strcmp(name, "resize") == 0 &&
               PyArg_ParseTuple(args, "ii:resize", &a[0], &a[1])) {
        rc = rl_geom_resize(g, a[0], a[1], &err);
    } else if (strcmp(name, "crop") == 0 &&
               PyArg_ParseTuple(args, "iiii:crop", &a[0], &a[1], &a[2],
                                &a[3])) {
        rc = rl_geom_crop(g, a[0], a[1], a[2], a[3], &err);
    } else if (strcmp(name, "center_crop") == 0 &&
               PyArg_ParseTuple(args, "ii:center_crop", &a[0], &a[1])) {
        rc = rl_geom_center_crop(g, a[0], a[1], &err);
    } else if (strcmp(name, "resized_crop") == 0 &&
               PyArg_ParseTuple(args, "iiiiii:resized_crop", &a[0], &a[1],
                                &a[2], &a[3], &a[4], &a[5])) {
        rc = rl_geom_crop(g, a[0], a[1], a[2], a[3], &err);
        if (rc == 0)
            rc = rl_geom_resize(g, a[4], a[5], &err);
    } else if (strcmp(name, "pad") == 0 &&
               PyArg_ParseTuple(args, "iiii:pad", &a[0], &a[1], &a[2], &a[3])) {
        rc = rl_geom_pad(g, a[0], a[1], a[2], a[3], &err);
    } else if (strcmp(name, "affine") == 0 &&
               PyArg_ParseTuple(args, "ddddddO:affine", &d[0], &d[1], &d[2],
                                &d[3], &d[4], &d[5], &co)) {
        if (parse_center(co, c, &pc) == 0) {
            rc =
                rl_geom_affine(g, d[0], d[1], d[2], d[3], d[4], d[5], pc, &err);
        }
    } else if (strcmp(name, "rotate") == 0 &&
               PyArg_ParseTuple(args, "dO:rotate", &d[0], &co)) {
        if (parse_center(co, c, &pc) == 0) {
            rc = rl_geom_rotate(g, d[0], pc, &err);
        }
    } else if (strcmp(name, "perspective") == 0 &&
               PyArg_ParseTuple(args, "(dddddddd):perspective", &p[0], &p[1],
                                &p[2], &p[3], &p[4], &p[5], &p[6], &p[7])) {
        rc = rl_geom_perspective(g, p, &err);
    }
    Py_DECREF(args);
    if (rc == -2 && !PyErr_Occurred()) {
        PyErr_Format(PyExc_ValueError,
                     "unknown geometry step '%s' (hflip, vflip, resize, "
                     "crop, center_crop, resized_crop, pad, affine, rotate, "
                     "perspective)",
                     name);
    }
    if (rc == -1)
        PyErr_Format(PyExc_ValueError, "%s step: %s", name, err);
    return rc == 0 ? 0 : -1;
}

static int parse_geom(rl_target_geom *g, PyObject *canvas, PyObject *steps)
{
    int w, h;
    if (parse_canvas(canvas, &w, &h) < 0)
        return -1;
    rl_geom_init(g, w, h);
    PyObject *seq = PySequence_Fast(steps, "steps must be a list of tuples");
    if (!seq)
        return -1;
    int rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < PySequence_Size(seq); i++) {
        rc = add_step(g, rl__py_fast_item(seq, i));
    }
    Py_DECREF(seq);
    return rc;
}

/* bytes of the count doubles at v; frees v */
static PyObject *take_bytes(double *v, size_t count)
{
    PyObject *b = PyBytes_FromStringAndSize((const char *)v,
                                            (Py_ssize_t)(count * sizeof(*v)));
    free(v);
    return b;
}

PyObject *rl__py_mapped(double *v, size_t n, size_t per, int w, int h)
{
    PyObject *b = take_bytes(v, n * per);
    if (!b)
        return NULL;
    return Py_BuildValue("N(ii)", b, h, w);
}

static PyObject *py_boxes_map(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *boxes, *fmt_o, *canvas, *steps;
    rl_box_format fmt;
    rl_target_geom g;
    size_t n;
    if (!PyArg_ParseTuple(args, "OOOO", &boxes, &fmt_o, &canvas, &steps) ||
        rl__py_box_format(fmt_o, &fmt) < 0 ||
        parse_geom(&g, canvas, steps) < 0) {
        return NULL;
    }
    double *v = rl__py_float64_rows(boxes, 4, "boxes", &n);
    if (!v)
        return NULL;
    rl_boxes_map(&g, v, n, fmt);
    return rl__py_mapped(v, n, 4, rl_geom_out_width(&g),
                         rl_geom_out_height(&g));
}

static PyObject *py_keypoints_map(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *points, *canvas, *steps;
    rl_target_geom g;
    size_t n;
    if (!PyArg_ParseTuple(args, "OOO", &points, &canvas, &steps) ||
        parse_geom(&g, canvas, steps) < 0) {
        return NULL;
    }
    double *v = rl__py_float64_rows(points, 2, "keypoints", &n);
    if (!v)
        return NULL;
    rl_keypoints_map(&g, v, n);
    return rl__py_mapped(v, n, 2, rl_geom_out_width(&g),
                         rl_geom_out_height(&g));
}

static PyObject *py_boxes_convert(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *boxes, *from_o, *to_o;
    rl_box_format from, to;
    size_t n;
    if (!PyArg_ParseTuple(args, "OOO", &boxes, &from_o, &to_o) ||
        rl__py_box_format(from_o, &from) < 0 ||
        rl__py_box_format(to_o, &to) < 0) {
        return NULL;
    }
    double *v = rl__py_float64_rows(boxes, 4, "boxes", &n);
    if (!v)
        return NULL;
    rl_boxes_convert(v, n, from, to);
    return take_bytes(v, n * 4);
}

static PyObject *py_boxes_clamp(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *boxes, *fmt_o, *canvas;
    rl_box_format fmt;
    int w, h;
    size_t n;
    if (!PyArg_ParseTuple(args, "OOO", &boxes, &fmt_o, &canvas) ||
        rl__py_box_format(fmt_o, &fmt) < 0 ||
        parse_canvas(canvas, &w, &h) < 0) {
        return NULL;
    }
    double *v = rl__py_float64_rows(boxes, 4, "boxes", &n);
    if (!v)
        return NULL;
    rl_boxes_clamp(v, n, fmt, w, h);
    return take_bytes(v, n * 4);
}

static PyObject *py_keypoints_clamp(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *points, *canvas;
    int w, h;
    size_t n;
    if (!PyArg_ParseTuple(args, "OO", &points, &canvas) ||
        parse_canvas(canvas, &w, &h) < 0) {
        return NULL;
    }
    double *v = rl__py_float64_rows(points, 2, "keypoints", &n);
    if (!v)
        return NULL;
    rl_keypoints_clamp(v, n, w, h);
    return take_bytes(v, n * 2);
}

static PyObject *py_boxes_sanitize(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *boxes, *fmt_o, *canvas;
    rl_box_format fmt;
    double min_size = 1.0, min_area = 1.0;
    int w, h;
    size_t n;
    if (!PyArg_ParseTuple(args, "OOO|dd", &boxes, &fmt_o, &canvas, &min_size,
                          &min_area) ||
        rl__py_box_format(fmt_o, &fmt) < 0 ||
        parse_canvas(canvas, &w, &h) < 0) {
        return NULL;
    }
    double *v = rl__py_float64_rows(boxes, 4, "boxes", &n);
    if (!v)
        return NULL;
    PyObject *keep = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n);
    if (keep) {
        rl_boxes_sanitize(v, n, fmt, w, h, min_size, min_area,
                          (uint8_t *)PyBytes_AsString(keep));
    }
    free(v);
    return keep;
}

/* iou_crop(boxes, format, canvas, top, left, height, width) ->
 * (bytes, (h, w), bytes): RandomIoUCrop's crop: the boxes cropped, those
 * whose centre was outside the crop zeroed, and the one-byte mark. */
static PyObject *py_boxes_iou_crop(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *boxes, *fmt_o, *canvas;
    rl_box_format fmt;
    rl_target_geom g;
    int top, left, h, w, cw, ch;
    size_t n;
    const char *err = NULL;
    if (!PyArg_ParseTuple(args, "OOOiiii", &boxes, &fmt_o, &canvas, &top, &left,
                          &h, &w) ||
        rl__py_box_format(fmt_o, &fmt) < 0 ||
        parse_canvas(canvas, &cw, &ch) < 0) {
        return NULL;
    }
    rl_geom_init(&g, cw, ch);
    if (rl_geom_crop(&g, top, left, h, w, &err) < 0) {
        PyErr_Format(PyExc_ValueError, "crop: %s", err);
        return NULL;
    }
    double *v = rl__py_float64_rows(boxes, 4, "boxes", &n);
    if (!v)
        return NULL;
    PyObject *mark = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n);
    if (!mark) {
        free(v);
        return NULL;
    }
    uint8_t *in = (uint8_t *)PyBytes_AsString(mark);
    rl_boxes_centers_within(v, n, fmt, top, left, h, w, in);
    rl_boxes_map(&g, v, n, fmt);
    rl_boxes_zero_outside(v, n, in);
    PyObject *out = rl__py_mapped(v, n, 4, w, h);
    if (!out) {
        Py_DECREF(mark);
        return NULL;
    }
    return Py_BuildValue("NN", out, mark);
}

PyMethodDef rl__py_boxes_methods[] = {
    {"boxes_iou_crop", py_boxes_iou_crop, METH_VARARGS,
     "boxes_iou_crop(boxes, format, canvas, top, left, height, width) -> "
     "((bytes, (h, w)), mark): RandomIoUCrop's crop of the boxes."},
    {"boxes_map", py_boxes_map, METH_VARARGS,
     "boxes_map(boxes, format, canvas, steps) -> (bytes, (h, w)): float64 "
     "boxes mapped through the geometry steps as torchvision's v2 kernels "
     "map them."},
    {"keypoints_map", py_keypoints_map, METH_VARARGS,
     "keypoints_map(points, canvas, steps) -> (bytes, (h, w))."},
    {"boxes_convert", py_boxes_convert, METH_VARARGS,
     "boxes_convert(boxes, old_format, new_format) -> bytes."},
    {"boxes_clamp", py_boxes_clamp, METH_VARARGS,
     "boxes_clamp(boxes, format, canvas) -> bytes."},
    {"keypoints_clamp", py_keypoints_clamp, METH_VARARGS,
     "keypoints_clamp(points, canvas) -> bytes."},
    {"boxes_sanitize", py_boxes_sanitize, METH_VARARGS,
     "boxes_sanitize(boxes, format, canvas, min_size=1, min_area=1) -> "
     "bytes: SanitizeBoundingBoxes' keep mask, one byte a box."},
    {NULL, NULL, 0, NULL},
};
