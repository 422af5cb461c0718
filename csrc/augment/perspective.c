/*
 * augment/perspective.c - RandomPerspective ("perspective") of
 * torchvision.transforms.v2: the draws of its make_params, the
 * coefficients of _get_perspective_coeffs, and the warp by them
 * (rl_k_perspective, warp.c: _perspective_grid's float32 grid, then the
 * grid sampler the affine warps share).
 *
 * DESIGN: the p draw first (the op applies when it is below p, as
 * torch.rand(1) >= p skips it), then, only when it applies, the eight
 * corner offsets in make_params's order, each uniform over its integers as
 * torch.randint(lo, hi) is. The bounds are make_params's: half sizes by
 * integer division, int(distortion_scale * half) + 1 truncated from the
 * double product. The params hold the draw and the four end points
 * (x, y of top-left, top-right, bottom-right, bottom-left).
 *
 * torchvision solves its 8 x 8 system by least squares (LAPACK's gels) in
 * float64 and rounds the solution to float32. The system is square, so
 * its solution is exact up to float64's error; we solve it in long double
 * with partial pivoting and one step of refinement, and round to float32:
 * the two agree unless a coefficient lies within float64's error of a
 * float32 rounding point. Some corners make the system singular (decided
 * exactly, by the determinant's residues modulo primes); tiny images, or a
 * distortion_scale near 1, can draw them. torchvision's lstsq then raises,
 * or, where rounding hides the rank, returns coefficients of its rounding
 * errors; the op raises (-EDOM, naming the corners), and its warp is none.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "augment/kernels.h"

/* ---- distortion_scale, p, interpolation, fill (r, g, b; NaN: None) ---- */

#define PER_ARGS(X)                       \
    X(PER_, distortion_scale, 1, RL_ARG_) \
    X(PER_, p, 1, RL_ARG_)                \
    X(PER_, interpolation, 1, RL_ARG_)    \
    X(PER_, fill, 3, RL_ARG_)
enum { PER_ARGS(RL_OP_ARG_AT) PER_NARGS };
static const rl_op_field PER_fields[] = {PER_ARGS(RL_OP_FIELD) RL_OP_END};

static int perspective_check(const double *args, char *msg)
{
    double d = args[PER_distortion_scale], p = args[PER_p];
    double interp = args[PER_interpolation];
    const double *fill = args + PER_fill;
    if (!(d >= 0.0 && d <= 1.0)) {
        snprintf(msg, RL_MSG_MAX,
                 "perspective: distortion_scale must be in [0, 1], not %g", d);
        return RL_ECONFIG;
    }
    if (!(p >= 0.0 && p <= 1.0)) {
        snprintf(msg, RL_MSG_MAX, "perspective: p must be in [0, 1], not %g",
                 p);
        return RL_ECONFIG;
    }
    return rl_policy_check_common("perspective", interp, fill, msg);
}

/* torch.randint(lo, hi): uniform over the integers of [lo, hi) */
static double randint(rl_rng *g, int lo, int hi)
{
    return (double)(lo + rl_rng_index(g, hi - lo));
}

static void perspective_draw(const rl_op *op, rl_rng *g, int w, int h,
                             double *params)
{
    double d = op->args[PER_distortion_scale];
    params[0] = rl_rng_uniform(g);
    if (!(params[0] < op->args[PER_p])) {
        return; /* not this sample: make_params draws nothing */
    }
    int bh = (int)(d * (double)(h / 2)) + 1;
    int bw = (int)(d * (double)(w / 2)) + 1;
    double *e = params + 1;
    e[0] = randint(g, 0, bw); /* top-left */
    e[1] = randint(g, 0, bh);
    e[2] = randint(g, w - bw, w); /* top-right */
    e[3] = randint(g, 0, bh);
    e[4] = randint(g, w - bw, w); /* bottom-right */
    e[5] = randint(g, h - bh, h);
    e[6] = randint(g, 0, bw); /* bottom-left */
    e[7] = randint(g, h - bh, h);
}

