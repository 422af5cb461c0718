/*
 * augment/color_hist.c - the colour kernels other than color.c's: invert,
 * posterize and solarize (byte by byte), autocontrast and equalize (per
 * channel statistics, then a table per channel), sharpness (3x3) and
 * gaussian_blur (separable).
 *
 * DESIGN: as in color.c, each follows torchvision's v2 kernel on uint8
 * tensors step by step. autocontrast and equalize end in a 256-entry table
 * per channel, computed with torch's arithmetic, so they are exact.
 * adjust_sharpness rounds the 3x3 blur (1 1 1 / 1 5 1 / 1 1 1) / 13 of
 * whole numbers, k / 13, which is never within 1/26 of a half: it is
 * (k + 6) / 13 in integers, and the blend is torch's add with alpha,
 * fused or plain as color.c's kernels round it, so it is exact too. gaussian_blur builds torch's float32 kernel
 * (linspace, softmax) but convolves separably in float32 where torch
 * convolves with the 2-D kernel, so a value within ~1e-5 of .5 can round
 * the other way: at most 1 LSB. Where the image is no larger than the
 * kernel's half width torch refuses (reflect padding needs pad < size);
 * here the reflection repeats, as numpy.pad(mode="reflect") does.
 * The blur and sharpness loops have an AVX2 copy, used at the AVX2 SIMD
 * level (place.h); both copies give the same bytes.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "augment/kernels.h"
#include "simd.h"

#define ROW(img, y) ((img)->data + (size_t)(y) * (img)->stride)

/* ---- value by value: invert, posterize, solarize ---- */

int rl_k_invert(rl_image *img)
{
    int n = img->w * 3;
    for (int y = 0; y < img->h; y++) {
        uint8_t *row = ROW(img, y);
        for (int i = 0; i < n; i++) {
            row[i] = (uint8_t)~row[i];
        }
    }
    return 0;
}

/* Keeps the high `bits` bits: all 8 leave the image alone, 0 makes it
 * black. */
int rl_k_posterize(rl_image *img, int bits)
{
    if (bits >= 8) {
        return 0;
    }
    uint8_t mask = bits <= 0 ? 0 : (uint8_t)(0xff << (8 - bits));
    int n = img->w * 3;
    for (int y = 0; y < img->h; y++) {
        uint8_t *row = ROW(img, y);
        for (int i = 0; i < n; i++) {
            row[i] &= mask;
        }
    }
    return 0;
}

/* Inverts the values >= threshold, compared in float32 as torch does (a
 * NaN threshold inverts nothing). */
int rl_k_solarize(rl_image *img, double threshold)
{
    float t = (float)threshold;
    if (!(t <= 255.0f)) {
        return 0;
    }
    uint8_t lo = t <= 0.0f ? 0 : (uint8_t)(int)ceilf(t);
    int n = img->w * 3;
    for (int y = 0; y < img->h; y++) {
        uint8_t *row = ROW(img, y);
        for (int i = 0; i < n; i++) {
            row[i] = row[i] >= lo ? (uint8_t)~row[i] : row[i];
        }
    }
    return 0;
}

/* ---- per-channel tables: autocontrast, equalize ---- */

void rl__image_apply_luts(rl_image *img, const uint8_t lut[3][256])
{
    for (int y = 0; y < img->h; y++) {
        uint8_t *row = ROW(img, y);
        for (int x = 0; x < img->w; x++) {
            row[3 * x] = lut[0][row[3 * x]];
            row[3 * x + 1] = lut[1][row[3 * x + 1]];
            row[3 * x + 2] = lut[2][row[3 * x + 2]];
        }
    }
}

void rl__image_histograms(const rl_image *img, uint32_t hist[3][256])
{
    memset(hist, 0, sizeof(uint32_t) * 3 * 256);
    for (int y = 0; y < img->h; y++) {
        const uint8_t *row = ROW(img, y);
        for (int x = 0; x < img->w; x++) {
            hist[0][row[3 * x]]++;
            hist[1][row[3 * x + 1]]++;
            hist[2][row[3 * x + 2]]++;
        }
    }
}

