/*
 * augment/timm.c - timm's augmentations (timm.data.auto_augment):
 * RandAugment and AutoAugment, made of timm's AugmentOp calls on Pillow's
 * kernels (pil.c), and `timm_op`, one of timm's op functions with a fixed
 * argument (what the tests compare with timm's own function).
 *
 * DESIGN: timm builds a policy from AugmentOps, each an op name (a kind,
 * rl_timm_kinds), a probability and a magnitude, sharing hparams. Python
 * (ringloader/_timm_ops.py) passes them as the policy's head and rows
 * (timm.h) and this file reproduces AugmentOp.__call__ per sample: the
 * probability test, the magnitude noise (Gaussian with magnitude_std,
 * uniform in [0, magnitude] for an infinite one), the clip to [0, upper],
 * the resampling filter drawn from the hparams' list, the random negation
 * of the signed kinds, then timm's level function (the op's argument from
 * the magnitude) and its op on Pillow's kernels. Every draw happens in
 * `draw` (a slot per call, timm.h), so `apply` is a function of the slots
 * and the tests decode them to call timm's own ops with the same values.
 * The draws follow timm's distributions, from the sample's own stream, not
 * Python's `random`: the same distributions, not the same numbers.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "augment/timm.h"

/* timm's op names (NAME_TO_OP), by kind number. */
#define TIMM_KINDS(X)                           \
    X(T_AUTOCONTRAST, "AutoContrast")           \
    X(T_EQUALIZE, "Equalize")                   \
    X(T_INVERT, "Invert")                       \
    X(T_ROTATE, "Rotate")                       \
    X(T_POSTERIZE, "Posterize")                 \
    X(T_POSTERIZE_INC, "PosterizeIncreasing")   \
    X(T_POSTERIZE_ORIG, "PosterizeOriginal")    \
    X(T_SOLARIZE, "Solarize")                   \
    X(T_SOLARIZE_INC, "SolarizeIncreasing")     \
    X(T_SOLARIZE_ADD, "SolarizeAdd")            \
    X(T_COLOR, "Color")                         \
    X(T_COLOR_INC, "ColorIncreasing")           \
    X(T_CONTRAST, "Contrast")                   \
    X(T_CONTRAST_INC, "ContrastIncreasing")     \
    X(T_BRIGHTNESS, "Brightness")               \
    X(T_BRIGHTNESS_INC, "BrightnessIncreasing") \
    X(T_SHARPNESS, "Sharpness")                 \
    X(T_SHARPNESS_INC, "SharpnessIncreasing")   \
    X(T_SHEAR_X, "ShearX")                      \
    X(T_SHEAR_Y, "ShearY")                      \
    X(T_TRANSLATE_X, "TranslateX")              \
    X(T_TRANSLATE_Y, "TranslateY")              \
    X(T_TRANSLATE_X_REL, "TranslateXRel")       \
    X(T_TRANSLATE_Y_REL, "TranslateYRel")       \
    X(T_DESATURATE, "Desaturate")               \
    X(T_GAUSSIAN_BLUR, "GaussianBlur")          \
    X(T_GAUSSIAN_BLUR_RAND, "GaussianBlurRand")
#define ENUM_OF(e, name) e,
#define NAME_OF(e, name) [e] = name,
enum { TIMM_KINDS(ENUM_OF) N_TKINDS };
const char *const rl_timm_kinds[] = {TIMM_KINDS(NAME_OF) NULL};

/* timm's op functions (auto_augment.py), by number: timm_op's `func`. */
#define TIMM_FUNCS(X)                       \
    X(F_AUTO_CONTRAST, "auto_contrast")     \
    X(F_EQUALIZE, "equalize")               \
    X(F_INVERT, "invert")                   \
    X(F_ROTATE, "rotate")                   \
    X(F_POSTERIZE, "posterize")             \
    X(F_SOLARIZE, "solarize")               \
    X(F_SOLARIZE_ADD, "solarize_add")       \
    X(F_COLOR, "color")                     \
    X(F_CONTRAST, "contrast")               \
    X(F_BRIGHTNESS, "brightness")           \
    X(F_SHARPNESS, "sharpness")             \
    X(F_SHEAR_X, "shear_x")                 \
    X(F_SHEAR_Y, "shear_y")                 \
    X(F_TRANSLATE_X_ABS, "translate_x_abs") \
    X(F_TRANSLATE_Y_ABS, "translate_y_abs") \
    X(F_TRANSLATE_X_REL, "translate_x_rel") \
    X(F_TRANSLATE_Y_REL, "translate_y_rel") \
    X(F_DESATURATE, "desaturate")           \
    X(F_GAUSSIAN_BLUR, "gaussian_blur")
