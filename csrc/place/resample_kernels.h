/*
 * place/resample_kernels.h - the resampler's inner loops, one file per
 * instruction set (internal to the place stage): kernels_c.c (portable, the
 * reference), kernels_sse2.c and kernels_avx2.c. Every kernel computes the same
 * integer sums of the same weights, so every level writes the same bytes.
 * Weights come in two precisions (taps.h): 14-bit, one 16-bit weight a
 * tap, and exact (Pillow's 22-bit integers), a hi and a lo part a tap,
 * summed in two accumulators. A sum is rounded (half added, arithmetic
 * shift) and clamped to 0..255 after each pass, as Pillow clips: a
 * bicubic's negative lobes can take a sum below 0 or above 255.
 *
 * This header also says what the build can compile. Where an instruction
 * set is missing its kernels are stubs that do the portable thing, so the
 * callers need no #ifdef; rl_simd_level() never picks them anyway.
 */
#ifndef RL_PLACE_RESAMPLE_KERNELS_H
#define RL_PLACE_RESAMPLE_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h> /* memcpy, in the kernel templates below */

#include "place/taps.h"
#include "rl.h"
#include "simd.h" /* RL_HAVE_SSE2, RL_HAVE_AVX2, RL_TARGET_* */

/*
 * The horizontal pass of one image, planned once by rl__hpass_plan() from
 * the x taps and the decoded region, then run over the source rows four at
 * a time. Every pixel of [0, nvec) uses the same k taps (the largest count;
 * the weights past a pixel's own count are zero, so the sums are the same),
 * which spares the vector kernels a per-pixel branch on the count; the
 * pixels from nvec on, whose k-window would pass the region's end, are
 * computed by rl__hpass_tail_c() from their real taps. Output pixel x is
 * written at out_w - 1 - x when flip, so the mirror costs nothing.
 */
typedef struct rl__hpass {
    const int *first, *count; /* the x taps (rl__taps), not owned */
    const int16_t *w, *wlo;   /* wlo: NULL, or exact weights' lo parts */
    size_t ksize;
    int x0, end; /* the region's columns [x0, end) */
    int out_w;
    int k;    /* taps per vector pixel: the largest count (even, may be 0) */
    int nvec; /* pixels [0, nvec) have all k taps inside the region */
    bool flip;
} rl__hpass;

/* Fills *h for resampling src's rows with the x taps tx to out_w pixels,
 * mirrored when flip. h keeps pointers into tx, which must outlive it. */
void rl__hpass_plan(rl__hpass *h, const rl__taps *tx, const rl_pixels *src,
                    int out_w, bool flip);

/*
 * Four rows through the horizontal pass: rows[i] (a source row, starting at
 * the region's column x0) gives out_w RGBX pixels into outs[i] (the X byte
 * is 0). Rows may repeat, and so may outputs for the same row (the caller
 * pads the last call with copies of its last row).
 */
typedef void rl__hpass4_fn(const rl__hpass *h, const uint8_t *const *rows,
                           uint8_t *const *outs);
rl__hpass4_fn rl__hpass_rows4_c;

/* Output pixels [from, out_w) of the four rows, one at a time from their
 * real taps: the portable kernel, and the vector kernels' tail. */
void rl__hpass_tail_c(const rl__hpass *h, const uint8_t *const *rows,
                      uint8_t *const *outs, int from);

/* One horizontal output pixel from n (any, even 0) taps of the RGBX pixels
 * at p, weights w (and wlo, or NULL): the portable kernel, also the vector
 * ones' edge case. */
void rl__hpass_px_c(const uint8_t *p, const int16_t *w, const int16_t *wlo,
                    int n, uint8_t *o);

/*
 * Vertical pass: bytes [k, nbytes) of out are the weighted sum of the same
 * bytes of rows[0 .. n) (n even and positive, weights w, and wlo for exact
 * weights or NULL). Each kernel does what its vector width allows and
 * returns where it stopped; the portable one does all and returns nbytes.
 */
typedef int rl__vpass_fn(const uint8_t *const *rows, const int16_t *w,
                         const int16_t *wlo, int n, int k, int nbytes,
                         uint8_t *out);
