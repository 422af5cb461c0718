/*
 * augment/geometry.c - the geometric ops: RandomRotation ("rotation") and
 * RandomAffine ("affine") of torchvision.transforms.v2; the inverse affine
 * matrix of torchvision's _get_inverse_affine_matrix; rl_k_rotate, all of
 * rotate_image. The warp itself is rl_k_affine (warp.c).
 *
 * DESIGN: the matrix is computed in double with the same libm calls in the
 * same order as torchvision's Python, so the float32 theta it becomes is
 * the same; rotation repeats rotate_image's steps (the angle taken modulo
 * 360 as Python's % does, negated, and the exact rotations by 0, 180, and
 * 90 or 270 on a square image done as rot90 when the centre is the
 * default). Draws follow get_params/make_params: the same draws in the
 * same order, each a float32 uniform as torch's uniform_ gives (24 random
 * bits, the bounds rounded to float32), the translations rounded half to
 * even as Python's round. Arguments are doubles, NaN meaning None.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "augment/kernels.h"

/* No fused multiply-adds but the explicit ones, whatever the -std. */
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

/* Py_MATH_PI / 180.0, the factor of Python's math.radians */
static const double deg_to_rad = 3.14159265358979323846 / 180.0;

void rl_affine_inverse(double cx, double cy, double angle, double tx, double ty,
                       double scale, double shear_x, double shear_y,
                       double m[6])
{
    double rot = angle * deg_to_rad;
    double sx = shear_x * deg_to_rad, sy = shear_y * deg_to_rad;
    double cos_sy = cos(sy), tan_sx = tan(sx);
    double ctx = cx + tx, cty = cy + ty;
    /* rotation-shear matrix [a b; c d], determinant 1, then its inverse
     * divided by the scale, around the centre and the translation */
    double a = cos(rot - sy) / cos_sy;
    double b = -(a * tan_sx + sin(rot));
    double c = sin(rot - sy) / cos_sy;
    double d = cos(rot) - c * tan_sx;
    m[0] = d / scale;
    m[1] = -b / scale;
    m[3] = -c / scale;
    m[4] = a / scale;
    m[2] = 0.0 + ((cx - m[0] * ctx) - m[1] * cty);
    m[5] = 0.0 + ((cy - m[3] * ctx) - m[4] * cty);
}

/* ---- draws ---- */

/* torch.empty(1).uniform_(lo, hi).item() on a float32 tensor: the bounds
 * rounded to float, 24 random bits, the result rounded to float. */
static double uniform_f32(rl_rng *g, double lo, double hi)
{
    float from = (float)lo, to = (float)hi;
    float span = to - from;
    float u = (float)(uint32_t)(rl_rng_uniform(g) * 16777216.0) *
              (1.0f / 16777216.0f);
    float v = u * span;
    return (double)(v + from);
}

/* ---- rotations by multiples of 90 degrees (torch.rot90) ---- */

static void rot180(rl_image *img)
{
    int w = img->w, h = img->h;
    for (int j = 0; j < (h + 1) / 2; j++) {
        uint8_t *a = img->data + (size_t)j * img->stride;
        uint8_t *b = img->data + (size_t)(h - 1 - j) * img->stride;
        /* the middle row of an odd height only swaps its halves */
        int n = j == h - 1 - j ? w / 2 : w;
        for (int i = 0; i < n; i++) {
            uint8_t *p = a + 3 * (size_t)i, *q = b + 3 * (size_t)(w - 1 - i);
            for (int c = 0; c < 3; c++) {
                uint8_t t = p[c];
                p[c] = q[c];
                q[c] = t;
            }
        }
    }
}

/* A square image turned a quarter counterclockwise (k = 1: out[y][x] =
 * in[x][n-1-y]) or clockwise (k = 3: out[y][x] = in[n-1-x][y]). */
static int rot90(rl_image *img, int k)
{
    int n = img->w;
    size_t row = (size_t)n * 3;
    uint8_t *src = malloc(row * (size_t)n);
    if (src == NULL) {
        return -ENOMEM;
    }
    for (int j = 0; j < n; j++) {
        memcpy(src + (size_t)j * row, img->data + (size_t)j * img->stride, row);
    }
    for (int y = 0; y < n; y++) {
        uint8_t *o = img->data + (size_t)y * img->stride;
        for (int x = 0; x < n; x++, o += 3) {
            int sy = k == 1 ? x : n - 1 - x, sx = k == 1 ? n - 1 - y : y;
            memcpy(o, src + (size_t)sy * row + 3 * (size_t)sx, 3);
        }
    }
    free(src);
    return 0;
}

