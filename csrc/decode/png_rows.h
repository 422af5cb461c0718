/*
 * decode/png_rows.h - a PNG's image data inflated whole with libdeflate and
 * unfiltered here: the fast path of decode/png.c and decode/png_index.c,
 * and the chunk walk both judge a file by.
 *
 * libspng inflates with zlib a row at a time and unfilters byte by byte;
 * for the files of a data set (one IDAT run, a well-formed zlib stream) it
 * is several times faster to inflate the whole stream in one call
 * (libdeflate's whole-buffer API, which cannot write past the buffer it is
 * given: the image's size bounds the inflation) and to unfilter each row
 * with a loop per filter type (Paeth, most rows of most files, with SSE2).
 * Anything else (a stream that is not exactly the image's size, a filter
 * type over 4 in any row, IDAT chunks not in one run) is declined, and png.c decodes
 * the file with libspng as before: the outcome of a file, its pixels or its
 * error, is libspng's either way.
 *
 * A state is owned by one thread (png.c's per-thread decoder state).
 */
#ifndef RL_DECODE_PNG_ROWS_H
#define RL_DECODE_PNG_ROWS_H

#include <stddef.h>
#include <stdint.h>

#include "decode/decode.h"

/* The largest filtered image the fast path holds (the whole of it is
 * inflated at once); a larger one is decoded row by row by libspng. */
#define RL_PNG_ROWS_MAX ((size_t)64 << 20)

/* rl__png_rows_decode's answer when it leaves the file to libspng. */
#define RL_PNG_DECLINED 1

typedef struct rl_png_rows {
    struct libdeflate_decompressor *inflater; /* made on first use */
    rl_decode_buf idat;                       /* IDAT chunks' data joined */
    rl_decode_buf rows; /* the rows, each its filter byte then its bytes */
    rl_decode_buf zero; /* zeros: the row above the first */
} rl_png_rows;

/* Frees what r holds and zeroes it; r itself is the caller's. */
void rl__png_rows_exit(rl_png_rows *r);

/* After an image: trims r's buffers (rl_decode_buf_trim) and returns the
 * bytes they hold. */
size_t rl__png_rows_trim(rl_png_rows *r, bool roll);

/* The big-endian 32-bit number at p (a chunk's length or CRC). */
uint32_t rl__png_be32(const uint8_t *p);

/* The CRC-32 of n bytes, as a PNG chunk's (zlib's crc32 from 0). */
uint32_t rl__png_crc32(const uint8_t *p, size_t n);

/*
 * Walks the chunks of data, a PNG file whose 8-byte signature the caller
 * checked: returns 0 with *cut telling whether the data ends before an
 * IEND chunk (and *cut_at where the chunk it ends in starts), or
 * RL_EDECODE with msg for a chunk length over PNG's 2^31 - 1 or a critical
 * chunk (IHDR, PLTE, IDAT, IEND) whose CRC is wrong. Bytes after IEND are
 * not looked at. Its callers tell libspng not to check those CRCs again
 * (nor the zlib stream's Adler-32, which Pillow does not reach either: it
 * stops inflating at the image's last row).
 */
int rl__png_walk_chunks(const uint8_t *data, size_t len, bool *cut,
                        size_t *cut_at, char *msg);

/*
 * Decodes the first nrows rows of the image in data[0..len), a whole PNG
 * file (every chunk complete and IEND present, as png.c's walk found it),
 * non-interlaced, of height rows of rowbytes bytes each (the file's format)
 * and bpp bytes per pixel (1 for pixels under a byte). On 0, *rows is row
 * 0's first byte and row y is at *rows + y * (rowbytes + 1), valid until
 * the next call or rl__png_rows_exit. Returns RL_PNG_DECLINED when the data
 * is not for this path (libspng decodes it then), which a filter type over
 * 4 in any of the height rows makes it, below row nrows too; and -ENOMEM. The caller
 * keeps (rowbytes + 1) * height within RL_PNG_ROWS_MAX.
 */
int rl__png_rows_decode(rl_png_rows *r, const uint8_t *data, size_t len,
                        size_t rowbytes, size_t bpp, int height, int nrows,
                        const uint8_t **rows);

#endif
