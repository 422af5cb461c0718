/*
 * place/kernels_avx2.c - the AVX2 kernels, for CPUs that have AVX2 and
 * F16C (checked once at run time).
 *
 * DESIGN: the functions carry target attributes, so the build needs no
 * -mavx2 and the rest of the module still runs on any x86-64 CPU; nothing
 * here is called unless rl__cpu_has_avx2() said yes. The horizontal pass
 * puts two rows' tap pair in one 256-bit multiply-add, and the vertical
 * pass works 32 bytes at a time. Unpacks and packs all stay within 128-bit
 * lanes, so each lane does exactly the SSE2 computation and the bytes are
 * the same as the SSE2 and portable kernels'.
 */
#include "place/kernels.h"

#if RL_HAVE_AVX2
#include <cpuid.h>
#include <immintrin.h>
#include <string.h>

bool rl__cpu_has_avx2(void)
{
    /* The AVX2 level also converts to float16 with F16C, which every CPU
     * with AVX2 has; both are checked. */
    __builtin_cpu_init();
    unsigned a, b, c, d;
    bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
    return __builtin_cpu_supports("avx2") && f16c;
}

/*
 * One output pixel of each of two rows from k taps: the two 8-byte loads
 * (two RGBX pixels of each row) are shuffled to R0 R1 G0 G1 B0 B1 X0 X1 and
 * widened to 16 bits, so one pmaddwd weighs the pair for both rows.
 */
static inline RL_TARGET_AVX2 __attribute__((always_inline)) void
hpass_px2_avx2(const uint8_t *p0, const uint8_t *p1, const int16_t *w, int k,
               uint8_t *o0, uint8_t *o1)
{
    const __m128i pairs =
        _mm_setr_epi8(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
    __m256i acc = _mm256_set1_epi32(RL_WEIGHT_HALF);
    for (int j = 0; j < k; j += 2) {
        long long q0, q1;
        int32_t pair;
        memcpy(&q0, p0 + 4 * j, 8);
        memcpy(&q1, p1 + 4 * j, 8);
        memcpy(&pair, w + j, 4);
        __m128i v = _mm_shuffle_epi8(_mm_set_epi64x(q1, q0), pairs);
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_cvtepu8_epi16(v),
                                                      _mm256_set1_epi32(pair)));
    }
    acc = _mm256_srai_epi32(acc, RL_WEIGHT_BITS);
    __m128i px = _mm_packs_epi32(_mm256_castsi256_si128(acc),
                                 _mm256_extracti128_si256(acc, 1));
    px = _mm_packus_epi16(px, px);
    uint32_t q = (uint32_t)_mm_cvtsi128_si32(px);
    memcpy(o0, &q, 4);
    q = (uint32_t)_mm_cvtsi128_si32(_mm_srli_si128(px, 4));
    memcpy(o1, &q, 4);
}

RL_DEFINE_HPASS_ROWS2(rl__hpass_rows2_avx2, hpass_px2_avx2, RL_TARGET_AVX2)

RL_DEFINE_VPASS(rl__vpass_avx2, RL_TARGET_AVX2, __m256i, _mm256, si256)
#endif /* RL_HAVE_AVX2 */
