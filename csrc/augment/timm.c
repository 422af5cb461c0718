/*
 * augment/timm.c - timm's policies as ops of the augment stage:
 * RandAugment and AutoAugment, which choose and order AugmentOp calls
 * (timm_augment_op.c), and `timm_op`, one of timm's op functions with a
 * fixed argument (what the tests compare with timm's own function); with
 * AugMixAugment (timm_augmix.c), the table rl_timm_ops.
 *
 * DESIGN: a policy's op here does only what timm's policy class does on
 * top of its AugmentOps: RandAugment draws num_layers rows (uniformly with
 * replacement, or by weight without, as numpy's choice), AutoAugment draws
 * one sub-policy; each then draws and runs the calls in order through
 * timm.h, so a new policy is a new op def here, not a change to the calls.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "augment/timm.h"

/* ---- timm_op: one of timm's op functions, its argument fixed ----
 * args: func (rl_timm_funcs), arg, resample (Pillow's number), fill
 * params: none */

#define TO_ARGS(X)               \
    X(TO_, func, 1, RL_ARG_)     \
    X(TO_, arg, 1, RL_ARG_)      \
    X(TO_, resample, 1, RL_ARG_) \
    X(TO_, fill, 3, RL_ARG_)
enum { TO_ARGS(RL_OP_ARG_AT) TO_NARGS };
static const rl_op_field TO_fields[] = {TO_ARGS(RL_OP_FIELD) RL_OP_END};

static int to_check(const double *a, char *msg)
{
    if (!(rl__timm_is_int(a[TO_func]) && a[TO_func] >= 0 &&
          a[TO_func] < TM_NFUNCS)) {
        return rl__timm_fail(msg, "timm_op", "unknown func");
    }
    if (!isfinite(a[TO_arg]) || fabs(a[TO_arg]) > 1e9) {
        return rl__timm_fail(msg, "timm_op", "arg must be finite");
    }
    if (!rl__timm_filter_ok(a[TO_resample]) || !rl__timm_fill_ok(a + TO_fill)) {
        return rl__timm_fail(msg, "timm_op",
                             "resample bilinear or bicubic, fill 0..255");
    }
    return 0;
}

static int to_apply(const rl_op *op, const double *params, rl_image *img,
                    char *msg)
{
    (void)params;
    const double *a = op->args;
    int rc = rl__timm_func((int)a[TO_func], a[TO_arg], (int)a[TO_resample],
                           a + TO_fill, img);
    if (rc != 0) {
        snprintf(msg, RL_MSG_MAX, "out of memory");
    }
    return rc;
}

static const rl_op_def timm_op = {
    .name = "timm_op",
    .nargs = TO_NARGS,
    .fields = TO_fields,
    .check = to_check,
    .apply = to_apply,
};

/* ---- RandAugment ----
 * args: the head, num_layers, weighted (0: uniform with replacement; 1:
 * by weights, without replacement, as numpy's choice), weights (a row's)
 * params: one slot a layer */

#define TRA_OWN(X)                  \
    X(TRA_, num_layers, 1, RL_ARG_) \
    X(TRA_, weighted, 1, RL_ARG_)   \
    X(TRA_, weights, TM_MAX_ROWS, RL_ARG_)
enum { TRA_base_ = TM_NARGS - 1, TRA_OWN(RL_OP_ARG_AT) TRA_NARGS };
static const rl_op_field TRA_fields[] = {TM_HEAD_ARGS(RL_OP_FIELD)
                                             TRA_OWN(RL_OP_FIELD) RL_OP_END};
static const rl_op_limit TRA_limits[] = {{"max_layers", RL_OP_MAX_PARAMS},
                                         {"max_rows", TM_MAX_ROWS},
                                         {"max_upper", TM_MAX_UPPER},
                                         {"slot_scale", (int)TM_SLOT_SCALE},
                                         RL_OP_END};

static int tra_check(const double *a, char *msg)
{
    int rc = rl__timm_check_head("timm_rand_augment", a, msg);
    if (rc != 0) {
        return rc;
    }
    double n = a[TRA_num_layers];
    if (!(rl__timm_is_int(n) && n >= 0 && n <= RL_OP_MAX_PARAMS)) {
        return rl__timm_fail(msg, "timm_rand_augment",
                             "num_layers must be 0..16");
    }
    if (a[TRA_weighted] != 0) {
        int positive = 0;
        for (int i = 0; i < (int)a[TM_n_rows]; i++) {
            double w = a[TRA_weights + i];
            if (!(isfinite(w) && w >= 0)) {
                return rl__timm_fail(msg, "timm_rand_augment",
                                     "weights must be >= 0");
            }
            positive += w > 0;
        }
        if (positive < n) {
            return rl__timm_fail(msg, "timm_rand_augment",
                                 "fewer ops of positive weight than layers");
        }
    }
    return 0;
}

