/*
 * augment/policy.c - the learned and random policies: TrivialAugmentWide,
 * RandAugment and AutoAugment (ImageNet, CIFAR10 and SVHN policies).
 *
 * DESIGN: a policy picks sub-ops per sample from a list of 15 kinds and
 * runs them with the kernels of kernels.h, exactly as torchvision's
 * _apply_image_or_video_transform would with the same op and magnitude.
 * The magnitudes are not computed here: torchvision takes them from
 * torch.linspace tables whose last bits depend on torch's vector code, and
 * a magnitude one float step off moves a solarize threshold across a pixel
 * value or a rotated pixel to its neighbour. Python makes the tables with
 * the user's torch and the user's transform object (ringloader/adapt/torchvision_ops.py) and
 * passes them as the op's arguments (its `table` field, a row per kind with
 * a table); this file indexes them. The kinds' names, and so their
 * numbers, are exported to Python from rl_policy_kinds.
 *
 * Draws (per sample, all before any apply): which sub-op(s), the magnitude
 * bin, the sign, and for AutoAugment whether each sub-op runs. torchvision
 * draws a bin and a sign only for ops that use them; drawing them always
 * changes nothing in the distribution of what is applied.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>

#include "augment/kernels.h"

/* The kinds of sub-op, in torchvision's order (TrivialAugmentWide and
 * RandAugment pick uniformly among the first 14), with torchvision's
 * names (rl_policy_kinds: Python maps AugMix's sub-ops by name). */
#define POLICY_KINDS(X)               \
    X(K_IDENTITY, "Identity")         \
    X(K_SHEAR_X, "ShearX")            \
    X(K_SHEAR_Y, "ShearY")            \
    X(K_TRANSLATE_X, "TranslateX")    \
    X(K_TRANSLATE_Y, "TranslateY")    \
    X(K_ROTATE, "Rotate")             \
    X(K_BRIGHTNESS, "Brightness")     \
    X(K_COLOR, "Color")               \
    X(K_CONTRAST, "Contrast")         \
    X(K_SHARPNESS, "Sharpness")       \
    X(K_POSTERIZE, "Posterize")       \
    X(K_SOLARIZE, "Solarize")         \
    X(K_AUTOCONTRAST, "AutoContrast") \
    X(K_EQUALIZE, "Equalize")         \
    X(K_INVERT, "Invert")
#define KIND_ENUM(kind, name) kind,
enum { POLICY_KINDS(KIND_ENUM) N_KINDS };
_Static_assert(N_KINDS == RL_POLICY_N_KINDS, "augment.h's count of kinds");

/* Kinds with a magnitude table: K_SHEAR_X .. K_SOLARIZE, in that order
 * (a table's rows); the policies' tables have up to MAX_BINS bins. */
#define HAS_TABLE(kind) ((kind) >= K_SHEAR_X && (kind) <= K_SOLARIZE)
#define N_MAG_KINDS (K_SOLARIZE - K_SHEAR_X + 1)
#define MAX_BINS 32

#define KIND_ROW(kind, name) [kind] = {name, HAS_TABLE(kind)},
const rl_policy_kind rl_policy_kinds[] = {POLICY_KINDS(KIND_ROW){NULL, false}};

static bool has_magnitude(int kind)
{
    return HAS_TABLE(kind);
}

/* Magnitudes of the signed kinds are negated half of the time. */
static bool is_signed(int kind)
{
    return kind >= K_SHEAR_X && kind <= K_SHARPNESS;
}

/* The fields every policy's arguments have: interpolation and fill
 * (three NaN for fill=None). */
typedef struct common {
    rl_interp interp;
    const double *fill;
} common;

static common common_of(double interp, const double *fill)
{
    common c = {interp != 0 ? RL_INTERP_BILINEAR : RL_INTERP_NEAREST,
                isnan(fill[0]) ? NULL : fill};
    return c;
}

