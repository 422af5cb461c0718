/*
 * place/taps.c - the filter: which source pixels each output pixel reads
 * and with what weights.
 *
 * DESIGN: for each output column (then row) a short list of source taps and
 * their weights is computed once per image. The triangle filter is
 * stretched by the downscale factor so every source pixel contributes
 * (antialiasing), the window is clipped to the image and the weights are
 * renormalised, exactly the arithmetic torchvision's antialiased resize
 * specifies. Weights are rounded to RL_WEIGHT_BITS-bit integers here, once,
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

void rl__taps_free(rl__taps *t)
{
    free(t->first);
    free(t->count);
    free(t->w);
    t->first = t->count = NULL;
    t->w = NULL;
}

int rl__taps_make(rl__taps *t, int full, double b0, double bsize, int out)
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
        rl__taps_free(t);
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
