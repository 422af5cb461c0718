/*
 * targets/plan_geom.h - a sample's target geometry (targets/boxes.h) read
 * from the plan its pixels were placed by (rl_plan, core/plan.h), so that
 * boxes and keypoints follow the same trim, resize, crop, padding and
 * flips.
 */
#ifndef RL_TARGETS_PLAN_GEOM_H
#define RL_TARGETS_PLAN_GEOM_H

#include "rl.h"
#include "targets/boxes.h"

/*
 * Writes into g the steps torchvision's v2 functional applies for the
 * transform t that planned p (rl_plan_make's plan of a width x height
 * source, before the trim), in the order the pixels went: TrimBorder's
 * crop; RandomResizedCrop's crop then resize, or the resize (shorter
 * side, (h, w), ResizeKeepRatio) then the window (CenterCrop, RandomCrop,
 * timm's crop-or-pad): its padding, then its crop; or RandomIoUCrop's
 * crop where the plan drew one (p->iou_crop); then the horizontal
 * and the vertical flip the plan drew. A window that covers the whole
 * (padded) canvas is no step, as torchvision's RandomCrop skips it.
 * Every padding mode pads boxes as constant padding does: they keep the
 * image's content, not its mirrored copies. Returns 0, or -1 with *err a
 * static message (a transform kind without a fixed output, a plan that
 * does not fit the transform).
 */
int rl_geom_from_plan(const rl_transform *t, const rl_plan *p, int width,
                      int height, rl_target_geom *g, const char **err);

/*
 * The index maps of the geometry g (rl_geom_from_plan's for transform t)
 * for a mask (targets/mask.h): row_map[out_h] and col_map[out_w] of the
 * output canvas, each the input row or column that output pixel is taken
 * from, -1 where it is padding (constant padding, which fills). A resize
 * takes torch's nearest pixel, floor(dst * float32(in / out)) clamped,
 * as torchvision resizes a Mask; crops, pads and flips move indices; the
 * window's padding under t's edge, reflect or symmetric mode takes the
 * pixel the image's padding takes (v1's RandomCrop: pad[] first, then
 * pad_if_needed's). pil: a resize takes Pillow's nearest pixel instead
 * (truncated (j + 0.5) * in / out, summed in double as Pillow sums it),
 * as Pillow resizes a PIL mask. Returns 0, or -1 with *err a static
 * message (an affine or perspective step, which no index map expresses;
 * no memory).
 */
int rl_geom_maps(const rl_target_geom *g, const rl_transform *t, bool pil,
                 int32_t *row_map, int32_t *col_map, const char **err);

#endif /* RL_TARGETS_PLAN_GEOM_H */
