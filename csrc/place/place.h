/*
 * place/place.h - the place stage: decoded pixels to their place in a batch
 * slot. The one header other stages include.
 *
 * The resampler is Pillow's Image.resize, which torchvision's Resize and
 * RandomResizedCrop call on a PIL image (rl_filter): bilinear (a triangle)
 * or bicubic (Keys' cubic, a = -0.5) whose support widens with the
 * downscale factor, weights normalised over the pixels the resize sees
 * (the image, or only the box when torchvision crops before it resizes),
 * computed separably (two passes, each rounded and clipped to 0..255, in
 * the order of the caller's Pillow: rl_passes) in fixed point: bicubic with Pillow's own 22-bit
 * integers, so its bytes are Pillow's; bilinear in 14 bits (within 1 LSB);
 * or nearest, the pixel Pillow picks. It has portable C, SSE2 and AVX2
 * kernels, picked at run time, and every level gives the same bytes.
 * A box of the source image, given in source pixels, maps to the output, so
 * Resize + CenterCrop and RandomResizedCrop are one resample. Only the rows
 * and columns rl_resample_span() names are read, so a decoder decodes just
 * those. The output is written straight into the slot with arbitrary
 * strides (NCHW or NHWC), mirrored if asked, as uint8 or as float32,
 * float16 or bfloat16 with ToDtype + Normalize fused in.
 *
 * Every function here is pure computation on memory the caller owns: none
 * blocks, none touches Python, all may be called without the GIL and from
 * any number of threads at once (except rl_simd_cap(), see there).
 * This stage knows nothing of files, JPEG or Python.
 */
#ifndef RL_PLACE_H
#define RL_PLACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rl.h"

/* Element types of the output. */
typedef enum {
    RL_DTYPE_U8 = 0,
    RL_DTYPE_F32 = 1,
    RL_DTYPE_F16 = 2,
    RL_DTYPE_BF16 = 3,
} rl_dtype;

/*
 * Where output pixel (x, y) channel c goes: element
 * y * row_stride + x * px_stride + c * ch_stride of data (strides count
 * elements, not bytes; NCHW is (w, 1, w * h), NHWC (3 w, 3, 1)). A
 * zero-initialised dtype is RL_DTYPE_U8. Float outputs hold
 * v * mul[c] + add[c] for the 8-bit value v, which is how ToDtype(scale=True)
 * followed by Normalize(mean, std) is fused: mul = 1 / (255 std),
 * add = -mean / std. float16 and bfloat16 round to nearest even. u8 outputs
 * ignore mul and add. The memory belongs to the caller.
 */
typedef struct rl_dst {
    uint8_t *data;
    ptrdiff_t row_stride, px_stride, ch_stride;
    rl_dtype dtype;
    float mul[3], add[3];
} rl_dst;

/* Bytes per element of a dtype: 1, 4, 2 or 2. */
size_t rl_dtype_size(rl_dtype dtype);

/* The address of pixel (x, y), channel 0, in dst. Pure arithmetic: x and y
 * may name a pixel outside the image, for a sub-destination's origin. */
uint8_t *rl_dst_at(const rl_dst *dst, int x, int y);

/* How the samples of a slot are laid out: fixed for a pipeline. */
typedef struct rl_place_config {
    int out_w, out_h;
    rl_layout layout;
    rl_dtype dtype;
    float mul[3], add[3]; /* float outputs hold v * mul[c] + add[c] */
} rl_place_config;

/* Bytes of one sample: out_h * out_w * 3 * element size. */
size_t rl_place_sample_bytes(const rl_place_config *c);

/*
 * A slot holds the views of its samples (core/sample.h) view by view: the
 * n samples of view 0, each of rl_place_sample_bytes(&views[0]) bytes, then
 * those of view 1, ... so that each view of a batch is one contiguous
 * (n, ...) array in its own dtype and layout. Each view's region starts
 * RL_PLACE_VIEW_ALIGN-aligned (a float view after a uint8 one of an odd
 * size). Returns the offset of view v's region in a slot of n samples;
 * v = nviews gives the bytes of the whole slot (the last region not
 * padded: one view's slot is n samples exactly).
 */
#define RL_PLACE_VIEW_ALIGN 64
size_t rl_place_view_offset(const rl_place_config *views, int nviews, int n,
                            int v);

/* Fills *dst with the destination of the sample whose first byte is base:
 * c's dtype, mul and add, and the strides of c's layout for an
 * out_w x out_h image. base must hold rl_place_sample_bytes(c) bytes. */
