/*
 * decode/png_index.c - a segmentation PNG's indices or grey values, as
 * stored (decode/png_index.h).
 *
 * DESIGN: the file is opened as decode/png.c opens an image (the chunk
 * walk, then libspng's context, opened here for both: decode/png_spng.h)
 * but its rows come in the file's own
 * format (SPNG_FMT_RAW) and are only unpacked to a byte a pixel, never
 * converted: no palette lookup, no scaling.
 */
#include "decode/png_index.h"
#include "decode/png_rows.h"
#include "decode/png_spng.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const uint8_t signature[8] = {0x89, 'P',  'N',  'G',
                                     '\r', '\n', 0x1A, '\n'};

int rl__png_open(spng_ctx **ctx, const uint8_t *data, size_t len,
                 struct spng_ihdr *ihdr)
{
    *ctx = spng_ctx_new(SPNG_CTX_IGNORE_ADLER32);
    if (*ctx == NULL) {
        return SPNG_EMEM;
    }
    /* Critical chunks' CRCs: checked by rl__png_walk_chunks, the whole
     * file's; an ancillary chunk with a wrong CRC is dropped (libspng's
     * default, and Pillow's: it ignores ancillary chunks it cannot read). */
    int err = spng_set_crc_action(*ctx, SPNG_CRC_USE, SPNG_CRC_DISCARD);
    if (err == 0) {
        err =
            spng_set_chunk_limits(*ctx, RL_PNG_CHUNK_CACHE, RL_PNG_CHUNK_CACHE);
    }
    if (err == 0) {
        err = spng_set_png_buffer(*ctx, data, len);
    }
    if (err == 0) {
        err = spng_get_ihdr(*ctx, ihdr);
    }
    return err;
}

int rl__png_status(int err, const char *what, char *msg)
{
    bool eof = err == SPNG_EOF;
    snprintf(msg, RL_MSG_MAX, "PNG %s: %s%s", what, spng_strerror(err),
             eof ? " (truncated file)" : "");
    if (err == SPNG_EMEM) {
        return -ENOMEM;
    }
    if (err == SPNG_ECHUNK_LIMITS) {
        return RL_ETOOBIG;
    }
    return eof ? RL_ETRUNCATED : RL_EDECODE;
}

static const char *colour_name(int type)
{
    switch (type) {
    case SPNG_COLOR_TYPE_GRAYSCALE:
        return "greyscale";
    case SPNG_COLOR_TYPE_TRUECOLOR:
        return "RGB";
    case SPNG_COLOR_TYPE_INDEXED:
        return "palette";
    case SPNG_COLOR_TYPE_GRAYSCALE_ALPHA:
        return "greyscale+alpha";
    default:
        return "RGBA";
    }
}

/* libspng's error as -EINVAL or -ENOMEM, msg saying what. */
static int failed(int err, const char *what, char *msg)
{
    return rl__png_status(err, what, msg) == -ENOMEM ? -ENOMEM : -EINVAL;
}

/* Opens data in *ctx (the caller frees it) after the checks of
 * rl_png_index_size. */
static int open_mask(const uint8_t *data, size_t len, spng_ctx **ctx,
                     struct spng_ihdr *ihdr, char *msg)
{
    *ctx = NULL;
    if (len < sizeof(signature) || memcmp(data, signature, 8) != 0) {
        snprintf(msg, RL_MSG_MAX,
                 "not a PNG file (%zu bytes, no PNG signature)", len);
        return -EINVAL;
    }
    bool cut;
    size_t cut_at;
    if (rl__png_walk_chunks(data, len, &cut, &cut_at, msg) != 0) {
        return -EINVAL;
    }
    if (cut) {
        snprintf(msg, RL_MSG_MAX,
                 "PNG data ends at byte %zu, before its IEND chunk "
                 "(truncated file)",
                 len);
        return -EINVAL;
    }
    int err = rl__png_open(ctx, data, len, ihdr);
    if (err != 0) {
        return failed(err, "header", msg);
    }
    int type = ihdr->color_type, depth = ihdr->bit_depth;
    if (!(type == SPNG_COLOR_TYPE_INDEXED ||
          (type == SPNG_COLOR_TYPE_GRAYSCALE && depth == 8))) {
        snprintf(msg, RL_MSG_MAX,
                 "PNG is %s (colour type %d), %d-bit: a mask PNG must be a "
                 "palette image (colour type 3, 1/2/4/8-bit: its indices) "
                 "or 8-bit greyscale (colour type 0: its values)",
                 colour_name(type), type, depth);
        return -EINVAL;
    }
    return 0;
}

int rl_png_index_size(const uint8_t *data, size_t len, int *height, int *width,
                      char msg[RL_MSG_MAX])
{
    spng_ctx *ctx;
    struct spng_ihdr ihdr;
    int rc = open_mask(data, len, &ctx, &ihdr, msg);
    spng_ctx_free(ctx);
    if (rc == 0) {
        *height = (int)ihdr.height;
        *width = (int)ihdr.width;
    }
    return rc;
}

