/*
 * place/taps.c - the filter: which source pixels each output pixel reads
 * and with what weights.
 *
 * DESIGN: for each output column (then row) a short list of source taps and
 * their weights is computed once per image. The triangle filter is
 * stretched by the downscale factor so every source pixel contributes
 * (antialiasing), the window is clipped to the pixels the resize sees and
 * the weights are renormalised over them, exactly the arithmetic
 * torchvision's antialiased resize specifies. What the resize sees is the
 * whole image, or only the box when torchvision crops before it resizes
 * (RandomResizedCrop): then a window stops at the box's edges as it would
 * at the edges of the cropped image. Weights are rounded to RL_WEIGHT_BITS-bit integers here, once,
 * so that every kernel (C, SSE2, AVX2) sums the same integers and gives the
 * same bytes. rl_resample_span() uses the same window function as the
 * tables, so a decoder that decodes the span it names holds every pixel
 * the tables point at.
 */
#include "place/taps.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "place/place.h"

static double triangle(double x)
{
    x = fabs(x);
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* The pixels [*lo, *hi) the resize of the span [b0, b0 + bsize) sees: the
 * whole axis, or with crop_first the pixels whose centres lie in the span
 * (exactly the span for an integer box; a box scaled by DCT scaling is
 * not). Never empty. */
static void seen(int full, double b0, double bsize, bool crop_first, int *lo,
                 int *hi)
{
    *lo = 0;
    *hi = full;
    if (!crop_first) {
        return;
    }
    double a = floor(b0 + 0.5), b = floor(b0 + bsize + 0.5);
    *lo = a > 0 ? (a < full - 1 ? (int)a : full - 1) : 0;
    *hi = b < full ? (int)b : full;
    if (*hi <= *lo) {
        *hi = *lo + 1;
    }
}

/* The window of output pixel i, clipped to the seen pixels [clo, chi). */
static void window(double b0, double scale, double support, int i,
                   double *center, int *lo, int *hi, int clo, int chi)
{
    *center = b0 + (i + 0.5) * scale;
    int a = (int)(*center - support + 0.5);
    int b = (int)(*center + support + 0.5);
    *lo = a < clo ? clo : a;
    *hi = b > chi ? chi : b;
}

void rl_resample_span(int full, double b0, double bsize, int out,
                      bool crop_first, int *lo, int *hi)
{
    double scale = bsize / out;
    double support = scale > 1.0 ? scale : 1.0;
    double c;
    int clo, chi, l0, h0, l1, h1;
    seen(full, b0, bsize, crop_first, &clo, &chi);
    window(b0, scale, support, 0, &c, &l0, &h0, clo, chi);
    window(b0, scale, support, out - 1, &c, &l1, &h1, clo, chi);
    *lo = l0 < l1 ? l0 : l1;
    *hi = h0 > h1 ? h0 : h1;
    if (*hi <= *lo) {
        /* A degenerate box: read one pixel so callers never get empty
         * regions; the weights below still come out right. */
        *lo = *lo < chi ? *lo : chi - 1;
        *hi = *lo + 1;
    }
}

void rl__taps_free(rl__taps *t)
{
    free(t->first);
    free(t->count);
    free(t->w);
    t->first = t->count = NULL;
    t->w = NULL;
}

int rl__taps_make(rl__taps *t, int full, double b0, double bsize, int out,
                  bool crop_first)
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
    int clo, chi;
    seen(full, b0, bsize, crop_first, &clo, &chi);
    if (!t->first || !t->count || !t->w || !k) {
        free(k);
        rl__taps_free(t);
        return -ENOMEM;
    }
    for (int i = 0; i < out; i++) {
        double center;
        int lo, hi;
        window(b0, scale, support, i, &center, &lo, &hi, clo, chi);
        int n = hi - lo;
        if (n > kmax) {
            n = kmax;
        }
        double sum = 0.0;
        for (int j = 0; j < n; j++) {
            k[j] = triangle((j + lo - center + 0.5) / filterscale);
            sum += k[j];
        }
        /* An empty or all-zero window leaves the pixel without taps. */
        int16_t *wi = t->w + (size_t)i * (size_t)t->ksize;
        for (int j = 0; j < n && sum > 0.0; j++) {
            wi[j] = (int16_t)lround(k[j] / sum * (1 << RL_WEIGHT_BITS));
        }
        t->first[i] = lo;
        t->count[i] = n > 0 && sum > 0.0 ? (n + 1) & ~1 : 0;
    }
    free(k);
    return 0;
}
