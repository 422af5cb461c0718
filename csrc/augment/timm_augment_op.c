/*
 * augment/timm_augment_op.c - one of timm's AugmentOp calls
 * (timm.data.auto_augment), what every timm policy is made of: its draw,
 * its level function and its op on Pillow's kernels (pil.c), with the
 * checks of the arguments the policies share (augment/timm.h).
 *
 * DESIGN: timm builds a policy from AugmentOps, each an op name (a kind,
 * rl_timm_kinds), a probability and a magnitude, sharing hparams. Python
 * (ringloader/adapt/timm_ops.py) passes them as the policy's head and rows
 * (timm.h) and this file reproduces AugmentOp.__call__ per sample: the
 * probability test, the magnitude noise (Gaussian with magnitude_std,
 * uniform in [0, magnitude] for an infinite one), the clip to [0, upper],
 * the resampling filter drawn from the hparams' list, the random negation
 * of the signed kinds, then timm's level function (the op's argument from
 * the magnitude) and its op on Pillow's kernels. Every draw happens in
 * rl__timm_draw (a slot per call, timm.h), so rl__timm_run is a function of
 * the slot and the tests decode slots to call timm's own ops with the same
 * values. The draws follow timm's distributions, from the sample's own
 * stream, not Python's `random`: the same distributions, not the same
 * numbers. The policies that order the calls are timm.c's and
 * timm_augmix.c's.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>

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
_Static_assert(N_FUNCS == TM_NFUNCS, "timm.h's TM_NFUNCS");
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

int rl__timm_func(int func, double arg, int resample, const double *fill,
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
    int filter = rl_rng_index(g, (int)a[TM_n_filters]);
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
    int rc =
        rl__timm_func(func, arg, (int)a[TM_filters + filter], a + TM_fill, img);
    if (rc != 0) {
        snprintf(msg, RL_MSG_MAX, "out of memory");
    }
    return rc;
}

bool rl__timm_is_int(double v)
{
    return isfinite(v) && v == floor(v);
}

int rl__timm_fail(char *msg, const char *name, const char *what)
{
    snprintf(msg, RL_MSG_MAX, "%s: %s", name, what);
    return RL_ECONFIG;
}

bool rl__timm_fill_ok(const double *fill)
{
    for (int c = 0; c < 3; c++) {
        if (!(rl__timm_is_int(fill[c]) && fill[c] >= 0 && fill[c] <= 255)) {
            return false;
        }
    }
    return true;
}

bool rl__timm_filter_ok(double f)
{
    return f == RL_PIL_BILINEAR || f == RL_PIL_BICUBIC;
}

int rl__timm_check_head(const char *name, const double *a, char *msg)
{
    double upper = a[TM_magnitude_upper], n = a[TM_n_filters];
    if (isnan(a[TM_magnitude_std])) {
        return rl__timm_fail(msg, name, "magnitude_std is NaN");
    }
    if (!(upper >= 0 && upper <= TM_MAX_UPPER)) {
        return rl__timm_fail(msg, name,
                             "the magnitude's upper bound must be 0..1000");
    }
    if (!isfinite(a[TM_translate_const]) || !isfinite(a[TM_translate_pct])) {
        return rl__timm_fail(msg, name,
                             "translate_const and translate_pct: finite");
    }
    if (!rl__timm_fill_ok(a + TM_fill)) {
        return rl__timm_fail(msg, name,
                             "img_mean must be three integers 0..255");
    }
    if (!(rl__timm_is_int(n) && n >= 1 && n <= TM_MAX_FILTERS)) {
        return rl__timm_fail(msg, name, "1 to 3 resampling filters");
    }
    for (int i = 0; i < (int)n; i++) {
        if (!rl__timm_filter_ok(a[TM_filters + i])) {
            return rl__timm_fail(msg, name,
                                 "filters must be bilinear or bicubic");
        }
    }
    double rows = a[TM_n_rows];
    if (!(rl__timm_is_int(rows) && rows >= 1 && rows <= TM_MAX_ROWS)) {
        return rl__timm_fail(msg, name, "1 to 64 ops");
    }
    for (int i = 0; i < (int)rows; i++) {
        const double *r = a + TM_rows + i * TM_ROW_NARGS;
        if (!(rl__timm_is_int(r[TM_ROW_kind]) && r[TM_ROW_kind] >= 0 &&
              r[TM_ROW_kind] < N_TKINDS)) {
            return rl__timm_fail(msg, name, "an op of unknown kind");
        }
        if (!isfinite(r[TM_ROW_prob]) || !isfinite(r[TM_ROW_magnitude])) {
            return rl__timm_fail(msg, name,
                                 "an op's prob and magnitude: finite");
        }
    }
    return 0;
}
