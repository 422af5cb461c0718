/*
 * targets/draws.h - the random parameters of the detection recipes' ops,
 * drawn from a sample's Philox stream (rng.h) with the distributions of
 * torchvision.transforms.v2's own make_params: RandomIoUCrop,
 * RandomZoomOut, ScaleJitter, RandomShortestSize, RandomPhotometricDistort,
 * and the detection references' FixedSizeCrop.
 *
 * DESIGN: each draw is a function of a stream the caller started, the op's
 * options and the image's size (and, for the IoU crop, its boxes), so a
 * chain of ops draws in turn from one stream, and a draw is a pure
 * function of (seed, epoch, key, view) like every other draw. Where
 * torchvision draws a float32 torch.rand, the draw here is a float32 of 24
 * random bits, as torch's, and torchvision's float32 arithmetic on it is
 * kept (a Python number times a float32 tensor is float32), then int()
 * truncates as in torchvision: the integer sizes and offsets are those
 * torchvision computes from the same uniform numbers (saturated at
 * INT_MAX / INT_MIN where torchvision's Python ints would be larger). An index
 * (torch.randint) is rl_rng_index; a permutation (torch.randperm) is a
 * Fisher-Yates shuffle, uniform over the permutations as torch's.
 *
 * The plan draws RandomIoUCrop's (core/plan_iou.c, from the start of its
 * view's plan stream); nothing in the pipeline calls the others yet: the
 * wiring of detection support decides which stream and view each op
 * draws from.
 */
#ifndef RL_TARGETS_DRAWS_H
#define RL_TARGETS_DRAWS_H

#include <stddef.h>

#include "rng.h"

/* Each *_check returns NULL when the options are usable, else a static
 * message naming the parameter at fault; the draws assume checked
 * options. */

/* ---- RandomIoUCrop ---- */

/* torchvision's outer loop (draw an option, then `trials` crops) has no
 * bound: with no box, or none a crop can reach, and no option >= 1.0, it
 * never ends. Here it stops after this many options drawn: the draw is
 * then "no crop" (the image left as is, as an option >= 1.0 leaves it),
 * with `limited` set. With the default options (one of 7 is 1.0) the
 * chance of reaching the limit is (6/7)^1000 < 1e-66. */
#define RL_IOU_CROP_MAX_ROUNDS 1000

typedef struct {
    double min_scale, max_scale;
    double min_aspect_ratio, max_aspect_ratio;
    const double *options; /* sampler_options, n_options of them */
    int n_options;
    int trials;
} rl_iou_crop_opts;

typedef struct {
    int crop;      /* 0: the image left as is */
    int limited;   /* no crop because RL_IOU_CROP_MAX_ROUNDS was reached */
    int rounds;    /* options drawn */
    double option; /* the last option drawn */
    int top, left; /* the crop, when crop is 1 */
    int height, width;
} rl_iou_crop_draw;

const char *rl_iou_crop_check(const rl_iou_crop_opts *o);

/* boxes: n boxes XYXY (float64) on the width x height image. A crop
 * returned keeps at least one box's centre strictly inside and one of the
 * boxes so kept has an IoU with it >= the option (box_iou's arithmetic,
 * in float64). torchvision divides new_w / new_h without a check (a
 * ZeroDivisionError when a height truncates to 0); here such a trial is
 * rejected, as a zero-area crop is. */
void rl_draw_iou_crop(rl_rng *g, const rl_iou_crop_opts *o, int width,
                      int height, const double *boxes, size_t n,
                      rl_iou_crop_draw *d);

/* ---- RandomZoomOut ---- */

typedef struct {
    double side_lo, side_hi; /* side_range: 1 <= lo <= hi */
    double p;
} rl_zoom_out_opts;

typedef struct {
    int applied; /* the p draw; when 0 nothing else is drawn */
    float ratio; /* the side ratio (torchvision's float32) */
    int canvas_width, canvas_height;
    int left, top, right, bottom; /* the padding */
} rl_zoom_out_draw;

const char *rl_zoom_out_check(const rl_zoom_out_opts *o);
void rl_draw_zoom_out(rl_rng *g, const rl_zoom_out_opts *o, int width,
                      int height, rl_zoom_out_draw *d);

/* ---- ScaleJitter ---- */

/* target_size as torchvision's ScaleJitter reads it: the base ratio is
 * min(target_size[1] / height, target_size[0] / width). The size may
 * truncate to 0 on a small scale of a small image, as torchvision's. */
typedef struct {
    int target_size[2];
    double scale_lo, scale_hi; /* scale_range: 0 < lo <= hi */
} rl_scale_jitter_opts;

typedef struct {
    float scale; /* the scale drawn (float32) */
    int height, width;
} rl_scale_jitter_draw;

const char *rl_scale_jitter_check(const rl_scale_jitter_opts *o);
void rl_draw_scale_jitter(rl_rng *g, const rl_scale_jitter_opts *o, int width,
                          int height, rl_scale_jitter_draw *d);

/* ---- RandomShortestSize ---- */

typedef struct {
    const int *min_size; /* n_sizes of them, each >= 1 */
    int n_sizes;
    int max_size; /* 0: none (torchvision's None) */
} rl_shortest_size_opts;

typedef struct {
    int min_size; /* the one chosen */
    int height, width;
} rl_shortest_size_draw;

const char *rl_shortest_size_check(const rl_shortest_size_opts *o);
void rl_draw_shortest_size(rl_rng *g, const rl_shortest_size_opts *o, int width,
                           int height, rl_shortest_size_draw *d);

/* ---- FixedSizeCrop (the detection references') ---- */

/* One float32 r, drawn only when the image is larger than the size on
 * some side, gives both offsets: top = int(max(H - h, 0) * r), left =
 * int(max(W - w, 0) * r). The crop is min(H, h) x min(W, w); the padding,
 * not random, is on the right and bottom up to the size. fill and
 * padding_mode do not change the draw. */
typedef struct {
    int crop;          /* the image is cropped (r was drawn) */
    int top, left;     /* the crop's offset */
    int height, width; /* the crop's size */
    int pad_right, pad_bottom;
} rl_fixed_crop_draw;

const char *rl_fixed_crop_check(int size_h, int size_w);
void rl_draw_fixed_crop(rl_rng *g, int size_h, int size_w, int width,
                        int height, rl_fixed_crop_draw *d);

/* ---- RandomPhotometricDistort ---- */

#define RL_DRAW_MAX_CHANNELS 16

/* The four jitters in torchvision's order of draws. */
enum {
    RL_DISTORT_BRIGHTNESS = 0,
    RL_DISTORT_CONTRAST = 1,
    RL_DISTORT_SATURATION = 2,
    RL_DISTORT_HUE = 3,
};

typedef struct {
    double lo[4], hi[4]; /* brightness, contrast, saturation, hue ranges */
    double p;
    int channels; /* 1 .. RL_DRAW_MAX_CHANNELS */
} rl_photometric_opts;

typedef struct {
    int apply[4];
    double factor[4]; /* when apply */
    int contrast_before;
    int permute; /* the channels are permuted by perm */
    int perm[RL_DRAW_MAX_CHANNELS];
} rl_photometric_draw;

const char *rl_photometric_check(const rl_photometric_opts *o);
void rl_draw_photometric(rl_rng *g, const rl_photometric_opts *o,
                         rl_photometric_draw *d);

#endif /* RL_TARGETS_DRAWS_H */
