/*
 * core/sample.h - one sample through the per-sample stages: its bytes are
 * decoded (decode/), cropped and resized (core/plan.h, place/), augmented
 * (augment/) and stored into its place in the batch slot.
 *
 * This is the entry point the pipeline's workers, the tools of the Python
 * module and the fuzzer share. Only the source region the transform keeps
 * is decoded, at the smallest DCT scale (1/8, 1/4, 1/2 or 1) that still
 * leaves it at least three times the output size, when the decoder can
 * scale: a smaller margin loses the fidelity promised (>= 35 dB against
 * torchvision) on line drawings, screenshots and fine textures.
 */
#ifndef RL_SAMPLE_H
#define RL_SAMPLE_H

#include "augment/augment.h"
#include "decode/decode.h"
#include "place/place.h"
#include "rl.h"

/* What every sample of a pipeline shares. */
typedef struct rl_sample_spec {
    rl_transform transform;
    rl_limits limits;
    rl_augment augment; /* n = 0: no ops */
    uint64_t seed;
} rl_sample_spec;

/* One thread's decoders and scratch memory. */
typedef struct rl_sample_ctx rl_sample_ctx;

/* Returns a context for the decoders of `set`, or NULL when out of memory. */
rl_sample_ctx *rl_sample_ctx_create(const rl_decoders *set);

/* Frees the context. Accepts NULL. */
void rl_sample_ctx_destroy(rl_sample_ctx *c);

/* How a sample went, beyond its status. */
typedef struct rl_sample_note {
    int decoder;    /* position in the decoder set of the one used, or -1 */
    bool truncated; /* decoded although truncated (allow_truncated) */
} rl_sample_note;

/*
 * Decodes data[0..len) as sample `key` of `epoch` into the out_h x out_w
 * image at dst. Returns 0 or a decoder's status (decode/decode.h) with msg
 * (RL_MSG_MAX bytes) set; on failure dst's content is unspecified. May be
 * called without the GIL; c belongs to the calling thread.
 */
int rl_sample_run(rl_sample_ctx *c, const rl_sample_spec *spec,
                  const uint8_t *data, size_t len, int64_t epoch, int64_t key,
                  const rl_dst *dst, rl_sample_note *note, char *msg);

/*
 * Decodes a whole JPEG, PNG or WebP (the native decoders) into a malloc'd
 * RGB buffer of *h rows of *w * 3 bytes, which the caller frees. Same statuses as rl_sample_run(). For the
 * module's decode() tool and the tests.
 */
int rl_sample_decode_full(const uint8_t *data, size_t len, const rl_limits *lim,
                          uint8_t **out, int *w, int *h, char *msg);

/* The DCT scale m (of m/8) chosen for a box of bw x bh source pixels that
 * becomes vw x vh output pixels, for an image of width x height: the
 * smallest of 1, 2 and 4 that leaves the scaled box at least three times
 * vw x vh, else 8 (no scaling). */
int rl_sample_pick_scale(int width, int height, double bw, double bh, int vw,
                         int vh);

#endif /* RL_SAMPLE_H */
