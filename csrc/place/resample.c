/*
 * place/resample.c - separable resampling (bilinear, bicubic, nearest):
 * the two passes, and which instruction set runs them.
 *
 * DESIGN: the coefficient tables (taps.c) are made once per image for each
 * axis. The passes run in Pillow's order. Horizontal first (the usual
 * case): the horizontal pass runs over only the source rows the vertical
 * pass needs, into 8-bit RGBX rows of the output width; the vertical pass
 * then makes one output row at a time in a scratch line and hands it to
 * the store (store.c) while it is still in L1. Vertical first (the height
 * shrinks by more than twice as many pixels as the width): four output
 * rows at a time are summed from the source rows, then resampled by the
 * horizontal pass and stored. Rows go through
 * the horizontal kernel four at a time, since the SIMD kernels share a
 * window's weights between rows; the last call repeats the last row as
 * needed, the copies written to the scratch line, which the vertical pass
 * overwrites. The mirror of a flip is made by the horizontal pass, which
 * writes its pixels right to left: the vertical pass works column by
 * column, so the result is the same as mirroring the output.
 *
 * The kernels (kernels_*.c) are picked once per call from the SIMD level
 * (simd.h), which every level's bytes are the same at.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "place/resample_kernels.h"
#include "place/place.h"
#include "place/store.h"
#include "place/taps.h"
#include "simd.h"

/* n rows (n even, padded with zero weights) -> one row of nbytes, each
 * kernel doing what its vector width allows and the next the rest. */
static void vpass_row(const uint8_t *const *rows, const int16_t *w,
                      const int16_t *wlo, int n, int nbytes, uint8_t *out,
                      rl_simd simd)
{
    if (n == 0) {
        memset(out, 0, (size_t)nbytes);
        return;
    }
    int k = 0;
    if (simd == RL_SIMD_AVX2) {
        k = rl__vpass_avx2(rows, w, wlo, n, k, nbytes, out);
    }
    if (simd >= RL_SIMD_SSE2) {
        k = rl__vpass_sse2(rows, w, wlo, n, k, nbytes, out);
    }
    rl__vpass_c(rows, w, wlo, n, k, nbytes, out);
}

/* The kernels of a SIMD level and the horizontal pass's plan. */
typedef struct runner {
    rl_simd simd;
    rl__hpass4_fn *hpass4;
    rl__hpass hp;
} runner;

/* Horizontal pass first: the source rows the vertical taps read go through
 * the horizontal pass, four at a time, into 8-bit rows of the output width;
 * then each output row is their vertical sum. */
static int horizontal_first(const rl_pixels *src, runner *ps,
                            const rl__taps *ty, int ylo, int yhi, int out_w,
                            int out_h, const rl_dst *dst)
{
    int rows = yhi - ylo;
    size_t hstride = (size_t)out_w * 4;
    uint8_t *tmp = malloc(hstride * (size_t)(rows + 1));
    const uint8_t **rowp = malloc(sizeof(*rowp) * (size_t)ty->ksize);
    if (tmp == NULL || rowp == NULL) {
        free(tmp);
        free(rowp);
        return -ENOMEM;
    }
    uint8_t *line = tmp + hstride * (size_t)rows; /* one output row */
    for (int r = 0; r < rows; r += 4) {
        const uint8_t *rp[4];
        uint8_t *op[4];
        for (int i = 0; i < 4; i++) {
            /* Past the last row, repeat it into the scratch line. */
            bool real = r + i < rows;
            size_t sy = (size_t)(ylo + (real ? r + i : rows - 1) - src->y0);
            rp[i] = src->data + sy * src->stride;
            op[i] = real ? tmp + (size_t)(r + i) * hstride : line;
        }
        ps->hpass4(&ps->hp, rp, op);
    }
    for (int y = 0; y < out_h; y++) {
        int n = ty->count[y];
        for (int j = 0; j < n; j++) {
            /* A padding tap (zero weight) repeats the last real row. */
            int r = ty->first[y] - ylo + j;
            rowp[j] = tmp + (size_t)(r < rows ? r : rows - 1) * hstride;
        }
        size_t at = (size_t)y * (size_t)ty->ksize;
        vpass_row(rowp, ty->w + at, ty->wlo ? ty->wlo + at : NULL, n,
                  (int)hstride, line, ps->simd);
        rl__store_row(dst, line, out_w, y, ps->simd);
    }
    free(tmp);
    free(rowp);
    return 0;
}

