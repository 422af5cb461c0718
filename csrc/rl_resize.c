/*
 * rl_resize.c - separable antialiased bilinear resampling.
 *
 * DESIGN: for each output column (then row) a short list of source taps and
 * their weights is computed once per image: the triangle filter is
 * stretched by the downscale factor so every source pixel contributes
 * (antialiasing), the window is clipped to the image and the weights are
 * renormalised, exactly the arithmetic torchvision's antialiased resize
 * specifies. The horizontal pass runs first, over only the rows the vertical
 * pass needs, and rounds to 8 bits as torchvision's uint8 kernel does; the
 * vertical pass then writes each output row into the batch slot with
 * arbitrary strides, which is where NCHW/NHWC, the flip and the float
 * conversion happen, while the row is still in L1.
 *
 * Speed: weights are 14-bit integers, so a pixel times a weight fits 16 bits
 * of headroom and SSE2's pmaddwd multiplies and adds two taps of eight
 * 16-bit lanes in one instruction. Pixels are 4 bytes (RGBX), so one output
 * pixel of the horizontal pass is one 4 x 32-bit accumulator; the vertical
 * pass is a plain weighted sum of whole rows, 16 bytes at a time. Taps are
 * processed in pairs; an odd last tap is paired with a zero weight, and a
 * window that would read past the decoded region falls back to the scalar
 * code, which computes the same sums.
 *
 * Where the CPU has AVX2 (checked once at run time; the build needs no
 * flag), the horizontal pass handles two rows' tap pairs in one 256-bit
 * multiply-add and the vertical pass 32 bytes at a time. Every level does
 * the same integer arithmetic, so C, SSE2 and AVX2 give identical bytes;
 * rl_resample_set_simd() lets the tests compare them.
 */
#define _GNU_SOURCE
#include "rl_resize.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#define RL_SSE2 1
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <cpuid.h>
#include <immintrin.h>
#define RL_AVX2 1
#define RL_TARGET_AVX2 __attribute__((target("avx2")))
#define RL_TARGET_F16C __attribute__((target("avx,f16c")))
#endif
#endif

#define PREC 14
#define ROUND (1 << (PREC - 1))

/* ---- SIMD level: the best the build and the CPU allow, capped by
 * RINGLOADER_SIMD=c|sse2 (read once) or rl_resample_set_simd(). ---- */

static pthread_once_t simd_once = PTHREAD_ONCE_INIT;
static int simd_best = RL_SIMD_C; /* what this build and CPU can run */
static int simd_level = RL_SIMD_C; /* what rl_resample uses */

static void simd_init(void)
{
#ifdef RL_SSE2
    simd_best = RL_SIMD_SSE2;
#endif
#ifdef RL_AVX2
    /* The AVX2 level also converts to float16 with F16C, which every CPU
     * with AVX2 has; both are checked. */
    __builtin_cpu_init();
    unsigned a, b, c, d;
    bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
    if (__builtin_cpu_supports("avx2") && f16c) {
        simd_best = RL_SIMD_AVX2;
    }
#endif
    int level = simd_best;
    const char *env = getenv("RINGLOADER_SIMD");
    if (env != NULL && strcmp(env, "c") == 0) {
        level = RL_SIMD_C;
    } else if (env != NULL && strcmp(env, "sse2") == 0 &&
               level > RL_SIMD_SSE2) {
        level = RL_SIMD_SSE2;
    }
    __atomic_store_n(&simd_level, level, __ATOMIC_RELAXED);
}

static int simd_get(void)
{
    pthread_once(&simd_once, simd_init);
    return __atomic_load_n(&simd_level, __ATOMIC_RELAXED);
}

rl_simd rl_resample_simd(void)
{
    return (rl_simd)simd_get();
}

rl_simd rl_resample_set_simd(rl_simd level)
{
    pthread_once(&simd_once, simd_init);
    int l = (int)level < simd_best ? (int)level : simd_best;
    __atomic_store_n(&simd_level, l, __ATOMIC_RELAXED);
    return (rl_simd)l;
}

const char *rl_simd_name(rl_simd level)
{
    return level == RL_SIMD_AVX2 ? "avx2" : level == RL_SIMD_SSE2 ? "sse2" : "c";
}

typedef struct taps {
    int *first;  /* first source pixel of each output pixel */
    int *count;  /* taps of each output pixel, rounded up to even */
    int16_t *w;  /* ksize weights per output pixel, zero-padded */
    int ksize;   /* even */
} taps;