enum { TIMM_FUNCS(ENUM_OF) N_FUNCS };
const char *const rl_timm_funcs[] = {TIMM_FUNCS(NAME_OF) NULL};

const rl_op_field TM_ROW_fields[] = {TM_ROW_ARGS(RL_OP_FIELD) RL_OP_END};

#define LEVEL_DENOM 10.0 /* timm's _LEVEL_DENOM */

/* The kinds timm's level functions negate half of the time. */
static bool is_signed(int kind)
{
    switch (kind) {
    case T_ROTATE:
    case T_COLOR_INC:
    case T_CONTRAST_INC:
    case T_BRIGHTNESS_INC:
    case T_SHARPNESS_INC:
    case T_SHEAR_X:
    case T_SHEAR_Y:
    case T_TRANSLATE_X:
    case T_TRANSLATE_Y:
    case T_TRANSLATE_X_REL:
    case T_TRANSLATE_Y_REL:
        return true;
    default:
        return false;
    }
}

/* timm's op function `func` with argument arg on img (resample: Pillow's
 * filter number; fill: the three fill values). */
static int run_func(int func, double arg, int resample, const double *fill,
                    rl_image *img)
{
    uint8_t f[3] = {(uint8_t)fill[0], (uint8_t)fill[1], (uint8_t)fill[2]};
    double m[6] = {1, 0, 0, 0, 1, 0};
    switch (func) {
    case F_AUTO_CONTRAST:
        return rl_pil_autocontrast(img);
    case F_EQUALIZE:
        return rl_pil_equalize(img);
    case F_INVERT:
        return rl_pil_invert(img);
    case F_ROTATE:
        return rl_pil_rotate(img, arg, resample, f);
    case F_POSTERIZE:
        return rl_pil_posterize(img, (int)arg);
    case F_SOLARIZE:
        return rl_pil_solarize(img, (int)arg);
    case F_SOLARIZE_ADD:
        return rl_pil_solarize_add(img, (int)arg, 128);
    case F_COLOR:
        return rl_pil_color(img, arg);
    case F_CONTRAST:
        return rl_pil_contrast(img, arg);
    case F_BRIGHTNESS:
        return rl_pil_brightness(img, arg);
    case F_SHARPNESS:
        return rl_pil_sharpness(img, arg);
    case F_GAUSSIAN_BLUR:
        return rl_pil_gaussian_blur(img, arg);
    case F_DESATURATE: /* enhance factor 1 - arg, within [0, 1] */
        return rl_pil_color(img, fmin(1.0, fmax(0.0, 1.0 - arg)));
    case F_SHEAR_X:
        m[1] = arg;
        break;
    case F_SHEAR_Y:
        m[3] = arg;
        break;
    case F_TRANSLATE_X_ABS:
        m[2] = arg;
        break;
    case F_TRANSLATE_Y_ABS:
        m[5] = arg;
        break;
    case F_TRANSLATE_X_REL: /* pct * img.size[0] */
        m[2] = arg * img->w;
        break;
    case F_TRANSLATE_Y_REL:
        m[5] = arg * img->h;
        break;
    default:
        return 0;
    }
    return rl_pil_affine(img, m, resample, f);
}

/* timm's LEVEL_TO_ARG for kind at magnitude m (clipped), negated where
 * timm's _randomly_negate did: the argument of its function, *func. */
