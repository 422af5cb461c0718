/*
 * core/sample.c - header, plan, region decode, augment and place of one
 * sample.
 *
 * DESIGN: the order matters for speed. The header gives the size; the plan
 * turns it into a box of the source; the box picks the DCT scale (libjpeg
 * can decode at 1/2, 1/4 or 1/8 for almost free by dropping high
 * frequencies, so a 2000 px photo cropped to 224 px is decoded at 1/2); the
 * resampler names the exact rows and columns it will read; only
 * those are decoded; and the resampler writes the result into the batch
 * slot. No full-size image is ever materialised. With augmentation ops the
 * resampler writes an 8-bit image of the output size instead, kept by the
 * thread, which the ops change in place before the store converts it.
 * Source ops (augment.h: a colour op torchvision runs before the geometry,
 * whose means are the whole image's) are the exception: with them the
 * whole image is decoded at full scale and changed first, in a copy the
 * thread keeps, and the view resamples that.
 *
 * A sample with several views (rl_view: geometry -> ops -> store) is
 * planned view by view first; the union of the views' source spans is
 * decoded once, at the finest DCT scale any of them needs, and each view
 * then resamples its own box from those pixels into its own place. What a
 * view adds later (a second image field, boxes carried through its plan)
 * hangs off its plan and its rl_view, never off the decode.
 */
#define _GNU_SOURCE
#include "core/sample.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/plan.h"

/*
 * A DCT scale is used only when it leaves the box at least RL_DCT_MARGIN
 * times the output size on both axes. A scaled IDCT keeps a block's low
 * frequencies only, which rings around thin lines and sharp edges; the
 * antialiasing filter of a further reduction of at least 3 smooths that
 * away. Measured against torchvision (tests/test_fidelity.py's images: line
 * drawings, screenshots, textures, photos; eval and train recipes), the
 * worst PSNR over the boxes decoded at 1/2 or 1/4 was, by the reduction
 * left after the DCT scale: 21 dB at 1 (the old rule, a margin of 1), 32
 * dB at 2, 35 dB at 2.5, 38 dB at 3; photos alone stay above 42 dB at 1.
 * The cost, in decode CPU time per image against the old rule: +2% on
 * ImageNet-like photos (short side 256-500 px: 22 of 2000 train samples
 * change scale, no eval sample), +18% on photos of 1100-2200 px.
 */
#define RL_DCT_MARGIN 3.0

/* The source stage's copies (7 bytes a pixel) are kept for the next sample
 * up to this many pixels (a 4000 x 3000 photo), freed after one larger. */
#define RL_SOURCE_KEEP_PIXELS ((size_t)12000000)

struct rl_sample_ctx {
    rl_decode_ctx *decode;
    uint8_t *scratch; /* the augment path's 8-bit image */
    size_t scratch_cap;
    /* The source stage's whole image: 8-bit RGB for its ops, then the
     * RGBX pixels the views resample. */
    uint8_t *source_rgb, *source_px;
    size_t source_rgb_cap, source_px_cap;
    size_t held; /* what the decoder states held after the last sample */
};

rl_sample_ctx *rl_sample_ctx_create(const rl_decoders *set)
{
    rl_sample_ctx *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return NULL;
    }
    c->decode = rl_decode_ctx_create(set);
    if (c->decode == NULL) {
        free(c);
        return NULL;
    }
    return c;
}

void rl_sample_ctx_destroy(rl_sample_ctx *c)
{
    if (c == NULL) {
        return;
    }
    rl_decode_ctx_destroy(c->decode);
    free(c->scratch);
    free(c->source_rgb);
    free(c->source_px);
    free(c);
}