void rl_place_dst(const rl_place_config *c, uint8_t *base, rl_dst *dst);

/* "bilinear", "bicubic" or "nearest": an rl_filter's name (NULL for a
 * value past RL_FILTER_COUNT), what the module exports, in order. */
const char *rl_filter_name(int filter);

/*
 * The source pixels [*lo, *hi) that resampling the span [b0, b0 + bsize) of
 * an axis of `full` pixels to `out` pixels with `filter` reads: decode at
 * least these.
 * Never empty (a degenerate box reads one pixel), always inside [0, full).
 * crop_first (rl_plan's): the resize sees only the pixels whose centres lie
 * in the span, as if the box had been cropped out first, so the filter
 * neither reads past the span's edges nor gives weight there; the whole
 * axis otherwise. For an integer span that is exactly [b0, b0 + bsize).
 */
void rl_resample_span(rl_filter filter, int full, double b0, double bsize,
                      int out, bool crop_first, int *lo, int *hi);

/*
 * Resamples the box (bx, by, bw, bh) of src's image (in src's full_w x
 * full_h coordinates) with `filter`, its passes in the order `passes`, to
 * out_w x out_h pixels written at dst, mirrored
 * left-right when flip, the filter seeing only the box when crop_first (see
 * rl_resample_span()). src must cover the spans rl_resample_span() returns
 * for both axes. Returns 0, or -ENOMEM with dst untouched. Allocates only
 * the coefficient tables and out_w * 4 bytes a source row read, freed
 * before it returns.
 */
int rl_resample(const rl_pixels *src, rl_filter filter, rl_passes passes,
                double bx, double by, double bw, double bh, int out_w,
                int out_h, bool flip, bool crop_first, const rl_dst *dst);

/*
 * Resamples box (bx, by, bw, bh) of px (in px's full_w x full_h
 * coordinates) into the plan's rectangle (vx, vy, vw, vh) of dst, the whole
 * plan->out_w x plan->out_h sample with plan->filter and plan->passes,
 * mirrored if plan->flip (left-right) and plan->vflip (top-bottom), the
 * filter seeing only the box if plan->crop_first, and writes plan->pad.fill
 * (converted to dst's dtype) to the rest of the sample: the padding of a
 * CenterCrop larger than the image (zeros), a RandomCrop's constant
 * padding. With another padding mode (rl_plan_pad) the box is resampled to
 * the vw x vh range of the resized image it names, and every pixel of the
 * sample is copied from it, padding and flips included. The box is the
 * plan's (x, y, w, h) scaled to px's coordinates when px was decoded at a
 * reduced DCT scale. Returns 0, or -ENOMEM with msg (RL_MSG_MAX bytes) set
 * and dst's content unspecified. Allocates only scratch freed before it
 * returns.
 */
int rl_place(const rl_pixels *px, const rl_plan *plan, double bx, double by,
             double bw, double bh, const rl_dst *dst, char *msg);

/* Writes v as element c of pixel (x, y) of dst, in dst's dtype, without
 * dst's mul and add (uint8: truncated and clamped as torch casts). */
void rl_store_value(const rl_dst *dst, int x, int y, int c, float v);

/*
 * The store on its own: converts a w x h image of packed 8-bit RGB
 * (3 bytes a pixel, `stride` bytes a row) into dst (its dtype, strides,
 * mul and add), exactly as rl_resample's own store writes the same 8-bit
 * values. Used after per-sample augmentation ops, which work on such an
 * 8-bit image. Cannot fail: it needs no memory but a small stack buffer.
 */
void rl_store_rgb(const uint8_t *rgb, size_t stride, int w, int h,
                  const rl_dst *dst);

/* Writes black (8-bit zeros, converted to dst's dtype) to the w x h
 * rectangle at (x, y) of dst; nothing when w or h is not positive. */
void rl_fill_zero(const rl_dst *dst, int x, int y, int w, int h);

/* Writes the 8-bit colour fill (R, G, B, converted to dst's dtype as a
 * resampled pixel is) to the w x h rectangle at (x, y) of dst; nothing
 * when w or h is not positive. Zeros give rl_fill_zero's bytes. */
void rl_fill_rgb(const rl_dst *dst, int x, int y, int w, int h,
                 const uint8_t fill[3]);

/* "constant", "edge", "reflect" or "symmetric": an rl_pad_mode's name
 * (NULL past RL_PAD_MODE_COUNT), what the module exports, in order. */
const char *rl_pad_mode_name(int mode);

#endif /* RL_PLACE_H */
