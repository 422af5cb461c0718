/*
 * deliver/cuda.c - batches copied to a CUDA device from pinned slots.
 *
 * DESIGN: the worker that finishes a slot issues its cudaMemcpyAsync at
 * once, on the one copy stream, so the copy overlaps the decoding of the
 * batches behind it; copies on one stream complete in order, so the
 * pipeline checks only its oldest copying slot before refilling. The
 * consumer's stream waits on the slot's event: the host thread never
 * blocks on a copy. The copy stream is the delivery's own, created
 * non-blocking and destroyed with it: a stream of torch's pool could be
 * shared with other code (NCCL's), whose work our copies would then wait
 * behind. Pinned memory is allocated with the delivery's device current. Test builds can break two of these rules on purpose
 * (testing/hooks.h) to show that the fake runtime's checks catch it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "deliver/cudart.h"
#include "deliver/deliver.h"
#include "testing/hooks.h"

typedef struct cuda_deliver {
    rl_deliver base;
    int device;
    uintptr_t copy_stream; /* ours: made at creation, destroyed with us */
    bool break_wait, break_recycle; /* test hooks */
} cuda_deliver;

static int cuda_alloc(rl_deliver *d, size_t n, uint8_t **mem)
{
    cuda_deliver *c = (cuda_deliver *)d;
    void *p = NULL;
    if (rl_cuda_host_alloc(c->device, &p, n, NULL) != 0) {
        return -ENOMEM;
    }
    *mem = p;
    atomic_fetch_add(&d->allocated, 1);
    return 0;
}

static void cuda_free(rl_deliver *d, uint8_t *mem, void *event)
{
    cuda_deliver *c = (cuda_deliver *)d;
    if (event != NULL) {
        rl_cuda_event_sync(event, NULL);
        rl_cuda_event_destroy(event);
    }
    if (mem != NULL) {
        rl_cuda_host_free(c->device, mem);
        atomic_fetch_sub(&d->allocated, 1);
    }
}

static int cuda_complete(rl_deliver *d, const uint8_t *mem, size_t n, void *dst,
                         void **event, char *msg)
{
    cuda_deliver *c = (cuda_deliver *)d;
    return rl_cuda_copy_h2d(c->device, dst, mem, n, c->copy_stream, event, msg);
}

static int cuda_reusable(rl_deliver *d, void *event, bool wait)
{
    cuda_deliver *c = (cuda_deliver *)d;
    if (c->break_recycle || event == NULL) {
        return 0;
    }
    if (wait) {
        rl_cuda_event_sync(event, NULL);
        return 0;
    }
    return rl_cuda_event_query(event, NULL) == RL_ETIMEDOUT ? RL_ETIMEDOUT : 0;
}

static int cuda_handoff(rl_deliver *d, void *event, uintptr_t consumer,
                        char *msg)
{
    cuda_deliver *c = (cuda_deliver *)d;
    if (c->break_wait) {
        return 0;
    }
    return rl_cuda_stream_wait(c->device, consumer, event, msg);
}

static void cuda_destroy(rl_deliver *d)
{
    cuda_deliver *c = (cuda_deliver *)d;
    rl_cuda_stream_destroy(c->device, c->copy_stream);
    free(d);
}

static const rl_deliver_ops cuda_ops = {
    .alloc = cuda_alloc,
    .free = cuda_free,
    .complete = cuda_complete,
    .reusable = cuda_reusable,
    .handoff = cuda_handoff,
    .destroy = cuda_destroy,
};

rl_deliver *rl_deliver_cuda_create(int device, char *msg)
{
    int count = 0;
    if (rl_cuda_device_count(&count, msg) != 0) {
        return NULL;
    }
    if (device < 0 || device >= count) {
        snprintf(msg, RL_MSG_MAX, "CUDA device %d requested, %d present",
                 device, count);
        return NULL;
    }
    cuda_deliver *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        snprintf(msg, RL_MSG_MAX, "out of memory");
        return NULL;
    }
    if (rl_cuda_stream_create(device, &c->copy_stream, msg) != 0) {
        free(c);
        return NULL;
    }
    c->base.ops = &cuda_ops;
    c->base.device = true;
    atomic_init(&c->base.allocated, 0);
    c->device = device;
    c->break_wait = rl__test_hook("RINGLOADER_CUDA_BREAK", "wait");
    c->break_recycle = rl__test_hook("RINGLOADER_CUDA_BREAK", "recycle");
    return &c->base;
}

uintptr_t rl_deliver_cuda_stream(const rl_deliver *d)
{
    return d->device ? ((const cuda_deliver *)d)->copy_stream : 0;
}
