/*
 * deliver/deliver.h - the deliver stage: batch slot memory, and moving a
 * finished batch to where the consumer computes.
 *
 * Host delivery (deliver/host.c) gives page-aligned host memory and does
 * nothing when a slot completes: the consumer reads the slot itself. CUDA
 * delivery (deliver/cuda.c) gives pinned memory (cudaHostAlloc) and, when
 * a slot completes, copies it asynchronously into the device buffer given
 * with the batch, on the copy stream handed over once at creation, and
 * records an event; the consumer's stream is then made to wait for that
 * event (the host never blocks), and the slot is refilled only once the
 * event has completed. The pipeline (core/pipeline.c) owns the slots and
 * their state machine and calls these functions at its transitions.
 *
 * Threading: alloc/free/reusable/handoff are called with the pipeline's
 * lock held or by its owner; complete is called by the worker that
 * finished the slot, without the lock. None touches Python. Statuses: 0,
 * -ENOMEM, RL_ECUDA with msg (RL_MSG_MAX bytes).
 */
#ifndef RL_DELIVER_H
#define RL_DELIVER_H

#include "rl.h"

typedef struct rl_deliver rl_deliver;

typedef struct rl_deliver_ops {
    /* Memory for a slot of n bytes (n a multiple of 4096). */
    int (*alloc)(rl_deliver *d, size_t n, uint8_t **mem);
    /* Frees a slot's memory and its event (waiting for the event's copy
     * first). Accepts NULL. */
    void (*free)(rl_deliver *d, uint8_t *mem, void *event);
    /* The slot's n bytes are final: start moving them to dst (NULL on the
     * host path) and record *event (made on first use). */
    int (*complete)(rl_deliver *d, const uint8_t *mem, size_t n, void *dst,
                    void **event, char *msg);
    /* 0 when the slot's memory may be refilled, RL_ETIMEDOUT while its copy
     * runs; with wait, blocks until it may. */
    int (*reusable)(rl_deliver *d, void *event, bool wait);
    /* Makes later work on the consumer's stream wait for the slot's copy. */
    int (*handoff)(rl_deliver *d, void *event, uintptr_t consumer_stream,
                   char *msg);
    void (*destroy)(rl_deliver *d);
} rl_deliver_ops;

struct rl_deliver {
    const rl_deliver_ops *ops;
    bool device;   /* batches end on a device: submit gives a dst */
    int allocated; /* slots whose memory is allocated now */
};

/* Host memory. Returns NULL when out of memory. */
rl_deliver *rl_deliver_host_create(void);

/*
 * CUDA device `device`, copies on `copy_stream` (a cudaStream_t handle of
 * the caller's, e.g. a torch.cuda.Stream's). Loads the runtime
 * (deliver/cudart.h) and checks the device exists. Returns NULL with msg
 * saying why.
 */
rl_deliver *rl_deliver_cuda_create(int device, uintptr_t copy_stream,
                                   char *msg);

/* Frees the delivery (after every slot was freed). Accepts NULL. */
void rl_deliver_destroy(rl_deliver *d);

#endif /* RL_DELIVER_H */