/* Each channel's smallest and largest values, 48 bytes (16 pixels) a step,
 * so that byte l of every step is of channel l % 3 (a vectorised loop). */
static void min_max(const rl_image *img, int lo[3], int hi[3])
{
    uint8_t mn[48], mx[48];
    memset(mn, 255, sizeof(mn));
    memset(mx, 0, sizeof(mx));
    int n = img->w * 3;
    for (int y = 0; y < img->h; y++) {
        const uint8_t *row = ROW(img, y);
        int i = 0;
        for (; i + 48 <= n; i += 48) {
            for (int l = 0; l < 48; l++) {
                mn[l] = row[i + l] < mn[l] ? row[i + l] : mn[l];
                mx[l] = row[i + l] > mx[l] ? row[i + l] : mx[l];
            }
        }
        for (int l = 0; i < n; i++, l++) {
            mn[l] = row[i] < mn[l] ? row[i] : mn[l];
            mx[l] = row[i] > mx[l] ? row[i] : mx[l];
        }
    }
    for (int c = 0; c < 3; c++) {
        lo[c] = 255;
        hi[c] = 0;
        for (int l = c; l < 48; l += 3) {
            lo[c] = mn[l] < lo[c] ? mn[l] : lo[c];
            hi[c] = mx[l] > hi[c] ? mx[l] : hi[c];
        }
    }
}

/* Each channel stretched from [min, max] to [0, 255]: (v - min) /
 * ((max - min) * (1 / 255)) in float32, truncated; a constant channel is
 * left alone. */
int rl_k_autocontrast(rl_image *img)
{
    int lo[3], hi[3];
    uint8_t lut[3][256];
    min_max(img, lo, hi);
    for (int c = 0; c < 3; c++) {
        float mn = (float)lo[c];
        float inv_scale = (float)(hi[c] - lo[c]) * (float)(1.0 / 255.0);
        if (hi[c] == lo[c]) { /* torch: minimum 0, inv_scale 1 */
            mn = 0.0f;
            inv_scale = 1.0f;
        }
        for (int v = 0; v < 256; v++) {
            float d = ((float)v - mn) / inv_scale;
            d = d > 0.0f ? d : 0.0f;
            lut[c][v] = (uint8_t)(int)(d < 255.0f ? d : 255.0f);
        }
    }
    rl__image_apply_luts(img, lut);
    return 0;
}

/* torch's equalize (PIL's scheme): step = (pixels not of the channel's
 * largest value) // 255; lut[0] = 0, lut[k] = min(255, (cum[k - 1] +
 * step // 2) // step); a channel with step 0 is left alone. */
int rl_k_equalize(rl_image *img)
{
    uint32_t hist[3][256];
    uint8_t lut[3][256];
    rl__image_histograms(img, hist);
    int64_t n = (int64_t)img->w * img->h;
    for (int c = 0; c < 3; c++) {
        int top = 255;
        while (top > 0 && hist[c][top] == 0) {
            top--;
        }
        int64_t step = (n - hist[c][top]) / 255;
        int64_t cum = 0;
        lut[c][0] = 0;
        for (int v = 0; v < 256; v++) {
            if (step == 0) {
                lut[c][v] = (uint8_t)v;
                continue;
            }
            if (v > 0) {
                int64_t q = (cum + step / 2) / step;
                lut[c][v] = (uint8_t)(q < 255 ? q : 255);
            }
            cum += hist[c][v];
        }
    }
    rl__image_apply_luts(img, lut);
    return 0;
}

/* How sharpen_body rounds v + (1 - f) * d, torch's add with alpha: fused
 * by the instruction (the AVX2 copy), fused in double (the exact product,
 * one rounding), or plain (rl_color_fused() false). */
enum { SHARPEN_FMA, SHARPEN_DOUBLE, SHARPEN_PLAIN };

/* One output row of adjust_sharpness: pixels 1 .. w - 2 of row `out`, from
 * the original rows above (up), of (mid) and below (down) it. */
