/*
 * augment/pil_warp.c - Image.transform(size, AFFINE, a, resample,
 * fillcolor) on an RGB image, as Pillow's Geometry.c computes it, with its
 * bilinear and bicubic filters: what timm's Rotate, ShearX/Y and
 * TranslateX/Y call (rl_pil_rotate in pil.c ends here too).
 *
 * DESIGN: every output pixel samples the input at its centre mapped by the
 * forward matrix (output to input), computed in double in Pillow's order
 * ((a0 * xc + a1 * yc) + a2); a centre outside the image keeps the fill
 * colour. The filters read a 2x2 (bilinear) or 4x4 (bicubic) window, its
 * columns and first row clamped into the image and each further row
 * outside it repeating the row before, as Pillow's XCLIP/YCLIP and its
 * "y + k inside" tests do. Bilinear: a + (b - a) * d along x, then along y,
 * truncated. Bicubic (a = -0.5): Pillow's polynomial p1 + d * (p2 + d *
 * (p3 + d * p4)) along x on each of the four rows, its p's from integer
 * pixel values (exact), then along y on the four doubles, clipped to
 * 0..255 and truncated. Every operation is a double rounding in that
 * order, with no fused multiply-add (the pragma below, and the AVX2 code
 * is compiled without FMA), so the bytes are Pillow's on x86-64.
 *
 * Speed (a 224x224 bicubic rotation took 2.8 ms in a per-pixel loop doing
 * all of this per channel, Pillow 1.8 ms; now 0.5 ms at AVX2, 1.1 ms in
 * C): each output row goes in two passes. The first finds every pixel's
 * point: the matrix, the test against the image, the floor and the
 * offsets (four pixels at a time at AVX2, with the same operations on
 * each lane). The second samples: where the window lies inside the image
 * (nearly every pixel) its taps are read from the image's rows, at the
 * edges the clamped taps are first copied into a small buffer laid out
 * the same way, so that one kernel serves both. The AVX2 kernels (where
 * the SIMD level, rl_simd_level(), is AVX2) hold a row's taps as int32
 * lanes (R, G, B, 0), make the p's in integers and evaluate the
 * polynomial on four doubles at once: the lanes are the channels, each
 * doing the scalar code's operations. Where d is 0 the polynomial is p1
 * exactly (p1 + 0 * finite), so a direction with d = 0 (every pixel of a
 * translation by whole pixels, ShearX's y, ShearY's x) skips its
 * arithmetic: the centre taps are the result.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "augment/kernels.h"
#include "simd.h"

/* No fused multiply-adds, whatever the -std: Pillow rounds each step. */
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

/* RL_PIL_WARP_PORTABLE: the portable code only (to test it on x86). */
#if defined(__GNUC__) && defined(__SSE2__) && \
    !defined(RL_PIL_WARP_PORTABLE) &&         \
    (defined(__x86_64__) || defined(__i386__))
#define PW_AVX2 1
#include <immintrin.h>
#define PW_TARGET __attribute__((target("avx2")))
#else
#define PW_AVX2 0
#endif

/* The source: a copy of the image, rows stride bytes apart, with 16 bytes
 * of slack after the last row for the kernels' 16-byte loads. */
typedef struct pw_src {
    const uint8_t *data;
    int w, h;
    size_t stride;
} pw_src;

#define SRC_ROW(s, y) ((s)->data + (size_t)(y) * (s)->stride)
#define SLACK 16
/* Where a pixel's centre falls outside: no window. */
#define OUTSIDE INT32_MIN

/* One output row's sampling points: for pixel x, the window's first
 * column and row (ix, iy: OUTSIDE for a centre outside the image) and the
 * point's offsets (dx, dy) from the tap before it. */
typedef struct pw_row {
    int32_t *ix, *iy;
    double *dx, *dy;
} pw_row;

static inline int clampi(int v, int n)
{
    return v < 0 ? 0 : v < n ? v : n - 1;
}

/* Geometry.c's FLOOR (which is floor), for any v in int's range. */
static inline int floor_int(double v)
{
    int i = (int)v;
    return i - ((double)i > v);
}

