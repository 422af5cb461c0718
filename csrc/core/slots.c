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
 * back to FREE once its event completed (checked under mu without
 * waiting). When submit finds no FREE slot it takes the oldest COPYING one
 * straight to FILLING, waiting for its copy with mu released. FREE slots
 * sit on the free list; FILLING/READY ones belong to a batch; HANDED_OUT
 * ones belong to whoever holds references (tensors). A handed out slot
 * also holds a reference on the pipeline, so a consumer may release it
 * after rl_pipeline_destroy(): the memory then goes back to the system.
 *
 * Nothing that may block on the device runs under mu: pinned memory is
 * allocated and freed, and a copy waited for, by a thread that took the
 * slot off every list first (a FILLING slot of a batch not yet queued, or
 * slots detached at destroy), so no other thread can reach it meanwhile.
 * The pool of slots grows to one per batch in flight plus those copying:
 * prefetch + 1 in a loader's steady state, each sized at its first batch.
 *
 * A varying batch's slot is an arena (core/pipeline.h's arena_bytes): each
 * sample reserves its bytes with a compare-and-swap once its size is known
 * (rl__slot_reserve), so samples finishing in any order never wait on one
 * another. The arena ends at arena_bytes exactly, not at the slot's
 * page-rounded size: on a device its reserved bytes are copied into a
 * buffer of arena_bytes. A sample that does not fit gets its own buffer
 * (ordinary, pageable memory), which the slot keeps (rl__placed) and
 * frees when it is put back or freed, as it frees the arena's
 * reservations (used back to 0). With a device delivery next() copies
 * each such sample into the batch's spill buffer (rl__slot_spill) after
 * the arena, on the copy stream, and records the slot's event after the
 * last copy; the own buffers are then read by copies in flight, so a
 * COPYING slot keeps them until its event completed (reclaim_copied, the
 * wait in rl__slot_take, slot_free), never freeing them at put.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/pipeline_internal.h"

#define SLOT_ALIGN 4096

/* A varying slot's samples forgotten: their own buffers freed, the arena
 * empty again. */
static void slot_clear(rl_slot *s)
{
    for (int i = 0; s->placed != NULL && i < s->ncap; i++) {
        free(s->placed[i].own);
        s->placed[i] = (rl__placed){0};
    }
    atomic_store(&s->used, 0);
}

/* Frees a slot off every list; waits for its copy first (which may read
 * its samples past the arena). Without mu. */
static void slot_free(rl_pipeline *p, rl_slot *s)
{
    rl_deliver *d = p->cfg.deliver;
    d->ops->free(d, s->data, s->event);
    slot_clear(s);
    free(s->placed);
    free(s);
}

int rl__slot_reserve(rl_slot *s, int pos, const rl_place_config *place,
                     int out_w, int out_h, rl_dst *dst, char *msg)
{
    rl_pipeline *p = s->p;
    rl_place_config c = *place;
    c.out_w = out_w;
    c.out_h = out_h;
    size_t bytes = rl_place_sample_bytes(&c);
    size_t span = (bytes + RL_PLACE_VIEW_ALIGN - 1) / RL_PLACE_VIEW_ALIGN *
                  RL_PLACE_VIEW_ALIGN;
    size_t arena = p->cfg.arena_bytes; /* not s->cap, rounded up to pages */
    rl__placed *at = &s->placed[pos];
    free(at->own); /* an earlier candidate's, past the arena */
    at->own = NULL;
    /* Advanced only when the sample's bytes fit: one past the arena leaves
     * its room to the smaller samples after it. A sample ending within the
     * last alignment step fills the arena (used stops at arena_bytes). */
    size_t off = atomic_load(&s->used);
    bool fits = false;
    while (!fits && off <= arena && bytes <= arena - off) {
        size_t end = span <= arena - off ? off + span : arena;
        fits = atomic_compare_exchange_weak(&s->used, &off, end);
    }
    if (fits) {
        at->data = s->data + off;
    } else if (p->cfg.deliver->device && p->cfg.spill_alloc == NULL) {
        /* The arena is all that is copied to the device. */
        at->data = NULL;
        snprintf(msg, RL_MSG_MAX,
                 "a %dx%d sample (%zu bytes) does not fit in what is left of "
                 "its batch's arena of %zu bytes, and this device delivery "
                 "has no spill buffer: raise arena_bytes",
                 out_w, out_h, bytes, arena);
        return -ENOMEM;
    } else if ((at->own = aligned_alloc(RL_PLACE_VIEW_ALIGN, span)) != NULL) {
        at->data = at->own;
        atomic_fetch_add(&p->n_past_arena, 1);
    } else {
        at->data = NULL;
        snprintf(msg, RL_MSG_MAX,
                 "out of memory for a %dx%d sample (%zu bytes) past its "
                 "batch's arena of %zu bytes",
                 out_w, out_h, bytes, arena);
        return -ENOMEM;
    }
    at->bytes = bytes;
    at->w = out_w;
    at->h = out_h;
    rl_place_dst(&c, at->data, dst);
    return 0;
}

