/*
 * decode/png_rows.c - a PNG's rows inflated whole (libdeflate) and
 * unfiltered: see png_rows.h. This is the only file that includes
 * libdeflate.h.
 *
 * DESIGN: the IDAT chunks' data, joined (or read in place when there is
 * one chunk), is one zlib stream. Its two-byte header is checked as zlib
 * checks it; its Adler-32 is not, as libspng is told not to (Pillow stops
 * inflating at the last row and never reaches it). The deflate data must
 * inflate to exactly the image's filtered size: libdeflate reports a
 * stream that would go past the buffer, or ends short of it, and either
 * is declined, so that libspng judges the file (a short stream fails
 * whatever the region, libspng decoding every row; the rest of a longer
 * one is ignored, as Pillow ignores it). Only the rows down to the region's last are unfiltered: PNG's
 * filters chain each row to the one above, the rows below are not needed.
 * But every row's filter byte is checked, a byte a row: a filter type over
 * 4 anywhere in the image declines the file, whatever the region, so that
 * a crop above a damaged row fails as the whole image does.
 *
 * Unfiltering is in place. The Paeth filter of 3- and 4-byte pixels (8-bit
 * RGB and RGBA, what encoders pick for most rows of photographs) goes a
 * pixel at a time in 16-bit lanes of an SSE2 register: each pixel depends
 * on the one to its left, so the work is a chain of pixels, not of bytes.
 * It loads and stores 4 bytes per pixel; for a 3-byte pixel the fourth
 * lane's prediction is masked to zero, so the byte after the pixel is
 * stored back unchanged (the buffers keep slack past their last row).
 * Each pixel's bytes are loaded before the pixel to their left is stored:
 * a load that overlaps a store still in flight (the 3-byte case) cannot
 * take its bytes from the store and waits for it, which cost a third of
 * the time.
 */
#include "decode/png_rows.h"
#include "simd.h" /* rl_simd_level: the SIMD level in use */

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libdeflate.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Bytes past a buffer's last row that a 4-byte pixel access may touch. */
#define SLACK 16

size_t rl__png_rows_trim(rl_png_rows *r, bool roll)
{
    return rl_decode_buf_trim(&r->idat, roll) +
           rl_decode_buf_trim(&r->rows, roll) +
           rl_decode_buf_trim(&r->zero, roll);
}

uint32_t rl__png_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           p[3];
}

void rl__png_rows_exit(rl_png_rows *r)
{
    if (r->inflater != NULL) {
        libdeflate_free_decompressor(r->inflater);
    }
    rl_decode_buf_exit(&r->idat);
    rl_decode_buf_exit(&r->rows);
    rl_decode_buf_exit(&r->zero);
    memset(r, 0, sizeof(*r));
}

uint32_t rl__png_crc32(const uint8_t *p, size_t n)
{
    return libdeflate_crc32(0, p, n);
}

int rl__png_walk_chunks(const uint8_t *data, size_t len, bool *cut,
                        size_t *cut_at, char *msg)
{
    size_t at = 8; /* the signature */
    *cut = true;
    for (;; at += (size_t)rl__png_be32(data + at) + 12) {
        *cut_at = at;
        if (len - at < 12) {
            return 0;
        }
        uint32_t n = rl__png_be32(data + at);
        const uint8_t *type = data + at + 4;
        if (n > 0x7FFFFFFFu) {
            snprintf(msg, RL_MSG_MAX, "PNG chunk length %u is invalid", n);
            return RL_EDECODE;
        }
        if ((size_t)n > len - at - 12) {
            return 0; /* the chunk is cut */
        }
        if (type[0] >= 'A' && type[0] <= 'Z') { /* critical */
            uint32_t crc = rl__png_crc32(type, (size_t)n + 4);
            if (crc != rl__png_be32(type + 4 + n)) {
                snprintf(msg, RL_MSG_MAX,
                         "PNG %.4s chunk at byte %zu has a wrong CRC "
                         "(corrupt file)",
                         (const char *)type, at);
                return RL_EDECODE;
            }
        }
        if (memcmp(type, "IEND", 4) == 0) {
            *cut = false;
            return 0;
        }
    }
}

