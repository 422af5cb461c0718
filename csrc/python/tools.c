/*
 * python/tools.c - the module's stateless functions: a full decode, the
 * plan of one sample and its DCT scale, the probes of io_uring and CUDA,
 * and the resampler's SIMD level. Tools for tests, benchmarks and
 * `ringloader info`.
 *
 * DESIGN: arguments are parsed with the GIL held; the work runs with it
 * released, on memory from malloc, never from Python's allocator.
 */
#include "python/module.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "augment/augment.h"
#include "core/plan.h"
#include "core/sample.h"
#include "deliver/cudart.h"
#include "place/place.h"
#include "source/io.h"
#include "simd.h"

/* decode(data, *, max_pixels, max_scans, allow_truncated, max_decode_bytes,
 *        box) -> (bytes, height, width): the image in RGB, for tests, tools
 *   and benchmarks: a JPEG, PNG or WebP, by the native decoders (no Pillow
 *   fallback); the whole image, or the region box = (left, top, width,
 *   height) decoded as a pipeline decodes a crop. max_decode_bytes 0:
 *   libjpeg's memory bound follows max_pixels. */
static PyObject *py_decode(PyObject *module, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"data",
                             "max_pixels",
                             "max_scans",
                             "allow_truncated",
                             "max_decode_bytes",
                             "box",
                             NULL};
    Py_buffer view;
    unsigned long long max_pixels = RL_DEFAULT_MAX_PIXELS;
    unsigned long long max_decode_bytes = 0;
    int max_scans = RL_DEFAULT_MAX_SCANS, allow_truncated = 0;
    PyObject *box_obj = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*|$KipKO", kwlist, &view,
                                     &max_pixels, &max_scans, &allow_truncated,
                                     &max_decode_bytes, &box_obj)) {
        return NULL;
    }
    int box[4];
    if (box_obj != Py_None &&
        !PyArg_ParseTuple(box_obj, "iiii;box is (left, top, width, height)",
                          &box[0], &box[1], &box[2], &box[3])) {
        PyBuffer_Release(&view);
        return NULL;
    }
    rl_module_state *st = PyModule_GetState(module);
    rl_limits lim = {max_pixels, max_scans, RL_DEFAULT_MAX_FILE_BYTES,
                     allow_truncated != 0, max_decode_bytes};
    uint8_t *out = NULL;
    int w = 0, h = 0, rc;
    char msg[RL_MSG_MAX];
    Py_BEGIN_ALLOW_THREADS
    rc = rl_sample_decode_full(view.buf, (size_t)view.len, &lim,
                               box_obj != Py_None ? box : NULL, &out, &w, &h,
                               msg);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (rc == -EINVAL) {
        PyErr_SetString(PyExc_ValueError, msg);
        return NULL;
    }
    if (rc != 0) {
        return rl__py_raise(st, rc, NULL, msg);
    }
    PyObject *bytes =
        PyBytes_FromStringAndSize((const char *)out, (Py_ssize_t)w * h * 3);
    free(out);
    if (bytes == NULL) {
        return NULL;
    }
    return Py_BuildValue("Nii", bytes, h, w);
}

/* Parses (spec, width, height, seed, epoch, index[, view]) and plans that
 * view of that sample: 0, or -1 with an exception set. */
static int plan_args(PyObject *args, int *width, int *height, rl_plan *p)
{
    PyObject *spec, *boxes_o = Py_None;
    unsigned long long seed;
    long long epoch, index;
    int view = 0;
    if (!PyArg_ParseTuple(args, "OiiKLL|iO", &spec, width, height, &seed,
                          &epoch, &index, &view, &boxes_o)) {
        return -1;
    }
    rl_transform t;
    if (rl__py_parse_transform(spec, &t) != 0) {
        return -1;
    }
    /* the sample's boxes (XYXY) a RandomIoUCrop's draw reads */
    size_t n = 0;
    double *boxes = boxes_o == Py_None
                        ? NULL
                        : rl__py_float64_rows(boxes_o, 4, "boxes", &n);
    if (boxes_o != Py_None && boxes == NULL) {
        return -1;
    }
    char msg[RL_MSG_MAX];
    int rc = rl_plan_make_boxes(&t, *width, *height, seed, epoch, index, view,
                                boxes, n, p, msg);
    free(boxes);
    if (rc != 0) {
        PyErr_SetString(PyExc_ValueError, msg);
        return -1;
    }
    return 0;
}

