/*
 * core/plan.h - per-sample geometry: which box of the source image becomes
 * the output, and whether it is mirrored.
 *
 * Randomness comes from the sample's own stream (rng.h), keyed by
 * (seed, epoch, sample key), so a sample's crop and flip are a pure function
 * of those three numbers: independent of thread count, I/O backend and
 * completion order, and reproducible when resuming mid-epoch.
 */
#ifndef RL_PLAN_H
#define RL_PLAN_H

#include "rl.h"

/*
 * Computes the plan of view `view` (0 .. RL_MAX_VIEWS - 1, rng.h) of one
 * sample from its source size (width x height, both > 0): each view draws
 * from its own part of the plan stream, view 0 from the stream's start.
 * Returns 0; RL_EDECODE for an image no larger than twice the trim a
 * side, one a ResizeKeepRatio resizes to no row or column, or a
 * RandomCrop window larger than the image after its resize and padding
 * (that sample's error, as timm and torchvision raise it); or
 * A varying transform (rl_transform.varying) gives the plan the size of
 * the image after its resize as its output (out_w, out_h): the whole image,
 * flipped as drawn. Returns RL_EDECODE too for a resized side past
 * RL_MAX_SIDE, and
 * RL_EINTERNAL for a transform without a fixed output (RL_T_NONE) or with
 * invalid parameters: rl_transform_check refuses those where the
 * transform is configured, so they cannot reach a sample. On error msg
 * (RL_MSG_MAX bytes) says why, naming the image's size.
 */
int rl_plan_make(const rl_transform *t, int width, int height, uint64_t seed,
                 int64_t epoch, int64_t index, int view, rl_plan *plan,
                 char *msg);

/*
 * rl_plan_make for a sample with boxes: its n boxes (XYXY, float64, in the
 * image's pixels; NULL when n is 0) are what a RandomIoUCrop's draw
 * (rl_transform.iou_crop) reads; other transforms ignore them
 * (rl_plan_make is this with none: an IoU crop then draws as for an
 * image without boxes, no crop). Borrowed during the call.
 */
int rl_plan_make_boxes(const rl_transform *t, int width, int height,
                       uint64_t seed, int64_t epoch, int64_t index, int view,
                       const double *boxes, size_t n, rl_plan *plan, char *msg);

/* core/plan_iou.c, for core/plan.c and core/plan_check.c: the plan of a
 * width x height image under a RandomZoomOut, a RandomIoUCrop or both
 * from the stream g (the zoom-out drawn first, then the crop on its
 * canvas; 0, or RL_EDECODE with msg for a canvas side past RL_MAX_SIDE,
 * -ENOMEM with msg), and their fields' checks (0, or RL_ECONFIG with
 * msg). */
struct rl_rng;
int rl__plan_zoom_iou(const rl_transform *t, int width, int height,
                      struct rl_rng *g, const double *boxes, size_t n,
                      rl_plan *p, char *msg);
int rl__iou_crop_check(const rl_transform *t, char *msg);
int rl__zoom_out_check(const rl_transform *t, char *msg);

/* The largest output or resize side, in pixels (exported to Python as
 * _core.MAX_SIDE, which ringloader/transforms.py checks against). */
#define RL_MAX_SIDE 65535

/*
 * Checks a transform once, where it is configured: a known kind, an output
 * of 1..RL_MAX_SIDE pixels a side, sizes within 0..RL_MAX_SIDE, positive
 * ratios, an ordered scale range and a flip probability in [0, 1].
 * Returns 0, or RL_ECONFIG with msg (RL_MSG_MAX bytes) naming what is
 * wrong.
 */
int rl_transform_check(const rl_transform *t, char *msg);

/* "random_crop", "center_crop_or_pad" or "random_crop_or_pad": an
 * rl_window's name (exported to Python as _core.WINDOWS), or NULL for an
 * unknown value. Static strings; any thread. */
const char *rl_window_name(int window);

#endif /* RL_PLAN_H */