int rl_sample_pick_scale(rl_filter filter, int width, int height, double bw,
                         double bh, int vw, int vh)
{
    if (filter == RL_FILTER_NEAREST) {
        return 8;
    }
    /* Only 1/8, 1/4 and 1/2: libjpeg-turbo has SIMD inverse DCTs for those
     * (and for 8/8), and at those scales a 4:2:0 chroma plane is decoded at
     * twice the luma's reduction, which needs no upsampling pass. Measured
     * with callgrind on ImageNet-like photos, the odd scales (3/8, 5/8...)
     * run C IDCTs of 6x6 to 14x14 and cost more than they save. */
    for (int m = 1; m < 8; m *= 2) {
        /* The scaled size as libjpeg computes it (rounded up). */
        double sw = (double)(((int64_t)width * m + 7) / 8);
        double sh = (double)(((int64_t)height * m + 7) / 8);
        if (bw * sw / width >= RL_DCT_MARGIN * vw &&
            bh * sh / height >= RL_DCT_MARGIN * vh) {
            return m;
        }
    }
    return 8;
}

int rl_sample_plan_scale(const rl_plan *p, int width, int height)
{
    if (p->trim > 0) {
        return 8;
    }
    return rl_sample_pick_scale(p->filter, width, height, p->w, p->h, p->vw,
                                p->vh);
}

int rl_sample_views_check(const rl_view *views, int n, char *msg)
{
    if (n < 1 || n > RL_MAX_VIEWS) {
        snprintf(msg, RL_MSG_MAX, "a sample has 1..%d views, not %d",
                 RL_MAX_VIEWS, n);
        return RL_ECONFIG;
    }
    for (int v = 0; v < n; v++) {
        int rc = rl_transform_check(&views[v].transform, msg);
        if (rc == 0 && views[v].place.dtype > RL_DTYPE_BF16) {
            snprintf(msg, RL_MSG_MAX, "unknown output dtype %d",
                     (int)views[v].place.dtype);
            rc = RL_ECONFIG;
        }
        const rl_augment *a = &views[v].augment;
        int source = rl_augment_source_ops(a);
        if (rc == 0 && views[v].transform.varying && n != 1) {
            snprintf(msg, RL_MSG_MAX,
                     "a varying output size is one view (%d views)", n);
            rc = RL_ECONFIG;
        }
        if (rc == 0 && source > 0 && (n != 1 || views[v].transform.trim != 0)) {
            snprintf(msg, RL_MSG_MAX,
                     "%s (a source op) runs in a sample of one view and no "
                     "trim (%d views, trim %d)",
                     a->ops[0].def->name, n, views[v].transform.trim);
            rc = RL_ECONFIG;
        }
        if (rc == 0 && views[v].augment.view != v) {
            snprintf(msg, RL_MSG_MAX, "its ops draw as view %d",
                     views[v].augment.view);
            rc = RL_ECONFIG;
        }
        if (rc != 0) {
            if (n > 1) {
                /* Name the view: the transform's check does not know it. */
                char why[RL_MSG_MAX];
                memcpy(why, msg, sizeof(why));
                snprintf(msg, RL_MSG_MAX, "view %d: %.200s", v, why);
            }
            return RL_ECONFIG;
        }
    }
    return 0;
}

/* *buf of at least need bytes: the old bytes are not kept (freed first,
 * never both held). 0 or -ENOMEM. */
static int grow(uint8_t **buf, size_t *cap, size_t need)
{
    if (need <= *cap) {
        return 0;
    }
    free(*buf);
    *buf = malloc(need);
    *cap = *buf != NULL ? need : 0;
    return *buf != NULL ? 0 : -ENOMEM;
}

/* The source stage (augment.h's source ops, one view): the ops on the whole
 * decoded image px, in the thread's own copy, which px then names; the
 * chain draws for the view's plan p's output size, as run_view draws. */
