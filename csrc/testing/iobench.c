/*
 * testing/iobench.c - the I/O layer alone, for the I/O benchmark.
 *
 * DESIGN: the same calls the pipeline makes (rl_io_read_batch on one thread
 * for io_uring, rl_io_read_one on pool-like threads for pread), with the
 * decoding taken out, so the two backends are compared on reading alone.
 * Work is handed out a batch at a time through one atomic counter.
 */
#define _GNU_SOURCE
#include "testing/iobench.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

typedef struct {
    rl_io_backend backend;
    bool direct;
    int batch, n;
    const char *const *paths;
    const uint64_t *offsets;
    const int64_t *lengths;
    atomic_int next;
    atomic_uint_fast64_t bytes;
    atomic_int status;
} bench;

static void count(rl_read *r, void *arg)
{
    bench *b = arg;
    if (r->status != 0) {
        int zero = 0;
        atomic_compare_exchange_strong(&b->status, &zero, r->status);
    } else {
        atomic_fetch_add(&b->bytes, r->len);
    }
    free(r->buf);
    r->buf = NULL;
}

static void *worker(void *arg)
{
    bench *b = arg;
    rl_io *io = rl_io_create(b->backend, RL_DEFAULT_MAX_FILE_BYTES, NULL);
    rl_read *reads = calloc((size_t)b->batch, sizeof(*reads));
    rl_read **reqs = calloc((size_t)b->batch, sizeof(*reqs));
    if (io == NULL || reads == NULL || reqs == NULL) {
        atomic_store(&b->status, -ENOMEM);
        goto out;
    }
    for (;;) {
        int first = atomic_fetch_add(&b->next, b->batch);
        if (first >= b->n) {
            break;
        }
        int k = b->n - first < b->batch ? b->n - first : b->batch;
        for (int i = 0; i < k; i++) {
            rl_read *r = &reads[i];
            *r = (rl_read){0};
            r->path = b->paths[first + i];
            r->offset = b->offsets ? b->offsets[first + i] : 0;
            r->length = b->lengths ? b->lengths[first + i] : -1;
            r->fd = -1;
            r->direct = b->direct;
            reqs[i] = r;
        }
        if (b->backend == RL_IO_URING) {
            rl_io_read_batch(io, reqs, k, count, b);
        } else {
            for (int i = 0; i < k; i++) {
                rl_io_read_one(reqs[i], RL_DEFAULT_MAX_FILE_BYTES);
                count(reqs[i], b);
            }
        }
    }
out:
    free(reads);
    free(reqs);
    rl_io_destroy(io);
    return NULL;
}

int rl_iobench_read(rl_io_backend backend, int threads, int batch, bool direct,
                    const char *const *paths, const uint64_t *offsets,
                    const int64_t *lengths, int n, uint64_t *bytes,
                    double *seconds)
{
    if (threads < 1 || threads > 256 || batch < 1 || n < 0) {
        return -EINVAL;
    }
    bench b = {.backend = backend,
               .direct = direct,
               .batch = batch,
               .n = n,
               .paths = paths,
               .offsets = offsets,
               .lengths = lengths};
    atomic_init(&b.next, 0);
    atomic_init(&b.bytes, 0);
    atomic_init(&b.status, 0);
    if (backend == RL_IO_URING) {
        threads = 1; /* one submitting thread, as in the pipeline */
    }
    pthread_t tid[256];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int started = 0;
    for (int i = 0; i < threads; i++) {
        if (pthread_create(&tid[i], NULL, worker, &b) != 0) {
            break;
        }
        started++;
    }
    for (int i = 0; i < started; i++) {
        pthread_join(tid[i], NULL);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    *seconds = (double)(t1.tv_sec - t0.tv_sec) +
               (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    *bytes = atomic_load(&b.bytes);
    return started == 0 ? -EAGAIN : atomic_load(&b.status);
}
