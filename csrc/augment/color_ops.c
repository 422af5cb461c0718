/*
 * augment/color_ops.c - the colour ops: their table, argument layouts,
 * checks, draws and applies. The kernels they run are color.c's and
 * color_hist.c's (kernels.h), which state their tolerances.
 *
 * DESIGN: the single colour transforms share one check, one draw and one
 * apply, told apart by the op's place in the table (its kind): most are
 * "run kernel k with probability p", and ColorJitter draws a permutation
 * of its four factors, as torchvision does.
 */
#include <math.h>
#include <stdio.h>

#include "augment/kernels.h"

/* The ops' arguments (augment.h). color_jitter: a (min, max) range per
 * factor, a NaN pair where torchvision has None; gaussian_blur: the kernel
 * size (x, y) and sigma's (min, max); the others their value, if any, then
 * p. */
#define JIT_ARGS(X)                 \
    X(JIT_, brightness, 2, RL_ARG_) \
    X(JIT_, contrast, 2, RL_ARG_)   \
    X(JIT_, saturation, 2, RL_ARG_) \
    X(JIT_, hue, 2, RL_ARG_)
#define BLUR_ARGS(X)                  \
    X(BLUR_, kernel_size, 2, RL_ARG_) \
    X(BLUR_, sigma, 2, RL_ARG_)
#define P_ARGS(X) X(P_, p, 1, RL_ARG_)
#define POST_ARGS(X) X(POST_, bits, 1, RL_ARG_) X(POST_, p, 1, RL_ARG_)
#define SOL_ARGS(X) X(SOL_, threshold, 1, RL_ARG_) X(SOL_, p, 1, RL_ARG_)
#define SHARP_ARGS(X) \
    X(SHARP_, sharpness_factor, 1, RL_ARG_) X(SHARP_, p, 1, RL_ARG_)
