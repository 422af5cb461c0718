/*
 * decode/png_index.h - a segmentation PNG's samples as stored: a palette
 * image's indices (colour type 3, 1, 2, 4 or 8 bits), or an 8-bit
 * greyscale image's values, one byte a pixel and never expanded to
 * colours. That is what Pillow's np.array(Image.open(f)) gives for its 'P'
 * and 'L' images, what a segmentation data set's mask is (VOC's class
 * indices, 255 its border).
 *
 * A file is judged whole, as decode/png.c judges an image, whatever rows
 * are asked for: the chunk list up to IEND (a file cut before it is
 * truncated, a critical chunk with a wrong CRC corrupt) and every row
 * inflated and its filter type checked; only the rows asked for are
 * unpacked and kept. Non-interlaced files of at most RL_PNG_ROWS_MAX
 * filtered bytes take decode/png_rows.h's path (unfiltering down to the
 * last row asked for), the rest libspng's, row by row, interlaced ones
 * too (libspng puts each pass's pixels in place in the rows kept).
 *
 * The functions return 0, -EINVAL with msg (RL_MSG_MAX bytes) naming what
 * is wrong with the file, or -ENOMEM; they keep no state, block on
 * nothing and may run on any thread.
 */
#ifndef RL_DECODE_PNG_INDEX_H
#define RL_DECODE_PNG_INDEX_H

#include "rl.h"

/* The image's size from data[0..len), once its signature, chunk list and
 * IHDR are sound and its colour type and depth one of those above. */
int rl_png_index_size(const uint8_t *data, size_t len, int *height, int *width,
                      char msg[RL_MSG_MAX]);

/* Decodes data[0..len) (rl_png_index_size's checks first) and writes the
 * width samples of each row y whose slot[y] >= 0 to rows + slot[y] *
 * stride (stride >= width); slot has height entries, the slots distinct
 * and numbered from 0 (each below the count of rows with one). Rows
 * without a slot are decoded and dropped. */
int rl_png_index_rows(const uint8_t *data, size_t len, const int32_t *slot,
                      uint8_t *rows, size_t stride, char msg[RL_MSG_MAX]);

#endif
