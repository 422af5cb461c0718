/*
 * augment/warp.c - rl_k_affine: the affine warp of torchvision's
 * affine_image/rotate_image (expand=False) on a uint8 image; and
 * rl_k_perspective, perspective_image's, the same sampler on another grid.
 *
 * DESIGN: torchvision builds a float32 sampling grid and calls grid_sample;
 * nearest must give the same bytes, so every float operation of that path
 * is redone here in float32, in the same order (found by comparing with
 * torch 2.x on CPU, operation by operation):
 *
 *   theta  = float32(m), R = theta^T / (w/2, h/2)           (divisions)
 *   x_i    = i - (w-1)/2, y_j = j - (h-1)/2                 (exact linspace)
 *   gx     = (x_i * R00 + y_j * R10) + R20      (MKL's bmm: never fused)
 *   ix     = (gx + 1) * (w/2) - 0.5             (grid_sample, align_corners
 *                                                 False: fused, see below)
 *
 * and likewise gy, iy. A perspective's grid (_perspective_grid) is two
 * such products of theta1 = float32(coeffs[0..5]) and of theta2 = (c6, c7,
 * 1), with x_i = i + 0.5, y_j = j + 0.5 (linspace from 0.5, exact):
 *
 *   gx     = ((x_i * R00 + y_j * R10) + R20) / ((x_i * c6 + y_j * c7) + 1) - 1
 *
 * and likewise gy (R = theta1^T / (w/2, h/2) as above). Nearest takes the pixel at rint(ix), rint(iy) (half
 * to even) when it lies inside, else zero or the fill. Bilinear weighs the
 * four neighbours as ATen's grid sampler does (floor, the distances to the
 * sides, their products) and sums v_nw*w_nw, v_ne*w_ne, v_sw*w_sw,
 * v_se*w_se in that order, a neighbour outside counting as zero; with a
 * fill the same sum over a plane of ones (the mask m) blends the result as
 * (v - fill) * m + fill; the result is rounded half to even to uint8.
 *
 * ATen compiles its grid sampler once per CPU capability, and the AVX2 and
 * AVX512 builds (the ones any CPU with AVX2 and FMA runs) fuse the
 * unnormalisation into one multiply-add, fma(gx + 1, w/2, -0.5), and the
 * bilinear sum into a chain, fma(v_se, w_se, fma(v_sw, w_sw, fma(v_ne,
 * w_ne, v_nw * w_nw))), while its default build (older CPUs, or
 * ATEN_CPU_CAPABILITY=default) rounds every operation. So do we: fused,
 * with the CPU's FMA, where the CPU has AVX2 and FMA and the process's
 * SIMD level (rl_simd_level(), which RINGLOADER_SIMD and tests cap) is
 * AVX2; plain elsewhere. Nearest is the same either way but where the
 * unnormalisation's rounding lands on a half, which no test has met.
 *
 * x_i * R00 and x_i * R01 depend on the column only and y_j * R10, y_j *
 * R11 on the row only: products computed once, so a coordinate costs two
 * additions and a multiply-add, not an increment (which would round
 * differently). Plain float arithmetic gives the same results in SIMD lanes
 * as in scalar code; the pragmas below keep the compiler from fusing any
 * other multiply and add (-ffast-math would break this file too).
 *
 * Sides are limited to 4194296 pixels (coordinates round with a 2^23
 * magic number): rl_k_affine returns -EOVERFLOW beyond.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "augment/kernels.h"
#include "place/place.h"
#include "simd.h"

/* No fused multiply-adds but the explicit ones, whatever the -std. */
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

/* RL_WARP_PORTABLE: the portable code only (to test it on x86). */
#if defined(__GNUC__) && defined(__SSE2__) && !defined(RL_WARP_PORTABLE) && \
    (defined(__x86_64__) || defined(__i386__))
#define WARP_X86 1
#include <immintrin.h>
#define WARP_FMA __attribute__((target("avx2,fma")))
#else
#define WARP_X86 0
#endif

/* Adding then subtracting 1.5 * 2^23 rounds a float of magnitude below
 * 2^22 to an integer, half to even (the default rounding mode). */
#define ROUND_MAGIC 12582912.0f

