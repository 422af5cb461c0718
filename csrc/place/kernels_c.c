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

static inline __attribute__((always_inline)) void
hpass_px2_c(const uint8_t *p0, const uint8_t *p1, const int16_t *w, int k,
            uint8_t *o0, uint8_t *o1)
{
    rl__hpass_px_c(p0, w, k, o0);
    rl__hpass_px_c(p1, w, k, o1);
}

RL_DEFINE_HPASS_ROWS2(rl__hpass_rows2_c, hpass_px2_c, )

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
