/*
 * place/store.c - the output: 8-bit RGBX rows to the destination's layout
 * and dtype.
 *
 * DESIGN: the resampler's vertical pass hands over one finished row at a
 * time, still in L1, and this writes it into the batch slot with arbitrary
 * strides; that is where NCHW/NHWC and the float conversion happen (the
 * flip is already in the row: the horizontal pass writes it mirrored).
 * Float outputs are v * mul[c] + add[c] computed in float32, then
 * rounded to float16 or bfloat16 to nearest even. Each conversion has a
 * portable scalar version, the reference; the SSE2 one does four values at
 * a time and falls back to the scalar one for the values it cannot round
 * the same way (zero, subnormals, overflow), and on AVX2 CPUs float16 goes
 * through F16C, whose rounding is the same. float32 and bfloat16 NCHW (the
 * training layout) have an AVX2 store of eight pixels a step, which also
 * fills the F16C path's float32 buffer. So every SIMD level writes the same
 * bytes. rl_store_rgb(), rl_fill_zero() and rl_fill_rgb() feed the same row
 * store from packed RGB, zeros or a colour, so their bytes are the resampler's too.
 */
#include "place/store.h"

#include <string.h>

#include "place/resample_kernels.h"
#include "simd.h"

#if RL_HAVE_SSE2
#include <emmintrin.h>
#endif
#if RL_HAVE_AVX2
#include <immintrin.h>
#endif

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

void rl_store_value(const rl_dst *dst, int x, int y, int c, float v)
{
    uint8_t *p = rl_dst_at(dst, x, y) +
                 c * dst->ch_stride * (ptrdiff_t)rl_dtype_size(dst->dtype);
    switch (dst->dtype) {
    case RL_DTYPE_U8: /* as torch casts a float to uint8: towards zero */
        *p = (uint8_t)(v <= 0 ? 0 : v >= 255 ? 255 : (int)v);
        break;
    case RL_DTYPE_F32:
        memcpy(p, &v, 4);
        break;
    case RL_DTYPE_F16: {
        uint16_t h = f32_to_f16(v);
        memcpy(p, &h, 2);
        break;
    }
    case RL_DTYPE_BF16: {
        uint16_t h = f32_to_bf16(v);
        memcpy(p, &h, 2);
        break;
    }
    }
}

#if RL_HAVE_SSE2
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
    __m128i sign = _mm_and_si128(_mm_srli_epi32(x, 16), _mm_set1_epi32(0x8000));
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
 * The float outputs of rl__store_row, four values per step: in NCHW four
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
        __m128i v01 = _mm_unpacklo_epi8(v, zero);
        __m128i v23 = _mm_unpackhi_epi8(v, zero);
        __m128i p[4] = {
            _mm_unpacklo_epi16(v01, zero), _mm_unpackhi_epi16(v01, zero),
            _mm_unpacklo_epi16(v23, zero), _mm_unpackhi_epi16(v23, zero)};
        for (int i = 0; i < 4; i++) {
            store4(dst->dtype, o + (size_t)(3 * (x + i)) * es,
                   _mm_add_ps(_mm_mul_ps(_mm_cvtepi32_ps(p[i]), vm), va));
        }
    }
    return x;
}
#endif

#if RL_HAVE_AVX2
/* Stores eight values f as dtype (float32 or bfloat16) at p. bfloat16
 * rounds as f32_to_bf16 does, on eight lanes. */
static inline RL_TARGET_AVX2 __attribute__((always_inline)) void
store8(rl_dtype dtype, uint8_t *p, __m256 f)
{
    if (dtype == RL_DTYPE_F32) {
        _mm256_storeu_ps((float *)(void *)p, f);
        return;
    }
    __m256i x = _mm256_castps_si256(f);
    __m256i odd =
        _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    x = _mm256_add_epi32(x, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), odd));
    x = _mm256_srli_epi32(x, 16); /* 0..0xFFFF: packus keeps it */
    x = _mm256_permute4x64_epi64(_mm256_packus_epi32(x, x), 0x08);
    _mm_storeu_si128((__m128i *)(void *)p, _mm256_castsi256_si128(x));
}

/*
 * float32 or bfloat16 NCHW, eight pixels per step: one 32-byte load of
 * eight RGBX pixels, then per channel a shift, mask, convert, multiply and
 * add, the scalar path's operations in its order (no FMA, whose single
 * rounding would change the last bit). Returns how many pixels were
 * written.
 */
static RL_TARGET_AVX2 int store_nchw_avx2(const rl_dst *dst, const uint8_t *px,
                                          int w, uint8_t *o)
{
    const __m256i lo = _mm256_set1_epi32(0xFF);
    __m256 m0 = _mm256_set1_ps(dst->mul[0]), a0 = _mm256_set1_ps(dst->add[0]);
    __m256 m1 = _mm256_set1_ps(dst->mul[1]), a1 = _mm256_set1_ps(dst->add[1]);
    __m256 m2 = _mm256_set1_ps(dst->mul[2]), a2 = _mm256_set1_ps(dst->add[2]);
    size_t es = rl_dtype_size(dst->dtype);
    uint8_t *c0 = o, *c1 = o + (size_t)dst->ch_stride * es;
    uint8_t *c2 = c1 + (size_t)dst->ch_stride * es;
    int x = 0;
    for (; x + 8 <= w; x += 8) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(px + 4 * (size_t)x));
        __m256 r = _mm256_cvtepi32_ps(_mm256_and_si256(v, lo));
        __m256 g =
            _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, 8), lo));
        __m256 b =
            _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, 16), lo));
        size_t at = (size_t)x * es;
        store8(dst->dtype, c0 + at, _mm256_add_ps(_mm256_mul_ps(r, m0), a0));
        store8(dst->dtype, c1 + at, _mm256_add_ps(_mm256_mul_ps(g, m1), a1));
        store8(dst->dtype, c2 + at, _mm256_add_ps(_mm256_mul_ps(b, m2), a2));
    }
    return x;
}
#endif

