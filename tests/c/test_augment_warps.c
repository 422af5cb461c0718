/* test_augment_warps.c - augment/augment.h's rl_augment_warps and
 * rl_augment_warp_nearest without Python: the warps a chain reports are
 * the ops that run, in the order they run (a colour op left out, a
 * RandomApply's pick followed, a RandomOrder's order), with the drawn
 * parameters; the warp reported, applied nearest, gives the bytes the
 * op's own apply gives; an image op that moves pixels without a warp is
 * refused, named. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "augment/augment.h"
#include "check.h"

#define NAN3 NAN, NAN, NAN

/* affine: degrees, translate, scale, shear, interpolation (nearest),
 * centre (None), fill */
static const double affine_args[] = {-30, 30, 0.2, 0.1, 0.8, 1.2, -5, 5,
                                     -3,  3,  0,   NAN, NAN, 7,   8,  9};
/* rotation: degrees, interpolation, centre (3, 4), fill (None) */
static const double rotation_args[] = {-90, 90, 0, 3, 4, NAN3};

static void add(rl_augment *a, const char *name, const double *args, int n)
{
    char msg[RL_MSG_MAX];
    const rl_op_def *def = rl_op_find(name);
    CHECK(def != NULL);
    int rc = rl_augment_add(a, def, args, n, msg);
    if (rc != 0) {
        fprintf(stderr, "%s\n", msg);
    }
    CHECK_EQ(rc, 0);
}

static int warps_of(const rl_augment *a, int64_t key, double *params,
                    rl_op_warp *out, char *msg)
{
    rl_augment_draw(a, 11, 0, key, 40, 30, params);
    return rl_augment_warps(a, params, 40, 30, out, msg);
}

/* [invert, affine, rotation, random_apply(1, p)]: the colour op moves
 * nothing, the affine always runs, the rotation where the group's draw is
 * below p. */
static void test_a_chain_lists_what_runs(void)
{
    rl_augment a;
    memset(&a, 0, sizeof(a));
    const double p = 0.5, inv = 1.0, apply[] = {1, p};
    add(&a, "invert", &inv, 1);
    add(&a, "affine", affine_args, 16);
    add(&a, "rotation", rotation_args, 8);
    add(&a, "random_apply", apply, 2);
    int seen[2] = {0, 0};
    for (int64_t key = 0; key < 40; key++) {
        double params[RL_AUGMENT_MAX_OPS * RL_OP_MAX_PARAMS];
        rl_op_warp w[RL_AUGMENT_MAX_WARPS];
        char msg[RL_MSG_MAX];
        int n = warps_of(&a, key, params, w, msg);
        const double *pa = params + 1 * RL_OP_MAX_PARAMS;
        const double *pr = params + 2 * RL_OP_MAX_PARAMS;
        int rotated = params[3 * RL_OP_MAX_PARAMS] < p;
        seen[rotated] = 1;
        CHECK_EQ(n, 1 + rotated);
        CHECK_EQ(w[0].kind, RL_WARP_AFFINE);
        CHECK(w[0].angle == pa[0] && w[0].tx == pa[1] && w[0].ty == pa[2] &&
              w[0].scale == pa[3] && w[0].shear_x == pa[4] &&
              w[0].shear_y == pa[5]);
        CHECK(!w[0].centered);
        if (rotated) {
            CHECK_EQ(w[1].kind, RL_WARP_ROTATE);
            CHECK(w[1].angle == pr[0] && w[1].centered && w[1].center[0] == 3 &&
                  w[1].center[1] == 4);
        }
    }
    CHECK(seen[0] && seen[1]);
}

/* random_order over [affine, rotation]: the warps in the drawn order. */
static void test_an_order_is_followed(void)
{
    rl_augment a;
    memset(&a, 0, sizeof(a));
    const double order = 2;
    add(&a, "affine", affine_args, 16);
    add(&a, "rotation", rotation_args, 8);
    add(&a, "random_order", &order, 1);
    int firsts[2] = {0, 0};
    for (int64_t key = 0; key < 40; key++) {
        double params[RL_AUGMENT_MAX_OPS * RL_OP_MAX_PARAMS];
        rl_op_warp w[RL_AUGMENT_MAX_WARPS];
        char msg[RL_MSG_MAX];
        CHECK_EQ(warps_of(&a, key, params, w, msg), 2);
        int first = (int)params[2 * RL_OP_MAX_PARAMS];
        CHECK_EQ(w[0].kind, first == 0 ? RL_WARP_AFFINE : RL_WARP_ROTATE);
        CHECK(w[0].kind != w[1].kind);
        firsts[first] = 1;
    }
    CHECK(firsts[0] && firsts[1]);
}