static double triangle(double x)
{
    x = fabs(x);
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* The window of output pixel i, clipped to the image. */
static void window(double b0, double scale, double support, int i,
                   double *center, int *lo, int *hi, int full)
{
    *center = b0 + (i + 0.5) * scale;
    int a = (int)(*center - support + 0.5);
    int b = (int)(*center + support + 0.5);
    *lo = a < 0 ? 0 : a;
    *hi = b > full ? full : b;
}

void rl_resample_span(int full, double b0, double bsize, int out, int *lo,
                      int *hi)
{
    double scale = bsize / out;
    double support = scale > 1.0 ? scale : 1.0;
    double c;
    int l0, h0, l1, h1;
    window(b0, scale, support, 0, &c, &l0, &h0, full);
    window(b0, scale, support, out - 1, &c, &l1, &h1, full);
    *lo = l0 < l1 ? l0 : l1;
    *hi = h0 > h1 ? h0 : h1;
    if (*hi <= *lo) {
        /* A degenerate box: read one pixel so callers never get empty
         * regions; the weights below still come out right. */
        *lo = *lo < full ? *lo : full - 1;
        *hi = *lo + 1;
    }
}

static void taps_free(taps *t)
{
    free(t->first);
    free(t->count);
    free(t->w);
}

static int taps_make(taps *t, int full, double b0, double bsize, int out)
{
    double scale = bsize / out;
    double filterscale = scale > 1.0 ? scale : 1.0;
    double support = filterscale; /* the triangle's radius is 1 */
    int kmax = (int)ceil(support) * 2 + 1;
    t->ksize = (kmax + 1) & ~1;
    t->first = malloc(sizeof(int) * (size_t)out);
    t->count = malloc(sizeof(int) * (size_t)out);
    t->w = calloc((size_t)out * (size_t)t->ksize, sizeof(int16_t));
    double *k = malloc(sizeof(double) * (size_t)t->ksize);
    if (!t->first || !t->count || !t->w || !k) {
        free(k);
        taps_free(t);
        return -ENOMEM;
    }
    for (int i = 0; i < out; i++) {
        double center;
        int lo, hi;
        window(b0, scale, support, i, &center, &lo, &hi, full);
        int n = hi - lo;
        if (n > kmax) {
            n = kmax;
        }
        double sum = 0.0;
        for (int j = 0; j < n; j++) {
            k[j] = triangle((j + lo - center + 0.5) / filterscale);
            sum += k[j];
        }
        int16_t *wi = t->w + (size_t)i * (size_t)t->ksize;
        for (int j = 0; j < n && sum > 0.0; j++) {
            wi[j] = (int16_t)lround(k[j] / sum * (1 << PREC));
        }
        t->first[i] = lo;
        t->count[i] = n > 0 && sum > 0.0 ? (n + 1) & ~1 : 0;
    }
    free(k);
    return 0;
}

static inline uint8_t clip8(int32_t v)
{
    v >>= PREC;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* ---- horizontal pass: one source row -> out_w RGBX pixels ---- */

static void hpass_scalar_px(const uint8_t *p, const int16_t *w, int n,
                            uint8_t *o)
{
    int32_t a0 = ROUND, a1 = ROUND, a2 = ROUND;
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

#ifdef RL_SSE2
/* One output pixel from K (even, a compile-time constant after inlining)
 * taps starting at p. */
static inline __attribute__((always_inline)) void
hpass_px_sse2(const uint8_t *p, const int16_t *w, int k, uint8_t *o)
{
    __m128i zero = _mm_setzero_si128();
    __m128i acc = _mm_set1_epi32(ROUND);
    for (int j = 0; j < k; j += 2) {
        __m128i v = _mm_loadl_epi64((const __m128i *)(p + 4 * j));
        v = _mm_unpacklo_epi8(v, zero);
        v = _mm_unpacklo_epi16(v, _mm_srli_si128(v, 8));
        int32_t pair;
        memcpy(&pair, w + j, 4);
        acc = _mm_add_epi32(acc, _mm_madd_epi16(v, _mm_set1_epi32(pair)));
    }
    acc = _mm_srai_epi32(acc, PREC);
    acc = _mm_packs_epi32(acc, acc);
    acc = _mm_packus_epi16(acc, acc);
    uint32_t px = (uint32_t)_mm_cvtsi128_si32(acc);
    memcpy(o, &px, 4);
}


/* The same for two rows at once: the window and weights are shared, so
 * their loads and the loop are paid once for two output pixels. */
static inline __attribute__((always_inline)) void
hpass_px2_sse2(const uint8_t *p0, const uint8_t *p1, const int16_t *w, int k,
               uint8_t *o0, uint8_t *o1)
{
    __m128i zero = _mm_setzero_si128();
    __m128i a0 = _mm_set1_epi32(ROUND), a1 = a0;
    for (int j = 0; j < k; j += 2) {
        int32_t pair;
        memcpy(&pair, w + j, 4);
        __m128i ww = _mm_set1_epi32(pair);
        __m128i v0 = _mm_loadl_epi64((const __m128i *)(p0 + 4 * j));
        __m128i v1 = _mm_loadl_epi64((const __m128i *)(p1 + 4 * j));
        v0 = _mm_unpacklo_epi8(v0, zero);
        v1 = _mm_unpacklo_epi8(v1, zero);
        v0 = _mm_unpacklo_epi16(v0, _mm_srli_si128(v0, 8));
        v1 = _mm_unpacklo_epi16(v1, _mm_srli_si128(v1, 8));
        a0 = _mm_add_epi32(a0, _mm_madd_epi16(v0, ww));
        a1 = _mm_add_epi32(a1, _mm_madd_epi16(v1, ww));
    }
    __m128i px = _mm_packs_epi32(_mm_srai_epi32(a0, PREC),
                                 _mm_srai_epi32(a1, PREC));
    px = _mm_packus_epi16(px, px);
    uint32_t q0 = (uint32_t)_mm_cvtsi128_si32(px);
    uint32_t q1 = (uint32_t)_mm_cvtsi128_si32(_mm_srli_si128(px, 4));
    memcpy(o0, &q0, 4);
    memcpy(o1, &q1, 4);
}

/*
 * The horizontal pass over two rows with a two-row pixel kernel PX2.
 * Constant tap counts let the compiler unroll the common cases.
 */
#define RL_DEFINE_HPASS_ROWS2(NAME, PX2, ATTR)                                 \
    static ATTR void NAME(const rl_pixels *src, const uint8_t *row0,           \
                          const uint8_t *row1, const taps *tx, int out_w,      \
                          uint8_t *out0, uint8_t *out1)                        \
    {                                                                          \
        int end = src->x0 + src->w;                                            \
        for (int x = 0; x < out_w; x++) {                                      \
            const int16_t *w = tx->w + (size_t)x * (size_t)tx->ksize;          \
            size_t off = (size_t)(tx->first[x] - src->x0) * 4;                 \
            const uint8_t *p0 = row0 + off, *p1 = row1 + off;                  \
            uint8_t *o0 = out0 + 4 * x, *o1 = out1 + 4 * x;                    \
            int n = tx->count[x];                                              \
            if (n == 0 || tx->first[x] + n > end) {                            \
                int real = end - tx->first[x];                                 \
                hpass_scalar_px(p0, w, real < n ? real : n, o0);               \
                hpass_scalar_px(p1, w, real < n ? real : n, o1);               \
                continue;                                                      \
            }                                                                  \
            switch (n) {                                                       \
            case 2:                                                            \
                PX2(p0, p1, w, 2, o0, o1);                                     \
                break;                                                         \
            case 4:                                                            \
                PX2(p0, p1, w, 4, o0, o1);                                     \
                break;                                                         \
            case 6:                                                            \
                PX2(p0, p1, w, 6, o0, o1);                                     \
                break;                                                         \
            default:                                                           \
                PX2(p0, p1, w, n, o0, o1);                                     \
                break;                                                         \
            }                                                                  \
        }                                                                      \
    }

RL_DEFINE_HPASS_ROWS2(hpass_rows2_sse2, hpass_px2_sse2, )

#ifdef RL_AVX2
/*
 * Two rows' tap pair in one 256-bit register: the two 8-byte loads (two
 * RGBX pixels of each row) are shuffled to R0 R1 G0 G1 B0 B1 X0 X1 and
 * widened to 16 bits, so one pmaddwd weighs the pair for both rows.
 */
static inline RL_TARGET_AVX2 __attribute__((always_inline)) void
hpass_px2_avx2(const uint8_t *p0, const uint8_t *p1, const int16_t *w, int k,
               uint8_t *o0, uint8_t *o1)
{
    const __m128i pairs =
        _mm_setr_epi8(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
    __m256i acc = _mm256_set1_epi32(ROUND);
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
    acc = _mm256_srai_epi32(acc, PREC);
    __m128i px = _mm_packs_epi32(_mm256_castsi256_si128(acc),
                                 _mm256_extracti128_si256(acc, 1));
    px = _mm_packus_epi16(px, px);
    uint32_t q = (uint32_t)_mm_cvtsi128_si32(px);
    memcpy(o0, &q, 4);
    q = (uint32_t)_mm_cvtsi128_si32(_mm_srli_si128(px, 4));
    memcpy(o1, &q, 4);
}

RL_DEFINE_HPASS_ROWS2(hpass_rows2_avx2, hpass_px2_avx2, RL_TARGET_AVX2)
#endif
#endif

static void hpass_row(const rl_pixels *src, const uint8_t *row,
                      const taps *tx, int out_w, uint8_t *out, int simd)
{
    int end = src->x0 + src->w; /* first column past the region */
    for (int x = 0; x < out_w; x++) {
        const int16_t *w = tx->w + (size_t)x * (size_t)tx->ksize;
        const uint8_t *p = row + (size_t)(tx->first[x] - src->x0) * 4;
        int n = tx->count[x];
        if (n == 0 || tx->first[x] + n > end) {
            /* Empty, or the padded pair would read past the region. */
            int real = end - tx->first[x];
            hpass_scalar_px(p, w, real < n ? real : n, out + 4 * x);
            continue;
        }
#ifdef RL_SSE2
        if (simd == RL_SIMD_C) {
            hpass_scalar_px(p, w, n, out + 4 * x);
            continue;
        }
        /* Constant tap counts let the compiler unroll the common cases. */
        switch (n) {
        case 2:
            hpass_px_sse2(p, w, 2, out + 4 * x);
            break;
        case 4:
            hpass_px_sse2(p, w, 4, out + 4 * x);
            break;
        case 6:
            hpass_px_sse2(p, w, 6, out + 4 * x);
            break;
        default:
            hpass_px_sse2(p, w, n, out + 4 * x);
            break;
        }
#else
        (void)simd;
        hpass_scalar_px(p, w, n, out + 4 * x);
#endif
    }
}

/* ---- vertical pass: n rows -> one row of nbytes ---- */

/* Bytes [k, nbytes) of the vertical pass, 16 at a time where simd allows. */
static void vpass_from(const uint8_t *const *rows, const int16_t *w, int n,
                       int k, int nbytes, uint8_t *out, int simd)
{
#ifdef RL_SSE2
    __m128i zero = _mm_setzero_si128();
    for (; simd != RL_SIMD_C && k + 16 <= nbytes; k += 16) {
        __m128i a0 = _mm_set1_epi32(ROUND), a1 = a0, a2 = a0, a3 = a0;
        for (int j = 0; j < n; j += 2) {
            __m128i r0 = _mm_loadu_si128((const __m128i *)(rows[j] + k));
            __m128i r1 = _mm_loadu_si128((const __m128i *)(rows[j + 1] + k));
            int32_t pair;
            memcpy(&pair, w + j, 4);
            __m128i ww = _mm_set1_epi32(pair);
            __m128i lo0 = _mm_unpacklo_epi8(r0, zero);
            __m128i lo1 = _mm_unpacklo_epi8(r1, zero);
            __m128i hi0 = _mm_unpackhi_epi8(r0, zero);
            __m128i hi1 = _mm_unpackhi_epi8(r1, zero);
            a0 = _mm_add_epi32(
                a0, _mm_madd_epi16(_mm_unpacklo_epi16(lo0, lo1), ww));
            a1 = _mm_add_epi32(
                a1, _mm_madd_epi16(_mm_unpackhi_epi16(lo0, lo1), ww));
            a2 = _mm_add_epi32(
                a2, _mm_madd_epi16(_mm_unpacklo_epi16(hi0, hi1), ww));
            a3 = _mm_add_epi32(
                a3, _mm_madd_epi16(_mm_unpackhi_epi16(hi0, hi1), ww));
        }
        __m128i p01 = _mm_packs_epi32(_mm_srai_epi32(a0, PREC),
                                      _mm_srai_epi32(a1, PREC));
        __m128i p23 = _mm_packs_epi32(_mm_srai_epi32(a2, PREC),
                                      _mm_srai_epi32(a3, PREC));
        _mm_storeu_si128((__m128i *)(out + k), _mm_packus_epi16(p01, p23));
    }
#else
    (void)simd;
#endif
    for (; k < nbytes; k++) {
        int32_t a = ROUND;
        for (int j = 0; j < n; j++) {
            a += rows[j][k] * w[j];
        }
        out[k] = clip8(a);
    }
}

#ifdef RL_AVX2
/* The same sums 32 bytes at a time; the unpacks and packs all stay within
 * 128-bit lanes, so each lane is exactly the SSE2 computation. */
static RL_TARGET_AVX2 int vpass_avx2(const uint8_t *const *rows,
                                     const int16_t *w, int n, int nbytes,
                                     uint8_t *out)
{
    __m256i zero = _mm256_setzero_si256();
    int k = 0;
    for (; k + 32 <= nbytes; k += 32) {
        __m256i a0 = _mm256_set1_epi32(ROUND), a1 = a0, a2 = a0, a3 = a0;
        for (int j = 0; j < n; j += 2) {
            __m256i r0 = _mm256_loadu_si256((const __m256i *)(rows[j] + k));
            __m256i r1 =
                _mm256_loadu_si256((const __m256i *)(rows[j + 1] + k));
            int32_t pair;
            memcpy(&pair, w + j, 4);
            __m256i ww = _mm256_set1_epi32(pair);
            __m256i lo0 = _mm256_unpacklo_epi8(r0, zero);
            __m256i lo1 = _mm256_unpacklo_epi8(r1, zero);
            __m256i hi0 = _mm256_unpackhi_epi8(r0, zero);
            __m256i hi1 = _mm256_unpackhi_epi8(r1, zero);
            a0 = _mm256_add_epi32(
                a0, _mm256_madd_epi16(_mm256_unpacklo_epi16(lo0, lo1), ww));
            a1 = _mm256_add_epi32(
                a1, _mm256_madd_epi16(_mm256_unpackhi_epi16(lo0, lo1), ww));
            a2 = _mm256_add_epi32(
                a2, _mm256_madd_epi16(_mm256_unpacklo_epi16(hi0, hi1), ww));
            a3 = _mm256_add_epi32(
                a3, _mm256_madd_epi16(_mm256_unpackhi_epi16(hi0, hi1), ww));
        }
        __m256i p01 = _mm256_packs_epi32(_mm256_srai_epi32(a0, PREC),
                                         _mm256_srai_epi32(a1, PREC));
        __m256i p23 = _mm256_packs_epi32(_mm256_srai_epi32(a2, PREC),
                                         _mm256_srai_epi32(a3, PREC));
        _mm256_storeu_si256((__m256i *)(out + k),
                            _mm256_packus_epi16(p01, p23));
    }
    return k;
}
#endif

/* n rows (n even, padded with zero weights) -> one row of nbytes. */
static void vpass_row(const uint8_t *const *rows, const int16_t *w, int n,
                      int nbytes, uint8_t *out, int simd)
{
    if (n == 0) {
        memset(out, 0, (size_t)nbytes);
        return;
    }
    int k = 0;
#ifdef RL_AVX2
    if (simd == RL_SIMD_AVX2) {
        k = vpass_avx2(rows, w, n, nbytes, out);
    }
#endif
    vpass_from(rows, w, n, k, nbytes, out, simd);
}

/* ---- output ---- */

size_t rl_dtype_size(rl_dtype dtype)
{
    return dtype == RL_DTYPE_U8 ? 1 : dtype == RL_DTYPE_F32 ? 4 : 2;
}

uint8_t *rl_dst_at(const rl_dst *dst, int x, int y)
{
    ptrdiff_t e = y * dst->row_stride + x * dst->px_stride;
    return dst->data + e * (ptrdiff_t)rl_dtype_size(dst->dtype);
}

/* IEEE binary16 from binary32, rounding to nearest even. */
static uint16_t f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t mag = x & 0x7FFFFFFFu;
    if (mag >= 0x7F800000u) { /* inf or nan */
        return (uint16_t)(sign | 0x7C00u | (mag > 0x7F800000u ? 0x200u : 0));
    }
    if (mag >= 0x477FF000u) { /* rounds to >= 65520: overflow */
        return (uint16_t)(sign | 0x7C00u);
    }
    if (mag < 0x38800000u) { /* below 2^-14: subnormal or zero */
        if (mag < 0x33000000u) {
            return (uint16_t)sign;
        }
        uint32_t mant = (mag & 0x7FFFFFu) | 0x800000u;
        int shift = 126 - (int)(mag >> 23); /* 14..24 */
        uint32_t half = mant >> shift;
        uint32_t rest = mant & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rest > mid || (rest == mid && (half & 1u))) {
            half++;
        }
        return (uint16_t)(sign | half);
    }
    uint32_t h = ((mag >> 13) - (112u << 10));
    uint32_t rest = mag & 0x1FFFu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) {
        h++;
    }
    return (uint16_t)(sign | h);
}

/* bfloat16 from binary32, rounding to nearest even (no NaN here). */
static uint16_t f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    x += 0x7FFFu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

#ifdef RL_SSE2
/* Four 32-bit lanes holding 16-bit values -> four uint16 in the low half. */
static inline __m128i pack_u16x4(__m128i v)
{
    v = _mm_srai_epi32(_mm_slli_epi32(v, 16), 16); /* packs keeps the bits */
    return _mm_packs_epi32(v, v);
}

/* f32_to_bf16 on four lanes. */
static inline __m128i bf16x4(__m128 f)
{
    __m128i x = _mm_castps_si128(f);
    __m128i odd = _mm_and_si128(_mm_srli_epi32(x, 16), _mm_set1_epi32(1));
    x = _mm_add_epi32(x, _mm_add_epi32(_mm_set1_epi32(0x7FFF), odd));
    return pack_u16x4(_mm_srli_epi32(x, 16));
}

/*
 * f32_to_f16 on four lanes, for the common case only: false (and nothing
 * written) when a lane is zero, subnormal, overflows or is not finite, and
 * the caller then uses f32_to_f16. Adding 0xFFF plus the kept mantissa's
 * lowest bit before the shift is round-to-nearest-even; a carry out of the
 * mantissa correctly bumps the exponent.
 */
static inline bool f16x4(__m128 f, __m128i *out)
{
    __m128i x = _mm_castps_si128(f);
    __m128i sign =
        _mm_and_si128(_mm_srli_epi32(x, 16), _mm_set1_epi32(0x8000));
    __m128i mag = _mm_and_si128(x, _mm_set1_epi32(0x7FFFFFFF));
    __m128i off =
        _mm_or_si128(_mm_cmplt_epi32(mag, _mm_set1_epi32(0x38800000)),
                     _mm_cmpgt_epi32(mag, _mm_set1_epi32(0x477FEFFF)));
    if (_mm_movemask_epi8(off) != 0) {
        return false;
    }
    __m128i odd = _mm_and_si128(_mm_srli_epi32(mag, 13), _mm_set1_epi32(1));
    __m128i h = _mm_add_epi32(mag, _mm_add_epi32(_mm_set1_epi32(0xFFF), odd));
    h = _mm_sub_epi32(_mm_srli_epi32(h, 13), _mm_set1_epi32(112 << 10));
    *out = pack_u16x4(_mm_or_si128(h, sign));
    return true;
}

/* Stores the four values f as dtype at p: four consecutive elements. */
static inline void store4(rl_dtype dtype, uint8_t *p, __m128 f)
{
    __m128i h;
    if (dtype == RL_DTYPE_F32) {
        _mm_storeu_ps((float *)(void *)p, f);
        return;
    }
    if (dtype == RL_DTYPE_BF16) {
        h = bf16x4(f);
    } else if (!f16x4(f, &h)) {
        float v[4];
        _mm_storeu_ps(v, f);
        for (int i = 0; i < 4; i++) {
            uint16_t q = f32_to_f16(v[i]);
            memcpy(p + 2 * i, &q, 2);
        }
        return;
    }
    _mm_storel_epi64((__m128i *)(void *)p, h);
}

/*
 * The float outputs of store_row, four values per step: in NCHW four
 * pixels of one channel; in NHWC one pixel's R, G, B and a fourth value
 * that the next pixel's store overwrites (so the row's last pixel is left
 * to the caller). Returns how many pixels were written.
 */
static int store_float_sse2(const rl_dst *dst, const uint8_t *px, int w,
                            uint8_t *o)
{
    ptrdiff_t ps = dst->px_stride, cs = dst->ch_stride;
    size_t es = rl_dtype_size(dst->dtype);
    __m128i zero = _mm_setzero_si128();
    if (ps == 1) {
        __m128i lo = _mm_set1_epi32(0xFF);
        int x = 0;
        for (int c = 0; c < 3; c++) {
            __m128 vm = _mm_set1_ps(dst->mul[c]), va = _mm_set1_ps(dst->add[c]);
            uint8_t *oc = o + (size_t)c * (size_t)cs * es;
            for (x = 0; x + 4 <= w; x += 4) {
                __m128i v = _mm_loadu_si128((const __m128i *)(px + 4 * x));
                v = _mm_and_si128(_mm_srli_epi32(v, 8 * c), lo);
                store4(dst->dtype, oc + (size_t)x * es,
                       _mm_add_ps(_mm_mul_ps(_mm_cvtepi32_ps(v), vm), va));
            }
        }
        return x;
    }
    if (ps != 3 || cs != 1) {
        return 0;
    }
    /* The fourth lane (X) maps to 1.0, a value every dtype stores without
     * the scalar fallback; it is overwritten anyway. */
    __m128 vm = _mm_setr_ps(dst->mul[0], dst->mul[1], dst->mul[2], 0.0f);
    __m128 va = _mm_setr_ps(dst->add[0], dst->add[1], dst->add[2], 1.0f);
    int x = 0;
    for (; x + 5 <= w; x += 4) { /* 4 pixels, and never the last one */
        __m128i v = _mm_loadu_si128((const __m128i *)(px + 4 * x));
        __m128i v01 = _mm_unpacklo_epi8(v, zero), v23 = _mm_unpackhi_epi8(v, zero);
        __m128i p[4] = {_mm_unpacklo_epi16(v01, zero),
                        _mm_unpackhi_epi16(v01, zero),
                        _mm_unpacklo_epi16(v23, zero),
                        _mm_unpackhi_epi16(v23, zero)};
        for (int i = 0; i < 4; i++) {
            store4(dst->dtype, o + (size_t)(3 * (x + i)) * es,
                   _mm_add_ps(_mm_mul_ps(_mm_cvtepi32_ps(p[i]), vm), va));
        }
    }
    return x;
}
#endif

/* The float outputs (dtype f32, f16 or bf16) of one row: px -> o. */
static void store_float(const rl_dst *dst, const uint8_t *px, int w,
                        uint8_t *o, int simd)
{
    ptrdiff_t ps = dst->px_stride, cs = dst->ch_stride;
    int x0 = 0;
#ifdef RL_SSE2
    if (simd != RL_SIMD_C) {
        x0 = store_float_sse2(dst, px, w, o);
    }
#else
    (void)simd;
#endif
    /* The pixels the vector code left (or all of them), one at a time. */
    for (int c = 0; c < 3; c++) {
        float mul = dst->mul[c], add = dst->add[c];
        uint8_t *oc = o + (ptrdiff_t)c * cs * (ptrdiff_t)rl_dtype_size(dst->dtype);
        for (int x = x0; x < w; x++) {
            float v = (float)px[4 * x + c] * mul + add;
            if (dst->dtype == RL_DTYPE_F32) {
                ((float *)(void *)oc)[x * ps] = v;
            } else if (dst->dtype == RL_DTYPE_BF16) {
                ((uint16_t *)(void *)oc)[x * ps] = f32_to_bf16(v);
            } else {
                ((uint16_t *)(void *)oc)[x * ps] = f32_to_f16(v);
            }
        }
    }
}


#ifdef RL_AVX2
/* n float32 -> float16 with the F16C instruction, rounding to nearest even
 * exactly as f32_to_f16 does. */
static RL_TARGET_F16C void f32_to_f16_f16c(const float *in, uint16_t *out,
                                           int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i),
                                    _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128((__m128i *)(void *)(out + i), h);
    }
    for (; i < n; i++) {
        out[i] = f32_to_f16(in[i]);
    }
}