/*
 * The zlib stream of the file's IDAT chunks in *z, *zlen: in place for one
 * chunk, else joined in r->idat. 0, RL_PNG_DECLINED (no IDAT, or IDAT
 * chunks apart: libspng's to judge) or -ENOMEM. The chunk lengths were
 * checked against len by png.c's walk.
 */
static int gather(rl_png_rows *r, const uint8_t *data, size_t len,
                  const uint8_t **z, size_t *zlen)
{
    size_t first = 0, total = 0, chunks = 0;
    bool after = false; /* a chunk followed the IDAT run */
    for (size_t at = 8; len - at >= 12;) {
        size_t n = rl__png_be32(data + at);
        const uint8_t *type = data + at + 4;
        if (n > len - at - 12) {
            return RL_PNG_DECLINED;
        }
        if (memcmp(type, "IDAT", 4) == 0) {
            if (after) {
                return RL_PNG_DECLINED;
            }
            first = chunks == 0 ? at : first;
            total += n;
            chunks++;
        } else if (chunks > 0) {
            after = true;
        }
        if (memcmp(type, "IEND", 4) == 0) {
            break;
        }
        at += n + 12;
    }
    if (chunks == 0) {
        return RL_PNG_DECLINED;
    }
    if (chunks == 1) {
        *z = data + first + 8;
        *zlen = total;
        return 0;
    }
    if (rl_decode_buf_reserve(&r->idat, total) != 0) {
        return -ENOMEM;
    }
    size_t k = 0;
    for (size_t at = first; k < total; at += rl__png_be32(data + at) + 12) {
        size_t n = rl__png_be32(data + at);
        memcpy(r->idat.data + k, data + at + 8, n);
        k += n;
    }
    *z = r->idat.data;
    *zlen = total;
    return 0;
}

/* ---- unfiltering (PNG's five filter types, in place) ---- */

static void unfilter_sub(uint8_t *row, size_t n, size_t bpp)
{
    for (size_t i = bpp; i < n; i++) {
        row[i] = (uint8_t)(row[i] + row[i - bpp]);
    }
}

static void unfilter_up(uint8_t *row, const uint8_t *up, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        row[i] = (uint8_t)(row[i] + up[i]);
    }
}

static void unfilter_avg(uint8_t *row, const uint8_t *up, size_t n, size_t bpp)
{
    for (size_t i = 0; i < bpp && i < n; i++) {
        row[i] = (uint8_t)(row[i] + (up[i] >> 1));
    }
    for (size_t i = bpp; i < n; i++) {
        row[i] = (uint8_t)(row[i] + ((row[i - bpp] + up[i]) >> 1));
    }
}

/* PNG's Paeth predictor of a (left), b (up), c (up-left). */
static inline unsigned paeth(int a, int b, int c)
{
    int pa = abs(b - c), pb = abs(a - c), pc = abs(a + b - 2 * c);
    if (pa <= pb && pa <= pc) {
        return (unsigned)a;
    }
    return (unsigned)(pb <= pc ? b : c);
}

static void unfilter_paeth_bytes(uint8_t *row, const uint8_t *up, size_t n,
                                 size_t bpp)
{
    for (size_t i = 0; i < bpp && i < n; i++) {
        row[i] = (uint8_t)(row[i] + up[i]); /* a = c = 0: b */
    }
    for (size_t i = bpp; i < n; i++) {
        row[i] = (uint8_t)(row[i] + paeth(row[i - bpp], up[i], up[i - bpp]));
    }
}

#if defined(__SSE2__)
static inline __m128i load4(const uint8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm_unpacklo_epi8(_mm_cvtsi32_si128(v), _mm_setzero_si128());
}

static inline __m128i abs16(__m128i x)
{
    return _mm_max_epi16(x, _mm_sub_epi16(_mm_setzero_si128(), x));
}

/* The lanes of a pixel of bpp bytes (3 or 4) in 16-bit lanes. */
static inline __m128i pixel_lanes(size_t bpp)
{
    return bpp == 3 ? _mm_set_epi16(0, 0, 0, 0, 0, -1, -1, -1)
                    : _mm_set_epi16(0, 0, 0, 0, -1, -1, -1, -1);
}

/* One pixel: x (filtered) plus Paeth's prediction from a (left), b (up)
 * and c (up-left), all in 16-bit lanes; the lanes outside the pixel get x
 * back unchanged. */
