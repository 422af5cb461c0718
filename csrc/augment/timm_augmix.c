/*
 * augment/timm_augmix.c - timm's AugMixAugment (augment_and_mix_transform,
 * "augmix-m5-w4-d2" and the like), its basic (not blended) mode.
 *
 * DESIGN: timm draws float32 mixing weights ~ Dirichlet(alpha, ...) over
 * `width` chains and m = float32(Beta(alpha, alpha)); each chain is
 * `depth` (or 1..3 uniformly, for depth <= 0) AugmentOps picked uniformly
 * with replacement and applied in turn to the image (timm.c's calls, their
 * magnitudes uniform in [0, magnitude] unless mstd says otherwise); the
 * chains are summed in float32 numpy, mixed += w * float32(chain), each
 * product and sum rounded to float32, clipped to [0, 255] and truncated
 * to uint8, and the result blended with the image by Pillow's
 * Image.blend(img, mixed, m) (float32, truncated). Given the same draws the
 * mix is exact.
 *
 * args: the head (timm.h), width, depth, alpha
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
    X(TAM_, alpha, 1, RL_ARG_)
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
            a[TAM_depth] > 0 ? slots : 1 + rl__timm_pick(g, TAM_RANDOM_DEPTH);
        for (int j = 0; j < depth; j++) {
            int row = rl__timm_pick(g, (int)a[TM_n_rows]);
            slot[j] = rl__timm_draw(a, row, g);
        }
    }
}

static int tam_apply(const rl_op *op, const double *params, rl_image *img,
                     char *msg)
{
    const double *a = op->args;
    int width = (int)a[TAM_width], slots = slots_of(a[TAM_depth]);
    size_t row = (size_t)img->w * 3, n = row * img->h;
    float *acc = calloc(n, sizeof(float));
    uint8_t *chain = malloc(n);
    if (acc == NULL || chain == NULL) {
        free(acc);
        free(chain);
        snprintf(msg, RL_MSG_MAX, "out of memory");
        return -ENOMEM;
    }
    int rc = 0;
    const double *slot = params + 1 + width;
    for (int c = 0; c < width && rc == 0; c++, slot += slots) {
        for (int y = 0; y < img->h; y++) {
            memcpy(chain + y * row, img->data + y * img->stride, row);
        }
        rl_image ci = {chain, img->w, img->h, row};
        for (int j = 0; j < slots && rc == 0; j++) {
            rc = rl__timm_run(a, slot[j], &ci, msg);
        }
        float weight = (float)params[1 + c];
        for (size_t i = 0; i < n; i++) {
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
