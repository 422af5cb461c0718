/* test_pool.c - every task runs exactly once, on a worker with its own
 * context (made with the pool's arg); destroy drains the queue; many
 * create/destroy cycles. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "core/pool.h"
#include "check.h"

typedef struct {
    rl_task task;
    atomic_int *runs;
    int ran;
    void *ctx;
} item;

static atomic_int contexts_made, contexts_freed, wrong_args;
static int pool_arg; /* its address is what ctx_new must receive */

static void *ctx_new(void *arg)
{
    if (arg != &pool_arg) {
        atomic_fetch_add(&wrong_args, 1);
    }
    atomic_fetch_add(&contexts_made, 1);
    return malloc(16);
}

static void ctx_free(void *c)
{
    atomic_fetch_add(&contexts_freed, 1);
    free(c);
}

static void run(rl_task *t, void *ctx)
{
    item *it = (item *)t;
    it->ran++;
    it->ctx = ctx;
    atomic_fetch_add(it->runs, 1);
}

int main(void)
{
    enum { N = 20000 };
    static item items[N];
    atomic_int runs = 0;
    rl_pool *pool = rl_pool_create(4, ctx_new, ctx_free, &pool_arg);
    CHECK(pool != NULL);
    CHECK_EQ(rl_pool_size(pool), 4);
    for (int i = 0; i < N; i++) {
        items[i].task.fn = run;
        items[i].runs = &runs;
        rl_pool_submit(pool, &items[i].task);
    }
    rl_pool_destroy(pool); /* drains */
    CHECK_EQ(atomic_load(&runs), N);
    for (int i = 0; i < N; i++) {
        CHECK_EQ(items[i].ran, 1);
        CHECK(items[i].ctx != NULL);
    }
    CHECK_EQ(atomic_load(&contexts_made), 4);
    CHECK_EQ(atomic_load(&contexts_freed), 4);
    CHECK_EQ(atomic_load(&wrong_args), 0); /* each worker got arg */

    CHECK(rl_pool_create(0, NULL, NULL, NULL) == NULL);
    rl_pool_destroy(NULL);

    for (int c = 0; c < 300; c++) {
        pool = rl_pool_create(1 + c % 3, NULL, NULL, NULL);
        CHECK(pool != NULL);
        items[0].ran = 0;
        rl_pool_submit(pool, &items[0].task);
        rl_pool_destroy(pool);
        CHECK_EQ(items[0].ran, 1);
    }
    PASS("test_pool");
}
