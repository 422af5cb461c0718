/*
 * place/taps.h - the resampling filter's coefficient tables (internal to
 * the place stage).
 */
#ifndef RL_PLACE_TAPS_H
#define RL_PLACE_TAPS_H

#include <stdbool.h>
#include <stdint.h>

/* Weights are fixed point with this many fraction bits: a weight (at most
 * 1 << 14) and a pixel each fit a signed 16-bit lane of the SIMD
 * multiply-adds, and a window's sum of products fits 32 bits. */
#define RL_WEIGHT_BITS 14
/* Added before the final shift so that it rounds to nearest. */
#define RL_WEIGHT_HALF (1 << (RL_WEIGHT_BITS - 1))

/*
 * For each output pixel i of one axis: its taps are the source pixels
 * first[i] .. first[i] + count[i] - 1, weighted by w[i * ksize ..]. count is
 * rounded up to even (kernels take taps in pairs) and the padding tap has
 * weight 0; 0 means the pixel has no taps and is black.
 */
typedef struct rl__taps {
    int *first;
    int *count;
    int16_t *w; /* ksize weights per output pixel, zero-padded */
    int ksize;  /* even */
} rl__taps;

/*
 * Computes the taps of resampling the span [b0, b0 + bsize) of an axis of
 * `full` pixels to `out` pixels; with crop_first the taps stay inside the
 * span (see rl_resample_span()). Returns 0, or -ENOMEM with *t freed.
 * *t must start zeroed; rl__taps_free() releases it (also a zeroed one).
 */
int rl__taps_make(rl__taps *t, int full, double b0, double bsize, int out,
                  bool crop_first);
void rl__taps_free(rl__taps *t);

#endif /* RL_PLACE_TAPS_H */