/* The points of output pixels [x0, n) of row y: the centre (x + 0.5, y +
 * 0.5) through a in Pillow's order, tested against the image (NaN falls
 * outside, where Pillow would not survive it), less 0.5, its floor and
 * what is left; back: how many taps the window starts before the floor
 * (1 bicubic, 0 bilinear). */
static inline void coords_c(const double a[6], int y, int x0, int n, int w,
                            int h, int back, pw_row *r)
{
    double yc = y + 0.5;
    double bx = a[1] * yc, by = a[4] * yc;
    for (int x = x0; x < n; x++) {
        double xc = x + 0.5;
        double xin = a[0] * xc + bx + a[2];
        double yin = a[3] * xc + by + a[5];
        if (!(xin >= 0.0 && xin < w && yin >= 0.0 && yin < h)) {
            r->ix[x] = OUTSIDE;
            continue;
        }
        xin -= 0.5;
        yin -= 0.5;
        int fx = floor_int(xin), fy = floor_int(yin);
        r->dx[x] = xin - fx;
        r->dy[x] = yin - fy;
        r->ix[x] = fx - back;
        r->iy[x] = fy - back;
    }
}

/* The edge window of n taps a row (first tap x, y) into buf, rows 16 bytes
 * apart, each tap 3 bytes: Pillow's taps, the columns and first row
 * clamped into the image, each further row outside repeating the one
 * before. */
static void edge_window(const pw_src *s, int x, int y, int n,
                        uint8_t buf[4][16])
{
    const uint8_t *row = SRC_ROW(s, clampi(y, s->h));
    for (int k = 0; k < n; k++) {
        if (k > 0 && y + k >= 0 && y + k < s->h) {
            row = SRC_ROW(s, y + k);
        } /* else: the row before, again */
        for (int j = 0; j < n; j++) {
            memcpy(buf[k] + 3 * j, row + 3 * clampi(x + j, s->w), 3);
        }
    }
}

/* Geometry.c's BICUBIC on doubles, in Pillow's order: -v1 + v3 is v3 - v1
 * in IEEE arithmetic, -v1 + v2 is v2 - v1. */
static inline double cubic(double v1, double v2, double v3, double v4, double d)
{
    double p2 = v3 - v1;
    double p3 = 2 * (v1 - v2) + v3 - v4;
    double p4 = v2 - v1 - v3 + v4;
    return v2 + d * (p2 + d * (p3 + d * p4));
}

/* The same on one channel's four taps t (3 bytes apart): Pillow computes
 * the p's of uint8 values in int, exact. */
static inline double cubic_taps(const uint8_t *t, double d)
{
    int t0 = t[0], t1 = t[3], t2 = t[6], t3 = t[9];
    if (d == 0.0) {
        return t1;
    }
    double p2 = t2 - t0;
    double p3 = 2 * (t0 - t1) + t2 - t3;
    double p4 = -t0 + t1 - t2 + t3;
    return t1 + d * (p2 + d * (p3 + d * p4));
}

static inline uint8_t clip_trunc(double v)
{
    return v <= 0.0 ? 0 : v >= 255.0 ? 255 : (uint8_t)v;
}

/* The bicubic pixel of the window at p (rows stride bytes apart). */
static inline void bicubic_c(const uint8_t *p, size_t stride, double dx,
                             double dy, uint8_t *out)
{
    for (int c = 0; c < 3; c++) {
        double v;
        if (dy == 0.0) { /* the row at the point alone */
            v = cubic_taps(p + stride + c, dx);
        } else {
            v = cubic(cubic_taps(p + c, dx), cubic_taps(p + stride + c, dx),
                      cubic_taps(p + 2 * stride + c, dx),
                      cubic_taps(p + 3 * stride + c, dx), dy);
        }
        out[c] = clip_trunc(v);
    }
}

/* Geometry.c's bilinear pixel of the window at p; the sums cannot leave
 * 0..255 (each is a rounded convex mix). */
