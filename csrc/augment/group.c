/*
 * augment/group.c - the groups: torchvision's RandomApply, RandomChoice,
 * RandomOrder, and a Compose inside one of them.
 *
 * DESIGN: a group is an element of the chain (augment.h) whose children
 * are the sub-chains right before it. Like an op it has a layout, a check
 * and a draw from its own place in the sample's stream; instead of an
 * apply it has a pick, which says from the drawn parameters which children
 * run and in what order. The chain (chain.c) finds the children and runs
 * them, so a group knows nothing of what they are: any image op, or
 * another group. Its children draw their parameters whether they run or
 * not, each from its own place, so a group's decision never shifts
 * another element's draws.
 *
 * The draws follow torchvision's distributions, not its generators (v1
 * draws RandomChoice and RandomOrder from Python's `random`, v2 from
 * torch's): RandomApply runs its children when a uniform number is below
 * p (torch.rand(1) < p); RandomChoice picks child k with probability
 * weights[k] / sum(weights) (random.choices, torch.multinomial);
 * RandomOrder runs a uniform permutation (random.shuffle, torch.randperm).
 */
#include <math.h>
#include <stdio.h>

#include "augment/augment.h"

/* The groups' arguments (augment.h): the number of children first, then
 * RandomApply's p, or RandomChoice's weights (one per child, the rest 0). */
#define APPLY_ARGS(X) X(APPLY_, children, 1, RL_ARG_) X(APPLY_, p, 1, RL_ARG_)
#define CHOICE_ARGS(X)               \
    X(CHOICE_, children, 1, RL_ARG_) \
    X(CHOICE_, weights, RL_GROUP_MAX_CHILDREN, RL_ARG_)
#define ALL_ARGS(X) X(ALL_, children, 1, RL_ARG_)
#define LAYOUT(prefix, list)                   \
    enum { list(RL_OP_ARG_AT) prefix##NARGS }; \
    static const rl_op_field prefix##fields[] = {list(RL_OP_FIELD) RL_OP_END};
LAYOUT(APPLY_, APPLY_ARGS)
LAYOUT(CHOICE_, CHOICE_ARGS)
LAYOUT(ALL_, ALL_ARGS)

/* The number of children (rl_augment_add has checked it). */
static int children(const rl_op *op)
{
    return (int)op->args[0];
}

static int check_apply(const double *a, char *msg)
{
    if (!(a[APPLY_p] >= 0 && a[APPLY_p] <= 1)) {
        snprintf(msg, RL_MSG_MAX, "random_apply: p must be in [0, 1], not %g",
                 a[APPLY_p]);
        return RL_ECONFIG;
    }
    return 0;
}

/* The weights of the children: finite, non-negative, some positive; the
 * unused ones 0. */
static int check_choice(const double *a, char *msg)
{
    double total = 0;
    int n =
        a[CHOICE_children] >= 1 && a[CHOICE_children] <= RL_GROUP_MAX_CHILDREN
            ? (int)a[CHOICE_children]
            : 0; /* rl_augment_add refuses the count */
    for (int k = 0; k < RL_GROUP_MAX_CHILDREN; k++) {
        double w = a[CHOICE_weights + k];
        if (!(w >= 0 && w < 1e300) || (k >= n && w != 0)) {
            snprintf(msg, RL_MSG_MAX,
                     "random_choice: weight %d must be finite and "
                     "non-negative (0 past the %d children), not %g",
                     k, n, w);
            return RL_ECONFIG;
        }
        total += w;
    }
    if (n > 0 && !(total > 0)) {
        snprintf(msg, RL_MSG_MAX, "random_choice: the weights sum to 0");
        return RL_ECONFIG;
    }
    return 0;
}

/* RandomApply: one uniform number, compared with p at the pick. */
static void draw_apply(const rl_op *op, rl_rng *g, int w, int h, double *params)
{
    (void)op;
    (void)w;
    (void)h;
    params[0] = rl_rng_uniform(g);
}

/* RandomChoice: the child k whose share of the cumulated weights holds
 * u * total, as random.choices bisects them (a child of weight 0 is never
 * picked). */
static void draw_choice(const rl_op *op, rl_rng *g, int w, int h,
                        double *params)
{
    (void)w;
    (void)h;
    int n = children(op);
    const double *weights = op->args + CHOICE_weights;
    double total = 0;
    for (int k = 0; k < n; k++) {
        total += weights[k];
    }
    double target = rl_rng_uniform(g) * total, cum = 0;
    int pick = n - 1;
    for (int k = 0; k < n; k++) {
        cum += weights[k];
        if (cum > target) {
            pick = k;
            break;
        }
    }
    while (weights[pick] == 0 && pick > 0) {
        pick--; /* rounding past the last positive weight */
    }
    params[0] = pick;
}

/* RandomOrder: a uniform permutation of the children, by Fisher-Yates. */
static void draw_order(const rl_op *op, rl_rng *g, int w, int h, double *params)
{
    (void)w;
    (void)h;
    int n = children(op);
    for (int k = 0; k < n; k++) {
        params[k] = k;
    }
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(rl_rng_uniform(g) * (i + 1));
        double t = params[i];
        params[i] = params[j];
        params[j] = t;
    }
}

static int pick_all(const rl_op *op, const double *params, int *run)
{
    (void)params;
    for (int k = 0; k < children(op); k++) {
        run[k] = k;
    }
    return children(op);
}

static int pick_apply(const rl_op *op, const double *params, int *run)
{
    return params[0] < op->args[APPLY_p] ? pick_all(op, params, run) : 0;
}

static int pick_choice(const rl_op *op, const double *params, int *run)
{
    (void)op;
    run[0] = (int)params[0];
    return 1;
}

static int pick_order(const rl_op *op, const double *params, int *run)
{
    for (int k = 0; k < children(op); k++) {
        run[k] = (int)params[k];
    }
    return children(op);
}

static const rl_op_def random_apply = {
    .name = "random_apply",
    .nargs = APPLY_NARGS,
    .fields = APPLY_fields,
    .check = check_apply,
    .draw = draw_apply,
    .pick = pick_apply,
};

static const rl_op_def random_choice = {
    .name = "random_choice",
    .nargs = CHOICE_NARGS,
    .fields = CHOICE_fields,
    .check = check_choice,
    .draw = draw_choice,
    .pick = pick_choice,
};

static const rl_op_def random_order = {
    .name = "random_order",
    .nargs = ALL_NARGS,
    .fields = ALL_fields,
    .draw = draw_order,
    .pick = pick_order,
};

/* A Compose that is one child of a RandomChoice or RandomOrder: its
 * children, in order. */
static const rl_op_def compose = {
    .name = "compose",
    .nargs = ALL_NARGS,
    .fields = ALL_fields,
    .pick = pick_all,
};

const rl_op_def *const rl_group_ops[] = {
    &random_apply, &random_choice, &random_order, &compose, NULL,
};
