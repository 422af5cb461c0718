/*
 * decode/decode.h - the decode stage: bytes -> pixels of a region.
 *
 * A decoder is a table entry (rl_decoder_def): whether it claims some bytes
 * (from their first bytes), a per-thread state, a header read giving the
 * image size, and a region decode into RGBX pixels (rl.h's rl_pixels). A
 * pipeline tries its decoders in order and the first that claims the bytes
 * decodes them: libjpeg-turbo for JPEG (decode/jpeg.c), then optionally a
 * fallback registered at run time that claims anything (the Python binding
 * registers Pillow for PNG, WebP and the like, decoding the bytes the source
 * already read). A new decoder is one file defining an rl_decoder_def (see
 * docs/ARCHITECTURE.md, "Adding a decoder").
 *
 * Contract of a decoder, for one thread's state: header(), then at most one
 * region(), on the same bytes, which stay valid throughout. A decoder that
 * can decode at a reduced scale (JPEG's DCT scaling) or only some columns
 * and rows says so with scaled_size and by honouring the region asked; one
 * that cannot sets scaled_size to NULL and may return more than the region
 * (the whole image): the place stage reads only what it needs. Statuses:
 * RL_EFORMAT (not this format), RL_EDECODE (corrupt), RL_ETRUNCATED (ends
 * early, when not allowed), RL_ETOOBIG (over a limit), -ENOMEM, with msg
 * (RL_MSG_MAX bytes) saying why.
 *
 * What a region's status promises of the rest of the file. For JPEG and
 * PNG the status is the whole image's, whatever the region: the outcome
 * never depends on the crop. For WebP it is the whole image's for
 * truncation only. In detail:
 * - truncation, every format: a file cut past the region's last row fails
 *   too, judged from the bytes before any row is decoded (JPEG: a one-scan
 *   file's markers after its entropy-coded data, read up to EOI; PNG: the
 *   chunk list up to IEND; WebP: the RIFF size);
 * - JPEG: a file of several scans is read whole; in a file of one scan,
 *   what follows the entropy-coded data is read from the bytes up to EOI
 *   as libjpeg reads it (a marker it refuses fails whatever the region),
 *   and damage inside that data is only ever a warning of libjpeg's (a
 *   bad Huffman code, a lost restart marker), ignored whatever the region:
 *   the rows a region skips cannot change the outcome;
 * - PNG: the critical chunks' CRCs are checked from the bytes, and every
 *   row of the image is inflated and its filter type checked, the rows
 *   below the region too (decode/png.c);
 * - WebP: not damage inside a bitstream whose sizes are right. Its
 *   bitstreams carry no checksum, and libwebp decodes a region's rows
 *   only (lossy: down to the region's last macroblock row): damage below
 *   them fails the whole image, a "bitstream error" or "not enough data",
 *   while a region that ends above it decodes.
 *
 * States are owned by one thread at a time; the functions may be called
 * without the GIL and never longjmp out.
 */
#ifndef RL_DECODE_H
#define RL_DECODE_H

#include "rl.h"

typedef struct rl_image_info {
    int width, height;
    int components; /* 1 gray, 3 colour, 4 CMYK/YCCK */
    bool progressive;
} rl_image_info;

/* What a decoder decodes, for the per-format counts of a pipeline's stats.
 * RL_FORMAT_OTHER (0, what a table that does not say gets) is a fallback
 * registered at run time: Pillow, counted as a fallback decode. */
typedef enum rl_format {
    RL_FORMAT_OTHER = 0,
    RL_FORMAT_JPEG,
    RL_FORMAT_PNG,
    RL_FORMAT_WEBP,
    RL_FORMATS /* how many */
} rl_format;

typedef struct rl_decoder_def rl_decoder_def;

