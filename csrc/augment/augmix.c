/*
 * augment/augmix.c - AugMix: a few chains of random sub-ops on copies of
 * the image, mixed back with the original by random convex weights.
 *
 * DESIGN: the chains' sub-ops are the policies' (rl_policy_apply, the very
 * kernels TrivialAugmentWide uses), and, as for the policies, the magnitude
 * tables and the list of sub-ops come from Python (ringloader/adapt/torchvision_ops.py),
 * made by the transform object's own table functions with the user's
 * torch: this file only indexes them. Which sub-ops the object's
 * augmentation space holds, in its order, and whether each is signed or
 * has magnitudes, are arguments too, so all_ops and the v1 and v2 classes
 * are only different arguments.
 *
 * The weights follow torchvision's forward: (m0, m1) ~ Dirichlet(alpha,
 * alpha), d ~ Dirichlet(alpha, ..., alpha) over the chains, each rounded to
 * float32 as torch's samples are; chain i's weight is the float32 product
 * d_i * m1. The mix is computed as torch computes it on a uint8 image: in
 * float32, m0 * x first, then + (w_i * chain_i) for each chain in order,
 * every product and sum rounded to float32 (no fused multiply-add), and
 * the result truncated to uint8 (`.to(torch.uint8)`). So given the same
 * weights and chains the mix is bit-exact, and a chain within 1 LSB of
 * torchvision's moves the mix by at most 1 LSB.
 *
 * Gamma variates (for the Dirichlets) come from the sample's own stream:
 * Marsaglia and Tsang's method for a >= 1, with G(a) = G(a + 1) U^(1/a)
 * below 1, kept as logarithms so that a tiny alpha does not underflow
 * before the normalisation; a weight below FLT_MIN becomes FLT_MIN, as in
 * torch's _sample_dirichlet.
 *
 * args (AM_ARGS): severity, mixture_width, chain_depth, alpha,
 *        interpolation, fill (NaN for None), space_size, then space: rows
 *        (AM_MAX_KINDS, the first space_size used) of policy kind
 *        (rl_policy_kinds), signed (0/1), has_table (0/1), the magnitudes
 *        of bins 0 .. AM_BINS - 1
 * params: [m0, m1, d_0 .. d_{W-1}, then W chains of D slots] where W is
 *        mixture_width and D chain_depth, or AM_RANDOM_DEPTH where
 *        chain_depth <= 0 (torchvision's depth uniform in 1..3). A slot
 *        holds 0 (past the chain's end) or +-(1 + k + AM_MAX_KINDS * bin):
 *        sub-op k of the space at magnitude bin `bin`, negative when the
 *        magnitude is negated. W (1 + D) must fit in AM_CHAIN_PARAMS, the
 *        RL_OP_MAX_PARAMS after m0 and m1: with 16, torchvision's default
 *        of 3 chains of random depth does (12 of 14).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "augment/kernels.h"

#define AM_BINS 10      /* torchvision's _PARAMETER_MAX */
#define AM_MAX_KINDS 16 /* sub-ops of an augmentation space */
#define AM_RANDOM_DEPTH 3
#define AM_CHAIN_PARAMS (RL_OP_MAX_PARAMS - 2)

/* A row of the space: one sub-op. */
#define AM_ROW_ARGS(X)                \
    X(AM_ROW_, kind, 1, RL_ARG_)      \
    X(AM_ROW_, signed, 1, RL_ARG_)    \
    X(AM_ROW_, has_table, 1, RL_ARG_) \
    X(AM_ROW_, magnitudes, AM_BINS, RL_ARG_)
enum { AM_ROW_ARGS(RL_OP_ARG_AT) AM_ROW_NARGS };
static const rl_op_field AM_ROW_fields[] = {AM_ROW_ARGS(RL_OP_FIELD) RL_OP_END};

#define AM_ARGS(X)                    \
    X(AM_, severity, 1, RL_ARG_)      \
    X(AM_, mixture_width, 1, RL_ARG_) \
    X(AM_, chain_depth, 1, RL_ARG_)   \
    X(AM_, alpha, 1, RL_ARG_)         \
    X(AM_, interpolation, 1, RL_ARG_) \
    X(AM_, fill, 3, RL_ARG_)          \
    X(AM_, space_size, 1, RL_ARG_)    \
    X(AM_, space, AM_MAX_KINDS, AM_ROW_)
enum { AM_ARGS(RL_OP_ARG_AT) AM_NARGS };
static const rl_op_field AM_fields[] = {AM_ARGS(RL_OP_FIELD) RL_OP_END};

/* What Python checks before it builds the arguments: chains and their
 * weights within the parameters, a random depth's slots. */
static const rl_op_limit AM_limits[] = {
    {"chain_params", AM_CHAIN_PARAMS},
    {"random_depth_slots", AM_RANDOM_DEPTH},
    RL_OP_END,
};

static const double *kind_row(const double *a, int k)
{
    return a + AM_space + k * AM_ROW_NARGS;
}

