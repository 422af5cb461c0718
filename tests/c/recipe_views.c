/* recipe_views.c - "Adding a view-level feature" (docs/ARCHITECTURE.md):
 * what a feature of a view relies on, checked through a real pipeline.
 * A sample of two views (rl_view: geometry -> ops -> store) is read and
 * decoded once; each view writes its own region of the slot, in its own
 * dtype and layout; view 0 is written as a one-view pipeline writes it;
 * a view's randomness is its own (rng.h's rl_rng_view), so two views of
 * the same transform differ where the transform is random. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "recipes.h"

/* The second view: Resize(10) + CenterCrop(8x8), with dtype and layout. */
static void small_view(rl_view *v, rl_dtype dtype, rl_layout layout)
{
    memset(v, 0, sizeof(*v));
    v->transform.kind = RL_T_RESIZE_CROP;
    v->transform.resize_short = 10;
    v->transform.out_w = 8;
    v->transform.out_h = 8;
    v->transform.ratio_lo = v->transform.ratio_hi = 1.0;
    v->place.dtype = dtype;
    v->place.layout = layout;
    for (int c = 0; c < 3; c++) {
        v->place.mul[c] = 1.0f / (255.0f * (0.2f + 0.01f * (float)c));
        v->place.add[c] = -0.5f + 0.1f * (float)c;
    }
}

/* Runs samples 0..NJPEG-1 (keys = ids) of epoch 1 in batches of bs and
 * gathers each view's samples, in order, into out[v]. */
static void run_views(const rl_pipeline_config *cfg, int bs, uint8_t *out[],
                      rl_pipeline_stats *st)
{
    char msg[RL_MSG_MAX];
    rl_pipeline *p = rl_pipeline_create(cfg, NULL, msg);
    CHECK(p != NULL);
    int nv;
    const rl_view *views = rl_pipeline_views(p, &nv);
    CHECK_EQ(nv, cfg->sample.nviews);
    rl_place_config places[RL_MAX_VIEWS];
    for (int v = 0; v < nv; v++) {
        places[v] = views[v].place;
    }
    for (int first = 0; first < NJPEG; first += bs) {
        int64_t ids[NJPEG];
        int m = NJPEG - first < bs ? NJPEG - first : bs;
        for (int k = 0; k < m; k++) {
            ids[k] = first + k;
        }
        CHECK_EQ(rl_pipeline_submit(p, ids, ids, m, 1, NULL, NULL), 0);
        rl_slot *s;
        rl_batch_report rep;
        CHECK_EQ(rl_pipeline_next(p, -1, 0, &s, &rep), 0);
        rl_batch_report_free(&rep);
        CHECK_EQ(rl_pipeline_batch_bytes(p, m),
                 rl_place_view_offset(places, nv, m, nv));
        for (int v = 0; v < nv; v++) {
            size_t at = rl_place_view_offset(places, nv, m, v);
            size_t sb = rl_place_sample_bytes(&places[v]);
            CHECK_EQ(at % RL_PLACE_VIEW_ALIGN, 0);
            memcpy(out[v] + (size_t)first * sb, rl_slot_data(s) + at,
                   (size_t)m * sb);
        }
        rl_slot_release(s);
    }
    rl_pipeline_stats_get(p, st);
    rl_pipeline_destroy(p);
}

int test_views(void)
{
    enum { SMALL = 8 * 8 * 3 };
    static uint8_t alone[NJPEG * SAMPLE_U8], a0[NJPEG * SAMPLE_U8];
    static uint8_t b0[NJPEG * SAMPLE_U8], twin[NJPEG * SAMPLE_U8];
    static uint8_t a1[NJPEG * SMALL];
    static float b1[NJPEG * SMALL];
    static rl_view views[2];
    rl_pipeline_stats st;

    /* View 0 alone: the recipes' RandomResizedCrop + flip, uint8 NCHW. */
    rl_pipeline_config cfg = config(2, memory_source());
    uint8_t *one[1] = {alone};
    run_views(&cfg, 5, one, &st);

    /* Two views: the same view 0, then a small one in uint8 NHWC. Its box
     * (the image's centre square) needs no finer DCT scale than view 0's,
     * so view 0's pixels are a one-view pipeline's. */
    views[0] = recipe_view;
    small_view(&views[1], RL_DTYPE_U8, RL_LAYOUT_NHWC);
    cfg = config(2, memory_source());
    cfg.sample.views = views;
    cfg.sample.nviews = 2;
    uint8_t *two[2] = {a0, a1};
    run_views(&cfg, 5, two, &st);
    CHECK(memcmp(a0, alone, sizeof(alone)) == 0);
    /* One read and one decode per sample, two views written. */
    CHECK_EQ(st.samples, NJPEG);
    CHECK_EQ(st.pixel_decodes, NJPEG);
    CHECK_EQ(st.views, 2 * NJPEG);

    /* The small view as float32 NCHW with its mul and add: the store's
     * conversion of the same 8-bit values, in its own region (aligned
     * after view 0's), the batch size mattering not (bs 4 vs 5). */
    small_view(&views[1], RL_DTYPE_F32, RL_LAYOUT_NCHW);
    cfg = config(3, memory_source());
    cfg.sample.views = views;
    cfg.sample.nviews = 2;
    uint8_t *mixed[2] = {b0, (uint8_t *)b1};
    run_views(&cfg, 4, mixed, &st);
    CHECK(memcmp(b0, alone, sizeof(alone)) == 0);
    const rl_place_config *pc = &views[1].place;
    for (int i = 0; i < NJPEG; i++) {
        for (int y = 0; y < 8; y++) {
            for (int x = 0; x < 8; x++) {
                for (int c = 0; c < 3; c++) {
                    uint8_t u = a1[i * SMALL + (y * 8 + x) * 3 + c];
                    volatile float scaled = (float)u * pc->mul[c];
                    float want = scaled + pc->add[c];
                    float got = b1[i * SMALL + c * 64 + y * 8 + x];
                    if (got != want) {
                        CHECK(got == want);
                    }
                }
            }
        }
    }

    /* Two views of one random transform: each draws its own crops and
     * flips, view 0 as before. */
    views[1] = recipe_view;
    cfg = config(2, memory_source());
    cfg.sample.views = views;
    cfg.sample.nviews = 2;
    uint8_t *same[2] = {a0, twin};
    run_views(&cfg, 6, same, &st);
    CHECK(memcmp(a0, alone, sizeof(alone)) == 0);
    int differ = 0;
    for (int i = 0; i < NJPEG; i++) {
        differ +=
            memcmp(twin + i * SAMPLE_U8, a0 + i * SAMPLE_U8, SAMPLE_U8) != 0;
    }
    CHECK(differ > NJPEG / 2);

    /* Too many views, or none, are refused where configured. */
    char msg[RL_MSG_MAX];
    cfg = config(1, memory_source());
    cfg.sample.nviews = RL_MAX_VIEWS + 1;
    CHECK(rl_pipeline_create(&cfg, NULL, msg) == NULL && strstr(msg, "views"));
    cfg = config(1, memory_source());
    cfg.sample.nviews = 0;
    CHECK(rl_pipeline_create(&cfg, NULL, msg) == NULL && strstr(msg, "views"));
    return atomic_load(&rl_test_checks); /* this file's checks */
}
