/*
 * core/plan_iou.c - torchvision v2's RandomIoUCrop in a sample's plan.
 *
 * DESIGN: the draw is targets/draws.c's rl_draw_iou_crop (torchvision's
 * make_params loop, tested against it), run on the sample's plan stream
 * before the flips, reading the sample's own boxes: the plan of a sample
 * stays a function of (seed, epoch, key, view) and of its data, so resume
 * gives the same crop. The crop is whole pixels inside the image (the
 * check keeps max_scale <= 1), so its pixels are a 1:1 copy of the box
 * (crop_first, no resize): torchvision's crop of the image, exactly.
 */
#include <stdio.h>

#include "core/plan.h"
#include "targets/draws.h"

static rl_iou_crop_opts opts_of(const rl_transform *t)
{
    return (rl_iou_crop_opts){
        .min_scale = t->iou_scale_lo,
        .max_scale = t->iou_scale_hi,
        .min_aspect_ratio = t->iou_aspect_lo,
        .max_aspect_ratio = t->iou_aspect_hi,
        .options = t->iou_options,
        .n_options = t->n_iou_options,
        .trials = t->iou_trials,
    };
}

int rl__iou_crop_check(const rl_transform *t, char *msg)
{
    if (t->iou_crop == 0)
        return 0;
    rl_iou_crop_opts o = opts_of(t);
    const char *why = t->n_iou_options > RL_MAX_IOU_OPTIONS
                          ? "sampler_options must hold at most 16 values"
                          : rl_iou_crop_check(&o);
    if (why == NULL && t->iou_scale_hi > 1.0)
        why = "max_scale must be at most 1 (a crop past the image's edges)";
    if (why == NULL && (t->iou_crop != 1 || !t->varying ||
                        rl_transform_resizes(t) || t->resize_short_hi != 0))
        why = "iou_crop (0 or 1) is the only geometry of a varying "
              "transform: no resize before it";
    if (why != NULL) {
        snprintf(msg, RL_MSG_MAX, "RandomIoUCrop: %s", why);
        return RL_ECONFIG;
    }
    return 0;
}

int rl__plan_iou_crop(const rl_transform *t, int width, int height,
                      struct rl_rng *g, const double *boxes, size_t n,
                      rl_plan *p, char *msg)
{
    rl_iou_crop_opts o = opts_of(t);
    rl_iou_crop_draw d;
    rl_draw_iou_crop(g, &o, width, height, boxes, n, &d);
    p->iou_crop = d.crop;
    p->iou_option = d.option;
    p->iou_rounds = d.rounds;
    p->iou_limited = d.limited;
    int x = 0, y = 0, w = width, h = height;
    if (d.crop) {
        x = d.left;
        y = d.top;
        w = d.width;
        h = d.height;
    }
    if (w > RL_MAX_SIDE || h > RL_MAX_SIDE) {
        snprintf(msg, RL_MSG_MAX,
                 "RandomIoUCrop leaves the %dx%d image %dx%d: a side past %d "
                 "pixels",
                 width, height, w, h, RL_MAX_SIDE);
        return RL_EDECODE;
    }
    p->x = x;
    p->y = y;
    p->w = w;
    p->h = h;
    p->out_w = p->vw = w;
    p->out_h = p->vh = h;
    p->vx = p->vy = 0;
    return 0;
}
