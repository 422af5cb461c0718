/*
 * source/io_uring.c - batched reads with io_uring (the only file that includes
 * liburing.h).
 *
 * DESIGN: one ring per I/O context, owned by one thread, so no locking. A
 * batch is pushed as one submission (as many SQEs as the ring holds), and
 * completions are reaped as they come; each completion either finishes its
 * request, or, for a short read, -EAGAIN or -EINTR, is queued again for the
 * remaining bytes. Requests keep their progress in r->len, so a retried read
 * continues where the last one stopped. This is the pattern the kernel's
 * own documentation asks for: a short read is not an error.
 *
 * Injected faults (test builds only, see source/faults.h) enter at the two points where
 * the kernel could produce them: a shortened length when an SQE is
 * prepared, and a rewritten cqe->res (-EAGAIN, -EINTR, -EIO) before the
 * completion is handled, so the real retry code is what gets tested.
 */
#define _GNU_SOURCE
#include "source/io_uring.h"

#include <errno.h>
#include <liburing.h>
#include <stdlib.h>

#include "source/faults.h"

struct rl__uring {
    struct io_uring ring;
    unsigned entries;
    bool faults;        /* RINGLOADER_IO_FAULTS is set */
    uint64_t fault_ctr; /* this ring's fault stream */
};

rl__uring *rl__uring_create(unsigned entries, int *err)
{
    rl__uring *u = calloc(1, sizeof(*u));
    if (u == NULL) {
        *err = -ENOMEM;
        return NULL;
    }
    int rc = io_uring_queue_init(entries, &u->ring, 0);
    if (rc < 0) {
        free(u);
        *err = rc;
        return NULL;
    }
    u->entries = entries;
    u->faults = rl__io_faults_on();
    /* Apart from the pread streams of source/io.c, which count from 0. */
    u->fault_ctr = (uint64_t)1 << 62;
    *err = 0;
    return u;
}

bool rl__uring_broken(const rl__uring *u)
{
    return u->entries == 0;
}

void rl__uring_destroy(rl__uring *u)
{
    if (u == NULL) {
        return;
    }
    if (u->entries > 0) {
        io_uring_queue_exit(&u->ring);
    }
    free(u);
}

/* Queues the read of r's remaining bytes; false when the SQ is full. */
static bool queue_read(rl__uring *u, rl_read *r)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    if (sqe == NULL) {
        return false;
    }
    size_t left = r->want - r->len;
    if (u->faults) {
        size_t shorter;
        if (rl__io_fault_draw(u->fault_ctr++, left, &shorter) ==
            RL__FAULT_SHORT) {
            left = shorter;
        }
    }
    rl__read_align(r, &left);
    /* A single read is capped at 1 GiB by the kernel's rw limits anyway. */
    unsigned chunk = left > (1u << 30) ? (1u << 30) : (unsigned)left;
    io_uring_prep_read(sqe, r->fd, r->buf + r->len, chunk, r->start + r->len);
    io_uring_sqe_set_data(sqe, r);
    return true;
}

void rl__uring_read(rl__uring *u, rl_read **reqs, int n, rl_read_done_fn done,
                    void *arg)
{
    /* retry holds requests that must be queued again; it is reused as a
     * stack and never holds more than n entries. */
    rl_read **retry = malloc((size_t)(n > 0 ? n : 1) * sizeof(*retry));
    if (retry == NULL) {
        for (int i = 0; i < n; i++) {
            rl__read_finish(reqs[i], -ENOMEM);
            done(reqs[i], arg);
        }
        return;
    }
    int nretry = 0, next = 0;
    unsigned inflight = 0;

    while (next < n || nretry > 0 || inflight > 0) {
        /* Fill the submission queue: retries first, then new requests. */
        while (inflight < u->entries && (nretry > 0 || next < n)) {
            rl_read *r = nretry > 0 ? retry[nretry - 1] : reqs[next];
            if (!queue_read(u, r)) {
                break;
            }
            if (nretry > 0) {
                nretry--;
            } else {
                next++;
            }
            inflight++;
        }
        int rc = io_uring_submit_and_wait(&u->ring, inflight > 0 ? 1 : 0);
        if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
            /* The ring itself failed; what is still in flight cannot be
             * trusted to complete, so finish everything not yet done with
             * that error. In-flight SQEs are drained by queue_exit. */
            break;
        }

        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&u->ring, head, cqe)
        {
            rl_read *r = io_uring_cqe_get_data(cqe);
            int res = cqe->res;
            if (u->faults && res >= 0) {
                size_t unused;
                rl__fault f = rl__io_fault_draw(u->fault_ctr++, 0, &unused);
                res = f == RL__FAULT_EIO      ? -EIO
                      : f == RL__FAULT_EINTR  ? -EINTR
                      : f == RL__FAULT_EAGAIN ? -EAGAIN
                                              : res;
            }
            seen++;
            inflight--;
            if (res == -EAGAIN || res == -EINTR) {
                retry[nretry++] = r;
            } else if (res < 0) {
                rl__read_finish(r, res);
                done(r, arg);
            } else if (res == 0) {
                /* End of file before `want` bytes: an O_DIRECT read's
                 * aligned end, or the file shrank. */
                rl__read_finish(r,
                                r->length < 0 || rl__read_eof_ok(r) ? 0 : -EIO);
                done(r, arg);
            } else {
                r->len += (size_t)res;
                if (rl__read_direct_eof(r)) {
                    rl__read_finish(
                        r, rl__read_eof_ok(r) || r->length < 0 ? 0 : -EIO);
                    done(r, arg);
                } else if (r->len < r->want) {
                    retry[nretry++] = r;
                } else {
                    rl__read_finish(r, 0);
                    done(r, arg);
                }
            }
        }
        io_uring_cq_advance(&u->ring, seen);
    }

    /* Only reached early when the ring failed: fail what is left. */
    if (next < n || nretry > 0 || inflight > 0) {
        io_uring_queue_exit(&u->ring);
        /* Re-create so the context stays usable for the next batch. */
        if (io_uring_queue_init(u->entries, &u->ring, 0) < 0) {
            u->entries = 0;
        }
        for (int i = 0; i < n; i++) {
            if (reqs[i]->fd >= 0) {
                /* The kernel tears a ring down asynchronously: a read it
                 * had started may still land in this buffer, so it is
                 * leaked rather than freed (this path is rare). */
                reqs[i]->buf = NULL;
                rl__read_finish(reqs[i], -EIO);
                done(reqs[i], arg);
            }
        }
    }
    free(retry);
}
