/*
 * python/masks.c - a COCO segmentation's mask, sampled through per-axis
 * index maps (targets/mask.h): mask_from_polygons and mask_from_rle, and a
 * segmentation PNG's indices the same way: mask_from_png and
 * png_mask_size. Private helpers for tests and the pipeline to come.
 *
 * DESIGN: the arguments are copied into malloc'd memory with the GIL held
 * (polygons as doubles, counts as int64, the string's bytes); the raster
 * and the sampling run with it released, into a bytes object no one else
 * has seen yet.
 */
#include "python/module.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "targets/mask.h"

/* The maps and the output, shared by both functions. */
typedef struct sample_args {
    Py_buffer rows, cols;
    int have_rows, have_cols;
    int fill;
} sample_args;

static int sample_parse(PyObject *row_map, PyObject *col_map, int fill,
                        sample_args *a)
{
    memset(a, 0, sizeof(*a));
    if (fill < 0 || fill > 255) {
        PyErr_Format(PyExc_ValueError, "fill must be 0..255, not %d", fill);
        return -1;
    }
    a->fill = fill;
    if (rl__py_array(row_map, "row_map", RL_PY_I32, -1, &a->rows) != 0) {
        return -1;
    }
    a->have_rows = 1;
    if (rl__py_array(col_map, "col_map", RL_PY_I32, -1, &a->cols) != 0) {
        return -1;
    }
    a->have_cols = 1;
    Py_ssize_t oh = a->rows.shape[0], ow = a->cols.shape[0];
    if (oh > RL_MASK_MAX_SIDE || ow > RL_MASK_MAX_SIDE) {
        PyErr_Format(PyExc_ValueError,
                     "row_map and col_map have %zd and %zd entries: at most "
                     "%d each",
                     oh, ow, RL_MASK_MAX_SIDE);
        return -1;
    }
    return 0;
}

static void sample_release(sample_args *a)
{
    if (a->have_rows) {
        PyBuffer_Release(&a->rows);
    }
    if (a->have_cols) {
        PyBuffer_Release(&a->cols);
    }
}

/* What a segmentation is read from, copied out of Python objects. */
typedef struct segmentation {
    double *xy;      /* polygons: all their coordinates */
    size_t *points;  /* each polygon's vertex count */
    size_t polygons; /* how many */
    int64_t *counts; /* an uncompressed RLE */
    size_t ncounts;
    char *text; /* a compressed RLE */
    size_t len;
} segmentation;

static void segmentation_free(segmentation *g)
{
    free(g->xy);
    free(g->points);
    free(g->counts);
    free(g->text);
}

/* The mask of g on an h x w image, sampled. Runs without the GIL. */
static int raster(const segmentation *g, int h, int w, const sample_args *a,
                  uint8_t *out, char *msg)
{
    rl_mask m;
    int rc = rl_mask_init(&m, h, w, msg);
    const double *xy = g->xy;
    for (size_t i = 0; rc == 0 && i < g->polygons; i++) {
        char why[RL_MSG_MAX];
        rc = rl_mask_add_polygon(&m, xy, g->points[i], why);
        if (rc != 0) {
            snprintf(msg, RL_MSG_MAX, "polygon %zu: %.220s", i, why);
        }
        xy += 2 * g->points[i];
    }
    if (rc == 0 && g->counts != NULL) {
        rc = rl_mask_add_counts(&m, g->counts, g->ncounts, msg);
    }
    if (rc == 0 && g->text != NULL) {
        rc = rl_mask_add_string(&m, g->text, g->len, msg);
    }
    if (rc == 0) {
        rc = rl_mask_sample(&m, a->rows.buf, (int)a->rows.shape[0], a->cols.buf,
                            (int)a->cols.shape[0], (uint8_t)a->fill, out, msg);
    }
    rl_mask_exit(&m);
    return rc;
}

/* Runs raster() without the GIL into a new bytes object (new reference),
 * or NULL with an exception. */
