/*
 * core/pool.c - worker threads and a FIFO of intrusive tasks.
 *
 * DESIGN: one mutex guards the queue and the stop flag; workers sleep on one
 * condition variable. The queue is a singly linked list threaded through the
 * tasks themselves, so submitting is O(1), allocation-free and cannot fail.
 * Shutdown drains: a stopping pool still runs what was queued, because the
 * owners of those tasks (the pipeline) wait for their completion counts and
 * would otherwise wait forever. Cancellation is the owner's business (its
 * tasks see a flag and return at once), not the pool's.
 */
#define _GNU_SOURCE
#include "core/pool.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>

struct rl_pool {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    rl_task *head, *tail; /* guarded by mu */
    bool stopping;        /* guarded by mu */
    void *(*ctx_create)(void *arg);
    void (*ctx_destroy)(void *);
    void *ctx_arg;
    int nthreads;
    pthread_t threads[];
};

static void *worker_main(void *arg)
{
    rl_pool *pool = arg;
    void *ctx = pool->ctx_create ? pool->ctx_create(pool->ctx_arg) : NULL;

    pthread_mutex_lock(&pool->mu);
    for (;;) {
        while (pool->head == NULL && !pool->stopping) {
            pthread_cond_wait(&pool->cv, &pool->mu);
        }
        rl_task *task = pool->head;
        if (task == NULL) {
            break; /* stopping and drained */
        }
        pool->head = task->next;
        if (pool->head == NULL) {
            pool->tail = NULL;
        }
        pthread_mutex_unlock(&pool->mu);
        task->fn(task, ctx);
        pthread_mutex_lock(&pool->mu);
    }
    pthread_mutex_unlock(&pool->mu);

    if (pool->ctx_destroy) {
        pool->ctx_destroy(ctx);
    }
    return NULL;
}

rl_pool *rl_pool_create(int nthreads, void *(*ctx_create)(void *arg),
                        void (*ctx_destroy)(void *), void *arg)
{
    if (nthreads < 1 || nthreads > 256) {
        errno = EINVAL;
        return NULL;
    }
    rl_pool *pool = calloc(1, sizeof(*pool) + nthreads * sizeof(pthread_t));
    if (pool == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->cv, NULL);
    pool->ctx_create = ctx_create;
    pool->ctx_destroy = ctx_destroy;
    pool->ctx_arg = arg;

    /* Workers must never take the process's signals (SIGINT belongs to the
     * Python main thread), so they start with every signal blocked. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = 0;
    for (int i = 0; i < nthreads; i++) {
        rc = pthread_create(&pool->threads[i], NULL, worker_main, pool);
        if (rc != 0) {
            break;
        }
        pool->nthreads = i + 1;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);

    if (rc != 0) {
        rl_pool_destroy(pool);
        errno = rc;
        return NULL;
    }
    return pool;
}

void rl_pool_submit(rl_pool *pool, rl_task *task)
{
    task->next = NULL;
    pthread_mutex_lock(&pool->mu);
    if (pool->tail) {
        pool->tail->next = task;
    } else {
        pool->head = task;
    }
    pool->tail = task;
    pthread_cond_signal(&pool->cv);
    pthread_mutex_unlock(&pool->mu);
}

int rl_pool_size(const rl_pool *pool)
{
    return pool->nthreads;
}

void rl_pool_destroy(rl_pool *pool)
{
    if (pool == NULL) {
        return;
    }
    pthread_mutex_lock(&pool->mu);
    pool->stopping = true;
    pthread_cond_broadcast(&pool->cv);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 0; i < pool->nthreads; i++) {
        pthread_join(pool->threads[i], NULL);
    }
    pthread_cond_destroy(&pool->cv);
    pthread_mutex_destroy(&pool->mu);
    free(pool);
}
