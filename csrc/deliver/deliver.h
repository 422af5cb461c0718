/*
 * deliver/deliver.h - the deliver stage: batch slot memory, and moving a
 * finished batch to where the consumer computes.
 *
 * Host delivery (deliver/host.c) gives page-aligned host memory and does
 * nothing when a slot completes: the consumer reads the slot itself. CUDA
 * delivery (deliver/cuda.c) gives pinned memory (cudaHostAlloc) and, when
 * a slot completes, copies it asynchronously into the device buffer given
 * with the batch, on a copy stream of its own (created non-blocking with
 * the delivery, destroyed with it), and records an event; the consumer's stream is then made to wait for that
 * event (the host never blocks), and the slot is refilled only once the
 * event has completed. The pipeline (core/pipeline.c) owns the slots and
 * their state machine and calls these functions at its transitions.
 *
 * Threading: alloc, free, reusable(wait) and handoff may block (pinned
 * allocation synchronises the device; a wait waits for a copy): the
 * pipeline calls them without its lock, on a slot only the calling thread
 * holds; reusable without wait never blocks and may be called under the
 * lock. complete is called by the worker that finished the slot, without
 * the lock, and for the samples past a varying batch's arena by next(), on
 * the user's thread (a pageable source may make the runtime stage it). alloc, free and handoff may run on a user's thread: a device
 * made current for them is restored before they return. None touches
 * Python. Statuses: 0, -ENOMEM, RL_ECUDA with msg (RL_MSG_MAX bytes).
 */
#ifndef RL_DELIVER_H
#define RL_DELIVER_H

#include <stdatomic.h>

#include "rl.h"

typedef struct rl_deliver rl_deliver;

typedef struct rl_deliver_ops {
    /* Memory for a slot of n bytes (n a multiple of 4096). */
    int (*alloc)(rl_deliver *d, size_t n, uint8_t **mem);
    /* Frees a slot's memory and its event (waiting for the event's copy
     * first). Accepts NULL. */
    void (*free)(rl_deliver *d, uint8_t *mem, void *event);
    /* The slot's n bytes are final: start moving them to dst (NULL on the
     * host path) and record *event (made on first use) after the copy.
     * Called again for a varying batch's samples past its arena (mem then
     * a sample's own, pageable buffer, which the pipeline keeps until the
     * event completed: core/slots.c's rl__slot_spill), on the same
     * stream: the event recorded last covers every copy. */
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
    bool device;          /* batches end on a device: submit gives a dst */
    atomic_int allocated; /* slots whose memory is allocated now */
};

/* Host memory. Returns NULL when out of memory. */
rl_deliver *rl_deliver_host_create(void);

/*
 * CUDA device `device`. Loads the runtime (deliver/cudart.h), checks the
 * device exists and creates the copy stream (non-blocking), which the
 * delivery owns. Returns NULL with msg saying why. May be called on a
 * user's thread: its current device is left as it was.
 */
rl_deliver *rl_deliver_cuda_create(int device, char *msg);

/*
 * The copy stream's cudaStream_t handle (0 for a host delivery): the
 * caller may wrap it (torch.cuda.ExternalStream) to allocate the device
 * buffers on it; it lives as long as the delivery.
 */
uintptr_t rl_deliver_cuda_stream(const rl_deliver *d);

/* Frees the delivery (after every slot was freed). Accepts NULL. */
void rl_deliver_destroy(rl_deliver *d);

#endif /* RL_DELIVER_H */
