/*
 * augment/color.c - the per-pixel colour kernels: ColorJitter's
 * brightness, contrast, saturation and hue, and grayscale. The other
 * kernels are in color_hist.c, the colour ops made of them in
 * color_ops.c.
 *
 * DESIGN: torchvision computes a uint8 image in float32 and truncates on
 * the way back, so each kernel repeats its float32 operations in order and
 * gives the same bytes, not merely close ones. Python floats become
 * float32 where a tensor meets a scalar (but _blend's alpha is 1 - ratio
 * in double first). torch's add with alpha (_blend, the grayscale weights,
 * sharpness) is a fused multiply-add in its AVX2 and AVX512 kernels (and
 * NEON's) but two roundings in its default x86 kernels (ATEN_CPU_CAPABILITY
 * =default, what a CPU without AVX2 runs). So do we, as the warps do
 * (warp.c): fused where the SIMD level is AVX2 and the CPU has FMA (the
 * instruction) and on targets with a fast fmaf (the instruction), plain
 * below AVX2 (sse2, c) on x86; the level follows the CPU as torch's does,
 * so by default both round alike. A fused portable step is the exact
 * product in double plus one rounding. Nothing else is contracted
 * (-ffp-contract=off in every build: clang contracts within a statement
 * even in ISO C mode, gcc does not; float a * b + c is split into
 * statements too).
 *
 * Tolerances, tested against torchvision 0.29 (test_augment_color.py):
 * every op exact (hue, saturation, grayscale on all 2^24 colours), but
 * gaussian_blur, <= 1 LSB (torch's 2-D conv sums in another order: a value
 * within ~1e-5 of .5 can round the other way), and contrast (color_jitter)
 * above 65793 pixels, <= 1 LSB (torch's float32 sum for the mean rounds).
 *
 * Speed: a kernel is a pass of plain loops over rows (portable C), or where
 * the CPU has AVX2 and FMA and the SIMD level (place.h: RINGLOADER_SIMD,
 * _core.resample_simd) is AVX2, of AVX2 loops: 8 pixels a step as float R,
 * G, B vectors, the tail by the portable loop (fused). Both give the same
 * bytes.
 */
#include <math.h>
#include <stdio.h>

#include "augment/kernels.h"
#include "simd.h"

/* A target whose fmaf is one instruction: gcc says so with __FP_FAST_FMAF,
 * clang (14) on aarch64 only with __ARM_FEATURE_FMA. */
#if defined(__FP_FAST_FMAF) || defined(__ARM_FEATURE_FMA)
#define RL_FAST_FMAF 1
#else
#define RL_FAST_FMAF 0
#endif

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define RL_COLOR_AVX2 1
#include <immintrin.h>
#define RL_AVX2_FMA __attribute__((target("avx2,fma")))
#else
#define RL_COLOR_AVX2 0
#endif

/* torch's float32 constants: the grayscale weights and 1 / 255. */
#define W_R 0.2989f
#define W_G 0.587f
#define W_B 0.114f
#define INV255 ((float)(1.0 / 255.0))

#define ROW(img, y) ((img)->data + (size_t)(y) * (img)->stride)

/* ---- the portable row loops: the reference, and the AVX2 loops' tails */

/* a * b + c as torch's add with alpha rounds it: fused (one rounding: the
 * instruction where the target has one, else the product exact in double)
 * or plain (the product rounded, then the sum). */
static inline float madd(float a, float b, float c, bool fma)
{
    if (!fma) {
        float p = a * b;
        return p + c;
    }
#if RL_FAST_FMAF
    return __builtin_fmaf(a, b, c);
#else
    return (float)((double)a * (double)b + (double)c);
#endif
}

/* torch's clamp_(0, 255) then .to(uint8), which truncates. */
static inline uint8_t to_u8(float x)
{
    x = x < 255.0f ? x : 255.0f;
    x = x > 0.0f ? x : 0.0f;
    return (uint8_t)(int)x;
}

/* rgb_to_grayscale in float32: r * W_R, + g * W_G, + b * W_B. */
static inline float gray_of(const uint8_t *px, bool fma)
{
    float t = (float)px[0] * W_R;
    t = madd(px[1], W_G, t, fma);
    return madd(px[2], W_B, t, fma);
}

