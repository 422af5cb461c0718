/* test_resize.c - the place stage: resampler invariants (identity is exact,
 * a constant image stays constant at any scale, flips mirror, spans cover
 * what is read, strides place channels where asked, crop_first resamples
 * the box as if cut out), rl_store_rgb writes what the resampler writes,
 * and rl_place zeroes a CenterCrop's padding. */
#define _GNU_SOURCE
#include <math.h>
#include <string.h>

#include "place/place.h"
#include "check.h"
#include "simd.h"

#define DST(d, rs, ps, cs)        \
    ((rl_dst){.data = (d),        \
              .row_stride = (rs), \
              .px_stride = (ps),  \
              .ch_stride = (cs)})

static uint8_t src[300 * 400 * 4]; /* RGBX */

static rl_pixels whole(int w, int h)
{
    rl_pixels p = {src, (size_t)w * 4, 0, 0, w, h, w, h};
    return p;
}

static const float MUL[3] = {1.0f / (255 * 0.229f), 1.0f / (255 * 0.224f),
                             1.0f / 255};
static const float ADD[3] = {-0.485f / 0.229f, -0.456f / 0.224f, 0.0f};

/* A destination of dtype and layout for an ow x oh image at data. */
static rl_dst dst_of(uint8_t *data, rl_dtype dtype, rl_layout layout, int ow,
                     int oh)
{
    rl_place_config c = {
        .out_w = ow, .out_h = oh, .layout = layout, .dtype = dtype};
    memcpy(c.mul, MUL, sizeof(c.mul));
    memcpy(c.add, ADD, sizeof(c.add));
    rl_dst d;
    rl_place_dst(&c, data, &d);
    CHECK_EQ(rl_place_sample_bytes(&c),
             (size_t)ow * oh * 3 * rl_dtype_size(dtype));
    return d;
}

/* rl_store_rgb of the resampler's own 8-bit output (NHWC u8) writes the
 * same bytes as the resampler does in every dtype and layout, at every
 * SIMD level, for widths below and above the store's chunk. */
static void test_store_rgb(void)
{
    enum { MAXW = 333, MAXH = 48, PAD = 5 };
    static uint8_t rgb[MAXH * (MAXW * 3 + PAD)];
    static uint8_t want[MAXW * MAXH * 3 * 4], got[MAXW * MAXH * 3 * 4];
    rl_pixels px = whole(400, 300);
    int sizes[][2] = {{64, 48}, {MAXW, 20}, {1, 1}};
    rl_simd before = rl_simd_level();
    for (int level = RL_SIMD_C; level <= RL_SIMD_AVX2; level++) {
        rl_simd_cap((rl_simd)level);
        for (int s = 0; s < 3; s++) {
            int ow = sizes[s][0], oh = sizes[s][1];
            size_t stride = (size_t)ow * 3 + PAD; /* not packed rows */
            rl_dst u8 = DST(rgb, (ptrdiff_t)stride, 3, 1);
            CHECK_EQ(rl_resample(&px, RL_FILTER_BILINEAR, RL_PASSES_PILLOW13,
                                 11.5, 7.25, 301, 203.5, ow, oh, false, false,
                                 &u8),
                     0);
            for (int dt = RL_DTYPE_U8; dt <= RL_DTYPE_BF16; dt++) {
                for (int lay = 0; lay < 2; lay++) {
                    size_t n = (size_t)ow * oh * 3 * rl_dtype_size(dt);
                    rl_dst a = dst_of(want, dt, lay, ow, oh);
                    rl_dst b = dst_of(got, dt, lay, ow, oh);
                    memset(want, 0xA5, n + 8);
                    memset(got, 0x5A, n + 8);
                    CHECK_EQ(rl_resample(&px, RL_FILTER_BILINEAR,
                                         RL_PASSES_PILLOW13, 11.5, 7.25, 301,
                                         203.5, ow, oh, false, false, &a),
                             0);
                    rl_store_rgb(rgb, stride, ow, oh, &b);
                    CHECK(memcmp(want, got, n) == 0);
                    CHECK(got[n] == 0x5A); /* nothing past the image */
                }
            }
        }
    }
    rl_simd_cap(before);
}

