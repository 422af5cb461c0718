/*
 * rl_sample.c - header, plan, region decode and resample of one sample.
 *
 * DESIGN: the order matters for speed. The header gives the size; the plan
 * turns it into a box of the source; the box picks the DCT scale (libjpeg
 * can decode at 1/2, 1/4 or 1/8 for almost free by dropping high
 * frequencies, so a 2000 px photo cropped to 224 px is decoded at 1/4 or
 * 1/8); the resampler
 * names the exact rows and columns it will read; only those are decoded;
 * and the resampler writes the result into the batch slot. No full-size
 * image is ever materialised.
 */
#define _GNU_SOURCE
#include "rl_sample.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_plan.h"

int rl_sample_pick_scale(int width, int height, double bw, double bh, int vw,
                         int vh)
{
    /* Only 1/8, 1/4 and 1/2: libjpeg-turbo has SIMD inverse DCTs for those
     * (and for 8/8), and at those scales a 4:2:0 chroma plane is decoded at
     * twice the luma's reduction, which needs no upsampling pass. Measured
     * with callgrind on ImageNet-like photos, the odd scales (3/8, 5/8...)
     * run C IDCTs of 6x6 to 14x14 and cost more than they save. */
    for (int m = 1; m < 8; m *= 2) {
        /* The scaled size as libjpeg computes it (rounded up). */
        double sw = (double)(((int64_t)width * m + 7) / 8);
        double sh = (double)(((int64_t)height * m + 7) / 8);
        if (bw * sw / width >= vw && bh * sh / height >= vh) {
            return m;
        }
    }
    return 8;
}

static int place(const rl_pixels *px, const rl_plan *pl, double bx, double by,
                 double bw, double bh, const rl_dst *dst, char *msg);

int rl_sample_decode(rl_decoder *d, const uint8_t *data, size_t len,
                     const rl_transform *t, const rl_limits *lim,
                     uint64_t seed, int64_t epoch, int64_t index,
                     const rl_dst *dst, char *msg)
{
    rl_jpeg_header hdr;
    int rc = rl_decode_header(d, data, len, lim, &hdr, msg);
    if (rc != 0) {
        return rc;
    }
    rl_plan p;
    rc = rl_plan_make(t, hdr.width, hdr.height, seed, epoch, index, &p);
    if (rc != 0) {
        snprintf(msg, RL_MSG_MAX, "invalid transform for a %dx%d image",
                 hdr.width, hdr.height);
        return rc;
    }
    int m = rl_sample_pick_scale(hdr.width, hdr.height, p.w, p.h, p.vw, p.vh);
    int sw, sh;
    rl_decode_scaled_size(d, m, &sw, &sh);
    double fx = (double)sw / hdr.width, fy = (double)sh / hdr.height;
    double bx = p.x * fx, by = p.y * fy, bw = p.w * fx, bh = p.h * fy;

    int x0, x1, y0, y1;
    rl_resample_span(sw, bx, bw, p.vw, &x0, &x1);
    rl_resample_span(sh, by, bh, p.vh, &y0, &y1);
    /* One more pixel on each side: libjpeg upsamples the chroma of a
     * region's edge pixels from the region alone (edge replication), so
     * the pixels the resampler reads must not be the region's edge ones,
     * or they differ from a full decode by several levels. */
    x0 = x0 > 0 ? x0 - 1 : 0;
    y0 = y0 > 0 ? y0 - 1 : 0;
    x1 = x1 < sw ? x1 + 1 : sw;
    y1 = y1 < sh ? y1 + 1 : sh;
    rl_region reg;
    rc = rl_decode_region(d, m, x0, y0, x1 - x0, y1 - y0, lim, &reg, msg);
    if (rc != 0) {
        return rc;
    }
    rl_pixels px = {
        .data = reg.data,
        .stride = reg.stride,
        .x0 = reg.x0,
        .y0 = reg.y0,
        .w = reg.w,
        .h = reg.h,
        .full_w = reg.full_w,
        .full_h = reg.full_h,
    };
    return place(&px, &p, bx, by, bw, bh, dst, msg);
}

