/*
 * augment/chain.c - running a chain of ops on one sample.
 *
 * DESIGN: all draws come first, in chain order, from the sample's augment
 * stream; then the ops run. An op that draws a variable number of values
 * (a policy choosing among sub-ops) still leaves the next op's draws where
 * they would be: each op gets a fresh stream position computed from its
 * place in the chain, not from how much the ops before it drew.
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

int rl_op_def_check(const rl_op_def *def, char *msg)
{
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
        n += a->ops[i].def->apply != NULL;
    }
    return n;
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
    if (def->apply != NULL && a->n > 0 && a->ops[a->n - 1].def->apply == NULL) {
        snprintf(msg, RL_MSG_MAX, "%s must come before %s (an output op)",
                 def->name, a->ops[a->n - 1].def->name);
        return RL_ECONFIG;
    }
    rl_op *op = &a->ops[a->n++];
    memset(op, 0, sizeof(*op));
    op->def = def;
    memcpy(op->args, args, sizeof(double) * (size_t)nargs);
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

int rl_augment_run(const rl_augment *a, const double *params, rl_image *img,
                   char *msg)
{
    for (int i = 0; i < a->n; i++) {
        const rl_op *op = &a->ops[i];
        if (op->def->apply == NULL) {
            continue;
        }
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
