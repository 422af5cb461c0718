/*
 * python/fallback.c - a decoder written in Python, registered with the
 * decode stage: how files that are not JPEG (a PNG named .JPEG, WebP, BMP)
 * are decoded, from the bytes the source already read.
 *
 * DESIGN: this is the one place a pool thread runs Python. It claims any
 * bytes, so it goes last in the pipeline's decoder set; JPEG data never
 * reaches it. Its header() takes the GIL (PyGILState_Ensure, only while the
 * interpreter is alive), calls decode(memoryview, max_pixels) -> (rgb,
 * width, height) on a view of the source's buffer, valid only during the
 * call, and keeps the pixels as RGBX in the thread's state for region().
 * The callable reads the size first and, for an image over max_pixels,
 * returns (None, width, height) without decoding it: the pixel limit is
 * checked here, from the size alone, before any pixel memory exists
 * (decode.h's contract), and a callable that decoded anyway is refused all
 * the same. No pipeline lock is held meanwhile, and every call that waits
 * for workers releases the GIL first, so the worker's wait for the GIL
 * cannot deadlock. An exception becomes RL_EFORMAT with its text: a file
 * neither libjpeg nor Python can read. A result of the wrong shape is the
 * callable's fault, not the file's, and not a bug of the core:
 * RL_EFALLBACK, naming the callable. The decoder cannot scale or crop:
 * region() returns the whole image.
 */
#include "python/module.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode/decode.h"

typedef struct py_state {
    PyObject *decode;   /* borrowed: the pipeline keeps it alive */
    rl_decode_buf rgbx; /* the image, kept and trimmed as a decoder's */
    int w, h;
} py_state;

#if defined(Py_LIMITED_API) && Py_LIMITED_API + 0 < 0x030D0000
/* The limited API of 3.11 has no "is the interpreter finalizing": it came
 * as Py_IsFinalizing in 3.13, which the interpreters before it export as
 * _Py_IsFinalizing. Looked up once in the process, by either name; where
 * neither is found (an embedding that hides Python's symbols), only
 * Py_IsInitialized is asked. */
static int (*is_finalizing)(void);
static pthread_once_t is_finalizing_once = PTHREAD_ONCE_INIT;

static void find_is_finalizing(void)
{
    void *f = dlsym(RTLD_DEFAULT, "Py_IsFinalizing");
    if (f == NULL) {
        f = dlsym(RTLD_DEFAULT, "_Py_IsFinalizing");
    }
    is_finalizing = (int (*)(void))f;
}
#endif

