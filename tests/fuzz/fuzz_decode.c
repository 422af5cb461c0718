/*
 * fuzz_decode.c - libFuzzer harness on ringloader's decode entry point.
 *
 * DESIGN: the fuzzer must see what a training job sees, so it calls the
 * real per-sample entry point, rl_sample_run() (core/sample.h), with the
 * production limits (RL_DEFAULT_*), one native decoder (RL_FUZZ_DECODER:
 * libjpeg-turbo by default; the Makefile builds fuzz_png and fuzz_webp
 * with libspng's and libwebp's, so each target spends its time on one
 * decoder's code) and the fused transforms the pipeline uses, on one
 * sample context reused across inputs exactly as a pool thread reuses its
 * own. The first bytes of the input pick the transform (kind, output size,
 * resize, flip, layout, sample index) so one corpus explores every path of
 * the plan, the DCT scale choice, the region decode and the resampler; the
 * file is the rest. Every output byte is read (summed into a volatile), as
 * in libjpeg-turbo's own fuzzers, so the compiler cannot drop the work and
 * an MSan build would flag any byte the decoder never wrote. A full decode
 * (rl_sample_decode_full, every native decoder) with a low pixel limit
 * follows, as _core.decode() does it, then one of the top-left pixel
 * alone: for JPEG and PNG the two must agree on whether the file decodes
 * (decode/decode.h: their outcome never depends on the crop), one failing
 * as corrupt or truncated where the other decodes is a finding. WebP
 * promises that for truncation only.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/sample.h"

/* The decoder under test (decode/decode.h). */
#ifndef RL_FUZZ_DECODER
#define RL_FUZZ_DECODER rl_jpeg_decoder
#endif

#define HEADER_BYTES 8
/* Low enough that the fuzzer spends its time on decoding, not on memset of
 * huge buffers; high enough for every seed of make_corpus.py. */
#define FULL_MAX_PIXELS (1u << 20)

static rl_sample_ctx *ctx;

/* A status that judges the file itself: decoded, corrupt or truncated
 * (not a limit, the plan, or another format). */
static bool judged(int rc)
{
    return rc == 0 || rc == RL_EDECODE || rc == RL_ETRUNCATED;
}

static const int out_sizes[] = {1, 2, 7, 16, 33, 64, 224};

static void touch(const uint8_t *p, size_t n)
{
    volatile uint32_t sum = 0;
    uint32_t s = 0;
    for (size_t i = 0; i < n; i++) {
        s += p[i];
    }
    sum = s;
    (void)sum;
}

