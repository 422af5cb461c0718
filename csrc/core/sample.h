/*
 * core/sample.h - one sample through the per-sample stages: its bytes are
 * decoded once (decode/), then each of its views (one output chain:
 * geometry -> ops -> store) is cropped and resized (core/plan.h, place/),
 * augmented (augment/) and stored into its own place in the batch slot.
 *
 * This is the entry point the pipeline's workers, the tools of the Python
 * module and the fuzzer share. Only the source region the views keep is
 * decoded, at the smallest DCT scale (1/8, 1/4, 1/2 or 1) that still
 * leaves every view's box at least three times its output size, when the
 * decoder can scale: a smaller margin loses the fidelity promised (>= 35 dB
 * against torchvision) on line drawings, screenshots and fine textures.
 */
#ifndef RL_SAMPLE_H
#define RL_SAMPLE_H

#include "augment/augment.h"
#include "decode/decode.h"
#include "place/place.h"
#include "rl.h"
#include "rng.h"

/*
 * One output chain of a sample (a view): its geometry (the transform,
 * planned per sample from the view's own random stream), its augmentation
 * ops, and its store (the dtype, normalisation and layout of its place in
 * the slot; its size is the transform's). A sample is read and decoded once
 * and feeds each of its views in turn; each view writes its own region of
 * the slot (place.h's rl_place_view_offset). View v draws from its own part
 * of the sample's streams (rng.h's rl_rng_view): augment.view must be v.
 */
typedef struct rl_view {
    rl_transform transform;
    rl_augment augment;    /* n = 0: no ops */
    rl_place_config place; /* out_w, out_h: the transform's */
} rl_view;

/* What every sample of a pipeline shares: limits, seed, and its views
 * (1 .. RL_MAX_VIEWS; views[v] is view v; borrowed). */
typedef struct rl_sample_spec {
    rl_limits limits;
    uint64_t seed;
    const rl_view *views;
    int nviews;
} rl_sample_spec;

/*
 * Checks views[0 .. n) where they are configured: 1 .. RL_MAX_VIEWS views,
 * each transform (rl_transform_check), each output dtype, each chain's
 * view index. Returns 0, or RL_ECONFIG with msg naming the view.
 */
int rl_sample_views_check(const rl_view *views, int n, char *msg);

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
    int decodes;    /* pixel decodes run: 1 once the region was decoded */
    int views;      /* views written in full */
    /* What the thread's decoder states hold now less what they held after
     * its previous sample (decode.h's rl_decode_buf): summed over the
     * samples of every thread, the bytes the decode threads keep. */
    int64_t held_change;
} rl_sample_note;

/*
 * Decodes data[0..len) as sample `key` of `epoch` once, then writes each
 * view v of spec into dst[v] (an out_h x out_w image of that view). Only
 * the region covering every view's box is decoded, at the finest DCT scale
 * any view needs. Returns 0 or a decoder's status (decode/decode.h) with
 * msg (RL_MSG_MAX bytes) set; on failure the dsts' content is unspecified.
 * Whatever the outcome, the decoder states are trimmed after it
 * (rl_decode_ctx_trim). May be called without the GIL; c belongs to the
 * calling thread.
 */
int rl_sample_run(rl_sample_ctx *c, const rl_sample_spec *spec,
                  const uint8_t *data, size_t len, int64_t epoch, int64_t key,
                  const rl_dst *dst, rl_sample_note *note, char *msg);

/*
 * Where a varying view's sample goes (rl_transform.varying): its size is
 * known only once its header is read and its plan made, so rl_sample_run_to
 * asks reserve for the destination of an out_w x out_h image of view v,
 * then writes it there. reserve returns 0 with *dst filled, or -ENOMEM
 * with msg set (the sample then fails with it).
 */
typedef struct rl_sample_sink {
    int (*reserve)(void *arg, int v, int out_w, int out_h, rl_dst *dst,
                   char *msg);
    void *arg;
    /* The sample's nboxes boxes its plans read (rl_plan_make_boxes: an IoU
     * crop, whose output varies too), or NULL. */
    const double *boxes;
    size_t nboxes;
} rl_sample_sink;

/* rl_sample_run, with the varying views' destinations asked of sink (NULL
 * when no view varies: a varying view without one is RL_EINTERNAL); dst[v]
 * is unused for those views. */
int rl_sample_run_to(rl_sample_ctx *c, const rl_sample_spec *spec,
                     const uint8_t *data, size_t len, int64_t epoch,
                     int64_t key, const rl_dst *dst, const rl_sample_sink *sink,
                     rl_sample_note *note, char *msg);

/*
 * Decodes a JPEG, PNG or WebP (the native decoders) into a malloc'd RGB
 * buffer of *h rows of *w * 3 bytes, which the caller frees: the whole
 * image, or with box = {left, top, width, height} that region alone, the
 * way a pipeline decodes a crop (-EINVAL if the box is not inside the
 * image). Same statuses as rl_sample_run(). For the module's decode() tool,
 * the tests and the benchmarks.
 */
int rl_sample_decode_full(const uint8_t *data, size_t len, const rl_limits *lim,
                          const int *box, uint8_t **out, int *w, int *h,
                          char *msg);

/* The DCT scale m (of m/8) chosen for a box of bw x bh source pixels that
 * becomes vw x vh output pixels with `filter`, for an image of width x
 * height: the smallest of 1, 2 and 4 that leaves the scaled box at least
 * three times vw x vh, else 8 (no scaling). Always 8 for nearest, whose
 * promise is the source's own pixels, which a scaled IDCT does not give. */
int rl_sample_pick_scale(rl_filter filter, int width, int height, double bw,
                         double bh, int vw, int vh);

/* The DCT scale a view with plan p needs on an image of width x height:
 * rl_sample_pick_scale's for its box, or 8 under a trim (TrimBorder),
 * whose border would not fall on whole pixels of a scaled image. */
int rl_sample_plan_scale(const rl_plan *p, int width, int height);

#endif /* RL_SAMPLE_H */