static PyObject *sampled(const segmentation *g, int h, int w,
                         const sample_args *a)
{
    Py_ssize_t n = a->rows.shape[0] * a->cols.shape[0];
    PyObject *bytes = PyBytes_FromStringAndSize(NULL, n);
    if (bytes == NULL) {
        return NULL;
    }
    uint8_t *out = (uint8_t *)PyBytes_AsString(bytes);
    char msg[RL_MSG_MAX] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = raster(g, h, w, a, out, msg);
    Py_END_ALLOW_THREADS
    if (rc == 0) {
        return bytes;
    }
    Py_DECREF(bytes);
    PyErr_SetString(rc == -EINVAL ? PyExc_ValueError : PyExc_MemoryError, msg);
    return NULL;
}

/* Copies one polygon's coordinates to xy + at: 0, or -1 with an
 * exception. */
static int copy_polygon(PyObject *poly, Py_ssize_t i, segmentation *g,
                        size_t *at)
{
    PyObject *seq = PySequence_Fast(poly, "");
    if (seq == NULL) {
        PyErr_Format(PyExc_TypeError,
                     "polygon %zd must be a sequence of numbers, not %S", i,
                     (PyObject *)Py_TYPE(poly));
        return -1;
    }
    Py_ssize_t n = PySequence_Size(seq);
    int rc = 0;
    if (n % 2 != 0) {
        PyErr_Format(PyExc_ValueError,
                     "polygon %zd has %zd numbers: it must be x, y pairs", i,
                     n);
        rc = -1;
    }
    double *xy =
        rc == 0 ? realloc(g->xy, sizeof(double) * (*at + (size_t)n + 1)) : NULL;
    if (rc == 0 && xy == NULL) {
        PyErr_NoMemory();
        rc = -1;
    }
    if (xy != NULL) {
        g->xy = xy;
    }
    for (Py_ssize_t k = 0; rc == 0 && k < n; k++) {
        double v = PyFloat_AsDouble(rl__py_fast_item(seq, k));
        if (v == -1.0 && PyErr_Occurred()) {
            PyErr_Format(PyExc_TypeError,
                         "polygon %zd, number %zd is not a number", i, k);
            rc = -1;
        }
        g->xy[*at + (size_t)k] = v;
    }
    Py_DECREF(seq);
    if (rc == 0) {
        g->points[i] = (size_t)n / 2;
        *at += (size_t)n;
    }
    return rc;
}

static int copy_polygons(PyObject *polygons, segmentation *g)
{
    PyObject *seq = PySequence_Fast(
        polygons, "polygons must be a list of polygons [x0, y0, x1, y1, ...]");
    if (seq == NULL) {
        return -1;
    }
    Py_ssize_t n = PySequence_Size(seq);
    int rc = 0;
    if (n == 0) {
        PyErr_SetString(PyExc_ValueError,
                        "polygons is empty: a segmentation needs at least "
                        "one polygon");
        rc = -1;
    }
    g->points = rc == 0 ? malloc(sizeof(size_t) * (size_t)n) : NULL;
    if (rc == 0 && g->points == NULL) {
        PyErr_NoMemory();
        rc = -1;
    }
    size_t at = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++) {
        rc = copy_polygon(rl__py_fast_item(seq, i), i, g, &at);
    }
    g->polygons = rc == 0 ? (size_t)n : 0;
    Py_DECREF(seq);
    return rc;
}

/* mask_from_polygons(polygons, height, width, row_map, col_map, fill=0)
 *   -> bytes */
static PyObject *py_mask_from_polygons(PyObject *module, PyObject *args,
                                       PyObject *kw)
{
    (void)module;
    static char *kwlist[] = {"polygons", "height", "width", "row_map",
                             "col_map",  "fill",   NULL};
    PyObject *polygons, *row_map, *col_map;
    int h, w, fill = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OiiOO|i", kwlist, &polygons, &h,
                                     &w, &row_map, &col_map, &fill)) {
        return NULL;
    }
    sample_args a;
    segmentation g = {0};
    PyObject *out = NULL;
    if (sample_parse(row_map, col_map, fill, &a) == 0 &&
        copy_polygons(polygons, &g) == 0) {
        out = sampled(&g, h, w, &a);
    }
    segmentation_free(&g);
    sample_release(&a);
    return out;
}