/* Resamples box (bx, by, bw, bh) of px into the plan's place in dst and
 * zeroes the padding around it. */
static int place(const rl_pixels *px, const rl_plan *pl, double bx, double by,
                 double bw, double bh, const rl_dst *dst, char *msg)
{
    rl_plan p = *pl;
    if (p.vw != p.out_w || p.vh != p.out_h) {
        /* Zero the padding around the image (CenterCrop past its edge). */
        rl_fill_zero(dst, 0, 0, p.out_w, p.vy);
        rl_fill_zero(dst, 0, p.vy + p.vh, p.out_w, p.out_h - p.vy - p.vh);
        rl_fill_zero(dst, 0, p.vy, p.vx, p.vh);
        rl_fill_zero(dst, p.vx + p.vw, p.vy, p.out_w - p.vx - p.vw, p.vh);
    }
    rl_dst sub = *dst;
    sub.data = rl_dst_at(dst, p.vx, p.vy);
    int rc = rl_resample(px, bx, by, bw, bh, p.vw, p.vh, p.flip, &sub);
    if (rc != 0) {
        snprintf(msg, RL_MSG_MAX, "out of memory");
    }
    return rc;
}

int rl_sample_place_rgb(const uint8_t *rgb, int w, int h,
                        const rl_transform *t, uint64_t seed, int64_t epoch,
                        int64_t index, const rl_dst *dst, char *msg)
{
    rl_plan p;
    if (w <= 0 || h <= 0 ||
        rl_plan_make(t, w, h, seed, epoch, index, &p) != 0) {
        snprintf(msg, RL_MSG_MAX, "invalid transform for a %dx%d image", w,
                 h);
        return RL_EINTERNAL;
    }
    uint8_t *rgbx = malloc((size_t)w * (size_t)h * 4);
    if (rgbx == NULL) {
        snprintf(msg, RL_MSG_MAX, "out of memory");
        return -ENOMEM;
    }
    for (size_t i = 0; i < (size_t)w * (size_t)h; i++) {
        memcpy(rgbx + 4 * i, rgb + 3 * i, 3);
        rgbx[4 * i + 3] = 0;
    }
    rl_pixels px = {rgbx, (size_t)w * 4, 0, 0, w, h, w, h};
    int rc = place(&px, &p, p.x, p.y, p.w, p.h, dst, msg);
    free(rgbx);
    return rc;
}

int rl_sample_decode_full(rl_decoder *d, const uint8_t *data, size_t len,
                          const rl_limits *lim, uint8_t **out, int *w, int *h,
                          char *msg)
{
    rl_jpeg_header hdr;
    *out = NULL;
    int rc = rl_decode_header(d, data, len, lim, &hdr, msg);
    if (rc != 0) {
        return rc;
    }
    rl_region reg;
    rc = rl_decode_region(d, 8, 0, 0, hdr.width, hdr.height, lim, &reg, msg);
    if (rc != 0) {
        return rc;
    }
    size_t row = (size_t)hdr.width * 3;
    uint8_t *buf = malloc(row * (size_t)hdr.height);
    if (buf == NULL) {
        snprintf(msg, RL_MSG_MAX, "out of memory");
        return -ENOMEM;
    }
    for (int r = 0; r < hdr.height; r++) {
        const uint8_t *in = reg.data + (size_t)r * reg.stride;
        uint8_t *o = buf + (size_t)r * row;
        for (int x = 0; x < hdr.width; x++) {
            memcpy(o + 3 * x, in + 4 * x, 3); /* RGBX -> RGB */
        }
    }
    *out = buf;
    *w = hdr.width;
    *h = hdr.height;
    return 0;
}
