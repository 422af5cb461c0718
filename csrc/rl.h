/*
 * rl.h - types and status codes shared by every layer of the C core.
 *
 * Status convention (CONTRIBUTING.md, "Errors"): functions that act return
 * int.
 *   0          success
 *   -errno     an operating-system failure (negative, never errno itself)
 *   RL_E*      a condition of our own (positive, >= RL_EBASE)
 * Messages never live in globals: a call that can fail with a message takes
 * a caller-owned buffer of RL_MSG_MAX bytes, because the thread that fails is
 * not the thread that reports.
 */
#ifndef RL_H
#define RL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RL_MSG_MAX 256

enum {
    RL_EBASE = 1000,
    RL_EDECODE = RL_EBASE, /* the data is not a decodable JPEG */
    RL_ETRUNCATED,         /* JPEG ends early ("Premature end of JPEG file") */
    RL_ETOOBIG,            /* image over the pixel, scan or byte limit */
    RL_EFORMAT,            /* not a JPEG at all (other magic bytes) */
    RL_ECLOSED,            /* the pipeline was closed or cancelled */
    RL_ETIMEDOUT,          /* a bounded wait expired; try again */
    RL_ECUDA,              /* the CUDA runtime failed */
    RL_EINTERNAL,          /* an impossible state: a bug of ours */
    RL_ECONFIG,            /* a value the user configured is invalid: refused
                            * where it is configured (ValueError) */
    RL_EFALLBACK,          /* a fallback decoder registered at run time
                            * broke its contract for one sample (a wrong
                            * result): that sample's error, skippable */
    RL_EFIELD,             /* a member a sample must carry beside its image
                            * is missing, over its size limit or not what
                            * its kind's decoding accepts (tar shard fields,
                            * core/fields.h): that sample's error, skippable */
};

/* Output memory layouts of a batch. */
typedef enum {
    RL_LAYOUT_NCHW = 0,
    RL_LAYOUT_NHWC = 1,
} rl_layout;

/* Which geometric transform is fused into the decode. */
typedef enum {
    RL_T_NONE = 0,        /* full image, no resampling */
    RL_T_RESIZE_CROP = 1, /* optional Resize, then CenterCrop (which may be
                           * the whole resized image) */
    RL_T_RANDOM_CROP = 2, /* RandomResizedCrop */
    RL_T_RESIZE_RANDOM_CROP = 3, /* optional Resize, then RandomCrop */
} rl_transform_kind;

/*
 * The resampling filter of the fused resize: Pillow's, as torchvision's
 * Resize and RandomResizedCrop call it on a PIL image (place/taps.c has the
 * arithmetic). Zero is bilinear, the default.
 */
typedef enum {
    RL_FILTER_BILINEAR = 0,
    RL_FILTER_BICUBIC = 1,
    RL_FILTER_NEAREST = 2,
} rl_filter;
#define RL_FILTER_COUNT 3

/*
 * RandomCrop's padding_mode: where a padded pixel's value comes from, as
 * numpy.pad's modes (torchvision pads a PIL image with them): fill
 * (constant), the nearest edge pixel (edge), a mirror about the edge pixel
 * (reflect: 3 2 1 | 1 2 3 4 | 3 2) or about the edge itself (symmetric:
 * 2 1 1 | 1 2 3 4 | 4 3), repeated when the padding is wider than the
 * image, as numpy repeats it. Zero is constant.
 */
typedef enum {
    RL_PAD_CONSTANT = 0,
    RL_PAD_EDGE = 1,
    RL_PAD_REFLECT = 2,
    RL_PAD_SYMMETRIC = 3,
} rl_pad_mode;
#define RL_PAD_MODE_COUNT 4

/*
 * The pixel of an axis of n > 0 pixels whose value a padded axis has at
 * index i (negative before the image, n or more after it) under mode
 * (not RL_PAD_CONSTANT, which has none: i itself is returned). Pure
 * arithmetic, shared by the plan (which pixels a window reads) and the
 * place stage (which it copies).
 */