/* v * f per byte, f >= 0: brightness. */
static void bright_row(uint8_t *row, int n, float f)
{
    for (int i = 0; i < n; i++) {
        float x = (float)row[i] * f;
        row[i] = (uint8_t)(int)(x < 255.0f ? x : 255.0f);
    }
}

/* v * r + m * a per byte: contrast's _blend with the mean m, a = 1 - r. */
static void affine_row(uint8_t *row, int n, float r, float m, float a, bool fma)
{
    for (int i = 0; i < n; i++) {
        row[i] = to_u8(madd(m, a, (float)row[i] * r, fma));
    }
}

/* The sum of the row's floored grays (contrast's mean). */
static int64_t gray_sum_row(const uint8_t *row, int w, bool fma)
{
    int64_t sum = 0;
    for (int x = 0; x < w; x++) {
        sum += (int)gray_of(row + 3 * x, fma);
    }
    return sum;
}

/* _blend(v, floor(gray), r) per pixel: saturation. */
static void sat_row(uint8_t *row, int w, float r, float a, bool fma)
{
    for (int x = 0; x < w; x++) {
        uint8_t *px = row + 3 * x;
        float g = (float)(int)gray_of(px, fma);
        for (int c = 0; c < 3; c++) {
            px[c] = to_u8(madd(g, a, (float)px[c] * r, fma));
        }
    }
}

static void grayscale_row(uint8_t *row, int w, bool fma)
{
    for (int x = 0; x < w; x++) {
        uint8_t *px = row + 3 * x;
        px[0] = px[1] = px[2] = (uint8_t)(int)gray_of(px, fma);
    }
}

/* adjust_hue: RGB to HSV, hue shifted, back to RGB, in torch's float32
 * steps (_rgb_to_hsv, _hsv_to_rgb). */
static void hue_row(uint8_t *row, int w, float hue)
{
    for (int x = 0; x < w; x++) {
        uint8_t *px = row + 3 * x;
        float r = (float)px[0] * INV255;
        float g = (float)px[1] * INV255;
        float b = (float)px[2] * INV255;
        float mx = r > g ? r : g;
        mx = mx > b ? mx : b;
        float mn = r < g ? r : g;
        mn = mn < b ? mn : b;
        /* torch divides by 1 where max == min (e = 1): mx or 1, exactly */
        float e = (float)(mx == mn);
        float range = mx - mn;
        float s = range / (mx * (1.0f - e) + e);
        float div = range + e;
        float rc = (mx - r) / div;
        float gc = (mx - g) / div;
        float bc = (mx - b) / div;
        float hr = bc - gc;
        float hg = (rc + 2.0f) - bc;
        float hb = (gc + 4.0f) - rc;
        float h = mx == r ? hr : mx == g ? hg : hb;
        h = h * (float)(1.0 / 6.0);
        h = h + 1.0f;
        h = h - (float)(h >= 1.0f); /* fmod(h, 1), h in [5/6, 11/6] */
        h = h + hue;
        /* remainder(h, 1), h in [-0.5, 1.5) */
        h = h + ((float)(h < 0.0f) - (float)(h >= 1.0f));
        float h6 = h * 6.0f;
        int i = (int)h6; /* floor: h6 >= 0 */
        float f = h6 - (float)i;
        i = i == 6 ? 0 : i;
        float sf = s * f;
        float oms = 1.0f - s;
        float q = (1.0f - sf) * mx;
        float t = (sf + oms) * mx;
        float p = oms * mx;
        q = q < 0.0f ? 0.0f : (q > 1.0f ? 1.0f : q);
        t = t < 0.0f ? 0.0f : (t > 1.0f ? 1.0f : t);
        p = p < 0.0f ? 0.0f : (p > 1.0f ? 1.0f : p);
        const float out[6][3] = {{mx, t, p}, {q, mx, p}, {p, mx, t},
                                 {p, q, mx}, {t, p, mx}, {mx, p, q}};
        /* to_dtype(uint8, scale=True): * (255 + 1 - 1e-3), truncated */
        for (int c = 0; c < 3; c++) {
            px[c] = (uint8_t)(int)(out[i][c] * 255.999f);
        }
    }
}

/* ---- the AVX2 + FMA row loops: the same operations, 8 lanes wide */

#if RL_COLOR_AVX2
#define F8(x) _mm256_set1_ps(x)