/* Python's a % 360.0 */
static double mod360(double a)
{
    double r = fmod(a, 360.0);
    if (r != 0.0) {
        r += r < 0.0 ? 360.0 : 0.0;
    } else {
        r = 0.0;
    }
    return r;
}

/* (kernels.h): torchvision's rotate_image, expand=False. */
int rl_k_rotate(rl_image *img, double angle, rl_interp interp,
                const double *center, const double *fill)
{
    int w = img->w, h = img->h;
    if (w <= 0 || h <= 0) {
        return 0;
    }
    angle = mod360(angle);
    if (center == NULL) {
        /* rotate_image's exact turns for the default centre */
        if (angle == 0.0) {
            return 0;
        }
        if (angle == 180.0) {
            rot180(img);
            return 0;
        }
        if (w == h && (angle == 90.0 || angle == 270.0)) {
            return rot90(img, angle == 90.0 ? 1 : 3);
        }
    }
    double cx = 0.0, cy = 0.0, m[6];
    if (center != NULL) {
        cx = center[0] - (double)w * 0.5;
        cy = center[1] - (double)h * 0.5;
    }
    /* rotate's angle is counterclockwise, affine's clockwise */
    rl_affine_inverse(cx, cy, -angle, 0.0, 0.0, 1.0, 0.0, 0.0, m);
    return rl_k_affine(img, m, interp, fill);
}

/* ---- argument checks shared by both ops ---- */

static int check_range(const char *op, const char *what, const double *v,
                       int none_ok, char *msg)
{
    if (none_ok && isnan(v[0]) && isnan(v[1])) {
        return 0;
    }
    /* drawn as float32, as torch does */
    if (!(fabs(v[0]) <= FLT_MAX && fabs(v[1]) <= FLT_MAX && v[0] <= v[1])) {
        snprintf(msg, RL_MSG_MAX,
                 "%s: %s must be finite float32 (lo, hi) with lo <= hi%s, "
                 "not (%g, %g)",
                 op, what, none_ok ? " or None" : "", v[0], v[1]);
        return RL_ECONFIG;
    }
    return 0;
}

/* interp, then centre (cx, cy), then fill (r, g, b) */
static int check_common(const char *op, double interp, const double *center,
                        const double *fill, char *msg)
{
    if (!(interp == RL_INTERP_NEAREST || interp == RL_INTERP_BILINEAR)) {
        snprintf(msg, RL_MSG_MAX,
                 "%s: interpolation must be 0 (nearest) or 1 (bilinear), "
                 "not %g",
                 op, interp);
        return RL_ECONFIG;
    }
    if (!(isnan(center[0]) && isnan(center[1])) &&
        !(isfinite(center[0]) && isfinite(center[1]))) {
        snprintf(msg, RL_MSG_MAX,
                 "%s: center must be two finite numbers or None, not (%g, "
                 "%g)",
                 op, center[0], center[1]);
        return RL_ECONFIG;
    }
    int nones = isnan(fill[0]) + isnan(fill[1]) + isnan(fill[2]);
    for (int c = 0; nones == 0 && c < 3; c++) {
        if (!(fill[c] >= 0.0 && fill[c] <= 255.0)) {
            nones = -1;
        }
    }
    if (nones != 0 && nones != 3) {
        snprintf(msg, RL_MSG_MAX,
                 "%s: fill must be three values in [0, 255] or None, not "
                 "(%g, %g, %g)",
                 op, fill[0], fill[1], fill[2]);
        return RL_ECONFIG;
    }
    return 0;
}

/* ---- rotation: degrees (lo, hi), interpolation, center (x, y; NaN for
 * None), fill (r, g, b; NaN for None) ---- */

#define ROT_ARGS(X)                    \
    X(ROT_, degrees, 2, RL_ARG_)       \
    X(ROT_, interpolation, 1, RL_ARG_) \
    X(ROT_, center, 2, RL_ARG_)        \
    X(ROT_, fill, 3, RL_ARG_)