static double level(const double *a, int kind, double m, bool neg, int *func)
{
    double l = m / LEVEL_DENOM, v;
    switch (kind) {
    case T_ROTATE:
        *func = F_ROTATE;
        v = l * 30.0;
        return neg ? -v : v;
    case T_POSTERIZE:
    case T_POSTERIZE_INC:
    case T_POSTERIZE_ORIG:
        *func = F_POSTERIZE;
        v = (double)(int)(l * 4);
        return kind == T_POSTERIZE       ? v
               : kind == T_POSTERIZE_INC ? 4 - v
                                         : v + 4;
    case T_SOLARIZE:
    case T_SOLARIZE_INC:
        *func = F_SOLARIZE;
        v = fmin(256.0, (double)(int)(l * 256));
        return kind == T_SOLARIZE ? v : 256 - v;
    case T_SOLARIZE_ADD:
        *func = F_SOLARIZE_ADD;
        return fmin(128.0, (double)(int)(l * 110));
    case T_SHEAR_X:
    case T_SHEAR_Y:
        *func = kind == T_SHEAR_X ? F_SHEAR_X : F_SHEAR_Y;
        v = l * 0.3;
        return neg ? -v : v;
    case T_TRANSLATE_X:
    case T_TRANSLATE_Y:
        *func = kind == T_TRANSLATE_X ? F_TRANSLATE_X_ABS : F_TRANSLATE_Y_ABS;
        v = l * a[TM_translate_const];
        return neg ? -v : v;
    case T_TRANSLATE_X_REL:
    case T_TRANSLATE_Y_REL:
        *func =
            kind == T_TRANSLATE_X_REL ? F_TRANSLATE_X_REL : F_TRANSLATE_Y_REL;
        v = l * a[TM_translate_pct];
        return neg ? -v : v;
    case T_DESATURATE: /* _minmax_level_to_arg(0.5, 1.0), clamped */
        *func = F_DESATURATE;
        v = 0.5 + (1.0 - 0.5) * l;
        return fmax(0.5, fmin(1.0, v));
    case T_GAUSSIAN_BLUR: /* _minmax_level_to_arg(0.1, 2.0), clamped */
        *func = F_GAUSSIAN_BLUR;
        v = 0.1 + (2.0 - 0.1) * l;
        return fmax(0.1, fmin(2.0, v));
    case T_GAUSSIAN_BLUR_RAND: /* the slot holds the radius drawn */
        *func = F_GAUSSIAN_BLUR;
        return m;
    case T_AUTOCONTRAST:
        *func = F_AUTO_CONTRAST;
        return 0;
    case T_EQUALIZE:
        *func = F_EQUALIZE;
        return 0;
    case T_INVERT:
        *func = F_INVERT;
        return 0;
    default:
        break;
    }
    /* the enhance ops, Color .. SharpnessIncreasing in pairs */
    int pair = (kind - T_COLOR) / 2;
    static const int funcs[4] = {F_COLOR, F_CONTRAST, F_BRIGHTNESS,
                                 F_SHARPNESS};
    *func = funcs[pair];
    if ((kind - T_COLOR) % 2 == 0) {
        return l * 1.8 + 0.1;
    }
    v = l * 0.9;
    return fmax(0.1, 1.0 + (neg ? -v : v));
}

int rl__timm_pick(rl_rng *g, int n)
{
    int i = (int)(rl_rng_uniform(g) * n);
    return i < n ? i : n - 1;
}

/* A standard normal variate (Box-Muller). */
static double normal(rl_rng *g)
{
    double r = sqrt(-2.0 * log(1.0 - rl_rng_uniform(g)));
    return r * cos(2.0 * M_PI * rl_rng_uniform(g));
}

