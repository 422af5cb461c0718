/*
 * testing/iobench.h - reading many files with each backend, and nothing else:
 * the measurement behind benchmarks/bench_io.py.
 */
#ifndef RL_IOBENCH_H
#define RL_IOBENCH_H

#include "source/io.h"

/*
 * Reads every source (path, offset, length; length -1 = whole file) in
 * batches of `batch`, as the pipeline does: with RL_IO_URING one thread
 * submits each batch at once; with RL_IO_PREAD `threads` threads each read
 * whole batches file by file. Buffers are freed as soon as read. Returns 0
 * with *bytes and *seconds, or the first failed read's status. Blocks.
 */
int rl_iobench_read(rl_io_backend backend, int threads, int batch, bool direct,
                    const char *const *paths, const uint64_t *offsets,
                    const int64_t *lengths, int n, uint64_t *bytes,
                    double *seconds);

#endif /* RL_IOBENCH_H */
