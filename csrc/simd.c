/*
 * simd.c - the SIMD level of the C kernels (simd.h).
 *
 * DESIGN: the best level is found once (pthread_once), from what the build
 * compiled and what the CPU says, and capped by RINGLOADER_SIMD read at
 * the same moment. A value that names no level caps nothing, and is kept
 * for the Python module to warn about: C has no voice of its own. Later
 * caps (rl_simd_cap) only lower the level to what the build and CPU run.
 */
#include "simd.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#if RL_HAVE_AVX2
#include <cpuid.h>
#endif

static pthread_once_t simd_once = PTHREAD_ONCE_INIT;
static int simd_best = RL_SIMD_C;  /* what this build and CPU can run */
static int simd_level = RL_SIMD_C; /* what the kernels use */
/* What RINGLOADER_SIMD held when it was read (a copy: a later setenv may
 * free getenv's string), and the level it named, -1 for none. Written
 * once under simd_once, read-only after. */
static bool simd_env_set;
static char simd_env[64];
static int simd_env_cap = -1;

bool rl_simd_cpu_avx2(void)
{
#if RL_HAVE_AVX2
    /* The AVX2 level also converts to float16 with F16C, which every CPU
     * with AVX2 has; both are checked. */
    __builtin_cpu_init();
    unsigned a, b, c, d;
    bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
    return __builtin_cpu_supports("avx2") && f16c;
#else
    return false;
#endif
}

const char *rl_simd_name(rl_simd level)
{
    return level == RL_SIMD_AVX2   ? "avx2"
           : level == RL_SIMD_SSE2 ? "sse2"
                                   : "c";
}

int rl_simd_parse(const char *name, rl_simd *level)
{
    for (int l = RL_SIMD_C; l < RL_SIMD_COUNT; l++) {
        if (strcasecmp(name, rl_simd_name((rl_simd)l)) == 0) {
            *level = (rl_simd)l;
            return 0;
        }
    }
    return -EINVAL;
}

static void simd_init(void)
{
    if (RL_HAVE_SSE2) {
        simd_best = RL_SIMD_SSE2;
    }
    if (rl_simd_cpu_avx2()) {
        simd_best = RL_SIMD_AVX2;
    }
    int level = simd_best;
    const char *env = getenv("RINGLOADER_SIMD");
    rl_simd cap;
    if (env != NULL) {
        simd_env_set = true;
        snprintf(simd_env, sizeof(simd_env), "%s", env);
        /* Empty means the best; a name that is not a level is no cap
         * either, and is reported (rl_simd_env) rather than guessed at. */
        if (rl_simd_parse(env, &cap) == 0) {
            simd_env_cap = (int)cap;
            level = (int)cap < level ? (int)cap : level;
        }
    }
    __atomic_store_n(&simd_level, level, __ATOMIC_RELAXED);
}

const char *rl_simd_env(int *cap)
{
    pthread_once(&simd_once, simd_init);
    *cap = simd_env_cap;
    return simd_env_set ? simd_env : NULL;
}

rl_simd rl_simd_level(void)
{
    pthread_once(&simd_once, simd_init);
    return (rl_simd)__atomic_load_n(&simd_level, __ATOMIC_RELAXED);
}

rl_simd rl_simd_cap(rl_simd level)
{
    pthread_once(&simd_once, simd_init);
    int l = (int)level < simd_best ? (int)level : simd_best;
    __atomic_store_n(&simd_level, l, __ATOMIC_RELAXED);
    return (rl_simd)l;
}