/* rl_place of a 40 x 30 image into a 64 x 48 CenterCrop: the image at the
 * plan's rectangle (a copy at scale 1, mirrored when flipped), black
 * (0, or add[c] in float) all around it, whatever was there before. */
static void test_place(void)
{
    enum { OW = 64, OH = 48, IW = 40, IH = 30, VX = 12, VY = 9 };
    static float out[OW * OH * 3];
    rl_pixels px = whole(IW, IH);
    rl_plan plan = {.x = 0,
                    .y = 0,
                    .w = IW,
                    .h = IH,
                    .vx = VX,
                    .vy = VY,
                    .vw = IW,
                    .vh = IH,
                    .out_w = OW,
                    .out_h = OH};
    char msg[RL_MSG_MAX];
    for (int dt = RL_DTYPE_U8; dt <= RL_DTYPE_F32; dt++) {
        for (int lay = 0; lay < 2; lay++) {
            for (int flip = 0; flip < 2; flip++) {
                plan.flip = flip;
                rl_dst d = dst_of((uint8_t *)out, dt, lay, OW, OH);
                memset(out, 0x7F, sizeof(out));
                CHECK_EQ(rl_place(&px, &plan, 0, 0, IW, IH, &d, msg), 0);
                for (int y = 0; y < OH; y++) {
                    for (int x = 0; x < OW; x++) {
                        int ix = x - VX, iy = y - VY;
                        bool in = ix >= 0 && ix < IW && iy >= 0 && iy < IH;
                        int sx = flip ? IW - 1 - ix : ix;
                        for (int c = 0; c < 3; c++) {
                            int v = in ? src[(iy * IW + sx) * 4 + c] : 0;
                            uint8_t *e = rl_dst_at(&d, x, y) +
                                         c * d.ch_stride * rl_dtype_size(dt);
                            if (dt == RL_DTYPE_U8) {
                                CHECK_EQ(*e, v);
                            } else {
                                float f;
                                memcpy(&f, e, 4);
                                CHECK(f == v * MUL[c] + ADD[c]);
                            }
                        }
                    }
                }
            }
        }
    }
}

/* crop_first: resampling an integer box of the image equals resampling a
 * copy of the box alone (torchvision's crop, then resize), at every SIMD
 * level and scale, and reads only inside the box; without it, pixels
 * outside the box take part (a crop of the resized image). */
