/*
 * place/taps.c - the filters: which source pixels each output pixel reads
 * and with what weights.
 *
 * DESIGN: for each output column (then row) a short list of source taps and
 * their weights is computed once per image, with the arithmetic of Pillow's
 * Image.resize, which is what torchvision's Resize and RandomResizedCrop
 * call on a PIL image. Bilinear (a triangle) and bicubic (Keys' cubic with
 * a = -0.5) are stretched by the downscale factor so every source pixel
 * contributes (antialiasing); the window is clipped to the pixels the
 * resize sees and the weights are renormalised over them. What the resize
 * sees is the whole image, or only the box when torchvision crops before it
 * resizes (RandomResizedCrop): then a window stops at the box's edges as it
 * would at the edges of the cropped image. Nearest takes the one pixel
 * Pillow takes: it walks the output grid by adding the step to a running
 * position (Pillow's affine scaling), and where a centre lands on a pixel
 * edge that sum, not the exact product, decides.
 *
 * Where the box is whole pixels of a resize of the seen pixels (always, but
 * for a box scaled by DCT scaling), the centres are computed in Pillow's
 * frame: output pixel i of the box is pixel off + i of a resize of the seen
 * pixels to n, with Pillow's step (seen width / n). The windows and the
 * weights' doubles are then Pillow's to the bit.
 *
 * Weights are rounded to integers here, once, so that every kernel (C,
 * SSE2, AVX2) sums the same integers and gives the same bytes: bicubic to
 * Pillow's own 22-bit integers (taps.h), so its bytes are Pillow's;
 * bilinear to 14 bits (one multiply-add a tap pair, within 1 LSB of
 * Pillow); nearest to one tap of weight 1, exact. rl_resample_span() uses
 * the same window function as the tables, so a decoder that decodes the
 * span it names holds every pixel the tables point at.
 */
#include "place/taps.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>

#include "place/place.h"

/* Keys' cubic convolution parameter, Pillow's (and torchvision's). */
#define RL_CUBIC_A (-0.5)

