/*
 * decode/jpeg.c - the JPEG decoder (rl_jpeg_decoder), on the libjpeg API.
 *
 * This is the only file that includes jpeglib.h, and the only one that uses
 * setjmp: every entry point catches libjpeg's errors itself and returns a
 * status with libjpeg's message, so callers never see a longjmp.
 *
 * DESIGN: each entry point arms its own setjmp before touching libjpeg, and
 * error_exit longjmps back there with libjpeg's formatted message, so the
 * non-local jump never leaves this file. Warnings are silenced (libjpeg
 * would print them to stderr) except "Premature end of JPEG file", which
 * becomes an error unless truncated files are allowed, and is then counted.
 * A progress monitor enforces the progressive scan limit while
 * jpeg_start_decompress consumes the scans, before any output is produced.
 * libjpeg's memory for one image is bounded by rl_decode_memory_bound
 * (max_memory_to_use): libjpeg-turbo has no backing store, so the
 * whole-image coefficient buffers of a multi-scan file that would exceed
 * it fail with "Backing store not supported" before they are allocated,
 * which becomes RL_ETOOBIG. Setting it ourselves also keeps a JPEGMEM in
 * the environment (meant for djpeg) from changing what decodes.
 *
 * A file is judged whole, whatever part of it a crop decodes. A file of
 * several scans (progressive, or sequential with a scan per component) is
 * read up to its EOI marker by jpeg_start_decompress. A file of one scan is
 * read only down to the region's last row, so what lies after that is
 * checked from the bytes instead, before any row is decoded: the rest of
 * the entropy-coded data is skipped with memchr (a marker cannot hide in
 * it), and the markers after it are read as libjpeg's read_markers would
 * (jpeg_finish_decompress, which Pillow, torchvision and TurboJPEG call),
 * up to EOI. Data ending before EOI raises libjpeg's own "Premature end of
 * JPEG file" warning, a marker libjpeg refuses there its own error, through
 * the same handlers. Bytes after EOI are never looked at, as libjpeg never
 * reads them; stray bytes before a marker are only a warning to libjpeg,
 * and ignored like its other warnings.
 *
 * The decompressor and its row buffer live as long as the decoder and are
 * reused across images, the buffer trimmed after an outlier (decode.h's
 * rl_decode_buf); libjpeg's per-image memory is released by
 * jpeg_abort_decompress at the start of every header read and after every
 * region, whether it succeeded or not.
 */
#define _GNU_SOURCE
#include "decode/decode.h"

#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>

typedef struct jpeg_state jpeg_state;

struct jpeg_state {
    struct jpeg_decompress_struct cinfo;
    struct jpeg_error_mgr jerr;
    struct jpeg_progress_mgr progress;
    jmp_buf jmp;
    int fail_status; /* status the longjmp reports */
    char *msg;       /* where the current call wants its message */
    bool allow_truncated;
    bool truncated; /* the current image ended early (and was allowed) */
    int max_scans;
    uint64_t max_bytes; /* libjpeg's memory bound for the current image */
    bool have_header;
    const uint8_t *data; /* the bytes of the header's image */
    size_t len;
    size_t scan_at;    /* where the first scan's entropy-coded data starts */
    rl_decode_buf buf; /* region rows */
    rl_decode_buf cmyk_row; /* one CMYK row before conversion */
};

static void on_error_exit(j_common_ptr c)
{
    jpeg_state *d = (jpeg_state *)c->client_data;
    char text[JMSG_LENGTH_MAX];
    c->err->format_message(c, text);
    snprintf(d->msg, RL_MSG_MAX, "%s", text);
    /* libjpeg's own dimension limit (65500) refuses a bomb before ours. */
    d->fail_status =
        c->err->msg_code == JERR_IMAGE_TOO_BIG ? RL_ETOOBIG : RL_EDECODE;
    if (c->err->msg_code == JERR_NO_BACKING_STORE) {
        /* What libjpeg-turbo says for memory over max_memory_to_use. */
        snprintf(d->msg, RL_MSG_MAX,
                 "JPEG needs more than the %llu bytes a decode thread may "
                 "hold for one image (its whole-image coefficient buffers; "
                 "by default 8 bytes per pixel of max_pixels + 64 MiB)",
                 (unsigned long long)d->max_bytes);
        d->fail_status = RL_ETOOBIG;
    }
    longjmp(d->jmp, 1);
}