int rl_policy_check_common(const char *name, double interp, const double *fill,
                           char *msg)
{
    if (interp != 0 && interp != 1) {
        snprintf(msg, RL_MSG_MAX,
                 "%s: interpolation must be 0 (nearest) or 1 (bilinear)", name);
        return RL_ECONFIG;
    }
    for (int c = 0; c < 3; c++) {
        if (isnan(fill[0]) != isnan(fill[c]) ||
            (!isnan(fill[c]) && !(fill[c] >= 0 && fill[c] <= 255))) {
            snprintf(msg, RL_MSG_MAX,
                     "%s: fill must be None or three values in [0, 255]", name);
            return RL_ECONFIG;
        }
    }
    return 0;
}

/* torchvision's op `kind` with `magnitude` on img (kernels.h). */
int rl_policy_apply(rl_image *img, int kind, double magnitude, rl_interp interp,
                    const double *fill)
{
    double m[6];
    double w = img->w, h = img->h;
    switch (kind) {
    case K_SHEAR_X: /* about the top-left corner: center [0, 0] */
        rl_affine_inverse(-0.5 * w, -0.5 * h, 0, 0, 0, 1,
                          atan(magnitude) * (180.0 / M_PI), 0, m);
        return rl_k_affine(img, m, interp, fill);
    case K_SHEAR_Y:
        rl_affine_inverse(-0.5 * w, -0.5 * h, 0, 0, 0, 1, 0,
                          atan(magnitude) * (180.0 / M_PI), m);
        return rl_k_affine(img, m, interp, fill);
    case K_TRANSLATE_X: /* int(magnitude): towards zero */
        rl_affine_inverse(0, 0, 0, trunc(magnitude), 0, 1, 0, 0, m);
        return rl_k_affine(img, m, interp, fill);
    case K_TRANSLATE_Y:
        rl_affine_inverse(0, 0, 0, 0, trunc(magnitude), 1, 0, 0, m);
        return rl_k_affine(img, m, interp, fill);
    case K_ROTATE:
        return rl_k_rotate(img, magnitude, interp, NULL, fill);
    case K_BRIGHTNESS:
        return rl_k_brightness(img, 1.0 + magnitude);
    case K_COLOR:
        return rl_k_saturation(img, 1.0 + magnitude);
    case K_CONTRAST:
        return rl_k_contrast(img, 1.0 + magnitude);
    case K_SHARPNESS:
        return rl_k_sharpness(img, 1.0 + magnitude);
    case K_POSTERIZE:
        return rl_k_posterize(img, (int)magnitude);
    case K_SOLARIZE: /* the table holds thresholds in pixel values */
        return rl_k_solarize(img, magnitude);
    case K_AUTOCONTRAST:
        return rl_k_autocontrast(img);
    case K_EQUALIZE:
        return rl_k_equalize(img);
    case K_INVERT:
        return rl_k_invert(img);
    default:
        return 0;
    }
}

/* The sign of a signed kind's magnitude: negative with probability 1/2. */
static double sign(rl_rng *g)
{
    return rl_rng_uniform(g) < 0.5 ? -1.0 : 1.0;
}

/* Runs the sub-ops listed in params as (kind, magnitude) pairs; a kind < 0
 * is skipped. */
static int run_pairs(const double *params, int n, rl_image *img, common c,
                     char *msg)
{
    for (int i = 0; i < n; i++) {
        int kind = (int)params[2 * i];
        if (kind < 0) {
            continue;
        }
        int rc =
            rl_policy_apply(img, kind, params[2 * i + 1], c.interp, c.fill);
        if (rc != 0) {
            snprintf(msg, RL_MSG_MAX, "%s",
                     rc == -ENOMEM ? "out of memory"
                                   : "image too large for a warp");
            return rc;
        }
    }
    return 0;
}

static int check_table(const char *name, const double *t, int bins, char *msg)
{
    for (int i = 0; i < N_MAG_KINDS * bins; i++) {
        if (!isfinite(t[i])) {
            snprintf(msg, RL_MSG_MAX, "%s: magnitude table has %g", name, t[i]);
            return RL_ECONFIG;
        }
    }
    return 0;
}

/* The signed magnitude of kind at bin of a table of `bins` bins a kind. */
static double magnitude_of(const double *table, int bins, int kind, int bin,
                           double s)
{
    if (!has_magnitude(kind)) {
        return 0.0;
    }
    double v = table[(kind - K_SHEAR_X) * bins + bin];
    return is_signed(kind) ? v * s : v;
}

