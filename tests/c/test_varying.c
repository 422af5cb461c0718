/*
 * test_varying.c - a varying pipeline (rl_transform.varying: each sample
 * its own size) without Python: every sample has its image's size and
 * pixels (flipped as its plan says) wherever it was placed, in the
 * arena (its bound arena_bytes exactly) or past it in a buffer of its
 * own (counted in past_arena), with any thread count; a
 * bad sample is replaced; a source op (RandomPhotometricDistort) changes
 * the whole image before the plan, image ops (affine, invert) each
 * sample after it, drawn on its own size; cancel and destroy with batches in
 * flight and a slot still held free everything (run under ASan by `make check
 * SANITIZE=address`, under TSan by test_c_units).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/pipeline.h"
#include "core/plan.h"
#include "augment/augment.h"
#include "core/sample.h"
#include "jpegmake.h"
#include "rng.h"

#define N 24

static uint8_t *data[N + 1];
static size_t len[N + 1];
static int width[N], height[N];

static rl_view view;
/* The pipelines' limits and the reference decode's: the defaults. */
static const rl_limits limits = {.max_pixels = RL_DEFAULT_MAX_PIXELS,
                                 .max_scans = RL_DEFAULT_MAX_SCANS,
                                 .max_file_bytes = RL_DEFAULT_MAX_FILE_BYTES};

static rl_pipeline_config config(int threads, size_t arena, int n)
{
    rl_pipeline_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    memset(&view, 0, sizeof(view));
    cfg.nthreads = threads;
    cfg.source =
        rl_memory_source_create((const uint8_t *const *)data, len, NULL, n);
    CHECK(cfg.source != NULL);
    cfg.sample.seed = 7;
    cfg.sample.views = &view;
    cfg.sample.nviews = 1;
    cfg.sample.limits = limits;
    cfg.arena_bytes = arena;
    view.place.layout = RL_LAYOUT_NCHW;
    view.transform.kind = RL_T_RESIZE_CROP;
    view.transform.varying = 1;
    view.transform.flip_p = 0.5;
    view.transform.ratio_lo = view.transform.ratio_hi = 1.0;
    return cfg;
}

/* full (w x h RGB) as the view's source ops change it for key. */
static void source_ops(uint8_t *full, int w, int h, int64_t key)
{
    double params[RL_AUGMENT_MAX_OPS * RL_OP_MAX_PARAMS];
    char msg[RL_MSG_MAX];
    rl_augment_draw(&view.augment, 7, 0, key, 0, 0, params);
    rl_image img = {full, w, h, (size_t)w * 3};
    CHECK_EQ(rl_augment_run_source(&view.augment, params, &img, msg), 0);
}

/* Sample id's pixels at position pos of s: its size, and its full decode
 * (changed by the view's source ops) flipped as the plan of (seed, epoch
 * 0, key) says. */
static void check_sample(rl_slot *s, int pos, int id, int64_t key)
{
    int w = 0, h = 0;
    const uint8_t *got = rl_slot_sample(s, pos, &w, &h);
    CHECK(got != NULL && (uintptr_t)got % RL_PLACE_VIEW_ALIGN == 0);
    CHECK_EQ(w, width[id]);
    CHECK_EQ(h, height[id]);
    uint8_t *full;
    int fw, fh;
    char msg[RL_MSG_MAX];
    CHECK_EQ(rl_sample_decode_full(data[id], len[id], &limits, NULL, &full, &fw,
                                   &fh, msg),
             0);
    if (rl_augment_source_ops(&view.augment) > 0) {
        source_ops(full, fw, fh, key);
    }
    rl_plan plan;
    CHECK_EQ(rl_plan_make(&view.transform, w, h, 7, 0, key, 0, &plan, msg), 0);
    uint8_t *want = malloc((size_t)w * h * 3);
    CHECK(want != NULL);
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++) {
            int sx = plan.flip ? w - 1 - x : x;
            memcpy(want + ((size_t)y * w + x) * 3,
                   full + ((size_t)y * w + sx) * 3, 3);
        }
    }
    if (rl_augment_image_ops(&view.augment) > 0) {
        /* The ops on the flipped image, drawn for this sample's size. */
        double params[RL_AUGMENT_MAX_OPS * RL_OP_MAX_PARAMS];
        rl_augment_draw(&view.augment, 7, 0, key, w, h, params);
        rl_image img = {want, w, h, (size_t)w * 3};
        CHECK_EQ(rl_augment_run(&view.augment, params, &img, msg), 0);
    }
    for (int c = 0; c < 3; c++) {
        for (int y = 0; y < h; y++) {
            for (int x = 0; x < w; x++) {
                if (got[((size_t)c * h + y) * w + x] !=
                    want[((size_t)y * w + x) * 3 + c]) {
                    CHECK(!"a pixel differs from the full decode");
                }
            }
        }
    }
    free(want);
    free(full);
}