static inline void bilinear_c(const uint8_t *p, size_t stride, double dx,
                              double dy, uint8_t *out)
{
    const uint8_t *q = p + stride;
    for (int c = 0; c < 3; c++) {
        double v1 = p[c] + (p[c + 3] - p[c]) * dx;
        double v2 = q[c] + (q[c + 3] - q[c]) * dx;
        v1 = v1 + (v2 - v1) * dy;
        out[c] = (uint8_t)v1;
    }
}

#if PW_AVX2
/* coords_c on pixels [0, n), four at a time (the tail by coords_c): the
 * same operations on each lane; floor is exact. */
PW_TARGET static void coords_avx2(const double a[6], int y, int n, int w, int h,
                                  int back, pw_row *r)
{
    double yc = y + 0.5;
    __m256d a0 = _mm256_set1_pd(a[0]), a3 = _mm256_set1_pd(a[3]);
    __m256d bx = _mm256_set1_pd(a[1] * yc), by = _mm256_set1_pd(a[4] * yc);
    __m256d a2 = _mm256_set1_pd(a[2]), a5 = _mm256_set1_pd(a[5]);
    __m256d zero = _mm256_setzero_pd(), half = _mm256_set1_pd(0.5);
    __m256d wd = _mm256_set1_pd(w), hd = _mm256_set1_pd(h);
    __m256d outside = _mm256_set1_pd(OUTSIDE), bk = _mm256_set1_pd(back);
    __m256d xc = _mm256_setr_pd(0.5, 1.5, 2.5, 3.5);
    int x = 0;
    for (; x + 4 <= n; x += 4) {
        __m256d xin =
            _mm256_add_pd(_mm256_add_pd(_mm256_mul_pd(a0, xc), bx), a2);
        __m256d yin =
            _mm256_add_pd(_mm256_add_pd(_mm256_mul_pd(a3, xc), by), a5);
        __m256d in =
            _mm256_and_pd(_mm256_and_pd(_mm256_cmp_pd(xin, zero, _CMP_GE_OQ),
                                        _mm256_cmp_pd(xin, wd, _CMP_LT_OQ)),
                          _mm256_and_pd(_mm256_cmp_pd(yin, zero, _CMP_GE_OQ),
                                        _mm256_cmp_pd(yin, hd, _CMP_LT_OQ)));
        xin = _mm256_sub_pd(xin, half);
        yin = _mm256_sub_pd(yin, half);
        __m256d fx = _mm256_floor_pd(xin), fy = _mm256_floor_pd(yin);
        _mm256_storeu_pd(r->dx + x, _mm256_sub_pd(xin, fx));
        _mm256_storeu_pd(r->dy + x, _mm256_sub_pd(yin, fy));
        fx = _mm256_blendv_pd(outside, _mm256_sub_pd(fx, bk), in);
        fy = _mm256_blendv_pd(outside, _mm256_sub_pd(fy, bk), in);
        _mm_storeu_si128((__m128i *)(r->ix + x), _mm256_cvttpd_epi32(fx));
        _mm_storeu_si128((__m128i *)(r->iy + x), _mm256_cvttpd_epi32(fy));
        xc = _mm256_add_pd(xc, _mm256_set1_pd(4.0)); /* exact */
    }
    coords_c(a, y, x, n, w, h, back, r);
}

/* Tap j of a row's 16 bytes as int32 lanes (R, G, B, 0). */
#define TAP_MASK(j)                                                          \
    _mm_setr_epi8(3 * (j), -1, -1, -1, 3 * (j) + 1, -1, -1, -1, 3 * (j) + 2, \
                  -1, -1, -1, -1, -1, -1, -1)

/* p1 + d * (p2 + d * (p3 + d * p4)), lane by lane. */
PW_TARGET static inline __m256d horner(__m256d p1, __m256d p2, __m256d p3,
                                       __m256d p4, __m256d d)
{
    __m256d v = _mm256_add_pd(p3, _mm256_mul_pd(d, p4));
    v = _mm256_add_pd(p2, _mm256_mul_pd(d, v));
    return _mm256_add_pd(p1, _mm256_mul_pd(d, v));
}