/* Pixels 0 .. 7 at p as float R, G, B (reads 28 bytes). */
RL_AVX2_FMA static inline void load8(const uint8_t *p, __m256 *r, __m256 *g,
                                     __m256 *b)
{
    const __m128i planes =
        _mm_setr_epi8(0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11, -1, -1, -1, -1);
    __m128i lo = _mm_loadu_si128((const __m128i *)p);
    __m128i hi = _mm_loadu_si128((const __m128i *)(p + 12));
    lo = _mm_shuffle_epi8(lo, planes); /* R0-3 G0-3 B0-3 */
    hi = _mm_shuffle_epi8(hi, planes); /* R4-7 G4-7 B4-7 */
    __m128i rg = _mm_unpacklo_epi32(lo, hi), bb = _mm_unpackhi_epi32(lo, hi);
    *r = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(rg));
    *g = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(rg, 8)));
    *b = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bb));
}

/* R, G, B clamped to [0, 255] and truncated, to pixels 0 .. 7 at p. */
RL_AVX2_FMA static inline void store8(uint8_t *p, __m256 r, __m256 g, __m256 b)
{
    const __m256i pixels = _mm256_setr_epi8(
        0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11, -1, -1, -1, -1, /* lane 0 */
        0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11, -1, -1, -1, -1);
    /* above 255 by min; below 0 by the saturating packs */
    __m256i ri = _mm256_cvttps_epi32(_mm256_min_ps(r, F8(255.0f)));
    __m256i gi = _mm256_cvttps_epi32(_mm256_min_ps(g, F8(255.0f)));
    __m256i bi = _mm256_cvttps_epi32(_mm256_min_ps(b, F8(255.0f)));
    __m256i v = _mm256_packus_epi16(_mm256_packs_epi32(ri, gi),
                                    _mm256_packs_epi32(bi, bi));
    v = _mm256_shuffle_epi8(v, pixels); /* 12 bytes a lane */
    v = _mm256_permutevar8x32_epi32(v,
                                    _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 3, 7));
    _mm_storeu_si128((__m128i *)p, _mm256_castsi256_si128(v));
    _mm_storel_epi64((__m128i *)(p + 16), _mm256_extracti128_si256(v, 1));
}

RL_AVX2_FMA static inline __m256 gray8(__m256 r, __m256 g, __m256 b)
{
    __m256 t = _mm256_mul_ps(r, F8(W_R));
    t = _mm256_fmadd_ps(g, F8(W_G), t);
    return _mm256_fmadd_ps(b, F8(W_B), t);
}

#define TRUNC8(x) _mm256_round_ps(x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC)
/* The 8-pixel steps stop where the next would read past the row. */
#define STEPS8(x, w) ((x) + 10 <= (w))

/* The AVX2 loops run only where the rounding is fused: fma is true. */
RL_AVX2_FMA static void affine_row_avx2(uint8_t *row, int n, float r, float m,
                                        float a, bool fma)
{
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i q[4];
        for (int k = 0; k < 4; k++) {
            __m128i v8 = _mm_loadl_epi64((const __m128i *)(row + i + 8 * k));
            __m256 x = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v8));
            x = _mm256_fmadd_ps(F8(m), F8(a), _mm256_mul_ps(x, F8(r)));
            q[k] = _mm256_cvttps_epi32(_mm256_min_ps(x, F8(255.0f)));
        }
        __m256i v = _mm256_packus_epi16(_mm256_packs_epi32(q[0], q[1]),
                                        _mm256_packs_epi32(q[2], q[3]));
        v = _mm256_permutevar8x32_epi32(v, order);
        _mm256_storeu_si256((__m256i *)(row + i), v);
    }
    affine_row(row + i, n - i, r, m, a, fma);
}

/* brightness: fma(0, 0, x) is x */
RL_AVX2_FMA static void bright_row_avx2(uint8_t *row, int n, float f)
{
    affine_row_avx2(row, n, f, 0.0f, 0.0f, true);
}

RL_AVX2_FMA static int64_t gray_sum_row_avx2(const uint8_t *row, int w,
                                             bool fma)
{
    __m256i acc = _mm256_setzero_si256();
    int x = 0;
    for (; STEPS8(x, w); x += 8) {
        __m256 r, g, b;
        load8(row + 3 * x, &r, &g, &b);
        acc = _mm256_add_epi32(acc, _mm256_cvttps_epi32(gray8(r, g, b)));
    }
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(acc),
                              _mm256_extracti128_si256(acc, 1));
    s = _mm_hadd_epi32(s, s);
    s = _mm_hadd_epi32(s, s);
    return _mm_cvtsi128_si32(s) + gray_sum_row(row + 3 * x, w - x, fma);
}

