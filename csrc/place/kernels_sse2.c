/*
 * place/kernels_sse2.c - the SSE2 kernels (every x86-64 CPU has SSE2).
 *
 * DESIGN: weights are 14-bit integers, so a pixel times a weight leaves
 * 16 bits of headroom and pmaddwd multiplies and adds two taps of eight
 * 16-bit lanes in one instruction. Pixels are 4 bytes (RGBX), so one output
 * pixel of the horizontal pass is one 4 x 32-bit accumulator; two rows are
 * done together because their windows and weights are the same. The
 * vertical pass is a plain weighted sum of whole rows, 16 bytes at a time.
 * Taps are processed in pairs; an odd last tap is paired with a zero
 * weight, and a window whose padding tap would read past the decoded region
 * is left to the portable kernel, which computes the same sum.
 */
#include "place/kernels.h"

#if RL_HAVE_SSE2
#include <emmintrin.h>
#include <string.h>

/* One output pixel of each of two rows from k taps (even, a compile-time
 * constant after inlining): the window's weights are loaded once. */
static inline __attribute__((always_inline)) void
hpass_px2_sse2(const uint8_t *p0, const uint8_t *p1, const int16_t *w, int k,
               uint8_t *o0, uint8_t *o1)
{
    __m128i zero = _mm_setzero_si128();
    __m128i a0 = _mm_set1_epi32(RL_WEIGHT_HALF), a1 = a0;
    for (int j = 0; j < k; j += 2) {
        int32_t pair;
        memcpy(&pair, w + j, 4);
        __m128i ww = _mm_set1_epi32(pair);
        __m128i v0 = _mm_loadl_epi64((const __m128i *)(p0 + 4 * j));
        __m128i v1 = _mm_loadl_epi64((const __m128i *)(p1 + 4 * j));
        /* R0 G0 B0 X0 R1 G1 B1 X1 -> R0 R1 G0 G1 B0 B1 X0 X1 (16 bits) */
        v0 = _mm_unpacklo_epi8(v0, zero);
        v1 = _mm_unpacklo_epi8(v1, zero);
        v0 = _mm_unpacklo_epi16(v0, _mm_srli_si128(v0, 8));
        v1 = _mm_unpacklo_epi16(v1, _mm_srli_si128(v1, 8));
        a0 = _mm_add_epi32(a0, _mm_madd_epi16(v0, ww));
        a1 = _mm_add_epi32(a1, _mm_madd_epi16(v1, ww));
    }
    __m128i px = _mm_packs_epi32(_mm_srai_epi32(a0, RL_WEIGHT_BITS),
                                 _mm_srai_epi32(a1, RL_WEIGHT_BITS));
    px = _mm_packus_epi16(px, px);
    uint32_t q0 = (uint32_t)_mm_cvtsi128_si32(px);
    uint32_t q1 = (uint32_t)_mm_cvtsi128_si32(_mm_srli_si128(px, 4));
    memcpy(o0, &q0, 4);
    memcpy(o1, &q1, 4);
}

RL_DEFINE_HPASS_ROWS2(rl__hpass_rows2_sse2, hpass_px2_sse2, )

RL_DEFINE_VPASS(rl__vpass_sse2, , __m128i, _mm, si128)
#endif /* RL_HAVE_SSE2 */
