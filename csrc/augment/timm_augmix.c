/*
 * augment/timm_augmix.c - timm's AugMixAugment (augment_and_mix_transform,
 * "augmix-m5-w4-d2" and the like), basic and blended ("-b1").
 *
 * DESIGN: timm draws float32 mixing weights ~ Dirichlet(alpha, ...) over
 * `width` chains and m = float32(Beta(alpha, alpha)); each chain is
 * `depth` (or 1..3 uniformly, for depth <= 0) AugmentOps picked uniformly
 * with replacement and applied in turn to the image (timm.c's calls, their
 * magnitudes uniform in [0, magnitude] unless mstd says otherwise); the
 * chains are summed in float32 numpy, mixed += w * float32(chain), each
 * product and sum rounded to float32, clipped to [0, 255] and truncated
 * to uint8, and the result blended with the image by Pillow's
 * Image.blend(img, mixed, m) (float32, truncated). The blended mode
 * instead blends each chain into the running image, Image.blend(img,
 * chain, w'_i), with timm's _calc_blended_weights in float32 (numpy 2's
 * promotion of a float32 with a Python float). Given the same draws the
 * mix is exact.
 *
 * args: the head (timm.h), width, depth, alpha, blended (0/1)
 * params: m, the width weights, then width chains of D slots, D = depth,
 *         or 3 when depth <= 0 (a slot of 0 past a chain's end): width *
 *         (1 + D) + 1 <= RL_OP_MAX_PARAMS
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "augment/timm.h"

#define TAM_RANDOM_DEPTH 3

#define TAM_OWN(X)             \
    X(TAM_, width, 1, RL_ARG_) \
    X(TAM_, depth, 1, RL_ARG_) \
    X(TAM_, alpha, 1, RL_ARG_) \
    X(TAM_, blended, 1, RL_ARG_)
enum { TAM_base_ = TM_NARGS - 1, TAM_OWN(RL_OP_ARG_AT) TAM_NARGS };
static const rl_op_field TAM_fields[] = {TM_HEAD_ARGS(RL_OP_FIELD)
                                             TAM_OWN(RL_OP_FIELD) RL_OP_END};
static const rl_op_limit TAM_limits[] = {
    {"params", RL_OP_MAX_PARAMS},
    {"random_depth_slots", TAM_RANDOM_DEPTH},
    RL_OP_END};

/* The slots a chain takes. */
static int slots_of(double depth)
{
    return depth > 0 ? (int)depth : TAM_RANDOM_DEPTH;
}

static int tam_check(const double *a, char *msg)
{
    int rc = rl__timm_check_head("timm_augmix", a, msg);
    if (rc != 0) {
        return rc;
    }
    double w = a[TAM_width], d = a[TAM_depth], alpha = a[TAM_alpha];
    if (!(isfinite(w) && w == floor(w) && w >= 1 && isfinite(d) &&
          d == floor(d) && fabs(d) <= RL_OP_MAX_PARAMS &&
          w * (1 + slots_of(d)) + 1 <= RL_OP_MAX_PARAMS)) {
        snprintf(msg, RL_MSG_MAX,
                 "timm_augmix: width * (1 + depth) + 1 must be at most %d "
                 "(depth 3 when random)",
                 RL_OP_MAX_PARAMS);
        return RL_ECONFIG;
    }
    if (a[TAM_blended] != 0 && a[TAM_blended] != 1) {
        snprintf(msg, RL_MSG_MAX, "timm_augmix: blended must be 0 or 1");
        return RL_ECONFIG;
    }
    if (!(isfinite(alpha) && alpha > 0)) {
        snprintf(msg, RL_MSG_MAX, "timm_augmix: alpha must be positive");
        return RL_ECONFIG;
    }
    return 0;
}

static void tam_draw(const rl_op *op, rl_rng *g, int w, int h, double *params)
{
    (void)w;
    (void)h;
    const double *a = op->args;
    int width = (int)a[TAM_width], slots = slots_of(a[TAM_depth]);
    double beta[2];
    rl__dirichlet_f32(g, a[TAM_alpha], 2, beta); /* Beta(a, a) = beta[0] */
    params[0] = beta[0];
    rl__dirichlet_f32(g, a[TAM_alpha], width, params + 1);
    double *slot = params + 1 + width;
    for (int c = 0; c < width; c++, slot += slots) {
        int depth =
            a[TAM_depth] > 0 ? slots : 1 + rl_rng_index(g, TAM_RANDOM_DEPTH);
        for (int j = 0; j < depth; j++) {
            int row = rl_rng_index(g, (int)a[TM_n_rows]);
            slot[j] = rl__timm_draw(a, row, g);
        }
    }
}