static void on_emit_message(j_common_ptr c, int level)
{
    if (level >= 0) {
        return; /* trace messages */
    }
    jpeg_state *d = (jpeg_state *)c->client_data;
    c->err->num_warnings++;
    if (c->err->msg_code == JWRN_JPEG_EOF && !d->allow_truncated) {
        char text[JMSG_LENGTH_MAX];
        c->err->format_message(c, text);
        snprintf(d->msg, RL_MSG_MAX, "%s (truncated file)", text);
        d->fail_status = RL_ETRUNCATED;
        longjmp(d->jmp, 1);
    }
    if (c->err->msg_code == JWRN_JPEG_EOF) {
        d->truncated = true;
    }
}

static bool jpeg_truncated(const jpeg_state *d)
{
    return d->truncated;
}

static void on_progress(j_common_ptr c)
{
    jpeg_state *d = (jpeg_state *)c->client_data;
    struct jpeg_decompress_struct *di = (struct jpeg_decompress_struct *)c;
    if (di->input_scan_number > d->max_scans) {
        snprintf(d->msg, RL_MSG_MAX,
                 "progressive JPEG has more than %d scans (limit)",
                 d->max_scans);
        d->fail_status = RL_ETOOBIG;
        longjmp(d->jmp, 1);
    }
}

/* Creates the decompressor inside d; false when libjpeg ran out of memory.
 * Separate from jpeg_create so no local there is live across setjmp. */
static bool create_cinfo(jpeg_state *d)
{
    char scratch[RL_MSG_MAX];
    d->msg = scratch;
    if (setjmp(d->jmp)) {
        d->msg = NULL;
        return false;
    }
    jpeg_create_decompress(&d->cinfo);
    d->msg = NULL;
    return true;
}

static jpeg_state *state_create(void)
{
    jpeg_state *d = calloc(1, sizeof(*d));
    if (d == NULL) {
        return NULL;
    }
    d->cinfo.err = jpeg_std_error(&d->jerr);
    d->jerr.error_exit = on_error_exit;
    d->jerr.emit_message = on_emit_message;
    d->cinfo.client_data = d;
    if (!create_cinfo(d)) {
        free(d);
        return NULL;
    }
    d->progress.progress_monitor = on_progress;
    d->cinfo.progress = &d->progress;
    return d;
}

static void state_destroy(jpeg_state *d)
{
    if (d == NULL) {
        return;
    }
    jpeg_destroy_decompress(&d->cinfo);
    rl_decode_buf_exit(&d->buf);
    rl_decode_buf_exit(&d->cmyk_row);
    free(d);
}

const char *rl_decode_libjpeg_version(void)
{
#ifdef LIBJPEG_TURBO_VERSION
#define RL_STR2(x) #x
#define RL_STR(x) RL_STR2(x)
    return RL_STR(LIBJPEG_TURBO_VERSION);
#else
    return "unknown";
#endif
}

