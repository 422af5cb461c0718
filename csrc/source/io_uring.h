/*
 * source/io_uring.h - the io_uring backend, used by source/io.c only; it
 * calls nothing of io.c (a request's bookkeeping is source/read.c's).
 *
 * source/io_uring.c is the only file that includes liburing.h. Built without
 * liburing (RL_HAVE_LIBURING undefined), the stubs below report ENOSYS, so
 * source/io.c needs no #ifdef of its own.
 */
#ifndef RL_IO_URING_H
#define RL_IO_URING_H

#include "source/read.h"

typedef struct rl__uring rl__uring;

#ifdef RL_HAVE_LIBURING
/* Returns a ring of `entries` entries, or NULL with -errno in *err. */
rl__uring *rl__uring_create(unsigned entries, int *err);
void rl__uring_destroy(rl__uring *u);
/*
 * Reads every request whose fd is already open (r->fd >= 0, r->buf sized
 * r->want); requests are completed through done(). Retries short reads,
 * -EAGAIN and -EINTR.
 */
void rl__uring_read(rl__uring *u, rl_read **reqs, int n, rl_read_done_fn done,
                    void *arg);
/* True once the ring failed and could not be re-created. */
bool rl__uring_broken(const rl__uring *u);
#else
#include <errno.h>
#include <stddef.h>
static inline rl__uring *rl__uring_create(unsigned entries, int *err)
{
    (void)entries;
    *err = -ENOSYS;
    return NULL;
}
static inline void rl__uring_destroy(rl__uring *u)
{
    (void)u;
}
static inline void rl__uring_read(rl__uring *u, rl_read **reqs, int n,
                                  rl_read_done_fn done, void *arg)
{
    (void)u;
    for (int i = 0; i < n; i++) {
        reqs[i]->status = -ENOSYS;
        done(reqs[i], arg);
    }
}
static inline bool rl__uring_broken(const rl__uring *u)
{
    (void)u;
    return true;
}
#endif

#endif /* RL_IO_URING_H */
