/*
 * augment/erase.c - RandomErasing, the output op: it runs on the sample in
 * the slot, after the store, in the output's dtype and values, because
 * users put it after Normalize (value 0 is then the normalised 0, not
 * black) and torchvision's "random" value is normal noise in those units.
 *
 * args: [p, scale_lo, scale_hi, log_ratio_lo, log_ratio_hi, random (0/1),
 *        v0, v1, v2] (v ignored when random)
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

static int erase_check(const double *a, char *msg)
{
    if (!(a[0] >= 0 && a[0] <= 1)) {
        snprintf(msg, RL_MSG_MAX, "erase: p must be in [0, 1], not %g", a[0]);
        return RL_ECONFIG;
    }
    if (!(a[1] >= 0 && a[1] <= a[2] && a[2] <= 1)) {
        snprintf(msg, RL_MSG_MAX,
                 "erase: scale must be (lo, hi) with 0 <= lo <= hi <= 1");
        return RL_ECONFIG;
    }
    if (!(isfinite(a[3]) && isfinite(a[4]) && a[3] <= a[4])) {
        snprintf(msg, RL_MSG_MAX,
                 "erase: ratio must be (lo, hi) with 0 < lo <= hi");
        return RL_ECONFIG;
    }
    if (a[5] != 0 && a[5] != 1) {
        snprintf(msg, RL_MSG_MAX, "erase: random must be 0 or 1");
        return RL_ECONFIG;
    }
    for (int c = 6; c < 9; c++) {
        if (a[5] == 0 && !isfinite(a[c])) {
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
    if (!(rl_rng_uniform(g) < a[0])) {
        return;
    }
    double area = (double)w * h;
    for (int t = 0; t < 10; t++) {
        double ea = area * uniform(g, a[1], a[2]);
        double ar = exp(uniform(g, a[3], a[4]));
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
                float v = a[5] != 0 ? normal(&g) : (float)a[6 + c];
                rl_store_value(out, x, y, c, v);
            }
        }
    }
    return 0;
}

static const rl_op_def erase = {
    .name = "erase",
    .nargs = 9,
    .check = erase_check,
    .draw = erase_draw,
    .apply_out = erase_apply_out,
};

const rl_op_def *const rl_output_ops[] = {
    &erase,
    NULL,
};
