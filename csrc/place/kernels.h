/*
 * place/kernels.h - the resampler's inner loops, one file per instruction
 * set (internal to the place stage): kernels_c.c (portable, the reference),
 * kernels_sse2.c and kernels_avx2.c. Every kernel computes the same
 * integer sums of the same weights, so every level writes the same bytes.
 *
 * This header also says what the build can compile. Where an instruction
 * set is missing its kernels are stubs that do the portable thing, so the
 * callers need no #ifdef; rl_resample_simd() never picks them anyway.
 */
#ifndef RL_PLACE_KERNELS_H
#define RL_PLACE_KERNELS_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h> /* memcpy, in the kernel templates below */

#include "place/taps.h"
#include "rl.h"

/* SSE2 is part of x86-64, so it needs no flag and no CPU check. AVX2 (and
 * F16C) code is compiled with target attributes, so the build needs no
 * -mavx2, and runs only where rl__cpu_has_avx2() says so. */
#if defined(__SSE2__)
#define RL_HAVE_SSE2 1
#else
#define RL_HAVE_SSE2 0
#endif
#if RL_HAVE_SSE2 && defined(__GNUC__) && \
    (defined(__x86_64__) || defined(__i386__))
#define RL_HAVE_AVX2 1
#define RL_TARGET_AVX2 __attribute__((target("avx2")))
#define RL_TARGET_F16C __attribute__((target("avx,f16c")))
#else
#define RL_HAVE_AVX2 0
#endif

/*
 * Horizontal pass over two source rows (row0, row1: the region's rows,
 * starting at its column x0): out_w RGBX pixels each into out0 and out1
 * (the X byte is 0). Pixels whose taps reach past the region are computed
 * by rl__hpass_px_c(). For an odd row, pass the same row twice.
 */
typedef void rl__hpass2_fn(const rl_pixels *src, const uint8_t *row0,
                           const uint8_t *row1, const rl__taps *tx, int out_w,
                           uint8_t *out0, uint8_t *out1);
rl__hpass2_fn rl__hpass_rows2_c;

/* One horizontal output pixel from n (any, even 0) taps of the RGBX pixels
 * at p: the portable kernel, also the vector ones' edge case. */
void rl__hpass_px_c(const uint8_t *p, const int16_t *w, int n, uint8_t *o);

/*
 * Vertical pass: bytes [k, nbytes) of out are the weighted sum of the same
 * bytes of rows[0 .. n) (n even and positive, weights w). Each kernel does
 * what its vector width allows and returns where it stopped; the portable
 * one does all and returns nbytes.
 */
int rl__vpass_c(const uint8_t *const *rows, const int16_t *w, int n, int k,
                int nbytes, uint8_t *out);

#if RL_HAVE_SSE2
rl__hpass2_fn rl__hpass_rows2_sse2;
int rl__vpass_sse2(const uint8_t *const *rows, const int16_t *w, int n, int k,
                   int nbytes, uint8_t *out);
#else
#define rl__hpass_rows2_sse2 rl__hpass_rows2_c
static inline int rl__vpass_sse2(const uint8_t *const *rows, const int16_t *w,
                                 int n, int k, int nbytes, uint8_t *out)
{
    (void)rows, (void)w, (void)n, (void)nbytes, (void)out;
    return k;
}
#endif

#if RL_HAVE_AVX2
/* Whether this CPU runs the AVX2 kernels and the F16C store. */
bool rl__cpu_has_avx2(void);
rl__hpass2_fn rl__hpass_rows2_avx2;
int rl__vpass_avx2(const uint8_t *const *rows, const int16_t *w, int n, int k,
                   int nbytes, uint8_t *out);
#else
static inline bool rl__cpu_has_avx2(void)
{
    return false;
}
#define rl__hpass_rows2_avx2 rl__hpass_rows2_sse2
#define rl__vpass_avx2 rl__vpass_sse2
#endif

/*
 * The body of an rl__hpass2_fn built on PX2(p0, p1, w, k, o0, o1), which
 * computes one output pixel of each row from k taps. Constant tap counts
 * let the compiler unroll the common cases; ATTR is the target attribute
 * the kernel needs to be inlined.
 */
