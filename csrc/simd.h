/*
 * simd.h - which instruction set the C kernels run: the lowest module of
 * the core, beside rl.h and rng.h, read by every stage that has vector
 * kernels (place's resampler and stores, decode's PNG filters, augment's
 * colour, histogram and warp kernels).
 *
 * Every level gives the same bytes; the level only decides how fast. It is
 * the best this build and CPU can run, capped by the environment
 * (RINGLOADER_SIMD) or by rl_simd_cap() so that the tests can compare the
 * levels.
 */
#ifndef RL_SIMD_H
#define RL_SIMD_H

#include <stdbool.h>

/* What the build can compile. SSE2 is part of x86-64, so it needs no flag
 * and no CPU check. AVX2 (and F16C) code is compiled with target
 * attributes, so the build needs no -mavx2, and runs only where
 * rl_simd_cpu_avx2() says so. */
#if defined(__SSE2__)
#define RL_HAVE_SSE2 1
#else
#define RL_HAVE_SSE2 0
#endif
#if RL_HAVE_SSE2 && defined(__GNUC__) && \
    (defined(__x86_64__) || defined(__i386__))
#define RL_HAVE_AVX2 1
#define RL_TARGET_AVX2 __attribute__((target("avx2")))
#define RL_TARGET_F16C __attribute__((target("avx,f16c")))
#else
#define RL_HAVE_AVX2 0
#endif

/* The levels, lowest first. */
typedef enum {
    RL_SIMD_C = 0,
    RL_SIMD_SSE2 = 1,
    RL_SIMD_AVX2 = 2, /* with F16C for float16 output */
    RL_SIMD_COUNT
} rl_simd;

/* Whether this CPU runs the AVX2 kernels and the F16C store (false where
 * the build has no AVX2 code). Thread-safe. */
bool rl_simd_cpu_avx2(void);

/* The level in use: the best this build and CPU support, unless capped by
 * the environment (RINGLOADER_SIMD=c, sse2 or avx2 in any case, read once
 * on first use; unset or empty: no cap) or by rl_simd_cap(). Thread-safe;
 * cheap enough to call once per image. */
rl_simd rl_simd_level(void);

/* What RINGLOADER_SIMD held when the level was first chosen: a copy of
 * its value (static storage, at most 63 bytes kept), or NULL when unset;
 * *cap is the level it named, or -1 where it named none (empty, or not a
 * level's name: then nothing was capped, and the caller may warn).
 * Thread-safe; reads the environment first if nothing has. */
const char *rl_simd_env(int *cap);

/* The level called `name` ("c", "sse2", "avx2", in any case) in *level:
 * 0, or -EINVAL where it names none. */
int rl_simd_parse(const char *name, rl_simd *level);

/* Caps the level at `level` (for tests and diagnostics). Not thread-safe
 * against running kernels: call it before they start. Returns the level
 * now in use, which is lower than asked where the build or CPU lack it. */
rl_simd rl_simd_cap(rl_simd level);

/* "c", "sse2" or "avx2". */
const char *rl_simd_name(rl_simd level);

#endif /* RL_SIMD_H */