rl__vpass_fn rl__vpass_c;

#if RL_HAVE_SSE2
rl__hpass4_fn rl__hpass_rows4_sse2;
rl__vpass_fn rl__vpass_sse2;
#else
#define rl__hpass_rows4_sse2 rl__hpass_rows4_c
static inline int rl__vpass_sse2(const uint8_t *const *rows, const int16_t *w,
                                 const int16_t *wlo, int n, int k, int nbytes,
                                 uint8_t *out)
{
    (void)rows, (void)w, (void)wlo, (void)n, (void)nbytes, (void)out;
    return k;
}
#endif

#if RL_HAVE_AVX2
rl__hpass4_fn rl__hpass_rows4_avx2;
rl__vpass_fn rl__vpass_avx2;
#else
#define rl__hpass_rows4_avx2 rl__hpass_rows4_sse2
#define rl__vpass_avx2 rl__vpass_sse2
#endif

/*
 * An rl__hpass4_fn built on BODY(h, rows, outs, k, exact), which computes
 * output pixels [0, h->nvec) of the four rows from k taps each, with exact
 * (two-part) weights or not. Constants let the compiler unroll the common
 * counts and drop the unused precision; ATTR is the target attribute BODY
 * needs to be inlined. The tail is the portable kernel's.
 */
#define RL_DEFINE_HPASS_ROWS4(NAME, BODY, ATTR)                    \
    ATTR void NAME(const rl__hpass *h, const uint8_t *const *rows, \
                   uint8_t *const *outs)                           \
    {                                                              \
        if (h->wlo != NULL) {                                      \
            BODY(h, rows, outs, h->k, true);                       \
        } else {                                                   \
            switch (h->k) {                                        \
            case 2:                                                \
                BODY(h, rows, outs, 2, false);                     \
                break;                                             \
            case 4:                                                \
                BODY(h, rows, outs, 4, false);                     \
                break;                                             \
            case 6:                                                \
                BODY(h, rows, outs, 6, false);                     \
                break;                                             \
            case 8:                                                \
                BODY(h, rows, outs, 8, false);                     \
                break;                                             \
            default:                                               \
                BODY(h, rows, outs, h->k, false);                  \
                break;                                             \
            }                                                      \
        }                                                          \
        rl__hpass_tail_c(h, rows, outs, h->nvec);                  \
    }

/*
 * A vertical-pass kernel for one vector width: VEC is the integer vector
 * type, MM the intrinsics' prefix (_mm or _mm256) and SI the load/store
 * suffix (si128 or si256). Each step sums sizeof(VEC) bytes of all n rows,
 * two rows per pmaddwd: their bytes are interleaved so that each 32-bit
 * lane is r0[i] * w[j] + r1[i] * w[j + 1]. With exact weights a second
 * pmaddwd of the same pixels weighs them by the lo parts, in a second
 * accumulator that also holds the half; (hi << 11) + lo is Pillow's sum
 * (mod 2^32, which is exact as the sum fits). The arithmetic shift and the
 * saturating packs round down and clamp to 0..255. AVX2's unpacks and
 * packs work within 128-bit lanes, so each half of a 256-bit step is
 * exactly the 128-bit computation and the bytes come out in order.
 */
