/*
 * core/plan.c - sample geometry as torchvision defines it.
 *
 * DESIGN: the arithmetic follows torchvision's definitions (Resize's
 * truncated long side, CenterCrop's rounded offsets, RandomResizedCrop's ten
 * tries in log-ratio space and its central fallback), with Python's
 * round-half-to-even reproduced by nearbyint() in the default rounding
 * mode. Only the random source differs: torchvision draws from torch's
 * global generator, we draw from Philox keyed by (seed, epoch, index), so the
 * distribution is the same and the draws are reproducible per sample
 * (rng.h).
 */
#define _GNU_SOURCE
#include "core/plan.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>

#include "rng.h"

/* torch.randint(lo, hi) for hi > lo: uniform over [lo, hi). */
static int randint(rl_rng *g, int lo, int hi)
{
    int v = lo + (int)floor(rl_rng_uniform(g) * (double)(hi - lo));
    return v < hi ? v : hi - 1;
}

/* Python's round() on a double, to int. */
static int pyround(double x)
{
    return (int)nearbyint(x);
}

static void random_crop_box(const rl_transform *t, int width, int height,
                            rl_rng *g, int *top, int *left, int *h, int *w)
{
    double area = (double)width * (double)height;
    double lr0 = log(t->ratio_lo), lr1 = log(t->ratio_hi);
    for (int attempt = 0; attempt < 10; attempt++) {
        double target = area * (t->scale_lo + rl_rng_uniform(g) *
                                                  (t->scale_hi - t->scale_lo));
        double ar = exp(lr0 + rl_rng_uniform(g) * (lr1 - lr0));
        int cw = pyround(sqrt(target * ar));
        int ch = pyround(sqrt(target / ar));
        if (cw > 0 && cw <= width && ch > 0 && ch <= height) {
            *top = randint(g, 0, height - ch + 1);
            *left = randint(g, 0, width - cw + 1);
            *h = ch;
            *w = cw;
            return;
        }
    }
    double in_ratio = (double)width / (double)height;
    double rmin = fmin(t->ratio_lo, t->ratio_hi);
    double rmax = fmax(t->ratio_lo, t->ratio_hi);
    int cw, ch;
    if (in_ratio < rmin) {
        cw = width;
        ch = pyround(cw / rmin);
    } else if (in_ratio > rmax) {
        ch = height;
        cw = pyround(ch * rmax);
    } else {
        cw = width;
        ch = height;
    }
    *top = (height - ch) / 2;
    *left = (width - cw) / 2;
    *h = ch;
    *w = cw;
}

/* Resize (as configured) then CenterCrop(out_h, out_w). */
static int resize_crop_box(const rl_transform *t, int width, int height,
                           rl_plan *p)
{
    int nw = width, nh = height;
    if (t->resize_short > 0) {
        int s = t->resize_short;
        /* The long side as torchvision computes it, kept in int range
         * (a 1 x 65500 image resized to 40000 would overflow it). */
        if (width <= height) {
            nw = s;
            nh = (int)fmin((double)s * height / width, (double)INT_MAX);
        } else {
            nh = s;
            nw = (int)fmin((double)s * width / height, (double)INT_MAX);
        }
    } else if (t->resize_h > 0 && t->resize_w > 0) {
        nw = t->resize_w;
        nh = t->resize_h;
    }
    if (nw <= 0 || nh <= 0) {
        return RL_EINTERNAL;
    }
    double sx = (double)nw / width, sy = (double)nh / height;
    /* Horizontal axis: the crop window in resized pixels, clipped to the
     * resized image; what the clip removes is zero padding. */
    int ow = p->out_w, oh = p->out_h;
    if (ow <= nw) {
        int left = pyround((nw - ow) / 2.0);
        p->vx = 0;
        p->vw = ow;
        p->x = left / sx;
        p->w = ow / sx;
    } else {
        p->vx = (ow - nw) / 2;
        p->vw = nw;
        p->x = 0;
        p->w = width;
    }
    if (oh <= nh) {
        int top = pyround((nh - oh) / 2.0);
        p->vy = 0;
        p->vh = oh;
        p->y = top / sy;
        p->h = oh / sy;
    } else {
        p->vy = (oh - nh) / 2;
        p->vh = nh;
        p->y = 0;
        p->h = height;
    }
    return 0;
}

