/*
 * core/io_thread.c - the I/O thread: it takes submitted batches in order
 * and starts their reads (core/pipeline_internal.h, rl__io_main).
 *
 * DESIGN. One thread per pipeline waits on the I/O queue. When the source
 * reads whole batches (io_uring) it submits every read of a batch at once
 * and, as each completes, hands that sample's job to the pool, so decoding
 * starts before the slowest read of the batch returns; otherwise it hands
 * the jobs to the pool at once and each worker reads its own sample
 * (core/jobs.c). The thread holds one part of each batch while it walks
 * the batch's jobs, so the batch cannot complete, and be freed, under it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/pipeline_internal.h"

/* CPU time of the calling thread, for the I/O stage's cost per image. */
static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void on_read(rl_fetch *f, void *arg)
{
    rl_pipeline *p = arg;
    rl__job *j = (rl__job *)((char *)f - offsetof(rl__job, fetch));
    rl_pool_submit(p->pool, &j->task);
}

static void dispatch(rl_pipeline *p, rl_batch *b)
{
    if (atomic_load(&b->cancelled) || p->cfg.source->ops->read_batch == NULL) {
        /* Cancelled jobs return at once; others read for themselves. */
        for (int i = 0; i < b->n; i++) {
            rl_pool_submit(p->pool, &b->jobs[i].task);
        }
        return;
    }
    rl_fetch *small[64];
    rl_fetch **fs = b->n <= 64 ? small : malloc(sizeof(*fs) * (size_t)b->n);
    if (fs == NULL) {
        for (int i = 0; i < b->n; i++) {
            b->jobs[i].fetch.status = -ENOMEM;
            snprintf(b->jobs[i].fetch.msg, RL_MSG_MAX, "out of memory");
            rl_pool_submit(p->pool, &b->jobs[i].task);
        }
        return;
    }
    for (int i = 0; i < b->n; i++) {
        fs[i] = &b->jobs[i].fetch;
    }
    uint64_t t0 = rl__now_ns(), c0 = thread_cpu_ns();
    rl__src_read_batch(p, fs, b->n, on_read, p);
    atomic_fetch_add(&p->io_cpu_ns, thread_cpu_ns() - c0);
    atomic_fetch_add(&p->read_ns, rl__now_ns() - t0);
    if (fs != small) {
        free(fs);
    }
}

void *rl__io_main(void *arg)
{
    rl_pipeline *p = arg;
    rl__lock(p);
    for (;;) {
        while (p->io_head == NULL && !p->stopping) {
            pthread_cond_wait(&p->io_cv, &p->mu);
        }
        rl_batch *b = p->io_head;
        if (b == NULL) {
            break;
        }
        p->io_head = b->io_next;
        if (p->io_head == NULL) {
            p->io_tail = NULL;
        }
        rl__unlock(p);
        dispatch(p, b);
        rl__batch_part_done(b); /* the dispatcher's own part */
        rl__lock(p);
    }
    rl__unlock(p);
    return NULL;
}
