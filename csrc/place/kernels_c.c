/*
 * place/kernels_c.c - the portable kernels: the reference arithmetic that
 * the SIMD kernels reproduce, and the fallback where a SIMD kernel cannot
 * run (no SSE2 in the build, RINGLOADER_SIMD=c, the tail of a row shorter
 * than a vector, a window at the region's edge).
 *
 * DESIGN: a sum starts at half a unit (RL_WEIGHT_HALF) and is shifted right
 * by RL_WEIGHT_BITS, then clamped to 0..255: round to nearest, exactly what
 * the vector code's add, arithmetic shift and saturating packs compute.
 * The horizontal pass rounds to 8 bits before the vertical one, as
 * torchvision's uint8 kernel does.
 */
#include "place/kernels.h"

static inline uint8_t clip8(int32_t v)
{
    v >>= RL_WEIGHT_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

void rl__hpass_px_c(const uint8_t *p, const int16_t *w, int n, uint8_t *o)
{
    int32_t a0 = RL_WEIGHT_HALF, a1 = RL_WEIGHT_HALF, a2 = RL_WEIGHT_HALF;
    for (int j = 0; j < n; j++) {
        a0 += p[4 * j] * w[j];
        a1 += p[4 * j + 1] * w[j];
        a2 += p[4 * j + 2] * w[j];
    }
    if (n == 0) {
        a0 = a1 = a2 = 0;
    }
    o[0] = clip8(a0);
    o[1] = clip8(a1);
    o[2] = clip8(a2);
    o[3] = 0;
}

void rl__hpass_plan(rl__hpass *h, const rl__taps *tx, const rl_pixels *src,
                    int out_w, bool flip)
{
    h->first = tx->first;
    h->count = tx->count;
    h->w = tx->w;
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
        size_t off = (size_t)(h->first[x] - h->x0) * 4;
        size_t at = 4 * (size_t)(h->flip ? h->out_w - 1 - x : x);
        /* A padding tap past the region's end is left out: its weight is
         * zero, so the sum is the same. */
        int n = h->count[x], real = h->end - h->first[x];
        n = real < n ? real : n;
        for (int i = 0; i < 4; i++) {
            rl__hpass_px_c(rows[i] + off, w, n, outs[i] + at);
        }
    }
}

void rl__hpass_rows4_c(const rl__hpass *h, const uint8_t *const *rows,
                       uint8_t *const *outs)
{
    /* Without vectors the real taps are cheaper than k of them. */
    rl__hpass_tail_c(h, rows, outs, 0);
}

int rl__vpass_c(const uint8_t *const *rows, const int16_t *w, int n, int k,
                int nbytes, uint8_t *out)
{
    for (; k < nbytes; k++) {
        int32_t a = RL_WEIGHT_HALF;
        for (int j = 0; j < n; j++) {
            a += rows[j][k] * w[j];
        }
        out[k] = clip8(a);
    }
    return nbytes;
}