/*
 * float16 output through F16C: chunks of the row are first stored as
 * float32 (same layout) in a buffer on the stack, then converted in one
 * pass. Cheaper than the integer rounding, above all in NHWC.
 */
static void store_f16_f16c(const rl_dst *dst, const uint8_t *px, int w,
                           uint8_t *o)
{
    enum { CHUNK = 64 };
    float buf[3 * CHUNK];
    bool nhwc = dst->px_stride == 3 && dst->ch_stride == 1;
    for (int x = 0; x < w; x += CHUNK) {
        int n = w - x < CHUNK ? w - x : CHUNK;
        rl_dst f = *dst;
        f.dtype = RL_DTYPE_F32;
        f.px_stride = nhwc ? 3 : 1;
        f.ch_stride = nhwc ? 1 : n;
        store_float(&f, px + 4 * (size_t)x, n, (uint8_t *)buf, RL_SIMD_SSE2);
        uint16_t *h = (uint16_t *)(void *)o;
        if (nhwc) {
            f32_to_f16_f16c(buf, h + 3 * (size_t)x, 3 * n);
            continue;
        }
        for (int c = 0; c < 3; c++) {
            f32_to_f16_f16c(buf + c * n,
                            h + c * dst->ch_stride + x * dst->px_stride, n);
        }
    }
}
#endif

