/*
 * augment/photometric.c - torchvision.transforms.v2's
 * RandomPhotometricDistort as a source op (augment.h): it runs on the
 * whole decoded image before the geometry, as torchvision runs it before
 * the detection presets' zoom-out, crops and flips.
 *
 * DESIGN: the draw is targets/draws.c's rl_draw_photometric (torchvision's
 * gates, factors, contrast's place and channel permutation, in its order of
 * draws) from the op's place in the sample's augment stream; the apply is
 * color.c's tensor kernels in torchvision's order: brightness, contrast
 * when drawn before, saturation, hue, contrast when drawn after, then the
 * permutation. Contrast blends with the mean of the grayscale of the image
 * as it is then: being a source op, that image is the whole one.
 */
#include <math.h>
#include <stdio.h>

#include "augment/kernels.h"
#include "targets/draws.h"

/* Its arguments: a (min, max) range per factor, then p. */
#define PD_ARGS(X)                 \
    X(PD_, brightness, 2, RL_ARG_) \
    X(PD_, contrast, 2, RL_ARG_)   \
    X(PD_, saturation, 2, RL_ARG_) \
    X(PD_, hue, 2, RL_ARG_)        \
    X(PD_, p, 1, RL_ARG_)
enum { PD_ARGS(RL_OP_ARG_AT) PD_NARGS };
static const rl_op_field PD_fields[] = {PD_ARGS(RL_OP_FIELD) RL_OP_END};
_Static_assert(PD_brightness == 2 * RL_DISTORT_BRIGHTNESS &&
                   PD_contrast == 2 * RL_DISTORT_CONTRAST &&
                   PD_saturation == 2 * RL_DISTORT_SATURATION &&
                   PD_hue == 2 * RL_DISTORT_HUE && PD_p == 8,
               "a range per factor in the draw's order, then p");

/* Its parameters: a factor per jitter (NaN: not applied), contrast_before,
 * permute, then the permutation of the three channels. */
enum { PP_FACTOR = 0, PP_BEFORE = 4, PP_PERMUTE = 5, PP_PERM = 6 };
_Static_assert(PP_PERM + 3 <= RL_OP_MAX_PARAMS, "the parameters fit");

static void options(const double *a, rl_photometric_opts *o)
{
    for (int k = 0; k < 4; k++) {
        o->lo[k] = a[2 * k];
        o->hi[k] = a[2 * k + 1];
    }
    o->p = a[PD_p];
    o->channels = 3;
}

static int check(const double *args, char *msg)
{
    rl_photometric_opts o;
    options(args, &o);
    const char *why = rl_photometric_check(&o);
    if (why != NULL) {
        snprintf(msg, RL_MSG_MAX, "photometric_distort: %s", why);
        return RL_ECONFIG;
    }
    return 0;
}

static void draw(const rl_op *op, rl_rng *g, int w, int h, double *params)
{
    (void)w;
    (void)h;
    rl_photometric_opts o;
    options(op->args, &o);
    rl_photometric_draw d;
    rl_draw_photometric(g, &o, &d);
    for (int k = 0; k < 4; k++) {
        params[PP_FACTOR + k] = d.apply[k] ? d.factor[k] : NAN;
    }
    params[PP_BEFORE] = d.contrast_before;
    params[PP_PERMUTE] = d.permute;
    for (int c = 0; c < 3; c++) {
        params[PP_PERM + c] = d.permute ? d.perm[c] : c;
    }
}

/* Channel c of the result is channel perm[c] of img. */
static void permute(rl_image *img, const int perm[3])
{
    for (int y = 0; y < img->h; y++) {
        uint8_t *px = img->data + (size_t)y * img->stride;
        for (int x = 0; x < img->w; x++, px += 3) {
            uint8_t in[3] = {px[0], px[1], px[2]};
            px[0] = in[perm[0]];
            px[1] = in[perm[1]];
            px[2] = in[perm[2]];
        }
    }
}

static int contrast_if(rl_image *img, const double *params, int before)
{
    double f = params[PP_FACTOR + RL_DISTORT_CONTRAST];
    if (isnan(f) || (params[PP_BEFORE] != 0) != before) {
        return 0;
    }
    return rl_k_contrast(img, f);
}

static int apply(const rl_op *op, const double *params, rl_image *img,
                 char *msg)
{
    (void)op;
    (void)msg;
    const double *f = params + PP_FACTOR;
    int rc = isnan(f[RL_DISTORT_BRIGHTNESS])
                 ? 0
                 : rl_k_brightness(img, f[RL_DISTORT_BRIGHTNESS]);
    if (rc == 0) {
        rc = contrast_if(img, params, 1);
    }
    if (rc == 0 && !isnan(f[RL_DISTORT_SATURATION])) {
        rc = rl_k_saturation(img, f[RL_DISTORT_SATURATION]);
    }
    if (rc == 0 && !isnan(f[RL_DISTORT_HUE])) {
        rc = rl_k_hue(img, f[RL_DISTORT_HUE]);
    }
    if (rc == 0) {
        rc = contrast_if(img, params, 0);
    }
    if (rc == 0 && params[PP_PERMUTE] != 0) {
        int perm[3];
        for (int c = 0; c < 3; c++) {
            perm[c] = (int)params[PP_PERM + c] % 3;
        }
        permute(img, perm);
    }
    return rc;
}

static const rl_op_def photometric = {
    .name = "photometric_distort",
    .nargs = PD_NARGS,
    .fields = PD_fields,
    .check = check,
    .draw = draw,
    .apply = apply,
    .source = true,
    .still = true,
};

const rl_op_def *const rl_photometric_ops[] = {&photometric, NULL};
