/*
 * rl.h - types and status codes shared by every layer of the C core.
 *
 * Status convention (see STYLE.md): functions that act return int.
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
 * else when resize_h, resize_w > 0 the image is resized to exactly that;
 * else it is not resized. Then the centre out_h x out_w is cropped, padding
 * with zeros where the crop is larger than the image.
 * RL_T_RANDOM_CROP: torchvision's RandomResizedCrop sampling of a box with
 * area fraction in [scale_lo, scale_hi] and aspect ratio in [ratio_lo,
 * ratio_hi], resized to out_h x out_w.
 * RL_T_RESIZE_RANDOM_CROP: resized as RL_T_RESIZE_CROP is, then
 * torchvision's RandomCrop(out_h x out_w): zero padding of pad[] pixels
 * (left, top, right, bottom), with pad_if_needed the missing rows or
 * columns added on both sides as torchvision adds them, then a window at a
 * uniform random offset; an image smaller than the window after padding
 * is that sample's error, as torchvision raises for it.
 * All: resampled with `filter` (an rl_filter) in the order `passes` (an
 * rl_passes), mirrored horizontally with probability flip_p, then
 * vertically with probability vflip_p.
 */
typedef struct rl_transform {
    rl_transform_kind kind;
    int resize_short;
    int resize_h, resize_w;
    int out_h, out_w;
    double scale_lo, scale_hi;
    double ratio_lo, ratio_hi;
    double flip_p;
    double vflip_p;
    int pad[4]; /* RandomCrop's padding: left, top, right, bottom */
    int pad_if_needed;
    int filter; /* an rl_filter (an int: the spec's table fills it) */
    int passes; /* an rl_passes */
} rl_transform;

/*
 * What to do with one sample: resample the box (x, y, w, h) of the source
 * image, in source pixels, into the output rectangle (vx, vy, vw, vh) of an
 * out_w x out_h image, mirrored left-right if flip and top-bottom if vflip.
 * Output pixels outside that rectangle (a CenterCrop larger than the image,
 * a RandomCrop's padding) are zeros; the rectangle may be empty (vw or vh
 * 0: a window in the padding alone). crop_first says
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

/* Limits for untrusted input (RELIABILITY.md). */
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

#endif /* RL_H */