static void tra_draw(const rl_op *op, rl_rng *g, int w, int h, double *params)
{
    (void)w;
    (void)h;
    const double *a = op->args;
    int n = (int)a[TRA_num_layers], rows = (int)a[TM_n_rows];
    double weights[TM_MAX_ROWS];
    memcpy(weights, a + TRA_weights, sizeof(double) * rows);
    for (int i = 0; i < n; i++) {
        int row = 0;
        if (a[TRA_weighted] == 0) {
            row = rl_rng_index(g, rows);
        } else {
            /* successive draws without replacement: the distribution of
             * numpy's choice(replace=False, p=...) */
            double total = 0;
            for (int k = 0; k < rows; k++) {
                total += weights[k];
            }
            double u = rl_rng_uniform(g) * total, acc = 0;
            row = -1;
            for (int k = 0; k < rows; k++) {
                acc += weights[k];
                if (weights[k] > 0) {
                    row = k;
                    if (u < acc) {
                        break;
                    }
                }
            }
            weights[row] = 0;
        }
        params[i] = rl__timm_draw(a, row, g);
    }
}

static int tra_apply(const rl_op *op, const double *params, rl_image *img,
                     char *msg)
{
    for (int i = 0; i < (int)op->args[TRA_num_layers]; i++) {
        int rc = rl__timm_run(op->args, params[i], img, msg);
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}

static const rl_op_def timm_rand_augment = {
    .name = "timm_rand_augment",
    .nargs = TRA_NARGS,
    .fields = TRA_fields,
    .limits = TRA_limits,
    .check = tra_check,
    .draw = tra_draw,
    .apply = tra_apply,
};

/* ---- AutoAugment ----
 * args: the head (rows: the sub-policies' ops, sub-policy by
 * sub-policy), n_sub, ops_per_sub (timm's policies have sub-policies
 * of one length)
 * params: one slot a sub-policy op, then the sub-policy drawn */

#define TAA_OWN(X)             \
    X(TAA_, n_sub, 1, RL_ARG_) \
    X(TAA_, ops_per_sub, 1, RL_ARG_)
enum { TAA_base_ = TM_NARGS - 1, TAA_OWN(RL_OP_ARG_AT) TAA_NARGS };
static const rl_op_field TAA_fields[] = {TM_HEAD_ARGS(RL_OP_FIELD)
                                             TAA_OWN(RL_OP_FIELD) RL_OP_END};
static const rl_op_limit TAA_limits[] = {
    {"max_ops_per_sub", RL_OP_MAX_PARAMS - 1}, RL_OP_END};

static int taa_check(const double *a, char *msg)
{
    int rc = rl__timm_check_head("timm_auto_augment", a, msg);
    if (rc != 0) {
        return rc;
    }
    double n = a[TAA_n_sub], k = a[TAA_ops_per_sub];
    if (!(rl__timm_is_int(n) && rl__timm_is_int(k) && n >= 1 && k >= 1 &&
          k <= RL_OP_MAX_PARAMS - 1 && n * k == a[TM_n_rows])) {
        return rl__timm_fail(
            msg, "timm_auto_augment",
            "n_sub sub-policies of ops_per_sub ops (at most 15) "
            "must make the rows");
    }
    return 0;
}

static void taa_draw(const rl_op *op, rl_rng *g, int w, int h, double *params)
{
    (void)w;
    (void)h;
    const double *a = op->args;
    int k = (int)a[TAA_ops_per_sub];
    int sub = rl_rng_index(g, (int)a[TAA_n_sub]);
    for (int j = 0; j < k; j++) {
        params[j] = rl__timm_draw(a, sub * k + j, g);
    }
    params[RL_OP_MAX_PARAMS - 1] = sub;
}

static int taa_apply(const rl_op *op, const double *params, rl_image *img,
                     char *msg)
{
    for (int j = 0; j < (int)op->args[TAA_ops_per_sub]; j++) {
        int rc = rl__timm_run(op->args, params[j], img, msg);
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}

static const rl_op_def timm_auto_augment = {
    .name = "timm_auto_augment",
    .nargs = TAA_NARGS,
    .fields = TAA_fields,
    .limits = TAA_limits,
    .check = taa_check,
    .draw = taa_draw,
    .apply = taa_apply,
};

const rl_op_def *const rl_timm_ops[] = {
    &timm_op, &timm_rand_augment, &timm_auto_augment, &rl__timm_augmix, NULL,
};