/* counts as int64s into g: 0, or -1 with an exception. */
static int copy_counts(PyObject *counts, segmentation *g)
{
    PyObject *seq = PySequence_Fast(
        counts, "RLE counts must be a str, bytes or a list of ints");
    if (seq == NULL) {
        return -1;
    }
    Py_ssize_t n = PySequence_Size(seq);
    g->counts = malloc(sizeof(int64_t) * ((size_t)n + 1));
    int rc = g->counts != NULL ? 0 : -1;
    if (rc != 0) {
        PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++) {
        PyObject *item = rl__py_fast_item(seq, i);
        long long v = PyLong_AsLongLong(item);
        if (v == -1 && PyErr_Occurred()) {
            int big = PyErr_ExceptionMatches(PyExc_OverflowError);
            PyErr_Clear();
            if (big) {
                PyErr_Format(PyExc_ValueError,
                             "RLE count %zd is %R, beyond any image", i, item);
            } else {
                PyErr_Format(PyExc_TypeError,
                             "RLE count %zd must be an int, not %S", i,
                             (PyObject *)Py_TYPE(item));
            }
            rc = -1;
        }
        g->counts[i] = v;
    }
    g->ncounts = (size_t)n;
    Py_DECREF(seq);
    return rc;
}

/* The compressed string's bytes into g: 0, or -1 with an exception. */
static int copy_text(PyObject *counts, segmentation *g)
{
    PyObject *b = PyUnicode_Check(counts)
                      ? PyUnicode_AsEncodedString(counts, "ascii", "strict")
                      : Py_NewRef(counts);
    if (b == NULL) {
        PyErr_Clear();
        PyErr_SetString(PyExc_ValueError,
                        "compressed RLE counts must be ASCII ('0'..'o')");
        return -1;
    }
    char *s;
    Py_ssize_t len;
    int rc = PyBytes_AsStringAndSize(b, &s, &len) == 0 ? 0 : -1;
    if (rc == 0) {
        g->text = malloc((size_t)len + 1);
        if (g->text == NULL) {
            PyErr_NoMemory();
            rc = -1;
        } else {
            memcpy(g->text, s, (size_t)len);
            g->len = (size_t)len;
        }
    }
    Py_DECREF(b);
    return rc;
}

/* The RLE dict's size against the image's: 0, or -1 with an exception. */
static int check_size(PyObject *rle, int h, int w)
{
    PyObject *size = PyDict_GetItemString(rle, "size"); /* borrowed */
    if (size == NULL) {
        PyErr_SetString(PyExc_ValueError, "rle has no 'size' [height, width]");
        return -1;
    }
    int rh = -1, rw = -1;
    int ok = PyArg_ParseTuple(size, "ii", &rh, &rw);
    if (!ok) {
        PyErr_Clear();
        PyObject *t = PySequence_Tuple(size);
        ok = t != NULL && PyArg_ParseTuple(t, "ii", &rh, &rw);
        Py_XDECREF(t);
    }
    if (!ok) {
        PyErr_Clear();
        PyErr_SetString(PyExc_ValueError,
                        "RLE size must be [height, width], two ints");
        return -1;
    }
    if (rh != h || rw != w) {
        PyErr_Format(PyExc_ValueError,
                     "RLE size [%d, %d] does not match the image's height "
                     "and width (%d, %d)",
                     rh, rw, h, w);
        return -1;
    }
    return 0;
}

/* mask_from_rle(rle, height, width, row_map, col_map, fill=0) -> bytes */
static PyObject *py_mask_from_rle(PyObject *module, PyObject *args,
                                  PyObject *kw)
{
    (void)module;
    static char *kwlist[] = {"rle",     "height", "width", "row_map",
                             "col_map", "fill",   NULL};
    PyObject *rle, *row_map, *col_map;
    int h, w, fill = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OiiOO|i", kwlist, &rle, &h, &w,
                                     &row_map, &col_map, &fill)) {
        return NULL;
    }
    if (!PyDict_Check(rle)) {
        return PyErr_Format(PyExc_TypeError,
                            "rle must be a dict {'size': [h, w], 'counts': "
                            "...}, not %S",
                            (PyObject *)Py_TYPE(rle));
    }
    sample_args a;
    segmentation g = {0};
    PyObject *out = NULL;
    PyObject *counts = PyDict_GetItemString(rle, "counts"); /* borrowed */
    if (counts == NULL) {
        return PyErr_Format(PyExc_ValueError,
                            "rle has no 'counts' (a str, bytes or list)");
    }
    if (sample_parse(row_map, col_map, fill, &a) == 0 &&
        check_size(rle, h, w) == 0 &&
        (PyUnicode_Check(counts) || PyBytes_Check(counts)
             ? copy_text(counts, &g)
             : copy_counts(counts, &g)) == 0) {
        out = sampled(&g, h, w, &a);
    }
    segmentation_free(&g);
    sample_release(&a);
    return out;
}

