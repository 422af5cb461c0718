/*
 * augment/pil.c - Pillow's kernels, as timm's augmentations call them:
 * ImageOps (autocontrast, equalize, invert, posterize, solarize), the
 * look-up table of timm's solarize_add, ImageEnhance (Color, Contrast,
 * Brightness, Sharpness) and Image.blend, ImageFilter.GaussianBlur, and
 * Image.transform's affine warp with bilinear or bicubic resampling and a
 * fill colour (Image.rotate included).
 *
 * DESIGN: timm works on PIL images, so its ops are Pillow's C code, not
 * torchvision's tensor kernels (policy.c): the ImageOps ops end in a
 * 256-entry table per channel computed as Pillow's Python computes it
 * (values clipped to 0..255 as Image.point clips them), so they are exact.
 * ImageEnhance blends a "degenerate" image with the image in float32,
 * truncating, as Pillow's ImagingBlend does, with its degenerates: the
 * ITU-R 601 grey of Convert.c (Color), a grey of the grey's rounded mean
 * (Contrast), black (Brightness) and the 3x3 SMOOTH filter of Filter.c,
 * accumulated in float32 in Pillow's order with its kernel 1/13, 5/13
 * rounded to float32 (Sharpness). GaussianBlur is BoxBlur.c's three box
 * blurs along rows then columns, in its 8.24 fixed point, with the box
 * radius Pillow derives from the standard deviation in float32.
 * Image.rotate is its matrix (rounded to 15 decimals as Pillow's Python
 * rounds it) handed to the affine warp (pil_warp.c), or a transposition
 * for quarter turns. ISO C (-std=c11) contracts no multiply-add, so each
 * float operation rounds as Pillow's does on x86-64.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "augment/kernels.h"

#define ROW(img, y) ((img)->data + (size_t)(y) * (img)->stride)

/* ---- look-up tables ---- */

static void apply_lut(rl_image *img, const uint8_t lut[256])
{
    uint8_t luts[3][256];
    for (int c = 0; c < 3; c++) {
        memcpy(luts[c], lut, 256);
    }
    rl__image_apply_luts(img, luts);
}