struct rl_decoder_def {
    const char *name; /* "jpeg", "pillow"... */
    rl_format format;
    /* True when this decoder reads data. */
    bool (*claims)(const rl_decoder_def *def, const uint8_t *data, size_t len);
    /* A state for one thread, or NULL when out of memory. */
    void *(*create)(const rl_decoder_def *def);
    void (*destroy)(void *state);
    /* Reads the size; refuses images over lim->max_pixels (RL_ETOOBIG)
     * before allocating pixel memory (rl_decode_check_pixels). */
    int (*header)(void *state, const uint8_t *data, size_t len,
                  const rl_limits *lim, rl_image_info *info, char *msg);
    /* The image size at scale m/8 (m = 1, 2, 4, 8); NULL: full size only. */
    void (*scaled_size)(void *state, int m, int *w, int *h);
    /* Decodes at least columns [x0, x0 + w) and rows [y0, y0 + h) of the
     * image at scale m/8 into *out, memory owned by the state and valid
     * until its next call. */
    int (*region)(void *state, int m, int x0, int y0, int w, int h,
                  const rl_limits *lim, rl_pixels *out, char *msg);
    /* Whether the last image ended early and was accepted
     * (lim->allow_truncated); NULL: never. */
    bool (*truncated)(const void *state);
    /* Between two images, once the caller is done with the last region's
     * pixels: gives back what the state's buffers hold beyond what its
     * recent images needed (rl_decode_buf_trim, with roll) and returns the
     * bytes they hold then. NULL: the state keeps nothing that grows with
     * the images. */
    size_t (*trim)(void *state, bool roll);
    /* Decoders registered at run time carry their own data here. */
    void *user;
};

/* libjpeg-turbo (decode/jpeg.c). */
extern const rl_decoder_def rl_jpeg_decoder;

/* libspng (decode/png.c). */
extern const rl_decoder_def rl_png_decoder;

/* libwebp (decode/webp.c). */
extern const rl_decoder_def rl_webp_decoder;

/* The libjpeg-turbo version this module was built against ("2.1.5"). */
const char *rl_decode_libjpeg_version(void);

/*
 * The one check of the pixel limit, for every decoder's header(): returns
 * 0 for an image of width x height within lim->max_pixels, else
 * RL_ETOOBIG with msg (RL_MSG_MAX bytes) saying so in the same words
 * whatever the format, so a refusal reads the same for a JPEG and a PNG.
 */
int rl_decode_check_pixels(uint64_t width, uint64_t height,
                           const rl_limits *lim, char *msg);

/*
 * The bytes libjpeg may hold for one image on one thread under lim:
 * lim->max_decode_bytes when set, else RL_DECODE_BYTES_PER_PIXEL x
 * max_pixels + RL_DECODE_SLACK_BYTES (rl.h says why), saturating. The JPEG
 * decoder gives it to libjpeg (max_memory_to_use), which checks a
 * progressive file's coefficient buffers against it before allocating
 * them; one over it is refused with RL_ETOOBIG.
 */
uint64_t rl_decode_memory_bound(const rl_limits *lim);

/*
 * A buffer of a decoder's state (a region's pixels, a PNG's rows...). It
 * grows to what an image needs and is kept for the next images, so that a
 * thread decoding images of similar sizes allocates once; but after an
 * outlier (one 8000x8000 photo among small ones: 256 MiB of RGBX) it is
 * given back, instead of staying with the thread for the pipeline's life.
 *
 * The policy (rl_decode_buf_trim, after each image of the thread): a
 * buffer of more than RL_DECODE_KEEP_BYTES that is over twice the most
 * any image asked of it in the last RL_DECODE_TRIM_IMAGES to twice that
 * many images of the thread (a high-water mark that forgets an image after
 * one to two windows) shrinks to that most, or is freed when it was not
 * used. Why these numbers:
 * - the common case never reallocates: the train recipe's crops vary in
 *   size by up to 12x between images (8% to 100% of the area), so the mark
 *   is the most over a window of images rather than the last image's
 *   need, and the buffer stays while its size is needed at all;
 * - RL_DECODE_KEEP_BYTES, 8 MiB, holds a 2-megapixel region in RGBX (the
 *   photos of ImageNet, COCO, most web-scraped sets are smaller), and what
 *   the floor keeps is bounded: a handful of buffers a thread;
 * - RL_DECODE_TRIM_IMAGES, 32: an outlier's memory is back after 32 to 64
 *   more images of its thread (a fraction of a second of decoding), while
 *   an image as large as it coming within that span reuses it;
 * - when big images come further apart, each one regrows the buffer: the
 *   cost is the first touch of its pages, 1.1 to 1.3 ms a MiB measured on
 *   the project's 2-core VM (page faults), of the order of decoding that
 *   MiB of RGBX (2 to 4 ms for JPEG): such an image costs up to about
 *   1.5x its decode, at most once a window, under 2% of the 32 or more
 *   images decoded between two of them.
 */