RL_AVX2_FMA static void sat_row_avx2(uint8_t *row, int w, float r, float a,
                                     bool fma)
{
    int x = 0;
    for (; STEPS8(x, w); x += 8) {
        __m256 cr, cg, cb;
        load8(row + 3 * x, &cr, &cg, &cb);
        __m256 g = TRUNC8(gray8(cr, cg, cb));
        cr = _mm256_fmadd_ps(g, F8(a), _mm256_mul_ps(cr, F8(r)));
        cg = _mm256_fmadd_ps(g, F8(a), _mm256_mul_ps(cg, F8(r)));
        cb = _mm256_fmadd_ps(g, F8(a), _mm256_mul_ps(cb, F8(r)));
        store8(row + 3 * x, cr, cg, cb);
    }
    sat_row(row + 3 * x, w - x, r, a, fma);
}

RL_AVX2_FMA static void grayscale_row_avx2(uint8_t *row, int w, bool fma)
{
    int x = 0;
    for (; STEPS8(x, w); x += 8) {
        __m256 r, g, b;
        load8(row + 3 * x, &r, &g, &b);
        __m256 y = gray8(r, g, b);
        store8(row + 3 * x, y, y, y);
    }
    grayscale_row(row + 3 * x, w - x, fma);
}

/* v where mask, else u */
#define SEL(u, v, mask) _mm256_blendv_ps(u, v, mask)
#define ONE_IF(mask) _mm256_and_ps(mask, F8(1.0f))
#define CLAMP01(v) _mm256_min_ps(_mm256_max_ps(v, zero), one)

RL_AVX2_FMA static void hue_row_avx2(uint8_t *row, int w, float hue)
{
    const __m256 one = F8(1.0f), zero = _mm256_setzero_ps();
    int x = 0;
    for (; STEPS8(x, w); x += 8) {
        __m256 r, g, b;
        load8(row + 3 * x, &r, &g, &b);
        r = _mm256_mul_ps(r, F8(INV255));
        g = _mm256_mul_ps(g, F8(INV255));
        b = _mm256_mul_ps(b, F8(INV255));
        __m256 mx = _mm256_max_ps(_mm256_max_ps(r, g), b);
        __m256 mn = _mm256_min_ps(_mm256_min_ps(r, g), b);
        __m256 eq = _mm256_cmp_ps(mx, mn, _CMP_EQ_OQ);
        __m256 range = _mm256_sub_ps(mx, mn);
        __m256 s = _mm256_div_ps(range, SEL(mx, one, eq));
        __m256 div = SEL(range, one, eq);
        __m256 rc = _mm256_div_ps(_mm256_sub_ps(mx, r), div);
        __m256 gc = _mm256_div_ps(_mm256_sub_ps(mx, g), div);
        __m256 bc = _mm256_div_ps(_mm256_sub_ps(mx, b), div);
        __m256 hr = _mm256_sub_ps(bc, gc);
        __m256 hg = _mm256_sub_ps(_mm256_add_ps(rc, F8(2.0f)), bc);
        __m256 hb = _mm256_sub_ps(_mm256_add_ps(gc, F8(4.0f)), rc);
        __m256 h = SEL(hb, hg, _mm256_cmp_ps(mx, g, _CMP_EQ_OQ));
        h = SEL(h, hr, _mm256_cmp_ps(mx, r, _CMP_EQ_OQ));
        h = _mm256_add_ps(_mm256_mul_ps(h, F8((float)(1.0 / 6.0))), one);
        h = _mm256_sub_ps(h, ONE_IF(_mm256_cmp_ps(h, one, _CMP_GE_OQ)));
        h = _mm256_add_ps(h, F8(hue));
        __m256 wrap = _mm256_sub_ps(ONE_IF(_mm256_cmp_ps(h, zero, _CMP_LT_OQ)),
                                    ONE_IF(_mm256_cmp_ps(h, one, _CMP_GE_OQ)));
        h = _mm256_add_ps(h, wrap);
        __m256 h6 = _mm256_mul_ps(h, F8(6.0f));
        __m256i i = _mm256_cvttps_epi32(h6);
        __m256 f = _mm256_sub_ps(h6, _mm256_cvtepi32_ps(i));
        __m256 sf = _mm256_mul_ps(s, f);
        __m256 oms = _mm256_sub_ps(one, s);
        __m256 q = CLAMP01(_mm256_mul_ps(_mm256_sub_ps(one, sf), mx));
        __m256 t = CLAMP01(_mm256_mul_ps(_mm256_add_ps(sf, oms), mx));
        __m256 p = CLAMP01(_mm256_mul_ps(oms, mx));
        __m256 is[7];
        for (int k = 0; k < 7; k++) {
            is[k] = _mm256_castsi256_ps(
                _mm256_cmpeq_epi32(i, _mm256_set1_epi32(k)));
        }
        is[0] = _mm256_or_ps(is[0], is[6]); /* i = 6 is i = 0 */
        __m256 ro = SEL(SEL(SEL(p, t, is[4]), q, is[1]), mx,
                        _mm256_or_ps(is[0], is[5]));
        __m256 go = SEL(SEL(SEL(p, t, is[0]), q, is[3]), mx,
                        _mm256_or_ps(is[1], is[2]));
        __m256 bo = SEL(SEL(SEL(p, t, is[2]), q, is[5]), mx,
                        _mm256_or_ps(is[3], is[4]));
        store8(row + 3 * x, _mm256_mul_ps(ro, F8(255.999f)),
               _mm256_mul_ps(go, F8(255.999f)),
               _mm256_mul_ps(bo, F8(255.999f)));
    }
    hue_row(row + 3 * x, w - x, hue);
}

