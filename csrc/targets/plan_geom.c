/*
 * targets/plan_geom.c - the target geometry of a sample read from its
 * plan (targets/plan_geom.h).
 *
 * DESIGN: the plan says where the pixels came from (a box of the source,
 * a rectangle of the output, a window's first pixel on the resized
 * image); the steps are rebuilt from it with torchvision's own builders
 * (targets/boxes.c), one a transform the pixels went through, so a box
 * is rounded and clamped where torchvision's kernels round and clamp it.
 * The window is written as the image is made: its padding, then its
 * crop. (torchvision's center_crop of boxes instead crops at the
 * rounded, possibly negative, anchor round((n - out) / 2), one pixel off
 * its own image's padding of (out - n) // 2 when out - n is 3 modulo 4:
 * the pixels are what the boxes follow.)
 */
#include "targets/plan_geom.h"

#include <limits.h>
#include <math.h>

/* One axis of a centre crop: the resized length, which the plan implies
 * (the rectangle where the crop pads: the whole resized axis; else the
 * box, out resized pixels long, in source pixels). */
static int centre_length(int vsize, double bsize, int out, int full)
{
    if (vsize < out)
        return vsize;
    return (int)fmin(nearbyint((double)out / bsize * full), (double)INT_MAX);
}

/* Pads (left, top, right, bottom) where any is positive, then crops the
 * ow x oh window whose first pixel is (x0, y0) of the padded canvas
 * where it is not the whole canvas (torchvision's RandomCrop skips both
 * where they would do nothing). */
static int window(rl_target_geom *g, const int64_t pad[4], int64_t x0,
                  int64_t y0, int ow, int oh, const char **err)
{
    int64_t w = rl_geom_out_width(g) + pad[0] + pad[2];
    int64_t h = rl_geom_out_height(g) + pad[1] + pad[3];
    if (w > INT_MAX || h > INT_MAX || x0 < 0 || y0 < 0 || x0 + ow > w ||
        y0 + oh > h) {
        *err = "the plan's window does not fit its padded image";
        return -1;
    }
    if ((pad[0] || pad[1] || pad[2] || pad[3]) &&
        rl_geom_pad(g, (int)pad[0], (int)pad[1], (int)pad[2], (int)pad[3],
                    err) != 0) {
        return -1;
    }
    if (w == ow && h == oh)
        return 0;
    return rl_geom_crop(g, (int)y0, (int)x0, oh, ow, err);
}

/* The window whose first pixel is at (x0, y0) of the n_w x n_h canvas,
 * padded where it passes an edge by what it passes (CenterCrop, timm's
 * crop-or-pad windows). */
static int window_at(rl_target_geom *g, int x0, int y0, int nw, int nh, int ow,
                     int oh, const char **err)
{
    int64_t pad[4] = {x0 < 0 ? -(int64_t)x0 : 0, y0 < 0 ? -(int64_t)y0 : 0,
                      (int64_t)x0 + ow > nw ? (int64_t)x0 + ow - nw : 0,
                      (int64_t)y0 + oh > nh ? (int64_t)y0 + oh - nh : 0};
    return window(g, pad, x0 + pad[0], y0 + pad[1], ow, oh, err);
}

/* torchvision's RandomCrop on the nw x nh canvas: its padding (with
 * pad_if_needed's, on both sides, or PadIfSmaller's at the bottom and
 * right) and the window the plan drew. */
static int random_crop(rl_target_geom *g, const rl_transform *t,
                       const rl_plan *p, int nw, int nh, const char **err)
{
    int64_t pad[4] = {t->pad[0], t->pad[1], t->pad[2], t->pad[3]};
    int64_t pw = nw + pad[0] + pad[2], ph = nh + pad[1] + pad[3];
    if (t->pad_if_needed == 2) {
        /* A pad after a flip the plan applies after the window lies, before
         * that flip, on the other side. The window covers a padded axis
         * whole (pad[] is zero: rl_transform_check), so it starts at the
         * plan's offset either way. */
        int left = (t->pad_flips_first & 1) && p->flip;
        int top = (t->pad_flips_first & 2) && p->vflip;
        pad[left ? 0 : 2] += pw < p->out_w ? p->out_w - pw : 0;
        pad[top ? 1 : 3] += ph < p->out_h ? p->out_h - ph : 0;
        return window(g, pad, p->pad.x.w0, p->pad.y.w0, p->out_w, p->out_h,
                      err);
    }
    if (t->pad_if_needed == 1 && ph < p->out_h) {
        pad[1] += p->out_h - ph;
        pad[3] += p->out_h - ph;
    }
    if (t->pad_if_needed == 1 && pw < p->out_w) {
        pad[0] += p->out_w - pw;
        pad[2] += p->out_w - pw;
    }
    return window(g, pad, p->pad.x.w0 + pad[0], p->pad.y.w0 + pad[1], p->out_w,
                  p->out_h, err);
}

/* The detection reference's FixedSizeCrop (window RL_WINDOW_FIXED_SIZE)
 * on the nw x nh canvas as it runs: the crop where the image is larger on
 * some side, then the padding at the bottom and right. The boxes are
 * clamped to the crop, then to the padded canvas, not to the window of
 * the padded image (where a box past the image's edge would keep part of
 * the padding). */