/* cubic_taps on the three channels of the row at p. */
PW_TARGET static inline __m256d row_avx2(const uint8_t *p, __m256d d, bool zero)
{
    __m128i b = _mm_loadu_si128((const __m128i *)p);
    __m128i t1 = _mm_shuffle_epi8(b, TAP_MASK(1));
    if (zero) {
        return _mm256_cvtepi32_pd(t1);
    }
    __m128i t0 = _mm_shuffle_epi8(b, TAP_MASK(0));
    __m128i t2 = _mm_shuffle_epi8(b, TAP_MASK(2));
    __m128i t3 = _mm_shuffle_epi8(b, TAP_MASK(3));
    __m128i d01 = _mm_sub_epi32(t0, t1);
    __m128i p3 = _mm_sub_epi32(_mm_add_epi32(_mm_add_epi32(d01, d01), t2), t3);
    __m128i p4 = _mm_add_epi32(_mm_sub_epi32(_mm_sub_epi32(t1, t0), t2), t3);
    return horner(_mm256_cvtepi32_pd(t1),
                  _mm256_cvtepi32_pd(_mm_sub_epi32(t2, t0)),
                  _mm256_cvtepi32_pd(p3), _mm256_cvtepi32_pd(p4), d);
}

/* Truncated (v already within 0..255), the three bytes written. */
PW_TARGET static inline void put_avx2(__m256d v, uint8_t *out)
{
    __m128i i = _mm256_cvttpd_epi32(v);
    i = _mm_shuffle_epi8(i, _mm_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1,
                                          -1, -1, -1, -1, -1, -1));
    uint32_t u = (uint32_t)_mm_cvtsi128_si32(i);
    memcpy(out, &u, 3); /* little-endian: R, G, B */
}

PW_TARGET static inline __m256d clip_avx2(__m256d v)
{
    return _mm256_min_pd(_mm256_max_pd(v, _mm256_setzero_pd()),
                         _mm256_set1_pd(255.0));
}

/* bicubic_c, the lanes being the channels. */
PW_TARGET static inline void bicubic_avx2(const uint8_t *p, size_t stride,
                                          double dx, double dy, uint8_t *out)
{
    __m256d vdx = _mm256_set1_pd(dx);
    bool zx = dx == 0.0;
    if (dy == 0.0) {
        put_avx2(clip_avx2(row_avx2(p + stride, vdx, zx)), out);
        return;
    }
    __m256d v1 = row_avx2(p, vdx, zx);
    __m256d v2 = row_avx2(p + stride, vdx, zx);
    __m256d v3 = row_avx2(p + 2 * stride, vdx, zx);
    __m256d v4 = row_avx2(p + 3 * stride, vdx, zx);
    __m256d d12 = _mm256_sub_pd(v1, v2);
    __m256d p3 = _mm256_sub_pd(_mm256_add_pd(_mm256_add_pd(d12, d12), v3), v4);
    __m256d p4 = _mm256_add_pd(_mm256_sub_pd(_mm256_sub_pd(v2, v1), v3), v4);
    __m256d v = horner(v2, _mm256_sub_pd(v3, v1), p3, p4, _mm256_set1_pd(dy));
    put_avx2(clip_avx2(v), out);
}

/* bilinear_c, the lanes being the channels. */
PW_TARGET static inline void bilinear_avx2(const uint8_t *p, size_t stride,
                                           double dx, double dy, uint8_t *out)
{
    __m128i r0 = _mm_loadl_epi64((const __m128i *)p);
    __m128i r1 = _mm_loadl_epi64((const __m128i *)(p + stride));
    __m128i a0 = _mm_shuffle_epi8(r0, TAP_MASK(0));
    __m128i a1 = _mm_shuffle_epi8(r1, TAP_MASK(0));
    __m128i e0 = _mm_sub_epi32(_mm_shuffle_epi8(r0, TAP_MASK(1)), a0);
    __m128i e1 = _mm_sub_epi32(_mm_shuffle_epi8(r1, TAP_MASK(1)), a1);
    __m256d vdx = _mm256_set1_pd(dx);
    __m256d v1 = _mm256_add_pd(_mm256_cvtepi32_pd(a0),
                               _mm256_mul_pd(_mm256_cvtepi32_pd(e0), vdx));
    __m256d v2 = _mm256_add_pd(_mm256_cvtepi32_pd(a1),
                               _mm256_mul_pd(_mm256_cvtepi32_pd(e1), vdx));
    v1 = _mm256_add_pd(
        v1, _mm256_mul_pd(_mm256_sub_pd(v2, v1), _mm256_set1_pd(dy)));
    put_avx2(v1, out);
}
#else
#define coords_avx2(a, y, n, w, h, back, r) coords_c(a, y, 0, n, w, h, back, r)
#define bicubic_avx2 bicubic_c
#define bilinear_avx2 bilinear_c
#endif

