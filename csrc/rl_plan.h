/*
 * rl_plan.h - per-sample geometry: which box of the source image becomes
 * the output, and whether it is mirrored.
 *
 * Randomness comes from a counter-based generator (Philox4x32-10) keyed by
 * (seed, epoch, sample index), so a sample's augmentation is a pure function
 * of those three numbers: independent of thread count, I/O backend and
 * completion order, and reproducible when resuming mid-epoch.
 */
#ifndef RL_PLAN_H
#define RL_PLAN_H

#include "rl.h"

/* A stream of uniform numbers for one sample. */
typedef struct rl_rng {
    uint32_t key[2];
    uint32_t ctr[4];
    uint32_t out[4];
    int left;
} rl_rng;

/* Starts the stream of sample `index` in `epoch` for `seed`. */
void rl_rng_init(rl_rng *g, uint64_t seed, int64_t epoch, int64_t index);

/* The next uniform double in [0, 1), 53 random bits. */
double rl_rng_uniform(rl_rng *g);

/*
 * Computes the plan of one sample from its source size (width x height, both
 * > 0). Returns 0, or RL_EINTERNAL for a transform without a fixed output
 * (RL_T_NONE) or with invalid parameters.
 */
int rl_plan_make(const rl_transform *t, int width, int height, uint64_t seed,
                 int64_t epoch, int64_t index, rl_plan *plan);

#endif /* RL_PLAN_H */
