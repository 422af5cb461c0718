/*
 * decode/png.c - the PNG decoder (rl_png_decoder), on libspng.
 *
 * This file and decode/png_index.c (which opens libspng's context for
 * both, decode/png_spng.h) are the only ones on libspng. The pixels are
 * what Pillow's Image.open(f).convert("RGB") gives, which is what
 * torchvision's ImageFolder loader hands a transform: alpha (an alpha
 * channel or tRNS) is dropped, not composited; a palette is expanded, an
 * index past the end of PLTE giving black; grey of 1, 2 or 4 bits is
 * scaled to 8 (x255, x85, x17); 16-bit grey (Pillow's I;16) is clipped to
 * 255, while 16-bit grey+alpha, RGB and RGBA keep their high byte
 * (Pillow's unpackers).
 * Gamma, sBIT and colour profiles are ignored, as Pillow ignores them.
 *
 * DESIGN: the rows come in the file's own format (SPNG_FMT_RAW,
 * big-endian), and this file converts the columns of the region to RGBX.
 * A non-interlaced file of at most RL_PNG_ROWS_MAX filtered bytes is first
 * offered to png_rows.c (libdeflate inflating the whole stream, our own
 * unfiltering down to the region's last row: about twice libspng's speed
 * with zlib); what it declines, and every other file, libspng decodes,
 * so each file's outcome, pixels or error, is libspng's.
 * Either way every row of the image is inflated and its filter type
 * checked, the rows below the region too, so that a crop fails where the
 * whole image fails (decode.h): libdeflate inflates the whole stream and
 * png_rows.c reads every row's filter byte, declining the file at a bad
 * one; libspng decodes every row, those outside the region (interlaced or
 * not) into one scratch row, converting and keeping only the region's.
 * That costs libspng's files the rows below a crop: on a 5000 x 4500 RGB
 * photo (67.5 MB of rows, over RL_PNG_ROWS_MAX) a 224-pixel crop took
 * 1.28 s at the top (0.08 s when decoding stopped at its last row) and
 * 1.42 s at the centre (0.73 s), the whole image 2.1 s; the fast path's
 * check is a byte a row.
 *
 * A file is judged whole, whatever rows a region decodes: before any row,
 * the chunk list is walked from the bytes (lengths and the critical
 * chunks' CRCs, cheap next to inflating), so a file cut before its IEND chunk is
 * truncated, and one with a damaged IDAT chunk corrupt, whatever the crop.
 * A truncated file is refused (RL_ETRUNCATED) unless lim->allow_truncated:
 * then the rows the data holds are decoded (the chunk it ends in is cut
 * short, so that libspng, which reads whole chunks, inflates every byte
 * there is) and the rest are zero samples (black, or a palette's first
 * colour), as Pillow's LOAD_TRUNCATED_IMAGES leaves them. Pillow also opens a file
 * whose IEND alone is missing; here it is truncated, as it is to libspng.
 *
 * Limits: the image size is checked from IHDR before any pixel memory
 * exists (rl_decode_check_pixels). Inflation is bounded by the image:
 * libdeflate stops at the end of the image's buffer, libspng inflates
 * IDAT data only into the rows it is asked for; compressed ancillary
 * chunks (iCCP, zTXt, iTXt) are held to RL_PNG_CHUNK_CACHE bytes, which
 * Pillow bounds too (its MAX_TEXT_MEMORY, 64 MiB).
 *
 * An APNG's first frame is its IDAT image, which libspng reads as a PNG
 * (the animation's chunks are ancillary), as Pillow's first frame is.
 */
#include "decode/decode.h"
#include "decode/png_rows.h"
#include "decode/png_spng.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const uint8_t png_magic[8] = {0x89, 'P',  'N',  'G',
                                     '\r', '\n', 0x1A, '\n'};