int rl_plan_make(const rl_transform *t, int width, int height, uint64_t seed,
                 int64_t epoch, int64_t index, rl_plan *p)
{
    if (width <= 0 || height <= 0 || t->out_w <= 0 || t->out_h <= 0) {
        return RL_EINTERNAL;
    }
    rl_rng g;
    rl_rng_init(&g, seed, epoch, index, RL_RNG_PLAN);
    p->out_w = t->out_w;
    p->out_h = t->out_h;
    p->filter = (rl_filter)t->filter;
    p->passes = (rl_passes)t->passes;
    if (t->kind == RL_T_RANDOM_CROP) {
        int top, left, h, w;
        random_crop_box(t, width, height, &g, &top, &left, &h, &w);
        p->x = left;
        p->y = top;
        p->w = w;
        p->h = h;
        p->vx = p->vy = 0;
        p->vw = t->out_w;
        p->vh = t->out_h;
        p->crop_first = true;
    } else if (t->kind == RL_T_RESIZE_CROP) {
        int rc = resize_crop_box(t, width, height, p);
        if (rc != 0) {
            return rc;
        }
        p->crop_first = false;
    } else {
        return RL_EINTERNAL;
    }
    /* The flip draw comes after the crop's, as torchvision's Compose runs
     * RandomResizedCrop before RandomHorizontalFlip. */
    p->flip = t->flip_p > 0.0 && rl_rng_uniform(&g) < t->flip_p;
    if (p->flip) {
        p->vx = p->out_w - p->vx - p->vw;
    }
    return 0;
}

int rl_transform_check(const rl_transform *t, char *msg)
{
    if (t->kind != RL_T_RESIZE_CROP && t->kind != RL_T_RANDOM_CROP) {
        snprintf(msg, RL_MSG_MAX,
                 "the transform must give a fixed output size");
        return RL_ECONFIG;
    }
    if (t->out_w <= 0 || t->out_h <= 0 || t->out_w > RL_MAX_SIDE ||
        t->out_h > RL_MAX_SIDE) {
        snprintf(msg, RL_MSG_MAX,
                 "the output size must be 1..%d a side, not %dx%d", RL_MAX_SIDE,
                 t->out_w, t->out_h);
        return RL_ECONFIG;
    }
    if (t->resize_short < 0 || t->resize_short > RL_MAX_SIDE ||
        t->resize_h < 0 || t->resize_h > RL_MAX_SIDE || t->resize_w < 0 ||
        t->resize_w > RL_MAX_SIDE) {
        snprintf(msg, RL_MSG_MAX, "resize sizes must be in 0..%d", RL_MAX_SIDE);
        return RL_ECONFIG;
    }
    if (!(t->ratio_lo > 0) || !(t->ratio_hi > 0) || !(t->scale_lo >= 0) ||
        !(t->scale_hi >= t->scale_lo) || !(t->flip_p >= 0) ||
        !(t->flip_p <= 1)) {
        snprintf(msg, RL_MSG_MAX, "invalid scale, ratio or flip_p");
        return RL_ECONFIG;
    }
    if (t->filter < 0 || t->filter >= RL_FILTER_COUNT) {
        snprintf(msg, RL_MSG_MAX, "unknown interpolation %d", t->filter);
        return RL_ECONFIG;
    }
    if (t->passes != RL_PASSES_PILLOW13 &&
        t->passes != RL_PASSES_HORIZONTAL_FIRST) {
        snprintf(msg, RL_MSG_MAX, "unknown pass order %d", t->passes);
        return RL_ECONFIG;
    }
    return 0;
}