/* plan(spec, width, height, seed, epoch, index)
 *   -> (top, left, height, width, flip): the source box of one sample, as
 *   torchvision's get_params would give it. */
static PyObject *py_plan(PyObject *module, PyObject *args)
{
    (void)module;
    int width, height;
    rl_plan p;
    if (plan_args(args, &width, &height, &p) != 0) {
        return NULL;
    }
    return Py_BuildValue("ddddO", p.y, p.x, p.h, p.w,
                         p.flip ? Py_True : Py_False);
}

/* plan_window(spec, width, height, seed, epoch, index, view=0) -> dict:
 * the whole plan (box, output rectangle, flips; a RandomCrop's window
 * start wx, wy in resized pixels and the resized size rw, rh it lies on
 * (0 for the other geometries), the padding mode the place stage runs
 * and the first pixel rx, ry of a mirrored range: rl_plan_pad; the
 * sample's filter by name), for the
 * geometries whose box alone does not say where it lands. */
static PyObject *py_plan_window(PyObject *module, PyObject *args)
{
    (void)module;
    int width, height;
    rl_plan p;
    if (plan_args(args, &width, &height, &p) != 0) {
        return NULL;
    }
    PyObject *d = Py_BuildValue(
        "{sdsdsdsdsisisisisOsOsssisisisisisiss}", "x", p.x, "y", p.y, "w", p.w,
        "h", p.h, "vx", p.vx, "vy", p.vy, "vw", p.vw, "vh", p.vh, "flip",
        p.flip ? Py_True : Py_False, "vflip", p.vflip ? Py_True : Py_False,
        "pad_mode", rl_pad_mode_name(p.pad.mode), "wx", p.pad.x.w0, "wy",
        p.pad.y.w0, "rx", p.pad.x.r0, "ry", p.pad.y.r0, "rw", p.pad.x.n, "rh",
        p.pad.y.n, "filter", rl_filter_name(p.filter));
    /* RandomIoUCrop's draw and RandomZoomOut's canvas (zeros without) */
    PyObject *iou = Py_BuildValue(
        "{sOsdsisOs(iiii)sOs(iiii)}", "iou_crop",
        p.iou_crop ? Py_True : Py_False, "iou_option", p.iou_option,
        "iou_rounds", p.iou_rounds, "iou_limited",
        p.iou_limited ? Py_True : Py_False, "iou_box", p.iou_x, p.iou_y,
        p.iou_w, p.iou_h, "zoom_out", p.zoom_out ? Py_True : Py_False,
        "zoom_canvas", p.zoom_left, p.zoom_top, p.zoom_w, p.zoom_h);
    if (d == NULL || iou == NULL || PyDict_Update(d, iou) < 0) {
        Py_XDECREF(iou);
        Py_XDECREF(d);
        return NULL;
    }
    Py_DECREF(iou);
    return d;
}

/* dct_scale(spec, width, height, seed, epoch, index) -> m: a JPEG of that
 * size is decoded at scale m/8 for that sample (8: no DCT scaling). */
static PyObject *py_dct_scale(PyObject *module, PyObject *args)
{
    (void)module;
    int width, height;
    rl_plan p;
    if (plan_args(args, &width, &height, &p) != 0) {
        return NULL;
    }
    return PyLong_FromLong(rl_sample_plan_scale(&p, width, height));
}

/* io_probe() -> (available: bool, reason: str) */
static PyObject *py_io_probe(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    char why[RL_MSG_MAX];
    bool ok;
    Py_BEGIN_ALLOW_THREADS
    ok = rl_io_uring_probe(why);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("Os", ok ? Py_True : Py_False, why);
}

/* http_library() -> libcurl's version line (TLS, HTTP/2 libraries) */
static PyObject *py_http_library(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return PyUnicode_FromString(rl_http_library());
}

/* http_sigv4() -> whether the HTTP source's libcurl signs S3 requests */
static PyObject *py_http_sigv4(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return PyBool_FromLong(rl_http_sigv4());
}

/* cuda_probe() -> (available, message, library, device_count) */
static PyObject *py_cuda_probe(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    char msg[RL_MSG_MAX];
    const char *path = NULL;
    int n = 0, rc;
    Py_BEGIN_ALLOW_THREADS
    rc = rl_cuda_load(msg, &path);
    if (rc == 0) {
        rc = rl_cuda_device_count(&n, msg);
    }
    Py_END_ALLOW_THREADS
    return Py_BuildValue("Ossi", rc == 0 ? Py_True : Py_False, msg,
                         path ? path : "", n);
}