static inline __attribute__((always_inline)) void
sharpen_body(uint8_t *restrict out, const uint8_t *up, const uint8_t *mid,
             const uint8_t *down, int w, float alpha, int how)
{
    for (int i = 3; i < 3 * (w - 1); i++) {
        int k = up[i - 3] + up[i] + up[i + 3] + mid[i - 3] + 5 * mid[i] +
                mid[i + 3] + down[i - 3] + down[i] + down[i + 3];
        /* round(k / 13) - v; (k + 6) / 13 is (k + 6) * 5042 >> 16 here */
        int d = ((k + 6) * 5042 >> 16) - mid[i];
        float x;
        if (how == SHARPEN_FMA) { /* the caller keeps |x| < 2^31 */
            x = __builtin_fmaf((float)d, alpha, (float)mid[i]);
        } else {
            if (how == SHARPEN_DOUBLE) {
                x = (float)((double)d * (double)alpha + (double)mid[i]);
            } else {
                float p = (float)d * alpha;
                x = p + (float)mid[i];
            }
            x = x < 255.0f ? (x > -1.0f ? x : -1.0f) : 255.0f;
        }
        int v = (int)x;
        v = v > 0 ? v : 0;
        out[i] = (uint8_t)(v < 255 ? v : 255);
    }
}

static void sharpen_c(uint8_t *out, const uint8_t *up, const uint8_t *mid,
                      const uint8_t *down, int w, float alpha)
{
    sharpen_body(out, up, mid, down, w, alpha, SHARPEN_DOUBLE);
}

static void sharpen_plain(uint8_t *out, const uint8_t *up, const uint8_t *mid,
                          const uint8_t *down, int w, float alpha)
{
    sharpen_body(out, up, mid, down, w, alpha, SHARPEN_PLAIN);
}

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
__attribute__((target("avx2,fma"))) static void
sharpen_fma(uint8_t *out, const uint8_t *up, const uint8_t *mid,
            const uint8_t *down, int w, float alpha)
{
    sharpen_body(out, up, mid, down, w, alpha, SHARPEN_FMA);
}

/* AVX2 (the SIMD level, which has initialised the CPU model) and FMA */
static bool has_fma(void)
{
    return rl_simd_level() == RL_SIMD_AVX2 && __builtin_cpu_supports("fma");
}
#else
#define sharpen_fma sharpen_c
static bool has_fma(void)
{
    return false;
}
#endif

/* The border pixels stay as they are; images of 2 rows or columns or less
 * are returned unchanged, as torch does. */
int rl_k_sharpness(rl_image *img, double factor)
{
    int w = img->w, h = img->h;
    if (w <= 2 || h <= 2) {
        return 0;
    }
    size_t n = (size_t)w * 3;
    uint8_t *buf = malloc(2 * n);
    if (buf == NULL) {
        return -ENOMEM;
    }
    uint8_t *up = buf, *mid = buf + n; /* originals of rows y - 1, y */
    float alpha = (float)(1.0 - factor);
    memcpy(up, ROW(img, 0), n);
    memcpy(mid, ROW(img, 1), n);
    void (*row)(uint8_t *, const uint8_t *, const uint8_t *, const uint8_t *,
                int, float) = !rl_color_fused() ? sharpen_plain
                              : has_fma() && fabs(factor) < 4194304.0
                                  ? sharpen_fma
                                  : sharpen_c;
    for (int y = 1; y < h - 1; y++) {
        row(ROW(img, y), up, mid, ROW(img, y + 1), w, alpha);
        uint8_t *t = up;
        up = mid;
        mid = t;
        if (y + 1 < h - 1) {
            memcpy(mid, ROW(img, y + 1), n);
        }
    }
    free(buf);
    return 0;
}

/* torch's float32 1-D kernel: softmax(-(linspace(-lim, lim, k) / sigma)^2)
 * with lim = (k - 1) / (2 sqrt 2). */
