/*
 * source/faults.h - injected I/O faults, for tests only.
 *
 * A test build (RINGLOADER_TEST_HOOKS=1, which defines RL_TEST_HOOKS) reads
 * RINGLOADER_IO_FAULTS, e.g. "short=0.3,eagain=0.1,eintr=0.1,eio=0.01,
 * seed=1": each read attempt of either backend is, with the given
 * probability, cut short (a random part of the bytes asked), or fails with
 * EAGAIN, EINTR or EIO as the kernel would report it. The first three must
 * be invisible to callers (same bytes, status 0); EIO fails that request
 * with -EIO. The variable is read once per process; an unparsable value is
 * ignored with a line on stderr. What users install has none of this: the
 * stubs below make every check a constant false.
 */
#ifndef RL_FAULTS_H
#define RL_FAULTS_H

#include "rl.h"

/* The kinds of injected fault. */
typedef enum {
    RL__FAULT_NONE = 0,
    RL__FAULT_SHORT,  /* read fewer bytes than asked */
    RL__FAULT_EAGAIN, /* fail the attempt with -EAGAIN */
    RL__FAULT_EINTR,  /* ... with -EINTR */
    RL__FAULT_EIO,    /* ... with -EIO */
} rl__fault;

#ifdef RL_TEST_HOOKS
/* True when RINGLOADER_IO_FAULTS asks for faults; parses it on first use.
 * Thread-safe. */
bool rl__io_faults_on(void);

/*
 * The fault for a read attempt of `want` bytes: a pure function of the seed
 * and `counter`, a number the caller never repeats (a per-context counter,
 * or an atomic one). For RL__FAULT_SHORT, *shorter is the shortened length,
 * in [1, want); a read of one byte is never shortened. Call only when
 * rl__io_faults_on().
 */
rl__fault rl__io_fault_draw(uint64_t counter, size_t want, size_t *shorter);
#else
static inline bool rl__io_faults_on(void)
{
    return false;
}
static inline rl__fault rl__io_fault_draw(uint64_t counter, size_t want,
                                          size_t *shorter)
{
    (void)counter;
    (void)want;
    (void)shorter;
    return RL__FAULT_NONE;
}
#endif

#endif /* RL_FAULTS_H */
