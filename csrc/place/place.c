/*
 * place/place.c - one sample's place in a batch slot.
 *
 * DESIGN: a pipeline fixes the layout of its samples once (rl_place_config);
 * each sample is then an rl_dst at its offset in the slot, so the resampler
 * and the stores never need to know about batches. rl_place() is what a
 * decoded sample goes through: the plan says which rectangle of the output
 * the resampled box covers, and the rest of the sample (the padding of a
 * CenterCrop larger than the image, a RandomCrop's constant padding) is
 * written in the plan's fill, since a slot is reused and holds the last
 * batch's values. A RandomCrop's edge, reflect and symmetric padding copy
 * the image's own pixels, which may lie outside the window: the plan
 * names the range of the resized image they come from, which is resampled
 * once into 8-bit scratch and then gathered pixel by pixel into the
 * window, flips included, and stored as a whole (place_mirrored).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "place/place.h"

size_t rl_place_sample_bytes(const rl_place_config *c)
{
    return (size_t)c->out_h * (size_t)c->out_w * 3 * rl_dtype_size(c->dtype);
}

size_t rl_place_view_offset(const rl_place_config *views, int nviews, int n,
                            int v)
{
    size_t off = 0;
    for (int u = 0; u < v && u < nviews; u++) {
        off += (size_t)n * rl_place_sample_bytes(&views[u]);
        if (u + 1 < nviews) {
            /* The region after it starts aligned. */
            off = (off + RL_PLACE_VIEW_ALIGN - 1) &
                  ~(size_t)(RL_PLACE_VIEW_ALIGN - 1);
        }
    }
    return off;
}

void rl_place_dst(const rl_place_config *c, uint8_t *base, rl_dst *dst)
{
    memset(dst, 0, sizeof(*dst));
    dst->data = base;
    dst->dtype = c->dtype;
    memcpy(dst->mul, c->mul, sizeof(dst->mul));
    memcpy(dst->add, c->add, sizeof(dst->add));
    if (c->layout == RL_LAYOUT_NHWC) {
        dst->row_stride = (ptrdiff_t)c->out_w * 3;
        dst->px_stride = 3;
        dst->ch_stride = 1;
    } else {
        dst->row_stride = c->out_w;
        dst->px_stride = 1;
        dst->ch_stride = (ptrdiff_t)c->out_w * c->out_h;
    }
}

const char *rl_pad_mode_name(int mode)
{
    static const char *const names[RL_PAD_MODE_COUNT] = {
        "constant", "edge", "reflect", "symmetric"};
    return mode >= 0 && mode < RL_PAD_MODE_COUNT ? names[mode] : NULL;
}

/* A window whose padding copies the image's pixels (rl_plan_pad): the
 * plan's box resampled to its vw x vh range of the resized image, then
 * each output pixel taken from it. 0 or -ENOMEM. */
static int place_mirrored(const rl_pixels *px, const rl_plan *plan, double bx,
                          double by, double bw, double bh, const rl_dst *dst)
{
    const rl_plan_pad *pad = &plan->pad;
    int ow = plan->out_w, oh = plan->out_h, rw = plan->vw, rh = plan->vh;
    size_t range = (size_t)rw * (size_t)rh * 3;
    size_t out = (size_t)ow * (size_t)oh * 3;
    /* One block: the gather's columns (int-aligned first), the range,
     * the window. */
    int *col = malloc((size_t)ow * sizeof(int) + range + out);
    if (col == NULL) {
        return -ENOMEM;
    }
    uint8_t *buf = (uint8_t *)(col + ow), *img = buf + range;
    rl_dst tmp = {.data = buf,
                  .row_stride = (ptrdiff_t)rw * 3,
                  .px_stride = 3,
                  .ch_stride = 1,
                  .dtype = RL_DTYPE_U8};
    int rc = rl_resample(px, plan->filter, plan->passes, bx, by, bw, bh, rw, rh,
                         false, false, &tmp);
    if (rc == 0) {
        for (int x = 0; x < ow; x++) {
            int i = plan->flip ? ow - 1 - x : x;
            col[x] =
                3 * (rl_pad_axis_source(pad->mode, &pad->x, i) - pad->x.r0);
        }
        for (int y = 0; y < oh; y++) {
            int j = plan->vflip ? oh - 1 - y : y;
            int r = rl_pad_axis_source(pad->mode, &pad->y, j) - pad->y.r0;
            const uint8_t *src = buf + (size_t)r * (size_t)rw * 3;
            uint8_t *o = img + (size_t)y * (size_t)ow * 3;
            for (int x = 0; x < ow; x++) {
                memcpy(o + 3 * x, src + col[x], 3);
            }
        }
        rl_store_rgb(img, (size_t)ow * 3, ow, oh, dst);
    }
    free(col);
    return rc;
}

int rl_place(const rl_pixels *px, const rl_plan *plan, double bx, double by,
             double bw, double bh, const rl_dst *dst, char *msg)
{
    if (plan->pad.mode != RL_PAD_CONSTANT) {
        int rc = place_mirrored(px, plan, bx, by, bw, bh, dst);
        if (rc != 0) {
            snprintf(msg, RL_MSG_MAX, "out of memory");
        }
        return rc;
    }
    int ow = plan->out_w, oh = plan->out_h;
    int vx = plan->vx, vy = plan->vy, vw = plan->vw, vh = plan->vh;
    if (vw != ow || vh != oh) {
        /* Above, below, left and right of the image. */
        const uint8_t *f = plan->pad.fill;
        rl_fill_rgb(dst, 0, 0, ow, vy, f);
        rl_fill_rgb(dst, 0, vy + vh, ow, oh - vy - vh, f);
        rl_fill_rgb(dst, 0, vy, vx, vh, f);
        rl_fill_rgb(dst, vx + vw, vy, ow - vx - vw, vh, f);
    }
    if (vw <= 0 || vh <= 0) {
        return 0; /* all padding: written above */
    }
    rl_dst sub = *dst;
    sub.data = rl_dst_at(dst, vx, vy);
    if (plan->vflip) {
        /* Rows written bottom up: the resampler and the stores address
         * rows through the signed row stride alone. */
        sub.data = rl_dst_at(dst, vx, vy + vh - 1);
        sub.row_stride = -dst->row_stride;
    }
    int rc = rl_resample(px, plan->filter, plan->passes, bx, by, bw, bh, vw, vh,
                         plan->flip, plan->crop_first, &sub);
    if (rc != 0) {
        snprintf(msg, RL_MSG_MAX, "out of memory");
    }
    return rc;
}