static inline int rl_pad_source(rl_pad_mode mode, int i, int n)
{
    if (mode == RL_PAD_CONSTANT || (i >= 0 && i < n)) {
        return i;
    }
    if (mode == RL_PAD_EDGE || n == 1) {
        return i < 0 ? 0 : n - 1; /* numpy mirrors one pixel as an edge */
    }
    /* The mirrored axis repeats with this period; fold i into it. */
    int64_t period =
        mode == RL_PAD_REFLECT ? 2 * (int64_t)(n - 1) : 2 * (int64_t)n;
    int64_t m = (int64_t)i % period;
    m = m < 0 ? m + period : m;
    if (m < n) {
        return (int)m;
    }
    return (int)(mode == RL_PAD_REFLECT ? period - m : period - 1 - m);
}

/*
 * Where RL_T_RESIZE_RANDOM_CROP's window lies on the resized image:
 * torchvision's RandomCrop (pad[] and pad_if_needed, then a uniform
 * offset in the padded image); timm's CenterCropOrPad (each axis smaller
 * than the window padded by half the difference before it, the rest after;
 * each larger one cropped at its centre, the offset rounded as Python
 * rounds); or timm's RandomCropOrPad (each axis's offset uniform over
 * 0..|n - out| pixels, into the image where it is larger than the window,
 * before it, as padding, where it is smaller); or the detection
 * reference's FixedSizeCrop (ringloader.transforms_v2.FixedSizeCrop: one
 * float32 r for both offsets, int((n - out) * r) into each axis larger than
 * the window, targets/draws.h's rl_draw_fixed_crop; each smaller axis
 * padded after the image). Zero is RandomCrop's.
 */
typedef enum {
    RL_WINDOW_RANDOM_CROP = 0,
    RL_WINDOW_CENTER_OR_PAD = 1,
    RL_WINDOW_RANDOM_OR_PAD = 2,
    RL_WINDOW_FIXED_SIZE = 3,
} rl_window;
#define RL_WINDOW_COUNT 4

/*
 * The order of the resize's two passes, which the 8-bit rounding and
 * clipping between them makes visible (bicubic across a sharp edge: over
 * 20 LSB): Pillow 13's (the vertical pass first when the height shrinks by
 * more than twice as many pixels as the width, the horizontal pass first
 * otherwise), or Pillow 12's and older's (always the horizontal pass
 * first). Zero is Pillow 13's.
 */
typedef enum {
    RL_PASSES_PILLOW13 = 0,
    RL_PASSES_HORIZONTAL_FIRST = 1,
} rl_passes;

/*
 * A transform as the user configured it; the same for every sample.
 * Randomness is drawn per sample from (seed, epoch, key) by core/plan.c.
 *
 * RL_T_RESIZE_CROP: when resize_short > 0 the shorter side is resized to it
 * (the longer one keeps the aspect ratio, truncated, as torchvision does);
 * then where resize_max > 0 and the longer side is past it, the image is
 * scaled so the longer side is resize_max (the shorter truncated), as
 * torchvision's Resize(size, max_size=...) does; resize_short 0 with
 * resize_max > 0: the longer side is resized to resize_max (v2's
 * Resize(None, max_size=...));
 * else when resize_h, resize_w > 0 the image is resized to exactly that;
 * else it is not resized. Then the centre out_h x out_w is cropped, padding
 * with zeros where the crop is larger than the image.
 * RL_T_RANDOM_CROP: torchvision's RandomResizedCrop sampling of a box with
 * area fraction in [scale_lo, scale_hi] and aspect ratio in [ratio_lo,
 * ratio_hi], resized to out_h x out_w.
 * RL_T_RESIZE_RANDOM_CROP: resized as RL_T_RESIZE_CROP is, then
 * torchvision's RandomCrop(out_h x out_w) (or timm's CenterCropOrPad or
 * RandomCropOrPad: `window`, an rl_window): padding of pad[] pixels
 * (left, top, right, bottom), with pad_if_needed 1 the missing rows or
 * columns added on both sides as torchvision adds them (2: at the bottom
 * and right only, as the segmentation reference's PadIfSmaller pads
 * before a RandomCrop of its size; pad_flips_first then says which flips
 * ran before that pad in the user's order, 1 horizontal, 2 vertical: its
 * padding stays at the bottom and right of the output), in pad_mode (an
 * rl_pad_mode; constant fills with fill[], 8-bit R, G, B; pad_twice: as
 * torchvision's v1 class pads, rl_pad_axis), then a window
 * at a uniform random offset; an image smaller than the window after
 * padding is that sample's error, as torchvision raises for it.
 * All: resampled with `filter` (an rl_filter) in the order `passes` (an
 * rl_passes), mirrored horizontally with probability flip_p, then
 * vertically with probability vflip_p.
 */