/*
 * Writes one output row of w RGBX pixels (px, 4-byte aligned scratch that
 * this may reorder) to row y of dst starting at column 0, mirrored when
 * flip, converted to dst's dtype.
 */
static void store_row(const rl_dst *dst, uint8_t *px, int w, int y,
                      bool flip, int simd)
{
    uint8_t *o = rl_dst_at(dst, 0, y);
    ptrdiff_t ps = dst->px_stride, cs = dst->ch_stride;
    if (flip) {
        /* Mirror the row in place (whole 32-bit pixels): the stores below
         * then always run forwards. The row is scratch, so this is safe. */
        uint32_t *q = (uint32_t *)(void *)px;
        for (int a = 0, b = w - 1; a < b; a++, b--) {
            uint32_t t = q[a];
            q[a] = q[b];
            q[b] = t;
        }
    }
    if (dst->dtype == RL_DTYPE_U8) {
        if (ps == 3 && cs == 1) { /* NHWC, not flipped: pack RGBX -> RGB */
            for (int x = 0; x < w; x++) {
                memcpy(o + 3 * x, px + 4 * x, 3);
            }
            return;
        }
        int x0 = 0;
#ifdef RL_SSE2
        if (ps == 1 && simd != RL_SIMD_C) { /* NCHW: 16 RGBX -> 3 planes */
            __m128i lo = _mm_set1_epi32(0xFF);
            for (; x0 + 16 <= w; x0 += 16) {
                __m128i v[4];
                for (int i = 0; i < 4; i++) {
                    v[i] = _mm_loadu_si128(
                        (const __m128i *)(px + 4 * (x0 + 4 * i)));
                }
                for (int c = 0; c < 3; c++) {
                    __m128i a = _mm_and_si128(_mm_srli_epi32(v[0], 8 * c), lo);
                    __m128i b = _mm_and_si128(_mm_srli_epi32(v[1], 8 * c), lo);
                    __m128i d = _mm_and_si128(_mm_srli_epi32(v[2], 8 * c), lo);
                    __m128i e = _mm_and_si128(_mm_srli_epi32(v[3], 8 * c), lo);
                    __m128i r = _mm_packus_epi16(_mm_packs_epi32(a, b),
                                                 _mm_packs_epi32(d, e));
                    _mm_storeu_si128((__m128i *)(o + c * cs + x0), r);
                }
            }
        }
#endif
        for (int c = 0; c < 3; c++) {
            uint8_t *oc = o + c * cs;
            for (int x = x0; x < w; x++) {
                oc[x * ps] = px[4 * x + c];
            }
        }
        return;
    }
#ifdef RL_AVX2
    if (dst->dtype == RL_DTYPE_F16 && simd == RL_SIMD_AVX2 &&
        (ps == 1 || (ps == 3 && cs == 1))) {
        store_f16_f16c(dst, px, w, o);
        return;
    }
#endif
    store_float(dst, px, w, o, simd);
}