/* ---- TrivialAugmentWide ----
 * args: num_magnitude_bins, interpolation, fill, table (a row of MAX_BINS
 * magnitudes per kind with a table, the first num_magnitude_bins used)
 * params: [kind, magnitude, bin, sign] */

#define TA_ROW_ARGS(X) X(TA_ROW_, magnitudes, MAX_BINS, RL_ARG_)
enum { TA_ROW_ARGS(RL_OP_ARG_AT) TA_ROW_NARGS };
static const rl_op_field TA_ROW_fields[] = {TA_ROW_ARGS(RL_OP_FIELD) RL_OP_END};

#define TA_ARGS(X)                         \
    X(TA_, num_magnitude_bins, 1, RL_ARG_) \
    X(TA_, interpolation, 1, RL_ARG_)      \
    X(TA_, fill, 3, RL_ARG_)               \
    X(TA_, table, N_MAG_KINDS, TA_ROW_)
enum { TA_ARGS(RL_OP_ARG_AT) TA_NARGS };
static const rl_op_field TA_fields[] = {TA_ARGS(RL_OP_FIELD) RL_OP_END};

static int ta_check(const double *a, char *msg)
{
    double bins = a[TA_num_magnitude_bins];
    if (!(bins >= 1 && bins <= MAX_BINS && bins == floor(bins))) {
        snprintf(msg, RL_MSG_MAX,
                 "trivial_augment: num_magnitude_bins must be 1..%d", MAX_BINS);
        return RL_ECONFIG;
    }
    if (rl_policy_check_common("trivial_augment", a[TA_interpolation],
                               a + TA_fill, msg) != 0) {
        return RL_ECONFIG;
    }
    return check_table("trivial_augment", a + TA_table, MAX_BINS, msg);
}

static void ta_draw(const rl_op *op, rl_rng *g, int w, int h, double *params)
{
    (void)w;
    (void)h;
    int bins = (int)op->args[TA_num_magnitude_bins];
    int kind = rl_rng_index(g, 14);
    int bin = rl_rng_index(g, bins);
    double s = sign(g);
    params[0] = kind;
    params[1] = magnitude_of(op->args + TA_table, MAX_BINS, kind, bin, s);
    params[2] = bin;
    params[3] = s;
}

static int ta_apply(const rl_op *op, const double *params, rl_image *img,
                    char *msg)
{
    const double *a = op->args;
    return run_pairs(params, 1, img,
                     common_of(a[TA_interpolation], a + TA_fill), msg);
}

static const rl_op_def trivial_augment = {
    .name = "trivial_augment",
    .nargs = TA_NARGS,
    .fields = TA_fields,
    .check = ta_check,
    .draw = ta_draw,
    .apply = ta_apply,
};

/* ---- RandAugment ----
 * args: num_ops, interpolation, fill, magnitudes (each kind with a table
 * at the configured bin)
 * params: [kind, magnitude] per sub-op */

#define RA_MAX_OPS (RL_OP_MAX_PARAMS / 2)

#define RA_ARGS(X)                    \
    X(RA_, num_ops, 1, RL_ARG_)       \
    X(RA_, interpolation, 1, RL_ARG_) \
    X(RA_, fill, 3, RL_ARG_)          \
    X(RA_, magnitudes, N_MAG_KINDS, RL_ARG_)
enum { RA_ARGS(RL_OP_ARG_AT) RA_NARGS };
static const rl_op_field RA_fields[] = {RA_ARGS(RL_OP_FIELD) RL_OP_END};
static const rl_op_limit RA_limits[] = {{"max_num_ops", RA_MAX_OPS}, RL_OP_END};

static int ra_check(const double *a, char *msg)
{
    double n = a[RA_num_ops];
    if (!(n >= 0 && n <= RA_MAX_OPS && n == floor(n))) {
        snprintf(msg, RL_MSG_MAX, "rand_augment: num_ops must be 0..%d",
                 RA_MAX_OPS);
        return RL_ECONFIG;
    }
    if (rl_policy_check_common("rand_augment", a[RA_interpolation], a + RA_fill,
                               msg) != 0) {
        return RL_ECONFIG;
    }
    return check_table("rand_augment", a + RA_magnitudes, 1, msg);
}