static int jpeg_header(jpeg_state *d, const uint8_t *data, size_t len,
                       const rl_limits *lim, rl_image_info *hdr, char *msg)
{
    msg[0] = '\0';
    d->msg = msg;
    d->have_header = false;
    d->truncated = false;
    jpeg_abort_decompress(&d->cinfo);
    if (len < 3 || data[0] != 0xFF || data[1] != 0xD8 || data[2] != 0xFF) {
        snprintf(msg, RL_MSG_MAX, "not a JPEG file (%zu bytes%s)", len,
                 len >= 8 && memcmp(data, "\x89PNG", 4) == 0 ? ", PNG data"
                                                             : "");
        return RL_EFORMAT;
    }
    d->allow_truncated = lim->allow_truncated;
    d->max_scans = lim->max_scans;
    d->max_bytes = rl_decode_memory_bound(lim);
    /* A field of the memory manager: it lasts across images (jpeg_abort
     * keeps it), and is read when an image's buffers are made. */
    d->cinfo.mem->max_memory_to_use =
        d->max_bytes > (uint64_t)LONG_MAX ? LONG_MAX : (long)d->max_bytes;
    d->data = data;
    d->len = len;
    if (setjmp(d->jmp)) {
        jpeg_abort_decompress(&d->cinfo);
        return d->fail_status;
    }
    d->jerr.num_warnings = 0;
    jpeg_mem_src(&d->cinfo, d->data, (unsigned long)d->len);
    jpeg_read_header(&d->cinfo, TRUE);
    int rc = rl_decode_check_pixels(d->cinfo.image_width, d->cinfo.image_height,
                                    lim, msg);
    if (rc != 0) {
        jpeg_abort_decompress(&d->cinfo);
        return rc;
    }
    /* jpeg_read_header stops just after the first SOS segment. The source
     * points into data unless it ran out, which it said (JWRN_JPEG_EOF). */
    uintptr_t at = (uintptr_t)d->cinfo.src->next_input_byte;
    d->scan_at = at - (uintptr_t)d->data <= d->len
                     ? (size_t)(at - (uintptr_t)d->data)
                     : d->len;
    hdr->width = (int)d->cinfo.image_width;
    hdr->height = (int)d->cinfo.image_height;
    hdr->components = d->cinfo.num_components;
    hdr->progressive = d->cinfo.progressive_mode != 0;
    d->have_header = true;
    return 0;
}

static void jpeg_scaled_size(jpeg_state *d, int m, int *w, int *h)
{
    /* Same rounding as jpeg_calc_output_dimensions (jdiv_round_up), without
     * touching the decompressor's state. */
    *w = (int)(((uint64_t)d->cinfo.image_width * (unsigned)m + 7) / 8);
    *h = (int)(((uint64_t)d->cinfo.image_height * (unsigned)m + 7) / 8);
}

/* The code of the first marker in [p, end), libjpeg's way: stuffed zeros
 * (FF 00), fill bytes (FF FF), restart markers and TEM, which libjpeg passes
 * over, do not count; *next is just past it. Returns -1 at the end. */
static int find_marker(const uint8_t *p, const uint8_t *end,
                       const uint8_t **next)
{
    while (p < end) {
        const uint8_t *q = memchr(p, 0xFF, (size_t)(end - p));
        if (q == NULL) {
            break;
        }
        while (q < end && *q == 0xFF) {
            q++;
        }
        if (q == end) {
            break;
        }
        int c = *q;
        p = q + 1;
        if (c != 0x00 && c != 0x01 && (c < 0xD0 || c > 0xD7)) {
            *next = p;
            return c;
        }
    }
    return -1;
}

/* Markers followed by a length and skipped by read_markers after a scan:
 * DHT, DAC, DNL, DQT, DRI, APPn, COM. */
static bool has_length(int c)
{
    return c == 0xC4 || c == 0xCC || c == 0xDB || c == 0xDC || c == 0xDD ||
           (c >= 0xE0 && c <= 0xEF) || c == 0xFE;
}

/*
 * What jpeg_finish_decompress would find after the one scan of d's image,
 * from the bytes: returns at EOI; warns JWRN_JPEG_EOF when the data ends
 * first; errors as libjpeg does for a marker it refuses there. Warnings and
 * errors go through d's handlers: call with the region's setjmp armed.
 */