/* resample_simd(cap=None) -> the resampler's SIMD level ("c", "sse2",
 * "avx2"); with cap, first lowers it to at most cap (for tests: call it
 * when no loader is running). */
static PyObject *py_resample_simd(PyObject *module, PyObject *args)
{
    (void)module;
    const char *cap = NULL;
    if (!PyArg_ParseTuple(args, "|z", &cap)) {
        return NULL;
    }
    if (cap != NULL) {
        rl_simd level;
        if (rl_simd_parse(cap, &level) != 0) {
            PyErr_Format(PyExc_ValueError,
                         "unknown SIMD level %R: use 'c', 'sse2' or 'avx2'",
                         PyTuple_GetItem(args, 0));
            return NULL;
        }
        rl_simd_cap(level);
    }
    return PyUnicode_FromString(rl_simd_name(rl_simd_level()));
}

/* resample_simd_env() -> (value, cap): what RINGLOADER_SIMD held when the
 * level was chosen (None: unset) and the level it caps at (None: it named
 * none, so nothing is capped). New reference. */
static PyObject *py_resample_simd_env(PyObject *module, PyObject *args)
{
    (void)module;
    (void)args;
    int cap;
    const char *value = rl_simd_env(&cap);
    /* As os.environ decodes it: any bytes, a truncated character too. */
    PyObject *v = value ? PyUnicode_DecodeFSDefault(value) : Py_NewRef(Py_None);
    if (v == NULL) {
        return NULL;
    }
    PyObject *c = cap < 0 ? Py_NewRef(Py_None)
                          : PyUnicode_FromString(rl_simd_name((rl_simd)cap));
    if (c == NULL) {
        Py_DECREF(v);
        return NULL;
    }
    return Py_BuildValue("(NN)", v, c);
}

/* Parses ops, height, width and the chain: 0, or -1 with an exception. */
static int chain_args(PyObject *ops, int h, int w, rl_augment *a)
{
    if (h <= 0 || w <= 0) {
        PyErr_SetString(PyExc_ValueError, "height and width must be > 0");
        return -1;
    }
    PyObject *spec = Py_BuildValue("{sO}", "ops", ops);
    if (spec == NULL) {
        return -1;
    }
    int rc = rl__py_parse_ops(spec, a);
    Py_DECREF(spec);
    return rc;
}