enum { ROT_ARGS(RL_OP_ARG_AT) ROT_NARGS };
static const rl_op_field ROT_fields[] = {ROT_ARGS(RL_OP_FIELD) RL_OP_END};

static int rotation_check(const double *args, char *msg)
{
    if (check_range("rotation", "degrees", args + ROT_degrees, 0, msg) != 0) {
        return RL_ECONFIG;
    }
    return check_common("rotation", args[ROT_interpolation], args + ROT_center,
                        args + ROT_fill, msg);
}

static void rotation_draw(const rl_op *op, rl_rng *g, int w, int h,
                          double *params)
{
    (void)w;
    (void)h;
    const double *degrees = op->args + ROT_degrees;
    params[0] = uniform_f32(g, degrees[0], degrees[1]);
}

/* An op's rl_k_affine or rl_k_rotate status, with a message where it is an
 * error. */
static int warp_status(const char *name, const rl_image *img, int rc, char *msg)
{
    if (rc == -EOVERFLOW) {
        snprintf(msg, RL_MSG_MAX, "%s: a %d x %d image is too large to warp",
                 name, img->w, img->h);
    }
    return rc;
}

/* The centre argument (x, y; NaN for None) into a warp. */
static void warp_center(const double *center, rl_op_warp *out)
{
    out->centered = !isnan(center[0]);
    out->center[0] = out->centered ? center[0] : 0.0;
    out->center[1] = out->centered ? center[1] : 0.0;
}

static void rotation_warp(const rl_op *op, const double *params, int w, int h,
                          rl_op_warp *out)
{
    (void)w;
    (void)h;
    memset(out, 0, sizeof(*out));
    out->kind = RL_WARP_ROTATE;
    out->angle = params[0];
    out->scale = 1.0;
    warp_center(op->args + ROT_center, out);
}

/* warp on img: rotate_image's or affine_image's steps (expand=False). */
static int run_warp(rl_image *img, const rl_op_warp *warp, rl_interp interp,
                    const double *fill)
{
    if (warp->kind == RL_WARP_ROTATE) {
        return rl_k_rotate(img, warp->angle, interp,
                           warp->centered ? warp->center : NULL, fill);
    }
    if (warp->kind == RL_WARP_PERSPECTIVE) {
        return rl_k_perspective(img, warp->coeffs, interp, fill);
    }
    double cx = 0.0, cy = 0.0, m[6];
    if (warp->centered) {
        cx = warp->center[0] - (double)img->w * 0.5;
        cy = warp->center[1] - (double)img->h * 0.5;
    }
    rl_affine_inverse(cx, cy, warp->angle, warp->tx, warp->ty, warp->scale,
                      warp->shear_x, warp->shear_y, m);
    return rl_k_affine(img, m, interp, fill);
}

/* An op's warp on img with its own interpolation and fill (NaN: None). */
static int apply_warp(const char *name, rl_image *img, const rl_op_warp *warp,
                      double interp, const double *fill, char *msg)
{
    int rc =
        run_warp(img, warp, (rl_interp)interp, isnan(fill[0]) ? NULL : fill);
    return warp_status(name, img, rc, msg);
}

int rl_augment_warp_nearest(rl_image *img, const rl_op_warp *warp,
                            const double *fill, char *msg)
{
    int rc = run_warp(img, warp, RL_INTERP_NEAREST, fill);
    return warp_status("a mask's warp", img, rc, msg);
}

static int rotation_apply(const rl_op *op, const double *params, rl_image *img,
                          char *msg)
{
    rl_op_warp warp;
    rotation_warp(op, params, img->w, img->h, &warp);
    return apply_warp("rotation", img, &warp, op->args[ROT_interpolation],
                      op->args + ROT_fill, msg);
}

static const rl_op_def rotation_op = {
    .name = "rotation",
    .nargs = ROT_NARGS,
    .fields = ROT_fields,
    .check = rotation_check,
    .draw = rotation_draw,
    .apply = rotation_apply,
    .warp = rotation_warp,
};

/* ---- affine: degrees (lo, hi), translate (x, y fractions), scale (lo,
 * hi), shear (x lo, hi, y lo, hi), interpolation, center, fill; NaN where
 * torchvision has None ---- */

