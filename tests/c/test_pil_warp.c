/* test_pil_warp.c - Pillow's affine warp (augment/pil_warp.c) at every SIMD
 * level: the portable kernels and the AVX2 ones must write the same bytes
 * for any matrix, not only the rotations, shears and translations timm
 * makes (those are compared with Pillow itself from Python,
 * tests/test_pil_warp.py). Random matrices (scales up and down,
 * reflections, skews, offsets that put the image partly or fully out),
 * special ones (identity, whole-pixel shifts: the d = 0 shortcuts; an
 * infinite and a NaN entry: all fill) on sizes from 1x1 up, each image in
 * a heap block of exactly its bytes so that the sanitizer build (make
 * check SANITIZE=address) sees any read or write past it. Also checks that
 * a pixel whose centre maps outside takes the fill and a pixel mapped
 * onto a pixel centre copies it. */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "augment/kernels.h"
#include "check.h"
#include "simd.h"

static uint64_t state = 0x9e3779b97f4a7c15ull;

static uint64_t next(void)
{
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
}

static double uniform(double lo, double hi)
{
    return lo + (hi - lo) * (double)(next() >> 11) / 9007199254740992.0;
}

/* img warped by m with resample at SIMD level `level` into a new heap
 * block of exactly w * h * 3 bytes (the caller frees it). */
static uint8_t *warped(const uint8_t *img, int w, int h, const double m[6],
                       int resample, rl_simd level)
{
    size_t n = (size_t)w * h * 3;
    uint8_t *out = malloc(n);
    CHECK(out != NULL);
    memcpy(out, img, n);
    rl_image im = {out, w, h, (size_t)w * 3};
    rl_simd_cap(level);
    CHECK_EQ(rl_pil_affine(&im, m, resample, (const uint8_t[3]){9, 200, 77}),
             0);
    return out;
}

/* Every level this CPU runs gives the portable level's bytes. */
static void same_at_every_level(const uint8_t *img, int w, int h,
                                const double m[6])
{
    rl_simd best = rl_simd_cap(RL_SIMD_AVX2);
    for (int resample = RL_PIL_BILINEAR; resample <= RL_PIL_BICUBIC;
         resample++) {
        uint8_t *ref = warped(img, w, h, m, resample, RL_SIMD_C);
        for (int l = RL_SIMD_SSE2; l <= (int)best; l++) {
            uint8_t *got = warped(img, w, h, m, resample, (rl_simd)l);
            CHECK(memcmp(ref, got, (size_t)w * h * 3) == 0);
            free(got);
        }
        free(ref);
    }
    rl_simd_cap(best);
}

static uint8_t *noise(int w, int h)
{
    uint8_t *img = malloc((size_t)w * h * 3);
    CHECK(img != NULL);
    for (size_t i = 0; i < (size_t)w * h * 3; i++) {
        img[i] = (uint8_t)next();
    }
    return img;
}

int main(void)
{
    static const int SIZES[][2] = {{1, 1},  {2, 1},   {1, 2},  {2, 2},
                                   {3, 3},  {4, 4},   {5, 3},  {7, 9},
                                   {16, 5}, {33, 31}, {64, 48}};
    for (size_t s = 0; s < sizeof(SIZES) / sizeof(SIZES[0]); s++) {
        int w = SIZES[s][0], h = SIZES[s][1];
        uint8_t *img = noise(w, h);
        for (int t = 0; t < 40; t++) {
            double m[6];
            for (int i = 0; i < 6; i++) {
                m[i] = i % 3 == 2 ? uniform(-1.5, 1.5) * (w + h)
                                  : uniform(-2.5, 2.5);
            }
            same_at_every_level(img, w, h, m);
        }
        const double special[][6] = {
            {1, 0, 0, 0, 1, 0},        /* identity: dx = dy = 0 */
            {1, 0, 2, 0, 1, -1},       /* whole-pixel shift */
            {1, 0, 0.25, 0, 1, 0},     /* dy = 0 only */
            {1, 0, 0, 0, 1, -0.75},    /* dx = 0 only */
            {0.5, 0, 0, 0, 0.5, 0},    /* zoom in: many edge windows */
            {-1, 0, w, 0, -1, h},      /* both mirrors */
            {1, 0, 1e9, 0, 1, 0},      /* fully out */
            {1, INFINITY, 0, 0, 1, 0}, /* inf: outside */
            {NAN, 0, 0, 0, 1, 0},      /* NaN: outside */
        };
        for (size_t i = 0; i < sizeof(special) / sizeof(special[0]); i++) {
            same_at_every_level(img, w, h, special[i]);
        }
        /* identity copies, and every pixel of a shift past the image is
         * the fill, at the best level */
        for (int resample = RL_PIL_BILINEAR; resample <= RL_PIL_BICUBIC;
             resample++) {
            uint8_t *id = warped(img, w, h, special[0], resample, RL_SIMD_AVX2);
            CHECK(memcmp(id, img, (size_t)w * h * 3) == 0);
            free(id);
            uint8_t *out =
                warped(img, w, h, special[6], resample, RL_SIMD_AVX2);
            for (int i = 0; i < w * h; i++) {
                CHECK(out[3 * i] == 9 && out[3 * i + 1] == 200 &&
                      out[3 * i + 2] == 77);
            }
            free(out);
        }
        free(img);
    }
    PASS("test_pil_warp");
}
