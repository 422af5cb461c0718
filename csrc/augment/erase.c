/*
 * augment/erase.c - RandomErasing, torchvision's and timm's: the output
 * ops. They run on the sample in the slot, after the store, in the
 * output's dtype and values, because users put them after Normalize
 * (value 0 is then the normalised 0, not black) and the "random" values
 * are normal noise in those units.
 *
 * args (ERASE_ARGS): p, scale (lo, hi), log_ratio (lo, hi), random (0/1),
 *        value (3; ignored when random)
 * params: [applied (0/1), i (top), j (left), h, w, noise seed]
 *
 * The draw follows torchvision's RandomErasing: apply with probability p;
 * up to 10 tries of an area uniform in scale times the image's and an
 * aspect ratio e^uniform(log ratio); the first whose rounded h, w fit
 * inside the image is placed uniformly; none fits: nothing is erased. The
 * noise of value="random" comes from its own stream, seeded by the draw,
 * so the apply is a function of params alone.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>

#include "augment/kernels.h"

#define ERASE_ARGS(X)            \
    X(E_, p, 1, RL_ARG_)         \
    X(E_, scale, 2, RL_ARG_)     \
    X(E_, log_ratio, 2, RL_ARG_) \
    X(E_, random, 1, RL_ARG_)    \
    X(E_, value, 3, RL_ARG_)
enum { ERASE_ARGS(RL_OP_ARG_AT) E_NARGS };
static const rl_op_field E_fields[] = {ERASE_ARGS(RL_OP_FIELD) RL_OP_END};

static int erase_check(const double *a, char *msg)
{
    const double *scale = a + E_scale, *ratio = a + E_log_ratio;
    if (!(a[E_p] >= 0 && a[E_p] <= 1)) {
        snprintf(msg, RL_MSG_MAX, "erase: p must be in [0, 1], not %g", a[E_p]);
        return RL_ECONFIG;
    }
    if (!(scale[0] >= 0 && scale[0] <= scale[1] && scale[1] <= 1)) {
        snprintf(msg, RL_MSG_MAX,
                 "erase: scale must be (lo, hi) with 0 <= lo <= hi <= 1");
        return RL_ECONFIG;
    }
    if (!(isfinite(ratio[0]) && isfinite(ratio[1]) && ratio[0] <= ratio[1])) {
        snprintf(msg, RL_MSG_MAX,
                 "erase: ratio must be (lo, hi) with 0 < lo <= hi");
        return RL_ECONFIG;
    }
    if (a[E_random] != 0 && a[E_random] != 1) {
        snprintf(msg, RL_MSG_MAX, "erase: random must be 0 or 1");
        return RL_ECONFIG;
    }
    for (int c = 0; c < 3; c++) {
        if (a[E_random] == 0 && !isfinite(a[E_value + c])) {
            snprintf(msg, RL_MSG_MAX, "erase: value must be finite");
            return RL_ECONFIG;
        }
    }
    return 0;
}

static double uniform(rl_rng *g, double lo, double hi)
{
    return lo + (hi - lo) * rl_rng_uniform(g);
}

static void erase_draw(const rl_op *op, rl_rng *g, int w, int h, double *params)
{
    const double *a = op->args;
    params[0] = 0;
    if (!(rl_rng_uniform(g) < a[E_p])) {
        return;
    }
    double area = (double)w * h;
    for (int t = 0; t < 10; t++) {
        double ea = area * uniform(g, a[E_scale], a[E_scale + 1]);
        double ar = exp(uniform(g, a[E_log_ratio], a[E_log_ratio + 1]));
        /* Python's round: half to even, as nearbyint in the default mode */
        double eh = nearbyint(sqrt(ea * ar));
        double ew = nearbyint(sqrt(ea / ar));
        if (!(eh < h && ew < w)) {
            continue;
        }
        params[0] = 1;
        params[1] = floor(rl_rng_uniform(g) * (h - eh + 1));
        params[2] = floor(rl_rng_uniform(g) * (w - ew + 1));
        params[3] = eh;
        params[4] = ew;
        /* 52 random bits: exact in a double */
        params[5] = floor(rl_rng_uniform(g) * 4503599627370496.0);
        return;
    }
}