#define RL_DEFINE_VPASS(NAME, ATTR, VEC, MM, SI)                              \
    static inline ATTR __attribute__((always_inline))                         \
    VEC NAME##_step(const uint8_t *const *rows, const int16_t *w,             \
                    const int16_t *wlo, int n, int k, bool exact)             \
    {                                                                         \
        VEC zero = MM##_setzero_##SI();                                       \
        VEC a0 = MM##_set1_epi32(exact ? 0 : RL_WEIGHT_HALF), a1 = a0,        \
            a2 = a0, a3 = a0;                                                 \
        VEC b0 = MM##_set1_epi32(RL_EXACT_HALF), b1 = b0, b2 = b0, b3 = b0;   \
        for (int j = 0; j < n; j += 2) {                                      \
            VEC r0 = MM##_loadu_##SI((const VEC *)(rows[j] + k));             \
            VEC r1 = MM##_loadu_##SI((const VEC *)(rows[j + 1] + k));         \
            int32_t pair;                                                     \
            memcpy(&pair, w + j, 4);                                          \
            VEC ww = MM##_set1_epi32(pair);                                   \
            VEC lo0 = MM##_unpacklo_epi8(r0, zero);                           \
            VEC lo1 = MM##_unpacklo_epi8(r1, zero);                           \
            VEC hi0 = MM##_unpackhi_epi8(r0, zero);                           \
            VEC hi1 = MM##_unpackhi_epi8(r1, zero);                           \
            VEC p0 = MM##_unpacklo_epi16(lo0, lo1);                           \
            VEC p1 = MM##_unpackhi_epi16(lo0, lo1);                           \
            VEC p2 = MM##_unpacklo_epi16(hi0, hi1);                           \
            VEC p3 = MM##_unpackhi_epi16(hi0, hi1);                           \
            a0 = MM##_add_epi32(a0, MM##_madd_epi16(p0, ww));                 \
            a1 = MM##_add_epi32(a1, MM##_madd_epi16(p1, ww));                 \
            a2 = MM##_add_epi32(a2, MM##_madd_epi16(p2, ww));                 \
            a3 = MM##_add_epi32(a3, MM##_madd_epi16(p3, ww));                 \
            if (exact) {                                                      \
                memcpy(&pair, wlo + j, 4);                                    \
                ww = MM##_set1_epi32(pair);                                   \
                b0 = MM##_add_epi32(b0, MM##_madd_epi16(p0, ww));             \
                b1 = MM##_add_epi32(b1, MM##_madd_epi16(p1, ww));             \
                b2 = MM##_add_epi32(b2, MM##_madd_epi16(p2, ww));             \
                b3 = MM##_add_epi32(b3, MM##_madd_epi16(p3, ww));             \
            }                                                                 \
        }                                                                     \
        if (exact) {                                                          \
            a0 = MM##_srai_epi32(                                             \
                MM##_add_epi32(MM##_slli_epi32(a0, RL_EXACT_SPLIT), b0),      \
                RL_EXACT_BITS);                                               \
            a1 = MM##_srai_epi32(                                             \
                MM##_add_epi32(MM##_slli_epi32(a1, RL_EXACT_SPLIT), b1),      \
                RL_EXACT_BITS);                                               \
            a2 = MM##_srai_epi32(                                             \
                MM##_add_epi32(MM##_slli_epi32(a2, RL_EXACT_SPLIT), b2),      \
                RL_EXACT_BITS);                                               \
            a3 = MM##_srai_epi32(                                             \
                MM##_add_epi32(MM##_slli_epi32(a3, RL_EXACT_SPLIT), b3),      \
                RL_EXACT_BITS);                                               \
        } else {                                                              \
            a0 = MM##_srai_epi32(a0, RL_WEIGHT_BITS);                         \
            a1 = MM##_srai_epi32(a1, RL_WEIGHT_BITS);                         \
            a2 = MM##_srai_epi32(a2, RL_WEIGHT_BITS);                         \
            a3 = MM##_srai_epi32(a3, RL_WEIGHT_BITS);                         \
        }                                                                     \
        return MM##_packus_epi16(MM##_packs_epi32(a0, a1),                    \
                                 MM##_packs_epi32(a2, a3));                   \
    }                                                                         \
    ATTR int NAME(const uint8_t *const *rows, const int16_t *w,               \
                  const int16_t *wlo, int n, int k, int nbytes, uint8_t *out) \
    {                                                                         \
        const int step = (int)sizeof(VEC);                                    \
        for (; wlo != NULL && k + step <= nbytes; k += step) {                \
            MM##_storeu_##SI((VEC *)(out + k),                                \
                             NAME##_step(rows, w, wlo, n, k, true));          \
        }                                                                     \
        for (; wlo == NULL && k + step <= nbytes; k += step) {                \
            MM##_storeu_##SI((VEC *)(out + k),                                \
                             NAME##_step(rows, w, wlo, n, k, false));         \
        }                                                                     \
        return k;                                                             \
    }

#endif /* RL_PLACE_RESAMPLE_KERNELS_H */
