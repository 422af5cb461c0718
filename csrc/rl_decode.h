/*
 * rl_decode.h - JPEG headers and region decodes with the libjpeg API.
 *
 * rl_decode.c is the only file that includes jpeglib.h, and the only one
 * that uses setjmp: every function here catches libjpeg's errors itself and
 * returns a status with libjpeg's message, so callers never see a longjmp.
 *
 * A decoder is owned by one thread at a time (the pool gives each worker
 * its own). Use: rl_decode_header(), then any number of
 * rl_decode_scaled_size() calls, then at most one rl_decode_region(), all on
 * the same bytes, which must stay valid throughout.
 */
#ifndef RL_DECODE_H
#define RL_DECODE_H

#include "rl.h"

typedef struct rl_decoder rl_decoder;

typedef struct rl_jpeg_header {
    int width, height;
    int components;   /* 1 gray, 3 YCbCr/RGB, 4 CMYK/YCCK */
    bool progressive;
} rl_jpeg_header;

/*
 * Decoded rows of a region, in RGBX (4 bytes a pixel, the last unused),
 * owned by the decoder and valid until its next call. Row r (0 <= r < h) is image row y0 + r, and its first pixel is
 * image column x0; x0 and w may be wider than asked, because libjpeg aligns
 * crops to iMCU columns.
 */
typedef struct rl_region {
    const uint8_t *data;
    size_t stride;
    int x0, y0, w, h;
    int full_w, full_h; /* the size of the (scaled) image */
} rl_region;

/* Returns a new decoder, or NULL when out of memory. */
rl_decoder *rl_decoder_create(void);

/* Frees the decoder. Accepts NULL. */
void rl_decoder_destroy(rl_decoder *d);

/*
 * Reads the header of the JPEG in data[0..len). Returns 0; RL_EFORMAT when
 * the bytes are not a JPEG; RL_EDECODE when the header is corrupt; or
 * RL_ETOOBIG when width * height > lim->max_pixels. On failure msg
 * (RL_MSG_MAX bytes) says why. Never allocates pixel memory.
 */
int rl_decode_header(rl_decoder *d, const uint8_t *data, size_t len,
                     const rl_limits *lim, rl_jpeg_header *hdr, char *msg);

/* The image size when decoded at scale m/8 (1 <= m <= 16). */
void rl_decode_scaled_size(rl_decoder *d, int m, int *w, int *h);

/*
 * Decodes columns [x0, x0 + w) and rows [y0, y0 + h) of the image scaled by
 * m/8 into RGBX: only the iMCU columns that hold the region are decoded, the
 * rows above it are skipped and decoding stops after its last row. Grayscale
 * is replicated; CMYK and YCCK are converted as Pillow's convert("RGB")
 * does. Returns 0 with *out filled; RL_EDECODE with libjpeg's message;
 * RL_ETRUNCATED when the data ends early and !lim->allow_truncated;
 * RL_ETOOBIG past lim->max_scans progressive scans; -ENOMEM.
 */
int rl_decode_region(rl_decoder *d, int m, int x0, int y0, int w, int h,
                     const rl_limits *lim, rl_region *out, char *msg);

/* Whether the last image decoded by d ended early and was accepted
 * (lim->allow_truncated): libjpeg then fills the missing rows with grey. */
bool rl_decode_was_truncated(const rl_decoder *d);

/* The libjpeg-turbo version this module was built against ("2.1.5"). */
const char *rl_decode_libjpeg_version(void);

#endif /* RL_DECODE_H */
