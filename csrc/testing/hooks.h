/*
 * testing/hooks.h - switches that break the core on purpose, for tests.
 *
 * Only a test build (RINGLOADER_TEST_HOOKS=1 defines RL_TEST_HOOKS)
 * compiles csrc/testing/; what users install gets the stub below, a
 * constant false, and no code behind it.
 */
#ifndef RL_TESTING_HOOKS_H
#define RL_TESTING_HOOKS_H

#include "rl.h"

#ifdef RL_TEST_HOOKS
/* True when environment variable `var` equals `value` (read per call). */
bool rl__test_hook(const char *var, const char *value);
/*
 * The core calls this right after taking a pipeline's lock (+1) and right
 * before releasing it (-1). It tells the CUDA runtime loaded from
 * $RINGLOADER_CUDART, when that is the fake (tests/cuda/fake_cudart.c,
 * which exports fake_cuda_lock_note), so that the fake can flag a blocking
 * call made while the calling thread holds the lock. Thread-safe.
 */
void rl__test_lock_note(int delta);
/*
 * The pipeline locks the calling thread holds now (the notes above,
 * counted per thread). The core's rule (core/pipeline_internal.h) is that none is held
 * while it calls into a source; rl__test_unlocked checks it before each
 * such call and, when a lock is held, writes which call on stderr and
 * aborts: a test build fails loudly where a user's build might deadlock
 * with a source that has a lock of its own.
 */
int rl__test_locks_held(void);
void rl__test_unlocked(const char *call);
#else
static inline bool rl__test_hook(const char *var, const char *value)
{
    (void)var;
    (void)value;
    return false;
}
static inline void rl__test_lock_note(int delta)
{
    (void)delta;
}
static inline void rl__test_unlocked(const char *call)
{
    (void)call;
}
#endif

#endif /* RL_TESTING_HOOKS_H */
