/*
 * targets/plan_maps.c - the index maps of a sample's geometry for its masks
 * (targets/plan_geom.h's rl_geom_maps).
 *
 * DESIGN: every axis step of the geometry takes an output pixel from one
 * input pixel of the same axis, or from none (padding): a flip reverses
 * the axis, a crop or pad shifts it, a resize picks torch's nearest
 * pixel. So the source of output index j is found by walking the steps
 * backwards from the last, one index at a time, without a map per step
 * and without memory. The steps' kind is read off their matrix as
 * targets/boxes.c writes it: a negative scale is a flip, a scale of
 * exactly 1 a shift (crop or pad: its input and output differ in size,
 * or it is the identity), any other scale a resize (float32(out / in)
 * is 1 only for out == in below 2^24 pixels).
 *
 * A mask that is a PIL image when it is resized (the segmentation
 * reference's own transforms) takes Pillow's nearest pixel instead: the
 * pixel centre's position, (j + 0.5) * in / out in double, as Pillow's
 * ImagingScaleAffine sums it (one addition of in / out per pixel, so its
 * rounding is Pillow's), truncated. That rule depends on j's neighbours'
 * sums, so each axis is walked as a whole array, one step at a time.
 */
#include "targets/plan_geom.h"

#include <math.h>
#include <stdlib.h>

/* torch's nearest index (upsample_nearest, no scale given): j itself for
 * the same size, else floor(j * float32(in / out)) in float32, clamped. */
static int nearest(int j, int in, int out)
{
    if (in == out)
        return j;
    float scale = (float)in / (float)out;
    int64_t s = (int64_t)floorf((float)j * scale);
    return s < in - 1 ? (int)s : in - 1;
}

/* The source of a padded index src (outside 0..in-1) of the window's pad
 * step, shifted by `before` on this axis: -1 under constant padding, else
 * the mirrored or edge pixel; v1's RandomCrop (pad_twice) pads pad[]
 * first, then pad_if_needed's columns around that padded image. */
static int padded(const rl_transform *t, int axis, int j, int before, int in)
{
    rl_pad_mode mode = (rl_pad_mode)t->pad_mode;
    if (mode == RL_PAD_CONSTANT)
        return -1;
    if (t->pad_twice) {
        int first = t->pad[axis], n1 = in + t->pad[axis] + t->pad[axis + 2];
        int s = rl_pad_source(mode, j - (before - first), n1);
        return rl_pad_source(mode, s - first, in);
    }
    return rl_pad_source(mode, j - before, in);
}

/* Pillow's nearest source of each output index 0..out-1 of an axis
 * resized from in to out pixels, into tab[out]. */
static void pil_nearest(int in, int out, int32_t *tab)
{
    double step = (double)in / (double)out, at = step * 0.5;
    for (int j = 0; j < out; j++) {
        int s = at < 0.0 ? -1 : (int)at;
        tab[j] = s < in ? s : in - 1;
        at += step;
    }
}

/* Walks map[0..n-1] (output indices of axis 0: columns, 1: rows) back
 * through the steps of g to their source indices, -1 where the pixel is
 * padding; pil: resizes take Pillow's nearest pixel. 0, or -1 with *err
 * (no memory for Pillow's table). */
static int axis_map(const rl_target_geom *g, const rl_transform *t, int axis,
                    bool pil, int32_t *map, int n, const char **err)
{
    for (int j = 0; j < n; j++)
        map[j] = j;
    for (int k = g->n - 1; k >= 0; k--) {
        const rl_geom_step *s = &g->step[k];
        const rl_geom_step *prev = k ? &g->step[k - 1] : NULL;
        int in = axis ? (prev ? prev->out_h : g->in_h)
                      : (prev ? prev->out_w : g->in_w);
        int out = axis ? s->out_h : s->out_w;
        double scale = s->m[4 * axis], shift = s->m[2 + 3 * axis];
        int32_t *tab = NULL;
        if (scale > 0.0 && scale != 1.0 && pil && in != out) {
            tab = malloc((size_t)out * sizeof *tab);
            if (!tab) {
                *err = "out of memory for a mask's index map";
                return -1;
            }
            pil_nearest(in, out, tab);
        }
        for (int i = 0; i < n; i++) {
            int j = map[i];
            if (j < 0)
                continue;
            if (scale < 0.0) {
                j = out - 1 - j;
            } else if (scale != 1.0) {
                j = tab ? tab[j] : nearest(j, in, out);
            } else {
                int before = (int)shift, src = j - before;
                j = src >= 0 && src < in ? src : padded(t, axis, j, before, in);
            }
            map[i] = j;
        }
        free(tab);
    }
    return 0;
}

int rl_geom_maps(const rl_target_geom *g, const rl_transform *t, bool pil,
                 int32_t *row_map, int32_t *col_map, const char **err)
{
    for (int k = 0; k < g->n; k++) {
        if (g->step[k].kind != RL_GEOM_AXIS) {
            *err = "an affine or perspective step has no index maps";
            return -1;
        }
    }
    int ow = rl_geom_out_width(g), oh = rl_geom_out_height(g);
    if (axis_map(g, t, 0, pil, col_map, ow, err) != 0)
        return -1;
    return axis_map(g, t, 1, pil, row_map, oh, err);
}
