/*
 * rl_resize.h - antialiased bilinear resampling of RGB pixels.
 *
 * The filter is the one torchvision applies with antialias=True (and Pillow
 * with BILINEAR): a triangle whose support widens with the downscale factor,
 * weights normalised over the pixels inside the image, computed separably
 * (horizontal pass into 8-bit rows, then vertical) in 14-bit fixed point,
 * with SSE2 kernels on x86-64 (16-bit multiply-adds), AVX2 ones where the
 * CPU has it (picked at run time) and the same arithmetic in plain C
 * elsewhere: every level gives the same bytes.
 * A box of the source image, given in source pixels, maps to the output, so
 * Resize + CenterCrop and RandomResizedCrop are one resample. Only the rows
 * and columns rl_resample_span() names are read; the caller decodes just
 * those. This layer knows nothing of files, JPEG or Python.
 */
#ifndef RL_RESIZE_H
#define RL_RESIZE_H

#include <stddef.h>

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
 * elements, not bytes). A zero-initialised dtype is RL_DTYPE_U8. Float
 * outputs hold v * mul[c] + add[c] for the 8-bit value v, which is how
 * ToDtype(scale=True) followed by Normalize(mean, std) is fused: mul =
 * 1 / (255 std), add = -mean / std.
 */
typedef struct rl_dst {
    uint8_t *data;
    ptrdiff_t row_stride, px_stride, ch_stride;
    rl_dtype dtype;
    float mul[3], add[3];
} rl_dst;

/* Bytes per element of a dtype. */
size_t rl_dtype_size(rl_dtype dtype);

/* The element address of pixel (x, y), channel 0. */
uint8_t *rl_dst_at(const rl_dst *dst, int x, int y);

/*
 * The source pixels [*lo, *hi) that resampling the span [b0, b0 + bsize) of
 * an axis of `full` pixels to `out` pixels reads.
 */
void rl_resample_span(int full, double b0, double bsize, int out, int *lo,
                      int *hi);

/*
 * Resamples the box (bx, by, bw, bh) of src's image to out_w x out_h pixels
 * written at dst (mirrored left-right when flip). src must cover the spans
 * rl_resample_span() returns for both axes. Returns 0 or -ENOMEM.
 * Thread-safe; allocates only small coefficient tables.
 */
int rl_resample(const rl_pixels *src, double bx, double by, double bw,
                double bh, int out_w, int out_h, bool flip,
                const rl_dst *dst);

/* The SIMD kernels rl_resample can use; every level gives the same bytes. */
typedef enum {
    RL_SIMD_C = 0,
    RL_SIMD_SSE2 = 1,
    RL_SIMD_AVX2 = 2,
} rl_simd;

/* The level in use: the best this build and CPU support, unless capped by
 * the environment (RINGLOADER_SIMD=c or sse2, read once) or below. */
rl_simd rl_resample_simd(void);

/* Caps the level (for tests and diagnostics; call before resampling starts,
 * not concurrently with it). Returns the level now in use. */
rl_simd rl_resample_set_simd(rl_simd level);

/* "c", "sse2" or "avx2". */
const char *rl_simd_name(rl_simd level);

/* Writes the value of a black pixel (8-bit zeros, converted) to the w x h
 * rectangle at (x, y) of dst. */
void rl_fill_zero(const rl_dst *dst, int x, int y, int w, int h);

#endif /* RL_RESIZE_H */