/* Sub-op slots a chain has in params. */
static int slots_of(double chain_depth)
{
    return chain_depth > 0 ? (int)chain_depth : AM_RANDOM_DEPTH;
}

static bool is_int(double v)
{
    return isfinite(v) && v == floor(v);
}

static int fail(char *msg, const char *what)
{
    snprintf(msg, RL_MSG_MAX, "augmix: %s", what);
    return RL_ECONFIG;
}

static int am_check(const double *a, char *msg)
{
    double severity = a[AM_severity], width_ = a[AM_mixture_width];
    double depth = a[AM_chain_depth], alpha = a[AM_alpha];
    const double *fill = a + AM_fill;
    if (!(is_int(severity) && severity >= 1 && severity <= AM_BINS)) {
        return fail(msg, "severity must be 1..10");
    }
    if (!(is_int(width_) && width_ >= 0 && width_ <= RL_OP_MAX_PARAMS)) {
        return fail(msg, "mixture_width must be a count");
    }
    if (!(is_int(depth) && fabs(depth) <= RL_OP_MAX_PARAMS)) {
        return fail(msg, "chain_depth must be an integer");
    }
    int width = (int)width_;
    if (width + width * slots_of(depth) > AM_CHAIN_PARAMS) {
        snprintf(msg, RL_MSG_MAX,
                 "augmix: %d chains of %d sub-ops and their weights exceed "
                 "%d parameters",
                 width, slots_of(depth), RL_OP_MAX_PARAMS);
        return RL_ECONFIG;
    }
    if (!(isfinite(alpha) && alpha > 0)) {
        return fail(msg, "alpha must be positive");
    }
    int rc = rl_policy_check_common("augmix", a[AM_interpolation], fill, msg);
    if (rc != 0) {
        return rc;
    }
    double n = a[AM_space_size];
    if (!(is_int(n) && n >= 1 && n <= AM_MAX_KINDS)) {
        return fail(msg, "the augmentation space must hold 1..16 sub-ops");
    }
    for (int k = 0; k < (int)n; k++) {
        const double *r = kind_row(a, k);
        double kind = r[AM_ROW_kind], sgn = r[AM_ROW_signed];
        double table = r[AM_ROW_has_table];
        if (!(is_int(kind) && kind >= 0 && kind < RL_POLICY_N_KINDS) ||
            (sgn != 0 && sgn != 1) || (table != 0 && table != 1)) {
            return fail(msg, "a sub-op must be (kind, signed, has table)");
        }
        for (int b = 0; b < AM_BINS; b++) {
            if (!isfinite(r[AM_ROW_magnitudes + b])) {
                return fail(msg, "the magnitude tables must be finite");
            }
        }
    }
    return 0;
}

/* ---- draws ---- */

/* A uniform number in (0, 1]. */
static double uniform_pos(rl_rng *g)
{
    return 1.0 - rl_rng_uniform(g);
}

/* A standard normal variate (Box-Muller, one of the pair). */
static double normal(rl_rng *g)
{
    double r = sqrt(-2.0 * log(uniform_pos(g)));
    return r * cos(2.0 * M_PI * rl_rng_uniform(g));
}

/* The logarithm of a Gamma(a, 1) variate, a > 0. */
static double log_gamma_variate(rl_rng *g, double a)
{
    double boost = 0.0;
    if (a < 1.0) {
        /* G(a) = G(a + 1) * U^(1/a) */
        boost = log(uniform_pos(g)) / a;
        a += 1.0;
    }
    double d = a - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = normal(g);
        double v = 1.0 + c * x;
        if (v <= 0.0) {
            continue;
        }
        v = v * v * v;
        double u = uniform_pos(g);
        if (u < 1.0 - 0.0331 * (x * x) * (x * x) ||
            log(u) < 0.5 * x * x + d * (1.0 - v + log(v))) {
            return log(d * v) + boost;
        }
    }
}

/* n weights ~ Dirichlet(alpha, ..., alpha), each rounded to float32, into
 * out (kernels.h). */
void rl__dirichlet_f32(rl_rng *g, double alpha, int n, double *out)
{
    double hi = -INFINITY;
    for (int i = 0; i < n; i++) {
        out[i] = log_gamma_variate(g, alpha);
        hi = out[i] > hi ? out[i] : hi;
    }
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        out[i] = exp(out[i] - hi);
        sum += out[i];
    }
    for (int i = 0; i < n; i++) {
        float v = (float)(out[i] / sum);
        out[i] = v < FLT_MIN ? FLT_MIN : v;
    }
}

