/*
 * place/kernels_sse2.c - the SSE2 kernels (every x86-64 CPU has SSE2).
 *
 * DESIGN: weights are 14-bit integers, so a pixel times a weight leaves
 * 16 bits of headroom and pmaddwd multiplies and adds two taps of eight
 * 16-bit lanes in one instruction. Exact (22-bit) weights take a second
 * pmaddwd for their lo parts, into accumulators of their own (taps.h). Pixels are 4 bytes (RGBX), so one output
 * pixel of the horizontal pass is one 4 x 32-bit accumulator; four rows are
 * done together because their windows and weights are the same, all with
 * the image's largest tap count (resample_kernels.h, rl__hpass). The
 * vertical pass is a plain weighted sum of whole rows, 16 bytes at a time.
 * Taps are processed in pairs; an odd last tap is paired with a zero
 * weight, and a window that would read past the decoded region is left to
 * the portable kernel, which computes the same sum.
 */
#include "place/resample_kernels.h"

#if RL_HAVE_SSE2
#include <emmintrin.h>
#include <string.h>

/*
 * Output pixels [0, nvec) of four rows from k taps each (even, a
 * compile-time constant after inlining): each tap pair's weights are
 * broadcast once for the four rows, and the four results are packed
 * together into one vector of four RGBX pixels.
 */
static inline __attribute__((always_inline)) void
hpass4_k_sse2(const rl__hpass *h, const uint8_t *const *rows,
              uint8_t *const *outs, int k, bool exact)
{
    const int *first = h->first;
    const int16_t *weights = h->w;
    size_t ksize = h->ksize;
    ptrdiff_t step = h->flip ? -4 : 4;
    uint8_t *o[4];
    for (int i = 0; i < 4; i++) {
        o[i] = outs[i] +
               (h->flip && h->out_w > 0 ? 4 * (size_t)(h->out_w - 1) : 0);
    }
    __m128i zero = _mm_setzero_si128();
    for (int x = 0; x < h->nvec; x++) {
        const int16_t *w = weights + (size_t)x * ksize;
        const int16_t *wl = exact ? h->wlo + (size_t)x * ksize : NULL;
        size_t off = (size_t)(first[x] - h->x0) * 4;
        __m128i a[4], b[4];
        for (int i = 0; i < 4; i++) {
            a[i] = _mm_set1_epi32(exact ? 0 : RL_WEIGHT_HALF);
            b[i] = _mm_set1_epi32(RL_EXACT_HALF);
        }
        for (int j = 0; j < k; j += 2) {
            int32_t pair;
            memcpy(&pair, w + j, 4);
            __m128i ww = _mm_set1_epi32(pair), wwl = ww;
            if (exact) {
                memcpy(&pair, wl + j, 4);
                wwl = _mm_set1_epi32(pair);
            }
            for (int i = 0; i < 4; i++) {
                __m128i v = _mm_loadl_epi64(
                    (const __m128i *)(rows[i] + off + 4 * (size_t)j));
                /* R0 G0 B0 X0 R1 G1 B1 X1 -> R0 R1 G0 G1 B0 B1 X0 X1 */
                v = _mm_unpacklo_epi8(v, zero);
                v = _mm_unpacklo_epi16(v, _mm_srli_si128(v, 8));
                a[i] = _mm_add_epi32(a[i], _mm_madd_epi16(v, ww));
                if (exact) {
                    b[i] = _mm_add_epi32(b[i], _mm_madd_epi16(v, wwl));
                }
            }
        }
        for (int i = 0; i < 4; i++) {
            a[i] = exact ? _mm_srai_epi32(
                               _mm_add_epi32(
                                   _mm_slli_epi32(a[i], RL_EXACT_SPLIT), b[i]),
                               RL_EXACT_BITS)
                         : _mm_srai_epi32(a[i], RL_WEIGHT_BITS);
        }
        __m128i p01 = _mm_packs_epi32(a[0], a[1]);
        __m128i p23 = _mm_packs_epi32(a[2], a[3]);
        __m128i px = _mm_packus_epi16(p01, p23);
        uint32_t q[4];
        _mm_storeu_si128((__m128i *)(void *)q, px);
        for (int i = 0; i < 4; i++) {
            memcpy(o[i] + step * x, &q[i], 4);
        }
    }
}

RL_DEFINE_HPASS_ROWS4(rl__hpass_rows4_sse2, hpass4_k_sse2, )

RL_DEFINE_VPASS(rl__vpass_sse2, , __m128i, _mm, si128)
#endif /* RL_HAVE_SSE2 */
