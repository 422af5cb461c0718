/*
 * core/slots.c - batch slots: their memory (from the deliver stage) and
 * their states.
 *
 * DESIGN. The slot state machine (the only place it is written down):
 *
 *   FREE ------submit------> FILLING ---last job---> READY
 *     ^                        |                       |
 *     |  cancel / failed batch |                       | next()
 *     +------------------------+-----------------------+
 *     |                                                v
 *     +-------------- last rl_slot_release ------ HANDED_OUT
 *
 * With a device delivery next() does not hand the slot out: its copy was
 * issued when it became READY, so it goes to COPYING, oldest first, and
 * back to FREE once its event completed. FREE slots sit on the free list;
 * FILLING/READY ones belong to a batch; HANDED_OUT ones belong to whoever
 * holds references (tensors). A handed out slot also holds a reference on
 * the pipeline, so a consumer may release it after rl_pipeline_destroy():
 * the memory then goes back to the system.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <unistd.h>

#include "core/ring.h"

#define SLOT_ALIGN 4096

static void slot_free(rl_pipeline *p, rl_slot *s)
{
    rl_deliver *d = p->cfg.deliver;
    d->ops->free(d, s->data, s->event);
    free(s);
}

/* Moves slots whose copy completed from the copying list to the free
 * list; with `wait`, first waits for the oldest one. */
static void reclaim_copied(rl_pipeline *p, bool wait)
{
    rl_deliver *d = p->cfg.deliver;
    if (wait && p->copying != NULL) {
        d->ops->reusable(d, p->copying->event, true);
    }
    while (p->copying != NULL) {
        rl_slot *s = p->copying;
        if (d->ops->reusable(d, s->event, false) != 0) {
            break; /* copies complete in order on the one copy stream */
        }
        p->copying = s->next_free;
        if (p->copying == NULL) {
            p->copying_tail = NULL;
        }
        s->copying = false;
        s->state = SLOT_FREE;
        s->next_free = p->free_slots;
        p->free_slots = s;
    }
}

rl_slot *rl__slot_take(rl_pipeline *p, size_t need)
{
    rl_deliver *d = p->cfg.deliver;
    if (d->device) {
        /* A pinned slot is refilled only once its copy has completed;
         * rather than growing, wait for the oldest copy (it is short). */
        reclaim_copied(p, false);
        if (p->free_slots == NULL) {
            reclaim_copied(p, true);
        }
    }
    rl_slot *s = p->free_slots;
    if (s != NULL) {
        p->free_slots = s->next_free;
    } else {
        s = calloc(1, sizeof(*s));
        if (s == NULL) {
            return NULL;
        }
        s->p = p;
    }
    if (s->cap < need) {
        size_t cap = (need + SLOT_ALIGN - 1) / SLOT_ALIGN * SLOT_ALIGN;
        uint8_t *data = NULL;
        if (d->ops->alloc(d, cap, &data) != 0) {
            s->next_free = p->free_slots;
            p->free_slots = s;
            return NULL;
        }
        d->ops->free(d, s->data, NULL);
        s->data = data;
        s->cap = cap;
    }
    s->state = SLOT_FILLING;
    s->next_free = NULL;
    return s;
}

void rl__slot_put(rl_pipeline *p, rl_slot *s)
{
    if (p->closed) {
        slot_free(p, s);
        return;
    }
    if (s->copying) {
        s->state = SLOT_COPYING;
        s->next_free = NULL;
        if (p->copying_tail) {
            p->copying_tail->next_free = s;
        } else {
            p->copying = s;
        }
        p->copying_tail = s;
        return;
    }
    s->state = SLOT_FREE;
    s->next_free = p->free_slots;
    p->free_slots = s;
}

void rl__slots_free_all(rl_pipeline *p)
{
    while (p->free_slots) {
        rl_slot *s = p->free_slots;
        p->free_slots = s->next_free;
        slot_free(p, s);
    }
    while (p->copying) { /* the delivery waits for each copy to finish */
        rl_slot *s = p->copying;
        p->copying = s->next_free;
        slot_free(p, s);
    }
    p->copying_tail = NULL;
}

void rl__pipeline_unref(rl_pipeline *p)
{
    if (atomic_fetch_sub(&p->refs, 1) != 1) {
        return;
    }
    rl__slots_free_all(p);
    rl_deliver_destroy(p->cfg.deliver);
    pthread_cond_destroy(&p->io_cv);
    pthread_cond_destroy(&p->done_cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

uint8_t *rl_slot_data(const rl_slot *s)
{
    return s->data;
}

int rl_slot_count(const rl_slot *s)
{
    return s->n;
}

void rl_slot_retain(rl_slot *s)
{
    atomic_fetch_add(&s->refs, 1);
}

bool rl_pipeline_forked(const rl_pipeline *p)
{
    return getpid() != p->pid;
}

void rl_slot_release(rl_slot *s)
{
    if (atomic_fetch_sub(&s->refs, 1) != 1) {
        return;
    }
    rl_pipeline *p = s->p;
    if (rl_pipeline_forked(p)) {
        return; /* a forked child: the parent's lock may be held forever */
    }
    pthread_mutex_lock(&p->mu);
    rl__slot_put(p, s);
    pthread_mutex_unlock(&p->mu);
    rl__pipeline_unref(p);
}
