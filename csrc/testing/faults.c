/*
 * testing/faults.c - I/O fault injection, compiled into test builds only
 * (RINGLOADER_TEST_HOOKS=1); see source/faults.h.
 *
 * DESIGN: RINGLOADER_IO_FAULTS is parsed once per process into an immutable
 * table; a draw is a hash of (seed, counter), so the faults of a context are
 * reproducible and threads share nothing but their counters.
 */
#define _GNU_SOURCE
#include "source/faults.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Probabilities in units of 2^-32, cumulative in the order eio, eintr,
 * eagain, short, so one draw picks at most one fault. */
static struct {
    bool on;
    uint64_t seed;
    uint64_t eio, eintr, eagain, shrt;
} faults;
static pthread_once_t faults_once = PTHREAD_ONCE_INIT;

static uint64_t mix64(uint64_t x)
{
    /* splitmix64's finaliser: a bijection with good avalanche. */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

static void faults_parse(void)
{
    const char *env = getenv("RINGLOADER_IO_FAULTS");
    if (env == NULL || env[0] == '\0') {
        return;
    }
    double p[4] = {0, 0, 0, 0}; /* eio, eintr, eagain, short */
    static const char *const names[4] = {"eio", "eintr", "eagain", "short"};
    unsigned long long seed = 0;
    const char *s = env;
    while (*s != '\0') {
        size_t klen = strcspn(s, "=,");
        if (s[klen] != '=') {
            goto bad;
        }
        const char *v = s + klen + 1;
        char *end;
        int k = -1;
        for (int i = 0; i < 4; i++) {
            if (strlen(names[i]) == klen && strncmp(s, names[i], klen) == 0) {
                k = i;
            }
        }
        if (k >= 0) {
            p[k] = strtod(v, &end);
            if (end == v || p[k] < 0 || p[k] > 1) {
                goto bad;
            }
        } else if (klen == 4 && strncmp(s, "seed", 4) == 0) {
            seed = strtoull(v, &end, 0);
            if (end == v) {
                goto bad;
            }
        } else {
            goto bad;
        }
        if (*end != ',' && *end != '\0') {
            goto bad;
        }
        s = *end == ',' ? end + 1 : end;
    }
    /* Retried faults must leave a chance of success, or reads never end. */
    if (p[0] + p[1] + p[2] + p[3] >= 1.0) {
        goto bad;
    }
    double scale = 4294967296.0, acc = 0;
    acc += p[0];
    faults.eio = (uint64_t)(acc * scale);
    acc += p[1];
    faults.eintr = (uint64_t)(acc * scale);
    acc += p[2];
    faults.eagain = (uint64_t)(acc * scale);
    acc += p[3];
    faults.shrt = (uint64_t)(acc * scale);
    faults.seed = mix64((uint64_t)seed ^ 0x72696e676c6f6164ULL);
    faults.on = faults.shrt > 0;
    return;
bad:
    fprintf(stderr,
            "ringloader: ignoring RINGLOADER_IO_FAULTS=\"%s\" (want e.g. "
            "short=0.3,eagain=0.1,eintr=0.1,eio=0.01,seed=1; rates sum "
            "below 1)\n",
            env);
}

bool rl__io_faults_on(void)
{
    pthread_once(&faults_once, faults_parse);
    return faults.on;
}

rl__fault rl__io_fault_draw(uint64_t counter, size_t want, size_t *shorter)
{
    uint64_t h = mix64(faults.seed + mix64(counter));
    uint64_t u = h & 0xffffffffu;
    if (u < faults.eio) {
        return RL__FAULT_EIO;
    }
    if (u < faults.eintr) {
        return RL__FAULT_EINTR;
    }
    if (u < faults.eagain) {
        return RL__FAULT_EAGAIN;
    }
    if (u < faults.shrt && want > 1) {
        *shorter = 1 + (size_t)((h >> 32) % (want - 1));
        return RL__FAULT_SHORT;
    }
    return RL__FAULT_NONE;
}