double rl__timm_draw(const double *a, int row, rl_rng *g)
{
    const double *r = a + TM_rows + row * TM_ROW_NARGS;
    double prob = r[TM_ROW_prob];
    /* AugmentOp: skipped when prob < 1 and random() > prob */
    if (prob < 1.0 && rl_rng_uniform(g) > prob) {
        return 0.0;
    }
    double m = r[TM_ROW_magnitude], std = a[TM_magnitude_std];
    if (std > 0) {
        m = isinf(std) ? m * rl_rng_uniform(g) : m + std * normal(g);
    }
    m = fmax(0.0, fmin(m, a[TM_magnitude_upper]));
    if ((int)r[TM_ROW_kind] == T_GAUSSIAN_BLUR_RAND) {
        /* gaussian_blur_rand: factor = clamp(m / 10, 0, 1), then the
         * radius uniform(0.1, 2 factor), which the slot holds */
        double factor = fmax(0.0, fmin(1.0, m / LEVEL_DENOM));
        m = 0.1 + (2.0 * factor - 0.1) * rl_rng_uniform(g);
    }
    int filter = rl__timm_pick(g, (int)a[TM_n_filters]);
    bool neg = is_signed((int)r[TM_ROW_kind]) && rl_rng_uniform(g) < 0.5;
    double code = 1 + row + TM_MAX_ROWS * (filter + 3 * (neg ? 1 : 0));
    return code * TM_SLOT_SCALE + m;
}

int rl__timm_run(const double *a, double slot, rl_image *img, char *msg)
{
    if (!(slot > 0)) {
        return 0;
    }
    double code = floor(slot / TM_SLOT_SCALE);
    double m = slot - code * TM_SLOT_SCALE;
    int c = (int)code - 1;
    int row = c % TM_MAX_ROWS, filter = (c / TM_MAX_ROWS) % 3;
    bool neg = c / TM_MAX_ROWS / 3 != 0;
    const double *r = a + TM_rows + row * TM_ROW_NARGS;
    int func = 0;
    double arg = level(a, (int)r[TM_ROW_kind], m, neg, &func);
    int rc = run_func(func, arg, (int)a[TM_filters + filter], a + TM_fill, img);
    if (rc != 0) {
        snprintf(msg, RL_MSG_MAX, "out of memory");
    }
    return rc;
}

static bool is_int(double v)
{
    return isfinite(v) && v == floor(v);
}

static int fail(char *msg, const char *name, const char *what)
{
    snprintf(msg, RL_MSG_MAX, "%s: %s", name, what);
    return RL_ECONFIG;
}

static bool check_fill(const double *fill)
{
    for (int c = 0; c < 3; c++) {
        if (!(is_int(fill[c]) && fill[c] >= 0 && fill[c] <= 255)) {
            return false;
        }
    }
    return true;
}

static bool is_filter(double f)
{
    return f == RL_PIL_BILINEAR || f == RL_PIL_BICUBIC;
}

int rl__timm_check_head(const char *name, const double *a, char *msg)
{
    double upper = a[TM_magnitude_upper], n = a[TM_n_filters];
    if (isnan(a[TM_magnitude_std])) {
        return fail(msg, name, "magnitude_std is NaN");
    }
    if (!(upper >= 0 && upper <= TM_MAX_UPPER)) {
        return fail(msg, name, "the magnitude's upper bound must be 0..1000");
    }
    if (!isfinite(a[TM_translate_const]) || !isfinite(a[TM_translate_pct])) {
        return fail(msg, name, "translate_const and translate_pct: finite");
    }
    if (!check_fill(a + TM_fill)) {
        return fail(msg, name, "img_mean must be three integers 0..255");
    }
    if (!(is_int(n) && n >= 1 && n <= TM_MAX_FILTERS)) {
        return fail(msg, name, "1 to 3 resampling filters");
    }
    for (int i = 0; i < (int)n; i++) {
        if (!is_filter(a[TM_filters + i])) {
            return fail(msg, name, "filters must be bilinear or bicubic");
        }
    }
    double rows = a[TM_n_rows];
    if (!(is_int(rows) && rows >= 1 && rows <= TM_MAX_ROWS)) {
        return fail(msg, name, "1 to 64 ops");
    }
    for (int i = 0; i < (int)rows; i++) {
        const double *r = a + TM_rows + i * TM_ROW_NARGS;
        if (!(is_int(r[TM_ROW_kind]) && r[TM_ROW_kind] >= 0 &&
              r[TM_ROW_kind] < N_TKINDS)) {
            return fail(msg, name, "an op of unknown kind");
        }
        if (!isfinite(r[TM_ROW_prob]) || !isfinite(r[TM_ROW_magnitude])) {
            return fail(msg, name, "an op's prob and magnitude: finite");
        }
    }
    return 0;
}

