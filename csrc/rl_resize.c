/*
 * rl_resize.c - separable antialiased bilinear resampling.
 *
 * DESIGN: for each output column (then row) a short list of source taps and
 * their weights is computed once per image: the triangle filter is
 * stretched by the downscale factor so every source pixel contributes
 * (antialiasing), the window is clipped to the image and the weights are
 * renormalised, exactly the arithmetic torchvision's antialiased resize
 * specifies. Weights are 22-bit fixed point, so a tap sum fits in 32 bits
 * for 8-bit input, and the horizontal pass rounds to 8 bits as torchvision's
 * uint8 kernel does. The horizontal pass runs first over only the rows the
 * vertical pass needs; the vertical pass writes straight into the batch
 * slot with arbitrary strides, which is where NCHW/NHWC and the flip happen
 * at no extra cost.
 */
#define _GNU_SOURCE
#include "rl_resize.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PREC 22

typedef struct taps {
    int *first;     /* first source pixel of each output pixel */
    int *count;     /* taps of each output pixel */
    int32_t *w;     /* ksize weights per output pixel */
    int ksize;
} taps;

static double triangle(double x)
{
    x = fabs(x);
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* The window of output pixel i, before clipping to the image. */
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
    t->ksize = (int)ceil(support) * 2 + 1;
    t->first = malloc(sizeof(int) * (size_t)out);
    t->count = malloc(sizeof(int) * (size_t)out);
    t->w = malloc(sizeof(int32_t) * (size_t)out * (size_t)t->ksize);
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
        if (n > t->ksize) {
            n = t->ksize;
        }
        double sum = 0.0;
        for (int j = 0; j < n; j++) {
            k[j] = triangle((j + lo - center + 0.5) / filterscale);
            sum += k[j];
        }
        int32_t *wi = t->w + (size_t)i * (size_t)t->ksize;
        for (int j = 0; j < t->ksize; j++) {
            double v = (j < n && sum > 0.0) ? k[j] / sum : 0.0;
            wi[j] = (int32_t)lround(v * (1 << PREC));
        }
        t->first[i] = lo;
        t->count[i] = n > 0 && sum > 0.0 ? n : 0;
    }
    free(k);
    return 0;
}

static inline uint8_t clip8(int32_t v)
{
    v >>= PREC;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

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

/* Converts one row of out_w interleaved 8-bit RGB pixels into row y of dst
 * (float dtypes only). */
static void convert_row(const rl_dst *dst, const uint8_t *row8, int out_w,
                        int y)
{
    uint8_t *o = rl_dst_at(dst, 0, y);
    ptrdiff_t ps = dst->px_stride, cs = dst->ch_stride;
    for (int c = 0; c < 3; c++) {
        float mul = dst->mul[c], add = dst->add[c];
        const uint8_t *in = row8 + c;
        if (dst->dtype == RL_DTYPE_F32) {
            float *f = (float *)o + c * cs;
            for (int x = 0; x < out_w; x++) {
                f[x * ps] = (float)in[3 * x] * mul + add;
            }
        } else {
            uint16_t *h = (uint16_t *)o + c * cs;
            bool bf = dst->dtype == RL_DTYPE_BF16;
            for (int x = 0; x < out_w; x++) {
                float v = (float)in[3 * x] * mul + add;
                h[x * ps] = bf ? f32_to_bf16(v) : f32_to_f16(v);
            }
        }
    }
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
    size_t hstride = (size_t)out_w * 3;
    uint8_t *tmp = malloc(hstride * (size_t)rows);
    if (tmp == NULL) {
        taps_free(&tx);
        taps_free(&ty);
        return -ENOMEM;
    }

    /* Horizontal pass: source rows [ylo, yhi) -> out_w pixels each. */
    for (int r = 0; r < rows; r++) {
        const uint8_t *row = src->data +
                             (size_t)(ylo + r - src->y0) * src->stride;
        uint8_t *o = tmp + (size_t)r * hstride;
        for (int x = 0; x < out_w; x++) {
            const int32_t *w = tx.w + (size_t)x * (size_t)tx.ksize;
            const uint8_t *p = row + (size_t)(tx.first[x] - src->x0) * 3;
            int32_t a0 = 1 << (PREC - 1), a1 = a0, a2 = a0;
            for (int j = 0; j < tx.count[x]; j++) {
                a0 += p[3 * j] * w[j];
                a1 += p[3 * j + 1] * w[j];
                a2 += p[3 * j + 2] * w[j];
            }
            if (tx.count[x] == 0) {
                a0 = a1 = a2 = 0;
            }
            o[3 * x] = clip8(a0);
            o[3 * x + 1] = clip8(a1);
            o[3 * x + 2] = clip8(a2);
        }
    }

    /* Vertical pass, straight into the destination (through one 8-bit
     * row, still in L1, when the output is converted to floats). */
    uint8_t *row8 = NULL;
    if (dst->dtype != RL_DTYPE_U8) {
        row8 = malloc((size_t)out_w * 3);
        if (row8 == NULL) {
            free(tmp);
            taps_free(&tx);
            taps_free(&ty);
            return -ENOMEM;
        }
    }
    for (int y = 0; y < out_h; y++) {
        const int32_t *w = ty.w + (size_t)y * (size_t)ty.ksize;
        const uint8_t *base = tmp + (size_t)(ty.first[y] - ylo) * hstride;
        int n = ty.count[y];
        uint8_t *orow = dst->data + y * dst->row_stride;
        for (int x = 0; x < out_w; x++) {
            int32_t a0 = 1 << (PREC - 1), a1 = a0, a2 = a0;
            const uint8_t *p = base + 3 * (size_t)x;
            for (int j = 0; j < n; j++) {
                a0 += p[0] * w[j];
                a1 += p[1] * w[j];
                a2 += p[2] * w[j];
                p += hstride;
            }
            if (n == 0) {
                a0 = a1 = a2 = 0;
            }
            int ox = flip ? out_w - 1 - x : x;
            uint8_t *o = row8 ? row8 + 3 * ox : orow + ox * dst->px_stride;
            ptrdiff_t cs = row8 ? 1 : dst->ch_stride;
            o[0] = clip8(a0);
            o[cs] = clip8(a1);
            o[2 * cs] = clip8(a2);
        }
        if (row8 != NULL) {
            convert_row(dst, row8, out_w, y);
        }
    }
    free(row8);
    free(tmp);
    taps_free(&tx);
    taps_free(&ty);
    return 0;
}

void rl_fill_zero(const rl_dst *dst, int x, int y, int w, int h)
{
    if (w <= 0 || h <= 0) {
        return;
    }
    if (dst->dtype != RL_DTYPE_U8) {
        uint8_t *zeros = calloc((size_t)w * 3, 1);
        if (zeros == NULL) {
            return; /* callers zero-fill small areas; nothing to report */
        }
        rl_dst sub = *dst;
        sub.data = rl_dst_at(dst, x, 0);
        for (int r = y; r < y + h; r++) {
            convert_row(&sub, zeros, w, r);
        }
        free(zeros);
        return;
    }
    for (int r = y; r < y + h; r++) {
        for (int c = x; c < x + w; c++) {
            uint8_t *o = dst->data + r * dst->row_stride + c * dst->px_stride;
            o[0] = 0;
            o[dst->ch_stride] = 0;
            o[2 * dst->ch_stride] = 0;
        }
    }
}
