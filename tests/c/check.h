/* check.h - the few assertion macros the C unit tests share. A failed
 * check prints where and exits 1; exit 77 means "skipped" (liburing's
 * convention). */
#ifndef RL_TEST_CHECK_H
#define RL_TEST_CHECK_H

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

/* Atomic: checks run on several threads in some tests. */
static atomic_int rl_test_checks;

#define CHECK(cond)                                                          \
    do {                                                                     \
        rl_test_checks++;                                                    \
        if (!(cond)) {                                                       \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, \
                    #cond);                                                  \
            exit(1);                                                         \
        }                                                                    \
    } while (0)

#define CHECK_EQ(a, b)                                                \
    do {                                                              \
        long long a_ = (long long)(a), b_ = (long long)(b);           \
        rl_test_checks++;                                             \
        if (a_ != b_) {                                               \
            fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", \
                    __FILE__, __LINE__, #a, #b, a_, b_);              \
            exit(1);                                                  \
        }                                                             \
    } while (0)

#define PASS(name)                                                            \
    do {                                                                      \
        printf("%s: %d checks passed\n", name, atomic_load(&rl_test_checks)); \
        return 0;                                                             \
    } while (0)

#endif