/* ---- timm_op: one of timm's op functions, its argument fixed ----
 * args: func (rl_timm_funcs), arg, resample (Pillow's number), fill
 * params: none */

#define TO_ARGS(X)               \
    X(TO_, func, 1, RL_ARG_)     \
    X(TO_, arg, 1, RL_ARG_)      \
    X(TO_, resample, 1, RL_ARG_) \
    X(TO_, fill, 3, RL_ARG_)
enum { TO_ARGS(RL_OP_ARG_AT) TO_NARGS };
static const rl_op_field TO_fields[] = {TO_ARGS(RL_OP_FIELD) RL_OP_END};

static int to_check(const double *a, char *msg)
{
    if (!(is_int(a[TO_func]) && a[TO_func] >= 0 && a[TO_func] < N_FUNCS)) {
        return fail(msg, "timm_op", "unknown func");
    }
    if (!isfinite(a[TO_arg]) || fabs(a[TO_arg]) > 1e9) {
        return fail(msg, "timm_op", "arg must be finite");
    }
    if (!is_filter(a[TO_resample]) || !check_fill(a + TO_fill)) {
        return fail(msg, "timm_op",
                    "resample bilinear or bicubic, fill 0..255");
    }
    return 0;
}

static int to_apply(const rl_op *op, const double *params, rl_image *img,
                    char *msg)
{
    (void)params;
    const double *a = op->args;
    int rc = run_func((int)a[TO_func], a[TO_arg], (int)a[TO_resample],
                      a + TO_fill, img);
    if (rc != 0) {
        snprintf(msg, RL_MSG_MAX, "out of memory");
    }
    return rc;
}

static const rl_op_def timm_op = {
    .name = "timm_op",
    .nargs = TO_NARGS,
    .fields = TO_fields,
    .check = to_check,
    .apply = to_apply,
};

/* ---- RandAugment ----
 * args: the head, num_layers, weighted (0: uniform with replacement; 1:
 * by weights, without replacement, as numpy's choice), weights (a row's)
 * params: one slot a layer */

#define TRA_OWN(X)                  \
    X(TRA_, num_layers, 1, RL_ARG_) \
    X(TRA_, weighted, 1, RL_ARG_)   \
    X(TRA_, weights, TM_MAX_ROWS, RL_ARG_)
enum { TRA_base_ = TM_NARGS - 1, TRA_OWN(RL_OP_ARG_AT) TRA_NARGS };
static const rl_op_field TRA_fields[] = {TM_HEAD_ARGS(RL_OP_FIELD)
                                             TRA_OWN(RL_OP_FIELD) RL_OP_END};
static const rl_op_limit TRA_limits[] = {{"max_layers", RL_OP_MAX_PARAMS},
                                         {"max_rows", TM_MAX_ROWS},
                                         {"max_upper", TM_MAX_UPPER},
                                         {"slot_scale", (int)TM_SLOT_SCALE},
                                         RL_OP_END};

static int tra_check(const double *a, char *msg)
{
    int rc = rl__timm_check_head("timm_rand_augment", a, msg);
    if (rc != 0) {
        return rc;
    }
    double n = a[TRA_num_layers];
    if (!(is_int(n) && n >= 0 && n <= RL_OP_MAX_PARAMS)) {
        return fail(msg, "timm_rand_augment", "num_layers must be 0..16");
    }
    if (a[TRA_weighted] != 0) {
        int positive = 0;
        for (int i = 0; i < (int)a[TM_n_rows]; i++) {
            double w = a[TRA_weights + i];
            if (!(isfinite(w) && w >= 0)) {
                return fail(msg, "timm_rand_augment", "weights must be >= 0");
            }
            positive += w > 0;
        }
        if (positive < n) {
            return fail(msg, "timm_rand_augment",
                        "fewer ops of positive weight than layers");
        }
    }
    return 0;
}