/* Coordinates are clamped to [-4, size + 3] before rounding: any value
 * outside is outside the image either way (NaN ends at -4), and the
 * clamped value converts to int safely and rounds with ROUND_MAGIC. */
#define LOW_CLAMP -4.0f
#define MAX_SIDE ((1 << 22) - 8)

typedef struct warp {
    int w, h;
    int persp;          /* a perspective grid (rl_k_perspective) */
    const uint8_t *src; /* copy of the input, rows w * 3 bytes apart */
    float r10, r11, r20, r21;
    float half_w, half_h;   /* w / 2, h / 2: the grid sampler's scale */
    float hi_x, hi_y;       /* clamp limits */
    const float *cx0, *cx1; /* x_i * R00, x_i * R01 for each column */
    /* perspective: x_i * c6 for each column, and c7 */
    const float *cx2;
    float c7;
    /* per pixel of one row: */
    float *ix, *iy; /* the source coordinates */
    int32_t *off;   /* nearest: the source pixel y * w + x, or -1 */
    /* bilinear: the four weights (zero for a neighbour outside) and where
     * the neighbours are, each clamped into the image (one outside reads
     * some pixel inside, times a zero weight): the column and row of the
     * north-west one, then dx (0 or 3) and dy (0 or 3 * w) bytes on to the
     * east and south ones */
    float *nw, *ne, *sw, *se;
    int32_t *col, *row, *dx, *dy;
} warp;

static inline float clamp_coord(float v, float hi)
{
    v = v > LOW_CLAMP ? v : LOW_CLAMP;
    return v < hi ? v : hi;
}

/* The source coordinates of output row j into k->ix, k->iy (the
 * unnormalisation fused or not). */
static inline __attribute__((always_inline)) void row_coords(const warp *k,
                                                             int j, int fused)
{
    float y = k->persp ? (float)j + 0.5f : (float)j - 0.5f * (float)(k->h - 1);
    float p0 = y * k->r10, p1 = y * k->r11, p2 = y * k->c7;
    float r20 = k->r20, r21 = k->r21, sx = k->half_w, sy = k->half_h;
    float hx = k->hi_x, hy = k->hi_y;
    const float *restrict c0 = k->cx0, *restrict c1 = k->cx1;
    const float *restrict c2 = k->cx2;
    float *restrict ix = k->ix, *restrict iy = k->iy;
    int persp = k->persp;
    for (int i = 0; i < k->w; i++) {
        float gx = (c0[i] + p0) + r20;
        float gy = (c1[i] + p1) + r21;
        if (persp) {
            float d = (c2[i] + p2) + 1.0f;
            gx = gx / d - 1.0f;
            gy = gy / d - 1.0f;
        }
        float x, v;
        if (fused) {
            x = __builtin_fmaf(gx + 1.0f, sx, -0.5f);
            v = __builtin_fmaf(gy + 1.0f, sy, -0.5f);
        } else {
            x = (gx + 1.0f) * sx - 0.5f;
            v = (gy + 1.0f) * sy - 0.5f;
        }
        ix[i] = clamp_coord(x, hx);
        iy[i] = clamp_coord(v, hy);
    }
}

/* Nearest: the source pixel of each pixel of the row, or -1. */
static inline void row_nearest(const warp *k)
{
    int w = k->w, h = k->h;
    const float *restrict ix = k->ix, *restrict iy = k->iy;
    int32_t *restrict off = k->off;
    for (int i = 0; i < w; i++) {
        int xi = (int)((ix[i] + ROUND_MAGIC) - ROUND_MAGIC);
        int yi = (int)((iy[i] + ROUND_MAGIC) - ROUND_MAGIC);
        int in = (xi >= 0) & (xi < w) & (yi >= 0) & (yi < h);
        off[i] = in ? yi * w + xi : -1;
    }
}

static inline int clampi(int v, int hi)
{
    return v < 0 ? 0 : v > hi ? hi : v;
}

