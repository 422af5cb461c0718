/*
 * rng.c - Philox4x32-10, the counter-based generator behind every random
 * draw of a sample.
 *
 * DESIGN: a counter-based generator needs no state shared between threads:
 * the key is the user's seed, the counter's high words name the sample
 * (epoch and key) and its low word counts the draws. A stage that draws
 * starts at its own offset of the low word (rl_rng_stream), so adding draws
 * to one stage never shifts another's: the crop and flip of a sample stay
 * the same whether or not augmentation ops follow.
 */
#include "rng.h"

/* ---- Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as
 * 1, 2, 3", SC'11) ---- */

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static void philox(const uint32_t key_in[2], const uint32_t ctr_in[4],
                   uint32_t out[4])
{
    uint32_t k0 = key_in[0], k1 = key_in[1];
    uint32_t c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        uint32_t n3 = (uint32_t)p0;
        c0 = n0;
        c1 = n1;
        c2 = n2;
        c3 = n3;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

void rl_rng_init(rl_rng *g, uint64_t seed, int64_t epoch, int64_t index,
                 rl_rng_stream stream)
{
    g->key[0] = (uint32_t)seed;
    g->key[1] = (uint32_t)(seed >> 32);
    /* The counter's high words name the sample, its low word the draw. */
    g->ctr[0] = (uint32_t)stream;
    g->ctr[1] = (uint32_t)epoch;
    g->ctr[2] = (uint32_t)(uint64_t)index;
    g->ctr[3] = (uint32_t)((uint64_t)index >> 32) ^
                ((uint32_t)((uint64_t)epoch >> 32) << 16);
    g->left = 0;
}

static uint32_t next32(rl_rng *g)
{
    if (g->left == 0) {
        philox(g->key, g->ctr, g->out);
        g->ctr[0]++;
        g->left = 4;
    }
    return g->out[4 - g->left--];
}

double rl_rng_uniform(rl_rng *g)
{
    uint64_t hi = next32(g) >> 5, lo = next32(g) >> 6; /* 27 + 26 bits */
    return (double)(hi * 67108864u + lo) / 9007199254740992.0;
}

int rl_rng_index(rl_rng *g, int n)
{
    int i = (int)(rl_rng_uniform(g) * n);
    return i < n ? i : n - 1;
}