/* The warp of all rows of img from s, the filter and kernels fixed. */
static inline __attribute__((always_inline)) void
warp_rows(const pw_src *s, rl_image *img, const double a[6], int resample,
          const uint8_t fill[3], pw_row *r, bool avx2)
{
    int n = resample == RL_PIL_BICUBIC ? 4 : 2, back = n == 4 ? 1 : 0;
    int w = s->w, h = s->h;
    uint8_t buf[4][16] = {{0}};
    for (int y = 0; y < img->h; y++) {
        if (avx2) {
            coords_avx2(a, y, img->w, w, h, back, r);
        } else {
            coords_c(a, y, 0, img->w, w, h, back, r);
        }
        uint8_t *out = img->data + (size_t)y * img->stride;
        for (int x = 0; x < img->w; x++, out += 3) {
            int32_t ix = r->ix[x], iy = r->iy[x];
            const uint8_t *p;
            size_t stride;
            if (ix >= 0 && ix <= w - n && iy >= 0 && iy <= h - n) {
                /* all taps inside */
                p = SRC_ROW(s, iy) + (size_t)ix * 3;
                stride = s->stride;
            } else if (ix == OUTSIDE) {
                memcpy(out, fill, 3);
                continue;
            } else {
                edge_window(s, ix, iy, n, buf);
                p = buf[0];
                stride = sizeof(buf[0]);
            }
            if (n == 2) {
                (avx2 ? bilinear_avx2 : bilinear_c)(p, stride, r->dx[x],
                                                    r->dy[x], out);
            } else {
                (avx2 ? bicubic_avx2 : bicubic_c)(p, stride, r->dx[x], r->dy[x],
                                                  out);
            }
        }
    }
}

#if PW_AVX2
PW_TARGET static void warp_avx2(const pw_src *s, rl_image *img,
                                const double a[6], int resample,
                                const uint8_t fill[3], pw_row *r)
{
    warp_rows(s, img, a, resample, fill, r, true);
}
#endif

static void warp_c(const pw_src *s, rl_image *img, const double a[6],
                   int resample, const uint8_t fill[3], pw_row *r)
{
    warp_rows(s, img, a, resample, fill, r, false);
}

int rl_pil_affine(rl_image *img, const double a[6], int resample,
                  const uint8_t fill[3])
{
    size_t stride = (size_t)img->w * 3, w = (size_t)img->w;
    /* the row's points, then the source's copy and its slack at the end
     * of the block (so that a sanitizer sees a read beyond the slack) */
    size_t points = w * (2 * sizeof(double) + 2 * sizeof(int32_t));
    uint8_t *mem = malloc(points + stride * img->h + SLACK);
    if (mem == NULL) {
        return -ENOMEM;
    }
    double *d = (double *)mem;
    pw_row r = {(int32_t *)(d + 2 * w), (int32_t *)(d + 2 * w) + w, d, d + w};
    uint8_t *copy = mem + points;
    for (int y = 0; y < img->h; y++) {
        memcpy(copy + (size_t)y * stride, img->data + (size_t)y * img->stride,
               stride);
    }
    memset(copy + stride * img->h, 0, SLACK);
    pw_src s = {copy, img->w, img->h, stride};
#if PW_AVX2
    if (rl_simd_level() == RL_SIMD_AVX2) {
        warp_avx2(&s, img, a, resample, fill, &r);
        free(mem);
        return 0;
    }
#endif
    warp_c(&s, img, a, resample, fill, &r);
    free(mem);
    return 0;
}