/* Bilinear: the weights and neighbours of pixels [i0, w) of the row. */
static inline void row_bilinear(const warp *k, int i0)
{
    int w = k->w, h = k->h;
    for (int i = i0; i < w; i++) {
        float x = k->ix[i], y = k->iy[i];
        int x0 = (int)x, y0 = (int)y;
        x0 -= (float)x0 > x; /* floor */
        y0 -= (float)y0 > y;
        float dw = x - (float)x0, de = 1.0f - dw;
        float dn = y - (float)y0, ds = 1.0f - dn;
        int inw = (x0 >= 0) & (x0 < w), ine = (x0 >= -1) & (x0 < w - 1);
        int inn = (y0 >= 0) & (y0 < h), ins = (y0 >= -1) & (y0 < h - 1);
        k->nw[i] = inw & inn ? ds * de : 0.0f;
        k->ne[i] = ine & inn ? ds * dw : 0.0f;
        k->sw[i] = inw & ins ? dn * de : 0.0f;
        k->se[i] = ine & ins ? dn * dw : 0.0f;
        k->col[i] = clampi(x0, w - 1);
        k->row[i] = clampi(y0, h - 1);
        k->dx[i] = 3 * (clampi(x0 + 1, w - 1) - k->col[i]);
        k->dy[i] = 3 * w * (clampi(y0 + 1, h - 1) - k->row[i]);
    }
}

#if WARP_X86
/* a <= b ? a : b, without SSE4.1 */
static inline __m128i min_i32(__m128i a, __m128i b)
{
    __m128i gt = _mm_cmpgt_epi32(a, b);
    return _mm_or_si128(_mm_and_si128(gt, b), _mm_andnot_si128(gt, a));
}

/* v clamped to [0, hi] */
static inline __m128i clamp_i32(__m128i v, __m128i hi)
{
    v = _mm_and_si128(v, _mm_cmpgt_epi32(v, _mm_set1_epi32(-1)));
    return min_i32(v, hi);
}

/* lo < v < hi, as a mask */
static inline __m128i between(__m128i v, __m128i lo, __m128i hi)
{
    return _mm_and_si128(_mm_cmpgt_epi32(v, lo), _mm_cmplt_epi32(v, hi));
}

static inline void put_weight(float *to, __m128i in, __m128 a, __m128 b)
{
    _mm_storeu_ps(to, _mm_and_ps(_mm_castsi128_ps(in), _mm_mul_ps(a, b)));
}

/* row_bilinear four pixels at a time (SSE2), with the same arithmetic. */
static inline void row_bilinear_x86(const warp *k)
{
    int w = k->w, i = 0;
    const __m128i one = _mm_set1_epi32(1), m1 = _mm_set1_epi32(-1);
    const __m128i wv = _mm_set1_epi32(w), hv = _mm_set1_epi32(k->h);
    const __m128i w1 = _mm_set1_epi32(w - 1), h1 = _mm_set1_epi32(k->h - 1);
    const __m128i three = _mm_set1_epi32(3), line = _mm_set1_epi32(3 * w);
    const __m128 onef = _mm_set1_ps(1.0f);
    for (; i + 4 <= w; i += 4) {
        __m128 x = _mm_loadu_ps(k->ix + i), y = _mm_loadu_ps(k->iy + i);
        __m128i x0 = _mm_cvttps_epi32(x), y0 = _mm_cvttps_epi32(y);
        /* floor: minus one (all ones) where truncating went up */
        __m128 up = _mm_cmpgt_ps(_mm_cvtepi32_ps(x0), x);
        x0 = _mm_add_epi32(x0, _mm_castps_si128(up));
        up = _mm_cmpgt_ps(_mm_cvtepi32_ps(y0), y);
        y0 = _mm_add_epi32(y0, _mm_castps_si128(up));
        __m128 dw = _mm_sub_ps(x, _mm_cvtepi32_ps(x0));
        __m128 dn = _mm_sub_ps(y, _mm_cvtepi32_ps(y0));
        __m128 de = _mm_sub_ps(onef, dw), ds = _mm_sub_ps(onef, dn);
        __m128i x1 = _mm_add_epi32(x0, one), y1 = _mm_add_epi32(y0, one);
        __m128i inw = between(x0, m1, wv), ine = between(x1, m1, wv);
        __m128i inn = between(y0, m1, hv), ins = between(y1, m1, hv);
        put_weight(k->nw + i, _mm_and_si128(inw, inn), ds, de);
        put_weight(k->ne + i, _mm_and_si128(ine, inn), ds, dw);
        put_weight(k->sw + i, _mm_and_si128(inw, ins), dn, de);
        put_weight(k->se + i, _mm_and_si128(ine, ins), dn, dw);
        __m128i xw = clamp_i32(x0, w1), yn = clamp_i32(y0, h1);
        __m128i ex = _mm_cmpgt_epi32(clamp_i32(x1, w1), xw);
        __m128i sy = _mm_cmpgt_epi32(clamp_i32(y1, h1), yn);
        _mm_storeu_si128((__m128i *)(k->col + i), xw);
        _mm_storeu_si128((__m128i *)(k->row + i), yn);
        _mm_storeu_si128((__m128i *)(k->dx + i), _mm_and_si128(ex, three));
        _mm_storeu_si128((__m128i *)(k->dy + i), _mm_and_si128(sy, line));
    }
    row_bilinear(k, i);
}
#define ROW_BILINEAR(k) row_bilinear_x86(k)
#else
#define ROW_BILINEAR(k) row_bilinear(k, 0)
#endif