typedef struct png_state {
    spng_ctx *ctx; /* the current image's; NULL between images */
    struct spng_ihdr ihdr;
    uint8_t pal[256][3]; /* zeros past the end of PLTE */
    bool have_header;
    bool cut;            /* the data ends before IEND */
    size_t cut_at;       /* where the chunk the data ends in starts */
    const uint8_t *data; /* the header's bytes */
    size_t len;
    rl_decode_buf mended; /* a cut file's bytes, made whole */
    bool truncated;       /* the last image was cut, and accepted */
    rl_decode_buf raw;    /* the region's rows as in the file (interlaced) */
    rl_decode_buf row;    /* one row as in the file */
    rl_decode_buf buf;    /* the region, RGBX */
    rl_png_rows fast;     /* the whole-stream path (png_rows.h) */
} png_state;

static void drop_ctx(png_state *s)
{
    spng_ctx_free(s->ctx);
    s->ctx = NULL;
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/*
 * A cut file made whole, in s->mended: the chunk the data ends in is
 * shortened to the bytes there are (its CRC made anew) and IEND follows.
 * libspng reads whole chunks only, while Pillow inflates every byte of a
 * cut file (LOAD_TRUNCATED_IMAGES): so libspng decodes the rows Pillow
 * decodes. Returns 0 or -ENOMEM.
 */
static int mend(png_state *s, const uint8_t **data, size_t *len)
{
    size_t at = s->cut_at;
    size_t body = s->len - at >= 8 ? s->len - at - 8 : 0;
    if (body > 0 && rl__png_be32(s->data + at) < body) {
        body = rl__png_be32(s->data + at); /* cut in its CRC */
    }
    static const uint8_t iend[12] = {0,   0,   0,    0,    'I',  'E',
                                     'N', 'D', 0xAE, 0x42, 0x60, 0x82};
    if (rl_decode_buf_reserve(&s->mended, at + 12 + body + 12) != 0) {
        return -ENOMEM;
    }
    uint8_t *m = s->mended.data;
    memcpy(m, s->data, at);
    size_t n = at;
    if (body > 0) {
        put_be32(m + n, (uint32_t)body);
        memcpy(m + n + 4, s->data + at + 4, 4 + body);
        put_be32(m + n + 8 + body, rl__png_crc32(m + n + 4, 4 + body));
        n += 12 + body;
    }
    memcpy(m + n, iend, sizeof(iend));
    *data = m;
    *len = n + sizeof(iend);
    return 0;
}

static int open_ctx(png_state *s, const uint8_t *data, size_t len)
{
    return rl__png_open(&s->ctx, data, len, &s->ihdr);
}

static int png_header(void *state, const uint8_t *data, size_t len,
                      const rl_limits *lim, rl_image_info *info, char *msg)
{
    png_state *s = state;
    msg[0] = '\0';
    drop_ctx(s);
    s->have_header = false;
    s->truncated = false;
    if (len < sizeof(png_magic) || memcmp(data, png_magic, 8) != 0) {
        snprintf(msg, RL_MSG_MAX, "not a PNG file (%zu bytes)", len);
        return RL_EFORMAT;
    }
    int rc = rl__png_walk_chunks(data, len, &s->cut, &s->cut_at, msg);
    if (rc != 0) {
        return rc;
    }
    s->data = data;
    s->len = len;
    int err = open_ctx(s, data, len);
    if (err != 0) {
        rc = rl__png_status(err, "header", msg);
        drop_ctx(s);
        return rc;
    }
    rc = rl_decode_check_pixels(s->ihdr.width, s->ihdr.height, lim, msg);
    if (rc != 0) {
        drop_ctx(s);
        return rc;
    }
    memset(s->pal, 0, sizeof(s->pal));
    if (s->ihdr.color_type == SPNG_COLOR_TYPE_INDEXED) {
        struct spng_plte plte;
        err = spng_get_plte(s->ctx, &plte);
        if (err != 0) {
            rc = rl__png_status(err, "palette", msg);
            drop_ctx(s);
            return rc;
        }
        for (uint32_t i = 0; i < plte.n_entries && i < 256; i++) {
            s->pal[i][0] = plte.entries[i].red;
            s->pal[i][1] = plte.entries[i].green;
            s->pal[i][2] = plte.entries[i].blue;
        }
    }
    info->width = (int)s->ihdr.width;
    info->height = (int)s->ihdr.height;
    bool grey = s->ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE ||
                s->ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE_ALPHA;
    info->components = grey ? 1 : 3;
    info->progressive = s->ihdr.interlace_method != 0;
    s->have_header = true;
    return 0;
}

/* Sample x of a row of samples of `depth` bits (1, 2, 4, 8), packed. */
static inline unsigned packed(const uint8_t *row, size_t x, int depth)
{
    size_t bit = x * (size_t)depth;
    return (unsigned)(row[bit >> 3] >> (8 - depth - (int)(bit & 7))) &
           ((1u << depth) - 1);
}

/* Columns [x0, x0 + w) of one row in the file's format, as RGBX. */
static void convert_row(const png_state *s, const uint8_t *in, int x0, int w,
                        uint8_t *out)
{
    int depth = s->ihdr.bit_depth;
    if (depth == 8 && (s->ihdr.color_type == SPNG_COLOR_TYPE_TRUECOLOR ||
                       s->ihdr.color_type == SPNG_COLOR_TYPE_TRUECOLOR_ALPHA)) {
        /* The common files, without the switch per pixel below. */
        size_t step = s->ihdr.color_type == SPNG_COLOR_TYPE_TRUECOLOR ? 3 : 4;
        const uint8_t *p = in + (size_t)x0 * step;
        for (int i = 0; i < w; i++, p += step, out += 4) {
            out[0] = p[0];
            out[1] = p[1];
            out[2] = p[2];
            out[3] = 0;
        }
        return;
    }
    for (int i = 0; i < w; i++, out += 4) {
        size_t x = (size_t)x0 + (size_t)i;
        unsigned r, g, b;
        switch (s->ihdr.color_type) {
        case SPNG_COLOR_TYPE_GRAYSCALE:
            if (depth == 16) {
                /* Pillow's I;16 -> RGB clips to 255. */
                r = in[2 * x] != 0 ? 255 : in[2 * x + 1];
            } else if (depth == 8) {
                r = in[x];
            } else {
                r = packed(in, x, depth) * (255u / ((1u << depth) - 1));
            }
            g = b = r;
            break;
        case SPNG_COLOR_TYPE_GRAYSCALE_ALPHA:
            r = g = b = in[x * (depth / 4)]; /* the high byte */
            break;
        case SPNG_COLOR_TYPE_TRUECOLOR: {
            size_t step = (size_t)depth / 8; /* high bytes */
            const uint8_t *p = in + x * 3 * step;
            r = p[0];
            g = p[step];
            b = p[2 * step];
            break;
        }
        case SPNG_COLOR_TYPE_TRUECOLOR_ALPHA: {
            size_t step = (size_t)depth / 8;
            const uint8_t *p = in + x * 4 * step;
            r = p[0];
            g = p[step];
            b = p[2 * step];
            break;
        }
        default: { /* indexed */
            unsigned k = depth == 8 ? in[x] : packed(in, x, depth);
            r = s->pal[k][0];
            g = s->pal[k][1];
            b = s->pal[k][2];
            break;
        }
        }
        out[0] = (uint8_t)r;
        out[1] = (uint8_t)g;
        out[2] = (uint8_t)b;
        out[3] = 0;
    }
}

/*
 * Decodes every row of the image, converting the region's rows [y0, y0 +
 * h) into s->buf (interlaced: the region's raw rows into s->raw); the
 * rows outside it go through one scratch row. The rows below the region
 * are decoded too, though no pixel of them is kept: a damaged row there
 * (a bad filter type, a short stream) fails the region as it fails the
 * whole image, so that the outcome never depends on the crop (decode.h).
 * Returns 0, or libspng's error with *bad the first region row that may
 * be incomplete (h when the region was complete).
 */
static int decode_rows(png_state *s, size_t rowbytes, int x0, int y0, int w,
                       int h, int *bad)
{
    bool interlaced = s->ihdr.interlace_method != 0;
    size_t stride = (size_t)w * 4;
    int next = 0; /* region rows converted (non-interlaced) */
    *bad = 0;
    for (;;) {
        struct spng_row_info ri;
        int err = spng_get_row_info(s->ctx, &ri);
        if (err != 0) {
            return err == SPNG_EOI ? 0 : err;
        }
        int y = (int)ri.row_num;
        bool in = y >= y0 && y < y0 + h;
        uint8_t *dst = interlaced && in
                           ? s->raw.data + (size_t)(y - y0) * rowbytes
                           : s->row.data;
        err = spng_decode_row(s->ctx, dst, rowbytes);
        if (err != 0 && err != SPNG_EOI) {
            /* Interlaced: any row may lack pixels of later passes. */
            *bad = interlaced ? 0 : next;
            return err;
        }
        if (!interlaced && in) {
            convert_row(s, s->row.data, x0, w,
                        s->buf.data + (size_t)next * stride);
            next++;
        }
        if (err == SPNG_EOI) {
            return 0;
        }
    }
}

/* Bytes per pixel as PNG's filters count them: 1 under a byte. */
static size_t bytes_per_pixel(const struct spng_ihdr *h)
{
    static const unsigned channels[7] = {1, 0, 3, 1, 2, 0, 4};
    size_t bits = (size_t)channels[h->color_type % 7] * h->bit_depth;
    return bits < 8 ? 1 : bits / 8;
}

/* The region decoded into s->buf, handed out. */
static int finish(png_state *s, int x0, int y0, int w, int h, rl_pixels *out)
{
    s->truncated = s->cut;
    out->data = s->buf.data;
    out->stride = (size_t)w * 4;
    out->x0 = x0;
    out->y0 = y0;
    out->w = w;
    out->h = h;
    out->full_w = (int)s->ihdr.width;
    out->full_h = (int)s->ihdr.height;
    return 0;
}

static int png_region(void *state, int m, int x0, int y0, int w, int h,
                      const rl_limits *lim, rl_pixels *out, char *msg)
{
    png_state *s = state;
    msg[0] = '\0';
    int fw = (int)s->ihdr.width, fh = (int)s->ihdr.height;
    if (!s->have_header || m != 8 || w <= 0 || h <= 0 || x0 < 0 || y0 < 0 ||
        x0 + w > fw || y0 + h > fh) {
        snprintf(msg, RL_MSG_MAX, "bad region request");
        return RL_EINTERNAL;
    }
    s->have_header = false;
    if (s->cut && !lim->allow_truncated) {
        snprintf(msg, RL_MSG_MAX,
                 "PNG data ends before its IEND chunk "
                 "(truncated file)");
        drop_ctx(s);
        return RL_ETRUNCATED;
    }
    int err = 0;
    if (s->cut) {
        /* allow_truncated: decode what the data holds, as Pillow does. */
        const uint8_t *whole;
        size_t whole_len;
        if (mend(s, &whole, &whole_len) != 0) {
            drop_ctx(s);
            snprintf(msg, RL_MSG_MAX, "out of memory");
            return -ENOMEM;
        }
        drop_ctx(s);
        err = open_ctx(s, whole, whole_len);
    }
    size_t size = 0;
    if (err == 0) {
        err = spng_decoded_image_size(s->ctx, SPNG_FMT_RAW, &size);
    }
    if (err == 0) {
        err = spng_decode_image(s->ctx, NULL, 0, SPNG_FMT_RAW,
                                SPNG_DECODE_PROGRESSIVE);
    }
    if (err != 0) {
        int rc = rl__png_status(err, "decode", msg);
        drop_ctx(s);
        return rc;
    }
    size_t rowbytes = size / (size_t)fh;
    size_t stride = (size_t)w * 4;
    bool interlaced = s->ihdr.interlace_method != 0;
    if (rl_decode_buf_reserve(&s->row, rowbytes) != 0 ||
        rl_decode_buf_reserve(&s->buf, stride * (size_t)h) != 0 ||
        (interlaced &&
         rl_decode_buf_reserve(&s->raw, rowbytes * (size_t)h) != 0)) {
        drop_ctx(s);
        snprintf(msg, RL_MSG_MAX, "out of memory");
        return -ENOMEM;
    }
    if (!interlaced && !s->cut &&
        (rowbytes + 1) * (size_t)fh <= RL_PNG_ROWS_MAX) {
        const uint8_t *rows;
        int rc =
            rl__png_rows_decode(&s->fast, s->data, s->len, rowbytes,
                                bytes_per_pixel(&s->ihdr), fh, y0 + h, &rows);
        if (rc == 0) {
            drop_ctx(s);
            for (int r = 0; r < h; r++) {
                convert_row(s, rows + (size_t)(y0 + r) * (rowbytes + 1), x0, w,
                            s->buf.data + (size_t)r * stride);
            }
            return finish(s, x0, y0, w, h, out);
        }
        if (rc != RL_PNG_DECLINED) {
            drop_ctx(s);
            snprintf(msg, RL_MSG_MAX, "out of memory");
            return rc;
        }
        /* Declined: libspng decodes the file and judges it. */
    }
    if (interlaced) {
        /* A cut file leaves some pixels of some rows undecoded: black. */
        memset(s->raw.data, 0, rowbytes * (size_t)h);
    }
    int bad;
    err = decode_rows(s, rowbytes, x0, y0, w, h, &bad);
    drop_ctx(s);
    if (err != 0 && !(s->cut && lim->allow_truncated)) {
        return rl__png_status(err, "data", msg);
    }
    if (interlaced) {
        for (int r = 0; r < h; r++) {
            convert_row(s, s->raw.data + (size_t)r * rowbytes, x0, w,
                        s->buf.data + (size_t)r * stride);
        }
    } else if (err != 0) {
        /* Rows the data does not hold are zero samples, as in Pillow's
         * image (a palette's first colour). */
        memset(s->row.data, 0, rowbytes);
        for (int r = bad; r < h; r++) {
            convert_row(s, s->row.data, x0, w,
                        s->buf.data + (size_t)r * stride);
        }
    }
    return finish(s, x0, y0, w, h, out);
}

/* ---- the decoder's table entry ---- */

static bool def_claims(const rl_decoder_def *def, const uint8_t *data,
                       size_t len)
{
    (void)def;
    return len >= sizeof(png_magic) && memcmp(data, png_magic, 8) == 0;
}

static void *def_create(const rl_decoder_def *def)
{
    (void)def;
    return calloc(1, sizeof(png_state));
}

static void def_destroy(void *state)
{
    png_state *s = state;
    if (s == NULL) {
        return;
    }
    drop_ctx(s);
    rl__png_rows_exit(&s->fast);
    rl_decode_buf_exit(&s->raw);
    rl_decode_buf_exit(&s->mended);
    rl_decode_buf_exit(&s->row);
    rl_decode_buf_exit(&s->buf);
    free(s);
}

static bool def_truncated(const void *state)
{
    return ((const png_state *)state)->truncated;
}

/* libspng's context is per image (drop_ctx after each region): only our
 * buffers outlive an image. */
static size_t def_trim(void *state, bool roll)
{
    png_state *s = state;
    return rl_decode_buf_trim(&s->mended, roll) +
           rl_decode_buf_trim(&s->raw, roll) +
           rl_decode_buf_trim(&s->row, roll) +
           rl_decode_buf_trim(&s->buf, roll) +
           rl__png_rows_trim(&s->fast, roll);
}

const rl_decoder_def rl_png_decoder = {
    .name = "png",
    .format = RL_FORMAT_PNG,
    .claims = def_claims,
    .create = def_create,
    .destroy = def_destroy,
    .header = png_header,
    .scaled_size = NULL,
    .region = png_region,
    .truncated = def_truncated,
    .trim = def_trim,
    .user = NULL,
};
