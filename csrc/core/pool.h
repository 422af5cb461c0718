/*
 * core/pool.h - a fixed pool of worker threads running queued tasks.
 *
 * The pool knows nothing of JPEG, files or Python. Each worker owns one
 * context made by ctx_create when the thread starts and freed by ctx_destroy
 * when it ends (the decode layer keeps one decompressor per thread there).
 * Tasks are intrusive: the caller embeds an rl_task in its own job struct, so
 * submitting never allocates and never fails.
 */
#ifndef RL_POOL_H
#define RL_POOL_H

#include "rl.h"

typedef struct rl_pool rl_pool;
typedef struct rl_task rl_task;

/* Runs on a worker thread; ctx is that thread's context. Must not block on
 * other tasks of the same pool. */
typedef void (*rl_task_fn)(rl_task *task, void *ctx);

struct rl_task {
    rl_task_fn fn;
    rl_task *next; /* owned by the pool while queued */
};

/*
 * Starts nthreads workers (1..256). ctx_create/ctx_destroy may be NULL;
 * ctx_create is called with arg on each new worker.
 * Returns the pool, or NULL with errno set (EINVAL, ENOMEM, EAGAIN); on
 * failure no thread is left running.
 */
rl_pool *rl_pool_create(int nthreads, void *(*ctx_create)(void *arg),
                        void (*ctx_destroy)(void *), void *arg);

/*
 * Queues task (FIFO). Thread-safe, never blocks for long, never fails.
 * The task struct must stay valid until its fn has returned.
 */
void rl_pool_submit(rl_pool *pool, rl_task *task);

/* Number of worker threads. */
int rl_pool_size(const rl_pool *pool);

/*
 * Runs every task still queued, then stops and joins the workers and frees
 * the pool. Accepts NULL. Must not be called from a worker thread.
 */
void rl_pool_destroy(rl_pool *pool);

#endif /* RL_POOL_H */
