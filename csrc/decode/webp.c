/*
 * decode/webp.c - the WebP decoder (rl_webp_decoder), on libwebp.
 *
 * This is the only file that includes libwebp's headers. The pixels are
 * what Pillow's Image.open(f).convert("RGB") gives: libwebp's RGBA output
 * (lossy: its default "fancy" chroma upsampling, no dithering) with the
 * alpha dropped, not composited. An animated file gives its first frame
 * on its canvas, as Pillow's WebPAnimDecoder does: the canvas is zeros
 * (black once alpha is dropped) and the frame is decoded into its place
 * without blending, the first frame being a key frame.
 *
 * DESIGN: a still image is decoded with libwebp's cropping, only the
 * rows and columns of the region (lossy: the macroblock rows down to the
 * region's last one; lossless: the rows down to it). Measured on lossy,
 * lossless and alpha files, a cropped decode equals the full decode
 * inside the crop, but its outermost rows and columns differ where they
 * are not the image's own edges (the chroma upsampler sees no neighbour
 * past the crop), and libwebp moves a crop's left and top edges to even
 * positions. So the crop asked of libwebp is one pixel wider on each
 * side than the region, and the region handed on lies strictly inside it.
 * libwebp's scaling is not used: its rescaler is not the reference's
 * resampler, which starts from the full-size pixels.
 *
 * A file is judged from its RIFF size, whatever the crop: data shorter
 * than the RIFF header says is truncated, refused (RL_ETRUNCATED) unless
 * lim->allow_truncated, when libwebp's incremental decoder decodes the
 * rows the data holds and the rest are black (Pillow refuses any
 * truncated WebP). Damage inside a bitstream whose sizes are right is
 * found only where rows are decoded: libwebp's bitstreams hold no
 * checksum, and a lossy stream has no other way to tell damage from
 * content.
 */
#include "decode/decode.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <webp/decode.h>
#include <webp/demux.h>

typedef struct webp_state {
    const uint8_t *data;
    size_t len;
    int width, height; /* the canvas */
    bool animated;
    bool cut;       /* the data ends before the RIFF size */
    bool truncated; /* the last image was cut, and accepted */
    bool have_header;
    rl_decode_buf buf; /* RGBA */
} webp_state;

static const char *status_text(VP8StatusCode st)
{
    switch (st) {
    case VP8_STATUS_OUT_OF_MEMORY:
        return "out of memory";
    case VP8_STATUS_INVALID_PARAM:
        return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR:
        return "bitstream error";
    case VP8_STATUS_UNSUPPORTED_FEATURE:
        return "unsupported feature";
    case VP8_STATUS_SUSPENDED:
        return "suspended";
    case VP8_STATUS_USER_ABORT:
        return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA:
        return "not enough data";
    default:
        return "error";
    }
}

/* libwebp's status as ours, with msg naming what failed. */
static int webp_status(const webp_state *s, VP8StatusCode st, const char *what,
                       char *msg)
{
    bool short_data = s->cut || st == VP8_STATUS_NOT_ENOUGH_DATA;
    snprintf(msg, RL_MSG_MAX, "WebP %s: %s%s", what, status_text(st),
             short_data ? " (truncated file)" : "");
    if (st == VP8_STATUS_OUT_OF_MEMORY) {
        return -ENOMEM;
    }
    return short_data ? RL_ETRUNCATED : RL_EDECODE;
}

static int webp_header(void *state, const uint8_t *data, size_t len,
                       const rl_limits *lim, rl_image_info *info, char *msg)
{
    webp_state *s = state;
    msg[0] = '\0';
    s->have_header = false;
    s->truncated = false;
    if (len < 12 || memcmp(data, "RIFF", 4) != 0 ||
        memcmp(data + 8, "WEBP", 4) != 0) {
        snprintf(msg, RL_MSG_MAX, "not a WebP file (%zu bytes)", len);
        return RL_EFORMAT;
    }
    uint64_t riff = (uint64_t)data[4] | (uint64_t)data[5] << 8 |
                    (uint64_t)data[6] << 16 | (uint64_t)data[7] << 24;
    s->cut = riff + 8 > len;
    WebPBitstreamFeatures f;
    VP8StatusCode st = WebPGetFeatures(data, len, &f);
    if (st != VP8_STATUS_OK) {
        return webp_status(s, st, "header", msg);
    }
    int rc =
        rl_decode_check_pixels((uint64_t)f.width, (uint64_t)f.height, lim, msg);
    if (rc != 0) {
        return rc;
    }
    s->data = data;
    s->len = len;
    s->width = f.width;
    s->height = f.height;
    s->animated = f.has_animation != 0;
    info->width = f.width;
    info->height = f.height;
    info->components = 3;
    info->progressive = false;
    s->have_header = true;
    return 0;
}