/* The translate an affine op of the view draws for sample key of w x h
 * pixels: at most its fraction of that size (drawn per sample). */
static void check_translate(int w, int h, int64_t key)
{
    double params[RL_AUGMENT_MAX_OPS * RL_OP_MAX_PARAMS];
    rl_augment_draw(&view.augment, 7, 0, key, w, h, params);
    /* The affine op is the chain's last but one (the invert last). */
    const double *t = params + (view.augment.n - 2) * RL_OP_MAX_PARAMS + 1;
    CHECK(t[0] >= -0.4 * w - 0.5 && t[0] <= 0.4 * w + 0.5);
    CHECK(t[1] >= -0.4 * h - 0.5 && t[1] <= 0.4 * h + 0.5);
}

/* One epoch in batches of 5: every sample checked, the flips counted;
 * with_source: the view's chain is a photometric distort; with_ops: then
 * an affine op and an invert (image ops, each sample drawing and running
 * on its own size, the worker's image grown and shrunk as sizes come). */
static int run_ops(int threads, size_t arena, bool with_source, bool with_ops)
{
    char msg[RL_MSG_MAX];
    rl_pipeline_config cfg = config(threads, arena, N);
    if (with_source) {
        const double args[9] = {0.5, 1.5, 0.2, 1.8, 0.2, 1.8, -0.3, 0.3, 0.8};
        CHECK_EQ(rl_augment_add(&view.augment,
                                rl_op_find("photometric_distort"), args, 9,
                                msg),
                 0);
    }
    if (with_ops) {
        /* degrees, translate, scale, shear (none), nearest, centre (the
         * image's), fill */
        const double nan = __builtin_nan("");
        const double affine[16] = {-20, 20,  0.4, 0.4, nan, nan, nan, nan,
                                   nan, nan, 0,   nan, nan, 9,   9,   9};
        const double invert[1] = {0.5};
        CHECK_EQ(rl_augment_add(&view.augment, rl_op_find("affine"), affine, 16,
                                msg),
                 0);
        CHECK_EQ(
            rl_augment_add(&view.augment, rl_op_find("invert"), invert, 1, msg),
            0);
    }
    rl_pipeline *p = rl_pipeline_create(&cfg, NULL, msg);
    CHECK(p != NULL);
    CHECK_EQ(rl_pipeline_sample_bytes(p), 0);
    CHECK_EQ(rl_pipeline_batch_bytes(p, 5),
             arena ? arena : RL_ARENA_DEFAULT_BYTES);
    int flips = 0;
    for (int at = 0; at < N; at += 5) {
        int64_t ids[5];
        int n = N - at < 5 ? N - at : 5;
        for (int k = 0; k < n; k++) {
            ids[k] = at + k;
        }
        CHECK_EQ(rl_pipeline_submit(p, ids, ids, n, 0, NULL, NULL), 0);
        rl_slot *s;
        rl_batch_report rep;
        CHECK_EQ(rl_pipeline_next(p, -1, 0, &s, &rep), 0);
        rl_batch_report_free(&rep);
        CHECK_EQ(rl_slot_count(s), n);
        for (int k = 0; k < n; k++) {
            check_sample(s, k, at + k, at + k);
            if (with_ops) {
                check_translate(width[at + k], height[at + k], at + k);
            }
            rl_plan plan;
            rl_plan_make(&view.transform, width[at + k], height[at + k], 7, 0,
                         at + k, 0, &plan, msg);
            flips += plan.flip;
        }
        rl_slot_release(s);
    }
    rl_pipeline_destroy(p);
    return flips;
}

static int run_with(int threads, size_t arena, bool with_source)
{
    return run_ops(threads, arena, with_source, false);
}

static int run(int threads, size_t arena)
{
    return run_with(threads, arena, false);
}