#define LAYOUT(prefix, list)                   \
    enum { list(RL_OP_ARG_AT) prefix##NARGS }; \
    static const rl_op_field prefix##fields[] = {list(RL_OP_FIELD) RL_OP_END};
LAYOUT(JIT_, JIT_ARGS)
LAYOUT(BLUR_, BLUR_ARGS)
LAYOUT(P_, P_ARGS)
LAYOUT(POST_, POST_ARGS)
LAYOUT(SOL_, SOL_ARGS)
LAYOUT(SHARP_, SHARP_ARGS)
/* The code below reads the jitter ranges in this order, a blur's sizes
 * and sigma where the list puts them, and an op's value first, its p
 * last. */
_Static_assert(JIT_brightness == 0 && JIT_contrast == 2 &&
                   JIT_saturation == 4 && JIT_hue == 6,
               "the jitter ranges in order");
_Static_assert(BLUR_kernel_size == 0 && BLUR_sigma == 2, "blur's fields");
_Static_assert(POST_bits == 0 && SOL_threshold == 0 &&
                   SHARP_sharpness_factor == 0,
               "an op's value first");
_Static_assert(P_p == P_NARGS - 1 && POST_p == POST_NARGS - 1 &&
                   SOL_p == SOL_NARGS - 1 && SHARP_p == SHARP_NARGS - 1,
               "p last");

#define MAX_KERNEL_SIZE 1001
static const rl_op_limit BLUR_limits[] = {
    {"max_kernel_size", MAX_KERNEL_SIZE},
    RL_OP_END,
};
#define JIT_limits NULL
#define P_limits NULL
#define POST_limits NULL
#define SOL_limits NULL
#define SHARP_limits NULL

/* The ops: kind, name, the prefix of their argument layout. An op is its
 * entry of color_ops, whose place (the kind) says what it does. */
#define COLOR_OPS(X)                      \
    X(K_JITTER, "color_jitter", JIT_)     \
    X(K_GRAY, "grayscale", P_)            \
    X(K_BLUR, "gaussian_blur", BLUR_)     \
    X(K_AUTOCONTRAST, "autocontrast", P_) \
    X(K_EQUALIZE, "equalize", P_)         \
    X(K_INVERT, "invert", P_)             \
    X(K_POSTERIZE, "posterize", POST_)    \
    X(K_SOLARIZE, "solarize", SOL_)       \
    X(K_SHARPNESS, "sharpness", SHARP_)
#define KIND_ENUM(kind, name, args) kind,
enum { COLOR_OPS(KIND_ENUM) K_COUNT };
static const rl_op_def color_ops[K_COUNT];
#define KIND(op) ((int)((op)->def - color_ops))

static int refuse(char *msg, int kind, const char *what, double v)
{
    snprintf(msg, RL_MSG_MAX, "%s: %s, not %g", color_ops[kind].name, what, v);
    return RL_ECONFIG;
}

static int check(int kind, const double *a, char *msg)
{
    static const char *jit[4] = {"brightness", "contrast", "saturation", "hue"};
    for (int k = 0; kind == K_JITTER && k < 4; k++) {
        double lo = a[2 * k], hi = a[2 * k + 1];
        double min = k == 3 ? -0.5 : 0.0, max = k == 3 ? 0.5 : 1e300;
        if (!(isnan(lo) && isnan(hi)) &&
            !(min <= lo && lo <= hi && hi <= max)) {
            snprintf(msg, RL_MSG_MAX,
                     "color_jitter: %s must be (min, max) in [%g, %g], not "
                     "(%g, %g)",
                     jit[k], min, max, lo, hi);
            return RL_ECONFIG;
        }
    }
    for (int k = 0; kind == K_BLUR && k < 2; k++) {
        if (!(a[k] >= 1 && a[k] <= MAX_KERNEL_SIZE && fmod(a[k], 2) == 1)) {
            return refuse(msg, kind, "kernel sizes must be odd, 1..1001", a[k]);
        }
    }
    if (kind == K_BLUR && !(a[2] > 0 && a[2] <= a[3] && a[3] < 1e300)) {
        return refuse(msg, kind, "sigma must be (min, max), 0 < min <= max",
                      a[2]);
    }
    if (kind == K_JITTER || kind == K_BLUR) {
        return 0;
    }
    if (kind == K_POSTERIZE && !(a[0] >= 0 && a[0] <= 8 && a[0] == (int)a[0])) {
        return refuse(msg, kind, "bits must be an integer in [0, 8]", a[0]);
    }
    if (kind == K_SOLARIZE && !(a[0] <= 255 && a[0] > -1e300)) {
        return refuse(msg, kind, "threshold must be at most 255", a[0]);
    }
    if (kind == K_SHARPNESS && !(a[0] >= 0 && a[0] < 1e300)) {
        return refuse(msg, kind, "factor must be non-negative", a[0]);
    }
    double p = a[color_ops[kind].nargs - 1];
    return p >= 0 && p <= 1 ? 0 : refuse(msg, kind, "p must be in [0, 1]", p);
}

static double lerp(rl_rng *g, double lo, double hi)
{
    return lo + rl_rng_uniform(g) * (hi - lo);
}

/* color_jitter: a uniform permutation of 0..3 (torch.randperm(4)), by
 * Fisher-Yates, then the factors of b, c, s, h, uniform in their ranges
 * (NaN for None). gaussian_blur: sigma. The others: one uniform number,
 * and the op applies when it is below p (torch.rand(1) < p). */
static void draw(const rl_op *op, rl_rng *g, int w, int h, double *params)
{
    (void)w;
    (void)h;
    const double *a = op->args;
    if (KIND(op) == K_JITTER) {
        int order[4] = {0, 1, 2, 3};
        for (int i = 3; i > 0; i--) {
            int j = (int)(rl_rng_uniform(g) * (i + 1));
            int t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        for (int k = 0; k < 4; k++) {
            params[k] = order[k];
            params[4 + k] =
                isnan(a[2 * k]) ? NAN : lerp(g, a[2 * k], a[2 * k + 1]);
        }
    } else if (KIND(op) == K_BLUR) {
        params[0] = lerp(g, a[2], a[3]);
    } else {
        params[0] = rl_rng_uniform(g);
    }
}

/* ColorJitter's transform: the factors in the drawn order, None skipped. */
static int jitter(const double *params, rl_image *img)
{
    int rc = 0;
    for (int k = 0; rc == 0 && k < 4; k++) {
        int fn = (int)params[k] & 3;
        double f = params[4 + fn];
        if (isnan(f)) {
            continue;
        }
        rc = fn == 0   ? rl_k_brightness(img, f)
             : fn == 1 ? rl_k_contrast(img, f)
             : fn == 2 ? rl_k_saturation(img, f)
                       : rl_k_hue(img, f);
    }
    return rc;
}

static int apply(const rl_op *op, const double *params, rl_image *img,
                 char *msg)
{
    (void)msg;
    const double *a = op->args;
    int kind = KIND(op);
    if (kind == K_JITTER) {
        return jitter(params, img);
    }
    if (kind == K_BLUR) {
        return rl_k_gaussian_blur(img, (int)a[0], (int)a[1], params[0],
                                  params[0]);
    }
    if (!(params[0] < a[color_ops[kind].nargs - 1])) {
        return 0; /* not this sample */
    }
    switch (kind) {
    case K_GRAY:
        return rl_k_grayscale(img);
    case K_AUTOCONTRAST:
        return rl_k_autocontrast(img);
    case K_EQUALIZE:
        return rl_k_equalize(img);
    case K_INVERT:
        return rl_k_invert(img);
    case K_POSTERIZE:
        return rl_k_posterize(img, (int)a[0]);
    case K_SOLARIZE:
        return rl_k_solarize(img, a[0]);
    default:
        return rl_k_sharpness(img, a[0]);
    }
}

/* check_K_... for each op, then its entry */
#define CHECK_FN(kind, name, args)                      \
    static int check_##kind(const double *a, char *msg) \
    {                                                   \
        return check(kind, a, msg);                     \
    }
COLOR_OPS(CHECK_FN)

#define ENTRY(kind, opname, args)     \
    [kind] = {.name = opname,         \
              .nargs = args##NARGS,   \
              .fields = args##fields, \
              .limits = args##limits, \
              .check = check_##kind,  \
              .draw = draw,           \
              .apply = apply,         \
              .still = true},
static const rl_op_def color_ops[K_COUNT] = {COLOR_OPS(ENTRY)};

#define POINTER(kind, name, args) &color_ops[kind],
const rl_op_def *const rl_color_ops[] = {COLOR_OPS(POINTER) NULL};