#define RL_DECODE_KEEP_BYTES ((size_t)8 << 20)
#define RL_DECODE_TRIM_IMAGES 32

typedef struct rl_decode_buf {
    uint8_t *data;
    size_t cap;         /* bytes allocated */
    size_t need;        /* the most reserved in the current window */
    size_t need_before; /* the most reserved in the window before */
} rl_decode_buf;

/* Makes b hold at least need bytes: 0, or -ENOMEM with b empty (its
 * memory freed, cap 0). Its contents are not kept when it grows: the
 * old memory is freed before the new is allocated, so no byte is copied
 * and the two are never held at once; a caller writes what it reserved
 * before reading it. Counts need in b's high-water mark. */
int rl_decode_buf_reserve(rl_decode_buf *b, size_t need);

/* After an image, once nothing points into b: applies the policy above
 * (roll: a window of RL_DECODE_TRIM_IMAGES images of the thread ended)
 * and returns the bytes b holds then. A shrink that fails keeps b as it
 * was. */
size_t rl_decode_buf_trim(rl_decode_buf *b, bool roll);

/* Frees b's memory and zeroes it; b itself is the caller's. */
void rl_decode_buf_exit(rl_decode_buf *b);

/* The decoders of a pipeline, tried in order. */
#define RL_MAX_DECODERS 8
typedef struct rl_decoders {
    const rl_decoder_def *defs[RL_MAX_DECODERS];
    int n;
} rl_decoders;

/*
 * Appends the native decoders (JPEG, PNG, WebP), in that order, to set:
 * returns 0, or RL_EINTERNAL when they do not fit (RL_MAX_DECODERS). A
 * pipeline lists them before any fallback.
 */
int rl_decode_add_native(rl_decoders *set);

/* True for a fallback registered at run time (format RL_FORMAT_OTHER). */
static inline bool rl_decoder_is_fallback(const rl_decoder_def *def)
{
    return def->format == RL_FORMAT_OTHER;
}

/* One thread's states of a set of decoders, each made on first use. */
typedef struct rl_decode_ctx rl_decode_ctx;

/* Returns a context for `set` (copied), or NULL when out of memory. */
rl_decode_ctx *rl_decode_ctx_create(const rl_decoders *set);

/* Frees the context and its states. Accepts NULL. */
void rl_decode_ctx_destroy(rl_decode_ctx *c);

/*
 * The first decoder of the set that claims data, and this thread's state
 * for it: returns 0; RL_EFORMAT with msg when none claims the bytes; or
 * -ENOMEM. *which is the decoder's position in the set.
 */
int rl_decode_pick(rl_decode_ctx *c, const uint8_t *data, size_t len,
                   const rl_decoder_def **def, void **state, int *which,
                   char *msg);

/*
 * After each image of the thread (decoded or not), once the caller is done
 * with its pixels: trims every state of c (rl_decoder_def.trim; a window
 * ends every RL_DECODE_TRIM_IMAGES calls, so a state whose format stopped
 * coming gives its memory back too) and returns the bytes they hold.
 */
size_t rl_decode_ctx_trim(rl_decode_ctx *c);

#endif /* RL_DECODE_H */
