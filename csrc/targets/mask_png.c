/*
 * targets/mask_png.c - a segmentation PNG sampled through index maps
 * (rl_mask_png_sample, targets/mask.h).
 *
 * DESIGN: the maps are checked against the PNG's size, each distinct
 * source row the row map reads gets a slot, decode/png_index.h unpacks
 * those rows (a byte a pixel, the fill value after each), and every
 * output row is gathered from its slot through the column map (-1 made
 * the fill byte's column). Output rows of the same source row are copies.
 */
#include "targets/mask.h"

#include "decode/png_index.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rl_mask_png_size(const uint8_t *data, size_t len, int *height, int *width,
                     char msg[RL_MSG_MAX])
{
    int rc = rl_png_index_size(data, len, height, width, msg);
    if (rc == 0 && (*height > RL_MASK_MAX_SIDE || *width > RL_MASK_MAX_SIDE)) {
        snprintf(msg, RL_MSG_MAX,
                 "PNG mask is %d x %d (height x width): each side must be "
                 "1..%d",
                 *height, *width, RL_MASK_MAX_SIDE);
        rc = -EINVAL;
    }
    return rc;
}

/* The work arrays, freed together. */
typedef struct gather {
    int32_t *rows;  /* out_h: the row map */
    int32_t *cols;  /* out_w: the column map, w for fill */
    int32_t *slot;  /* h: each source row's slot, or -1 */
    int32_t *first; /* slots: the first output row of each */
    uint8_t *kept;  /* slots x (w + 1): the rows read, fill last */
} gather;

static void gather_free(gather *g)
{
    free(g->rows);
    free(g->cols);
    free(g->slot);
    free(g->first);
    free(g->kept);
}

/* Slots for the rows the map reads: their count, into g->slot and
 * g->first. */
static size_t assign_slots(gather *g, int h, int out_h)
{
    for (int r = 0; r < h; r++) {
        g->slot[r] = -1;
    }
    size_t n = 0;
    for (int y = 0; y < out_h; y++) {
        int32_t r = g->rows[y];
        if (r >= 0 && g->slot[r] < 0) {
            g->slot[r] = (int32_t)n;
            g->first[n++] = y;
        }
    }
    return n;
}

static void write_rows(const gather *g, int w, int out_h, int out_w,
                       uint8_t fill, uint8_t *out)
{
    size_t stride = (size_t)w + 1;
    for (int y = 0; y < out_h; y++) {
        uint8_t *row = out + (size_t)y * (size_t)out_w;
        int32_t r = g->rows[y];
        if (r < 0) {
            memset(row, fill, (size_t)out_w);
            continue;
        }
        int32_t k = g->slot[r];
        if (g->first[k] != y) { /* the slot's row is written: copy it */
            memcpy(row, out + (size_t)g->first[k] * (size_t)out_w,
                   (size_t)out_w);
            continue;
        }
        const uint8_t *src = g->kept + (size_t)k * stride;
        for (int x = 0; x < out_w; x++) {
            row[x] = src[g->cols[x]];
        }
    }
}

int rl_mask_png_sample(const uint8_t *data, size_t len, const int32_t *row_map,
                       int out_h, const int32_t *col_map, int out_w,
                       uint8_t fill, uint8_t *out, char msg[RL_MSG_MAX])
{
    int h, w;
    if (rl__mask_check_out(out_h, out_w, msg) != 0 ||
        rl_mask_png_size(data, len, &h, &w, msg) != 0) {
        return -EINVAL;
    }
    gather g = {0};
    g.rows = malloc(sizeof(int32_t) * ((size_t)out_h + 1));
    g.cols = malloc(sizeof(int32_t) * ((size_t)out_w + 1));
    g.slot = malloc(sizeof(int32_t) * (size_t)h);
    g.first = malloc(sizeof(int32_t) * ((size_t)out_h + 1));
    int rc = g.rows && g.cols && g.slot && g.first ? 0 : -ENOMEM;
    if (rc == 0) {
        rc = rl__mask_read_maps(h, w, row_map, out_h, col_map, out_w, g.rows,
                                g.cols, msg);
    }
    size_t n = rc == 0 ? assign_slots(&g, h, out_h) : 0;
    size_t stride = (size_t)w + 1;
    if (rc == 0) {
        g.kept = malloc(stride * (n + 1));
        rc = g.kept != NULL ? 0 : -ENOMEM;
    }
    for (size_t k = 0; rc == 0 && k < n; k++) {
        g.kept[k * stride + (size_t)w] = fill;
    }
    if (rc == 0) {
        rc = rl_png_index_rows(data, len, g.slot, g.kept, stride, msg);
    }
    if (rc == 0) {
        write_rows(&g, w, out_h, out_w, fill, out);
    }
    if (rc == -ENOMEM) {
        snprintf(msg, RL_MSG_MAX, "out of memory sampling a %d x %d PNG mask",
                 h, w);
    }
    gather_free(&g);
    return rc;
}
