/* recipe_op.c - the recipe "Adding an augmentation op" of docs/ARCHITECTURE.md
 * (see test_recipes.c). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "recipes.h"

/* ---- "Adding an augmentation op": invert with probability p ---- */

/* Its arguments: one field, p (augment.h's list macro). */
#define INV_ARGS(X) X(INV_, p, 1, RL_ARG_)
enum { INV_ARGS(RL_OP_ARG_AT) INV_NARGS };
static const rl_op_field INV_fields[] = {INV_ARGS(RL_OP_FIELD) RL_OP_END};

static int invert_check(const double *args, char *msg)
{
    if (!(args[INV_p] >= 0.0 && args[INV_p] <= 1.0)) {
        snprintf(msg, RL_MSG_MAX, "invert: p must be in [0, 1], not %g",
                 args[INV_p]);
        return RL_ECONFIG;
    }
    return 0;
}

/* One uniform number: the sample is inverted when it is below p. */
static void invert_draw(const rl_op *op, rl_rng *g, int w, int h,
                        double *params)
{
    (void)op;
    (void)w;
    (void)h;
    params[0] = rl_rng_uniform(g);
}

static int invert_apply(const rl_op *op, const double *params, rl_image *img,
                        char *msg)
{
    (void)msg;
    if (!(params[0] < op->args[INV_p])) {
        return 0;
    }
    for (int y = 0; y < img->h; y++) {
        uint8_t *row = img->data + (size_t)y * img->stride;
        for (int i = 0; i < img->w * 3; i++) {
            row[i] = (uint8_t)(255 - row[i]);
        }
    }
    return 0;
}

static const rl_op_def invert_op = {
    .name = "invert",
    .nargs = INV_NARGS,
    .fields = INV_fields,
    .check = invert_check,
    .draw = invert_draw,
    .apply = invert_apply,
};

/* ---- the same recipe for a group: run its one child twice ---- */

/* A group's first field is its number of children (augment.h). */
#define TWICE_ARGS(X) X(TWICE_, children, 1, RL_ARG_)
enum { TWICE_ARGS(RL_OP_ARG_AT) TWICE_NARGS };
static const rl_op_field TWICE_fields[] = {TWICE_ARGS(RL_OP_FIELD) RL_OP_END};

/* Nothing drawn: the child, then the child again. */
static int twice_pick(const rl_op *op, const double *params, int *run)
{
    (void)op;
    (void)params;
    run[0] = run[1] = 0;
    return 2;
}

static const rl_op_def twice_op = {
    .name = "twice",
    .nargs = TWICE_NARGS,
    .fields = TWICE_fields,
    .pick = twice_pick,
};

/* A pipeline config over the JPEGs with invert(p) added, or none when
 * p < 0. */
static rl_pipeline_config invert_config(double p, rl_layout layout)
{
    rl_pipeline_config cfg = config(3, memory_source());
    recipe_view.place.layout = layout;
    if (p >= 0) {
        char msg[RL_MSG_MAX];
        CHECK_EQ(rl_augment_add(&recipe_view.augment, &invert_op, &p, 1, msg),
                 0);
    }
    return cfg;
}