static void test_crop_first(void)
{
    enum { W = 400, H = 300 };
    static uint8_t img[W * H * 4], box[W * H * 4];
    static uint8_t want[333 * 250 * 3], got[333 * 250 * 3];
    for (int i = 0; i < W * H * 4; i++) {
        img[i] = (uint8_t)((i * 2246822519u) >> 24);
    }
    rl_pixels px = {img, W * 4, 0, 0, W, H, W, H};
    int boxes[][4] = {
        {37, 18, 201, 150}, {0, 0, 10, 7}, {390, 290, 10, 10}, {5, 9, 3, 2}};
    int sizes[][2] = {{64, 48}, {224, 224}, {1, 1}, {333, 250}};
    rl_simd before = rl_simd_level();
    bool differs = false;
    for (int b = 0; b < 4; b++) {
        int bx = boxes[b][0], by = boxes[b][1], bw = boxes[b][2];
        int bh = boxes[b][3];
        for (int y = 0; y < bh; y++) {
            memcpy(box + (size_t)y * bw * 4,
                   img + ((size_t)(by + y) * W + bx) * 4, (size_t)bw * 4);
        }
        rl_pixels cut = {box, (size_t)bw * 4, 0, 0, bw, bh, bw, bh};
        for (int s = 0; s < 4; s++) {
            int ow = sizes[s][0], oh = sizes[s][1];
            size_t n = (size_t)ow * oh * 3;
            int x0, x1, y0, y1;
            rl_resample_span(RL_FILTER_BILINEAR, W, bx, bw, ow, true, &x0, &x1);
            rl_resample_span(RL_FILTER_BILINEAR, H, by, bh, oh, true, &y0, &y1);
            CHECK(x0 >= bx && x1 <= bx + bw && y0 >= by && y1 <= by + bh);
            rl_dst dw = DST(want, ow * 3, 3, 1), dg = DST(got, ow * 3, 3, 1);
            rl_simd_cap(RL_SIMD_C);
            CHECK_EQ(rl_resample(&cut, RL_FILTER_BILINEAR, RL_PASSES_PILLOW13,
                                 0, 0, bw, bh, ow, oh, false, false, &dw),
                     0);
            for (int level = RL_SIMD_C; level <= RL_SIMD_AVX2; level++) {
                rl_simd_cap((rl_simd)level);
                CHECK_EQ(rl_resample(&px, RL_FILTER_BILINEAR,
                                     RL_PASSES_PILLOW13, bx, by, bw, bh, ow, oh,
                                     false, true, &dg),
                         0);
                CHECK(memcmp(want, got, n) == 0);
            }
            CHECK_EQ(rl_resample(&px, RL_FILTER_BILINEAR, RL_PASSES_PILLOW13,
                                 bx, by, bw, bh, ow, oh, false, false, &dg),
                     0);
            differs = differs || memcmp(want, got, n) != 0;
        }
    }
    CHECK(differs);
    rl_simd_cap(before);
}