static PyObject *params_list(const rl_augment *a, const double *params)
{
    PyObject *out = PyList_New(a->n);
    for (int i = 0; out != NULL && i < a->n; i++) {
        PyObject *row = PyList_New(RL_OP_MAX_PARAMS);
        for (int k = 0; row != NULL && k < RL_OP_MAX_PARAMS; k++) {
            PyObject *v = PyFloat_FromDouble(params[i * RL_OP_MAX_PARAMS + k]);
            if (v == NULL) {
                Py_CLEAR(row);
                break;
            }
            PyList_SetItem(row, k, v);
        }
        if (row == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyList_SetItem(out, i, row);
    }
    return out;
}

/* augment_draw(ops, height, width, seed, epoch, key[, view]) -> [[params]] */
static PyObject *py_augment_draw(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *ops;
    int h, w, view = 0;
    unsigned long long seed;
    long long epoch, key;
    rl_augment a;
    if (!PyArg_ParseTuple(args, "OiiKLL|i", &ops, &h, &w, &seed, &epoch, &key,
                          &view) ||
        chain_args(ops, h, w, &a) != 0) {
        return NULL;
    }
    if (view < 0 || view >= RL_MAX_VIEWS) {
        return PyErr_Format(PyExc_ValueError, "view must be 0..%d",
                            RL_MAX_VIEWS - 1);
    }
    a.view = view;
    double params[RL_AUGMENT_MAX_OPS * RL_OP_MAX_PARAMS];
    rl_augment_draw(&a, seed, epoch, key, w, h, params);
    return params_list(&a, params);
}

/* augment(rgb, height, width, ops, seed, epoch, key) -> bytes: the image
 * ops of the chain on an HWC RGB image (its source ops first, the image
 * standing for the whole decoded one). */
static PyObject *py_augment(PyObject *module, PyObject *args)
{
    Py_buffer view;
    PyObject *ops;
    int h, w;
    unsigned long long seed;
    long long epoch, key;
    rl_augment a;
    if (!PyArg_ParseTuple(args, "y*iiOKLL", &view, &h, &w, &ops, &seed, &epoch,
                          &key)) {
        return NULL;
    }
    if (chain_args(ops, h, w, &a) != 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    if (view.len != (Py_ssize_t)h * w * 3) {
        PyBuffer_Release(&view);
        return PyErr_Format(PyExc_ValueError,
                            "image must be height * width * 3 bytes");
    }
    PyObject *out = PyBytes_FromStringAndSize(view.buf, view.len);
    PyBuffer_Release(&view);
    if (out == NULL) {
        return NULL;
    }
    rl_image img = {(uint8_t *)PyBytes_AsString(out), w, h, (size_t)w * 3};
    double params[RL_AUGMENT_MAX_OPS * RL_OP_MAX_PARAMS];
    char msg[RL_MSG_MAX] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rl_augment_draw(&a, seed, epoch, key, w, h, params);
    rc = rl_augment_run_source(&a, params, &img, msg);
    if (rc == 0) {
        rc = rl_augment_run(&a, params, &img, msg);
    }
    Py_END_ALLOW_THREADS
    if (rc != 0) {
        Py_DECREF(out);
        return rl__py_raise(PyModule_GetState(module), rc, NULL, msg);
    }
    return out;
}

PyMethodDef rl__py_tool_methods[] = {
    {"augment_draw", py_augment_draw, METH_VARARGS,
     "augment_draw(ops, height, width, seed, epoch, key, view=0) -> "
     "[[float]]: the parameters each op of the chain draws for that view "
     "of that sample."},
    {"augment", py_augment, METH_VARARGS,
     "augment(rgb, height, width, ops, seed, epoch, key) -> bytes: the "
     "chain's image ops applied to an HWC RGB image."},
    {"resample_simd", py_resample_simd, METH_VARARGS,
     "resample_simd(cap=None) -> 'c' | 'sse2' | 'avx2': the resampler's "
     "SIMD level, first capped at cap if given."},
    {"resample_simd_env", py_resample_simd_env, METH_NOARGS,
     "resample_simd_env() -> (value, cap): RINGLOADER_SIMD as read (None: "
     "unset) and the level it caps at (None: none named, no cap)"},
    {"cuda_probe", py_cuda_probe, METH_NOARGS,
     "cuda_probe() -> (available, message, library, device_count)."},
    {"decode", (PyCFunction)(void (*)(void))py_decode,
     METH_VARARGS | METH_KEYWORDS,
     "decode(data) -> (rgb_bytes, height, width): full RGB decode of a "
     "JPEG, PNG or WebP."},
    {"plan", py_plan, METH_VARARGS,
     "plan(spec, width, height, seed, epoch, index, view=0, boxes=None) -> "
     "(top, left, h, w, flip); boxes: the sample's (N, 4) float64 XYXY "
     "boxes a RandomIoUCrop draws from."},
    {"plan_window", py_plan_window, METH_VARARGS,
     "plan_window(spec, width, height, seed, epoch, index, view=0, "
     "boxes=None) -> {x, y, w, h: the source box; vx, vy, vw, vh: where it "
     "lands in the output; flip, vflip; pad_mode, wx, wy, rx, ry: a "
     "RandomCrop's padding; iou_crop, iou_option, iou_rounds, iou_limited, "
     "iou_box (x, y, w, h in the canvas): a RandomIoUCrop's draw from "
     "boxes; zoom_out, zoom_canvas (left, top, w, h): a RandomZoomOut's}."},
    {"dct_scale", py_dct_scale, METH_VARARGS,
     "dct_scale(spec, width, height, seed, epoch, index, view=0) -> m: that "
     "view alone would decode the sample at DCT scale m/8 (8: none)."},
    {"io_probe", py_io_probe, METH_NOARGS,
     "io_probe() -> (io_uring_available, reason_if_not)."},
    {"http_library", py_http_library, METH_NOARGS,
     "http_library() -> the HTTP source's libcurl, with its TLS and HTTP/2 "
     "libraries ('libcurl/7.88.1 OpenSSL/3.0.20 nghttp2/1.52.0')."},
    {"object_ids", rl__py_object_ids, METH_VARARGS,
     "object_ids(blob, offsets) -> None when the strings of a blob are "
     "all different, else bytes of an int64 a string: the id of its first "
     "occurrence, ids given in order of first occurrence."},
    {"http_sigv4", py_http_sigv4, METH_NOARGS,
     "http_sigv4() -> whether the HTTP source's libcurl signs requests "
     "with AWS SigV4 (7.75 or later)."},
    {NULL, NULL, 0, NULL},
};
