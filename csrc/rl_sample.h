/*
 * rl_sample.h - one sample from JPEG bytes to its place in a batch: the
 * decode entry point used by the pipeline, the tests and the fuzzer.
 */
#ifndef RL_SAMPLE_H
#define RL_SAMPLE_H

#include "rl.h"
#include "rl_decode.h"
#include "rl_resize.h"

/*
 * Decodes data[0..len) with the fused transform t for sample (seed, epoch,
 * index) into the t->out_h x t->out_w RGB image at dst. Only the source
 * region the transform keeps is decoded, at the smallest DCT scale (1/8,
 * 1/4, 1/2 or 1) that still leaves it at least the output size. Returns 0 or a status of
 * rl_decode_region()/rl_decode_header() with msg (RL_MSG_MAX bytes) set; on
 * failure dst's content is unspecified. May be called without the GIL.
 */
int rl_sample_decode(rl_decoder *d, const uint8_t *data, size_t len,
                     const rl_transform *t, const rl_limits *lim,
                     uint64_t seed, int64_t epoch, int64_t index,
                     const rl_dst *dst, char *msg);

/*
 * Decodes the whole image into a malloc'd RGB buffer of *h rows of *w * 3
 * bytes, which the caller frees. Same statuses as rl_sample_decode().
 */
int rl_sample_decode_full(rl_decoder *d, const uint8_t *data, size_t len,
                          const rl_limits *lim, uint8_t **out, int *w, int *h,
                          char *msg);

/*
 * The same transform applied to an image decoded elsewhere (h rows of w
 * packed RGB pixels): the fallback for files that are not JPEG. Returns 0,
 * -ENOMEM or RL_EINTERNAL with msg.
 */
int rl_sample_place_rgb(const uint8_t *rgb, int w, int h,
                        const rl_transform *t, uint64_t seed, int64_t epoch,
                        int64_t index, const rl_dst *dst, char *msg);

/* The DCT scale m (of m/8) chosen for a box of bw x bh source pixels that
 * becomes vw x vh output pixels, for an image of width x height. */
int rl_sample_pick_scale(int width, int height, double bw, double bh, int vw,
                         int vh);

#endif /* RL_SAMPLE_H */