/* The transform, layout and sample index chosen by the input's header. */
static void pick(const uint8_t *h, rl_transform *t, bool *nhwc, int64_t *index)
{
    memset(t, 0, sizeof(*t));
    int n = (int)(sizeof(out_sizes) / sizeof(out_sizes[0]));
    t->out_h = out_sizes[h[1] % n];
    t->out_w = out_sizes[h[2] % n];
    t->flip_p = (h[0] & 2) ? 0.5 : 0.0;
    if (h[0] & 1) {
        t->kind = RL_T_RANDOM_CROP;
        /* torchvision's defaults, or a narrow range hitting tiny boxes. */
        t->scale_lo = (h[3] & 1) ? 0.08 : 0.0001;
        t->scale_hi = (h[3] & 2) ? 1.0 : 0.001;
        t->ratio_lo = 3.0 / 4.0;
        t->ratio_hi = (h[3] & 4) ? 4.0 / 3.0 : 40.0;
    } else {
        t->kind = RL_T_RESIZE_CROP;
        switch (h[3] % 3) {
        case 0:
            t->resize_short = 1 + h[4] % 300;
            break;
        case 1:
            t->resize_h = 1 + h[4] % 300;
            t->resize_w = 1 + h[5] % 300;
            break;
        default:
            break; /* crop only, maybe padded */
        }
    }
    if ((h[0] & 32) && t->kind == RL_T_RESIZE_CROP) {
        /* timm's rkrc / rkrr: ResizeKeepRatio's random scale and aspect
         * (fitting the shorter or the longer side), then a centre or
         * random crop-or-pad with reflected borders. */
        t->kind = RL_T_RESIZE_RANDOM_CROP;
        t->resize_short = 0;
        t->resize_h = 1 + h[4] % 300;
        t->resize_w = 1 + h[5] % 300;
        t->keep_ratio = 1;
        t->keep_longest = (h[3] & 8) ? 1.0 : 0.0;
        t->keep_scale_p = t->keep_aspect_p = 0.5;
        t->keep_scale_lo = 0.8;
        t->keep_scale_hi = 1.0;
        t->keep_scale_area = 1;
        t->keep_aspect_lo = 0.9;
        t->keep_aspect_hi = 1.0 / 0.9;
        t->window =
            (h[3] & 16) ? RL_WINDOW_RANDOM_OR_PAD : RL_WINDOW_CENTER_OR_PAD;
        t->pad_mode = RL_PAD_REFLECT;
    }
    if (h[0] & 16) {
        /* timm's TrimBorder: 1..8 pixels a side (tiny images refused) */
        t->trim = 1 + (h[4] >> 5);
    }
    *nhwc = (h[0] & 4) != 0;
    *index = h[6] | (h[7] << 8);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < HEADER_BYTES) {
        return 0;
    }
    if (ctx == NULL) {
        rl_decoders one = {.defs = {&RL_FUZZ_DECODER}, .n = 1};
        ctx = rl_sample_ctx_create(&one);
        if (ctx == NULL) {
            abort();
        }
    }
    const uint8_t *file = data + HEADER_BYTES;
    size_t len = size - HEADER_BYTES;
    char msg[RL_MSG_MAX];
    rl_limits lim = {.max_pixels = RL_DEFAULT_MAX_PIXELS,
                     .max_scans = RL_DEFAULT_MAX_SCANS,
                     .max_file_bytes = RL_DEFAULT_MAX_FILE_BYTES,
                     .allow_truncated = (data[0] & 8) != 0};

    static rl_view view; /* one view, no augmentation ops */
    memset(&view, 0, sizeof(view));
    rl_sample_spec spec;
    memset(&spec, 0, sizeof(spec));
    spec.limits = lim;
    spec.seed = 7;
    spec.views = &view;
    spec.nviews = 1;
    rl_transform *t = &view.transform;
    bool nhwc;
    int64_t index;
    pick(data, t, &nhwc, &index);
    size_t bytes = (size_t)t->out_w * (size_t)t->out_h * 3;
    uint8_t *out = malloc(bytes);
    if (out == NULL) {
        abort();
    }
    rl_dst dst;
    memset(&dst, 0, sizeof(dst));
    dst.data = out;
    if (nhwc) {
        dst.row_stride = (ptrdiff_t)t->out_w * 3;
        dst.px_stride = 3;
        dst.ch_stride = 1;
    } else {
        dst.row_stride = t->out_w;
        dst.px_stride = 1;
        dst.ch_stride = (ptrdiff_t)t->out_w * t->out_h;
    }
    rl_sample_note note;
    int rc = rl_sample_run(ctx, &spec, file, len, 0, index, &dst, &note, msg);
    if (rc == 0) {
        if (note.decoder != 0) {
            abort(); /* the set has one decoder: it decoded the sample */
        }
        touch(out, bytes);
    } else if (memchr(msg, '\0', RL_MSG_MAX) == NULL) {
        abort(); /* every failure must leave a terminated message */
    }
    free(out);

    lim.max_pixels = FULL_MAX_PIXELS;
    uint8_t *full = NULL;
    int w = 0, h = 0;
    rc = rl_sample_decode_full(file, len, &lim, NULL, &full, &w, &h, msg);
    if (rc == 0) {
        touch(full, (size_t)w * (size_t)h * 3);
    }
    free(full);
    if (rl_jpeg_decoder.claims(&rl_jpeg_decoder, file, len) ||
        rl_png_decoder.claims(&rl_png_decoder, file, len)) {
        /* The top-left pixel, the region that leaves the most of the file
         * undecoded (a sample's plan may refuse an image itself, with
         * RL_EDECODE too: its region is not compared). */
        static const int corner[4] = {0, 0, 1, 1};
        uint8_t *px = NULL;
        int cw = 0, ch = 0;
        int corner_rc =
            rl_sample_decode_full(file, len, &lim, corner, &px, &cw, &ch, msg);
        free(px);
        if (judged(rc) && judged(corner_rc) && (rc == 0) != (corner_rc == 0)) {
            abort(); /* a region's outcome is not the whole image's */
        }
    }
    return 0;
}
