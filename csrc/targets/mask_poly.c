/*
 * targets/mask_poly.c - a COCO polygon scan-converted to the toggles of
 * the raster pycocotools' frPoly gives, bit for bit.
 *
 * The semantics to match: vertices are scaled by 5 and rounded as C's
 * (int)(5 * v + 0.5) does (toward zero); each edge is walked one step at a
 * time along its longer axis (dx >= dy: along x), from its end with the
 * smaller coordinate on that axis, the other coordinate being
 * (int)(start + slope * t + 0.5) in double arithmetic; a step of the walk
 * from one x to the next at upsampled columns 5c + 2 -> 5c + 3 crosses
 * pixel column c (0 <= c < w), at pixel row ceil((v + 0.5) / 5 - 0.5) of
 * the smaller of the step's two y values v, clamped to 0..h; every
 * crossing toggles the column-major index c * h + row.
 *
 * DESIGN: the walk is not made point by point (5 points a pixel of
 * perimeter, however far outside the image): only the steps that cross a
 * column of the image are found. Along x that step is known at once; along
 * y (a steep edge) x moves by at most one a step and monotonically, so the
 * step across a column is found by bisection. Both rest on the arithmetic
 * being exact to well under a step, which RL_MASK_MAX_COORD keeps:
 * upsampled values and walks below 2^24, so rounding errors near 2^-28,
 * against steep slopes that differ from 1 by at least 2^-24. Between two edges the walk repeats the
 * shared vertex (or, below 0, lands one apart), which crosses no column of
 * the image, so edges are taken one at a time. Column c's test, that
 * (x + 0.5) / 5 - 0.5 be a whole number in 0..w-1, is x = 5c + 2; the row
 * is floor((v + 2) / 5), clamped.
 */
#include "targets/mask.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

/* The crossings of one polygon, growing. */
typedef struct crossings {
    uint32_t *pos;
    size_t n, cap;
    int h, w;
} crossings;

static int crossing_add(crossings *c, int col, int64_t v)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 256;
        uint32_t *pos = realloc(c->pos, sizeof(*pos) * cap);
        if (pos == NULL) {
            return -ENOMEM;
        }
        c->pos = pos;
        c->cap = cap;
    }
    /* floor((v + 2) / 5) for v of either sign */
    int64_t row = v + 2 >= 0 ? (v + 2) / 5 : -((-(v + 2) + 4) / 5);
    row = row < 0 ? 0 : row > c->h ? c->h : row;
    c->pos[c->n++] = (uint32_t)col * (uint32_t)c->h + (uint32_t)row;
    return 0;
}

/* floor(a / 5) and ceil(a / 5) for a of either sign. */
static int64_t floor5(int64_t a)
{
    return a >= 0 ? a / 5 : -((-a + 4) / 5);
}

static int64_t ceil5(int64_t a)
{
    return -floor5(-a);
}

/* One edge, oriented as the walk goes: from (xs, ys), `len` steps along
 * its longer axis, the other coordinate at step t being
 * (int)(base + slope * t + 0.5). */
typedef struct edge {
    bool along_x;
    int xs, ys, len;
    double slope;
} edge;

static edge edge_make(int x0, int y0, int x1, int y1)
{
    int dx = abs(x1 - x0), dy = abs(y1 - y0);
    edge e = {.along_x = dx >= dy};
    bool swap = e.along_x ? x0 > x1 : y0 > y1;
    int xs = swap ? x1 : x0, ys = swap ? y1 : y0;
    int xe = swap ? x0 : x1, ye = swap ? y0 : y1;
    e.xs = xs;
    e.ys = ys;
    e.len = e.along_x ? dx : dy;
    if (e.len > 0) {
        e.slope = e.along_x ? (double)(ye - ys) / dx : (double)(xe - xs) / dy;
    }
    return e;
}

/* The coordinate across the walk at step t. */
static int across(const edge *e, int t)
{
    double base = e->along_x ? e->ys : e->xs;
    return (int)(base + e->slope * t + 0.5);
}

/* An edge walked along x: the step from x = 5c + 2 to 5c + 3 is step
 * t = 5c + 2 - xs. */