int rl__slot_spill(rl_pipeline *p, rl_slot *s, rl_batch_report *rep)
{
    char *msg = rep->error.msg;
    char why[RL_MSG_MAX] = "";
    int spilled = 0;
    for (int i = 0; i < rep->n; i++) {
        spilled += rep->places[i].spilled;
    }
    int rc = p->cfg.spill_alloc(p->cfg.spill_arg, rep->spill_bytes, &rep->spill,
                                &rep->spill_owner, why);
    if (rc != 0) {
        snprintf(msg, RL_MSG_MAX,
                 "%d samples past the arena of %zu bytes (raise "
                 "arena_bytes) need a device buffer of %zu bytes: %.100s",
                 spilled, p->cfg.arena_bytes, rep->spill_bytes, why);
        return rc;
    }
    /* After the arena's copy on the one copy stream; the event recorded
     * after each copy, so after the last one it covers them all. */
    rl_deliver *d = p->cfg.deliver;
    for (int i = 0; i < rep->n && rc == 0; i++) {
        const rl_sample_place *at = &rep->places[i];
        if (at->spilled) {
            rc = d->ops->complete(d, s->placed[i].own, s->placed[i].bytes,
                                  (uint8_t *)rep->spill + at->offset, &s->event,
                                  msg);
        }
    }
    return rc;
}

/* Room in s, a slot ours alone (FILLING, on no list) and cleared, to say
 * where n varying samples went. 0 or -ENOMEM. */
static int slot_placed(rl_slot *s, int n)
{
    if (s->ncap >= n) {
        return 0;
    }
    rl__placed *placed = calloc((size_t)n, sizeof(*placed));
    if (placed == NULL) {
        return -ENOMEM;
    }
    free(s->placed); /* cleared: no own buffer left to free */
    s->placed = placed;
    s->ncap = n;
    return 0;
}

/* Moves slots whose copy completed from the copying list to the free
 * list, without waiting. With mu held. */
static void reclaim_copied(rl_pipeline *p)
{
    rl_deliver *d = p->cfg.deliver;
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
        slot_clear(s); /* its copies ran: its samples past the arena go */
        s->state = SLOT_FREE;
        s->next_free = p->free_slots;
        p->free_slots = s;
    }
}

int rl__slot_take(rl_pipeline *p, size_t need, int n, rl_slot **out)
{
    rl_deliver *d = p->cfg.deliver;
    rl_slot *s = NULL;
    bool wait = false;
    if (d->device) {
        reclaim_copied(p);
    }
    if (p->free_slots != NULL) {
        s = p->free_slots;
        p->free_slots = s->next_free;
    } else if (d->device && p->copying != NULL) {
        /* A pinned slot is refilled only once its copy completed; rather
         * than growing, take the oldest copy (it is short) and wait. */
        s = p->copying;
        p->copying = s->next_free;
        if (p->copying == NULL) {
            p->copying_tail = NULL;
        }
        s->copying = false;
        wait = true;
    } else if ((s = calloc(1, sizeof(*s))) == NULL) {
        return -ENOMEM;
    } else {
        s->p = p;
    }
    s->state = SLOT_FILLING; /* ours alone: on no list */
    s->next_free = NULL;
    if (!wait && p->varying && slot_placed(s, n) != 0) {
        rl__slot_put(p, s);
        return -ENOMEM;
    }
    if (!wait && s->cap >= need) {
        *out = s;
        return 0;
    }
    rl__unlock(p);
    int rc = 0;
    if (wait) {
        /* Its copies may still read the arena and its samples past it:
         * those are freed, and their record replaced, only after. */
        d->ops->reusable(d, s->event, true);
        slot_clear(s);
        rc = p->varying ? slot_placed(s, n) : 0;
    }
    if (rc == 0 && s->cap < need && need > SIZE_MAX - (SLOT_ALIGN - 1)) {
        rc = -ENOMEM; /* no rounding up past the address space */
    } else if (rc == 0 && s->cap < need) {
        size_t cap = (need + SLOT_ALIGN - 1) / SLOT_ALIGN * SLOT_ALIGN;
        uint8_t *data = NULL;
        rc = d->ops->alloc(d, cap, &data);
        if (rc == 0) {
            d->ops->free(d, s->data, NULL);
            s->data = data;
            s->cap = cap;
        }
    }
    rl__lock(p);
    if (rc != 0) {
        rl__slot_put(p, s);
        return -ENOMEM;
    }
    *out = s;
    return 0;
}

void rl__slot_put(rl_pipeline *p, rl_slot *s)
{
    if (!s->copying || p->break_spill) {
        slot_clear(s); /* else once its copy completed */
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
    rl__lock(p);
    rl_slot *free_slots = p->free_slots, *copying = p->copying;
    p->free_slots = p->copying = p->copying_tail = NULL;
    rl__unlock(p);
    while (free_slots) {
        rl_slot *s = free_slots;
        free_slots = s->next_free;
        slot_free(p, s);
    }
    while (copying) { /* the delivery waits for each copy to finish */
        rl_slot *s = copying;
        copying = s->next_free;
        slot_free(p, s);
    }
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
    free(p->views);
    free(p->image_at);
    free(p->image_len);
    for (int i = 0; p->refusals != NULL && p->refusals[i] != NULL; i++) {
        free(p->refusals[i]);
    }
    free(p->refusals);
    free(p->parts);
    free(p->plan_boxes);
    free(p->plan_box_offsets);
    rl__checks_free(p);
    rl_shard_records_destroy(p->cfg.field_records);
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

uint8_t *rl_slot_sample(const rl_slot *s, int i, int *w, int *h)
{
    if (s->placed == NULL || i < 0 || i >= s->n) {
        return NULL;
    }
    *w = s->placed[i].w;
    *h = s->placed[i].h;
    return s->placed[i].data;
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
    rl__lock(p);
    bool closed = p->closed;
    if (!closed) {
        rl__slot_put(p, s);
    }
    rl__unlock(p);
    if (closed) {
        slot_free(p, s); /* after destroy: back to the system, now */
    }
    rl__pipeline_unref(p);
}