static int fixed_size(rl_target_geom *g, const rl_plan *p, int nw, int nh,
                      int ow, int oh, const char **err)
{
    int cw = nw < ow ? nw : ow, ch = nh < oh ? nh : oh;
    if ((cw != nw || ch != nh) &&
        rl_geom_crop(g, p->pad.y.w0, p->pad.x.w0, ch, cw, err) != 0)
        return -1;
    if ((cw != ow || ch != oh) &&
        rl_geom_pad(g, 0, 0, ow - cw, oh - ch, err) != 0)
        return -1;
    return 0;
}

/* The resize (if any) and the window of RL_T_RESIZE_CROP and
 * RL_T_RESIZE_RANDOM_CROP on the w x h (trimmed) image. */
static int resize_window(rl_target_geom *g, const rl_transform *t,
                         const rl_plan *p, int w, int h, const char **err)
{
    int ow = p->out_w, oh = p->out_h, nw = w, nh = h;
    if (t->kind == RL_T_RESIZE_RANDOM_CROP) {
        nw = p->pad.x.n;
        nh = p->pad.y.n;
    } else if (rl_transform_resizes(t)) {
        nw = centre_length(p->vw, p->w, ow, w);
        nh = centre_length(p->vh, p->h, oh, h);
    }
    if (!rl_transform_resizes(t) && (nw != w || nh != h)) {
        *err = "the plan's window lies on a resized image, but the "
               "transform does not resize";
        return -1;
    }
    if (rl_transform_resizes(t) && rl_geom_resize(g, nh, nw, err) != 0)
        return -1;
    if (t->kind == RL_T_RESIZE_RANDOM_CROP &&
        t->window == RL_WINDOW_RANDOM_CROP) {
        return random_crop(g, t, p, nw, nh, err);
    }
    if (t->kind == RL_T_RESIZE_RANDOM_CROP && t->window == RL_WINDOW_FIXED_SIZE)
        return fixed_size(g, p, nw, nh, ow, oh, err);
    int x0 = p->pad.x.w0, y0 = p->pad.y.w0;
    if (t->kind == RL_T_RESIZE_CROP) {
        /* torchvision's CenterCrop: the rounded centre, or the padding
         * (out - n) // 2 before the image */
        x0 = ow <= nw ? (int)nearbyint((nw - ow) / 2.0) : -((ow - nw) / 2);
        y0 = oh <= nh ? (int)nearbyint((nh - oh) / 2.0) : -((oh - nh) / 2);
    }
    return window_at(g, x0, y0, nw, nh, ow, oh, err);
}

/* RandomZoomOut's padding where it was applied (even of nothing:
 * torchvision's pad clamps the boxes to the canvas), then RandomIoUCrop's
 * crop of the canvas where one was drawn (whole pixels, in the canvas:
 * torchvision clamps the boxes to it, as to every crop). */
static int zoom_iou(rl_target_geom *g, const rl_plan *p, int w, int h,
                    const char **err)
{
    if (p->zoom_out) {
        int right = p->zoom_w - w - p->zoom_left;
        int bottom = p->zoom_h - h - p->zoom_top;
        if (right < 0 || bottom < 0 || p->zoom_left < 0 || p->zoom_top < 0) {
            *err = "the plan's zoom-out canvas does not hold its image";
            return -1;
        }
        if (rl_geom_pad(g, p->zoom_left, p->zoom_top, right, bottom, err) != 0)
            return -1;
    }
    if (!p->iou_crop)
        return 0;
    return rl_geom_crop(g, p->iou_y, p->iou_x, p->iou_h, p->iou_w, err);
}

int rl_geom_from_plan(const rl_transform *t, const rl_plan *p, int width,
                      int height, rl_target_geom *g, const char **err)
{
    rl_geom_init(g, width, height);
    if (width < 1 || height < 1 || p->trim != t->trim || t->trim < 0 ||
        (int64_t)2 * t->trim >= width || (int64_t)2 * t->trim >= height ||
        (t->varying ? p->out_w < 1 || p->out_h < 1
                    : p->out_w != t->out_w || p->out_h != t->out_h)) {
        *err = "the plan was not made by this transform for an image of "
               "this size";
        return -1;
    }
    int w = width - 2 * t->trim, h = height - 2 * t->trim;
    int rc = 0;
    if (t->trim > 0)
        rc = rl_geom_crop(g, t->trim, t->trim, h, w, err);
    if (rc == 0 && t->kind == RL_T_RANDOM_CROP) {
        /* RandomResizedCrop: the box (whole pixels), then the resize */
        rc = rl_geom_crop(g, (int)p->y, (int)p->x, (int)p->h, (int)p->w, err);
        if (rc == 0)
            rc = rl_geom_resize(g, p->out_h, p->out_w, err);
    } else if (rc == 0 && t->varying && (t->zoom_out || t->iou_crop)) {
        rc = zoom_iou(g, p, w, h, err);
    } else if (rc == 0 && t->varying) {
        /* no window: the whole image, resized to the plan's output */
        if (rl_transform_resizes(t))
            rc = rl_geom_resize(g, p->out_h, p->out_w, err);
    } else if (rc == 0 && (t->kind == RL_T_RESIZE_CROP ||
                           t->kind == RL_T_RESIZE_RANDOM_CROP)) {
        rc = resize_window(g, t, p, w, h, err);
    } else if (rc == 0) {
        *err = "the transform has no fixed output size";
        rc = -1;
    }
    if (rc == 0 && p->flip)
        rc = rl_geom_hflip(g, err);
    if (rc == 0 && p->vflip)
        rc = rl_geom_vflip(g, err);
    if (rc != 0)
        rl_geom_init(g, width, height);
    return rc;
}
