/*
 * rng.h - the random numbers of one sample.
 *
 * A stream is a pure function of (seed, epoch, key, stream): no state is
 * shared between threads or samples, so draws do not depend on thread count
 * or completion order, and resuming mid-epoch replays them exactly. The key
 * is the sample's dataset index the first time it comes in an epoch; the
 * layout of its bits is below, written once here and exported to Python
 * (python/module.c), whose ringloader/_epoch.py makes the keys.
 */
#ifndef RL_RNG_H
#define RL_RNG_H

#include "rl.h"

/* The bits of a sample's key (int64, never negative):
 *   0..39   the dataset index (Python's side);
 *   40..53  how many times the sample came before in the epoch (Python's
 *           side: repeats by a sampler with replacement, repeated
 *           augmentation); without the skip policy, which makes no
 *           replacement keys, a repeat count may also use bits 54..61;
 *   54..61  the attempt (1..255) of a replacement (core/jobs.c);
 *   62      set in the key of a replacement only.
 * So no two draws of an epoch share a key as long as an epoch draws one
 * sample at most 2^14 times (2^22 without the skip policy) and the skip
 * policy tries at most RL_MAX_CONSECUTIVE_ERRORS samples in a row: both
 * are checked where they are set (python/ringloader/_epoch.py,
 * core/pipeline.c). These values are what every key drawn so far used:
 * changing them changes the randomness of saved runs. */
#define RL_KEY_OCCURRENCE_SHIFT 40
#define RL_KEY_ATTEMPT_SHIFT 54
#define RL_KEY_ATTEMPT_BITS 8
#define RL_KEY_REPLACEMENT_BIT 62
/* The original sample counts as the first of the errors in a row, so the
 * attempts are 1 .. max_consecutive_errors - 1. */
#define RL_MAX_CONSECUTIVE_ERRORS (1 << RL_KEY_ATTEMPT_BITS)

/* The key of attempt `attempt` (1 .. RL_MAX_CONSECUTIVE_ERRORS - 1) to
 * replace the sample of key `key` (below 2^RL_KEY_ATTEMPT_SHIFT). */
static inline int64_t rl_key_replacement(int64_t key, int attempt)
{
    uint64_t low = (uint64_t)key & (((uint64_t)1 << RL_KEY_ATTEMPT_SHIFT) - 1);
    return (int64_t)(((uint64_t)1 << RL_KEY_REPLACEMENT_BIT) |
                     ((uint64_t)attempt << RL_KEY_ATTEMPT_SHIFT) | low);
}

/* Each stage that draws has a stream of its own (the first counter word),
 * so one stage's draws never shift another's. */
typedef enum {
    RL_RNG_PLAN = 0,             /* crop and flip (core/plan.c) */
    RL_RNG_AUGMENT = 0x40000000, /* augmentation ops (augment/) */
} rl_rng_stream;

/* A sample may have several views (core/sample.h), up to RL_MAX_VIEWS;
 * view v draws from its own part of each stage's stream, v *
 * RL_RNG_VIEW_STRIDE counter words on: a stage's draws of one view use far
 * fewer (the augment chain's ops are 0x10000 apart, 16 of them), so views
 * never share a draw, and view 0's part is the stage's stream as it was
 * before views existed (a one-view loader keeps the randomness of saved
 * runs). The planes of RL_RNG_PLAN and RL_RNG_AUGMENT hold 64 views each. */
#define RL_MAX_VIEWS 64
#define RL_RNG_VIEW_STRIDE 0x01000000u

/* The part of stream s that view v (0 .. RL_MAX_VIEWS - 1) draws from. */
static inline rl_rng_stream rl_rng_view(rl_rng_stream s, int view)
{
    return (rl_rng_stream)((uint32_t)s + (uint32_t)view * RL_RNG_VIEW_STRIDE);
}

/* A stream of uniform numbers for one sample. */
typedef struct rl_rng {
    uint32_t key[2];
    uint32_t ctr[4];
    uint32_t out[4];
    int left;
} rl_rng;

/* Starts the stream `stream` of sample `index` in `epoch` for `seed`. */
void rl_rng_init(rl_rng *g, uint64_t seed, int64_t epoch, int64_t index,
                 rl_rng_stream stream);

/* The next uniform double in [0, 1), 53 random bits. */
double rl_rng_uniform(rl_rng *g);

/* An index uniform in [0, n), n >= 1, from one rl_rng_uniform draw (the
 * draw times n, truncated; never n, whatever the rounding). */
int rl_rng_index(rl_rng *g, int n);

#endif /* RL_RNG_H */