/* A source op in a sample of two views, or with a trim, is refused. */
static void check_source_refused(void)
{
    char msg[RL_MSG_MAX];
    const double args[9] = {0.875, 1.125, 0.5, 1.5, 0.5, 1.5, -0.05, 0.05, 0.5};
    rl_view two[2];
    memset(two, 0, sizeof(two));
    for (int v = 0; v < 2; v++) {
        two[v].transform.kind = RL_T_RESIZE_CROP;
        two[v].transform.out_w = two[v].transform.out_h = 8;
        two[v].transform.ratio_lo = two[v].transform.ratio_hi = 1.0;
        two[v].augment.view = v;
        two[v].place.out_w = two[v].place.out_h = 8;
    }
    CHECK_EQ(rl_augment_add(&two[0].augment, rl_op_find("photometric_distort"),
                            args, 9, msg),
             0);
    CHECK_EQ(rl_sample_views_check(two, 2, msg), RL_ECONFIG);
    CHECK(strstr(msg, "source op") != NULL);
    CHECK_EQ(rl_sample_views_check(two, 1, msg), 0);
    two[0].transform.trim = 2;
    CHECK_EQ(rl_sample_views_check(two, 1, msg), RL_ECONFIG);
}

/* A bad sample replaced by the next one, its place taken anew. */
static void check_skip(size_t arena)
{
    char msg[RL_MSG_MAX];
    rl_pipeline_config cfg = config(2, arena, N + 1);
    cfg.skip_errors = true;
    cfg.max_consecutive_errors = 4;
    rl_pipeline *p = rl_pipeline_create(&cfg, NULL, msg);
    CHECK(p != NULL);
    int64_t ids[3] = {N, 2, 3}; /* N: the bad one, replaced by 0 */
    CHECK_EQ(rl_pipeline_submit(p, ids, ids, 3, 0, NULL, NULL), 0);
    rl_slot *s;
    rl_batch_report rep;
    CHECK_EQ(rl_pipeline_next(p, -1, 0, &s, &rep), 0);
    CHECK_EQ(rep.n_replaced, 1);
    CHECK_EQ(rep.replaced[0].id, 0);
    int64_t key = rl_key_replacement(N, 1);
    rl_batch_report_free(&rep);
    check_sample(s, 0, 0, key);
    check_sample(s, 1, 2, 2);
    rl_slot_release(s);
    rl_pipeline_destroy(p);
}

/* A sample past the arena leaves its room to the smaller ones after it:
 * the largest sample first, then the two smallest, in an arena that holds
 * exactly those two (one thread: the order submitted). */
static void check_room_after_a_large_one(void)
{
    int big = 0, small[2] = {-1, -1};
    for (int i = 0; i < N; i++) {
        size_t px = (size_t)width[i] * height[i];
        if (px > (size_t)width[big] * height[big]) {
            big = i;
        }
        for (int k = 0; k < 2; k++) {
            int o = small[k];
            if (o < 0 || px < (size_t)width[o] * height[o]) {
                if (k == 0) {
                    small[1] = small[0];
                }
                small[k] = i;
                break;
            }
        }
    }
    size_t arena = 0;
    for (int k = 0; k < 2; k++) {
        size_t bytes = (size_t)3 * width[small[k]] * height[small[k]];
        arena += (bytes + RL_PLACE_VIEW_ALIGN - 1) / RL_PLACE_VIEW_ALIGN *
                 RL_PLACE_VIEW_ALIGN;
    }
    CHECK((size_t)3 * width[big] * height[big] > arena);
    char msg[RL_MSG_MAX];
    rl_pipeline_config cfg = config(1, arena, N);
    rl_pipeline *p = rl_pipeline_create(&cfg, NULL, msg);
    CHECK(p != NULL);
    int64_t ids[3] = {big, small[0], small[1]};
    CHECK_EQ(rl_pipeline_submit(p, ids, ids, 3, 0, NULL, NULL), 0);
    rl_slot *s;
    rl_batch_report rep;
    CHECK_EQ(rl_pipeline_next(p, -1, 0, &s, &rep), 0);
    rl_batch_report_free(&rep);
    const uint8_t *lo = rl_slot_data(s);
    for (int k = 0; k < 3; k++) {
        int w, h;
        const uint8_t *at = rl_slot_sample(s, k, &w, &h);
        CHECK_EQ(k > 0, at >= lo && at < lo + arena); /* the arena's */
        check_sample(s, k, (int)ids[k], ids[k]);
    }
    rl_pipeline_stats st;
    rl_pipeline_stats_get(p, &st);
    CHECK_EQ(st.past_arena, 1); /* the large one */
    rl_slot_release(s);
    rl_pipeline_destroy(p);
}

/* The arena ends at arena_bytes, not at its slot's size (rounded up to
 * pages): sample 0 twice fits in its aligned span plus its bytes, and the
 * second no longer in one byte less. */
