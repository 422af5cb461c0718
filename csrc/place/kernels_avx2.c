/*
 * place/kernels_avx2.c - the AVX2 kernels, for CPUs that have AVX2 and
 * F16C (checked once at run time).
 *
 * DESIGN: the functions carry target attributes, so the build needs no
 * -mavx2 and the rest of the module still runs on any x86-64 CPU; nothing
 * here is called unless rl_simd_cpu_avx2() said yes. The horizontal pass
 * puts two rows' tap pair in one 256-bit multiply-add (two for exact
 * weights; four rows a call, one tap count per image, see resample_kernels.h), and
 * the vertical
 * pass works 32 bytes at a time. Unpacks and packs all stay within 128-bit
 * lanes, so each lane does exactly the SSE2 computation and the bytes are
 * the same as the SSE2 and portable kernels'.
 */
#include "place/resample_kernels.h"

#if RL_HAVE_AVX2
#include <immintrin.h>
#include <string.h>

/*
 * Output pixels [0, nvec) of four rows from k taps each: per tap pair, the
 * 8-byte loads (two RGBX pixels) of two rows are shuffled to
 * R0 R1 G0 G1 B0 B1 X0 X1 and widened to 16 bits, so one pmaddwd weighs
 * the pair for two rows, and the weights' broadcast serves all four.
 */
static inline RL_TARGET_AVX2 __attribute__((always_inline)) void
hpass4_k_avx2(const rl__hpass *h, const uint8_t *const *rows,
              uint8_t *const *outs, int k, bool exact)
{
    const __m128i pairs =
        _mm_setr_epi8(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
    const __m256i half = _mm256_set1_epi32(exact ? 0 : RL_WEIGHT_HALF);
    const __m256i xhalf = _mm256_set1_epi32(RL_EXACT_HALF);
    const int *first = h->first;
    const int16_t *weights = h->w;
    size_t ksize = h->ksize;
    ptrdiff_t step = h->flip ? -4 : 4;
    size_t last = h->flip && h->out_w > 0 ? 4 * (size_t)(h->out_w - 1) : 0;
    const uint8_t *r0 = rows[0], *r1 = rows[1], *r2 = rows[2], *r3 = rows[3];
    uint8_t *o0 = outs[0] + last, *o1 = outs[1] + last;
    uint8_t *o2 = outs[2] + last, *o3 = outs[3] + last;
    for (int x = 0; x < h->nvec; x++) {
        const int16_t *w = weights + (size_t)x * ksize;
        const int16_t *wl = exact ? h->wlo + (size_t)x * ksize : NULL;
        size_t off = (size_t)(first[x] - h->x0) * 4;
        __m256i a01 = half, a23 = half, b01 = xhalf, b23 = xhalf;
        for (int j = 0; j < k; j += 2) {
            long long q0, q1, q2, q3;
            int32_t pair;
            size_t at = off + 4 * (size_t)j;
            memcpy(&q0, r0 + at, 8);
            memcpy(&q1, r1 + at, 8);
            memcpy(&q2, r2 + at, 8);
            memcpy(&q3, r3 + at, 8);
            memcpy(&pair, w + j, 4);
            __m256i ww = _mm256_set1_epi32(pair);
            __m256i v01 = _mm256_cvtepu8_epi16(
                _mm_shuffle_epi8(_mm_set_epi64x(q1, q0), pairs));
            __m256i v23 = _mm256_cvtepu8_epi16(
                _mm_shuffle_epi8(_mm_set_epi64x(q3, q2), pairs));
            a01 = _mm256_add_epi32(a01, _mm256_madd_epi16(v01, ww));
            a23 = _mm256_add_epi32(a23, _mm256_madd_epi16(v23, ww));
            if (exact) {
                memcpy(&pair, wl + j, 4);
                ww = _mm256_set1_epi32(pair);
                b01 = _mm256_add_epi32(b01, _mm256_madd_epi16(v01, ww));
                b23 = _mm256_add_epi32(b23, _mm256_madd_epi16(v23, ww));
            }
        }
        if (exact) {
            a01 = _mm256_srai_epi32(
                _mm256_add_epi32(_mm256_slli_epi32(a01, RL_EXACT_SPLIT), b01),
                RL_EXACT_BITS);
            a23 = _mm256_srai_epi32(
                _mm256_add_epi32(_mm256_slli_epi32(a23, RL_EXACT_SPLIT), b23),
                RL_EXACT_BITS);
        } else {
            a01 = _mm256_srai_epi32(a01, RL_WEIGHT_BITS);
            a23 = _mm256_srai_epi32(a23, RL_WEIGHT_BITS);
        }
        __m128i p01 = _mm_packs_epi32(_mm256_castsi256_si128(a01),
                                      _mm256_extracti128_si256(a01, 1));
        __m128i p23 = _mm_packs_epi32(_mm256_castsi256_si128(a23),
                                      _mm256_extracti128_si256(a23, 1));
        __m128i px = _mm_packus_epi16(p01, p23);
        uint32_t q = (uint32_t)_mm_cvtsi128_si32(px);
        memcpy(o0 + step * x, &q, 4);
        q = (uint32_t)_mm_extract_epi32(px, 1);
        memcpy(o1 + step * x, &q, 4);
        q = (uint32_t)_mm_extract_epi32(px, 2);
        memcpy(o2 + step * x, &q, 4);
        q = (uint32_t)_mm_extract_epi32(px, 3);
        memcpy(o3 + step * x, &q, 4);
    }
}

RL_DEFINE_HPASS_ROWS4(rl__hpass_rows4_avx2, hpass4_k_avx2, RL_TARGET_AVX2)

RL_DEFINE_VPASS(rl__vpass_avx2, RL_TARGET_AVX2, __m256i, _mm256, si256)
#endif /* RL_HAVE_AVX2 */
