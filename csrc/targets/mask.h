/*
 * targets/mask.h - a COCO segmentation (polygons or RLE) as the full-size
 * binary raster pycocotools gives it, evaluated only where an output needs
 * it.
 *
 * The raster is kept as its toggle positions: column-major pixel indices
 * (col * h + row, COCO's order) at which the value flips, strictly
 * increasing, each below h * w; the value at index i is the parity of the
 * number of toggles at or before i. That is an RLE's run boundaries, and
 * what a polygon's scan conversion yields, so neither needs the full-size
 * mask. Several parts (the polygons of one annotation, or RLEs) are OR'd
 * as they are added.
 *
 * A detection pipeline's geometry on a mask (nearest resize, crop, flip,
 * pad) takes every output pixel from one source pixel or the fill value,
 * so per-axis index maps say it all: rl_mask_sample writes
 * out[y * out_w + x] = raster[row_map[y], col_map[x]], or fill where
 * either map holds -1.
 *
 * Every function returns 0, -EINVAL for bad input (msg says what and
 * where) or -ENOMEM; none blocks or touches shared state: an rl_mask is
 * its caller's, and different masks may be used on different threads.
 */
#ifndef RL_TARGETS_MASK_H
#define RL_TARGETS_MASK_H

#include "rl.h"

/* The largest side of a mask's image and of a sampled output, so that
 * h * w fits COCO's 32-bit run counts. */
#define RL_MASK_MAX_SIDE 65535
/* The largest |x| or |y| of a polygon vertex, in pixels: far outside any
 * image, yet small enough that the scan conversion's arithmetic is exact
 * (targets/mask_poly.c). */
#define RL_MASK_MAX_COORD 1048576.0
/* The most base-64 digits of one compressed RLE count: 7 hold any
 * difference of two 32-bit counts. */
#define RL_MASK_MAX_DIGITS 7

typedef struct rl_mask {
    int h, w;      /* the image's size: 1..RL_MASK_MAX_SIDE */
    uint32_t *pos; /* the toggles of the parts added so far (malloc) */
    size_t n;      /* how many */
} rl_mask;

/* An empty mask (all zero) of an h x w image. 0 or -EINVAL (a side
 * outside 1..RL_MASK_MAX_SIDE). Free with rl_mask_exit whatever it
 * returned. */
int rl_mask_init(rl_mask *m, int h, int w, char msg[RL_MSG_MAX]);
void rl_mask_exit(rl_mask *m);

/* ORs in a polygon of `points` vertices (x0, y0, x1, y1, ...: pixel
 * coordinates, closed from the last vertex to the first) as pycocotools'
 * frPoly rasterizes it. -EINVAL: fewer than 3 points, or a coordinate not
 * finite or beyond RL_MASK_MAX_COORD. */
int rl_mask_add_polygon(rl_mask *m, const double *xy, size_t points,
                        char msg[RL_MSG_MAX]);

/* ORs in an uncompressed RLE: n run lengths, zeros first, column-major.
 * -EINVAL: a negative count, or counts that do not sum to h * w. */
int rl_mask_add_counts(rl_mask *m, const int64_t *counts, size_t n,
                       char msg[RL_MSG_MAX]);

/* ORs in a compressed RLE, COCO's string of `len` bytes (its counts in
 * 6-bit digits '0'..'o', from the third on as differences with the count
 * two before). -EINVAL: a byte outside '0'..'o', a count cut short or of
 * more than RL_MASK_MAX_DIGITS digits, a count below 0 or over h * w,
 * counts that do not sum to h * w. */
int rl_mask_add_string(rl_mask *m, const char *s, size_t len,
                       char msg[RL_MSG_MAX]);

/* Writes out_h * out_w bytes to out: raster[row_map[y], col_map[x]] (0 or
 * 1), or fill where row_map[y] or col_map[x] is -1. Reads each map entry
 * once. -EINVAL: a map entry outside -1..h-1 (rows) or -1..w-1 (columns),
 * or an output side outside 0..RL_MASK_MAX_SIDE. Time O(h + toggles +
 * out_h * out_w), memory O(w + h + toggles + out_h + out_w): the full-size
 * raster is never made. */
int rl_mask_sample(const rl_mask *m, const int32_t *row_map, int out_h,
                   const int32_t *col_map, int out_w, uint8_t fill,
                   uint8_t *out, char msg[RL_MSG_MAX]);

/* A segmentation PNG's stored samples (decode/png_index.h: a palette's
 * indices, 1/2/4/8-bit, or 8-bit grey values, as Pillow's np.array gives
 * them) sampled as rl_mask_sample samples a raster: out[y * out_w + x] =
 * png[row_map[y], col_map[x]], or fill. The maps and output sides are
 * checked as rl_mask_sample checks them, against the PNG's size; the image
 * is never expanded to colours, and only the rows the maps read are
 * unpacked (every row is inflated and checked: the outcome does not depend
 * on the maps). -EINVAL: a file that is not a whole, sound PNG of those
 * kinds (msg says what it is), a side over RL_MASK_MAX_SIDE, a bad map.
 * Memory O(distinct rows read x width + the maps), plus, for
 * non-interlaced files of up to 64 MiB of rows, the file's rows. */
int rl_mask_png_sample(const uint8_t *data, size_t len, const int32_t *row_map,
                       int out_h, const int32_t *col_map, int out_w,
                       uint8_t fill, uint8_t *out, char msg[RL_MSG_MAX]);

/* The PNG's size as rl_mask_png_sample reads it: 0 or -EINVAL. */
int rl_mask_png_size(const uint8_t *data, size_t len, int *height, int *width,
                     char msg[RL_MSG_MAX]);

/* Internal (targets/mask_sample.c, for the samplers): checks out_h and
 * out_w (0..RL_MASK_MAX_SIDE) or checks the maps against an h x w source,
 * copying them to rows and cols (-1 in cols becomes w). 0 or -EINVAL. */
int rl__mask_check_out(int out_h, int out_w, char msg[RL_MSG_MAX]);
int rl__mask_read_maps(int h, int w, const int32_t *row_map, int out_h,
                       const int32_t *col_map, int out_w, int32_t *rows,
                       int32_t *cols, char msg[RL_MSG_MAX]);

/* Internal (targets/mask_runs.c, for the parsers): ORs in a part given as
 * n toggle positions in any order, duplicates cancelling in pairs, each
 * <= h * w (those at h * w flip nothing). Sorts pos in place; the caller
 * keeps it. 0 or -ENOMEM. */
int rl__mask_or(rl_mask *m, uint32_t *pos, size_t n, char msg[RL_MSG_MAX]);

#endif
