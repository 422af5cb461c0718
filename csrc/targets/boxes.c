/*
 * targets/boxes.c - bounding boxes and keypoints mapped through a sample's
 * target geometry (targets/boxes.h), clamped and sanitized.
 *
 * DESIGN: every step follows torchvision.transforms.v2.functional's kernel
 * for tv_tensors.BoundingBoxes / KeyPoints, in double and in its order of
 * operations, so that a box on an edge lands on the same side of it (the
 * sanitizer's x1 >= 0 is decided by the last bit): an axis step works on
 * the box in its own format, then converts to XYXY to clamp where
 * torchvision clamps; a matrix step converts to XYXY, takes the corners'
 * hull, clamps, and converts back.
 */
#include "targets/boxes.h"

#include <math.h>
#include <string.h>

/* math.radians' factor: pi / 180 */
#define DEG_TO_RAD (3.14159265358979323846 / 180.0)

/* ---- the geometry's steps ---- */

void rl_geom_init(rl_target_geom *g, int width, int height)
{
    memset(g, 0, sizeof(*g));
    g->in_w = width;
    g->in_h = height;
}

int rl_geom_out_width(const rl_target_geom *g)
{
    return g->n ? g->step[g->n - 1].out_w : g->in_w;
}

int rl_geom_out_height(const rl_target_geom *g)
{
    return g->n ? g->step[g->n - 1].out_h : g->in_h;
}

/* A new step (identity, no clamp, the current canvas), or NULL. */
static rl_geom_step *push(rl_target_geom *g, rl_geom_kind kind,
                          const char **err)
{
    if (g->n >= RL_GEOM_MAX_STEPS) {
        *err = "too many geometry steps (at most 80)";
        return NULL;
    }
    rl_geom_step *s = &g->step[g->n];
    memset(s, 0, sizeof(*s));
    s->kind = kind;
    s->m[0] = s->m[4] = s->m[8] = 1.0;
    s->out_w = rl_geom_out_width(g);
    s->out_h = rl_geom_out_height(g);
    g->n++;
    return s;
}

static int check_size(int height, int width, const char **err)
{
    if (height < 1 || width < 1) {
        *err = "an output size must be at least 1x1";
        return -1;
    }
    return 0;
}

/* a flip of x (axis 0) or y (1): v -> size - v; a keypoint's to
 * size - 1 - v */
static int flip(rl_target_geom *g, int axis, const char **err)
{
    rl_geom_step *s = push(g, RL_GEOM_AXIS, err);
    if (!s)
        return -1;
    s->m[4 * axis] = -1.0;
    s->m[2 + 3 * axis] = axis ? s->out_h : s->out_w;
    s->kp_d[axis] = -1.0;
    return 0;
}

int rl_geom_hflip(rl_target_geom *g, const char **err)
{
    return flip(g, 0, err);
}

int rl_geom_vflip(rl_target_geom *g, const char **err)
{
    return flip(g, 1, err);
}

int rl_geom_resize(rl_target_geom *g, int height, int width, const char **err)
{
    if (check_size(height, width, err))
        return -1;
    int old_w = rl_geom_out_width(g), old_h = rl_geom_out_height(g);
    rl_geom_step *s = push(g, RL_GEOM_AXIS, err);
    if (!s)
        return -1;
    /* torchvision multiplies by the ratios as a float32 tensor, whatever
     * the boxes' dtype: the same rounding here */
    s->m[0] = (float)((double)width / old_w);
    s->m[4] = (float)((double)height / old_h);
    s->out_w = width;
    s->out_h = height;
    return 0;
}

int rl_geom_crop(rl_target_geom *g, int top, int left, int height, int width,
                 const char **err)
{
    if (check_size(height, width, err))
        return -1;
    rl_geom_step *s = push(g, RL_GEOM_AXIS, err);
    if (!s)
        return -1;
    s->m[2] = -(double)left;
    s->m[5] = -(double)top;
    s->clamp = 1;
    s->out_w = width;
    s->out_h = height;
    return 0;
}

int rl_geom_center_crop(rl_target_geom *g, int height, int width,
                        const char **err)
{
    /* nearbyint rounds half to even in the default mode, as Python's
     * round() does */
    int top = (int)nearbyint((rl_geom_out_height(g) - height) / 2.0);
    int left = (int)nearbyint((rl_geom_out_width(g) - width) / 2.0);
    return rl_geom_crop(g, top, left, height, width, err);
}

int rl_geom_pad(rl_target_geom *g, int left, int top, int right, int bottom,
                const char **err)
{
    int w = rl_geom_out_width(g) + left + right;
    int h = rl_geom_out_height(g) + top + bottom;
    if (check_size(h, w, err))
        return -1;
    rl_geom_step *s = push(g, RL_GEOM_AXIS, err);
    if (!s)
        return -1;
    s->m[2] = left;
    s->m[5] = top;
    s->clamp = 1;
    s->out_w = w;
    s->out_h = h;
    return 0;
}

