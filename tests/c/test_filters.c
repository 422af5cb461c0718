/* test_filters.c - the place stage's bicubic and nearest filters: identity
 * is exact, a constant image (0, 77 or 255: the sums of a cubic's
 * renormalised weights land just below 0 or above 255) stays constant,
 * sums far outside 0..255 (0/255 noise, whose cubic overshoots in both
 * passes) are clipped the same way by every SIMD level, nearest copies
 * source pixels (each output pixel one of the box's), and spans cover
 * what each filter reads. Pillow-equality itself is tested from Python
 * (tests/test_interpolation.py), against Pillow. Both pass orders are
 * checked. */
#define _GNU_SOURCE
#include <string.h>

#include "place/place.h"
#include "check.h"
#include "simd.h"

#define W 301
#define H 203
static uint8_t src[W * H * 4]; /* RGBX */
static uint8_t out[3][600 * 420 * 3];

static const rl_filter FILTERS[] = {RL_FILTER_BILINEAR, RL_FILTER_BICUBIC,
                                    RL_FILTER_NEAREST};

static rl_pixels whole(void)
{
    rl_pixels p = {src, (size_t)W * 4, 0, 0, W, H, W, H};
    return p;
}

static rl_dst packed(uint8_t *data, int ow)
{
    return (rl_dst){.data = data,
                    .row_stride = (ptrdiff_t)ow * 3,
                    .px_stride = 3,
                    .ch_stride = 1};
}

/* Boxes and sizes: up, down, both at once (either pass first), a tiny
 * and a one-pixel output, whole pixels and fractions. */
static const double BOXES[][4] = {{0, 0, W, H},
                                  {3, 7, 123, 99},
                                  {2.5, 1.25, 77.5, 190.75},
                                  {290, 190, 11, 13}};
static const int SIZES[][2] = {
    {600, 420}, {17, 31}, {1, 1}, {333, 50}, {40, 200}};

static void test_identity(void)
{
    rl_pixels px = whole();
    for (size_t f = 0; f < 3; f++) {
        rl_dst d = packed(out[0], W);
        CHECK_EQ(rl_resample(&px, FILTERS[f], RL_PASSES_PILLOW13, 0, 0, W, H, W,
                             H, false, false, &d),
                 0);
        for (int i = 0; i < W * H; i++) {
            CHECK(memcmp(out[0] + 3 * i, src + 4 * i, 3) == 0);
        }
    }
}

static void test_constant(void)
{
    rl_pixels px = whole();
    const uint8_t values[] = {0, 77, 255};
    for (size_t v = 0; v < 3; v++) {
        for (int i = 0; i < W * H * 4; i++) {
            src[i] = (i % 4 == 3) ? 200 : values[v];
        }
        for (size_t f = 0; f < 3; f++) {
            for (int b = 0; b < 4; b++) {
                for (int s = 0; s < 5; s++) {
                    int ow = SIZES[s][0], oh = SIZES[s][1];
                    const double *x = BOXES[b];
                    rl_dst d = packed(out[0], ow);
                    CHECK_EQ(rl_resample(&px, FILTERS[f], RL_PASSES_PILLOW13,
                                         x[0], x[1], x[2], x[3], ow, oh, false,
                                         b % 2 == 1, &d),
                             0);
                    for (int i = 0; i < ow * oh * 3; i++) {
                        CHECK_EQ(out[0][i], values[v]);
                    }
                }
            }
        }
    }
}

/* 0/255 noise: every level gives the same bytes, and bicubic reaches both
 * ends (its overshoot is clipped, not wrapped). Nearest gives only source
 * values. */
static void test_clipping_and_levels(rl_passes passes)
{
    rl_pixels px = whole();
    for (int i = 0; i < W * H * 4; i++) {
        src[i] = ((i * 2654435761u) >> 28) & 1 ? 255 : 0;
    }
    rl_simd before = rl_simd_level();
    for (size_t f = 0; f < 3; f++) {
        for (int b = 0; b < 4; b++) {
            for (int s = 0; s < 5; s++) {
                int ow = SIZES[s][0], oh = SIZES[s][1];
                const double *x = BOXES[b];
                size_t n = (size_t)ow * oh * 3;
                for (int level = RL_SIMD_C; level <= RL_SIMD_AVX2; level++) {
                    rl_simd_cap((rl_simd)level);
                    rl_dst d = packed(out[level], ow);
                    CHECK_EQ(rl_resample(&px, FILTERS[f], passes, x[0], x[1],
                                         x[2], x[3], ow, oh, b == 3, b % 2 == 1,
                                         &d),
                             0);
                    CHECK(memcmp(out[level], out[RL_SIMD_C], n) == 0);
                }
                int lo = 0, hi = 0, other = 0;
                for (size_t i = 0; i < n; i++) {
                    lo += out[0][i] == 0;
                    hi += out[0][i] == 255;
                    other += out[0][i] != 0 && out[0][i] != 255;
                }
                if (FILTERS[f] == RL_FILTER_NEAREST) {
                    CHECK_EQ(other, 0);
                } else if (FILTERS[f] == RL_FILTER_BICUBIC && s == 0) {
                    /* Upscaled noise: runs of equal pixels, whose cubic
                     * overshoots, clipped at both ends. */
                    CHECK(lo > 0 && hi > 0);
                }
            }
        }
    }
    rl_simd_cap(before);
}