#define AFF_ARGS(X)                    \
    X(AFF_, degrees, 2, RL_ARG_)       \
    X(AFF_, translate, 2, RL_ARG_)     \
    X(AFF_, scale, 2, RL_ARG_)         \
    X(AFF_, shear, 4, RL_ARG_)         \
    X(AFF_, interpolation, 1, RL_ARG_) \
    X(AFF_, center, 2, RL_ARG_)        \
    X(AFF_, fill, 3, RL_ARG_)
enum { AFF_ARGS(RL_OP_ARG_AT) AFF_NARGS };
static const rl_op_field AFF_fields[] = {AFF_ARGS(RL_OP_FIELD) RL_OP_END};

static int affine_check(const double *args, char *msg)
{
    const char *op = "affine";
    const double *scale = args + AFF_scale, *shear = args + AFF_shear;
    if (check_range(op, "degrees", args + AFF_degrees, 0, msg) != 0 ||
        check_range(op, "scale", scale, 1, msg) != 0 ||
        check_range(op, "shear x", shear, 1, msg) != 0 ||
        check_range(op, "shear y", shear + 2, 1, msg) != 0) {
        return RL_ECONFIG;
    }
    const double *t = args + AFF_translate;
    if (!(isnan(t[0]) && isnan(t[1])) &&
        !(t[0] >= 0.0 && t[0] <= 1.0 && t[1] >= 0.0 && t[1] <= 1.0)) {
        snprintf(msg, RL_MSG_MAX,
                 "affine: translate must be two fractions in [0, 1] or None, "
                 "not (%g, %g)",
                 t[0], t[1]);
        return RL_ECONFIG;
    }
    if (!isnan(scale[0]) && !(scale[0] > 0.0)) {
        snprintf(msg, RL_MSG_MAX, "affine: scale must be > 0, not (%g, %g)",
                 scale[0], scale[1]);
        return RL_ECONFIG;
    }
    if (isnan(shear[0]) && !isnan(shear[2])) {
        snprintf(msg, RL_MSG_MAX,
                 "affine: a shear y range needs a shear x range");
        return RL_ECONFIG;
    }
    return check_common(op, args[AFF_interpolation], args + AFF_center,
                        args + AFF_fill, msg);
}

static void affine_draw(const rl_op *op, rl_rng *g, int w, int h,
                        double *params)
{
    const double *degrees = op->args + AFF_degrees;
    const double *t = op->args + AFF_translate, *scale = op->args + AFF_scale;
    const double *shear = op->args + AFF_shear;
    params[0] = uniform_f32(g, degrees[0], degrees[1]);
    params[1] = params[2] = 0.0;
    if (!isnan(t[0])) {
        double dx = t[0] * (double)w, dy = t[1] * (double)h;
        params[1] = nearbyint(uniform_f32(g, -dx, dx));
        params[2] = nearbyint(uniform_f32(g, -dy, dy));
    }
    params[3] = isnan(scale[0]) ? 1.0 : uniform_f32(g, scale[0], scale[1]);
    params[4] = params[5] = 0.0;
    if (!isnan(shear[0])) {
        params[4] = uniform_f32(g, shear[0], shear[1]);
        if (!isnan(shear[2])) {
            params[5] = uniform_f32(g, shear[2], shear[3]);
        }
    }
}

static void affine_warp(const rl_op *op, const double *params, int w, int h,
                        rl_op_warp *out)
{
    (void)w;
    (void)h;
    memset(out, 0, sizeof(*out));
    out->kind = RL_WARP_AFFINE;
    out->angle = params[0];
    out->tx = params[1];
    out->ty = params[2];
    out->scale = params[3];
    out->shear_x = params[4];
    out->shear_y = params[5];
    warp_center(op->args + AFF_center, out);
}

static int affine_apply(const rl_op *op, const double *params, rl_image *img,
                        char *msg)
{
    rl_op_warp warp;
    affine_warp(op, params, img->w, img->h, &warp);
    return apply_warp("affine", img, &warp, op->args[AFF_interpolation],
                      op->args + AFF_fill, msg);
}

static const rl_op_def affine_op = {
    .name = "affine",
    .nargs = AFF_NARGS,
    .fields = AFF_fields,
    .check = affine_check,
    .draw = affine_draw,
    .apply = affine_apply,
    .warp = affine_warp,
};

const rl_op_def *const rl_geometry_ops[] = {
    &rotation_op,
    &affine_op,
    NULL,
};