static int run_source(rl_sample_ctx *c, const rl_sample_spec *spec,
                      const rl_plan *p, int64_t epoch, int64_t key,
                      rl_pixels *px, char *msg)
{
    const rl_view *view = &spec->views[0];
    if (px->x0 != 0 || px->y0 != 0 || px->w < px->full_w ||
        px->h < px->full_h) {
        snprintf(msg, RL_MSG_MAX, "the source stage got a part of the image");
        return RL_EINTERNAL;
    }
    size_t w = (size_t)px->full_w, h = (size_t)px->full_h;
    if (grow(&c->source_rgb, &c->source_rgb_cap, w * h * 3) != 0 ||
        grow(&c->source_px, &c->source_px_cap, w * h * 4) != 0) {
        snprintf(msg, RL_MSG_MAX, "out of memory");
        return -ENOMEM;
    }
    for (size_t y = 0; y < h; y++) {
        const uint8_t *in = px->data + y * px->stride;
        uint8_t *o = c->source_rgb + y * w * 3;
        for (size_t x = 0; x < w; x++) {
            memcpy(o + 3 * x, in + 4 * x, 3); /* RGBX -> RGB */
        }
    }
    double params[RL_AUGMENT_MAX_OPS * RL_OP_MAX_PARAMS];
    rl_augment_draw(&view->augment, spec->seed, epoch, key, p->out_w, p->out_h,
                    params);
    rl_image img = {c->source_rgb, (int)w, (int)h, w * 3};
    int rc = rl_augment_run_source(&view->augment, params, &img, msg);
    if (rc != 0) {
        return rc;
    }
    for (size_t i = 0; i < w * h; i++) {
        memcpy(c->source_px + 4 * i, c->source_rgb + 3 * i, 3);
        c->source_px[4 * i + 3] = 0;
    }
    px->data = c->source_px;
    px->stride = w * 4;
    return 0;
}

/* Where the resampler writes: the slot, or with ops the thread's 8-bit
 * image of the sample's output size (plan p's: a varying view's is its
 * own), grown to the largest one seen. */
static int stage_dst(rl_sample_ctx *c, const rl_view *view, const rl_plan *p,
                     const rl_dst *slot, rl_dst *dst, rl_image *img)
{
    if (rl_augment_image_ops(&view->augment) == 0) {
        *dst = *slot;
        return 0;
    }
    /* The resampler writes every byte before an op reads one. */
    size_t need = (size_t)p->out_w * (size_t)p->out_h * 3;
    if (grow(&c->scratch, &c->scratch_cap, need) != 0) {
        return -ENOMEM;
    }
    memset(dst, 0, sizeof(*dst));
    dst->data = c->scratch;
    dst->dtype = RL_DTYPE_U8;
    dst->row_stride = (ptrdiff_t)p->out_w * 3;
    dst->px_stride = 3;
    dst->ch_stride = 1;
    img->data = c->scratch;
    img->w = p->out_w;
    img->h = p->out_h;
    img->stride = (size_t)p->out_w * 3;
    return 0;
}

/* The decoded pixels as a plan with a trim sees them: an image of
 * trim fewer pixels on each side, the region clipped to it (it still
 * covers the spans the plan reads: they were asked in that frame). */
static void trim_pixels(const rl_pixels *px, int trim, rl_pixels *out)
{
    *out = *px;
    if (trim == 0) {
        return;
    }
    out->full_w -= 2 * trim;
    out->full_h -= 2 * trim;
    out->x0 -= trim;
    out->y0 -= trim;
    if (out->x0 < 0) {
        out->data += (size_t)(-out->x0) * 4;
        out->w += out->x0;
        out->x0 = 0;
    }
    if (out->y0 < 0) {
        out->data += (size_t)(-out->y0) * out->stride;
        out->h += out->y0;
        out->y0 = 0;
    }
    out->w = out->x0 + out->w > out->full_w ? out->full_w - out->x0 : out->w;
    out->h = out->y0 + out->h > out->full_h ? out->full_h - out->y0 : out->h;
}

/* One view's chain on the decoded pixels: resample its box (the plan's,
 * scaled by fx, fy to px's DCT scale), run its ops, store into slot. */