/* x = a^-1 b for the 8 x 8 a, by Gaussian elimination with partial
 * pivoting; -1 where a is singular. */
static int solve8(long double a[8][8], long double b[8], long double x[8])
{
    long double m[8][9];
    for (int r = 0; r < 8; r++) {
        memcpy(m[r], a[r], sizeof(a[r]));
        m[r][8] = b[r];
    }
    for (int c = 0; c < 8; c++) {
        int piv = c;
        for (int r = c + 1; r < 8; r++) {
            if (fabsl(m[r][c]) > fabsl(m[piv][c])) {
                piv = r;
            }
        }
        if (m[piv][c] == 0.0L) {
            return -1;
        }
        if (piv != c) {
            long double t[9];
            memcpy(t, m[c], sizeof(t));
            memcpy(m[c], m[piv], sizeof(t));
            memcpy(m[piv], t, sizeof(t));
        }
        for (int r = c + 1; r < 8; r++) {
            long double f = m[r][c] / m[c][c];
            for (int k = c; k < 9; k++) {
                m[r][k] -= f * m[c][k];
            }
        }
    }
    for (int r = 7; r >= 0; r--) {
        long double s = m[r][8];
        for (int k = r + 1; k < 8; k++) {
            s -= m[r][k] * x[k];
        }
        x[r] = s / m[r][r];
    }
    return 0;
}

/* Primes below 2^31 whose product (over 2^185) exceeds twice any
 * determinant of the system: each of its 8! terms takes one entry of each
 * column, at most 1 (two columns), 2^16 (four: coordinates, sides under
 * 2^16) and 2^32 (two: products of coordinates), so |det| < 2^144. */
static const uint64_t det_primes[] = {2147483647u, 2147483629u, 2147483587u,
                                      2147483579u, 2147483563u, 2147483549u};

static uint64_t pow_mod(uint64_t b, uint64_t e, uint64_t p)
{
    uint64_t r = 1;
    for (b %= p; e > 0; e >>= 1, b = b * b % p) {
        if (e & 1) {
            r = r * b % p;
        }
    }
    return r;
}

/* Whether the integer matrix a's determinant is 0 modulo prime p. */
static bool det_zero_mod(const int64_t a[8][8], uint64_t p)
{
    uint64_t m[8][8];
    for (int r = 0; r < 8; r++) {
        for (int c = 0; c < 8; c++) {
            int64_t v = a[r][c] % (int64_t)p;
            m[r][c] = (uint64_t)(v < 0 ? v + (int64_t)p : v);
        }
    }
    for (int c = 0; c < 8; c++) {
        int piv = c;
        while (piv < 8 && m[piv][c] == 0) {
            piv++;
        }
        if (piv == 8) {
            return true;
        }
        for (int k = 0; k < 8; k++) {
            uint64_t t = m[c][k];
            m[c][k] = m[piv][k];
            m[piv][k] = t;
        }
        uint64_t inv = pow_mod(m[c][c], p - 2, p);
        for (int r = c + 1; r < 8; r++) {
            uint64_t f = m[r][c] * inv % p;
            for (int k = c; k < 8; k++) {
                m[r][k] = (m[r][k] + (p - f) * m[c][k]) % p;
            }
        }
    }
    return false;
}

/* Whether the system of the w x h image's corners and the end points e[8]
 * (integers) is singular: its determinant, exactly, by its residues. */
static bool singular(int w, int h, const double e[8])
{
    const int64_t s[8] = {0, 0, w - 1, 0, w - 1, h - 1, 0, h - 1};
    int64_t a[8][8];
    for (int i = 0; i < 4; i++) {
        int64_t ex = (int64_t)e[2 * i], ey = (int64_t)e[2 * i + 1];
        int64_t sx = s[2 * i], sy = s[2 * i + 1];
        const int64_t r0[8] = {ex, ey, 1, 0, 0, 0, -sx * ex, -sx * ey};
        const int64_t r1[8] = {0, 0, 0, ex, ey, 1, -sy * ex, -sy * ey};
        memcpy(a[2 * i], r0, sizeof(r0));
        memcpy(a[2 * i + 1], r1, sizeof(r1));
    }
    for (size_t k = 0; k < sizeof(det_primes) / sizeof(det_primes[0]); k++) {
        if (!det_zero_mod(a, det_primes[k])) {
            return false;
        }
    }
    return true;
}