/* Vertical pass first: four output rows at a time are summed from the
 * source rows, over the decoded columns, into 8-bit rows, which the
 * horizontal pass then narrows to the output width. */
static int vertical_first(const rl_pixels *src, runner *ps, const rl__taps *ty,
                          int out_w, int out_h, const rl_dst *dst)
{
    size_t vstride = (size_t)src->w * 4, hstride = (size_t)out_w * 4;
    uint8_t *tmp = malloc(4 * (vstride + hstride));
    const uint8_t **rowp = malloc(sizeof(*rowp) * (size_t)ty->ksize);
    if (tmp == NULL || rowp == NULL) {
        free(tmp);
        free(rowp);
        return -ENOMEM;
    }
    int last = src->y0 + src->h - 1;
    for (int y = 0; y < out_h; y += 4) {
        const uint8_t *rp[4];
        uint8_t *op[4];
        for (int i = 0; i < 4; i++) {
            /* Past the last output row, repeat it. */
            int yy = y + i < out_h ? y + i : out_h - 1;
            int n = ty->count[yy];
            for (int j = 0; j < n; j++) {
                /* A padding tap (zero weight) past the region repeats its
                 * last row. */
                int r = ty->first[yy] + j;
                rowp[j] =
                    src->data +
                    (size_t)((r < last ? r : last) - src->y0) * src->stride;
            }
            size_t at = (size_t)yy * (size_t)ty->ksize;
            rp[i] = tmp + (size_t)i * vstride;
            op[i] = tmp + 4 * vstride + (size_t)i * hstride;
            vpass_row(rowp, ty->w + at, ty->wlo ? ty->wlo + at : NULL, n,
                      (int)vstride, (uint8_t *)rp[i], ps->simd);
        }
        ps->hpass4(&ps->hp, rp, op);
        for (int i = 0; i < 4 && y + i < out_h; i++) {
            rl__store_row(dst, op[i], out_w, y + i, ps->simd);
        }
    }
    free(tmp);
    free(rowp);
    return 0;
}

int rl_resample(const rl_pixels *src, rl_filter filter, rl_passes passes,
                double bx, double by, double bw, double bh, int out_w,
                int out_h, bool flip, bool crop_first, const rl_dst *dst)
{
    /* The tables are scratch of this call, freed on every path. */
    rl__taps tx = {0}, ty = {0};
    int rc = -ENOMEM;
    if (rl__taps_make(&tx, filter, src->full_w, bx, bw, out_w, crop_first) !=
            0 ||
        rl__taps_make(&ty, filter, src->full_h, by, bh, out_h, crop_first) !=
            0) {
        goto out_free_taps;
    }
    runner ps;
    ps.simd = rl_simd_level();
    ps.hpass4 = ps.simd == RL_SIMD_AVX2   ? rl__hpass_rows4_avx2
                : ps.simd == RL_SIMD_SSE2 ? rl__hpass_rows4_sse2
                                          : rl__hpass_rows4_c;
    rl__hpass_plan(&ps.hp, &tx, src, out_w, flip);
    /* Pillow 13 runs the vertical pass first when the height shrinks by
     * more than twice as many pixels as the width (on the sizes of its
     * resize); older Pillows always run the horizontal pass first. The
     * 8-bit rounding and clipping between the passes makes the order
     * visible (bilinear: 1 LSB on a fifth of the pixels; bicubic across
     * sharp edges: over 20), so the caller's Pillow is followed. */
    int inw, nw, inh, nh;
    rl__taps_sizes(src->full_w, bx, bw, out_w, crop_first, &inw, &nw);
    rl__taps_sizes(src->full_h, by, bh, out_h, crop_first, &inh, &nh);
    if (passes == RL_PASSES_PILLOW13 && inh - nh > 0 &&
        (int64_t)(inh - nh) > 2 * (int64_t)(inw - nw)) {
        rc = vertical_first(src, &ps, &ty, out_w, out_h, dst);
    } else {
        /* Rows of the source the vertical pass reads, all inside src. */
        int ylo, yhi;
        rl_resample_span(filter, src->full_h, by, bh, out_h, crop_first, &ylo,
                         &yhi);
        rc = horizontal_first(src, &ps, &ty, ylo, yhi, out_w, out_h, dst);
    }

out_free_taps:
    rl__taps_free(&tx);
    rl__taps_free(&ty);
    return rc;
}