static void ra_draw(const rl_op *op, rl_rng *g, int w, int h, double *params)
{
    (void)w;
    (void)h;
    int n = (int)op->args[RA_num_ops];
    for (int i = 0; i < n; i++) {
        int kind = rl_rng_index(g, 14);
        double s = sign(g);
        params[2 * i] = kind;
        params[2 * i + 1] =
            magnitude_of(op->args + RA_magnitudes, 1, kind, 0, s);
    }
}

static int ra_apply(const rl_op *op, const double *params, rl_image *img,
                    char *msg)
{
    const double *a = op->args;
    return run_pairs(params, (int)a[RA_num_ops], img,
                     common_of(a[RA_interpolation], a + RA_fill), msg);
}

static const rl_op_def rand_augment = {
    .name = "rand_augment",
    .nargs = RA_NARGS,
    .fields = RA_fields,
    .limits = RA_limits,
    .check = ra_check,
    .draw = ra_draw,
    .apply = ra_apply,
};

/* ---- AutoAugment ----
 * args: policy (the index of its name in rl_auto_augment_policies),
 * interpolation, fill, table (a row of AA_BINS magnitudes per kind with a
 * table)
 * params: [kind or -1, magnitude] for the two sub-ops, then the policy
 * index */

typedef struct sub_op {
    signed char kind;
    unsigned char p10; /* probability in tenths */
    signed char bin;   /* magnitude bin, -1: none */
} sub_op;

#define AA_BINS 10
#define AA_N 25

#define AA_ROW_ARGS(X) X(AA_ROW_, magnitudes, AA_BINS, RL_ARG_)
enum { AA_ROW_ARGS(RL_OP_ARG_AT) AA_ROW_NARGS };
static const rl_op_field AA_ROW_fields[] = {AA_ROW_ARGS(RL_OP_FIELD) RL_OP_END};

#define AA_ARGS(X)                    \
    X(AA_, policy, 1, RL_ARG_)        \
    X(AA_, interpolation, 1, RL_ARG_) \
    X(AA_, fill, 3, RL_ARG_)          \
    X(AA_, table, N_MAG_KINDS, AA_ROW_)
enum { AA_ARGS(RL_OP_ARG_AT) AA_NARGS };
static const rl_op_field AA_fields[] = {AA_ARGS(RL_OP_FIELD) RL_OP_END};

/* The policies, by torchvision's AutoAugmentPolicy values. */
enum { AA_IMAGENET, AA_CIFAR10, AA_SVHN, AA_N_POLICIES };
const char *const rl_auto_augment_policies[] = {
    [AA_IMAGENET] = "imagenet",
    [AA_CIFAR10] = "cifar10",
    [AA_SVHN] = "svhn",
    [AA_N_POLICIES] = NULL,
};

/* The three published policies, as torchvision lists them, in the
 * order of rl_auto_augment_policies. */