int rl_geom_affine(rl_target_geom *g, double angle, double tx, double ty,
                   double scale, double shear_x, double shear_y,
                   const double *center, const char **err)
{
    if (!(scale > 0.0) || !isfinite(angle) || !isfinite(tx) || !isfinite(ty) ||
        !isfinite(scale) || !isfinite(shear_x) || !isfinite(shear_y)) {
        *err = "affine needs a positive scale and finite parameters";
        return -1;
    }
    double cx = rl_geom_out_width(g) * 0.5, cy = rl_geom_out_height(g) * 0.5;
    if (center) {
        cx = center[0];
        cy = center[1];
    }
    rl_geom_step *s = push(g, RL_GEOM_AFFINE, err);
    if (!s)
        return -1;
    /* the forward matrix T * C * RSS * C^-1, RSS = R(a) S(s) SHy SHx */
    double rot = angle * DEG_TO_RAD, sx = shear_x * DEG_TO_RAD;
    double sy = shear_y * DEG_TO_RAD;
    double a = cos(rot - sy) / cos(sy);
    double b = -(a * tan(sx) + sin(rot));
    double c = sin(rot - sy) / cos(sy);
    double d = cos(rot) - c * tan(sx);
    s->m[0] = a * scale;
    s->m[1] = b * scale;
    s->m[3] = c * scale;
    s->m[4] = d * scale;
    s->m[2] = cx + tx - s->m[0] * cx - s->m[1] * cy;
    s->m[5] = cy + ty - s->m[3] * cx - s->m[4] * cy;
    s->clamp = 1;
    return 0;
}

int rl_geom_rotate(rl_target_geom *g, double angle, const double *center,
                   const char **err)
{
    return rl_geom_affine(g, -angle, 0.0, 0.0, 1.0, 0.0, 0.0, center, err);
}

int rl_geom_perspective(rl_target_geom *g, const double coeffs[8],
                        const char **err)
{
    const double *p = coeffs;
    for (int i = 0; i < 8; i++) {
        if (!isfinite(p[i])) {
            *err = "perspective coefficients must be finite";
            return -1;
        }
    }
    double den = p[0] * p[4] - p[1] * p[3];
    if (den == 0.0) {
        *err = "perspective coefficients cannot be inverted "
               "(coeffs[0] * coeffs[4] == coeffs[1] * coeffs[3])";
        return -1;
    }
    rl_geom_step *s = push(g, RL_GEOM_PERSPECTIVE, err);
    if (!s)
        return -1;
    /* the inverse of the output-to-input map, as torchvision writes it */
    s->m[0] = (p[4] - p[5] * p[7]) / den;
    s->m[1] = (-p[1] + p[2] * p[7]) / den;
    s->m[2] = (p[1] * p[5] - p[2] * p[4]) / den;
    s->m[3] = (-p[3] + p[5] * p[6]) / den;
    s->m[4] = (p[0] - p[2] * p[6]) / den;
    s->m[5] = (-p[0] * p[5] + p[2] * p[3]) / den;
    s->m[6] = (-p[4] * p[6] + p[3] * p[7]) / den;
    s->m[7] = (-p[0] * p[7] + p[1] * p[6]) / den;
    s->m[8] = 1.0;
    s->clamp = 1;
    return 0;
}

/* ---- formats, clamping, sanitizing ---- */

void rl_boxes_convert(double *boxes, size_t n, rl_box_format from,
                      rl_box_format to)
{
    if (from == to)
        return;
    for (size_t i = 0; i < n; i++) {
        double *b = boxes + 4 * i;
        /* XYWH <-> CXCYWH directly, as torchvision converts them */
        if (from == RL_BOX_XYWH && to == RL_BOX_CXCYWH) {
            b[0] += b[2] / 2;
            b[1] += b[3] / 2;
            continue;
        }
        if (from == RL_BOX_CXCYWH && to == RL_BOX_XYWH) {
            b[0] -= b[2] / 2;
            b[1] -= b[3] / 2;
            continue;
        }
        /* to XYXY */
        if (from == RL_BOX_XYWH) {
            b[2] += b[0];
            b[3] += b[1];
        } else if (from == RL_BOX_CXCYWH) {
            double hw = b[2] / 2, hh = b[3] / 2;
            b[0] -= hw;
            b[1] -= hh;
            b[2] += b[0];
            b[3] += b[1];
        }
        /* from XYXY */
        if (to == RL_BOX_XYWH) {
            b[2] -= b[0];
            b[3] -= b[1];
        } else if (to == RL_BOX_CXCYWH) {
            b[2] -= b[0];
            b[3] -= b[1];
            b[0] = (b[0] * 2 + b[2]) / 2;
            b[1] = (b[1] * 2 + b[3]) / 2;
        }
    }
}

