/*
 * testing/hooks.c - the test build's switches (testing/hooks.h).
 */
#include "testing/hooks.h"

#include <stdlib.h>
#include <string.h>

bool rl__test_hook(const char *var, const char *value)
{
    const char *v = getenv(var);
    return v != NULL && strcmp(v, value) == 0;
}