static int cross_along_x(const edge *e, crossings *c)
{
    int64_t lo = ceil5((int64_t)e->xs - 2);
    int64_t hi = floor5((int64_t)e->xs + e->len - 3);
    lo = lo < 0 ? 0 : lo;
    hi = hi > c->w - 1 ? c->w - 1 : hi;
    for (int64_t col = lo; col <= hi; col++) {
        int t = (int)(5 * col + 2 - e->xs);
        int a = across(e, t), b = across(e, t + 1);
        if (crossing_add(c, (int)col, a < b ? a : b) != 0) {
            return -ENOMEM;
        }
    }
    return 0;
}

/* An edge walked along y: x runs monotonically from across(0) to
 * across(len); the step that leaves x <= 5c + 2 (or, going left, x >=
 * 5c + 3) is found by bisection, and its smaller y is ys + t. */
static int cross_along_y(const edge *e, crossings *c)
{
    int x0 = across(e, 0), x1 = across(e, e->len);
    if (x0 == x1) {
        return 0;
    }
    bool right = x0 < x1;
    int xmin = right ? x0 : x1, xmax = right ? x1 : x0;
    int64_t lo_col = ceil5((int64_t)xmin - 2);
    int64_t hi_col = floor5((int64_t)xmax - 3);
    lo_col = lo_col < 0 ? 0 : lo_col;
    hi_col = hi_col > c->w - 1 ? c->w - 1 : hi_col;
    for (int64_t col = lo_col; col <= hi_col; col++) {
        int bound = (int)(5 * col + 2);
        /* across(lo) is on the start's side of the boundary, across(hi)
         * past it */
        int lo = 0, hi = e->len;
        while (hi - lo > 1) {
            int mid = lo + (hi - lo) / 2;
            int x = across(e, mid);
            if (right ? x <= bound : x > bound) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        if (crossing_add(c, (int)col, (int64_t)e->ys + lo) != 0) {
            return -ENOMEM;
        }
    }
    return 0;
}

/* Vertex coordinate v upsampled; its range was checked. */
static int upsample(double v)
{
    return (int)(5.0 * v + 0.5);
}

static int check_points(const double *xy, size_t points, char *msg)
{
    if (points < 3) {
        snprintf(msg, RL_MSG_MAX,
                 "polygon has %zu point%s: a polygon needs at least 3 "
                 "(6 numbers x0, y0, x1, y1, ...)",
                 points, points == 1 ? "" : "s");
        return -EINVAL;
    }
    for (size_t i = 0; i < 2 * points; i++) {
        if (!isfinite(xy[i]) || fabs(xy[i]) > RL_MASK_MAX_COORD) {
            char value[32]; /* NaN without its sign bit */
            if (isnan(xy[i])) {
                snprintf(value, sizeof(value), "nan");
            } else {
                snprintf(value, sizeof(value), "%g", xy[i]);
            }
            snprintf(msg, RL_MSG_MAX,
                     "polygon point %zu has %c = %s: coordinates must be "
                     "finite and within +-%.0f pixels",
                     i / 2, i % 2 ? 'y' : 'x', value, RL_MASK_MAX_COORD);
            return -EINVAL;
        }
    }
    return 0;
}

int rl_mask_add_polygon(rl_mask *m, const double *xy, size_t points,
                        char msg[RL_MSG_MAX])
{
    int rc = check_points(xy, points, msg);
    if (rc != 0) {
        return rc;
    }
    crossings c = {.h = m->h, .w = m->w};
    for (size_t i = 0; i < points && rc == 0; i++) {
        size_t j = i + 1 < points ? i + 1 : 0;
        edge e = edge_make(upsample(xy[2 * i]), upsample(xy[2 * i + 1]),
                           upsample(xy[2 * j]), upsample(xy[2 * j + 1]));
        if (e.len > 0) {
            rc = e.along_x ? cross_along_x(&e, &c) : cross_along_y(&e, &c);
        }
    }
    if (rc != 0) {
        snprintf(msg, RL_MSG_MAX,
                 "out of memory for a polygon's %zu column crossings", c.n);
    } else {
        rc = rl__mask_or(m, c.pos, c.n, msg);
    }
    free(c.pos);
    return rc;
}