int test_op(void)
{
    enum { EPOCH = 3 };
    static uint8_t base[NJPEG * SAMPLE_U8], inv[NJPEG * SAMPLE_U8];
    static uint8_t same[NJPEG * SAMPLE_U8], half[NJPEG * SAMPLE_U8];
    static float f32[NJPEG * SAMPLE_U8];
    char msg[RL_MSG_MAX];

    /* The op's check and arity are enforced when it is added. */
    rl_augment a;
    memset(&a, 0, sizeof(a));
    double bad_p = 1.5, two[2] = {0.5, 0.5};
    CHECK_EQ(rl_augment_add(&a, &invert_op, &bad_p, 1, msg), RL_ECONFIG);
    CHECK(strstr(msg, "invert") != NULL);
    CHECK_EQ(rl_augment_add(&a, &invert_op, two, 2, msg), RL_ECONFIG);
    CHECK_EQ(a.n, 0);

    /* So is its field list: an op whose fields do not lay out its nargs,
     * or that has none, is refused, naming the op. */
    CHECK_EQ(rl_op_fields_size(INV_fields), 1);
    CHECK_EQ(rl_op_def_check(&invert_op, msg), 0);
    static const rl_op_field pair[] = {
        {"p", 1, NULL}, {"q", 1, NULL}, RL_OP_END};
    static const rl_op_field twice[] = {
        {"p", 1, NULL}, {"p", 1, NULL}, RL_OP_END};
    static const rl_op_field rows[] = {{"row", 3, pair}, RL_OP_END};
    CHECK_EQ(rl_op_fields_size(rows), 6);
    CHECK_EQ(rl_op_fields_size(twice), -1);
    rl_op_def wrong = invert_op;
    wrong.fields = pair;
    CHECK_EQ(rl_augment_add(&a, &wrong, &bad_p, 1, msg), RL_EINTERNAL);
    CHECK(strstr(msg, "invert") != NULL && strstr(msg, "2 arguments") != NULL);
    wrong.fields = NULL;
    CHECK_EQ(rl_augment_add(&a, &wrong, &bad_p, 1, msg), RL_EINTERNAL);
    CHECK(strstr(msg, "invert") != NULL);
    CHECK_EQ(a.n, 0);
    /* Every built-in op describes its arguments. */
    for (int t = 0; rl_op_tables[t] != NULL; t++) {
        for (const rl_op_def *const *d = rl_op_tables[t]; *d != NULL; d++) {
            CHECK_EQ(rl_op_def_check(*d, msg), 0);
        }
    }

    for (int layout = 0; layout < 2; layout++) {
        rl_pipeline_config cfg = invert_config(-1, (rl_layout)layout);
        run_all(&cfg, NJPEG, 5, EPOCH, base, NULL);
        cfg = invert_config(1.0, (rl_layout)layout);
        run_all(&cfg, NJPEG, 5, EPOCH, inv, NULL);
        cfg = invert_config(0.0, (rl_layout)layout);
        run_all(&cfg, NJPEG, 4, EPOCH, same, NULL);
        /* Same crops and flips (their stream is not the op's), then
         * inverted, or left alone. */
        for (size_t i = 0; i < sizeof(base); i++) {
            if (inv[i] != 255 - base[i]) {
                CHECK_EQ(inv[i], 255 - base[i]);
            }
        }
        CHECK(memcmp(same, base, sizeof(base)) == 0);

        /* p = 0.5: a sample is inverted exactly when rl_augment_draw
         * says so for its key. */
        cfg = invert_config(0.5, (rl_layout)layout);
        rl_augment chain = recipe_view.augment;
        uint64_t seed = cfg.sample.seed;
        run_all(&cfg, NJPEG, 5, EPOCH, half, NULL);
        int inverted = 0;
        for (int k = 0; k < NJPEG; k++) {
            double params[RL_OP_MAX_PARAMS];
            rl_augment_draw(&chain, seed, EPOCH, k, 4, 4, params);
            const uint8_t *want = params[0] < 0.5 ? inv : base;
            inverted += params[0] < 0.5;
            CHECK(memcmp(half + k * SAMPLE_U8, want + k * SAMPLE_U8,
                         SAMPLE_U8) == 0);
        }
        CHECK(inverted > 0 && inverted < NJPEG);
    }

    /* float32 with Normalize fused: the conversion of the inverted uint8
     * values (inv holds the NHWC run: redo NCHW). */
    rl_pipeline_config cfg = invert_config(1.0, RL_LAYOUT_NCHW);
    run_all(&cfg, NJPEG, 5, EPOCH, inv, NULL);
    static const float mean[3] = {0.485f, 0.456f, 0.406f};
    static const float std[3] = {0.229f, 0.224f, 0.225f};
    cfg = invert_config(1.0, RL_LAYOUT_NCHW);
    recipe_view.place.dtype = RL_DTYPE_F32;
    for (int c = 0; c < 3; c++) {
        recipe_view.place.mul[c] = 1.0f / (255.0f * std[c]);
        recipe_view.place.add[c] = -mean[c] / std[c];
    }
    run_all(&cfg, NJPEG, 5, EPOCH, (uint8_t *)f32, NULL);
    for (size_t i = 0; i < NJPEG * SAMPLE_U8; i++) {
        int c = (int)(i % SAMPLE_U8 / ((size_t)OUT_W * OUT_H));
        /* In float32, multiply then add, as the store does (no FMA). */
        volatile float scaled = (float)inv[i] * recipe_view.place.mul[c];
        float want = scaled + recipe_view.place.add[c];
        if (f32[i] != want) {
            CHECK(f32[i] == want);
        }
    }

    /* The draws are a pure function of (seed, epoch, key). */
    memset(&a, 0, sizeof(a));
    double p = 0.5;
    CHECK_EQ(rl_augment_add(&a, &invert_op, &p, 1, msg), 0);
    CHECK_EQ(rl_augment_add(&a, &invert_op, &p, 1, msg), 0);
    enum { NKEYS = 200 };
    static double u[NKEYS];
    for (int k = 0; k < NKEYS; k++) {
        double x[2 * RL_OP_MAX_PARAMS], y[2 * RL_OP_MAX_PARAMS];
        rl_augment_draw(&a, 7, 2, k, 4, 4, x);
        rl_augment_draw(&a, 7, 2, k, 4, 4, y);
        CHECK(memcmp(x, y, sizeof(x)) == 0);
        CHECK(x[0] >= 0.0 && x[0] < 1.0);
        CHECK(x[0] != x[RL_OP_MAX_PARAMS]); /* each op its own draws */
        rl_augment_draw(&a, 7, 3, k, 4, 4, y);
        CHECK(x[0] != y[0]); /* another epoch */
        rl_augment_draw(&a, 8, 2, k, 4, 4, y);
        CHECK(x[0] != y[0]); /* another seed */
        u[k] = x[0];
        for (int j = 0; j < k; j++) {
            if (u[j] == u[k]) {
                CHECK(u[j] != u[k]); /* another key */
            }
        }
    }
    /* The group: twice(invert) leaves the samples as they were, and an
     * invert after it is no child of it. A group is refused without
     * enough sub-chains before it, and a def with an apply or without
     * `children` first is a bug in the def. */
    static uint8_t grouped[NJPEG * SAMPLE_U8];
    double one = 1.0, two_kids = 2.0;
    cfg = invert_config(1.0, RL_LAYOUT_NHWC);
    rl_augment *g = &recipe_view.augment;
    CHECK_EQ(rl_augment_add(g, &twice_op, &two_kids, 1, msg), RL_ECONFIG);
    CHECK(strstr(msg, "twice") != NULL);
    CHECK_EQ(rl_augment_add(g, &twice_op, &one, 1, msg), 0);
    CHECK_EQ(g->n, 2);
    run_all(&cfg, NJPEG, 5, EPOCH, grouped, NULL);
    cfg = invert_config(-1, RL_LAYOUT_NHWC);
    run_all(&cfg, NJPEG, 5, EPOCH, base, NULL);
    CHECK(memcmp(grouped, base, sizeof(base)) == 0);
    cfg = invert_config(1.0, RL_LAYOUT_NHWC);
    CHECK_EQ(rl_augment_add(&recipe_view.augment, &twice_op, &one, 1, msg), 0);
    CHECK_EQ(rl_augment_add(&recipe_view.augment, &invert_op, &one, 1, msg), 0);
    run_all(&cfg, NJPEG, 5, EPOCH, grouped, NULL);
    for (size_t i = 0; i < sizeof(base); i++) {
        if (grouped[i] != 255 - base[i]) {
            CHECK_EQ(grouped[i], 255 - base[i]);
        }
    }
    rl_op_def bad_group = twice_op;
    bad_group.apply = invert_apply;
    CHECK_EQ(rl_op_def_check(&bad_group, msg), RL_EINTERNAL);
    bad_group = twice_op;
    bad_group.fields = INV_fields; /* p, not children */
    CHECK_EQ(rl_op_def_check(&bad_group, msg), RL_EINTERNAL);
    CHECK(strstr(msg, "twice") != NULL && strstr(msg, "children") != NULL);

    printf("  op: invert(p) equals 255 - v (uint8 NCHW, NHWC; float32 "
           "normalised), draws keyed by (seed, epoch, key); a group "
           "runs the sub-chain before it\n");
    return atomic_load(&rl_test_checks); /* this file's checks */
}
