/* test_recipes.c - the recipes of docs/ARCHITECTURE.md, one test each: a
 * toy stage is added here exactly as its header's contract says, and a real
 * pipeline runs it end to end.
 *   "Adding a source" (source/source.h): samples are JPEGs made in memory,
 *     each batch's reads complete in reverse order; the batches equal the
 *     same samples through rl_memory_source_create.
 *   "Adding a decoder" (decode/decode.h): "SOLID w h r g b" is a constant
 *     image; registered after libjpeg-turbo it decodes to exactly its
 *     colour, and the report and stats count it as a fallback.
 *   "Adding an augmentation op" (augment/augment.h): invert, with a
 *     probability drawn from the sample's own stream; p = 1 gives 255 - v of
 *     the pipeline without it, p = 0 the same bytes, and the draws are a
 *     pure function of (seed, epoch, key).
 *   "Adding a view-level feature" (core/sample.h): a sample of two views,
 *     decoded once; each view writes its own region in its own dtype and
 *     layout, view 0 as a one-view pipeline writes it, each view with
 *     randomness of its own. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "recipes.h"

uint8_t *jpegs[NJPEG];
size_t jpeg_lens[NJPEG];
rl_view recipe_view;

/* The samples through the memory source; the pipeline owns it. */
rl_source *memory_source(void)
{
    rl_source *src = rl_memory_source_create((const uint8_t *const *)jpegs,
                                             jpeg_lens, NULL, NJPEG);
    CHECK(src != NULL);
    return src;
}

/* RandomResizedCrop with flips: every sample's pixels depend on its key. */
rl_pipeline_config config(int threads, rl_source *src)
{
    rl_pipeline_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    memset(&recipe_view, 0, sizeof(recipe_view));
    cfg.nthreads = threads;
    cfg.source = src;
    cfg.sample.seed = 1234;
    cfg.sample.views = &recipe_view;
    cfg.sample.nviews = 1;
    cfg.sample.limits.max_pixels = RL_DEFAULT_MAX_PIXELS;
    cfg.sample.limits.max_scans = RL_DEFAULT_MAX_SCANS;
    cfg.sample.limits.max_file_bytes = RL_DEFAULT_MAX_FILE_BYTES;
    rl_transform *t = &recipe_view.transform;
    t->kind = RL_T_RANDOM_CROP;
    t->out_w = OUT_W;
    t->out_h = OUT_H;
    t->scale_lo = 0.08;
    t->scale_hi = 1.0;
    t->ratio_lo = 0.75;
    t->ratio_hi = 4.0 / 3.0;
    t->flip_p = 0.5;
    recipe_view.place.layout = RL_LAYOUT_NCHW;
    return cfg;
}

/* Creates a pipeline from cfg, runs samples 0..n-1 (keys = ids) of
 * `epoch` in batches of bs into out, and destroys it. */
void run_all(const rl_pipeline_config *cfg, int n, int bs, int64_t epoch,
             uint8_t *out, rl_pipeline_stats *st)
{
    char msg[RL_MSG_MAX];
    rl_pipeline *p = rl_pipeline_create(cfg, NULL, msg);
    if (p == NULL) {
        fprintf(stderr, "rl_pipeline_create: %s\n", msg);
    }
    CHECK(p != NULL);
    size_t sb = rl_pipeline_sample_bytes(p);
    for (int first = 0; first < n; first += bs) {
        int64_t ids[64];
        int m = n - first < bs ? n - first : bs;
        for (int k = 0; k < m; k++) {
            ids[k] = first + k;
        }
        CHECK_EQ(rl_pipeline_submit(p, ids, ids, m, epoch, NULL, NULL), 0);
    }
    for (int got = 0; got < n;) {
        rl_slot *s;
        rl_batch_report rep;
        CHECK_EQ(rl_pipeline_next(p, -1, 0, &s, &rep), 0);
        CHECK_EQ(rep.n_replaced, 0);
        rl_batch_report_free(&rep);
        memcpy(out + (size_t)got * sb, rl_slot_data(s),
               (size_t)rl_slot_count(s) * sb);
        got += rl_slot_count(s);
        rl_slot_release(s);
    }
    if (st != NULL) {
        rl_pipeline_stats_get(p, st);
    }
    rl_pipeline_destroy(p);
}

int main(void)
{
    for (int i = 0; i < NJPEG; i++) {
        jpegs[i] = make_jpeg(30 + i * 11, 26 + (i * 17) % 70, i, &jpeg_lens[i]);
    }
    rl_test_checks += test_source();
    rl_test_checks += test_decoder();
    rl_test_checks += test_op();
    rl_test_checks += test_views();
    for (int i = 0; i < NJPEG; i++) {
        free(jpegs[i]);
    }
    PASS("test_recipes");
}