/* mask_from_png(data, row_map, col_map, fill=255) -> bytes */
static PyObject *py_mask_from_png(PyObject *module, PyObject *args,
                                  PyObject *kw)
{
    (void)module;
    static char *kwlist[] = {"data", "row_map", "col_map", "fill", NULL};
    Py_buffer data;
    PyObject *row_map, *col_map;
    int fill = 255;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*OO|i", kwlist, &data,
                                     &row_map, &col_map, &fill)) {
        return NULL;
    }
    sample_args a;
    PyObject *bytes = NULL;
    if (sample_parse(row_map, col_map, fill, &a) == 0) {
        bytes =
            PyBytes_FromStringAndSize(NULL, a.rows.shape[0] * a.cols.shape[0]);
    }
    if (bytes != NULL) {
        uint8_t *out = (uint8_t *)PyBytes_AsString(bytes);
        char msg[RL_MSG_MAX] = "";
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = rl_mask_png_sample(
            data.buf, (size_t)data.len, a.rows.buf, (int)a.rows.shape[0],
            a.cols.buf, (int)a.cols.shape[0], (uint8_t)a.fill, out, msg);
        Py_END_ALLOW_THREADS
        if (rc != 0) {
            Py_CLEAR(bytes);
            PyErr_SetString(
                rc == -EINVAL ? PyExc_ValueError : PyExc_MemoryError, msg);
        }
    }
    sample_release(&a);
    PyBuffer_Release(&data);
    return bytes;
}

/* png_mask_size(data) -> (height, width) */
static PyObject *py_png_mask_size(PyObject *module, PyObject *arg)
{
    (void)module;
    Py_buffer data;
    if (PyObject_GetBuffer(arg, &data, PyBUF_SIMPLE) != 0) {
        return NULL;
    }
    char msg[RL_MSG_MAX] = "";
    int h = 0, w = 0;
    int rc = rl_mask_png_size(data.buf, (size_t)data.len, &h, &w, msg);
    PyBuffer_Release(&data);
    if (rc != 0) {
        PyErr_SetString(PyExc_ValueError, msg);
        return NULL;
    }
    return Py_BuildValue("(ii)", h, w);
}

static PyMethodDef methods[] = {
    {"mask_from_polygons", (PyCFunction)(void (*)(void))py_mask_from_polygons,
     METH_VARARGS | METH_KEYWORDS,
     "mask_from_polygons(polygons, height, width, row_map, col_map, fill=0) "
     "-> bytes: the OR of COCO polygons rasterized as pycocotools does on "
     "a height x width image, taken at rows row_map and columns col_map "
     "(int32 arrays, -1: fill), row-major."},
    {"mask_from_rle", (PyCFunction)(void (*)(void))py_mask_from_rle,
     METH_VARARGS | METH_KEYWORDS,
     "mask_from_rle(rle, height, width, row_map, col_map, fill=0) -> bytes: "
     "a COCO RLE dict (counts a str/bytes, compressed, or a list of ints) "
     "decoded and sampled as mask_from_polygons does."},
    {"mask_from_png", (PyCFunction)(void (*)(void))py_mask_from_png,
     METH_VARARGS | METH_KEYWORDS,
     "mask_from_png(data, row_map, col_map, fill=255) -> bytes: a "
     "segmentation PNG's palette indices (or 8-bit grey values), as "
     "np.array(PIL.Image.open(f)) gives them, taken at rows row_map and "
     "columns col_map (int32 arrays, -1: fill), row-major."},
    {"png_mask_size", py_png_mask_size, METH_O,
     "png_mask_size(data) -> (height, width) of a PNG mask_from_png "
     "accepts; ValueError for one it refuses."},
    {NULL, NULL, 0, NULL},
};

int rl__py_masks_init(PyObject *module)
{
    return PyModule_AddFunctions(module, methods);
}
