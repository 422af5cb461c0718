/*
 * source/io.h - reading whole files (or byte ranges of them) into memory.
 *
 * Two backends give the same bytes: io_uring, which submits every read of a
 * batch in one system call from the pipeline's I/O thread, and pread, which
 * reads one file at a time on whichever thread asks (the pool's workers).
 * io_uring is probed once per process; it is used when the probe succeeds
 * and RINGLOADER_IO is not "pread". Short reads, EAGAIN and EINTR are
 * retried by both backends; any other failure is reported per request as a
 * negative errno. This layer knows nothing of JPEG or Python.
 *
 * Test builds can inject faults into every read attempt (source/faults.h).
 */
#ifndef RL_IO_H
#define RL_IO_H

#include "rl.h"
#include "source/read.h"

typedef enum {
    RL_IO_AUTO = 0, /* io_uring if it works and RINGLOADER_IO allows it */
    RL_IO_URING = 1,
    RL_IO_PREAD = 2,
} rl_io_backend;

/* A request, rl_read, and what the backends share of it: source/read.h. */

typedef struct rl_io rl_io;

/*
 * Creates an I/O context for one thread. want = RL_IO_AUTO or RL_IO_URING
 * falls back to pread when io_uring is unavailable, and then writes why into
 * why (RL_MSG_MAX bytes, may be NULL); otherwise why is set to "". Returns
 * NULL only when out of memory. Not thread-safe: one context per thread.
 */
rl_io *rl_io_create(rl_io_backend want, uint64_t max_file_bytes, char *why);

/* The backend actually in use: RL_IO_URING or RL_IO_PREAD. */
rl_io_backend rl_io_backend_of(const rl_io *io);

/*
 * Reads every request, calling done(r, arg) once per request on the calling
 * thread as each completes (in completion order, not request order). With
 * io_uring all reads are in flight together; with pread they run one by one.
 * Blocks until all are done.
 */
void rl_io_read_batch(rl_io *io, rl_read **reqs, int n, rl_read_done_fn done,
                      void *arg);

/* Reads one request with pread on the calling thread. Thread-safe. */
void rl_io_read_one(rl_read *r, uint64_t max_file_bytes);

/* Frees the context and its ring. Accepts NULL. */
void rl_io_destroy(rl_io *io);

/*
 * Probes io_uring once per process (later calls return the cached answer).
 * Returns true when a ring could be created; otherwise false with the
 * reason in why (RL_MSG_MAX bytes, may be NULL).
 */
bool rl_io_uring_probe(char *why);

#endif /* RL_IO_H */