/* torch.clamp: a NaN stays NaN */
static double clampd(double v, double hi)
{
    return v < 0.0 ? 0.0 : (v > hi ? hi : v);
}

static void clamp_xyxy(double *b, double w, double h)
{
    b[0] = clampd(b[0], w);
    b[1] = clampd(b[1], h);
    b[2] = clampd(b[2], w);
    b[3] = clampd(b[3], h);
}

void rl_boxes_clamp(double *boxes, size_t n, rl_box_format fmt, int width,
                    int height)
{
    for (size_t i = 0; i < n; i++) {
        double *b = boxes + 4 * i;
        rl_boxes_convert(b, 1, fmt, RL_BOX_XYXY);
        clamp_xyxy(b, width, height);
        rl_boxes_convert(b, 1, RL_BOX_XYXY, fmt);
    }
}

void rl_keypoints_clamp(double *points, size_t n, int width, int height)
{
    for (size_t i = 0; i < n; i++) {
        points[2 * i] = clampd(points[2 * i], width - 1.0);
        points[2 * i + 1] = clampd(points[2 * i + 1], height - 1.0);
    }
}

size_t rl_boxes_sanitize(const double *boxes, size_t n, rl_box_format fmt,
                         int width, int height, double min_size,
                         double min_area, uint8_t *keep)
{
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        double b[4];
        memcpy(b, boxes + 4 * i, sizeof(b));
        rl_boxes_convert(b, 1, fmt, RL_BOX_XYXY);
        double ws = b[2] - b[0], hs = b[3] - b[1];
        int ok = ws >= min_size && hs >= min_size && b[0] >= 0 && b[1] >= 0 &&
                 b[2] >= 0 && b[3] >= 0 && ws * hs >= min_area &&
                 b[0] <= width && b[2] <= width && b[1] <= height &&
                 b[3] <= height;
        keep[i] = (uint8_t)ok;
        kept += (size_t)ok;
    }
    return kept;
}

size_t rl_boxes_centers_within(const double *boxes, size_t n, rl_box_format fmt,
                               int top, int left, int height, int width,
                               uint8_t *in)
{
    size_t count = 0;
    for (size_t i = 0; i < n; i++) {
        double b[4];
        memcpy(b, boxes + 4 * i, sizeof(b));
        rl_boxes_convert(b, 1, fmt, RL_BOX_XYXY);
        double cx = 0.5 * (b[0] + b[2]), cy = 0.5 * (b[1] + b[3]);
        int ok = left < cx && cx < (double)left + width && top < cy &&
                 cy < (double)top + height;
        in[i] = (uint8_t)ok;
        count += (size_t)ok;
    }
    return count;
}

void rl_boxes_zero_outside(double *boxes, size_t n, const uint8_t *in)
{
    for (size_t i = 0; i < n; i++) {
        if (!in[i])
            memset(boxes + 4 * i, 0, 4 * sizeof(double));
    }
}

/* ---- mapping ---- */

/* min and max that propagate NaN, as torch.aminmax */
static double nmin(double a, double b)
{
    return (a < b || isnan(a)) ? a : b;
}

static double nmax(double a, double b)
{
    return (a > b || isnan(a)) ? a : b;
}

static void map_point(const rl_geom_step *s, double x, double y, double *ox,
                      double *oy)
{
    const double *m = s->m;
    if (s->kind == RL_GEOM_AXIS) {
        *ox = m[0] * x + m[2];
        *oy = m[4] * y + m[5];
        return;
    }
    double nx = x * m[0] + y * m[1] + m[2];
    double ny = x * m[3] + y * m[4] + m[5];
    if (s->kind == RL_GEOM_AFFINE) {
        *ox = nx;
        *oy = ny;
        return;
    }
    double den = x * m[6] + y * m[7] + m[8];
    *ox = nx / den;
    *oy = ny / den;
}

/* v rounded to float32 where f32 (a float32 tensor's value after an
 * operation). */
static void round_f32(double *v, size_t n, int f32)
{
    for (size_t j = 0; f32 && j < n; j++)
        v[j] = (double)(float)v[j];
}

/* An axis step on a box in its own format, as torchvision's kernels do
 * it: the ends of XYXY (swapped by a flip), the start and size of XYWH (a
 * flip moves the start to W - (x + w)), the centre and size of CXCYWH. */
