/*
 * augment/erase.c - RandomErasing, the output op: it runs on the sample in
 * the slot, after the store, in the output's dtype and values, because
 * users put it after Normalize (value 0 is then the normalised 0, not
 * black) and torchvision's "random" value is normal noise in those units.
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
    NULL,
};