/* Whether the AVX2 loops run: the SIMD level (whose choice initialised the
 * CPU model) is AVX2, and the CPU has FMA. */
static bool fast(void)
{
    return rl_simd_level() == RL_SIMD_AVX2 && __builtin_cpu_supports("fma");
}
#else
#define bright_row_avx2 bright_row
#define affine_row_avx2 affine_row
#define gray_sum_row_avx2 gray_sum_row
#define sat_row_avx2 sat_row
#define grayscale_row_avx2 grayscale_row
#define hue_row_avx2 hue_row
static bool fast(void)
{
    return false;
}
#endif

/* Whether the colour kernels fuse torch's add with alpha (see DESIGN): at
 * the AVX2 loops, and on targets with a fast fmaf (aarch64, whose NEON
 * kernels in torch fuse); plain otherwise (x86 below the AVX2 level). */
bool rl_color_fused(void)
{
#if RL_FAST_FMAF
    return true;
#else
    return fast();
#endif
}

/* ---- the kernels ---- */

/* fn(row, ...) on each row: the AVX2 copy where it runs. */
#define FOR_ROWS(img, fn, ...)                                   \
    do {                                                         \
        bool fast_ = fast();                                     \
        for (int y_ = 0; y_ < (img)->h; y_++) {                  \
            (fast_ ? fn##_avx2 : fn)(ROW(img, y_), __VA_ARGS__); \
        }                                                        \
    } while (0)

int rl_k_brightness(rl_image *img, double factor)
{
    float f = factor > 0 ? (float)factor : 0.0f; /* torch refuses < 0 */
    FOR_ROWS(img, bright_row, img->w * 3, f);
    return 0;
}

int rl_k_contrast(rl_image *img, double factor)
{
    bool fa = fast(), fma = rl_color_fused();
    int64_t sum = 0;
    for (int y = 0; y < img->h; y++) {
        sum +=
            (fa ? gray_sum_row_avx2 : gray_sum_row)(ROW(img, y), img->w, fma);
    }
    /* torch.mean: the float32 sum (exact below 2^24) over float32(n) */
    float mean = (float)sum / (float)((int64_t)img->w * img->h);
    FOR_ROWS(img, affine_row, img->w * 3, (float)factor, mean,
             (float)(1.0 - factor), fma);
    return 0;
}

int rl_k_saturation(rl_image *img, double factor)
{
    FOR_ROWS(img, sat_row, img->w, (float)factor, (float)(1.0 - factor),
             rl_color_fused());
    return 0;
}

int rl_k_hue(rl_image *img, double factor)
{
    FOR_ROWS(img, hue_row, img->w, (float)factor);
    return 0;
}

int rl_k_grayscale(rl_image *img)
{
    FOR_ROWS(img, grayscale_row, img->w, rl_color_fused());
    return 0;
}
