/*
 * place/taps.h - the resampling filter's coefficient tables (internal to
 * the place stage).
 */
#ifndef RL_PLACE_TAPS_H
#define RL_PLACE_TAPS_H

#include <stdbool.h>
#include <stdint.h>

#include "rl.h"

/* Bilinear and nearest weights are fixed point with this many fraction
 * bits: a weight (at most 1 << 14, all positive) and a pixel each fit a
 * signed 16-bit lane of the SIMD multiply-adds, and a window's sum of
 * products fits 32 bits. */
#define RL_WEIGHT_BITS 14
/* Added before the final shift so that it rounds to nearest. */
#define RL_WEIGHT_HALF (1 << (RL_WEIGHT_BITS - 1))

/*
 * Bicubic weights are Pillow's own integers: 22 fraction bits (32 - 8 - 2:
 * a cubic's weights may sum above 1 or go negative, and a sum still fits
 * 32 bits), so the sums are Pillow's exactly. A 16-bit lane cannot hold
 * them, so each is kept as hi * 2^11 + lo, hi signed (|hi| < 2^13), lo in
 * 0..2047, and a kernel sums pixels times hi and times lo in two
 * accumulators, combined as (sum_hi << 11) + sum_lo: the same 32-bit
 * integer as Pillow's single sum.
 */
#define RL_EXACT_BITS 22
#define RL_EXACT_SPLIT 11
#define RL_EXACT_HALF (1 << (RL_EXACT_BITS - 1))

/*
 * For each output pixel i of one axis: its taps are the source pixels
 * first[i] .. first[i] + count[i] - 1, weighted by w[i * ksize ..] (and,
 * for exact weights, wlo[i * ksize ..]). count is rounded up to even
 * (kernels take taps in pairs) and the padding tap has weight 0; 0 means
 * the pixel has no taps and is black.
 */
typedef struct rl__taps {
    int *first;
    int *count;
    int16_t *w;   /* ksize weights per output pixel, zero-padded: the
                   * RL_WEIGHT_BITS weights, or exact weights' hi parts */
    int16_t *wlo; /* NULL, or exact weights' lo parts (RL_EXACT_BITS) */
    int ksize;    /* even */
} rl__taps;

/*
 * Computes the taps of resampling the span [b0, b0 + bsize) of an axis of
 * `full` pixels to `out` pixels with `filter`; with crop_first the taps
 * stay inside the span (see rl_resample_span()). Returns 0, or -ENOMEM
 * with *t freed. *t must start zeroed; rl__taps_free() releases it (also a
 * zeroed one).
 */
int rl__taps_make(rl__taps *t, rl_filter filter, int full, double b0,
                  double bsize, int out, bool crop_first);
void rl__taps_free(rl__taps *t);

/* The resize Pillow runs for the same arguments: from *in pixels (those
 * the resize sees) to *n (of which the span's `out` are kept), rounded
 * where the span is not whole pixels of such a resize (DCT scaling). */
void rl__taps_sizes(int full, double b0, double bsize, int out, bool crop_first,
                    int *in, int *n);

#endif /* RL_PLACE_TAPS_H */