/* The order is followed: shrinking the height only, Pillow 13's order
 * (vertical first) and the old one give different bytes on 0/255 noise;
 * growing both, the same bytes (both go horizontal first). */
static void test_pass_order(void)
{
    rl_pixels px = whole();
    for (int i = 0; i < W * H * 4; i++) {
        src[i] = ((i * 2654435761u) >> 28) & 1 ? 255 : 0;
    }
    int sizes[2][2] = {{W - 20, 50}, {600, 420}};
    for (int s = 0; s < 2; s++) {
        int ow = sizes[s][0], oh = sizes[s][1];
        rl_dst a = packed(out[0], ow), c = packed(out[1], ow);
        CHECK_EQ(rl_resample(&px, RL_FILTER_BICUBIC, RL_PASSES_PILLOW13, 0, 0,
                             W, H, ow, oh, false, false, &a),
                 0);
        CHECK_EQ(rl_resample(&px, RL_FILTER_BICUBIC, RL_PASSES_HORIZONTAL_FIRST,
                             0, 0, W, H, ow, oh, false, false, &c),
                 0);
        bool same = memcmp(out[0], out[1], (size_t)ow * oh * 3) == 0;
        CHECK(same == (s == 1));
    }
}

/* Each filter reads only inside its spans: a region holding exactly the
 * spans gives the same bytes as the whole image. */
static void test_spans(void)
{
    for (int i = 0; i < W * H * 4; i++) {
        src[i] = (uint8_t)((i * 7919u) >> 3);
    }
    static uint8_t region[W * H * 4];
    rl_pixels px = whole();
    for (size_t f = 0; f < 3; f++) {
        for (int b = 1; b < 4; b++) {
            const double *x = BOXES[b];
            int ow = 40, oh = 27, x0, x1, y0, y1;
            bool crop_first = b == 2;
            rl_resample_span(FILTERS[f], W, x[0], x[2], ow, crop_first, &x0,
                             &x1);
            rl_resample_span(FILTERS[f], H, x[1], x[3], oh, crop_first, &y0,
                             &y1);
            CHECK(0 <= x0 && x0 < x1 && x1 <= W && 0 <= y0 && y0 < y1 &&
                  y1 <= H);
            size_t rs = (size_t)(x1 - x0) * 4;
            for (int y = y0; y < y1; y++) {
                memcpy(region + (size_t)(y - y0) * rs,
                       src + ((size_t)y * W + x0) * 4, rs);
            }
            rl_pixels sub = {region, rs, x0, y0, x1 - x0, y1 - y0, W, H};
            rl_dst a = packed(out[0], ow), c = packed(out[1], ow);
            CHECK_EQ(rl_resample(&px, FILTERS[f], RL_PASSES_PILLOW13, x[0],
                                 x[1], x[2], x[3], ow, oh, false, crop_first,
                                 &a),
                     0);
            CHECK_EQ(rl_resample(&sub, FILTERS[f], RL_PASSES_PILLOW13, x[0],
                                 x[1], x[2], x[3], ow, oh, false, crop_first,
                                 &c),
                     0);
            CHECK(memcmp(out[0], out[1], (size_t)ow * oh * 3) == 0);
        }
    }
}

int main(void)
{
    for (int i = 0; i < W * H * 4; i++) {
        src[i] = (uint8_t)((i * 7919u) >> 3);
    }
    CHECK(strcmp(rl_filter_name(RL_FILTER_BICUBIC), "bicubic") == 0);
    CHECK(rl_filter_name(RL_FILTER_COUNT) == NULL);
    test_identity();
    test_constant();
    test_clipping_and_levels(RL_PASSES_PILLOW13);
    test_clipping_and_levels(RL_PASSES_HORIZONTAL_FIRST);
    test_pass_order();
    test_spans();
    PASS("test_filters");
}