static void tra_draw(const rl_op *op, rl_rng *g, int w, int h, double *params)
{
    (void)w;
    (void)h;
    const double *a = op->args;
    int n = (int)a[TRA_num_layers], rows = (int)a[TM_n_rows];
    double weights[TM_MAX_ROWS];
    memcpy(weights, a + TRA_weights, sizeof(double) * rows);
    for (int i = 0; i < n; i++) {
        int row = 0;
        if (a[TRA_weighted] == 0) {
            row = rl__timm_pick(g, rows);
        } else {
            /* successive draws without replacement: the distribution of
             * numpy's choice(replace=False, p=...) */
            double total = 0;
            for (int k = 0; k < rows; k++) {
                total += weights[k];
            }
            double u = rl_rng_uniform(g) * total, acc = 0;
            row = -1;
            for (int k = 0; k < rows; k++) {
                acc += weights[k];
                if (weights[k] > 0) {
                    row = k;
                    if (u < acc) {
                        break;
                    }
                }
            }
            weights[row] = 0;
        }
        params[i] = rl__timm_draw(a, row, g);
    }
}

static int tra_apply(const rl_op *op, const double *params, rl_image *img,
                     char *msg)
{
    for (int i = 0; i < (int)op->args[TRA_num_layers]; i++) {
        int rc = rl__timm_run(op->args, params[i], img, msg);
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}

static const rl_op_def timm_rand_augment = {
    .name = "timm_rand_augment",
    .nargs = TRA_NARGS,
    .fields = TRA_fields,
    .limits = TRA_limits,
    .check = tra_check,
    .draw = tra_draw,
    .apply = tra_apply,
};

/* ---- AutoAugment ----
 * args: the head (rows: the sub-policies' ops, sub-policy by
 * sub-policy), n_sub, ops_per_sub (timm's policies have sub-policies
 * of one length)
 * params: one slot a sub-policy op, then the sub-policy drawn */

#define TAA_OWN(X)             \
    X(TAA_, n_sub, 1, RL_ARG_) \
    X(TAA_, ops_per_sub, 1, RL_ARG_)
enum { TAA_base_ = TM_NARGS - 1, TAA_OWN(RL_OP_ARG_AT) TAA_NARGS };
static const rl_op_field TAA_fields[] = {TM_HEAD_ARGS(RL_OP_FIELD)
                                             TAA_OWN(RL_OP_FIELD) RL_OP_END};
static const rl_op_limit TAA_limits[] = {
    {"max_ops_per_sub", RL_OP_MAX_PARAMS - 1}, RL_OP_END};

static int taa_check(const double *a, char *msg)
{
    int rc = rl__timm_check_head("timm_auto_augment", a, msg);
    if (rc != 0) {
        return rc;
    }
    double n = a[TAA_n_sub], k = a[TAA_ops_per_sub];
    if (!(is_int(n) && is_int(k) && n >= 1 && k >= 1 &&
          k <= RL_OP_MAX_PARAMS - 1 && n * k == a[TM_n_rows])) {
        return fail(msg, "timm_auto_augment",
                    "n_sub sub-policies of ops_per_sub ops (at most 15) "
                    "must make the rows");
    }
    return 0;
}

static void taa_draw(const rl_op *op, rl_rng *g, int w, int h, double *params)
{
    (void)w;
    (void)h;
    const double *a = op->args;
    int k = (int)a[TAA_ops_per_sub];
    int sub = rl__timm_pick(g, (int)a[TAA_n_sub]);
    for (int j = 0; j < k; j++) {
        params[j] = rl__timm_draw(a, sub * k + j, g);
    }
    params[RL_OP_MAX_PARAMS - 1] = sub;
}

static int taa_apply(const rl_op *op, const double *params, rl_image *img,
                     char *msg)
{
    for (int j = 0; j < (int)op->args[TAA_ops_per_sub]; j++) {
        int rc = rl__timm_run(op->args, params[j], img, msg);
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}

static const rl_op_def timm_auto_augment = {
    .name = "timm_auto_augment",
    .nargs = TAA_NARGS,
    .fields = TAA_fields,
    .limits = TAA_limits,
    .check = taa_check,
    .draw = taa_draw,
    .apply = taa_apply,
};

const rl_op_def *const rl_timm_ops[] = {
    &timm_op, &timm_rand_augment, &timm_auto_augment, &rl__timm_augmix, NULL,
};