int rl_resample(const rl_pixels *src, double bx, double by, double bw,
                double bh, int out_w, int out_h, bool flip,
                const rl_dst *dst)
{
    taps tx = {0}, ty = {0};
    if (taps_make(&tx, src->full_w, bx, bw, out_w) != 0 ||
        taps_make(&ty, src->full_h, by, bh, out_h) != 0) {
        taps_free(&tx);
        taps_free(&ty);
        return -ENOMEM;
    }
    /* Rows of the source the vertical pass reads, all inside src. */
    int ylo, yhi;
    rl_resample_span(src->full_h, by, bh, out_h, &ylo, &yhi);
    int rows = yhi - ylo;
    size_t hstride = (size_t)out_w * 4;
    uint8_t *tmp = malloc(hstride * (size_t)(rows + 1));
    const uint8_t **rowp = malloc(sizeof(*rowp) * (size_t)ty.ksize);
    if (tmp == NULL || rowp == NULL) {
        free(tmp);
        free(rowp);
        taps_free(&tx);
        taps_free(&ty);
        return -ENOMEM;
    }
    uint8_t *line = tmp + hstride * (size_t)rows; /* one output row */

    int simd = simd_get();
    int r = 0;
#ifdef RL_SSE2
    for (; simd != RL_SIMD_C && r + 2 <= rows; r += 2) {
        const uint8_t *row =
            src->data + (size_t)(ylo + r - src->y0) * src->stride;
        uint8_t *o0 = tmp + (size_t)r * hstride, *o1 = o0 + hstride;
#ifdef RL_AVX2
        if (simd == RL_SIMD_AVX2) {
            hpass_rows2_avx2(src, row, row + src->stride, &tx, out_w, o0, o1);
            continue;
        }
#endif
        hpass_rows2_sse2(src, row, row + src->stride, &tx, out_w, o0, o1);
    }
#endif
    for (; r < rows; r++) {
        const uint8_t *row =
            src->data + (size_t)(ylo + r - src->y0) * src->stride;
        hpass_row(src, row, &tx, out_w, tmp + (size_t)r * hstride, simd);
    }
    for (int y = 0; y < out_h; y++) {
        int n = ty.count[y];
        for (int j = 0; j < n; j++) {
            /* A padding tap (zero weight) repeats the last real row. */
            int r = ty.first[y] - ylo + j;
            rowp[j] = tmp + (size_t)(r < rows ? r : rows - 1) * hstride;
        }
        vpass_row(rowp, ty.w + (size_t)y * (size_t)ty.ksize, n,
                  (int)hstride, line, simd);
        store_row(dst, line, out_w, y, flip, simd);
    }
    free(tmp);
    free(rowp);
    taps_free(&tx);
    taps_free(&ty);
    return 0;
}

void rl_fill_zero(const rl_dst *dst, int x, int y, int w, int h)
{
    if (w <= 0 || h <= 0) {
        return;
    }
    /* Black RGBX pixels, a chunk at a time; store_row reads but does not
     * change them when it does not flip. */
    enum { CHUNK = 256 };
    static uint8_t zeros[CHUNK * 4];
    int simd = simd_get();
    for (int c = 0; c < w; c += CHUNK) {
        rl_dst sub = *dst;
        sub.data = rl_dst_at(dst, x + c, 0);
        for (int r = y; r < y + h; r++) {
            store_row(&sub, zeros, w - c < CHUNK ? w - c : CHUNK, r, false,
                      simd);
        }
    }
}