/* The float outputs (dtype f32, f16 or bf16) of one row: px -> o. */
static void store_float(const rl_dst *dst, const uint8_t *px, int w, uint8_t *o,
                        rl_simd simd)
{
    ptrdiff_t ps = dst->px_stride, cs = dst->ch_stride;
    int x0 = 0;
#if RL_HAVE_AVX2
    if (simd == RL_SIMD_AVX2 && dst->dtype != RL_DTYPE_F16 && ps == 1) {
        x0 = store_nchw_avx2(dst, px, w, o);
    }
#endif
#if RL_HAVE_SSE2
    if (simd != RL_SIMD_C && x0 == 0) {
        x0 = store_float_sse2(dst, px, w, o);
    }
#else
    (void)simd;
#endif
    /* The pixels the vector code left (or all of them), one at a time. */
    for (int c = 0; c < 3; c++) {
        float mul = dst->mul[c], add = dst->add[c];
        uint8_t *oc = o + c * cs * (ptrdiff_t)rl_dtype_size(dst->dtype);
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

#if RL_HAVE_AVX2
/* n float32 -> float16 with the F16C instruction, rounding to nearest even
 * exactly as f32_to_f16 does. */
static RL_TARGET_F16C void f32_to_f16_f16c(const float *in, uint16_t *out,
                                           int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h =
            _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
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
        store_float(&f, px + 4 * (size_t)x, n, (uint8_t *)buf, RL_SIMD_AVX2);
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

void rl__store_row(const rl_dst *dst, const uint8_t *px, int w, int y,
                   rl_simd simd)
{
    uint8_t *o = rl_dst_at(dst, 0, y);
    ptrdiff_t ps = dst->px_stride, cs = dst->ch_stride;
    if (dst->dtype == RL_DTYPE_U8) {
        if (ps == 3 && cs == 1) { /* NHWC: pack RGBX -> RGB */
            for (int x = 0; x < w; x++) {
                memcpy(o + 3 * x, px + 4 * x, 3);
            }
            return;
        }
        int x0 = 0;
#if RL_HAVE_SSE2
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
#if RL_HAVE_AVX2
    if (dst->dtype == RL_DTYPE_F16 && simd == RL_SIMD_AVX2 &&
        (ps == 1 || (ps == 3 && cs == 1))) {
        store_f16_f16c(dst, px, w, o);
        return;
    }
#endif
    store_float(dst, px, w, o, simd);
}

/*
 * Stores the w x h image at (x, y) of dst through an RGBX row on the stack,
 * a chunk of columns at a time: rows of packed RGB from rgb, stride bytes
 * apart, or where rgb is NULL the colour fill (R, G, B; NULL: black).
 */
static void store_rect(const rl_dst *dst, int x, int y, int w, int h,
                       const uint8_t *rgb, size_t stride, const uint8_t *fill)
{
    enum { CHUNK = 256 };
    uint32_t row[CHUNK]; /* 4-byte aligned, as rl__store_row wants */
    uint8_t *px = (uint8_t *)row;
    rl_simd simd = rl_simd_level();
    if (w <= 0 || h <= 0) {
        return;
    }
    memset(row, 0, sizeof(row));
    if (rgb == NULL && fill != NULL) {
        for (int i = 0; i < CHUNK; i++) {
            memcpy(px + 4 * i, fill, 3);
        }
    }
    for (int c = 0; c < w; c += CHUNK) {
        int n = w - c < CHUNK ? w - c : CHUNK;
        rl_dst sub = *dst;
        sub.data = rl_dst_at(dst, x + c, 0);
        for (int r = 0; r < h; r++) {
            if (rgb != NULL) {
                const uint8_t *s = rgb + (size_t)r * stride + 3 * (size_t)c;
                for (int i = 0; i < n; i++) {
                    memcpy(px + 4 * i, s + 3 * i, 3);
                }
            }
            rl__store_row(&sub, px, n, y + r, simd);
        }
    }
}

void rl_store_rgb(const uint8_t *rgb, size_t stride, int w, int h,
                  const rl_dst *dst)
{
    store_rect(dst, 0, 0, w, h, rgb, stride, NULL);
}

void rl_fill_zero(const rl_dst *dst, int x, int y, int w, int h)
{
    store_rect(dst, x, y, w, h, NULL, 0, NULL);
}

void rl_fill_rgb(const rl_dst *dst, int x, int y, int w, int h,
                 const uint8_t fill[3])
{
    store_rect(dst, x, y, w, h, NULL, 0, fill);
}
