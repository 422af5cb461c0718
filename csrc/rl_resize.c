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

    /* Vertical pass, straight into the destination. */
    for (int y = 0; y < out_h; y++) {
        const int32_t *w = ty.w + (size_t)y * (size_t)ty.ksize;
        const uint8_t *base = tmp + (size_t)(ty.first[y] - ylo) * hstride;
        uint8_t *orow = dst->data + y * dst->row_stride;
        int n = ty.count[y];
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
            uint8_t *o = orow + ox * dst->px_stride;
            o[0] = clip8(a0);
            o[dst->ch_stride] = clip8(a1);
            o[2 * dst->ch_stride] = clip8(a2);
        }
    }
    free(tmp);
    taps_free(&tx);
    taps_free(&ty);
    return 0;
}

void rl_fill_zero(const rl_dst *dst, int x, int y, int w, int h)
{
    for (int r = y; r < y + h; r++) {
        for (int c = x; c < x + w; c++) {
            uint8_t *o = dst->data + r * dst->row_stride + c * dst->px_stride;
            o[0] = 0;
            o[dst->ch_stride] = 0;
            o[2 * dst->ch_stride] = 0;
        }
    }
}