/* _get_perspective_coeffs(startpoints, endpoints) for the corners of a
 * w x h image and the drawn end points e[8]: 0, or -1 where no
 * perspective maps the one to the other (three collinear points). */
static int coefficients(int w, int h, const double e[8], double out[8])
{
    if (singular(w, h, e)) {
        return -1;
    }
    const double s[8] = {0.0,     0.0,     w - 1.0, 0.0,
                         w - 1.0, h - 1.0, 0.0,     h - 1.0};
    long double a[8][8], b[8], x[8], r[8], dx[8];
    for (int i = 0; i < 4; i++) {
        long double ex = e[2 * i], ey = e[2 * i + 1];
        long double sx = s[2 * i], sy = s[2 * i + 1];
        long double r0[8] = {ex, ey, 1, 0, 0, 0, -sx * ex, -sx * ey};
        long double r1[8] = {0, 0, 0, ex, ey, 1, -sy * ex, -sy * ey};
        memcpy(a[2 * i], r0, sizeof(r0));
        memcpy(a[2 * i + 1], r1, sizeof(r1));
        b[2 * i] = sx;
        b[2 * i + 1] = sy;
    }
    if (solve8(a, b, x) != 0) {
        return -1;
    }
    /* one step of refinement: x + a^-1 (b - a x) */
    for (int i = 0; i < 8; i++) {
        r[i] = b[i];
        for (int k = 0; k < 8; k++) {
            r[i] -= a[i][k] * x[k];
        }
    }
    if (solve8(a, r, dx) != 0) {
        return -1;
    }
    for (int i = 0; i < 8; i++) {
        out[i] = (double)(float)(double)(x[i] + dx[i]);
        if (!isfinite(out[i])) {
            return -1;
        }
    }
    return 0;
}

static void perspective_warp(const rl_op *op, const double *params, int w,
                             int h, rl_op_warp *out)
{
    memset(out, 0, sizeof(*out));
    out->kind = RL_WARP_NONE;
    if (params[0] < op->args[PER_p] &&
        coefficients(w, h, params + 1, out->coeffs) == 0) {
        out->kind = RL_WARP_PERSPECTIVE;
    }
}

static int perspective_apply(const rl_op *op, const double *params,
                             rl_image *img, char *msg)
{
    rl_op_warp warp;
    perspective_warp(op, params, img->w, img->h, &warp);
    if (!(params[0] < op->args[PER_p])) {
        return 0;
    }
    if (warp.kind != RL_WARP_PERSPECTIVE) {
        const double *e = params + 1;
        snprintf(msg, RL_MSG_MAX,
                 "perspective: no perspective maps the %d x %d image's "
                 "corners to the drawn (%g, %g), (%g, %g), (%g, %g), "
                 "(%g, %g) (torchvision's lstsq refuses them too)",
                 img->w, img->h, e[0], e[1], e[2], e[3], e[4], e[5], e[6],
                 e[7]);
        return -EDOM;
    }
    const double *fill = op->args + PER_fill;
    int rc = rl_k_perspective(img, warp.coeffs,
                              (rl_interp)op->args[PER_interpolation],
                              isnan(fill[0]) ? NULL : fill);
    if (rc == -EOVERFLOW) {
        snprintf(msg, RL_MSG_MAX,
                 "perspective: a %d x %d image is too large to warp", img->w,
                 img->h);
    }
    return rc;
}

static const rl_op_def perspective_op = {
    .name = "perspective",
    .nargs = PER_NARGS,
    .fields = PER_fields,
    .check = perspective_check,
    .draw = perspective_draw,
    .apply = perspective_apply,
    .warp = perspective_warp,
};

const rl_op_def *const rl_perspective_ops[] = {
    &perspective_op,
    NULL,
};