/* Runs chain c's slots on a copy of img into chain (a w x h image of
 * rows w * 3 bytes). */
static int run_chain(const double *a, const double *slot, int slots,
                     const rl_image *img, uint8_t *chain, char *msg)
{
    size_t row = (size_t)img->w * 3;
    for (int y = 0; y < img->h; y++) {
        memcpy(chain + y * row, img->data + y * img->stride, row);
    }
    rl_image ci = {chain, img->w, img->h, row};
    for (int j = 0; j < slots; j++) {
        int rc = rl__timm_run(a, slot[j], &ci, msg);
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}

/* timm's _apply_blended: each chain (from the original image) blended
 * into the running image by _calc_blended_weights. */
static int apply_blended(const double *a, const double *params, rl_image *img,
                         uint8_t *orig, uint8_t *chain, char *msg)
{
    int width = (int)a[TAM_width], slots = slots_of(a[TAM_depth]);
    size_t row = (size_t)img->w * 3;
    float ws[RL_OP_MAX_PARAMS], m = (float)params[0], cump = 1.0f;
    for (int c = width - 1; c >= 0; c--) {
        float w = (float)params[1 + c] * m;
        ws[c] = w / cump;
        cump = cump * (1.0f - ws[c]);
    }
    for (int y = 0; y < img->h; y++) {
        memcpy(orig + y * row, img->data + y * img->stride, row);
    }
    rl_image src = {orig, img->w, img->h, row};
    const double *slot = params + 1 + width;
    for (int c = 0; c < width; c++, slot += slots) {
        int rc = run_chain(a, slot, slots, &src, chain, msg);
        if (rc != 0) {
            return rc;
        }
        /* Image.blend(img, chain, w): the result into chain, then img */
        rl_image ci = {chain, img->w, img->h, row};
        rl_pil_blend(img->data, img->stride, &ci, ws[c]);
        for (int y = 0; y < img->h; y++) {
            memcpy(img->data + y * img->stride, chain + y * row, row);
        }
    }
    return 0;
}

static int tam_apply(const rl_op *op, const double *params, rl_image *img,
                     char *msg)
{
    const double *a = op->args;
    int width = (int)a[TAM_width], slots = slots_of(a[TAM_depth]);
    size_t row = (size_t)img->w * 3, n = row * img->h;
    float *acc = calloc(n, sizeof(float));
    uint8_t *chain = malloc(2 * n);
    if (acc == NULL || chain == NULL) {
        free(acc);
        free(chain);
        snprintf(msg, RL_MSG_MAX, "out of memory");
        return -ENOMEM;
    }
    int rc = 0;
    if (a[TAM_blended] != 0) {
        rc = apply_blended(a, params, img, chain + n, chain, msg);
        free(acc);
        free(chain);
        return rc;
    }
    const double *slot = params + 1 + width;
    for (int c = 0; c < width && rc == 0; c++, slot += slots) {
        rc = run_chain(a, slot, slots, img, chain, msg);
        float weight = (float)params[1 + c];
        for (size_t i = 0; i < n && rc == 0; i++) {
            float t = weight * (float)chain[i]; /* no fused multiply-add */
            acc[i] = acc[i] + t;
        }
    }
    if (rc == 0) {
        /* Image.blend(img, mixed, m), m in [0, 1] */
        float m = (float)params[0];
        for (int y = 0; y < img->h; y++) {
            uint8_t *p = img->data + y * img->stride;
            const float *s = acc + y * row;
            for (size_t i = 0; i < row; i++) {
                float v = s[i] < 0.0f ? 0.0f : s[i] > 255.0f ? 255.0f : s[i];
                int mixed = (int)(uint8_t)v;
                float t = m * (float)(mixed - (int)p[i]);
                t = (float)p[i] + t;
                p[i] = (uint8_t)t;
            }
        }
    }
    free(acc);
    free(chain);
    return rc;
}

const rl_op_def rl__timm_augmix = {
    .name = "timm_augmix",
    .nargs = TAM_NARGS,
    .fields = TAM_fields,
    .limits = TAM_limits,
    .check = tam_check,
    .draw = tam_draw,
    .apply = tam_apply,
};