static double triangle(double x)
{
    x = fabs(x);
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* The cubic, in the same order of operations as Pillow, so that each
 * weight is the same double. */
static double cubic(double x)
{
    const double a = RL_CUBIC_A;
    x = fabs(x);
    if (x < 1.0) {
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    }
    if (x < 2.0) {
        return (((x - 5) * x + 8) * x - 4) * a;
    }
    return 0.0;
}

/* A filter: its function, its radius at scale 1 (0: nearest) and whether
 * its weights are Pillow's exact 22-bit integers. */
typedef struct kernel {
    double (*fn)(double x);
    double radius;
    bool exact;
} kernel;

static const kernel KERNELS[RL_FILTER_COUNT] = {
    [RL_FILTER_BILINEAR] = {triangle, 1.0, false},
    [RL_FILTER_BICUBIC] = {cubic, 2.0, true},
    [RL_FILTER_NEAREST] = {NULL, 0.0, false},
};

const char *rl_filter_name(int filter)
{
    static const char *const names[RL_FILTER_COUNT] = {
        [RL_FILTER_BILINEAR] = "bilinear",
        [RL_FILTER_BICUBIC] = "bicubic",
        [RL_FILTER_NEAREST] = "nearest",
    };
    return filter >= 0 && filter < RL_FILTER_COUNT ? names[filter] : NULL;
}

static const kernel *kernel_of(rl_filter f)
{
    return (unsigned)f < RL_FILTER_COUNT ? &KERNELS[f]
                                         : &KERNELS[RL_FILTER_BILINEAR];
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

/* One axis as the filter sees it. Centres are measured from clo. */
typedef struct axis {
    int clo, chi;   /* the seen pixels */
    double scale;   /* source pixels per output pixel */
    double rel0;    /* where the box starts, from clo */
    int off;        /* output pixel i is pixel off + i of the resize */
    bool grid;      /* Pillow's frame: rel0 == 0 and off counts pixels */
    double support; /* the window's radius, in source pixels */
    double inv;     /* 1 / the filter's stretch */
} axis;

static void axis_init(axis *a, const kernel *k, int full, double b0,
                      double bsize, int out, bool crop_first)
{
    seen(full, b0, bsize, crop_first, &a->clo, &a->chi);
    a->scale = bsize / out;
    a->rel0 = b0 - a->clo;
    a->off = 0;
    a->grid = false;
    double n = (a->chi - a->clo) / a->scale, o = a->rel0 / a->scale;
    if (n >= 0.5 && n < INT_MAX && o > -0.5 && o < INT_MAX &&
        fabs(n - nearbyint(n)) < 1e-6 && fabs(o - nearbyint(o)) < 1e-6) {
        a->scale = (double)(a->chi - a->clo) / nearbyint(n);
        a->off = (int)nearbyint(o);
        a->rel0 = 0.0;
        a->grid = true;
    }
    double stretch = a->scale > 1.0 ? a->scale : 1.0;
    a->support = k->radius * stretch;
    a->inv = 1.0 / stretch;
}

void rl__taps_sizes(int full, double b0, double bsize, int out, bool crop_first,
                    int *in, int *n)
{
    axis a;
    axis_init(&a, &KERNELS[RL_FILTER_BILINEAR], full, b0, bsize, out,
              crop_first);
    *in = a.chi - a.clo;
    double m = nearbyint(*in / a.scale);
    *n = m < 1 ? 1 : m > INT_MAX ? INT_MAX : (int)m;
}

static double center_of(const axis *a, int i)
{
    return a->rel0 + ((double)a->off + i + 0.5) * a->scale;
}

static int clamp_seen(const axis *a, double rel)
{
    double p = a->clo + floor(rel);
    return p < a->clo ? a->clo : p >= a->chi ? a->chi - 1 : (int)p;
}

/* Nearest: the pixel of output pixels [from, to), into first[]. */
static void nearest(const axis *a, int from, int to, int *first)
{
    if (!a->grid) {
        for (int i = from; i < to; i++) {
            first[i - from] = clamp_seen(a, center_of(a, i));
        }
        return;
    }
    /* Pillow's running position, from the resize's first pixel. */
    double x = a->scale * 0.5;
    for (int i = 0; i < a->off + from; i++) {
        x += a->scale;
    }
    for (int i = from; i < to; i++) {
        first[i - from] = clamp_seen(a, x);
        x += a->scale;
    }
}

/* The window of output pixel i (not nearest), clipped to the seen pixels;
 * *center is relative to clo. */
static void window(const axis *a, int i, double *center, int *lo, int *hi)
{
    *center = center_of(a, i);
    int l = (int)(*center - a->support + 0.5);
    int h = (int)(*center + a->support + 0.5);
    *lo = a->clo + (l < 0 ? 0 : l);
    *hi = h > a->chi - a->clo ? a->chi : a->clo + h;
}

void rl_resample_span(rl_filter filter, int full, double b0, double bsize,
                      int out, bool crop_first, int *lo, int *hi)
{
    const kernel *k = kernel_of(filter);
    axis a;
    axis_init(&a, k, full, b0, bsize, out, crop_first);
    if (k->fn == NULL) {
        int f0, f1;
        nearest(&a, 0, 1, &f0);
        nearest(&a, out - 1, out, &f1);
        *lo = f0 < f1 ? f0 : f1;
        *hi = (f0 > f1 ? f0 : f1) + 1;
        return;
    }
    double c;
    int l0, h0, l1, h1;
    window(&a, 0, &c, &l0, &h0);
    window(&a, out - 1, &c, &l1, &h1);
    *lo = l0 < l1 ? l0 : l1;
    *hi = h0 > h1 ? h0 : h1;
    if (*hi <= *lo) {
        /* A degenerate box: read one pixel so callers never get empty
         * regions; the weights below still come out right. */
        *lo = *lo < a.chi ? *lo : a.chi - 1;
        *hi = *lo + 1;
    }
}

void rl__taps_free(rl__taps *t)
{
    free(t->first);
    free(t->count);
    free(t->w);
    free(t->wlo);
    t->first = t->count = NULL;
    t->w = t->wlo = NULL;
}

/* Output pixel i's weights from the normalised k[0..n): Pillow's 22-bit
 * integers split into hi and lo (taps.h), or 14-bit ones. The lanes hold
 * them: a window's cubic weights sum to at least about 0.5 before they
 * are renormalised (the pixel under the centre weighs at least 0.5625, a
 * negative lobe at most 0.075 a tap), so a weight stays below 2 in
 * magnitude, |hi| below 2^12; bilinear and nearest weights are 0..1, at
 * most 1 << 14. */
static void quantise(const double *k, int n, bool exact, int16_t *w,
                     int16_t *wlo)
{
    for (int j = 0; j < n; j++) {
        if (!exact) {
            w[j] = (int16_t)lround(k[j] * (1 << RL_WEIGHT_BITS));
            continue;
        }
        double s = k[j] * (1 << RL_EXACT_BITS);
        int32_t q = (int32_t)(k[j] < 0 ? s - 0.5 : s + 0.5);
        int32_t lo = q & ((1 << RL_EXACT_SPLIT) - 1);
        w[j] = (int16_t)((q - lo) / (1 << RL_EXACT_SPLIT));
        wlo[j] = (int16_t)lo;
    }
}

int rl__taps_make(rl__taps *t, rl_filter filter, int full, double b0,
                  double bsize, int out, bool crop_first)
{
    const kernel *kn = kernel_of(filter);
    axis a;
    axis_init(&a, kn, full, b0, bsize, out, crop_first);
    int kmax = kn->fn == NULL ? 1 : (int)ceil(a.support) * 2 + 1;
    t->ksize = (kmax + 1) & ~1;
    size_t nw = (size_t)out * (size_t)t->ksize;
    t->first = malloc(sizeof(int) * (size_t)out);
    t->count = malloc(sizeof(int) * (size_t)out);
    t->w = calloc(nw, sizeof(int16_t));
    t->wlo = kn->exact ? calloc(nw, sizeof(int16_t)) : NULL;
    double *k = malloc(sizeof(double) * (size_t)t->ksize);
    if (!t->first || !t->count || !t->w || (kn->exact && !t->wlo) || !k) {
        free(k);
        rl__taps_free(t);
        return -ENOMEM;
    }
    if (kn->fn == NULL) {
        /* One tap of weight 1 (and the padding tap). */
        nearest(&a, 0, out, t->first);
        for (int i = 0; i < out; i++) {
            t->count[i] = 2;
            t->w[(size_t)i * 2] = 1 << RL_WEIGHT_BITS;
        }
        free(k);
        return 0;
    }
    for (int i = 0; i < out; i++) {
        double center;
        int lo, hi;
        window(&a, i, &center, &lo, &hi);
        int n = hi - lo;
        if (n > kmax) {
            n = kmax;
        }
        double sum = 0.0;
        for (int j = 0; j < n; j++) {
            k[j] = kn->fn((j + (lo - a.clo) - center + 0.5) * a.inv);
            sum += k[j];
        }
        /* An empty or all-zero window leaves the pixel without taps. */
        size_t at = (size_t)i * (size_t)t->ksize;
        if (n > 0 && sum != 0.0) {
            for (int j = 0; j < n; j++) {
                k[j] /= sum;
            }
            quantise(k, n, kn->exact, t->w + at, t->wlo ? t->wlo + at : NULL);
        }
        t->first[i] = lo;
        t->count[i] = n > 0 && sum != 0.0 ? (n + 1) & ~1 : 0;
    }
    free(k);
    return 0;
}