static bool interpreter_alive(void)
{
#if defined(Py_LIMITED_API) && Py_LIMITED_API + 0 < 0x030D0000
    pthread_once(&is_finalizing_once, find_is_finalizing);
    return Py_IsInitialized() && (is_finalizing == NULL || !is_finalizing());
#elif PY_VERSION_HEX >= 0x030D0000
    return Py_IsInitialized() && !Py_IsFinalizing();
#else
    return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

static bool any_claims(const rl_decoder_def *def, const uint8_t *data,
                       size_t len)
{
    (void)def;
    (void)data;
    (void)len;
    return true;
}

static void *state_create(const rl_decoder_def *def)
{
    py_state *s = calloc(1, sizeof(*s));
    if (s != NULL) {
        s->decode = def->user;
    }
    return s;
}

static void state_destroy(void *state)
{
    py_state *s = state;
    rl_decode_buf_exit(&s->rgbx);
    free(s);
}

/* Refuses decode()'s result res as breaking the callable's contract:
 * RL_EFALLBACK with msg naming the callable and saying what was wrong (the
 * Python exception's text when what is set to NULL). GIL held. */
static int bad_result(const py_state *s, const char *what, char *msg)
{
    char text[RL_MSG_MAX];
    if (what == NULL) {
        rl__py_exception_text(text, false, "the fallback decoder failed");
        what = text;
    }
    PyObject *name = PyObject_GetAttrString(s->decode, "__qualname__");
    const char *n = name ? rl__py_utf8(name) : NULL;
    if (n == NULL) {
        PyErr_Clear();
    }
    snprintf(msg, RL_MSG_MAX,
             "the fallback decoder %.64s broke its contract (%.100s): it "
             "must return (RGB bytes, width, height)",
             n ? n : "(unnamed)", what);
    Py_XDECREF(name);
    return RL_EFALLBACK;
}

/* Unpacks decode()'s (rgb, width, height) into RGBX, refusing an image over
 * the pixel limit from its size before its pixels are looked at. GIL
 * held. */
static int take_pixels(py_state *s, PyObject *res, const rl_limits *lim,
                       char *msg)
{
    PyObject *rgb;
    int w, h;
    if (!PyTuple_Check(res)) {
        return bad_result(s, "returned no tuple", msg);
    }
    if (!PyArg_ParseTuple(res, "Oii", &rgb, &w, &h)) {
        return bad_result(s, NULL, msg);
    }
    if (w <= 0 || h <= 0) {
        char what[64];
        snprintf(what, sizeof(what), "a size of %dx%d", w, h);
        return bad_result(s, what, msg);
    }
    int rc = rl_decode_check_pixels((uint64_t)w, (uint64_t)h, lim, msg);
    if (rc != 0) {
        return rc;
    }
    if (rgb == Py_None) {
        return bad_result(s, "no pixels for an image within max_pixels", msg);
    }
    Py_buffer view;
    if (PyObject_GetBuffer(rgb, &view, PyBUF_SIMPLE) != 0) {
        return bad_result(s, NULL, msg);
    }
    size_t n = (size_t)w * (size_t)h;
    if ((size_t)view.len != n * 3) {
        char what[96];
        snprintf(what, sizeof(what), "%zd bytes for %dx%d RGB, not %zu",
                 view.len, w, h, n * 3);
        rc = bad_result(s, what, msg);
    } else if (rl_decode_buf_reserve(&s->rgbx, n * 4) != 0) {
        snprintf(msg, RL_MSG_MAX, "out of memory");
        rc = -ENOMEM;
    }
    if (rc == 0) {
        const uint8_t *in = view.buf;
        for (size_t i = 0; i < n; i++) {
            memcpy(s->rgbx.data + 4 * i, in + 3 * i, 3);
            s->rgbx.data[4 * i + 3] = 0;
        }
        s->w = w;
        s->h = h;
    }
    PyBuffer_Release(&view);
    return rc;
}

static int py_header(void *state, const uint8_t *data, size_t len,
                     const rl_limits *lim, rl_image_info *info, char *msg)
{
    py_state *s = state;
    if (!interpreter_alive()) {
        snprintf(msg, RL_MSG_MAX, "the interpreter is shutting down");
        return RL_ECLOSED;
    }
    PyGILState_STATE g = PyGILState_Ensure();
    int rc;
    PyObject *mv =
        PyMemoryView_FromMemory((char *)data, (Py_ssize_t)len, PyBUF_READ);
    PyObject *res =
        mv ? PyObject_CallFunction(s->decode, "OK", mv,
                                   (unsigned long long)lim->max_pixels)
           : NULL;
    if (res == NULL) {
        rl__py_exception_text(msg, false, "the fallback decoder failed");
        rc = RL_EFORMAT;
    } else {
        rc = take_pixels(s, res, lim, msg);
    }
    if (mv != NULL) {
        /* The view must not outlive the call: the bytes are the source's. */
        PyObject *r = PyObject_CallMethod(mv, "release", NULL);
        if (r == NULL) {
            PyErr_Clear();
        }
        Py_XDECREF(r);
    }
    Py_XDECREF(mv);
    Py_XDECREF(res);
    PyGILState_Release(g);
    if (rc == 0) {
        info->width = s->w;
        info->height = s->h;
        info->components = 3;
        info->progressive = false;
    }
    return rc;
}

static int py_region(void *state, int m, int x0, int y0, int w, int h,
                     const rl_limits *lim, rl_pixels *out, char *msg)
{
    (void)m;
    (void)x0;
    (void)y0;
    (void)w;
    (void)h;
    (void)lim;
    (void)msg;
    py_state *s = state;
    out->data = s->rgbx.data;
    out->stride = (size_t)s->w * 4;
    out->x0 = out->y0 = 0;
    out->w = out->full_w = s->w;
    out->h = out->full_h = s->h;
    return 0;
}

static size_t state_trim(void *state, bool roll)
{
    return rl_decode_buf_trim(&((py_state *)state)->rgbx, roll);
}

int rl__py_fallback_def(PyObject *decode, rl_decoder_def *def)
{
    if (!PyCallable_Check(decode)) {
        PyErr_SetString(PyExc_TypeError, "fallback must be callable");
        return -1;
    }
    memset(def, 0, sizeof(*def));
    def->name = "python";
    def->claims = any_claims;
    def->create = state_create;
    def->destroy = state_destroy;
    def->header = py_header;
    def->scaled_size = NULL;
    def->region = py_region;
    def->truncated = NULL;
    def->trim = state_trim;
    def->user = decode;
    return 0;
}
