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
#else
static inline bool rl__test_hook(const char *var, const char *value)
{
    (void)var;
    (void)value;
    return false;
}
#endif

#endif /* RL_TESTING_HOOKS_H */