/* A standard normal number (Box-Muller; the pair's second is dropped). */
static float normal(rl_rng *g)
{
    double u1 = rl_rng_uniform(g), u2 = rl_rng_uniform(g);
    return (float)(sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2));
}

static int erase_apply_out(const rl_op *op, const double *params,
                           const rl_dst *out, int w, int h, char *msg)
{
    (void)w;
    (void)h;
    (void)msg;
    if (params[0] == 0) {
        return 0;
    }
    const double *a = op->args;
    int i = (int)params[1], j = (int)params[2];
    int eh = (int)params[3], ew = (int)params[4];
    rl_rng g;
    rl_rng_init(&g, (uint64_t)params[5], 0, 0, RL_RNG_AUGMENT);
    /* torchvision draws the noise as a (C, h, w) tensor: channel first */
    for (int c = 0; c < 3; c++) {
        for (int y = i; y < i + eh; y++) {
            for (int x = j; x < j + ew; x++) {
                float v = a[E_random] != 0 ? normal(&g) : (float)a[E_value + c];
                rl_store_value(out, x, y, c, v);
            }
        }
    }
    return 0;
}

/*
 * timm's RandomErasing (timm.data.random_erasing), per sample:
 *
 * args (TIMM_ERASE_ARGS): p, area (lo, hi: fractions of the image),
 *        log_aspect (lo, hi), count (min, max), mode (0 const: zeros,
 *        1 rand: one normal value a channel a box, 2 pixel: one a pixel)
 * params: [boxes placed, noise seed, then (i, j, h, w) a box]
 *
 * timm erases unless uniform > p; draws a count uniform in min..max; each
 * box tries 10 times an area uniform in `area` times the image's over the
 * count and an aspect ratio e^uniform(log_aspect), placing the first whose
 * rounded h, w are under the image's, uniformly; a box that never fits is
 * dropped. Its noise is torch's normal_, so only its distribution is
 * matched: a standard normal from the box's own stream.
 */
#define TIMM_ERASE_ARGS(X)         \
    X(TE_, p, 1, RL_ARG_)          \
    X(TE_, area, 2, RL_ARG_)       \
    X(TE_, log_aspect, 2, RL_ARG_) \
    X(TE_, count, 2, RL_ARG_)      \
    X(TE_, mode, 1, RL_ARG_)
enum { TIMM_ERASE_ARGS(RL_OP_ARG_AT) TE_NARGS };
static const rl_op_field TE_fields[] = {TIMM_ERASE_ARGS(RL_OP_FIELD) RL_OP_END};
enum { TE_CONST, TE_RAND, TE_PIXEL };
/* The boxes a sample's parameters hold: after the count and the seed,
 * four numbers a box. */
#define TE_MAX_COUNT ((RL_OP_MAX_PARAMS - 2) / 4)
static const rl_op_limit TE_limits[] = {{"max_count", TE_MAX_COUNT}, RL_OP_END};

static int timm_erase_check(const double *a, char *msg)
{
    const double *area = a + TE_area, *aspect = a + TE_log_aspect;
    const double *count = a + TE_count;
    if (!(a[TE_p] >= 0 && a[TE_p] <= 1)) {
        snprintf(msg, RL_MSG_MAX, "timm_erase: p must be in [0, 1], not %g",
                 a[TE_p]);
        return RL_ECONFIG;
    }
    if (!(area[0] >= 0 && area[0] <= area[1] && area[1] <= 1)) {
        snprintf(msg, RL_MSG_MAX,
                 "timm_erase: area must be (lo, hi), 0 <= lo <= hi <= 1");
        return RL_ECONFIG;
    }
    if (!(isfinite(aspect[0]) && isfinite(aspect[1]) &&
          aspect[0] <= aspect[1])) {
        snprintf(msg, RL_MSG_MAX,
                 "timm_erase: aspect must be (lo, hi), 0 < lo <= hi");
        return RL_ECONFIG;
    }
    if (!(count[0] >= 1 && count[0] <= count[1] && count[1] <= TE_MAX_COUNT &&
          count[0] == floor(count[0]) && count[1] == floor(count[1]))) {
        snprintf(msg, RL_MSG_MAX,
                 "timm_erase: count must be integers 1 <= min <= max <= %d",
                 TE_MAX_COUNT);
        return RL_ECONFIG;
    }
    if (a[TE_mode] != TE_CONST && a[TE_mode] != TE_RAND &&
        a[TE_mode] != TE_PIXEL) {
        snprintf(msg, RL_MSG_MAX, "timm_erase: mode must be 0, 1 or 2");
        return RL_ECONFIG;
    }
    return 0;
}

