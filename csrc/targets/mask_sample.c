/*
 * targets/mask_sample.c - a mask evaluated at the rows and columns an
 * output takes from it (rl_mask_sample, targets/mask.h).
 *
 * DESIGN: the output is written row by row, as it lies in memory. The
 * toggles are sorted into buckets by source row, and a sweep down the
 * source rows keeps one byte per source column, its value at the current
 * row: a column starts at the parity of the toggles before it (the
 * column-major runs carry over from the column above) and flips at each
 * of its toggles. At each source row an output row asks for, that row is
 * gathered through the column map; the output rows that ask for the same
 * source row, and rows whose source rows saw no toggle since, are copies.
 * So the cost is the output's size plus the toggles and the source height,
 * whatever the scale, and the full-size raster is never made.
 */
#include "targets/mask.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The work arrays, freed together. */
typedef struct sweep {
    uint8_t *value;    /* w + 1: each source column's value, then fill */
    int32_t *cols;     /* out_w: source column, or w for fill */
    int32_t *rows;     /* out_h: the row map, read once */
    uint32_t *by_row;  /* h + 1 bucket starts of the toggles by row */
    uint32_t *toggled; /* the columns of the toggles, by row */
    uint32_t *want;    /* h + 1 bucket starts of the output rows by row */
    uint32_t *order;   /* the output rows by source row */
} sweep;

static void sweep_free(sweep *s)
{
    free(s->value);
    free(s->cols);
    free(s->rows);
    free(s->by_row);
    free(s->toggled);
    free(s->want);
    free(s->order);
}

static int sweep_alloc(sweep *s, const rl_mask *m, int out_h, int out_w)
{
    size_t h = (size_t)m->h;
    s->value = malloc((size_t)m->w + 1);
    s->cols = malloc(sizeof(int32_t) * ((size_t)out_w + 1));
    s->rows = malloc(sizeof(int32_t) * ((size_t)out_h + 1));
    s->by_row = calloc(h + 1, sizeof(uint32_t));
    s->toggled = malloc(sizeof(uint32_t) * (m->n + 1));
    s->want = calloc(h + 1, sizeof(uint32_t));
    s->order = malloc(sizeof(uint32_t) * ((size_t)out_h + 1));
    return s->value && s->cols && s->rows && s->by_row && s->toggled &&
                   s->want && s->order
               ? 0
               : -ENOMEM;
}

int rl__mask_read_maps(int h, int w, const int32_t *row_map, int out_h,
                       const int32_t *col_map, int out_w, int32_t *rows,
                       int32_t *cols, char msg[RL_MSG_MAX])
{
    for (int x = 0; x < out_w; x++) {
        int32_t c = col_map[x];
        if (c < -1 || c >= w) {
            snprintf(msg, RL_MSG_MAX,
                     "column map entry %d is %d: it must be -1 (fill) or a "
                     "column of the %d-wide mask",
                     x, (int)c, w);
            return -EINVAL;
        }
        cols[x] = c < 0 ? w : c;
    }
    for (int y = 0; y < out_h; y++) {
        int32_t r = row_map[y];
        if (r < -1 || r >= h) {
            snprintf(msg, RL_MSG_MAX,
                     "row map entry %d is %d: it must be -1 (fill) or a "
                     "row of the %d-high mask",
                     y, (int)r, h);
            return -EINVAL;
        }
        rows[y] = r;
    }
    return 0;
}

int rl__mask_check_out(int out_h, int out_w, char msg[RL_MSG_MAX])
{
    if (out_h < 0 || out_w < 0 || out_h > RL_MASK_MAX_SIDE ||
        out_w > RL_MASK_MAX_SIDE) {
        snprintf(msg, RL_MSG_MAX,
                 "sampled mask size %d x %d: each side must be 0..%d", out_h,
                 out_w, RL_MASK_MAX_SIDE);
        return -EINVAL;
    }
    return 0;
}

/* Counting sorts: the output rows by source row (want, order; rows of -1
 * left out) and the toggles' columns by row (by_row, toggled), and the
 * columns' values above row 0. */
static void sweep_index(sweep *s, const rl_mask *m, int out_h)
{
    uint32_t h = (uint32_t)m->h;
    for (int y = 0; y < out_h; y++) {
        if (s->rows[y] >= 0) {
            s->want[s->rows[y] + 1]++;
        }
    }
    for (uint32_t r = 0; r < h; r++) {
        s->want[r + 1] += s->want[r];
    }
    for (int y = 0; y < out_h; y++) {
        if (s->rows[y] >= 0) {
            s->order[s->want[s->rows[y]]++] = (uint32_t)y;
        }
    }
    for (uint32_t r = h; r > 0; r--) { /* back to bucket starts */
        s->want[r] = s->want[r - 1];
    }
    s->want[0] = 0;

    for (size_t i = 0; i < m->n; i++) {
        s->by_row[m->pos[i] % h + 1]++;
    }
    for (uint32_t r = 0; r < h; r++) {
        s->by_row[r + 1] += s->by_row[r];
    }
    size_t i = 0;
    for (int c = 0; c < m->w; c++) {
        uint32_t start = (uint32_t)c * h;
        s->value[c] = (uint8_t)(i & 1); /* toggles before the column */
        for (; i < m->n && m->pos[i] < start + h; i++) {
            uint32_t r = m->pos[i] - start;
            s->toggled[s->by_row[r]++] = (uint32_t)c;
        }
    }
    for (uint32_t r = h; r > 0; r--) {
        s->by_row[r] = s->by_row[r - 1];
    }
    s->by_row[0] = 0;
}

static void sweep_run(sweep *s, const rl_mask *m, int out_w, uint8_t *out)
{
    const uint8_t *last = NULL; /* an output row of the current values */
    for (int r = 0; r < m->h; r++) {
        for (uint32_t i = s->by_row[r]; i < s->by_row[r + 1]; i++) {
            s->value[s->toggled[i]] ^= 1;
            last = NULL;
        }
        for (uint32_t i = s->want[r]; i < s->want[r + 1]; i++) {
            uint8_t *row = out + (size_t)s->order[i] * (size_t)out_w;
            if (last != NULL) {
                memcpy(row, last, (size_t)out_w);
                continue;
            }
            for (int x = 0; x < out_w; x++) {
                row[x] = s->value[s->cols[x]];
            }
            last = row;
        }
        if (s->want[r + 1] == s->want[m->h]) {
            break; /* no output row lies further down */
        }
    }
}

int rl_mask_sample(const rl_mask *m, const int32_t *row_map, int out_h,
                   const int32_t *col_map, int out_w, uint8_t fill,
                   uint8_t *out, char msg[RL_MSG_MAX])
{
    if (rl__mask_check_out(out_h, out_w, msg) != 0) {
        return -EINVAL;
    }
    sweep s = {0};
    int rc = sweep_alloc(&s, m, out_h, out_w);
    if (rc != 0) {
        snprintf(msg, RL_MSG_MAX, "out of memory sampling a %d x %d mask", m->h,
                 m->w);
        goto out_free;
    }
    rc = rl__mask_read_maps(m->h, m->w, row_map, out_h, col_map, out_w, s.rows,
                            s.cols, msg);
    if (rc != 0) {
        goto out_free;
    }
    sweep_index(&s, m, out_h);
    s.value[m->w] = fill;
    for (int y = 0; y < out_h; y++) {
        if (s.rows[y] < 0) {
            memset(out + (size_t)y * (size_t)out_w, fill, (size_t)out_w);
        }
    }
    sweep_run(&s, m, out_w, out);
out_free:
    sweep_free(&s);
    return rc;
}
