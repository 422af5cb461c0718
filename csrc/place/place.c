/*
 * place/place.c - one sample's place in a batch slot.
 *
 * DESIGN: a pipeline fixes the layout of its samples once (rl_place_config);
 * each sample is then an rl_dst at its offset in the slot, so the resampler
 * and the stores never need to know about batches. rl_place() is what a
 * decoded sample goes through: the plan says which rectangle of the output
 * the resampled box covers, and the rest of the sample (the padding of a
 * CenterCrop larger than the image) is written black, since a slot is
 * reused and holds the last batch's values.
 */
#include <stdio.h>
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

int rl_place(const rl_pixels *px, const rl_plan *plan, double bx, double by,
             double bw, double bh, const rl_dst *dst, char *msg)
{
    int ow = plan->out_w, oh = plan->out_h;
    int vx = plan->vx, vy = plan->vy, vw = plan->vw, vh = plan->vh;
    if (vw != ow || vh != oh) {
        /* Above, below, left and right of the image. */
        rl_fill_zero(dst, 0, 0, ow, vy);
        rl_fill_zero(dst, 0, vy + vh, ow, oh - vy - vh);
        rl_fill_zero(dst, 0, vy, vx, vh);
        rl_fill_zero(dst, vx + vw, vy, ow - vx - vw, vh);
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
