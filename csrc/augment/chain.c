/*
 * augment/chain.c - running a chain of ops on one sample.
 *
 * DESIGN: all draws come first, in chain order, from the sample's augment
 * stream; then the ops run. An op that draws a variable number of values
 * (a policy choosing among sub-ops) still leaves the next op's draws where
 * they would be: each op gets a fresh stream position computed from its
 * place in the chain, not from how much the ops before it drew.
 *
 * Groups: the chain is a forest written in postfix order. Each element
 * knows its span (its sub-chain's length), so the sub-chains that end
 * right before element i are found walking back by spans; nothing else
 * is stored. A group's children are the last `children` of those when it
 * is added, and the top level of the chain is all of them from the end.
 * Draws ignore the structure (every element draws, at its own place);
 * only the run walks it, recursively, at most RL_AUGMENT_MAX_OPS deep.
 */
#include <stdio.h>
#include <string.h>

#include "augment/augment.h"

const rl_op_def *rl_op_find(const char *name)
{
    for (int t = 0; rl_op_tables[t] != NULL; t++) {
        for (const rl_op_def *const *d = rl_op_tables[t]; *d != NULL; d++) {
            if (strcmp((*d)->name, name) == 0) {
                return *d;
            }
        }
    }
    return NULL;
}

int rl_op_fields_size(const rl_op_field *fields)
{
    if (fields == NULL || fields[0].name == NULL) {
        return -1; /* an op or a record lays out something */
    }
    long size = 0;
    for (const rl_op_field *f = fields; f->name != NULL; f++) {
        for (const rl_op_field *g = fields; g != f; g++) {
            if (strcmp(g->name, f->name) == 0) {
                return -1;
            }
        }
        long each = f->record != NULL ? rl_op_fields_size(f->record) : 1;
        if (f->count < 0 || each < 0) {
            return -1;
        }
        size += f->count * each;
        if (size > RL_OP_MAX_ARGS) {
            return RL_OP_MAX_ARGS + 1; /* too many, whatever the rest */
        }
    }
    return (int)size;
}

/* An element that runs before the store: an image op or a group. */
static bool is_image(const rl_op_def *def)
{
    return def->apply != NULL || def->pick != NULL;
}

/* The first elements of the last `count` sub-chains that end before
 * element end (all of them for count < 0), into out in chain order;
 * returns how many there are, fewer than count when the chain runs out.
 * out holds RL_AUGMENT_MAX_OPS. */
static int roots(const rl_augment *a, int end, int count, int *out)
{
    int n = 0, back[RL_AUGMENT_MAX_OPS];
    for (int r = end - 1; r >= 0 && n != count; r -= a->ops[r].span) {
        back[n++] = r;
    }
    for (int k = 0; k < n; k++) {
        out[k] = back[n - 1 - k];
    }
    return n;
}

int rl_op_def_check(const rl_op_def *def, char *msg)
{
    if (def->pick != NULL &&
        (def->apply != NULL || def->apply_out != NULL || def->fields == NULL ||
         def->fields[0].name == NULL ||
         strcmp(def->fields[0].name, "children") != 0 ||
         def->fields[0].count != 1 || def->fields[0].record != NULL)) {
        snprintf(msg, RL_MSG_MAX,
                 "%s: a group's first field is `children` and it has no "
                 "apply",
                 def->name);
        return RL_EINTERNAL;
    }
    if (def->source && (def->apply == NULL || def->pick != NULL)) {
        snprintf(msg, RL_MSG_MAX, "%s: a source op needs an apply and no pick",
                 def->name);
        return RL_EINTERNAL;
    }
    int size = rl_op_fields_size(def->fields);
    if (size < 0) {
        snprintf(msg, RL_MSG_MAX,
                 "%s: its argument fields are missing or malformed", def->name);
        return RL_EINTERNAL;
    }
    if (size != def->nargs || def->nargs > RL_OP_MAX_ARGS) {
        snprintf(msg, RL_MSG_MAX,
                 "%s: its argument fields lay out %d arguments, its nargs is "
                 "%d (at most %d)",
                 def->name, size, def->nargs, RL_OP_MAX_ARGS);
        return RL_EINTERNAL;
    }
    return 0;
}