static void gauss_taps(int k, double sigma, float *taps)
{
    double lim = (k - 1) / (2.0 * sqrt(2.0));
    float start = (float)-lim, end = (float)lim;
    float step = k > 1 ? (end - start) / (float)(k - 1) : 0.0f;
    float s = (float)sigma, top = -INFINITY, sum = 0.0f;
    for (int i = 0; i < k; i++) {
        float x = i < k / 2 ? start + step * (float)i
                            : end - step * (float)(k - 1 - i);
        x = x / s;
        taps[i] = -(x * x);
        top = taps[i] > top ? taps[i] : top;
    }
    for (int i = 0; i < k; i++) {
        taps[i] = expf(taps[i] - top);
        sum += taps[i];
    }
    for (int i = 0; i < k; i++) {
        taps[i] /= sum;
    }
}

/* Index i of 0 .. n - 1 reflected about the edges (no edge repeat), as
 * often as it takes. */
static int reflect(int i, int n)
{
    if (n == 1) {
        return 0;
    }
    int period = 2 * (n - 1);
    i %= period;
    i = i < 0 ? i + period : i;
    return i < n ? i : period - i;
}

/* Rounds to nearest, ties to even, as torch's round_ (0 <= x < 2^22). */
static inline __attribute__((always_inline)) float round_even(float x)
{
    float r = x + 12582912.0f; /* 1.5 * 2^23: drops the fraction */
    return r - 12582912.0f;
}

/* The convolution runs 4 float vectors (GCC's vector extension: 4 floats
 * for SSE2, 8 for AVX2) a step, whose sums are independent, and adds the
 * symmetric taps' pixels before multiplying (the kernel is symmetric). Both
 * copies do the same float operations (no FMA), so give the same bytes. */
typedef float f4 __attribute__((vector_size(16)));

/* acc, a V, += t * (the V at src[j] + o + the V at src[k - 1 - j] + o) */
#define TAP(acc, V, t, o)                              \
    do {                                               \
        V x_, y_;                                      \
        memcpy(&x_, src[j] + (o), sizeof(x_));         \
        memcpy(&y_, src[k - 1 - j] + (o), sizeof(y_)); \
        acc += (t) * (x_ + y_);                        \
    } while (0)

/* The V of outputs at out + o. */
#define CONV_STEP(V, o)                        \
    do {                                       \
        V a_;                                  \
        memcpy(&a_, src[r] + (o), sizeof(a_)); \
        a_ *= taps[r];                         \
        for (int j = 0; j < r; j++) {          \
            TAP(a_, V, taps[j], o);            \
        }                                      \
        memcpy(out + (o), &a_, sizeof(a_));    \
    } while (0)

/* The 4 Vs (of L floats) of outputs at out + o, in registers. */
#define CONV_STEP4(V, L, o)                              \
    do {                                                 \
        V a0, a1, a2, a3;                                \
        memcpy(&a0, src[r] + (o), sizeof(a0));           \
        memcpy(&a1, src[r] + (o) + (L), sizeof(a1));     \
        memcpy(&a2, src[r] + (o) + 2 * (L), sizeof(a2)); \
        memcpy(&a3, src[r] + (o) + 3 * (L), sizeof(a3)); \
        a0 *= taps[r];                                   \
        a1 *= taps[r];                                   \
        a2 *= taps[r];                                   \
        a3 *= taps[r];                                   \
        for (int j = 0; j < r; j++) {                    \
            TAP(a0, V, taps[j], o);                      \
            TAP(a1, V, taps[j], (o) + (L));              \
            TAP(a2, V, taps[j], (o) + 2 * (L));          \
            TAP(a3, V, taps[j], (o) + 3 * (L));          \
        }                                                \
        memcpy(out + (o), &a0, sizeof(a0));              \
        memcpy(out + (o) + (L), &a1, sizeof(a1));        \
        memcpy(out + (o) + 2 * (L), &a2, sizeof(a2));    \
        memcpy(out + (o) + 3 * (L), &a3, sizeof(a3));    \
    } while (0)

/* out[i] = taps[r] * src[r][i] + the sum over j < r of taps[j] * (src[j][i]
 * + src[k - 1 - j][i]), r = k / 2, for i < n; V a vector of L floats. */