/* Row `in` (the file's format, `depth` bits a sample) as w bytes. */
static void unpack(const uint8_t *in, int depth, int w, uint8_t *out)
{
    if (depth == 8) {
        memcpy(out, in, (size_t)w);
        return;
    }
    unsigned mask = (1u << depth) - 1;
    for (int x = 0; x < w; x++) {
        size_t bit = (size_t)x * (size_t)depth;
        out[x] =
            (uint8_t)((in[bit >> 3] >> (8 - depth - (int)(bit & 7))) & mask);
    }
}

/* What decoding one file holds, freed together. */
typedef struct job {
    const int32_t *slot;
    uint8_t *rows;
    size_t stride;
    int h, w, depth;
    size_t rowbytes;
    uint8_t *row; /* one row as in the file */
    uint8_t *raw; /* interlaced: the kept rows as in the file, by slot */
} job;

/* The fast path (decode/png_rows.h): 0, RL_PNG_DECLINED or -ENOMEM. */
static int whole_stream(job *j, const uint8_t *data, size_t len)
{
    int last = -1;
    for (int y = 0; y < j->h; y++) {
        if (j->slot[y] >= 0) {
            last = y;
        }
    }
    rl_png_rows r = {0};
    const uint8_t *rows;
    int rc = rl__png_rows_decode(&r, data, len, j->rowbytes, 1, j->h, last + 1,
                                 &rows);
    for (int y = 0; rc == 0 && y <= last; y++) {
        if (j->slot[y] >= 0) {
            unpack(rows + (size_t)y * (j->rowbytes + 1), j->depth, j->w,
                   j->rows + (size_t)j->slot[y] * j->stride);
        }
    }
    rl__png_rows_exit(&r);
    return rc;
}

/* libspng's path: every row decoded, the kept ones unpacked. */
static int row_by_row(job *j, spng_ctx *ctx, bool interlaced, char *msg)
{
    int err =
        spng_decode_image(ctx, NULL, 0, SPNG_FMT_RAW, SPNG_DECODE_PROGRESSIVE);
    while (err == 0) {
        struct spng_row_info ri;
        err = spng_get_row_info(ctx, &ri);
        if (err != 0) {
            break;
        }
        int32_t k = j->slot[ri.row_num];
        uint8_t *dst =
            interlaced && k >= 0 ? j->raw + (size_t)k * j->rowbytes : j->row;
        err = spng_decode_row(ctx, dst, j->rowbytes);
        if ((err == 0 || err == SPNG_EOI) && !interlaced && k >= 0) {
            unpack(dst, j->depth, j->w, j->rows + (size_t)k * j->stride);
        }
    }
    if (err != SPNG_EOI) {
        return failed(err, "data", msg);
    }
    for (int y = 0; interlaced && y < j->h; y++) {
        int32_t k = j->slot[y];
        if (k >= 0) {
            unpack(j->raw + (size_t)k * j->rowbytes, j->depth, j->w,
                   j->rows + (size_t)k * j->stride);
        }
    }
    return 0;
}

int rl_png_index_rows(const uint8_t *data, size_t len, const int32_t *slot,
                      uint8_t *rows, size_t stride, char msg[RL_MSG_MAX])
{
    spng_ctx *ctx;
    struct spng_ihdr ihdr;
    int rc = open_mask(data, len, &ctx, &ihdr, msg);
    job j = {.slot = slot, .rows = rows, .stride = stride};
    size_t size = 0;
    if (rc == 0) {
        int err = spng_decoded_image_size(ctx, SPNG_FMT_RAW, &size);
        rc = err != 0 ? failed(err, "header", msg) : 0;
    }
    if (rc != 0) {
        goto out;
    }
    j.h = (int)ihdr.height;
    j.w = (int)ihdr.width;
    j.depth = ihdr.bit_depth;
    j.rowbytes = size / (size_t)j.h;
    bool interlaced = ihdr.interlace_method != 0;
    if (!interlaced && (j.rowbytes + 1) * (size_t)j.h <= RL_PNG_ROWS_MAX) {
        rc = whole_stream(&j, data, len);
        if (rc != RL_PNG_DECLINED) {
            goto out; /* done, or out of memory */
        }
    }
    size_t kept = 0;
    for (int y = 0; interlaced && y < j.h; y++) {
        kept += slot[y] >= 0;
    }
    j.row = malloc(j.rowbytes);
    j.raw = calloc(kept + 1, j.rowbytes);
    rc = j.row != NULL && j.raw != NULL ? row_by_row(&j, ctx, interlaced, msg)
                                        : -ENOMEM;
out:
    if (rc == -ENOMEM) {
        snprintf(msg, RL_MSG_MAX, "out of memory decoding a PNG mask");
    }
    free(j.row);
    free(j.raw);
    spng_ctx_free(ctx);
    return rc;
}
