/*
 * deliver/host.c - batches that stay in host memory.
 *
 * DESIGN: slots are page-aligned so that O_DIRECT-sized stores and SIMD
 * rows never straddle an allocation's odd start; a slot is handed to the
 * consumer as it is, so completing, reusing and handing off cost nothing.
 */
#include <errno.h>
#include <stdlib.h>

#include "deliver/deliver.h"

#define SLOT_ALIGN 4096

static int host_alloc(rl_deliver *d, size_t n, uint8_t **mem)
{
    *mem = aligned_alloc(SLOT_ALIGN, n);
    if (*mem == NULL) {
        return -ENOMEM;
    }
    atomic_fetch_add(&d->allocated, 1);
    return 0;
}

static void host_free(rl_deliver *d, uint8_t *mem, void *event)
{
    (void)event;
    if (mem != NULL) {
        free(mem);
        atomic_fetch_sub(&d->allocated, 1);
    }
}

static int host_complete(rl_deliver *d, const uint8_t *mem, size_t n, void *dst,
                         void **event, char *msg)
{
    (void)d;
    (void)mem;
    (void)n;
    (void)dst;
    (void)event;
    (void)msg;
    return 0;
}

static int host_reusable(rl_deliver *d, void *event, bool wait)
{
    (void)d;
    (void)event;
    (void)wait;
    return 0;
}

static int host_handoff(rl_deliver *d, void *event, uintptr_t consumer,
                        char *msg)
{
    (void)d;
    (void)event;
    (void)consumer;
    (void)msg;
    return 0;
}

static void host_destroy(rl_deliver *d)
{
    free(d);
}

static const rl_deliver_ops host_ops = {
    .alloc = host_alloc,
    .free = host_free,
    .complete = host_complete,
    .reusable = host_reusable,
    .handoff = host_handoff,
    .destroy = host_destroy,
};

rl_deliver *rl_deliver_host_create(void)
{
    rl_deliver *d = calloc(1, sizeof(*d));
    if (d != NULL) {
        d->ops = &host_ops;
        atomic_init(&d->allocated, 0);
    }
    return d;
}

void rl_deliver_destroy(rl_deliver *d)
{
    if (d != NULL) {
        d->ops->destroy(d);
    }
}