static uint8_t clip8(long v)
{
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

int rl_pil_invert(rl_image *img)
{
    uint8_t lut[256];
    for (int i = 0; i < 256; i++) {
        lut[i] = (uint8_t)(255 - i);
    }
    apply_lut(img, lut);
    return 0;
}

int rl_pil_posterize(rl_image *img, int bits)
{
    if (bits >= 8) {
        return 0;
    }
    /* Pillow 13 refuses bits = 0; older Pillow computed the mask
     * ~(2**8 - 1), which keeps nothing: a black image. */
    int mask = bits <= 0 ? 0 : ~((1 << (8 - bits)) - 1);
    uint8_t lut[256];
    for (int i = 0; i < 256; i++) {
        lut[i] = (uint8_t)(i & mask);
    }
    apply_lut(img, lut);
    return 0;
}

int rl_pil_solarize(rl_image *img, int threshold)
{
    uint8_t lut[256];
    for (int i = 0; i < 256; i++) {
        lut[i] = (uint8_t)(i < threshold ? i : 255 - i);
    }
    apply_lut(img, lut);
    return 0;
}

int rl_pil_solarize_add(rl_image *img, int add, int threshold)
{
    uint8_t lut[256];
    for (int i = 0; i < 256; i++) {
        lut[i] = i < threshold ? clip8((long)i + add) : (uint8_t)i;
    }
    apply_lut(img, lut);
    return 0;
}

int rl_pil_autocontrast(rl_image *img)
{
    uint32_t hist[3][256];
    uint8_t lut[3][256];
    rl__image_histograms(img, hist);
    for (int c = 0; c < 3; c++) {
        int lo = 0, hi = 255;
        while (lo < 256 && hist[c][lo] == 0) {
            lo++;
        }
        while (hi >= 0 && hist[c][hi] == 0) {
            hi--;
        }
        if (hi <= lo) {
            for (int i = 0; i < 256; i++) {
                lut[c][i] = (uint8_t)i;
            }
            continue;
        }
        double scale = 255.0 / (hi - lo);
        double offset = -lo * scale;
        for (int i = 0; i < 256; i++) {
            double v = i * scale;
            v = v + offset;
            lut[c][i] = clip8((long)v); /* Python's int(): towards zero */
        }
    }
    rl__image_apply_luts(img, lut);
    return 0;
}

int rl_pil_equalize(rl_image *img)
{
    uint32_t hist[3][256];
    uint8_t lut[3][256];
    rl__image_histograms(img, hist);
    for (int c = 0; c < 3; c++) {
        long total = 0, last = 0;
        int present = 0;
        for (int i = 0; i < 256; i++) {
            if (hist[c][i] != 0) {
                total += hist[c][i];
                last = hist[c][i];
                present++;
            }
        }
        long step = present <= 1 ? 0 : (total - last) / 255;
        long n = step / 2;
        for (int i = 0; i < 256; i++) {
            if (step == 0) {
                lut[c][i] = (uint8_t)i;
                continue;
            }
            lut[c][i] = clip8(n / step);
            n += hist[c][i];
        }
    }
    rl__image_apply_luts(img, lut);
    return 0;
}

/* ---- ImageEnhance: a blend of a degenerate image with the image ---- */

/* ImagingBlend(degenerate, img, alpha) into img, in float32. */
static void blend(rl_image *img, const uint8_t *deg, size_t deg_stride,
                  float alpha)
{
    int n = img->w * 3;
    bool inside = alpha >= 0 && alpha <= 1.0f;
    for (int y = 0; y < img->h; y++) {
        uint8_t *p = ROW(img, y);
        const uint8_t *d = deg + (size_t)y * deg_stride;
        for (int i = 0; i < n; i++) {
            float t = alpha * (float)((int)p[i] - (int)d[i]);
            t = (float)d[i] + t;
            if (inside) {
                p[i] = (uint8_t)t;
            } else {
                p[i] = t <= 0.0f ? 0 : t >= 255.0f ? 255 : (uint8_t)t;
            }
        }
    }
}

void rl_pil_blend(const uint8_t *in1, size_t stride1, rl_image *img,
                  float alpha)
{
    blend(img, in1, stride1, alpha);
}

/* A degenerate of one grey level, as a row of w pixels (stride 0). */
static int blend_flat(rl_image *img, uint8_t level, double factor)
{
    uint8_t *row = malloc((size_t)img->w * 3);
    if (row == NULL) {
        return -ENOMEM;
    }
    memset(row, level, (size_t)img->w * 3);
    blend(img, row, 0, (float)factor);
    free(row);
    return 0;
}

/* Convert.c's rgb2l: ITU-R 601-2 luma in 16-bit fixed point. */
static uint8_t luma(const uint8_t *p)
{
    return (uint8_t)((p[0] * 19595 + p[1] * 38470 + p[2] * 7471 + 0x8000) >>
                     16);
}

int rl_pil_color(rl_image *img, double factor)
{
    size_t stride = (size_t)img->w * 3;
    uint8_t *deg = malloc(stride * img->h);
    if (deg == NULL) {
        return -ENOMEM;
    }
    for (int y = 0; y < img->h; y++) {
        const uint8_t *p = ROW(img, y);
        uint8_t *d = deg + (size_t)y * stride;
        for (int x = 0; x < img->w; x++, p += 3, d += 3) {
            d[0] = d[1] = d[2] = luma(p);
        }
    }
    blend(img, deg, stride, (float)factor);
    free(deg);
    return 0;
}

int rl_pil_contrast(rl_image *img, double factor)
{
    /* ImageStat's mean of the grey image, rounded half up by int(). */
    double sum = 0.0;
    for (int y = 0; y < img->h; y++) {
        const uint8_t *p = ROW(img, y);
        for (int x = 0; x < img->w; x++, p += 3) {
            sum += luma(p);
        }
    }
    double mean = sum / ((double)img->w * img->h);
    return blend_flat(img, (uint8_t)(int)(mean + 0.5), factor);
}

int rl_pil_brightness(rl_image *img, double factor)
{
    return blend_flat(img, 0, factor);
}

/* One row of Filter.c's KERNEL1x3 at byte i (neighbours 3 bytes apart),
 * each product and sum rounded to float32 in Pillow's order. */
static float kernel_row(const uint8_t *r, int i, const float *k)
{
    float a = (float)r[i - 3] * k[0];
    float b = (float)r[i] * k[1];
    float c = (float)r[i + 3] * k[2];
    a = a + b;
    return a + c;
}

int rl_pil_sharpness(rl_image *img, double factor)
{
    int w = img->w, h = img->h;
    if (w < 3 || h < 3) {
        return 0; /* Pillow's filter leaves a smaller image as it is */
    }
    size_t stride = (size_t)w * 3;
    uint8_t *deg = malloc(stride * h);
    if (deg == NULL) {
        return -ENOMEM;
    }
    /* ImageFilter.SMOOTH: (1 1 1 / 1 5 1 / 1 1 1) / 13, the divisions
     * in float32 (_imaging.c's _filter) */
    const float k1 = 1.0f / 13.0f, k5 = 5.0f / 13.0f;
    const float edge[3] = {k1, k1, k1}, mid[3] = {k1, k5, k1};
    for (int y = 0; y < h; y++) {
        const uint8_t *r0 = ROW(img, y);
        uint8_t *d = deg + (size_t)y * stride;
        memcpy(d, r0, stride); /* borders stay: first, last row and column */
        if (y == 0 || y == h - 1) {
            continue;
        }
        const uint8_t *up = ROW(img, y - 1), *down = ROW(img, y + 1);
        for (int i = 3; i < (w - 1) * 3; i++) {
            float ss = 0.5f; /* Pillow's rounding bias */
            ss = ss + kernel_row(down, i, edge);
            ss = ss + kernel_row(r0, i, mid);
            ss = ss + kernel_row(up, i, edge);
            d[i] = ss <= 0.0f ? 0 : ss >= 255.0f ? 255 : (uint8_t)ss;
        }
    }
    blend(img, deg, stride, (float)factor);
    free(deg);
    return 0;
}

/* ---- ImageFilter.GaussianBlur: three box blurs a direction ---- */

/* BoxBlur.c's _gaussian_blur_radius: the box radius of `passes` box blurs
 * for a Gaussian of standard deviation radius, in float32 as Pillow. */
static float box_radius(float radius, int passes)
{
    float sigma2 = radius * radius / passes;
    float len = (float)sqrt(12.0 * sigma2 + 1.0);
    float l = (float)floor((len - 1.0) / 2.0);
    float a = (2 * l + 1) * (l * (l + 1) - 3 * sigma2);
    a /= 6 * (sigma2 - (l + 1) * (l + 1));
    return l + a;
}

/* BoxBlur.c's ImagingLineBoxBlur8 on a line of n values, in 8.24 fixed
 * point (unsigned, wrapping as Pillow's UINT32 arithmetic does). */
static void box_line(const uint8_t *in, uint8_t *out, int n, int radius,
                     uint32_t ww, uint32_t fw)
{
    int last = n - 1;
    int edge_a = radius + 1 < n ? radius + 1 : n;
    uint32_t acc = (uint32_t)in[0] * (uint32_t)(radius + 1);
    for (int x = 0; x < edge_a - 1; x++) {
        acc += in[x];
    }
    acc += (uint32_t)in[last] * (uint32_t)(radius - edge_a + 1);
    for (int x = 0; x <= last; x++) {
        /* the window's left end leaving and right end entering, both
         * clamped to the line as Pillow's three loops clamp them */
        int sub = x - radius - 1 < 0 ? 0 : x - radius - 1;
        int add = x + radius < last ? x + radius : last;
        int far = x + radius + 1 < last ? x + radius + 1 : last;
        acc += (uint32_t)((int)in[add] - (int)in[sub]);
        uint32_t bulk = acc * ww + (uint32_t)((int)in[sub] + (int)in[far]) * fw;
        out[x] = (uint8_t)((bulk + (1u << 23)) >> 24);
    }
}

/* `passes` box blurs of radius r along each line of `lines` lines of n
 * values, value i of line j at base[j * line_step + i * step]. */
static void box_blur(uint8_t *base, int lines, size_t line_step, int n,
                     size_t step, float r, int passes, uint8_t *buf)
{
    int radius = (int)r;
    uint32_t ww = (uint32_t)((float)(1 << 24) / (r * 2 + 1));
    uint32_t fw = ((1u << 24) - (uint32_t)(radius * 2 + 1) * ww) / 2;
    uint8_t *a = buf, *b = buf + n;
    for (int j = 0; j < lines; j++) {
        uint8_t *p = base + (size_t)j * line_step;
        for (int i = 0; i < n; i++) {
            a[i] = p[(size_t)i * step];
        }
        for (int k = 0; k < passes; k++) {
            box_line(a, b, n, radius, ww, fw);
            uint8_t *t = a;
            a = b;
            b = t;
        }
        for (int i = 0; i < n; i++) {
            p[(size_t)i * step] = a[i];
        }
    }
}

int rl_pil_gaussian_blur(rl_image *img, double radius)
{
    if (radius == 0) {
        return 0; /* ImageFilter.GaussianBlur(0): a copy */
    }
    float r = box_radius((float)radius, 3);
    int most = img->w > img->h ? img->w : img->h;
    uint8_t *buf = malloc(2 * (size_t)most);
    if (buf == NULL) {
        return -ENOMEM;
    }
    for (int c = 0; c < 3 && r != 0; c++) {
        /* rows, then columns (Pillow transposes for the second) */
        box_blur(img->data + c, img->h, img->stride, img->w, 3, r, 3, buf);
        box_blur(img->data + c, img->w, 3, img->h, img->stride, r, 3, buf);
    }
    free(buf);
    return 0;
}

/* ---- Image.rotate (the warp itself: pil_warp.c) ---- */

/* Python's round(v, 15): the nearest double to v's correctly rounded
 * 15-decimal form, which glibc's printf and strtod give. */
static double round15(double v)
{
    char buf[64];
    snprintf(buf, sizeof(buf), "%.15f", v);
    return strtod(buf, NULL);
}

/* Image.transpose(ROTATE_180) or, on a square image, ROTATE_90 (quarter
 * turns counter-clockwise: 1 or 3). */
static int transpose(rl_image *img, int quarters)
{
    int w = img->w, h = img->h;
    size_t stride = (size_t)w * 3;
    uint8_t *copy = malloc(stride * h);
    if (copy == NULL) {
        return -ENOMEM;
    }
    for (int y = 0; y < h; y++) {
        memcpy(copy + (size_t)y * stride, ROW(img, y), stride);
    }
    for (int y = 0; y < h; y++) {
        uint8_t *out = ROW(img, y);
        for (int x = 0; x < w; x++, out += 3) {
            int sx, sy;
            if (quarters == 2) {
                sx = w - 1 - x, sy = h - 1 - y;
            } else if (quarters == 1) {
                sx = w - 1 - y, sy = x;
            } else {
                sx = y, sy = h - 1 - x;
            }
            memcpy(out, copy + (size_t)sy * stride + (size_t)sx * 3, 3);
        }
    }
    free(copy);
    return 0;
}

int rl_pil_rotate(rl_image *img, double degrees, int resample,
                  const uint8_t fill[3])
{
    /* Python's angle % 360.0: the sign of the divisor */
    double angle = fmod(degrees, 360.0);
    if (angle != 0.0 && angle < 0.0) {
        angle += 360.0;
    }
    if (angle == 0.0) {
        return 0;
    }
    if (angle == 180.0) {
        return transpose(img, 2);
    }
    if ((angle == 90.0 || angle == 270.0) && img->w == img->h) {
        return transpose(img, angle == 90.0 ? 1 : 3);
    }
    double r = -(angle * (M_PI / 180.0)); /* -math.radians(angle) */
    double c = round15(cos(r)), s = round15(sin(r));
    double m[6] = {c, s, 0.0, round15(-sin(r)), c, 0.0};
    double cx = img->w / 2.0, cy = img->h / 2.0;
    m[2] = m[0] * -cx + m[1] * -cy + 0.0;
    m[5] = m[3] * -cx + m[4] * -cy + 0.0;
    m[2] += cx;
    m[5] += cy;
    return rl_pil_affine(img, m, resample, fill);
}