static void axis_in_format(const rl_geom_step *s, double *b, rl_box_format fmt,
                           int f32)
{
    for (int a = 0; a < 2; a++) {
        double k = s->m[4 * a], t = s->m[2 + 3 * a];
        double *p = b + a, *q = b + 2 + a;
        if (fmt == RL_BOX_XYXY) {
            double lo = k * *p + t, hi = k * *q + t;
            *p = k < 0 ? hi : lo;
            *q = k < 0 ? lo : hi;
        } else if (fmt == RL_BOX_XYWH && k < 0) {
            double end = *p + *q; /* x + w, a float32 sum where f32 */
            round_f32(&end, 1, f32);
            *p = k * end + t;
        } else {
            *p = k * *p + t;
            *q = k < 0 ? *q : k * *q;
        }
    }
}

/* One step on box b in format fmt; f32: each operation's result rounded
 * to float32, as torchvision's kernels on a float32 tensor give it. */
static void map_box(const rl_geom_step *s, double *b, rl_box_format fmt,
                    int f32)
{
    if (s->kind == RL_GEOM_AXIS) {
        axis_in_format(s, b, fmt, f32);
        round_f32(b, 4, f32);
        if (!s->clamp)
            return;
        rl_boxes_convert(b, 1, fmt, RL_BOX_XYXY);
    } else {
        rl_boxes_convert(b, 1, fmt, RL_BOX_XYXY);
        round_f32(b, 4, f32);
        /* the hull of the corners TL, TR, BR, BL */
        const int cx[4] = {0, 2, 2, 0}, cy[4] = {1, 1, 3, 3};
        double x, y, lo[2], hi[2];
        map_point(s, b[0], b[1], &lo[0], &lo[1]);
        hi[0] = lo[0];
        hi[1] = lo[1];
        for (int k = 1; k < 4; k++) {
            map_point(s, b[cx[k]], b[cy[k]], &x, &y);
            lo[0] = nmin(lo[0], x);
            hi[0] = nmax(hi[0], x);
            lo[1] = nmin(lo[1], y);
            hi[1] = nmax(hi[1], y);
        }
        b[0] = lo[0];
        b[1] = lo[1];
        b[2] = hi[0];
        b[3] = hi[1];
    }
    round_f32(b, 4, f32);
    clamp_xyxy(b, s->out_w, s->out_h);
    rl_boxes_convert(b, 1, RL_BOX_XYXY, fmt);
    round_f32(b, 4, f32);
}

void rl_boxes_map(const rl_target_geom *g, double *boxes, size_t n,
                  rl_box_format fmt)
{
    for (size_t i = 0; i < n; i++) {
        for (int k = 0; k < g->n; k++)
            map_box(&g->step[k], boxes + 4 * i, fmt, 0);
    }
}

void rl_boxes_map_f32(const rl_target_geom *g, double *boxes, size_t n,
                      rl_box_format fmt)
{
    for (size_t i = 0; i < n; i++) {
        double *b = boxes + 4 * i;
        round_f32(b, 4, 1);
        for (int k = 0; k < g->n; k++)
            map_box(&g->step[k], b, fmt, 1);
    }
}

void rl_boxes_map_whole(const rl_target_geom *g, double *boxes, size_t n,
                        rl_box_format fmt)
{
    for (size_t i = 0; i < n; i++) {
        double *b = boxes + 4 * i;
        for (int k = 0; k < g->n; k++) {
            const rl_geom_step *s = &g->step[k];
            map_box(s, b, fmt, 0);
            /* a resize: the product of a whole number and a float32
             * ratio is exact in double; rounded to float32, it is
             * torch's, which .to(dtype) truncates; a matrix step is
             * computed in float32 and truncated likewise (here: its
             * double result rounded to float32, so a corner whose float32
             * result lands a last bit below a whole number may come out
             * one more) */
            if (s->kind != RL_GEOM_AXIS ||
                (s->m[0] > 0.0 && s->m[4] > 0.0 &&
                 (s->m[0] != 1.0 || s->m[4] != 1.0))) {
                for (int j = 0; j < 4; j++)
                    b[j] = trunc((double)(float)b[j]);
            }
        }
    }
}

/* Keypoints through g, rounded to float32 after each step where f32. */
static void keypoints_map(const rl_target_geom *g, double *points, size_t n,
                          int f32)
{
    for (size_t i = 0; i < n; i++) {
        double *p = points + 2 * i;
        round_f32(p, 2, f32);
        for (int k = 0; k < g->n; k++) {
            const rl_geom_step *s = &g->step[k];
            map_point(s, p[0], p[1], &p[0], &p[1]);
            p[0] += s->kp_d[0];
            p[1] += s->kp_d[1];
            round_f32(p, 2, f32);
        }
    }
}

void rl_keypoints_map(const rl_target_geom *g, double *points, size_t n)
{
    keypoints_map(g, points, n, 0);
}

void rl_keypoints_map_f32(const rl_target_geom *g, double *points, size_t n)
{
    keypoints_map(g, points, n, 1);
}