/* An animated file's first frame, on a zero canvas in s->buf. */
static int decode_first_frame(webp_state *s, char *msg)
{
    if (s->cut) {
        snprintf(msg, RL_MSG_MAX,
                 "animated WebP data ends before its RIFF "
                 "size (truncated file)");
        return RL_ETRUNCATED;
    }
    WebPData whole = {s->data, s->len};
    WebPDemuxer *dmx = WebPDemux(&whole);
    if (dmx == NULL) {
        snprintf(msg, RL_MSG_MAX, "animated WebP: cannot parse its chunks");
        return RL_EDECODE;
    }
    WebPIterator it;
    int rc = 0;
    size_t stride = (size_t)s->width * 4;
    if (!WebPDemuxGetFrame(dmx, 1, &it)) {
        snprintf(msg, RL_MSG_MAX, "animated WebP has no frame");
        WebPDemuxDelete(dmx);
        return RL_EDECODE;
    }
    if (it.x_offset < 0 || it.y_offset < 0 || it.width <= 0 || it.height <= 0 ||
        it.x_offset + it.width > s->width ||
        it.y_offset + it.height > s->height) {
        snprintf(msg, RL_MSG_MAX, "animated WebP: frame outside its canvas");
        rc = RL_EDECODE;
    } else if (rl_decode_buf_reserve(&s->buf, stride * (size_t)s->height) !=
               0) {
        snprintf(msg, RL_MSG_MAX, "out of memory");
        rc = -ENOMEM;
    }
    if (rc == 0) {
        memset(s->buf.data, 0, stride * (size_t)s->height);
        WebPDecoderConfig cfg;
        WebPInitDecoderConfig(&cfg);
        cfg.output.colorspace = MODE_RGBA;
        cfg.output.is_external_memory = 1;
        cfg.output.u.RGBA.rgba = s->buf.data + (size_t)it.y_offset * stride +
                                 (size_t)it.x_offset * 4;
        cfg.output.u.RGBA.stride = (int)stride;
        cfg.output.u.RGBA.size =
            stride * (size_t)(it.height - 1) + (size_t)it.width * 4;
        VP8StatusCode st =
            WebPDecode(it.fragment.bytes, it.fragment.size, &cfg);
        if (st != VP8_STATUS_OK) {
            rc = webp_status(s, st, "frame 1", msg);
        }
    }
    WebPDemuxReleaseIterator(&it);
    WebPDemuxDelete(dmx);
    return rc;
}

/* A truncated still image (allow_truncated): the rows its data holds,
 * then black, the whole image in s->buf. */
static int decode_cut(webp_state *s, char *msg)
{
    size_t stride = (size_t)s->width * 4, size = stride * (size_t)s->height;
    if (rl_decode_buf_reserve(&s->buf, size) != 0) {
        snprintf(msg, RL_MSG_MAX, "out of memory");
        return -ENOMEM;
    }
    memset(s->buf.data, 0, size);
    WebPIDecoder *dec = WebPINewRGB(MODE_RGBA, s->buf.data, size, (int)stride);
    if (dec == NULL) {
        snprintf(msg, RL_MSG_MAX, "out of memory");
        return -ENOMEM;
    }
    VP8StatusCode st = WebPIUpdate(dec, s->data, s->len);
    int rc = 0;
    if (st != VP8_STATUS_OK && st != VP8_STATUS_SUSPENDED) {
        rc = webp_status(s, st, "data", msg);
    } else {
        int last_y = 0;
        WebPIDecGetRGB(dec, &last_y, NULL, NULL, NULL);
        /* Rows past last_y may hold part of a macroblock row. */
        if (last_y < s->height) {
            memset(s->buf.data + (size_t)last_y * stride, 0,
                   (size_t)(s->height - last_y) * stride);
        }
    }
    WebPIDelete(dec);
    return rc;
}