#define CONV(name, attr, V, L)                                               \
    attr static void name(const float *const *src, const float *taps, int k, \
                          int n, float *out)                                 \
    {                                                                        \
        int i = 0, r = k / 2;                                                \
        for (; i + 4 * (L) <= n; i += 4 * (L)) {                             \
            CONV_STEP4(V, L, i);                                             \
        }                                                                    \
        for (; i + (L) <= n; i += (L)) {                                     \
            CONV_STEP(V, i);                                                 \
        }                                                                    \
        for (; i < n; i++) {                                                 \
            CONV_STEP(float, i);                                             \
        }                                                                    \
    }

/* n floats rounded half to even, as torch's round_, and clamped, to bytes
 * (a plain loop, vectorised): the taps are positive and add up to 1 within
 * ~1e-6, so the sums are in [0, 255.001]. */
#define ROUND(name, attr)                                        \
    attr static void name(const float *acc, int n, uint8_t *row) \
    {                                                            \
        for (int i = 0; i < n; i++) {                            \
            int v = (int)round_even(acc[i]);                     \
            row[i] = (uint8_t)(v < 255 ? v : 255);               \
        }                                                        \
    }

CONV(conv_c, , f4, 4)
ROUND(round_c, )
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
typedef float f8 __attribute__((vector_size(32)));
CONV(conv_avx2, __attribute__((target("avx2"))), f8, 8)
ROUND(round_avx2, __attribute__((target("avx2"))))
#else
#define conv_avx2 conv_c
#define round_avx2 round_c
#endif

int rl_k_gaussian_blur(rl_image *img, int kx, int ky, double sx, double sy)
{
    if (kx < 1 || ky < 1 || kx % 2 == 0 || ky % 2 == 0 || !(sx > 0) ||
        !(sy > 0)) {
        return -EINVAL;
    }
    if (img->w <= 0 || img->h <= 0) {
        return 0;
    }
    int w = img->w, h = img->h, rx = kx / 2, ry = ky / 2;
    size_t n = (size_t)w * 3, padded = n + 6 * (size_t)rx;
    /* taps x and y, a padded row, an output row, the horizontal pass */
    float *buf = malloc(sizeof(float) * (kx + ky + padded + n + n * h));
    const float **src = malloc(sizeof(float *) * (size_t)(kx > ky ? kx : ky));
    if (buf == NULL || src == NULL) {
        free(buf);
        free(src);
        return -ENOMEM;
    }
    float *tx = buf, *ty = tx + kx, *pad = ty + ky, *acc = pad + padded;
    float *hp = acc + n;
    gauss_taps(kx, sx, tx);
    gauss_taps(ky, sy, ty);
    bool fast = rl_simd_level() == RL_SIMD_AVX2;
    void (*conv)(const float *const *, const float *, int, int, float *) =
        fast ? conv_avx2 : conv_c;
    for (int j = 0; j < kx; j++) {
        src[j] = pad + 3 * j;
    }
    for (int y = 0; y < h; y++) { /* rows, reflected at the ends */
        const uint8_t *row = ROW(img, y);
        for (size_t i = 0; i < n; i++) {
            pad[3 * rx + i] = row[i];
        }
        for (int x = -rx; x < 0; x++) {
            for (int c = 0; c < 3; c++) {
                pad[3 * (x + rx) + c] = row[3 * reflect(x, w) + c];
                pad[3 * (w - 1 - x + rx) + c] =
                    row[3 * reflect(w - 1 - x, w) + c];
            }
        }
        conv(src, tx, kx, (int)n, hp + n * (size_t)y);
    }
    for (int y = 0; y < h; y++) { /* columns, from the rows above */
        for (int j = 0; j < ky; j++) {
            src[j] = hp + n * (size_t)reflect(y + j - ry, h);
        }
        conv(src, ty, ky, (int)n, acc);
        (fast ? round_avx2 : round_c)(acc, (int)n, ROW(img, y));
    }
    free(buf);
    free(src);
    return 0;
}