static void check_exact_bound(void)
{
    size_t bytes = (size_t)3 * width[0] * height[0];
    size_t span = (bytes + RL_PLACE_VIEW_ALIGN - 1) / RL_PLACE_VIEW_ALIGN *
                  RL_PLACE_VIEW_ALIGN;
    CHECK((span + bytes) % 4096 != 0);
    for (size_t less = 0; less < 2; less++) {
        char msg[RL_MSG_MAX];
        rl_pipeline_config cfg = config(1, span + bytes - less, N);
        rl_pipeline *p = rl_pipeline_create(&cfg, NULL, msg);
        CHECK(p != NULL);
        int64_t ids[2] = {0, 0};
        CHECK_EQ(rl_pipeline_submit(p, ids, ids, 2, 0, NULL, NULL), 0);
        rl_slot *s;
        rl_batch_report rep;
        CHECK_EQ(rl_pipeline_next(p, -1, 0, &s, &rep), 0);
        rl_batch_report_free(&rep);
        rl_pipeline_stats st;
        rl_pipeline_stats_get(p, &st);
        CHECK_EQ(st.past_arena, less);
        for (int k = 0; k < 2; k++) {
            check_sample(s, k, 0, 0);
        }
        rl_slot_release(s);
        rl_pipeline_destroy(p);
    }
}

/* Batches in flight cancelled, the pipeline destroyed while a slot is
 * held (its own buffers included), then the slot released. */
static void check_release(void)
{
    char msg[RL_MSG_MAX];
    rl_pipeline_config cfg = config(3, 4096, N);
    rl_pipeline *p = rl_pipeline_create(&cfg, NULL, msg);
    CHECK(p != NULL);
    int64_t ids[N];
    for (int i = 0; i < N; i++) {
        ids[i] = i;
    }
    for (int b = 0; b < 4; b++) {
        CHECK_EQ(
            rl_pipeline_submit(p, ids + 6 * b, ids + 6 * b, 6, 0, NULL, NULL),
            0);
    }
    rl_slot *held;
    rl_batch_report rep;
    CHECK_EQ(rl_pipeline_next(p, -1, 0, &held, &rep), 0);
    rl_batch_report_free(&rep);
    rl_pipeline_cancel(p);
    CHECK_EQ(rl_pipeline_inflight(p), 0);
    rl_pipeline_destroy(p);
    check_sample(held, 5, 5, 5); /* still readable after destroy */
    rl_slot_release(held);

    /* A varying view with a second view: refused. */
    rl_view two[2];
    cfg = config(1, 0, N);
    two[0] = view;
    two[1] = view;
    two[1].transform.varying = 0;
    two[1].transform.out_w = two[1].transform.out_h = 8;
    two[1].augment.view = 1;
    cfg.sample.views = two;
    cfg.sample.nviews = 2;
    int status = 0;
    CHECK(rl_pipeline_create(&cfg, &status, msg) == NULL);
    CHECK(status == RL_ECONFIG && strstr(msg, "one view") != NULL);
    /* A varying transform with an output size: refused. */
    cfg = config(1, 0, N);
    view.transform.out_w = 8;
    CHECK(rl_pipeline_create(&cfg, &status, msg) == NULL);
    CHECK(status == RL_ECONFIG && strstr(msg, "varying") != NULL);
}

int main(void)
{
    for (int i = 0; i < N; i++) {
        width[i] = 9 + (i * 37) % 140;
        height[i] = 7 + (i * 53) % 110;
        data[i] = make_jpeg(width[i], height[i], i, &len[i]);
        CHECK(data[i] != NULL);
    }
    static uint8_t bad[] = {0xff, 0xd8, 0xff, 0xe0, 'n', 'o', 't'};
    data[N] = bad;
    len[N] = sizeof(bad);
    /* The default arena (all fit), one of 4 kB (most go past it), and of
     * one byte (every sample its own buffer): the same samples. */
    size_t arenas[] = {0, 4096, 1};
    int flips = -1;
    for (int a = 0; a < 3; a++) {
        for (int t = 1; t <= 4; t *= 2) {
            int f = run(t, arenas[a]);
            CHECK(flips < 0 || f == flips);
            flips = f;
        }
        check_skip(arenas[a]);
    }
    CHECK(flips > 0 && flips < N); /* drawn per sample, not all one way */
    CHECK_EQ(run_with(2, 0, true), flips); /* the op draws no plan number */
    /* Image ops on varying sizes, after the source op or alone, in the
     * arena and past it. */
    CHECK_EQ(run_ops(2, 0, true, true), flips);
    CHECK_EQ(run_ops(3, 4096, false, true), flips);
    check_source_refused();
    check_room_after_a_large_one();
    check_exact_bound();
    check_release();
    for (int i = 0; i < N; i++) {
        free(data[i]);
    }
    PASS("test_varying");
}