int rl_augment_image_ops(const rl_augment *a)
{
    int n = 0;
    for (int i = 0; i < a->n; i++) {
        n += is_image(a->ops[i].def) && !a->ops[i].def->source;
    }
    return n;
}

int rl_augment_source_ops(const rl_augment *a)
{
    int n = 0;
    while (n < a->n && a->ops[n].def->source) {
        n++;
    }
    return n;
}

/* A source op first in the chain and no group's child; 0 or RL_ECONFIG. */
static int check_source(const rl_augment *a, const rl_op_def *def, int children,
                        char *msg)
{
    if (def->source && rl_augment_source_ops(a) != a->n) {
        snprintf(msg, RL_MSG_MAX,
                 "%s must come first (it runs on the whole image before the "
                 "geometry), not after %s",
                 def->name, a->ops[a->n - 1].def->name);
        return RL_ECONFIG;
    }
    int kids[RL_AUGMENT_MAX_OPS];
    int n = children > 0 ? roots(a, a->n, children, kids) : 0;
    for (int k = 0; k < n; k++) {
        if (a->ops[kids[k]].def->source) {
            snprintf(msg, RL_MSG_MAX, "%s cannot hold %s (a source op)",
                     def->name, a->ops[kids[k]].def->name);
            return RL_ECONFIG;
        }
    }
    return 0;
}

int rl_augment_add(rl_augment *a, const rl_op_def *def, const double *args,
                   int nargs, char *msg)
{
    if (a->n >= RL_AUGMENT_MAX_OPS) {
        snprintf(msg, RL_MSG_MAX, "more than %d augmentation ops",
                 RL_AUGMENT_MAX_OPS);
        return RL_ECONFIG;
    }
    if (rl_op_def_check(def, msg) != 0) {
        return RL_EINTERNAL;
    }
    if (nargs != def->nargs) {
        snprintf(msg, RL_MSG_MAX, "%s takes %d arguments, not %d", def->name,
                 def->nargs, nargs);
        return RL_ECONFIG;
    }
    if (def->check != NULL && def->check(args, msg) != 0) {
        return RL_ECONFIG;
    }
    if (is_image(def) && a->n > 0 && !is_image(a->ops[a->n - 1].def)) {
        snprintf(msg, RL_MSG_MAX, "%s must come before %s (an output op)",
                 def->name, a->ops[a->n - 1].def->name);
        return RL_ECONFIG;
    }
    int span = 1, children = 0;
    if (def->pick != NULL) {
        /* Its children: the last sub-chains, all of image elements (an
         * output op before them would have refused them). */
        double c = args[0];
        if (!(c >= 1 && c <= RL_GROUP_MAX_CHILDREN && c == (int)c)) {
            snprintf(msg, RL_MSG_MAX,
                     "%s: children must be an integer in 1..%d, not %g",
                     def->name, RL_GROUP_MAX_CHILDREN, c);
            return RL_ECONFIG;
        }
        int kids[RL_AUGMENT_MAX_OPS];
        children = (int)c;
        if (roots(a, a->n, children, kids) < children) {
            snprintf(msg, RL_MSG_MAX,
                     "%s: %d children, but fewer ops or groups before it "
                     "are in no group",
                     def->name, children);
            return RL_ECONFIG;
        }
        for (int k = 0; k < children; k++) {
            span += a->ops[kids[k]].span;
        }
    }
    if (check_source(a, def, children, msg) != 0) {
        return RL_ECONFIG;
    }
    rl_op *op = &a->ops[a->n++];
    memset(op, 0, sizeof(*op));
    op->def = def;
    memcpy(op->args, args, sizeof(double) * (size_t)nargs);
    op->span = span;
    op->children = children;
    return 0;
}

void rl_augment_draw(const rl_augment *a, uint64_t seed, int64_t epoch,
                     int64_t key, int w, int h, double *params)
{
    for (int i = 0; i < a->n; i++) {
        const rl_op *op = &a->ops[i];
        double *pp = params + (size_t)i * RL_OP_MAX_PARAMS;
        memset(pp, 0, sizeof(double) * RL_OP_MAX_PARAMS);
        if (op->def->draw != NULL) {
            /* Each op's draws start at a fixed offset of the stream. */
            rl_rng g;
            rl_rng_init(&g, seed, epoch, key,
                        (rl_rng_stream)(rl_rng_view(RL_RNG_AUGMENT, a->view) +
                                        i * 0x10000));
            op->def->draw(op, &g, w, h, pp);
        }
    }
}