/* The warp reported, run nearest with the op's fill, is the op's apply
 * (both ops nearest here). */
static void test_the_warp_is_the_apply(void)
{
    const int w = 40, h = 30;
    size_t size = (size_t)w * h * 3;
    uint8_t *ours = malloc(size), *op = malloc(size);
    CHECK(ours != NULL && op != NULL);
    const char *names[] = {"affine", "rotation"};
    const double *args[] = {affine_args, rotation_args};
    const int nargs[] = {16, 8};
    for (int k = 0; k < 2; k++) {
        rl_augment a;
        memset(&a, 0, sizeof(a));
        add(&a, names[k], args[k], nargs[k]);
        for (int64_t key = 0; key < 8; key++) {
            for (size_t i = 0; i < size; i++) {
                op[i] = ours[i] = (uint8_t)(i * 37 + (size_t)key);
            }
            double params[RL_AUGMENT_MAX_OPS * RL_OP_MAX_PARAMS];
            rl_op_warp warp[RL_AUGMENT_MAX_WARPS];
            char msg[RL_MSG_MAX];
            CHECK_EQ(warps_of(&a, key, params, warp, msg), 1);
            rl_image img = {op, w, h, (size_t)w * 3};
            CHECK_EQ(rl_augment_run(&a, params, &img, msg), 0);
            const double *fill = k == 0 ? affine_args + 13 : NULL;
            const double zero[3] = {0, 0, 0};
            rl_image mine = {ours, w, h, (size_t)w * 3};
            CHECK_EQ(
                rl_augment_warp_nearest(&mine, warp, fill ? fill : zero, msg),
                0);
            CHECK(memcmp(ours, op, size) == 0);
        }
    }
    free(ours);
    free(op);
}

/* ---- an op that moves pixels and says nothing of how ---- */

#define MOVE_ARGS(X) X(MOVE_, p, 1, RL_ARG_)
enum { MOVE_ARGS(RL_OP_ARG_AT) MOVE_NARGS };
static const rl_op_field MOVE_fields[] = {MOVE_ARGS(RL_OP_FIELD) RL_OP_END};

static int mirror_apply(const rl_op *op, const double *params, rl_image *img,
                        char *msg)
{
    (void)op;
    (void)params;
    (void)img;
    (void)msg;
    return 0;
}

static const rl_op_def mirror_op = {
    .name = "mirror",
    .nargs = MOVE_NARGS,
    .fields = MOVE_fields,
    .apply = mirror_apply,
};

static void test_an_op_without_a_warp_is_named(void)
{
    rl_augment a;
    memset(&a, 0, sizeof(a));
    char msg[RL_MSG_MAX];
    const double p = 1, apply[] = {1, 1};
    add(&a, "rotation", rotation_args, 8);
    CHECK_EQ(rl_augment_add(&a, &mirror_op, &p, 1, msg), 0);
    add(&a, "random_apply", apply, 2);
    double params[RL_AUGMENT_MAX_OPS * RL_OP_MAX_PARAMS];
    rl_op_warp w[RL_AUGMENT_MAX_WARPS];
    msg[0] = '\0';
    CHECK_EQ(warps_of(&a, 3, params, w, msg), -1);
    CHECK(strstr(msg, "mirror moves pixels") != NULL);
    /* never run (p = 0): nothing moved, nothing refused */
    const double never[] = {1, 0};
    memset(&a, 0, sizeof(a));
    CHECK_EQ(rl_augment_add(&a, &mirror_op, &p, 1, msg), 0);
    add(&a, "random_apply", never, 2);
    CHECK_EQ(warps_of(&a, 3, params, w, msg), 0);
}

int main(void)
{
    test_a_chain_lists_what_runs();
    test_an_order_is_followed();
    test_the_warp_is_the_apply();
    test_an_op_without_a_warp_is_named();
    PASS("test_augment_warps");
}