static inline __m128i paeth_pixel(__m128i x, __m128i a, __m128i b, __m128i c,
                                  __m128i lanes)
{
    __m128i d = _mm_sub_epi16(b, c); /* p - a, where p = a + b - c */
    __m128i e = _mm_sub_epi16(a, c); /* p - b */
    __m128i pc = abs16(_mm_add_epi16(d, e));
    __m128i pa = abs16(d);
    __m128i pb = abs16(e);
    __m128i not_a =
        _mm_or_si128(_mm_cmpgt_epi16(pa, pb), _mm_cmpgt_epi16(pa, pc));
    __m128i c_not_b = _mm_cmpgt_epi16(pb, pc);
    __m128i bc = _mm_xor_si128(b, _mm_and_si128(_mm_xor_si128(b, c), c_not_b));
    __m128i pred = _mm_xor_si128(a, _mm_and_si128(_mm_xor_si128(a, bc), not_a));
    return _mm_and_si128(_mm_add_epi16(x, _mm_and_si128(pred, lanes)),
                         _mm_set1_epi16(0xFF));
}

static inline void store4(uint8_t *p, __m128i v)
{
    int32_t w = _mm_cvtsi128_si32(_mm_packus_epi16(v, v));
    memcpy(p, &w, 4);
}

/* Paeth for 3- or 4-byte pixels (n a multiple of bpp), a pixel a step:
 * the pixels of a row form one chain, each waiting for its left one. */
static inline __attribute__((always_inline)) void
paeth_pixels(uint8_t *row, const uint8_t *up, size_t n, size_t bpp)
{
    const __m128i lanes = pixel_lanes(bpp);
    __m128i a = _mm_setzero_si128(), c = a, x = load4(row);
    for (size_t i = 0; i < n; i += bpp) {
        __m128i b = load4(up + i);
        __m128i xi = x;
        x = load4(row + i + bpp); /* before the store: see below */
        a = paeth_pixel(xi, a, b, c, lanes);
        store4(row + i, a);
        c = b;
    }
}

/* Two Paeth rows at once, row1 below row0: row1's pixel needs row0's
 * pixel above it, just made and still in a register, and its own left
 * pixel, so the two rows are two chains the CPU runs side by side, about
 * twice the pixels per second of one chain. */
static inline __attribute__((always_inline)) void
paeth_pairs(uint8_t *row0, uint8_t *row1, const uint8_t *up, size_t n,
            size_t bpp)
{
    const __m128i lanes = pixel_lanes(bpp);
    __m128i a0 = _mm_setzero_si128(), c0 = a0, a1 = a0, c1 = a0;
    __m128i x0 = load4(row0), x1 = load4(row1);
    for (size_t i = 0; i < n; i += bpp) {
        __m128i b0 = load4(up + i);
        __m128i x0i = x0, x1i = x1;
        x0 = load4(row0 + i + bpp);
        x1 = load4(row1 + i + bpp);
        a0 = paeth_pixel(x0i, a0, b0, c0, lanes);
        a1 = paeth_pixel(x1i, a1, a0, c1, lanes);
        store4(row0 + i, a0);
        store4(row1 + i, a1);
        c0 = b0;
        c1 = a0;
    }
}

/* The loops as functions of their own: inlined into unfilter()'s loop
 * (GCC 12, -O2) they took 40% longer (3.7 against 2.6 ns a pixel). */
static void paeth_pixels_sse2(uint8_t *row, const uint8_t *up, size_t n,
                              size_t bpp)
{
    paeth_pixels(row, up, n, bpp);
}

static void paeth_pairs_sse2(uint8_t *row0, uint8_t *row1, const uint8_t *up,
                             size_t n, size_t bpp)
{
    paeth_pairs(row0, row1, up, n, bpp);
}

#endif

/* The Paeth loops of the SIMD level in use (place.h's, which
 * RINGLOADER_SIMD caps), NULL for the portable code. */
typedef struct paeth_loops {
    void (*pixels)(uint8_t *, const uint8_t *, size_t, size_t);
    void (*pairs)(uint8_t *, uint8_t *, const uint8_t *, size_t, size_t);
} paeth_loops;