/* An integer uniform in lo..hi, both included (Python's randint). */
static int randint(rl_rng *g, int lo, int hi)
{
    return lo + (int)floor(rl_rng_uniform(g) * (hi - lo + 1));
}

static void timm_erase_draw(const rl_op *op, rl_rng *g, int w, int h,
                            double *params)
{
    const double *a = op->args;
    params[0] = 0;
    if (rl_rng_uniform(g) > a[TE_p]) {
        return;
    }
    int count = randint(g, (int)a[TE_count], (int)a[TE_count + 1]);
    double area = (double)w * h;
    int n = 0;
    for (int b = 0; b < count; b++) {
        for (int t = 0; t < 10; t++) {
            double ta = area * uniform(g, a[TE_area], a[TE_area + 1]) / count;
            double ar = exp(uniform(g, a[TE_log_aspect], a[TE_log_aspect + 1]));
            /* Python's round: half to even, as nearbyint in the default
             * mode */
            double eh = nearbyint(sqrt(ta * ar));
            double ew = nearbyint(sqrt(ta / ar));
            if (!(ew < w && eh < h)) {
                continue;
            }
            double *box = params + 2 + 4 * n++;
            box[0] = randint(g, 0, h - (int)eh);
            box[1] = randint(g, 0, w - (int)ew);
            box[2] = eh;
            box[3] = ew;
            break;
        }
    }
    params[0] = n;
    /* 52 random bits: exact in a double */
    params[1] = floor(rl_rng_uniform(g) * 4503599627370496.0);
}

static int timm_erase_apply_out(const rl_op *op, const double *params,
                                const rl_dst *out, int w, int h, char *msg)
{
    (void)w;
    (void)h;
    (void)msg;
    int mode = (int)op->args[TE_mode];
    rl_rng g;
    rl_rng_init(&g, (uint64_t)params[1], 0, 0, RL_RNG_AUGMENT);
    for (int b = 0; b < (int)params[0]; b++) {
        const double *box = params + 2 + 4 * b;
        int i = (int)box[0], j = (int)box[1];
        int eh = (int)box[2], ew = (int)box[3];
        /* timm fills the (C, h, w) block: channel first */
        for (int c = 0; c < 3; c++) {
            float v = mode == TE_RAND ? normal(&g) : 0.0f;
            for (int y = i; y < i + eh; y++) {
                for (int x = j; x < j + ew; x++) {
                    rl_store_value(out, x, y, c,
                                   mode == TE_PIXEL ? normal(&g) : v);
                }
            }
        }
    }
    return 0;
}

static const rl_op_def timm_erase = {
    .name = "timm_erase",
    .nargs = TE_NARGS,
    .fields = TE_fields,
    .limits = TE_limits,
    .check = timm_erase_check,
    .draw = timm_erase_draw,
    .apply_out = timm_erase_apply_out,
};

static const rl_op_def erase = {
    .name = "erase",
    .nargs = E_NARGS,
    .fields = E_fields,
    .check = erase_check,
    .draw = erase_draw,
    .apply_out = erase_apply_out,
};

const rl_op_def *const rl_output_ops[] = {
    &erase,
    &timm_erase,
    NULL,
};