/* What is done with each op that runs (its apply, its warp): 0, or a
 * status with msg. */
typedef int (*visit_fn)(const rl_op *op, const double *pp, void *ctx,
                        char *msg);

/* Visits element i: an op, or a group's picked children, each a
 * sub-chain, in the order they run. 0 or the first failing visit's status
 * with msg. */
static int walk(const rl_augment *a, const double *params, int i,
                visit_fn visit, void *ctx, char *msg)
{
    const rl_op *op = &a->ops[i];
    const double *pp = params + (size_t)i * RL_OP_MAX_PARAMS;
    if (op->def->pick == NULL) {
        return visit(op, pp, ctx, msg);
    }
    int kids[RL_AUGMENT_MAX_OPS], run[RL_GROUP_MAX_CHILDREN];
    int n = roots(a, i, op->children, kids);
    int m = op->def->pick(op, pp, run);
    for (int k = 0; k < m; k++) {
        if (run[k] < 0 || run[k] >= n) {
            snprintf(msg, RL_MSG_MAX, "%s picked child %d of %d", op->def->name,
                     run[k], n);
            return RL_EINTERNAL;
        }
        int rc = walk(a, params, kids[run[k]], visit, ctx, msg);
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}

/* Visits the chain's image ops but its source ops that run, in order. */
static int walk_image(const rl_augment *a, const double *params, visit_fn visit,
                      void *ctx, char *msg)
{
    int top[RL_AUGMENT_MAX_OPS];
    int n = roots(a, a->n, -1, top);
    for (int k = 0; k < n; k++) {
        const rl_op_def *def = a->ops[top[k]].def;
        if (!is_image(def) || def->source) {
            continue; /* an output op: after the store; a source op: before
                       * the geometry */
        }
        int rc = walk(a, params, top[k], visit, ctx, msg);
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}

static int visit_apply(const rl_op *op, const double *pp, void *ctx, char *msg)
{
    return op->def->apply(op, pp, (rl_image *)ctx, msg);
}

int rl_augment_run(const rl_augment *a, const double *params, rl_image *img,
                   char *msg)
{
    return walk_image(a, params, visit_apply, img, msg);
}

/* rl_augment_warps' visit: the sample's size and the warps so far. */
typedef struct {
    int w, h, n;
    rl_op_warp *out;
} warps_ctx;

static int visit_warp(const rl_op *op, const double *pp, void *ctx, char *msg)
{
    warps_ctx *c = ctx;
    if (op->def->still) {
        return 0;
    }
    if (op->def->warp == NULL) {
        snprintf(msg, RL_MSG_MAX,
                 "%s moves pixels in a way the targets do not follow",
                 op->def->name);
        return RL_ECONFIG;
    }
    if (c->n >= RL_AUGMENT_MAX_WARPS) {
        snprintf(msg, RL_MSG_MAX, "more than %d warps in one sample",
                 RL_AUGMENT_MAX_WARPS);
        return RL_ECONFIG;
    }
    op->def->warp(op, pp, c->w, c->h, &c->out[c->n]);
    c->n += c->out[c->n].kind != RL_WARP_NONE;
    return 0;
}

int rl_augment_warps(const rl_augment *a, const double *params, int w, int h,
                     rl_op_warp *out, char *msg)
{
    warps_ctx c = {w, h, 0, out};
    return walk_image(a, params, visit_warp, &c, msg) != 0 ? -1 : c.n;
}

int rl_augment_run_source(const rl_augment *a, const double *params,
                          rl_image *img, char *msg)
{
    int n = rl_augment_source_ops(a);
    for (int i = 0; i < n; i++) {
        const rl_op *op = &a->ops[i];
        int rc =
            op->def->apply(op, params + (size_t)i * RL_OP_MAX_PARAMS, img, msg);
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}

int rl_augment_run_out(const rl_augment *a, const double *params,
                       const rl_dst *out, int w, int h, char *msg)
{
    for (int i = 0; i < a->n; i++) {
        const rl_op *op = &a->ops[i];
        if (op->def->apply_out == NULL) {
            continue;
        }
        int rc = op->def->apply_out(op, params + (size_t)i * RL_OP_MAX_PARAMS,
                                    out, w, h, msg);
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}