static paeth_loops paeth_level(void)
{
    paeth_loops p = {NULL, NULL};
#if defined(__SSE2__)
    if (rl_simd_level() >= RL_SIMD_SSE2) {
        p.pixels = paeth_pixels_sse2;
        p.pairs = paeth_pairs_sse2;
    }
#endif
    return p;
}

/* Whether every row of r->rows starts with a filter type (0 to 4): all
 * the image's rows, not only those a region unfilters, since a file's
 * outcome must not depend on the crop (decode.h). A byte a row, against
 * the row's unfiltering. */
static bool filters_valid(const rl_png_rows *r, size_t rowbytes, int height)
{
    const uint8_t *p = r->rows.data;
    for (int y = 0; y < height; y++, p += rowbytes + 1) {
        if (*p > 4) {
            return false;
        }
    }
    return true;
}

/* Rows [0, nrows) of r->rows unfiltered, their filter types checked
 * (filters_valid). */
static void unfilter(rl_png_rows *r, size_t rowbytes, size_t bpp, int nrows)
{
    const uint8_t *up = r->zero.data;
    paeth_loops simd = paeth_level();
    if (bpp != 3 && bpp != 4) {
        simd.pixels = NULL;
    }
    for (int y = 0; y < nrows; y++) {
        uint8_t *row = r->rows.data + (size_t)y * (rowbytes + 1);
        uint8_t type = row[0];
        row++;
        if (type == 4 && simd.pixels != NULL) {
            if (y + 1 < nrows && row[rowbytes] == 4) {
                /* This row and the next are Paeth's: both in one pass. */
                simd.pairs(row, row + rowbytes + 1, up, rowbytes, bpp);
                up = row + rowbytes + 1;
                y++;
            } else {
                simd.pixels(row, up, rowbytes, bpp);
                up = row;
            }
            continue;
        }
        switch (type) {
        case 0:
            break;
        case 1:
            unfilter_sub(row, rowbytes, bpp);
            break;
        case 2:
            unfilter_up(row, up, rowbytes);
            break;
        case 3:
            unfilter_avg(row, up, rowbytes, bpp);
            break;
        default: /* 4, Paeth: the types were checked */
            unfilter_paeth_bytes(row, up, rowbytes, bpp);
            break;
        }
        up = row;
    }
}

int rl__png_rows_decode(rl_png_rows *r, const uint8_t *data, size_t len,
                        size_t rowbytes, size_t bpp, int height, int nrows,
                        const uint8_t **rows)
{
    const uint8_t *z;
    size_t zlen;
    int rc = gather(r, data, len, &z, &zlen);
    if (rc != 0) {
        return rc;
    }
    /* zlib's header: deflate, a window of at most 32 KiB, no preset
     * dictionary, the check bits right (what zlib's inflate refuses). */
    if (zlen < 2 || (z[0] & 0x0F) != 8 || (z[0] >> 4) > 7 ||
        (z[1] & 0x20) != 0 || ((unsigned)z[0] << 8 | z[1]) % 31 != 0) {
        return RL_PNG_DECLINED;
    }
    size_t size = (rowbytes + 1) * (size_t)height;
    if (rl_decode_buf_reserve(&r->rows, size + SLACK) != 0 ||
        rl_decode_buf_reserve(&r->zero, rowbytes + SLACK) != 0) {
        return -ENOMEM;
    }
    memset(r->zero.data, 0, rowbytes + SLACK);
    if (r->inflater == NULL) {
        r->inflater = libdeflate_alloc_decompressor();
        if (r->inflater == NULL) {
            return -ENOMEM;
        }
    }
    /* Exactly size bytes, or declined: a longer stream is not inflated
     * past the buffer (libdeflate stops), a shorter one is the file's to
     * judge by the rows it holds. */
    size_t used;
    enum libdeflate_result res = libdeflate_deflate_decompress_ex(
        r->inflater, z + 2, zlen - 2, r->rows.data, size, &used, NULL);
    if (res != LIBDEFLATE_SUCCESS) {
        return RL_PNG_DECLINED;
    }
    /* A bad filter type in any row, above, in or below the region: the
     * file is libspng's to judge, which decodes every row (png.c). */
    if (!filters_valid(r, rowbytes, height)) {
        return RL_PNG_DECLINED;
    }
    unfilter(r, rowbytes, bpp, nrows);
    *rows = r->rows.data + 1;
    return 0;
}