static void am_draw(const rl_op *op, rl_rng *g, int w, int h, double *params)
{
    (void)w;
    (void)h;
    const double *a = op->args;
    int severity = (int)a[AM_severity], width = (int)a[AM_mixture_width];
    int n_kinds = (int)a[AM_space_size];
    int slots = slots_of(a[AM_chain_depth]);
    rl__dirichlet_f32(g, a[AM_alpha], 2, params);
    rl__dirichlet_f32(g, a[AM_alpha], width, params + 2);
    double *slot = params + 2 + width;
    for (int c = 0; c < width; c++, slot += slots) {
        int depth = a[AM_chain_depth] > 0
                        ? slots
                        : 1 + rl_rng_index(g, AM_RANDOM_DEPTH);
        for (int j = 0; j < depth; j++) {
            int k = rl_rng_index(g, n_kinds);
            const double *r = kind_row(a, k);
            int bin = r[AM_ROW_has_table] != 0 ? rl_rng_index(g, severity) : 0;
            bool negate = r[AM_ROW_signed] != 0 && rl_rng_uniform(g) < 0.5;
            double code = 1 + k + AM_MAX_KINDS * bin;
            slot[j] = negate ? -code : code;
        }
    }
}

/* ---- apply ---- */

/* Runs the sub-ops of one chain's slots on img. */
static int run_chain(const double *a, const double *slot, int slots,
                     rl_image *img, char *msg)
{
    rl_interp interp =
        a[AM_interpolation] != 0 ? RL_INTERP_BILINEAR : RL_INTERP_NEAREST;
    const double *fill = isnan(a[AM_fill]) ? NULL : a + AM_fill;
    for (int j = 0; j < slots && slot[j] != 0; j++) {
        int code = (int)fabs(slot[j]) - 1;
        int k = code % AM_MAX_KINDS, bin = code / AM_MAX_KINDS;
        const double *r = kind_row(a, k);
        double magnitude =
            r[AM_ROW_has_table] != 0 ? r[AM_ROW_magnitudes + bin] : 0.0;
        if (slot[j] < 0) {
            magnitude = -magnitude;
        }
        int rc =
            rl_policy_apply(img, (int)r[AM_ROW_kind], magnitude, interp, fill);
        if (rc != 0) {
            snprintf(msg, RL_MSG_MAX, "augmix: %s",
                     rc == -ENOMEM ? "out of memory"
                                   : "image too large for a warp");
            return rc;
        }
    }
    return 0;
}

/* acc += weight * x over n values, each product and sum rounded to
 * float32 (separate statements: no contraction into a fused
 * multiply-add). */
static void accumulate(float *restrict acc, const uint8_t *restrict x, size_t n,
                       float weight)
{
    for (size_t i = 0; i < n; i++) {
        float t = weight * (float)x[i];
        acc[i] = acc[i] + t;
    }
}

static int am_apply(const rl_op *op, const double *params, rl_image *img,
                    char *msg)
{
    const double *a = op->args;
    int width = (int)a[AM_mixture_width], slots = slots_of(a[AM_chain_depth]);
    size_t line = (size_t)img->w * 3, n = line * (size_t)img->h;
    if (n == 0) {
        return 0;
    }
    float *acc = malloc(sizeof(float) * n);
    uint8_t *work = width > 0 ? malloc(n) : NULL;
    if (acc == NULL || (width > 0 && work == NULL)) {
        free(acc);
        free(work);
        snprintf(msg, RL_MSG_MAX, "augmix: out of memory");
        return -ENOMEM;
    }
    /* mix = m0 * image */
    float m0 = (float)params[0], m1 = (float)params[1];
    for (int y = 0; y < img->h; y++) {
        const uint8_t *row = img->data + (size_t)y * img->stride;
        float *o = acc + (size_t)y * line;
        for (size_t i = 0; i < line; i++) {
            o[i] = m0 * (float)row[i];
        }
    }
    /* mix += (d_i * m1) * chain_i(image), chain by chain */
    rl_image chain = {work, img->w, img->h, line};
    int rc = 0;
    for (int c = 0; c < width && rc == 0; c++) {
        for (int y = 0; y < img->h; y++) {
            memcpy(work + (size_t)y * line, img->data + (size_t)y * img->stride,
                   line);
        }
        rc = run_chain(a, params + 2 + width + c * slots, slots, &chain, msg);
        if (rc == 0) {
            float weight = (float)params[2 + c] * m1;
            accumulate(acc, work, n, weight);
        }
    }
    if (rc == 0) {
        /* .to(torch.uint8): truncation. The mix is a sum of non-negative
         * terms, within [0, 256) but for float32 rounding at the top. */
        for (int y = 0; y < img->h; y++) {
            uint8_t *row = img->data + (size_t)y * img->stride;
            const float *s = acc + (size_t)y * line;
            for (size_t i = 0; i < line; i++) {
                float v = s[i] < 255.0f ? s[i] : 255.0f;
                row[i] = (uint8_t)(int)v;
            }
        }
    }
    free(acc);
    free(work);
    return rc;
}

static const rl_op_def augmix = {
    .name = "augmix",
    .nargs = AM_NARGS,
    .fields = AM_fields,
    .limits = AM_limits,
    .check = am_check,
    .draw = am_draw,
    .apply = am_apply,
};

const rl_op_def *const rl_augmix_ops[] = {
    &augmix,
    NULL,
};