static inline uint32_t load4(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline uint8_t to_u8(float v)
{
    v = (v + ROUND_MAGIC) - ROUND_MAGIC;
    return (uint8_t)(v <= 0.0f ? 0.0f : v >= 255.0f ? 255.0f : v);
}

/* A row's pixels from their bytes px(i) (and one more byte): 4-byte
 * stores, each 4th byte overwritten by the next pixel, the last pixel 3. */
#define PUT_ROW(o, w, px)                          \
    do {                                           \
        uint32_t v_;                               \
        for (int i = 0; i < (w)-1; i++) {          \
            v_ = px(i);                            \
            memcpy((o) + 3 * (size_t)i, &v_, 4);   \
        }                                          \
        v_ = px((w)-1);                            \
        memcpy((o) + 3 * (size_t)((w)-1), &v_, 3); \
    } while (0)

static inline __attribute__((always_inline)) void
warp_nearest(const warp *k, rl_image *img, const uint8_t *fill, int fused)
{
    const uint8_t *restrict src = k->src;
    const int32_t *restrict off = k->off;
    int w = k->w;
    for (int j = 0; j < k->h; j++) {
        row_coords(k, j, fused);
        row_nearest(k);
        uint8_t *restrict o = img->data + (size_t)j * img->stride;
#define NEAREST_PX(i) load4(off[i] >= 0 ? src + 3 * (size_t)off[i] : fill)
        PUT_ROW(o, w, NEAREST_PX);
#undef NEAREST_PX
    }
}

#if WARP_X86
/* A pixel's three bytes and the next one as four floats (the source copy
 * has a byte to spare after its last pixel). */
static inline __m128 px4(const uint8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    __m128i z = _mm_setzero_si128();
    __m128i x = _mm_unpacklo_epi8(_mm_cvtsi32_si128(v), z);
    return _mm_cvtepi32_ps(_mm_unpacklo_epi16(x, z));
}

static inline __m128 sum_plain(const uint8_t *const p[4], const float *w)
{
    __m128 s = _mm_add_ps(_mm_mul_ps(px4(p[0]), _mm_set1_ps(w[0])),
                          _mm_mul_ps(px4(p[1]), _mm_set1_ps(w[1])));
    s = _mm_add_ps(s, _mm_mul_ps(px4(p[2]), _mm_set1_ps(w[2])));
    return _mm_add_ps(s, _mm_mul_ps(px4(p[3]), _mm_set1_ps(w[3])));
}

static inline WARP_FMA __m128 sum_fused(const uint8_t *const p[4],
                                        const float *w)
{
    __m128 s = _mm_mul_ps(px4(p[0]), _mm_set1_ps(w[0]));
    s = _mm_fmadd_ps(px4(p[1]), _mm_set1_ps(w[1]), s);
    s = _mm_fmadd_ps(px4(p[2]), _mm_set1_ps(w[2]), s);
    return _mm_fmadd_ps(px4(p[3]), _mm_set1_ps(w[3]), s);
}

/* (v - f) * m + f when fill, rounded half to even (the MXCSR default), as
 * bytes. */
static inline uint32_t px_bytes(__m128 v, const float *fill, float m)
{
    if (fill != NULL) {
        __m128 f = _mm_loadu_ps(fill);
        v = _mm_add_ps(_mm_mul_ps(_mm_sub_ps(v, f), _mm_set1_ps(m)), f);
    }
    __m128i r = _mm_cvtps_epi32(v);
    r = _mm_packs_epi32(r, r);
    return (uint32_t)_mm_cvtsi128_si32(_mm_packus_epi16(r, r));
}

#define SUM4(p, wt, fused) ((fused) ? sum_fused(p, wt) : sum_plain(p, wt))
#else
static inline uint32_t px_scalar(const uint8_t *const p[4], const float *w,
                                 const float *fill, float m)
{
    uint8_t b[4] = {0, 0, 0, 0};
    for (int c = 0; c < 3; c++) {
        float v = (((float)p[0][c] * w[0] + (float)p[1][c] * w[1]) +
                   (float)p[2][c] * w[2]) +
                  (float)p[3][c] * w[3];
        b[c] = to_u8(fill != NULL ? (v - fill[c]) * m + fill[c] : v);
    }
    uint32_t u;
    memcpy(&u, b, 4);
    return u;
}
#endif

/* One bilinear output pixel from its north-west neighbour p, the offsets
 * of the others and the four weights, as bytes. */
static inline __attribute__((always_inline)) uint32_t
bilinear_px(const uint8_t *p, int32_t dx, int32_t dy, float nw, float ne,
            float sw, float se, const float *fill, int fused)
{
    const uint8_t *q[4] = {p, p + dx, p + dy, p + dy + dx};
    float wt[4] = {nw, ne, sw, se};
    float m = ((nw + ne) + sw) + se;
#if WARP_X86
    return px_bytes(SUM4(q, wt, fused), fill, m);
#else
    (void)fused;
    return px_scalar(q, wt, fill, m);
#endif
}

static inline __attribute__((always_inline)) void
warp_bilinear(const warp *k, rl_image *img, const float *fill, int fused)
{
    const uint8_t *restrict src = k->src;
    const int32_t *restrict col = k->col, *restrict row = k->row;
    const int32_t *restrict dx = k->dx, *restrict dy = k->dy;
    const float *restrict nw = k->nw, *restrict ne = k->ne;
    const float *restrict sw = k->sw, *restrict se = k->se;
    size_t line = 3 * (size_t)k->w;
    int w = k->w;
    for (int j = 0; j < k->h; j++) {
        row_coords(k, j, fused);
        ROW_BILINEAR(k);
        uint8_t *restrict o = img->data + (size_t)j * img->stride;
#define BILINEAR_AT(i)                                                   \
    bilinear_px(src + (size_t)row[i] * line + 3 * (size_t)col[i], dx[i], \
                dy[i], nw[i], ne[i], sw[i], se[i], fill, fused)
        PUT_ROW(o, w, BILINEAR_AT);
#undef BILINEAR_AT
    }
}

static void warp_plain(const warp *k, rl_image *img, rl_interp interp,
                       const uint8_t *fill8, const float *fill)
{
    if (interp == RL_INTERP_NEAREST) {
        warp_nearest(k, img, fill8, 0);
    } else {
        warp_bilinear(k, img, fill, 0);
    }
}

#if WARP_X86
static WARP_FMA void warp_fused(const warp *k, rl_image *img, rl_interp interp,
                                const uint8_t *fill8, const float *fill)
{
    if (interp == RL_INTERP_NEAREST) {
        warp_nearest(k, img, fill8, 1);
    } else {
        warp_bilinear(k, img, fill, 1);
    }
}

/* ATen's AVX2 and AVX512 capabilities both need AVX2 and FMA: the CPU's
 * answer, looked up once (-1: not yet), and the SIMD level in use. */
static int fused_ok(void)
{
    static int cpu = -1;
    int has = __atomic_load_n(&cpu, __ATOMIC_RELAXED);
    if (has < 0) {
        __builtin_cpu_init();
        has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        __atomic_store_n(&cpu, has, __ATOMIC_RELAXED);
    }
    return has && rl_simd_level() >= RL_SIMD_AVX2;
}
#endif

bool rl_warp_fused(void)
{
#if WARP_X86
    return fused_ok();
#else
    return false;
#endif
}

/* The warp of img by the float32 grid coefficients t (t[0..5]: theta's
 * two rows; with persp, t[6], t[7] the denominator's), as rl_k_affine and
 * rl_k_perspective describe. */
static int run_grid(rl_image *img, const float t[8], int persp,
                    rl_interp interp, const double *fill)
{
    int w = img->w, h = img->h;
    if (w <= 0 || h <= 0) {
        return 0;
    }
    if (w > MAX_SIDE || h > MAX_SIDE) {
        return -EOVERFLOW;
    }
    size_t line = (size_t)w * 3, n = (size_t)w;
    /* the source and a spare byte, then 9 float and 5 int arrays of w */
    size_t head = (line * (size_t)h + 1 + 63) & ~(size_t)63;
    uint8_t *mem = malloc(head + n * 14 * 4);
    if (mem == NULL) {
        return -ENOMEM;
    }
    for (int j = 0; j < h; j++) {
        memcpy(mem + (size_t)j * line, img->data + (size_t)j * img->stride,
               line);
    }
    mem[line * (size_t)h] = 0;
    float *fl = (float *)(mem + head);
    int32_t *in = (int32_t *)(fl + 9 * n);

    /* theta divided by half the size, as _affine_grid and
     * _perspective_grid do; x_i is the column's linspace value */
    float hw = 0.5f * (float)w, hh = 0.5f * (float)h;
    float r00 = t[0] / hw, r01 = t[3] / hh;
    float *cx0 = fl, *cx1 = fl + n, *cx2 = fl + 8 * n;
    for (int i = 0; i < w; i++) {
        float x = persp ? (float)i + 0.5f : (float)i - 0.5f * (float)(w - 1);
        cx0[i] = x * r00;
        cx1[i] = x * r01;
        cx2[i] = persp ? x * t[6] : 0.0f;
    }
    warp k = {
        .w = w,
        .h = h,
        .persp = persp,
        .src = mem,
        .r10 = t[1] / hw,
        .r11 = t[4] / hh,
        .r20 = t[2] / hw,
        .r21 = t[5] / hh,
        .half_w = (float)w / 2.0f,
        .half_h = (float)h / 2.0f,
        .hi_x = (float)w + 3.0f,
        .hi_y = (float)h + 3.0f,
        .cx0 = cx0,
        .cx1 = cx1,
        .cx2 = cx2,
        .c7 = persp ? t[7] : 0.0f,
        .ix = fl + 2 * n,
        .iy = fl + 3 * n,
        .nw = fl + 4 * n,
        .ne = fl + 5 * n,
        .sw = fl + 6 * n,
        .se = fl + 7 * n,
        .off = in,
        .col = in,
        .row = in + n,
        .dx = in + 2 * n,
        .dy = in + 3 * n,
    };
    /* nearest: the fill rounded, as torchvision's round_ after choosing it
     * (a 4th byte for 4-byte reads); bilinear: blended as float32 */
    uint8_t fill8[4] = {0, 0, 0, 0};
    float fillf[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int c = 0; fill != NULL && c < 3; c++) {
        fillf[c] = (float)fill[c];
        fill8[c] = to_u8(fillf[c]);
    }
    const float *ff = fill != NULL ? fillf : NULL;
#if WARP_X86
    if (fused_ok()) {
        warp_fused(&k, img, interp, fill8, ff);
    } else {
        warp_plain(&k, img, interp, fill8, ff);
    }
#else
    warp_plain(&k, img, interp, fill8, ff);
#endif
    free(mem);
    return 0;
}

int rl_k_affine(rl_image *img, const double m[6], rl_interp interp,
                const double *fill)
{
    /* theta as float32 */
    float t[8] = {0.0f};
    for (int i = 0; i < 6; i++) {
        t[i] = (float)m[i];
    }
    return run_grid(img, t, 0, interp, fill);
}

int rl_k_perspective(rl_image *img, const double coeffs[8], rl_interp interp,
                     const double *fill)
{
    /* theta1 and theta2 as float32 */
    float t[8];
    for (int i = 0; i < 8; i++) {
        t[i] = (float)coeffs[i];
    }
    return run_grid(img, t, 1, interp, fill);
}