#define RL_DEFINE_HPASS_ROWS2(NAME, PX2, ATTR)                                \
    ATTR void NAME(const rl_pixels *src, const uint8_t *row0,                 \
                   const uint8_t *row1, const rl__taps *tx, int out_w,        \
                   uint8_t *out0, uint8_t *out1)                              \
    {                                                                         \
        /* Locals: the byte stores below could alias *tx and *src. */         \
        const int *first = tx->first, *count = tx->count;                     \
        const int16_t *weights = tx->w;                                       \
        size_t ksize = (size_t)tx->ksize;                                     \
        int x0 = src->x0, end = x0 + src->w; /* past the region */            \
        for (int x = 0; x < out_w; x++) {                                     \
            const int16_t *w = weights + (size_t)x * ksize;                   \
            size_t off = (size_t)(first[x] - x0) * 4;                         \
            const uint8_t *p0 = row0 + off, *p1 = row1 + off;                 \
            uint8_t *o0 = out0 + 4 * x, *o1 = out1 + 4 * x;                   \
            int n = count[x];                                                 \
            if (n == 0 || first[x] + n > end) {                               \
                /* Empty, or the padding tap would read past the            \
                 * region: the portable kernel sums the real taps. */ \
                int real = end - first[x];                                    \
                rl__hpass_px_c(p0, w, real < n ? real : n, o0);               \
                rl__hpass_px_c(p1, w, real < n ? real : n, o1);               \
                continue;                                                     \
            }                                                                 \
            switch (n) {                                                      \
            case 2:                                                           \
                PX2(p0, p1, w, 2, o0, o1);                                    \
                break;                                                        \
            case 4:                                                           \
                PX2(p0, p1, w, 4, o0, o1);                                    \
                break;                                                        \
            case 6:                                                           \
                PX2(p0, p1, w, 6, o0, o1);                                    \
                break;                                                        \
            default:                                                          \
                PX2(p0, p1, w, n, o0, o1);                                    \
                break;                                                        \
            }                                                                 \
        }                                                                     \
    }

/*
 * The body of a vertical-pass kernel for one vector width: VEC is the
 * integer vector type, MM the intrinsics' prefix (_mm or _mm256) and SI the
 * load/store suffix (si128 or si256). Each step sums sizeof(VEC) bytes of
 * all n rows, two rows per pmaddwd: their bytes are interleaved so that
 * each 32-bit lane is r0[i] * w[j] + r1[i] * w[j + 1]. AVX2's unpacks and
 * packs work within 128-bit lanes, so each half of a 256-bit step is
 * exactly the 128-bit computation and the bytes come out in order.
 */
#define RL_DEFINE_VPASS(NAME, ATTR, VEC, MM, SI)                              \
    ATTR int NAME(const uint8_t *const *rows, const int16_t *w, int n, int k, \
                  int nbytes, uint8_t *out)                                   \
    {                                                                         \
        const int step = (int)sizeof(VEC);                                    \
        VEC zero = MM##_setzero_##SI();                                       \
        for (; k + step <= nbytes; k += step) {                               \
            VEC a0 = MM##_set1_epi32(RL_WEIGHT_HALF), a1 = a0, a2 = a0,       \
                a3 = a0;                                                      \
            for (int j = 0; j < n; j += 2) {                                  \
                VEC r0 = MM##_loadu_##SI((const VEC *)(rows[j] + k));         \
                VEC r1 = MM##_loadu_##SI((const VEC *)(rows[j + 1] + k));     \
                int32_t pair;                                                 \
                memcpy(&pair, w + j, 4);                                      \
                VEC ww = MM##_set1_epi32(pair);                               \
                VEC lo0 = MM##_unpacklo_epi8(r0, zero);                       \
                VEC lo1 = MM##_unpacklo_epi8(r1, zero);                       \
                VEC hi0 = MM##_unpackhi_epi8(r0, zero);                       \
                VEC hi1 = MM##_unpackhi_epi8(r1, zero);                       \
                a0 = MM##_add_epi32(                                          \
                    a0, MM##_madd_epi16(MM##_unpacklo_epi16(lo0, lo1), ww));  \
                a1 = MM##_add_epi32(                                          \
                    a1, MM##_madd_epi16(MM##_unpackhi_epi16(lo0, lo1), ww));  \
                a2 = MM##_add_epi32(                                          \
                    a2, MM##_madd_epi16(MM##_unpacklo_epi16(hi0, hi1), ww));  \
                a3 = MM##_add_epi32(                                          \
                    a3, MM##_madd_epi16(MM##_unpackhi_epi16(hi0, hi1), ww));  \
            }                                                                 \
            VEC p01 = MM##_packs_epi32(MM##_srai_epi32(a0, RL_WEIGHT_BITS),   \
                                       MM##_srai_epi32(a1, RL_WEIGHT_BITS));  \
            VEC p23 = MM##_packs_epi32(MM##_srai_epi32(a2, RL_WEIGHT_BITS),   \
                                       MM##_srai_epi32(a3, RL_WEIGHT_BITS));  \
            MM##_storeu_##SI((VEC *)(out + k), MM##_packus_epi16(p01, p23));  \
        }                                                                     \
        return k;                                                             \
    }

#endif /* RL_PLACE_KERNELS_H */