/* A still image's region, decoded with libwebp's cropping. */
static int decode_crop(webp_state *s, int x0, int y0, int w, int h, size_t *at,
                       size_t *stride, char *msg)
{
    /* One pixel of margin (the crop's edges are not exact), the left and
     * top moved to even positions as libwebp moves them. */
    int cx = (x0 > 0 ? x0 - 1 : 0) & ~1, cy = (y0 > 0 ? y0 - 1 : 0) & ~1;
    int cx1 = x0 + w < s->width ? x0 + w + 1 : s->width;
    int cy1 = y0 + h < s->height ? y0 + h + 1 : s->height;
    int cw = cx1 - cx, ch = cy1 - cy;
    *stride = (size_t)cw * 4;
    if (rl_decode_buf_reserve(&s->buf, *stride * (size_t)ch) != 0) {
        snprintf(msg, RL_MSG_MAX, "out of memory");
        return -ENOMEM;
    }
    WebPDecoderConfig cfg;
    WebPInitDecoderConfig(&cfg);
    if (cx > 0 || cy > 0 || cw < s->width || ch < s->height) {
        cfg.options.use_cropping = 1;
        cfg.options.crop_left = cx;
        cfg.options.crop_top = cy;
        cfg.options.crop_width = cw;
        cfg.options.crop_height = ch;
    }
    cfg.output.colorspace = MODE_RGBA;
    cfg.output.is_external_memory = 1;
    cfg.output.u.RGBA.rgba = s->buf.data;
    cfg.output.u.RGBA.stride = (int)*stride;
    cfg.output.u.RGBA.size = *stride * (size_t)ch;
    VP8StatusCode st = WebPDecode(s->data, s->len, &cfg);
    if (st != VP8_STATUS_OK) {
        return webp_status(s, st, "data", msg);
    }
    *at = (size_t)(y0 - cy) * *stride + (size_t)(x0 - cx) * 4;
    return 0;
}

static int webp_region(void *state, int m, int x0, int y0, int w, int h,
                       const rl_limits *lim, rl_pixels *out, char *msg)
{
    webp_state *s = state;
    msg[0] = '\0';
    if (!s->have_header || m != 8 || w <= 0 || h <= 0 || x0 < 0 || y0 < 0 ||
        x0 + w > s->width || y0 + h > s->height) {
        snprintf(msg, RL_MSG_MAX, "bad region request");
        return RL_EINTERNAL;
    }
    s->have_header = false;
    if (s->cut && !lim->allow_truncated) {
        snprintf(msg, RL_MSG_MAX,
                 "WebP data ends before its RIFF size "
                 "(truncated file)");
        return RL_ETRUNCATED;
    }
    size_t at = 0, stride = (size_t)s->width * 4;
    int rc;
    if (s->animated) {
        rc = decode_first_frame(s, msg);
    } else if (s->cut) {
        rc = decode_cut(s, msg);
    } else {
        rc = decode_crop(s, x0, y0, w, h, &at, &stride, msg);
    }
    if (rc != 0) {
        return rc;
    }
    if (s->animated || s->cut) {
        at = (size_t)y0 * stride + (size_t)x0 * 4;
    }
    s->truncated = s->cut;
    out->data = s->buf.data + at;
    out->stride = stride;
    out->x0 = x0;
    out->y0 = y0;
    out->w = w;
    out->h = h;
    out->full_w = s->width;
    out->full_h = s->height;
    return 0;
}

/* ---- the decoder's table entry ---- */

static bool def_claims(const rl_decoder_def *def, const uint8_t *data,
                       size_t len)
{
    (void)def;
    return len >= 12 && memcmp(data, "RIFF", 4) == 0 &&
           memcmp(data + 8, "WEBP", 4) == 0;
}

static void *def_create(const rl_decoder_def *def)
{
    (void)def;
    return calloc(1, sizeof(webp_state));
}

static void def_destroy(void *state)
{
    webp_state *s = state;
    if (s != NULL) {
        rl_decode_buf_exit(&s->buf);
        free(s);
    }
}

static bool def_truncated(const void *state)
{
    return ((const webp_state *)state)->truncated;
}

/* libwebp's decoders and demuxers live for one call: only our buffer
 * outlives an image. */
static size_t def_trim(void *state, bool roll)
{
    return rl_decode_buf_trim(&((webp_state *)state)->buf, roll);
}

const rl_decoder_def rl_webp_decoder = {
    .name = "webp",
    .format = RL_FORMAT_WEBP,
    .claims = def_claims,
    .create = def_create,
    .destroy = def_destroy,
    .header = webp_header,
    .scaled_size = NULL,
    .region = webp_region,
    .truncated = def_truncated,
    .trim = def_trim,
    .user = NULL,
};