static void check_after_scan(jpeg_state *d)
{
    j_decompress_ptr ci = &d->cinfo;
    const uint8_t *p = d->data + d->scan_at, *end = d->data + d->len;
    for (;;) {
        int c = find_marker(p, end, &p);
        if (c == 0xD9) {
            return; /* EOI */
        }
        if (c < 0) {
            WARNMS(ci, JWRN_JPEG_EOF);
            return;
        }
        if (has_length(c)) {
            size_t n = end - p >= 2 ? (size_t)p[0] << 8 | p[1] : 0;
            if (end - p < 2 || n > (size_t)(end - p)) {
                WARNMS(ci, JWRN_JPEG_EOF);
                return;
            }
            if (n < 2 && (c == 0xC4 || c == 0xCC || c == 0xDB || c == 0xDD)) {
                ERREXIT(ci, JERR_BAD_LENGTH); /* a table's: get_dht... */
            }
            p += n < 2 ? 2 : n; /* others: skip_variable */
        } else if (c == 0xD8) {
            ERREXIT(ci, JERR_SOI_DUPLICATE);
        } else if (c == 0xDA) {
            ERREXIT(ci, JERR_EOI_EXPECTED);
        } else if (c == 0xC0 || c == 0xC1 || c == 0xC2 || c == 0xC3 ||
                   c == 0xC9 || c == 0xCA || c == 0xCB) {
            ERREXIT(ci, JERR_SOF_DUPLICATE);
        } else if (c >= 0xC5 && c <= 0xCF) {
            ERREXIT1(ci, JERR_SOF_UNSUPPORTED, c);
        } else {
            ERREXIT1(ci, JERR_UNKNOWN_MARKER, c);
        }
    }
}

/* Pillow's CMYK -> RGB for Adobe (inverted) CMYK: value = nk - c*nk/255,
 * written as RGBX. */
static void cmyk_to_rgbx(const uint8_t *in, uint8_t *out, int n)
{
    for (int i = 0; i < n; i++) {
        int c = 255 - in[0], m = 255 - in[1], y = 255 - in[2];
        int nk = in[3];
        int t;
        t = c * nk + 128;
        out[0] = (uint8_t)(nk - (((t >> 8) + t) >> 8));
        t = m * nk + 128;
        out[1] = (uint8_t)(nk - (((t >> 8) + t) >> 8));
        t = y * nk + 128;
        out[2] = (uint8_t)(nk - (((t >> 8) + t) >> 8));
        out[3] = 0;
        in += 4;
        out += 4;
    }
}

