/*
 * core/plan_iou.c - torchvision v2's RandomZoomOut and RandomIoUCrop in a
 * sample's plan.
 *
 * DESIGN: the draws are targets/draws.c's rl_draw_zoom_out and
 * rl_draw_iou_crop (torchvision's make_params, tested against it), run on
 * the sample's plan stream in that order, before the flips, the IoU crop
 * reading the sample's own boxes moved by the zoom-out's offset (and
 * clamped to its canvas, as torchvision's pad leaves them): the plan
 * of a sample stays a function of (seed, epoch, key, view) and of its
 * data, so resume gives the same canvas and crop. The zoom-out is a
 * constant padding of the image (the window's: the plan's rectangle and
 * pad.fill); the crop is whole pixels inside the canvas (the check keeps
 * max_scale <= 1), so the image's part of it is a 1:1 copy of a box of
 * the image (crop_first, no resize) and the rest is the fill:
 * torchvision's pad then crop of the image, exactly.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/plan.h"
#include "targets/boxes.h"
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

/* 0 where why is NULL, else RL_ECONFIG with msg "<who>: <why>". */
static int refused(const char *who, const char *why, char *msg)
{
    if (why == NULL)
        return 0;
    snprintf(msg, RL_MSG_MAX, "%s: %s", who, why);
    return RL_ECONFIG;
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
              "transform but a zoom_out: no resize before it";
    return refused("RandomIoUCrop", why, msg);
}

static rl_zoom_out_opts zoom_opts_of(const rl_transform *t)
{
    return (rl_zoom_out_opts){
        .side_lo = t->zoom_side[0], .side_hi = t->zoom_side[1], .p = t->zoom_p};
}

int rl__zoom_out_check(const rl_transform *t, char *msg)
{
    if (t->zoom_out == 0)
        return 0;
    rl_zoom_out_opts o = zoom_opts_of(t);
    const char *why = rl_zoom_out_check(&o);
    if (why == NULL &&
        (t->zoom_out != 1 || !t->varying || rl_transform_resizes(t) ||
         t->resize_short_hi != 0 || t->pad_mode != RL_PAD_CONSTANT))
        why = "zoom_out (0 or 1) is the first geometry of a varying "
              "transform: no resize before it, a constant fill";
    return refused("RandomZoomOut", why, msg);
}

/* The zoom-out's canvas of a width x height image (the image itself
 * where none is configured or its p draw fails): 0, or RL_EDECODE with
 * msg for a canvas side past RL_MAX_SIDE. */
static int zoom_canvas(const rl_transform *t, int width, int height,
                       struct rl_rng *g, rl_plan *p, char *msg)
{
    p->zoom_out = p->zoom_left = p->zoom_top = 0;
    p->zoom_w = width;
    p->zoom_h = height;
    if (!t->zoom_out)
        return 0;
    rl_zoom_out_opts o = zoom_opts_of(t);
    rl_zoom_out_draw d;
    rl_draw_zoom_out(g, &o, width, height, &d);
    if (!d.applied)
        return 0;
    if (d.canvas_width > RL_MAX_SIDE || d.canvas_height > RL_MAX_SIDE) {
        snprintf(msg, RL_MSG_MAX,
                 "RandomZoomOut puts the %dx%d image on a %dx%d canvas: a "
                 "side past %d pixels",
                 width, height, d.canvas_width, d.canvas_height, RL_MAX_SIDE);
        return RL_EDECODE;
    }
    p->zoom_out = 1;
    p->zoom_left = d.left;
    p->zoom_top = d.top;
    p->zoom_w = d.canvas_width;
    p->zoom_h = d.canvas_height;
    return 0;
}

/* The IoU crop's draw on the plan's canvas, the n boxes moved by the
 * zoom-out's offset and clamped to the canvas, as torchvision's pad
 * moves and clamps them (exact in float64). 0, or -ENOMEM with msg. */
static int iou_draw(const rl_transform *t, struct rl_rng *g,
                    const double *boxes, size_t n, const rl_plan *p,
                    rl_iou_crop_draw *d, char *msg)
{
    rl_iou_crop_opts o = opts_of(t);
    double *moved = NULL;
    if (p->zoom_out && n > 0) {
        moved = malloc(4 * n * sizeof(double));
        if (moved == NULL) {
            snprintf(msg, RL_MSG_MAX, "out of memory for %zu boxes", n);
            return -ENOMEM;
        }
        for (size_t i = 0; i < 4 * n; i++)
            moved[i] = boxes[i] + (i % 2 ? p->zoom_top : p->zoom_left);
        rl_boxes_clamp(moved, n, RL_BOX_XYXY, p->zoom_w, p->zoom_h);
        boxes = moved;
    }
    rl_draw_iou_crop(g, &o, p->zoom_w, p->zoom_h, boxes, n, d);
    free(moved);
    return 0;
}

/* One axis of the image's part of the canvas window [c0, c0 + cn), the
 * image lying at [at, at + n): the box's first pixel and length in the
 * image (*b0, *bn) and the rectangle's in the window (*v0, *vn; 0 and
 * the whole image where the window is all fill). */
static void canvas_axis(int c0, int cn, int at, int n, double *b0, double *bn,
                        int *v0, int *vn)
{
    int lo = c0 > at ? c0 : at;
    int hi = c0 + cn < at + n ? c0 + cn : at + n;
    if (hi <= lo) {
        *b0 = 0;
        *bn = n;
        *v0 = *vn = 0;
        return;
    }
    *b0 = lo - at;
    *bn = hi - lo;
    *v0 = lo - c0;
    *vn = hi - lo;
}

int rl__plan_zoom_iou(const rl_transform *t, int width, int height,
                      struct rl_rng *g, const double *boxes, size_t n,
                      rl_plan *p, char *msg)
{
    int rc = zoom_canvas(t, width, height, g, p, msg);
    p->iou_x = p->iou_y = 0;
    p->iou_w = p->zoom_w;
    p->iou_h = p->zoom_h;
    if (rc == 0 && t->iou_crop) {
        rl_iou_crop_draw d = {0};
        rc = iou_draw(t, g, boxes, n, p, &d, msg);
        p->iou_crop = d.crop;
        p->iou_option = d.option;
        p->iou_rounds = d.rounds;
        p->iou_limited = d.limited;
        if (rc == 0 && d.crop) {
            p->iou_x = d.left;
            p->iou_y = d.top;
            p->iou_w = d.width;
            p->iou_h = d.height;
        }
    }
    if (rc != 0)
        return rc;
    if (p->iou_w > RL_MAX_SIDE || p->iou_h > RL_MAX_SIDE) {
        snprintf(msg, RL_MSG_MAX,
                 "RandomZoomOut/RandomIoUCrop leave the %dx%d image %dx%d: "
                 "a side past %d pixels",
                 width, height, p->iou_w, p->iou_h, RL_MAX_SIDE);
        return RL_EDECODE;
    }
    canvas_axis(p->iou_x, p->iou_w, p->zoom_left, width, &p->x, &p->w, &p->vx,
                &p->vw);
    canvas_axis(p->iou_y, p->iou_h, p->zoom_top, height, &p->y, &p->h, &p->vy,
                &p->vh);
    p->out_w = p->iou_w;
    p->out_h = p->iou_h;
    return 0;
}