static int run_view(rl_sample_ctx *c, const rl_sample_spec *spec, int v,
                    const rl_pixels *px, const rl_plan *p, double fx, double fy,
                    int64_t epoch, int64_t key, const rl_dst *slot, char *msg)
{
    const rl_view *view = &spec->views[v];
    rl_dst dst;
    rl_image img;
    if (stage_dst(c, view, p, slot, &dst, &img) != 0) {
        snprintf(msg, RL_MSG_MAX, "out of memory");
        return -ENOMEM;
    }
    rl_pixels seen;
    trim_pixels(px, p->trim, &seen);
    int rc = rl_place(&seen, p, p->x * fx, p->y * fy, p->w * fx, p->h * fy,
                      &dst, msg);
    if (rc != 0 || view->augment.n == 0) {
        return rc;
    }
    /* Drawn for the sample's own size (a varying view's plan has it), as
     * torchvision draws on each image. */
    double params[RL_AUGMENT_MAX_OPS * RL_OP_MAX_PARAMS];
    rl_augment_draw(&view->augment, spec->seed, epoch, key, p->out_w, p->out_h,
                    params);
    if (dst.data != slot->data) {
        rc = rl_augment_run(&view->augment, params, &img, msg);
        if (rc != 0) {
            return rc;
        }
        rl_store_rgb(img.data, img.stride, img.w, img.h, slot);
    }
    return rl_augment_run_out(&view->augment, params, slot, p->out_w, p->out_h,
                              msg);
}

/* One more pixel on each side of the region [x0, x1) x [y0, y1) of an
 * sw x sh image: libjpeg upsamples the chroma of a region's edge pixels
 * from the region alone (edge replication), so the pixels read from a
 * region must not be its edge ones, or they differ from a full decode by
 * several levels. */
static void widen(int *x0, int *y0, int *x1, int *y1, int sw, int sh)
{
    *x0 = *x0 > 0 ? *x0 - 1 : 0;
    *y0 = *y0 > 0 ? *y0 - 1 : 0;
    *x1 = *x1 < sw ? *x1 + 1 : sw;
    *y1 = *y1 < sh ? *y1 + 1 : sh;
}

/* Each view's destination into out: slot[v], or for a varying view the
 * one the sink reserves for its plan's size. 0, or the sink's status. */