static int jpeg_region(jpeg_state *d, int m, int x0, int y0, int w, int h,
                       const rl_limits *lim, rl_pixels *out, char *msg)
{
    struct jpeg_decompress_struct *ci = &d->cinfo;
    msg[0] = '\0';
    d->msg = msg;
    if (!d->have_header || m < 1 || m > 16 || w <= 0 || h <= 0) {
        snprintf(msg, RL_MSG_MAX, "bad region request");
        return RL_EINTERNAL;
    }
    d->have_header = false;
    d->allow_truncated = lim->allow_truncated;
    d->max_scans = lim->max_scans;
    if (setjmp(d->jmp)) {
        jpeg_abort_decompress(ci);
        return d->fail_status;
    }

    bool cmyk =
        ci->jpeg_color_space == JCS_CMYK || ci->jpeg_color_space == JCS_YCCK;
    /* RGBX: one pixel per 32-bit lane for the resampler; libjpeg-turbo
     * converts YCbCr, RGB and grayscale to it with its SIMD code. */
    ci->out_color_space = cmyk ? JCS_CMYK : JCS_EXT_RGBX;
    ci->scale_num = (unsigned)m;
    ci->scale_denom = 8;
    jpeg_start_decompress(ci);
    if (!jpeg_has_multiple_scans(ci)) {
        check_after_scan(d);
    }

    int full_w = (int)ci->output_width, full_h = (int)ci->output_height;
    if (x0 < 0 || y0 < 0 || x0 + w > full_w || y0 + h > full_h) {
        snprintf(msg, RL_MSG_MAX, "region outside the %dx%d image", full_w,
                 full_h);
        jpeg_abort_decompress(ci);
        return RL_EINTERNAL;
    }
    JDIMENSION cx = (JDIMENSION)x0, cw = (JDIMENSION)w;
    if (cx > 0 || cw < ci->output_width) {
        jpeg_crop_scanline(ci, &cx, &cw);
    }
    int bw = (int)ci->output_width; /* the cropped width, after alignment */
    size_t stride = (size_t)bw * 4;
    if (rl_decode_buf_reserve(&d->buf, stride * (size_t)h) != 0 ||
        (cmyk && rl_decode_buf_reserve(&d->cmyk_row, (size_t)bw * 4) != 0)) {
        jpeg_abort_decompress(ci);
        snprintf(msg, RL_MSG_MAX, "out of memory");
        return -ENOMEM;
    }
    if (y0 > 0) {
        JDIMENSION skipped = jpeg_skip_scanlines(ci, (JDIMENSION)y0);
        if ((int)skipped != y0) {
            jpeg_abort_decompress(ci);
            snprintf(msg, RL_MSG_MAX, "could not skip to row %d", y0);
            return RL_EDECODE;
        }
    }
    for (int r = 0; r < h;) {
        JSAMPROW row =
            cmyk ? d->cmyk_row.data : d->buf.data + (size_t)r * stride;
        JDIMENSION got = jpeg_read_scanlines(ci, &row, 1);
        if (got != 1) {
            jpeg_abort_decompress(ci);
            snprintf(msg, RL_MSG_MAX, "decoder returned no row %d", y0 + r);
            return RL_EDECODE;
        }
        if (cmyk) {
            cmyk_to_rgbx(d->cmyk_row.data, d->buf.data + (size_t)r * stride,
                         bw);
        }
        r++;
    }
    /* Rows below the region are never decoded: stop here. */
    jpeg_abort_decompress(ci);

    out->data = d->buf.data;
    out->stride = stride;
    out->x0 = (int)cx;
    out->y0 = y0;
    out->w = bw;
    out->h = h;
    out->full_w = full_w;
    out->full_h = full_h;
    return 0;
}

/* ---- the decoder's table entry ---- */

static bool jpeg_claims(const rl_decoder_def *def, const uint8_t *data,
                        size_t len)
{
    (void)def;
    return len >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF;
}

static void *def_create(const rl_decoder_def *def)
{
    (void)def;
    return state_create();
}

static void def_destroy(void *state)
{
    state_destroy(state);
}

static int def_header(void *state, const uint8_t *data, size_t len,
                      const rl_limits *lim, rl_image_info *info, char *msg)
{
    return jpeg_header(state, data, len, lim, info, msg);
}

static void def_scaled_size(void *state, int m, int *w, int *h)
{
    jpeg_scaled_size(state, m, w, h);
}

static int def_region(void *state, int m, int x0, int y0, int w, int h,
                      const rl_limits *lim, rl_pixels *out, char *msg)
{
    return jpeg_region(state, m, x0, y0, w, h, lim, out, msg);
}

static bool def_truncated(const void *state)
{
    return jpeg_truncated(state);
}

/* libjpeg's own memory needs no trim: jpeg_abort_decompress frees an
 * image's pools after every region and failed header. */
static size_t def_trim(void *state, bool roll)
{
    jpeg_state *d = state;
    return rl_decode_buf_trim(&d->buf, roll) +
           rl_decode_buf_trim(&d->cmyk_row, roll);
}

const rl_decoder_def rl_jpeg_decoder = {
    .name = "jpeg",
    .format = RL_FORMAT_JPEG,
    .claims = jpeg_claims,
    .create = def_create,
    .destroy = def_destroy,
    .header = def_header,
    .scaled_size = def_scaled_size,
    .region = def_region,
    .truncated = def_truncated,
    .trim = def_trim,
    .user = NULL,
};