#define RL_MAX_SHORT_SIZES 32 /* RandomShortestSize's list, at most */
#define RL_MAX_IOU_OPTIONS 16 /* RandomIoUCrop's sampler_options, at most */

typedef struct rl_transform {
    rl_transform_kind kind;
    int resize_short;
    int resize_max; /* torchvision's max_size on the longer side, or 0 */
    /* > resize_short: the shorter side is drawn per sample, uniform in
     * [resize_short, resize_short_hi) (v2's RandomResize); else 0 */
    int resize_short_hi;
    /* n_short_sizes > 0: v2's RandomShortestSize: per sample one of
     * short_sizes (uniform over the list) as min_size, then its own rule
     * r = min(min_size / shorter, resize_max / longer) (resize_max 0: no
     * limit), each side int(side * r); resize_short unused */
    int n_short_sizes;
    int short_sizes[RL_MAX_SHORT_SIZES];
    /* jitter_w > 0: v2's ScaleJitter, target_size (jitter_w, jitter_h):
     * per sample a float32 scale uniform in jitter_scale, the image resized
     * by r = min(jitter_h / height, jitter_w / width) * scale, each side
     * int(side * r) in float32 (targets/draws.h's rl_draw_scale_jitter,
     * from the plan's stream); no other resize */
    int jitter_w, jitter_h;
    double jitter_scale[2];
    int resize_h, resize_w;
    int out_h, out_w;
    double scale_lo, scale_hi;
    double ratio_lo, ratio_hi;
    double flip_p;
    double vflip_p;
    int pad[4];          /* RandomCrop's padding: left, top, right, bottom */
    int pad_if_needed;   /* 0; 1: on both sides; 2: bottom and right only */
    int pad_flips_first; /* pad_if_needed 2: bit 1 hflip, bit 2 vflip */
    int pad_mode;        /* an rl_pad_mode */
    int pad_twice;       /* 1: v1's RandomCrop, pad[] then pad_if_needed's */
    int fill[3];         /* pad_mode constant: R, G, B in 0..255 */
    int filter;          /* an rl_filter (an int: the spec's table fills it) */
    /* 1: each sample draws its filter, bilinear or bicubic with even odds,
     * after its crop box (timm's interpolation="random"); filter unused */
    int filter_random;
    /* 1: timm's ResizeKeepRatio to (resize_h, resize_w): the image is
     * scaled by the mean of its two axes' ratios to the target, weighted
     * keep_longest on the larger (0: the shorter side fits, 1: the longer),
     * each side rounded as Python rounds */
    int keep_ratio;
    double keep_longest;
    /* keep_ratio's random scale and aspect (timm's random_scale_* and
     * random_aspect_*, train_crop_mode "rkrc"/"rkrr"), drawn per sample
     * before the window: with probability keep_scale_p both sides are
     * multiplied by a factor uniform in [keep_scale_lo, keep_scale_hi]
     * (keep_scale_area: by 1 / sqrt of it, an area fraction); then with
     * probability keep_aspect_p the height is divided and the width
     * multiplied by sqrt(a), a log-uniform in [keep_aspect_lo,
     * keep_aspect_hi]; each side then rounded as Python rounds. */
    double keep_scale_p, keep_scale_lo, keep_scale_hi;
    int keep_scale_area;
    double keep_aspect_p, keep_aspect_lo, keep_aspect_hi;
    int window; /* an rl_window (RL_T_RESIZE_RANDOM_CROP) */
    /* timm's TrimBorder: trim pixels cut from each side of the image
     * before anything else; the image must be larger than 2 * trim a
     * side. A trimmed view is decoded without DCT scaling. */
    int trim;
    int passes; /* an rl_passes */
    /* 1: no crop; the output is the image after its resize (resize_short,
     * or none: the image's own size), so each sample has its own size,
     * known once its header is read (RL_T_RESIZE_CROP, out_w = out_h = 0,
     * no window or trim; padding only a zoom-out's). Such a pipeline has
     * one view, whose ops (augment.h) draw and run on each sample's own
     * size, delivered to the host or a device: core/pipeline.h's varying
     * batches. */
    int varying;
    /* 1: v2's RandomIoUCrop, the only geometry of a varying transform
     * but a RandomZoomOut before it (no resize, trim or window): per
     * sample rl_draw_iou_crop (targets/draws.h) draws the crop from the
     * plan stream, before the flips, reading the sample's boxes
     * (rl_plan_make_boxes; moved by the zoom-out's offset), and the
     * output is that crop (or the whole canvas where none is drawn). Its
     * options: min/max_scale (iou_scale, max <= 1: the crop lies in the
     * canvas), min/max_aspect_ratio (iou_aspect), sampler_options (1..
     * RL_MAX_IOU_OPTIONS of them) and trials (core/plan_iou.c). */
    int iou_crop;
    double iou_scale_lo, iou_scale_hi;
    double iou_aspect_lo, iou_aspect_hi;
    int n_iou_options;
    double iou_options[RL_MAX_IOU_OPTIONS];
    int iou_trials;
    /* 1: v2's RandomZoomOut, the first geometry of a varying transform
     * (no resize, trim or window; a RandomIoUCrop may follow it): per
     * sample rl_draw_zoom_out (targets/draws.h) from the plan stream,
     * first: with probability zoom_p the image is placed at the drawn
     * offset of a canvas zoom_side[0..1] times its size, the rest fill[]
     * (core/plan_iou.c); the IoU crop is then drawn on that canvas. */
    int zoom_out;
    double zoom_p;
    double zoom_side[2];
} rl_transform;

