/*
 * test_mask_png.c - a segmentation PNG's indices sampled through index
 * maps (rl_mask_png_sample, targets/mask.h), without Python: a 4-bit
 * palette PNG written here (zlib), known maps, the bytes expected, and
 * the files refused with their messages.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

#include "check.h"
#include "targets/mask.h"

#define H 5
#define W 7

/* The index of pixel (y, x) of the test image: 0..15. */
static unsigned pixel(int y, int x)
{
    return (unsigned)(y * 3 + x) % 16;
}

static size_t put_chunk(uint8_t *out, const char *type, const uint8_t *data,
                        uint32_t n)
{
    uint8_t *p = out;
    p[0] = (uint8_t)(n >> 24);
    p[1] = (uint8_t)(n >> 16);
    p[2] = (uint8_t)(n >> 8);
    p[3] = (uint8_t)n;
    memcpy(p + 4, type, 4);
    if (n > 0) {
        memcpy(p + 8, data, n);
    }
    uLong crc = crc32(0, p + 4, n + 4);
    p[8 + n] = (uint8_t)(crc >> 24);
    p[9 + n] = (uint8_t)(crc >> 16);
    p[10 + n] = (uint8_t)(crc >> 8);
    p[11 + n] = (uint8_t)crc;
    return 12 + n;
}

/* An H x W PNG of colour type `colour`, `depth` bits, into out: its
 * length. Palette 4-bit: pixel()'s indices; otherwise zero samples. */
static size_t make_png(uint8_t *out, int colour, int depth)
{
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    int channels = colour == 2 ? 3 : 1;
    size_t rowbytes = ((size_t)W * (size_t)channels * (size_t)depth + 7) / 8;
    uint8_t raw[H * (1 + 3 * W * 2)] = {0};
    for (int y = 0; y < H; y++) {
        uint8_t *row = raw + (size_t)y * (rowbytes + 1) + 1;
        for (int x = 0; colour == 3 && x < W; x++) {
            row[x / 2] |= (uint8_t)(pixel(y, x) << (x % 2 ? 0 : 4));
        }
    }
    uint8_t z[1024];
    uLongf zlen = sizeof(z);
    CHECK(compress(z, &zlen, raw, (uLong)(H * (rowbytes + 1))) == Z_OK);
    uint8_t ihdr[13] = {0, 0, 0, W, 0, 0, 0, H, (uint8_t)depth, (uint8_t)colour,
                        0, 0, 0};
    uint8_t plte[48];
    for (int i = 0; i < 48; i++) {
        plte[i] = (uint8_t)(i * 5);
    }
    size_t n = 8;
    memcpy(out, sig, 8);
    n += put_chunk(out + n, "IHDR", ihdr, 13);
    if (colour == 3) {
        n += put_chunk(out + n, "PLTE", plte, 48);
    }
    n += put_chunk(out + n, "IDAT", z, (uint32_t)zlen);
    n += put_chunk(out + n, "IEND", NULL, 0);
    return n;
}

static void test_sampled(void)
{
    uint8_t png[2048];
    size_t len = make_png(png, 3, 4);
    int h = 0, w = 0;
    char msg[RL_MSG_MAX] = "";
    CHECK_EQ(rl_mask_png_size(png, len, &h, &w, msg), 0);
    CHECK_EQ(h, H);
    CHECK_EQ(w, W);
    /* a flip, a repeated row, fill rows and columns */
    const int32_t rows[6] = {4, -1, 0, 2, 2, 1};
    const int32_t cols[4] = {6, 0, -1, 3};
    uint8_t out[6 * 4];
    CHECK_EQ(rl_mask_png_sample(png, len, rows, 6, cols, 4, 255, out, msg), 0);
    for (int y = 0; y < 6; y++) {
        for (int x = 0; x < 4; x++) {
            unsigned want =
                rows[y] < 0 || cols[x] < 0 ? 255 : pixel(rows[y], cols[x]);
            CHECK_EQ(out[y * 4 + x], want);
        }
    }
}

static void test_refused(void)
{
    uint8_t png[2048], out[4];
    const int32_t map[2] = {0, 1};
    char msg[RL_MSG_MAX] = "";
    size_t len = make_png(png, 2, 8);
    CHECK_EQ(rl_mask_png_sample(png, len, map, 2, map, 2, 0, out, msg),
             -EINVAL);
    CHECK(strstr(msg, "PNG is RGB (colour type 2), 8-bit") != NULL);
    len = make_png(png, 3, 4);
    CHECK_EQ(rl_mask_png_sample(png, len - 12, map, 2, map, 2, 0, out, msg),
             -EINVAL);
    CHECK(strstr(msg, "truncated file") != NULL);
    png[len - 20] ^= 1; /* in IDAT */
    CHECK_EQ(rl_mask_png_sample(png, len, map, 2, map, 2, 0, out, msg),
             -EINVAL);
    CHECK(strstr(msg, "IDAT chunk") != NULL);
    png[len - 20] ^= 1;
    const int32_t bad[2] = {0, H};
    CHECK_EQ(rl_mask_png_sample(png, len, bad, 2, map, 2, 0, out, msg),
             -EINVAL);
    CHECK(strstr(msg, "row map entry 1 is 5") != NULL);
    CHECK_EQ(rl_mask_png_sample(png, 4, map, 2, map, 2, 0, out, msg), -EINVAL);
    CHECK(strstr(msg, "not a PNG file") != NULL);
}

int main(void)
{
    test_sampled();
    test_refused();
    PASS("test_mask_png");
}