static int view_dsts(const rl_sample_spec *spec, const rl_plan *plans,
                     const rl_dst *slot, const rl_sample_sink *sink,
                     rl_dst *out, char *msg)
{
    for (int v = 0; v < spec->nviews; v++) {
        if (!spec->views[v].transform.varying) {
            out[v] = slot[v];
            continue;
        }
        if (sink == NULL) {
            snprintf(msg, RL_MSG_MAX, "a varying view without a sink");
            return RL_EINTERNAL;
        }
        int rc = sink->reserve(sink->arg, v, plans[v].out_w, plans[v].out_h,
                               &out[v], msg);
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}

/* rl_sample_run_to but the trim after it. */
static int run_sample(rl_sample_ctx *c, const rl_sample_spec *spec,
                      const uint8_t *data, size_t len, int64_t epoch,
                      int64_t key, const rl_dst *slot,
                      const rl_sample_sink *sink, rl_sample_note *note,
                      char *msg)
{
    const rl_decoder_def *dec;
    void *st;
    memset(note, 0, sizeof(*note));
    note->decoder = -1;
    msg[0] = '\0';
    if (spec->nviews < 1 || spec->nviews > RL_MAX_VIEWS) {
        snprintf(msg, RL_MSG_MAX, "a sample has 1..%d views, not %d",
                 RL_MAX_VIEWS, spec->nviews);
        return RL_EINTERNAL;
    }
    int rc =
        rl_decode_pick(c->decode, data, len, &dec, &st, &note->decoder, msg);
    if (rc != 0) {
        return rc;
    }
    rl_image_info info;
    rc = dec->header(st, data, len, &spec->limits, &info, msg);
    if (rc != 0) {
        return rc;
    }
    /* Every view's plan first: together they name the region to decode
     * and the DCT scale, the finest any view needs. */
    rl_plan plans[RL_MAX_VIEWS];
    /* Source ops (one view: rl_sample_views_check) read the whole image
     * at full scale. */
    bool source = rl_augment_source_ops(&spec->views[0].augment) > 0;
    int m = dec->scaled_size != NULL && !source ? 1 : 8;
    for (int v = 0; v < spec->nviews; v++) {
        rl_plan *p = &plans[v];
        rc = rl_plan_make_boxes(&spec->views[v].transform, info.width,
                                info.height, spec->seed, epoch, key, v,
                                sink ? sink->boxes : NULL,
                                sink ? sink->nboxes : 0, p, msg);
        if (rc != 0) {
            return rc; /* RL_EDECODE: this image's; msg says why */
        }
        if (dec->scaled_size != NULL && !source) {
            int mv = rl_sample_plan_scale(p, info.width, info.height);
            m = mv > m ? mv : m;
        }
    }
    int sw = info.width, sh = info.height;
    if (dec->scaled_size != NULL) {
        dec->scaled_size(st, m, &sw, &sh);
    }
    double fx = (double)sw / info.width, fy = (double)sh / info.height;
    int x0 = sw, x1 = 0, y0 = sh, y1 = 0;
    for (int v = 0; v < spec->nviews; v++) {
        const rl_plan *p = &plans[v];
        int a0, a1, b0, b1;
        if (p->vw <= 0 || p->vh <= 0) {
            continue; /* a window in the padding alone reads nothing */
        }
        /* (A trimmed view is never DCT-scaled: its frame is the image
         * less trim pixels a side, in whole pixels.) */
        rl_resample_span(p->filter, sw - 2 * p->trim, p->x * fx, p->w * fx,
                         p->vw, p->crop_first, &a0, &a1);
        rl_resample_span(p->filter, sh - 2 * p->trim, p->y * fy, p->h * fy,
                         p->vh, p->crop_first, &b0, &b1);
        a0 += p->trim;
        a1 += p->trim;
        b0 += p->trim;
        b1 += p->trim;
        x0 = a0 < x0 ? a0 : x0;
        x1 = a1 > x1 ? a1 : x1;
        y0 = b0 < y0 ? b0 : y0;
        y1 = b1 > y1 ? b1 : y1;
    }
    if (x1 <= x0 || y1 <= y0) {
        x0 = y0 = 0; /* no view reads a pixel: decode one all the same */
        x1 = y1 = 1;
    }
    if (source) {
        x0 = y0 = 0;
        x1 = sw;
        y1 = sh;
    }
    widen(&x0, &y0, &x1, &y1, sw, sh);
    rl_pixels px;
    rc = dec->region(st, m, x0, y0, x1 - x0, y1 - y0, &spec->limits, &px, msg);
    if (rc != 0) {
        return rc;
    }
    note->decodes = 1;
    note->truncated = dec->truncated != NULL && dec->truncated(st);
    if (source) {
        rc = run_source(c, spec, &plans[0], epoch, key, &px, msg);
        if (rc != 0) {
            return rc;
        }
    }
    /* Reserved after the decode: a file that fails to decode takes no
     * room in its batch. */
    rl_dst dst[RL_MAX_VIEWS];
    rc = view_dsts(spec, plans, slot, sink, dst, msg);
    if (rc != 0) {
        return rc;
    }
    for (int v = 0; v < spec->nviews; v++) {
        rc = run_view(c, spec, v, &px, &plans[v], fx, fy, epoch, key, &dst[v],
                      msg);
        if (rc != 0) {
            return rc;
        }
        note->views++;
    }
    return 0;
}

int rl_sample_run(rl_sample_ctx *c, const rl_sample_spec *spec,
                  const uint8_t *data, size_t len, int64_t epoch, int64_t key,
                  const rl_dst *slot, rl_sample_note *note, char *msg)
{
    return rl_sample_run_to(c, spec, data, len, epoch, key, slot, NULL, note,
                            msg);
}

int rl_sample_run_to(rl_sample_ctx *c, const rl_sample_spec *spec,
                     const uint8_t *data, size_t len, int64_t epoch,
                     int64_t key, const rl_dst *slot,
                     const rl_sample_sink *sink, rl_sample_note *note,
                     char *msg)
{
    int rc = run_sample(c, spec, data, len, epoch, key, slot, sink, note, msg);
    /* The views have read the pixels: the decoders' buffers may shrink.
     * The scratch image is kept: a fixed output's size, or a varying
     * view's largest sample so far, freed after one past
     * RL_SOURCE_KEEP_PIXELS. */
    size_t held = rl_decode_ctx_trim(c->decode);
    if (c->source_px_cap > RL_SOURCE_KEEP_PIXELS * 4 ||
        c->source_rgb_cap > RL_SOURCE_KEEP_PIXELS * 3) {
        free(c->source_rgb);
        free(c->source_px);
        c->source_rgb = c->source_px = NULL;
        c->source_rgb_cap = c->source_px_cap = 0;
    }
    if (spec->views[0].transform.varying &&
        c->scratch_cap > RL_SOURCE_KEEP_PIXELS * 3) {
        free(c->scratch);
        c->scratch = NULL;
        c->scratch_cap = 0;
    }
    note->held_change = (int64_t)held - (int64_t)c->held;
    c->held = held;
    return rc;
}

int rl_sample_decode_full(const uint8_t *data, size_t len, const rl_limits *lim,
                          const int *box, uint8_t **out, int *w, int *h,
                          char *msg)
{
    rl_decoders native = {.n = 0};
    rl_decode_add_native(&native);
    *out = NULL;
    msg[0] = '\0';
    rl_decode_ctx *ctx = rl_decode_ctx_create(&native);
    if (ctx == NULL) {
        snprintf(msg, RL_MSG_MAX, "out of memory");
        return -ENOMEM;
    }
    const rl_decoder_def *dec;
    void *st;
    int which;
    rl_image_info info;
    rl_pixels px;
    int x0 = 0, y0 = 0, bw = 0, bh = 0;
    /* Bytes no native decoder claims are refused (RL_EFORMAT). */
    int rc = rl_decode_pick(ctx, data, len, &dec, &st, &which, msg);
    if (rc == 0) {
        rc = dec->header(st, data, len, lim, &info, msg);
    }
    if (rc == 0) {
        bw = box != NULL ? box[2] : info.width;
        bh = box != NULL ? box[3] : info.height;
        x0 = box != NULL ? box[0] : 0;
        y0 = box != NULL ? box[1] : 0;
        if (x0 < 0 || y0 < 0 || bw <= 0 || bh <= 0 || bw > info.width - x0 ||
            bh > info.height - y0) {
            snprintf(msg, RL_MSG_MAX,
                     "box (left %d, top %d, width %d, height %d) is not "
                     "inside the %dx%d image",
                     x0, y0, bw, bh, info.width, info.height);
            rc = -EINVAL;
        }
    }
    if (rc == 0) {
        int rx0 = x0, ry0 = y0, rx1 = x0 + bw, ry1 = y0 + bh;
        widen(&rx0, &ry0, &rx1, &ry1, info.width, info.height);
        rc = dec->region(st, 8, rx0, ry0, rx1 - rx0, ry1 - ry0, lim, &px, msg);
    }
    size_t row = rc == 0 ? (size_t)bw * 3 : 0;
    uint8_t *buf = rc == 0 ? malloc(row * (size_t)bh) : NULL;
    if (rc == 0 && buf == NULL) {
        snprintf(msg, RL_MSG_MAX, "out of memory");
        rc = -ENOMEM;
    }
    if (rc == 0) {
        /* A decoder may return more than the region asked: px.x0/y0 say
         * where its pixels start. */
        for (int r = 0; r < bh; r++) {
            const uint8_t *in = px.data + (size_t)(y0 - px.y0 + r) * px.stride +
                                (size_t)(x0 - px.x0) * 4;
            uint8_t *o = buf + (size_t)r * row;
            for (int x = 0; x < bw; x++) {
                memcpy(o + 3 * x, in + 4 * x, 3); /* RGBX -> RGB */
            }
        }
        *out = buf;
        *w = bw;
        *h = bh;
    }
    rl_decode_ctx_destroy(ctx);
    return rc;
}
