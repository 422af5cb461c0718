/*
 * fuzz_mask_png.c - libFuzzer harness on a segmentation PNG sampled
 * through index maps (rl_mask_png_sample, targets/mask.h, and
 * decode/png_index.c below it).
 *
 * DESIGN: the input's first 4 bytes are the header: the sampled height
 * and width (bytes 0, 1: 0..69), the fill value (byte 2) and the maps'
 * seed (byte 3: its top bit puts one entry out of range; bit 6 has every
 * chunk's CRC made right first, so that mutations reach the inflation and
 * the rows rather than stop at the CRC check); the rest is the PNG. Every
 * call must return 0, -EINVAL with a message, or -ENOMEM. The
 * same file is also sampled whole (identity maps) when it is at most
 * 2^20 pixels: the outcome must not depend on the maps (both succeed or
 * both fail), and a sampled output must be the whole one indexed by the
 * maps, the fill where they hold -1. Any failed check aborts; ASan and
 * UBSan catch reads outside the input and undefined arithmetic.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "targets/mask.h"

#define HEADER_BYTES 4

static void check(int ok)
{
    if (!ok) {
        abort();
    }
}

static void check_status(int rc, const char *msg)
{
    check(rc == 0 || rc == -EINVAL || rc == -ENOMEM);
    check(rc == 0 || msg[0] != '\0');
}

/* The CRC-32 of n bytes (PNG's, bit by bit: plain, not fast). */
static uint32_t crc32_of(const uint8_t *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) {
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        }
    }
    return c ^ 0xFFFFFFFFu;
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           p[3];
}

/* Every whole chunk after the signature given its right CRC, in place. */
static void mend_crcs(uint8_t *png, size_t len)
{
    for (size_t at = 8; len - at >= 12;) {
        uint32_t n = be32(png + at);
        if (n > len - at - 12) {
            return;
        }
        uint32_t c = crc32_of(png + at + 4, (size_t)n + 4);
        uint8_t *q = png + at + 8 + n;
        q[0] = (uint8_t)(c >> 24);
        q[1] = (uint8_t)(c >> 16);
        q[2] = (uint8_t)(c >> 8);
        q[3] = (uint8_t)c;
        at += (size_t)n + 12;
    }
}

/* n entries in -1..side-1 from a small generator seeded by seed. */
static void make_map(int32_t *map, int n, int side, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (int i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        map[i] = (int32_t)((x >> 16) % (uint32_t)(side + 1)) - 1;
    }
}

/* The whole image by identity maps: 0 with *full (malloc) or the status. */
static int whole(const uint8_t *png, size_t len, int h, int w, uint8_t **full)
{
    int32_t *rows = malloc(sizeof(int32_t) * (size_t)h);
    int32_t *cols = malloc(sizeof(int32_t) * (size_t)w);
    *full = malloc((size_t)h * (size_t)w);
    char msg[RL_MSG_MAX] = "";
    int rc = -ENOMEM;
    if (rows && cols && *full) {
        for (int i = 0; i < h; i++) {
            rows[i] = i;
        }
        for (int i = 0; i < w; i++) {
            cols[i] = i;
        }
        rc = rl_mask_png_sample(png, len, rows, h, cols, w, 0, *full, msg);
        check_status(rc, msg);
    }
    free(rows);
    free(cols);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < HEADER_BYTES) {
        return 0;
    }
    const uint8_t *hdr = data;
    size_t len = size - HEADER_BYTES;
    uint8_t *png = malloc(len + 1);
    if (png == NULL) {
        return 0;
    }
    memcpy(png, data + HEADER_BYTES, len);
    if (hdr[3] & 0x40 && len > 8) {
        mend_crcs(png, len);
    }
    int out_h = hdr[0] % 70, out_w = hdr[1] % 70;
    uint8_t fill = hdr[2];
    char msg[RL_MSG_MAX] = "";
    int h = 1, w = 1;
    int sized = rl_mask_png_size(png, len, &h, &w, msg);
    check_status(sized, msg);
    int32_t rows[70], cols[70];
    make_map(rows, out_h, h, hdr[3]);
    make_map(cols, out_w, w, hdr[3] + 7u);
    int bad_map = (hdr[3] & 0x80) && out_h > 0;
    if (bad_map) {
        rows[hdr[3] % out_h] = h;
    }
    uint8_t out[70 * 70];
    msg[0] = '\0';
    int rc =
        rl_mask_png_sample(png, len, rows, out_h, cols, out_w, fill, out, msg);
    check_status(rc, msg);
    uint8_t *full = NULL;
    int whole_rc = -ENOMEM;
    if (sized != 0 || bad_map) {
        check(rc != 0);
    } else if ((uint64_t)h * (uint64_t)w <= (1u << 20)) {
        whole_rc = whole(png, len, h, w, &full);
    }
    if (whole_rc != -ENOMEM && rc != -ENOMEM) {
        check((whole_rc == 0) == (rc == 0));
    }
    if (whole_rc == 0 && rc == 0) {
        for (int y = 0; y < out_h; y++) {
            for (int x = 0; x < out_w; x++) {
                uint8_t want =
                    rows[y] < 0 || cols[x] < 0
                        ? fill
                        : full[(size_t)rows[y] * (size_t)w + (size_t)cols[x]];
                check(out[y * out_w + x] == want);
            }
        }
    }
    free(full);
    free(png);
    return 0;
}