static const sub_op aa_policies[AA_N_POLICIES][AA_N][2] = {
    {
        /* ImageNet */
        {{K_POSTERIZE, 4, 8}, {K_ROTATE, 6, 9}},
        {{K_SOLARIZE, 6, 5}, {K_AUTOCONTRAST, 6, -1}},
        {{K_EQUALIZE, 8, -1}, {K_EQUALIZE, 6, -1}},
        {{K_POSTERIZE, 6, 7}, {K_POSTERIZE, 6, 6}},
        {{K_EQUALIZE, 4, -1}, {K_SOLARIZE, 2, 4}},
        {{K_EQUALIZE, 4, -1}, {K_ROTATE, 8, 8}},
        {{K_SOLARIZE, 6, 3}, {K_EQUALIZE, 6, -1}},
        {{K_POSTERIZE, 8, 5}, {K_EQUALIZE, 10, -1}},
        {{K_ROTATE, 2, 3}, {K_SOLARIZE, 6, 8}},
        {{K_EQUALIZE, 6, -1}, {K_POSTERIZE, 4, 6}},
        {{K_ROTATE, 8, 8}, {K_COLOR, 4, 0}},
        {{K_ROTATE, 4, 9}, {K_EQUALIZE, 6, -1}},
        {{K_EQUALIZE, 0, -1}, {K_EQUALIZE, 8, -1}},
        {{K_INVERT, 6, -1}, {K_EQUALIZE, 10, -1}},
        {{K_COLOR, 6, 4}, {K_CONTRAST, 10, 8}},
        {{K_ROTATE, 8, 8}, {K_COLOR, 10, 2}},
        {{K_COLOR, 8, 8}, {K_SOLARIZE, 8, 7}},
        {{K_SHARPNESS, 4, 7}, {K_INVERT, 6, -1}},
        {{K_SHEAR_X, 6, 5}, {K_EQUALIZE, 10, -1}},
        {{K_COLOR, 4, 0}, {K_EQUALIZE, 6, -1}},
        {{K_EQUALIZE, 4, -1}, {K_SOLARIZE, 2, 4}},
        {{K_SOLARIZE, 6, 5}, {K_AUTOCONTRAST, 6, -1}},
        {{K_INVERT, 6, -1}, {K_EQUALIZE, 10, -1}},
        {{K_COLOR, 6, 4}, {K_CONTRAST, 10, 8}},
        {{K_EQUALIZE, 8, -1}, {K_EQUALIZE, 6, -1}},
    },
    {
        /* CIFAR10 */
        {{K_INVERT, 1, -1}, {K_CONTRAST, 2, 6}},
        {{K_ROTATE, 7, 2}, {K_TRANSLATE_X, 3, 9}},
        {{K_SHARPNESS, 8, 1}, {K_SHARPNESS, 9, 3}},
        {{K_SHEAR_Y, 5, 8}, {K_TRANSLATE_Y, 7, 9}},
        {{K_AUTOCONTRAST, 5, -1}, {K_EQUALIZE, 9, -1}},
        {{K_SHEAR_Y, 2, 7}, {K_POSTERIZE, 3, 7}},
        {{K_COLOR, 4, 3}, {K_BRIGHTNESS, 6, 7}},
        {{K_SHARPNESS, 3, 9}, {K_BRIGHTNESS, 7, 9}},
        {{K_EQUALIZE, 6, -1}, {K_EQUALIZE, 5, -1}},
        {{K_CONTRAST, 6, 7}, {K_SHARPNESS, 6, 5}},
        {{K_COLOR, 7, 7}, {K_TRANSLATE_X, 5, 8}},
        {{K_EQUALIZE, 3, -1}, {K_AUTOCONTRAST, 4, -1}},
        {{K_TRANSLATE_Y, 4, 3}, {K_SHARPNESS, 2, 6}},
        {{K_BRIGHTNESS, 9, 6}, {K_COLOR, 2, 8}},
        {{K_SOLARIZE, 5, 2}, {K_INVERT, 0, -1}},
        {{K_EQUALIZE, 2, -1}, {K_AUTOCONTRAST, 6, -1}},
        {{K_EQUALIZE, 2, -1}, {K_EQUALIZE, 6, -1}},
        {{K_COLOR, 9, 9}, {K_EQUALIZE, 6, -1}},
        {{K_AUTOCONTRAST, 8, -1}, {K_SOLARIZE, 2, 8}},
        {{K_BRIGHTNESS, 1, 3}, {K_COLOR, 7, 0}},
        {{K_SOLARIZE, 4, 5}, {K_AUTOCONTRAST, 9, -1}},
        {{K_TRANSLATE_Y, 9, 9}, {K_TRANSLATE_Y, 7, 9}},
        {{K_AUTOCONTRAST, 9, -1}, {K_SOLARIZE, 8, 3}},
        {{K_EQUALIZE, 8, -1}, {K_INVERT, 1, -1}},
        {{K_TRANSLATE_Y, 7, 9}, {K_AUTOCONTRAST, 9, -1}},
    },
    {
        /* SVHN */
        {{K_SHEAR_X, 9, 4}, {K_INVERT, 2, -1}},
        {{K_SHEAR_Y, 9, 8}, {K_INVERT, 7, -1}},
        {{K_EQUALIZE, 6, -1}, {K_SOLARIZE, 6, 6}},
        {{K_INVERT, 9, -1}, {K_EQUALIZE, 6, -1}},
        {{K_EQUALIZE, 6, -1}, {K_ROTATE, 9, 3}},
        {{K_SHEAR_X, 9, 4}, {K_AUTOCONTRAST, 8, -1}},
        {{K_SHEAR_Y, 9, 8}, {K_INVERT, 4, -1}},
        {{K_SHEAR_Y, 9, 5}, {K_SOLARIZE, 2, 6}},
        {{K_INVERT, 9, -1}, {K_AUTOCONTRAST, 8, -1}},
        {{K_EQUALIZE, 6, -1}, {K_ROTATE, 9, 3}},
        {{K_SHEAR_X, 9, 4}, {K_SOLARIZE, 3, 3}},
        {{K_SHEAR_Y, 8, 8}, {K_INVERT, 7, -1}},
        {{K_EQUALIZE, 9, -1}, {K_TRANSLATE_Y, 6, 6}},
        {{K_INVERT, 9, -1}, {K_EQUALIZE, 6, -1}},
        {{K_CONTRAST, 3, 3}, {K_ROTATE, 8, 4}},
        {{K_INVERT, 8, -1}, {K_TRANSLATE_Y, 0, 2}},
        {{K_SHEAR_Y, 7, 6}, {K_SOLARIZE, 4, 8}},
        {{K_INVERT, 6, -1}, {K_ROTATE, 8, 4}},
        {{K_SHEAR_Y, 3, 7}, {K_TRANSLATE_X, 9, 3}},
        {{K_SHEAR_X, 1, 6}, {K_INVERT, 6, -1}},
        {{K_SOLARIZE, 7, 2}, {K_TRANSLATE_Y, 6, 7}},
        {{K_SHEAR_Y, 8, 4}, {K_INVERT, 8, -1}},
        {{K_SHEAR_X, 7, 9}, {K_TRANSLATE_Y, 8, 3}},
        {{K_SHEAR_Y, 8, 5}, {K_AUTOCONTRAST, 7, -1}},
        {{K_SHEAR_X, 7, 2}, {K_INVERT, 1, -1}},
    },
};

