/*
 * rng.h - the random numbers of one sample.
 *
 * A stream is a pure function of (seed, epoch, key, stream): no state is
 * shared between threads or samples, so draws do not depend on thread count
 * or completion order, and resuming mid-epoch replays them exactly. The key
 * is the sample's dataset index the first time it comes in an epoch (the
 * Python side adds an occurrence count for repeats above bit 40; the core's
 * skip policy keys a replacement with bit 62 set and its attempt number in
 * bits 54..61 above the original key, see core/jobs.c).
 */
#ifndef RL_RNG_H
#define RL_RNG_H

#include "rl.h"

/* Each stage that draws has a stream of its own (the first counter word),
 * so one stage's draws never shift another's. */
typedef enum {
    RL_RNG_PLAN = 0,             /* crop and flip (core/plan.c) */
    RL_RNG_AUGMENT = 0x40000000, /* augmentation ops (augment/) */
} rl_rng_stream;

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

#endif /* RL_RNG_H */