/* Whether the transform resizes the image (core/plan.c's resized_size;
 * else its pixels keep their size before the window). */
static inline int rl_transform_resizes(const rl_transform *t)
{
    return t->resize_short > 0 || t->resize_max > 0 || t->n_short_sizes > 0 ||
           t->jitter_w > 0 || t->keep_ratio ||
           (t->resize_h > 0 && t->resize_w > 0);
}

/*
 * One axis of a RandomCrop's window under a padding mode that copies the
 * image's pixels (rl_plan_pad). w0: the window's first pixel in the
 * resized axis of n pixels (negative where it starts in the padding);
 * r0: the first pixel of the range of the resized axis the window copies.
 * span > 0 where the axis was padded twice, as v1's RandomCrop pads
 * (`padding` first, then pad_if_needed around the padded image, whose
 * mirror then reflects the first padding too), 0 where it was padded
 * once (or the second padding added nothing): lo pixels were added before
 * the image the first time, span is the once-padded length.
 */
typedef struct rl_pad_axis {
    int w0, n, r0;
    int lo, span;
} rl_pad_axis;

/* The resized pixel whose value pixel i of the window has on axis a. */
static inline int rl_pad_axis_source(rl_pad_mode mode, const rl_pad_axis *a,
                                     int i)
{
    int s = a->w0 + i;
    if (a->span > 0) {
        s = rl_pad_source(mode, s + a->lo, a->span) - a->lo;
    }
    return rl_pad_source(mode, s, a->n);
}

/*
 * A RandomCrop's padding in a plan. mode RL_PAD_CONSTANT: the padding is
 * fill (8-bit R, G, B; zeros for a CenterCrop's), and x.w0, y.w0 say where
 * the window starts (zero for the other geometries). The other modes copy
 * the resized image's pixels near its border, so the plan's box is the
 * range of the resized image [x.r0, x.r0 + vw) x [y.r0, y.r0 + vh) that
 * the window's pixels come from (never empty: a window wholly in the
 * padding still reads the pixels it mirrors), resampled unmirrored
 * (vx = vy = 0); unmirrored output pixel (i, j) is then resized pixel
 * (rl_pad_axis_source(mode, &x, i), rl_pad_axis_source(mode, &y, j)).
 */
typedef struct rl_plan_pad {
    rl_pad_mode mode;
    uint8_t fill[3];
    rl_pad_axis x, y;
} rl_plan_pad;

/*
 * What to do with one sample: resample the box (x, y, w, h) of the source
 * image, in source pixels, into the output rectangle (vx, vy, vw, vh) of an
 * out_w x out_h image, mirrored left-right if flip and top-bottom if vflip.
 * Output pixels outside that rectangle (a CenterCrop larger than the image,
 * a RandomCrop's constant padding) are pad.fill; the rectangle may be
 * empty (vw or vh 0: a window in the padding alone). A RandomCrop's other
 * padding modes change what the box and rectangle mean (rl_plan_pad).
 * crop_first says
 * whether the resample sees the box alone, as torchvision's
 * RandomResizedCrop crops, then resizes (the filter stops at the box's
 * edges), or the whole image, as Resize then CenterCrop crops the resized
 * image (the filter reads across the box's edges up to the image's).
 * filter and passes are the transform's.
 */
