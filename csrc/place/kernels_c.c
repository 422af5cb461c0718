/*
 * place/kernels_c.c - the portable kernels: the reference arithmetic that
 * the SIMD kernels reproduce, and the fallback where a SIMD kernel cannot
 * run (no SSE2 in the build, RINGLOADER_SIMD=c, the tail of a row shorter
 * than a vector, a window at the region's edge).
 *
 * DESIGN: a sum starts at half a unit (RL_WEIGHT_HALF, or RL_EXACT_HALF
 * for exact weights) and is shifted right by RL_WEIGHT_BITS (or
 * RL_EXACT_BITS), then clamped to 0..255: round to nearest, exactly what
 * the vector code's add, arithmetic shift and saturating packs compute,
 * and what Pillow's clip8 does with its sums. The horizontal pass rounds
 * and clips to 8 bits before the vertical one, as Pillow does. An exact
 * weight is used whole here (hi * 2^11 + lo): the sum is the same 32-bit
 * integer the vector kernels assemble from their two accumulators.
 */
#include "place/resample_kernels.h"

/* Rounds the sum a (its half already added) of `bits` fraction bits down
 * and clamps it to a byte. */
static inline uint8_t clip8(int32_t v, int bits)
{
    v >>= bits;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* Weight j: 14-bit, or the exact one rebuilt from its parts. */
static inline int32_t weight(const int16_t *w, const int16_t *wlo, int j)
{
    return wlo == NULL ? w[j] : w[j] * (1 << RL_EXACT_SPLIT) + wlo[j];
}

void rl__hpass_px_c(const uint8_t *p, const int16_t *w, const int16_t *wlo,
                    int n, uint8_t *o)
{
    int bits = wlo == NULL ? RL_WEIGHT_BITS : RL_EXACT_BITS;
    int32_t half = wlo == NULL ? RL_WEIGHT_HALF : RL_EXACT_HALF;
    int32_t a0 = half, a1 = half, a2 = half;
    for (int j = 0; j < n; j++) {
        int32_t wj = weight(w, wlo, j);
        a0 += p[4 * j] * wj;
        a1 += p[4 * j + 1] * wj;
        a2 += p[4 * j + 2] * wj;
    }
    if (n == 0) {
        a0 = a1 = a2 = 0;
    }
    o[0] = clip8(a0, bits);
    o[1] = clip8(a1, bits);
    o[2] = clip8(a2, bits);
    o[3] = 0;
}

void rl__hpass_plan(rl__hpass *h, const rl__taps *tx, const rl_pixels *src,
                    int out_w, bool flip)
{
    h->first = tx->first;
    h->count = tx->count;
    h->w = tx->w;
    h->wlo = tx->wlo;
    h->ksize = (size_t)tx->ksize;
    h->x0 = src->x0;
    h->end = src->x0 + src->w;
    h->out_w = out_w;
    h->flip = flip;
    int k = 0;
    for (int x = 0; x < out_w; x++) {
        k = tx->count[x] > k ? tx->count[x] : k;
    }
    h->k = k;
    /* The vector pixels are the longest prefix whose k-windows stay inside
     * the region. first[] never decreases, so that is all but a suffix at
     * the region's right end; the scan does not rely on it. */
    int n = 0;
    while (n < out_w && tx->first[n] >= h->x0 && tx->first[n] + k <= h->end) {
        n++;
    }
    h->nvec = n;
}

void rl__hpass_tail_c(const rl__hpass *h, const uint8_t *const *rows,
                      uint8_t *const *outs, int from)
{
    for (int x = from; x < h->out_w; x++) {
        const int16_t *w = h->w + (size_t)x * h->ksize;
        const int16_t *wlo = h->wlo ? h->wlo + (size_t)x * h->ksize : NULL;
        size_t off = (size_t)(h->first[x] - h->x0) * 4;
        size_t at = 4 * (size_t)(h->flip ? h->out_w - 1 - x : x);
        /* A padding tap past the region's end is left out: its weight is
         * zero, so the sum is the same. */
        int n = h->count[x], real = h->end - h->first[x];
        n = real < n ? real : n;
        for (int i = 0; i < 4; i++) {
            rl__hpass_px_c(rows[i] + off, w, wlo, n, outs[i] + at);
        }
    }
}

void rl__hpass_rows4_c(const rl__hpass *h, const uint8_t *const *rows,
                       uint8_t *const *outs)
{
    /* Without vectors the real taps are cheaper than k of them. */
    rl__hpass_tail_c(h, rows, outs, 0);
}

int rl__vpass_c(const uint8_t *const *rows, const int16_t *w,
                const int16_t *wlo, int n, int k, int nbytes, uint8_t *out)
{
    int bits = wlo == NULL ? RL_WEIGHT_BITS : RL_EXACT_BITS;
    int32_t half = wlo == NULL ? RL_WEIGHT_HALF : RL_EXACT_HALF;
    for (; k < nbytes; k++) {
        int32_t a = half;
        for (int j = 0; j < n; j++) {
            a += rows[j][k] * weight(w, wlo, j);
        }
        out[k] = clip8(a, bits);
    }
    return nbytes;
}