int main(void)
{
    int w = 400, h = 300;
    for (int i = 0; i < w * h * 4; i++) {
        src[i] = (uint8_t)((i * 7919u) >> 3); /* X bytes too: ignored */
    }
    static uint8_t out[400 * 300 * 3], out2[400 * 300 * 3];
    rl_pixels px = whole(w, h);

    /* Identity: same size, whole image. */
    rl_dst d = DST(out, (ptrdiff_t)w * 3, 3, 1);
    CHECK_EQ(rl_resample(&px, RL_FILTER_BILINEAR, RL_PASSES_PILLOW13, 0, 0, w,
                         h, w, h, false, false, &d),
             0);
    for (int i = 0; i < w * h; i++) {
        CHECK(memcmp(out + 3 * i, src + 4 * i, 3) == 0);
    }

    /* Integer crop at scale 1 is a copy of the crop. */
    d.row_stride = 50 * 3;
    CHECK_EQ(rl_resample(&px, RL_FILTER_BILINEAR, RL_PASSES_PILLOW13, 10, 20,
                         50, 40, 50, 40, false, false, &d),
             0);
    for (int y = 0; y < 40; y++) {
        for (int x = 0; x < 50; x++) {
            CHECK(memcmp(out + y * 150 + 3 * x,
                         src + ((20 + y) * w + 10 + x) * 4, 3) == 0);
        }
    }

    /* Flip mirrors the columns. */
    rl_dst df = DST(out2, 150, 3, 1);
    CHECK_EQ(rl_resample(&px, RL_FILTER_BILINEAR, RL_PASSES_PILLOW13, 10, 20,
                         50, 40, 50, 40, true, false, &df),
             0);
    for (int y = 0; y < 40; y++) {
        for (int x = 0; x < 50; x++) {
            CHECK(memcmp(out + y * 150 + x * 3, out2 + y * 150 + (49 - x) * 3,
                         3) == 0);
        }
    }

    /* A constant image stays constant, down and up, any box. */
    for (int i = 0; i < w * h * 4; i++) {
        src[i] = (i % 4 == 3) ? 200 : 77;
    }
    double boxes[][4] = {{0, 0, 400, 300},
                         {3.3, 7.7, 123.4, 99.9},
                         {390, 290, 10, 10},
                         {0.5, 0.5, 3, 2}};
    int sizes[][2] = {{224, 224}, {17, 31}, {1, 1}, {333, 250}};
    for (int b = 0; b < 4; b++) {
        for (int s = 0; s < 4; s++) {
            int ow = sizes[s][0], oh = sizes[s][1];
            rl_dst dc = DST(out, (ptrdiff_t)ow * 3, 3, 1);
            CHECK_EQ(rl_resample(&px, RL_FILTER_BILINEAR, RL_PASSES_PILLOW13,
                                 boxes[b][0], boxes[b][1], boxes[b][2],
                                 boxes[b][3], ow, oh, false, false, &dc),
                     0);
            for (int i = 0; i < ow * oh * 3; i++) {
                CHECK_EQ(out[i], 77);
            }
        }
    }

    /* Spans: a region holding exactly the span gives the same output as
     * the whole image. */
    for (int i = 0; i < w * h * 4; i++) {
        src[i] = (uint8_t)((i * 2654435761u) >> 24);
    }
    double bx = 37.25, by = 18.5, bw = 201.0, bh = 150.5;
    int x0, x1, y0, y1;
    rl_resample_span(RL_FILTER_BILINEAR, w, bx, bw, 64, false, &x0, &x1);
    rl_resample_span(RL_FILTER_BILINEAR, h, by, bh, 48, false, &y0, &y1);
    CHECK(x0 >= 0 && x1 <= w && x0 < x1 && y0 >= 0 && y1 <= h && y0 < y1);
    static uint8_t region[400 * 300 * 4];
    size_t rstride = (size_t)(x1 - x0) * 4;
    for (int y = y0; y < y1; y++) {
        memcpy(region + (size_t)(y - y0) * rstride,
               src + ((size_t)y * w + x0) * 4, rstride);
    }
    rl_pixels sub = {region, rstride, x0, y0, x1 - x0, y1 - y0, w, h};
    rl_dst a = DST(out, 64 * 3, 3, 1), c = DST(out2, 64 * 3, 3, 1);
    CHECK_EQ(rl_resample(&px, RL_FILTER_BILINEAR, RL_PASSES_PILLOW13, bx, by,
                         bw, bh, 64, 48, false, false, &a),
             0);
    CHECK_EQ(rl_resample(&sub, RL_FILTER_BILINEAR, RL_PASSES_PILLOW13, bx, by,
                         bw, bh, 64, 48, false, false, &c),
             0);
    CHECK(memcmp(out, out2, 64 * 48 * 3) == 0);

    /* Against a double-precision evaluation of the filter: within 1 LSB
     * (two roundings to 8 bits, 14-bit weights). */
    {
        double sx = bw / 64, sy = bh / 48;
        double fx = sx > 1 ? sx : 1, fy = sy > 1 ? sy : 1;
        int worst = 0;
        for (int oy = 0; oy < 48; oy += 7) {
            for (int ox = 0; ox < 64; ox += 5) {
                for (int ch = 0; ch < 3; ch++) {
                    double cy = by + (oy + 0.5) * sy, cx = bx + (ox + 0.5) * sx;
                    double acc = 0, wsum = 0;
                    for (int yy = (int)(cy - fy + 0.5);
                         yy < (int)(cy + fy + 0.5); yy++) {
                        if (yy < 0 || yy >= h) {
                            continue;
                        }
                        double wy = 1 - fabs((yy - cy + 0.5) / fy);
                        if (wy <= 0) {
                            continue;
                        }
                        for (int xx = (int)(cx - fx + 0.5);
                             xx < (int)(cx + fx + 0.5); xx++) {
                            if (xx < 0 || xx >= w) {
                                continue;
                            }
                            double wx = 1 - fabs((xx - cx + 0.5) / fx);
                            if (wx <= 0) {
                                continue;
                            }
                            acc += wx * wy * src[(yy * w + xx) * 4 + ch];
                            wsum += wx * wy;
                        }
                    }
                    int want = (int)lround(acc / wsum);
                    int got = out[(oy * 64 + ox) * 3 + ch];
                    int d = abs(got - want);
                    worst = d > worst ? d : worst;
                }
            }
        }
        CHECK(worst <= 1);
    }

    /* Planar strides (NCHW) hold the same values as interleaved. */
    rl_dst planar = DST(out2, 64, 1, 64 * 48);
    CHECK_EQ(rl_resample(&px, RL_FILTER_BILINEAR, RL_PASSES_PILLOW13, bx, by,
                         bw, bh, 64, 48, false, false, &planar),
             0);
    for (int i = 0; i < 64 * 48; i++) {
        for (int ch = 0; ch < 3; ch++) {
            CHECK_EQ(out2[ch * 64 * 48 + i], out[i * 3 + ch]);
        }
    }

    /* Float outputs hold v * mul + add of the 8-bit result, in any
     * layout; f16 and bf16 round to nearest even. */
    static float f32[64 * 48 * 3];
    static uint16_t f16[64 * 48 * 3], bf16[64 * 48 * 3];
    rl_dst df32 = DST((uint8_t *)f32, 64, 1, 64 * 48);
    df32.dtype = RL_DTYPE_F32;
    float mul[3] = {1.0f / (255 * 0.229f), 1.0f / (255 * 0.224f), 1.0f / 255};
    float add[3] = {-0.485f / 0.229f, -0.456f / 0.224f, 0.0f};
    for (int ch = 0; ch < 3; ch++) {
        df32.mul[ch] = mul[ch];
        df32.add[ch] = add[ch];
    }
    rl_dst dh = df32, db = df32;
    dh.data = (uint8_t *)f16;
    dh.dtype = RL_DTYPE_F16;
    db.data = (uint8_t *)bf16;
    db.dtype = RL_DTYPE_BF16;
    CHECK_EQ(rl_resample(&px, RL_FILTER_BILINEAR, RL_PASSES_PILLOW13, bx, by,
                         bw, bh, 64, 48, false, false, &df32),
             0);
    CHECK_EQ(rl_resample(&px, RL_FILTER_BILINEAR, RL_PASSES_PILLOW13, bx, by,
                         bw, bh, 64, 48, false, false, &dh),
             0);
    CHECK_EQ(rl_resample(&px, RL_FILTER_BILINEAR, RL_PASSES_PILLOW13, bx, by,
                         bw, bh, 64, 48, false, false, &db),
             0);
    for (int i = 0; i < 64 * 48; i++) {
        for (int ch = 0; ch < 3; ch++) {
            float want = out[i * 3 + ch] * mul[ch] + add[ch];
            float got = f32[ch * 64 * 48 + i];
            CHECK(got == want);
            /* Decode the halves back and check they are within half an
             * ulp of the float (relative 2^-11 and 2^-8). */
            uint16_t h = f16[ch * 64 * 48 + i];
            int e = (h >> 10) & 31;
            float m = (float)(h & 1023);
            float hv = e ? ldexpf(1024 + m, e - 25) : ldexpf(m, -24);
            hv = (h & 0x8000) ? -hv : hv;
            CHECK(fabsf(hv - want) <= fabsf(want) * (1.0f / 2048) + 1e-7f);
            uint32_t bits = (uint32_t)bf16[ch * 64 * 48 + i] << 16;
            float bv;
            memcpy(&bv, &bits, 4);
            CHECK(fabsf(bv - want) <= fabsf(want) * (1.0f / 256) + 1e-30f);
        }
    }

    /* Zero fill. */
    memset(out, 1, 64 * 48 * 3);
    rl_fill_zero(&a, 2, 3, 5, 4);
    CHECK_EQ(out[(3 * 64 + 2) * 3], 0);
    CHECK_EQ(out[(6 * 64 + 6) * 3 + 2], 0);
    CHECK_EQ(out[(7 * 64 + 6) * 3], 1);

    test_store_rgb();
    test_place();
    test_crop_first();
    PASS("test_resize");
}