typedef struct rl_plan {
    double x, y, w, h;
    int vx, vy, vw, vh;
    int out_w, out_h;
    bool flip;
    bool vflip;
    bool crop_first;
    rl_filter filter;
    rl_passes passes;
    rl_plan_pad pad;
    /* The transform's trim: the box, the rectangle and the padding are in
     * the frame of the image without trim pixels on each side, which is
     * all the place stage is shown of it. */
    int trim;
    /* RandomIoUCrop (rl_transform.iou_crop): 1 where a crop was drawn
     * (its part of the image, whole pixels, is the box: crop_first, 1:1), 0 where the
     * image is left whole; the option last drawn, the options drawn
     * (rounds) and whether RL_IOU_CROP_MAX_ROUNDS stopped the loop. */
    int iou_crop;
    double iou_option;
    int iou_rounds;
    int iou_limited;
    /* The IoU crop drawn, in the canvas's pixels (iou_crop 1). */
    int iou_x, iou_y, iou_w, iou_h;
    /* RandomZoomOut (rl_transform.zoom_out): 1 where it was applied: the
     * image at (zoom_left, zoom_top) of a zoom_w x zoom_h canvas of
     * pad.fill, the canvas the IoU crop is drawn on; 0: the canvas is
     * the image. The box and rectangle above are the image's part of
     * the output. */
    int zoom_out;
    int zoom_left, zoom_top, zoom_w, zoom_h;
} rl_plan;

/*
 * Decoded pixels covering columns [x0, x0 + w) and rows [y0, y0 + h) of an
 * image of full_w x full_h pixels, 4 bytes each (R, G, B, unused): the
 * fourth byte lets every pixel be one 32-bit SIMD lane. What a decoder
 * gives the place stage; the memory belongs to whoever filled it.
 */
typedef struct rl_pixels {
    const uint8_t *data;
    size_t stride;
    int x0, y0, w, h;
    int full_w, full_h;
} rl_pixels;

/* Limits for untrusted input (docs/reliability.md, "Bad files"). */
#define RL_DEFAULT_MAX_PIXELS 89478485ULL
#define RL_DEFAULT_MAX_SCANS 500
#define RL_DEFAULT_MAX_FILE_BYTES (1ULL << 30)

/*
 * The memory libjpeg may hold for one image on one decode thread follows
 * max_pixels by default: a progressive (or otherwise multi-scan) JPEG keeps
 * the whole image's DCT coefficients, 2 bytes per pixel for each
 * full-resolution component, so at most 8 bytes per pixel (4 components,
 * CMYK), plus padding to whole MCUs (under 256 bytes per pixel of width +
 * height, 34 MB at libjpeg's 65500 x 65500) and libjpeg's row buffers and
 * tables: RL_DECODE_SLACK_BYTES. So every JPEG within max_pixels decodes,
 * and none takes more: 783 MB at the default max_pixels. A baseline JPEG
 * needs only a few rows.
 */
#define RL_DECODE_BYTES_PER_PIXEL 8ULL
#define RL_DECODE_SLACK_BYTES (64ULL << 20)

typedef struct rl_limits {
    uint64_t max_pixels;
    int max_scans;
    uint64_t max_file_bytes;
    bool allow_truncated;
    /* Bytes libjpeg may hold for one image; 0: the default, which follows
     * max_pixels (rl_decode_memory_bound, decode/decode.h). */
    uint64_t max_decode_bytes;
} rl_limits;

/*
 * The run holding i among n runs given by their first entries: starts has
 * n + 1 entries, never falling, with starts[0] <= i < starts[n]. Returns
 * the last k with starts[k] <= i (empty runs share their start with the
 * next one; the last of them holds i), by binary search. Used for a
 * table's shards (source/file.c) and parts (core/jobs.c).
 */
static inline int64_t rl_run_of(const int64_t *starts, int64_t n, int64_t i)
{
    int64_t lo = 0, hi = n; /* starts[lo] <= i < starts[hi] */
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (starts[mid] <= i) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return lo;
}

#endif /* RL_H */