static int aa_check(const double *a, char *msg)
{
    double policy = a[AA_policy];
    if (!(policy >= 0 && policy < AA_N_POLICIES && policy == floor(policy))) {
        snprintf(msg, RL_MSG_MAX,
                 "auto_augment: policy must be 0 (ImageNet), 1 (CIFAR10) or "
                 "2 (SVHN)");
        return RL_ECONFIG;
    }
    if (rl_policy_check_common("auto_augment", a[AA_interpolation], a + AA_fill,
                               msg) != 0) {
        return RL_ECONFIG;
    }
    return check_table("auto_augment", a + AA_table, AA_BINS, msg);
}

static void aa_draw(const rl_op *op, rl_rng *g, int w, int h, double *params)
{
    (void)w;
    (void)h;
    int policy = rl_rng_index(g, AA_N);
    const sub_op *sub = aa_policies[(int)op->args[AA_policy]][policy];
    for (int i = 0; i < 2; i++) {
        /* torchvision runs a sub-op when rand() <= p */
        bool run = rl_rng_uniform(g) <= sub[i].p10 / 10.0;
        double s = sign(g);
        params[2 * i] = run ? sub[i].kind : -1;
        params[2 * i + 1] = run && sub[i].bin >= 0
                                ? magnitude_of(op->args + AA_table, AA_BINS,
                                               sub[i].kind, sub[i].bin, s)
                                : 0.0;
    }
    params[4] = policy;
}

static int aa_apply(const rl_op *op, const double *params, rl_image *img,
                    char *msg)
{
    const double *a = op->args;
    return run_pairs(params, 2, img,
                     common_of(a[AA_interpolation], a + AA_fill), msg);
}

static const rl_op_def auto_augment = {
    .name = "auto_augment",
    .nargs = AA_NARGS,
    .fields = AA_fields,
    .check = aa_check,
    .draw = aa_draw,
    .apply = aa_apply,
};

const rl_op_def *const rl_policy_ops[] = {
    &trivial_augment,
    &rand_augment,
    &auto_augment,
    NULL,
};
