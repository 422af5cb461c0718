/*
 * core/pipeline.c - the owner's calls: create, submit, next, cancel, stats
 * and destroy (core/pipeline.h).
 *
 * DESIGN. Every batch sits on two lists: the delivery FIFO (submission
 * order, which is the order rl_pipeline_next() returns them in) and, until
 * the I/O thread takes it (core/io_thread.c), the I/O queue. next() waits
 * for the head of the FIFO, has its jobs' outcomes made into a report
 * (core/report.c), and hands out its slot (core/slots.c). What create is
 * given it checks and copies through core/config.c. Locking is described
 * in core/pipeline_internal.h.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/config.h"
#include "core/pipeline_internal.h"
#include "core/plan.h"
#include "core/report.h"
#include "rng.h"

/* The status of a thread that did not start (pthread_create's rc, an
 * errno): EAGAIN, no memory for its stack or the thread limit reached, is
 * reported as -ENOMEM, what the caller can lower being the same. */
static int thread_status(int rc)
{
    return rc == EAGAIN || rc == ENOMEM ? -ENOMEM : -rc;
}

rl_pipeline *rl_pipeline_create(const rl_pipeline_config *cfg, int *status,
                                char *msg)
{
    int dummy;
    status = status != NULL ? status : &dummy;
    *status = RL_ECONFIG;
    msg[0] = '\0';
    rl_pipeline *p = NULL;
    rl_deliver *deliver = cfg->deliver;
    if (!rl__config_ok(cfg, msg)) {
        goto out_free_stages;
    }
    if ((deliver == NULL && (deliver = rl_deliver_host_create()) == NULL) ||
        (p = calloc(1, sizeof(*p))) == NULL) {
        snprintf(msg, RL_MSG_MAX, "out of memory making a pipeline");
        *status = -ENOMEM;
        goto out_free_stages;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->io_cv, NULL);
    /* next() waits with deadlines on the monotonic clock. */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->done_cv, &ca);
    pthread_condattr_destroy(&ca);
    atomic_init(&p->refs, 1);
    p->pid = getpid();
    p->break_spill = rl__test_hook("RINGLOADER_CUDA_BREAK", "spill");
    p->cfg = *cfg;
    p->cfg.deliver = deliver;
    if (p->cfg.decoders.n == 0) {
        rl_decode_add_native(&p->cfg.decoders);
    }
    int rc = rl__config_copy(p, cfg, msg);
    if (rc != 0) {
        *status = rc;
        rl__src_destroy(p->cfg.source);
        rl__pipeline_unref(p); /* destroys the delivery */
        return NULL;
    }

    p->pool = rl_pool_create(cfg->nthreads, rl__worker_ctx_create,
                             rl__worker_ctx_destroy, p);
    if (p->pool == NULL) {
        rc = errno;
        snprintf(msg, RL_MSG_MAX,
                 "cannot start %d decode threads (%s): out of memory for "
                 "their stacks, or over the limit of threads a process may "
                 "have; lower num_threads",
                 cfg->nthreads, strerror(rc));
        *status = thread_status(rc);
        goto out_stop;
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&p->io_thread, NULL, rl__io_main, p);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        snprintf(msg, RL_MSG_MAX,
                 "cannot start the I/O thread (%s): out of memory for its "
                 "stack, or over the limit of threads a process may have; "
                 "lower num_threads (%d)",
                 strerror(rc), cfg->nthreads);
        *status = thread_status(rc);
        goto out_stop;
    }
    p->io_started = true;
    *status = 0;
    return p;

out_stop:
    rl_pool_destroy(p->pool);
    rl__src_destroy(p->cfg.source);
    rl__pipeline_unref(p); /* destroys the delivery */
    return NULL;
out_free_stages:
    rl__src_destroy(cfg->source);
    rl_shard_records_destroy(cfg->field_records);
    rl_deliver_destroy(deliver);
    return NULL;
}

const char *rl_pipeline_io_name(const rl_pipeline *p)
{
    return rl__src_backend(p, false);
}

const char *rl_pipeline_io_reason(const rl_pipeline *p)
{
    return rl__src_backend(p, true);
}

size_t rl_pipeline_sample_bytes(const rl_pipeline *p)
{
    return p->sample_bytes;
}

size_t rl_pipeline_batch_bytes(const rl_pipeline *p, int n)
{
    if (p->varying) {
        return p->cfg.arena_bytes;
    }
    int nv = p->cfg.sample.nviews;
    return rl_place_view_offset(p->places, nv, n, nv);
}

const rl_view *rl_pipeline_views(const rl_pipeline *p, int *n)
{
    *n = p->cfg.sample.nviews;
    return p->views;
}

int rl_pipeline_submit(rl_pipeline *p, const int64_t *ids, const int64_t *keys,
                       int n, int64_t epoch, void *dst, uint64_t *ticket)
{
    if (rl_pipeline_forked(p)) {
        return RL_ECLOSED;
    }
    if (n < 1 || n > (1 << 20) || (dst != NULL) != p->cfg.deliver->device) {
        return -EINVAL;
    }
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= p->cfg.source->count) {
            return -EINVAL;
        }
    }
    rl_batch *b = calloc(1, sizeof(*b) + sizeof(rl__job) * (size_t)n);
    if (b == NULL) {
        return -ENOMEM;
    }
    b->p = p;
    b->n = n;
    b->bytes = rl_pipeline_batch_bytes(p, n);
    b->epoch = epoch;
    b->dst = dst;
    atomic_init(&b->remaining, n + 1); /* + the dispatcher's part */
    atomic_init(&b->cancelled, false);
    for (int i = 0; i < n; i++) {
        rl__job_init(b, i, ids[i], keys[i]);
    }

    rl__lock(p);
    if (p->closed || p->stopping) {
        rl__unlock(p);
        rl__batch_free(b);
        return RL_ECLOSED;
    }
    int rc = rl__slot_take(p, b->bytes, n, &b->slot);
    if (rc == 0 && (p->closed || p->stopping)) {
        /* Closed while the slot was allocated with mu released. */
        rl__slot_put(p, b->slot);
        rc = RL_ECLOSED;
    }
    if (rc != 0) {
        rl__unlock(p);
        rl__batch_free(b);
        return rc;
    }
    b->slot->n = n;
    if (p->tail) {
        p->tail->next = b;
    } else {
        p->head = b;
    }
    p->tail = b;
    if (p->io_tail) {
        p->io_tail->io_next = b;
    } else {
        p->io_head = b;
    }
    p->io_tail = b;
    p->inflight++;
    b->ticket = ++p->tickets;
    if (ticket != NULL) {
        *ticket = b->ticket;
    }
    pthread_cond_signal(&p->io_cv);
    rl__unlock(p);
    return 0;
}

/* Unlinks the head of the delivery FIFO. Called with mu held. */
static rl_batch *pop_head(rl_pipeline *p)
{
    rl_batch *b = p->head;
    p->head = b->next;
    if (p->head == NULL) {
        p->tail = NULL;
    }
    p->inflight--;
    return b;
}

/*
 * Waits for the oldest batch and unlinks it. Returns 0 with *out set, or
 * RL_ECLOSED or RL_ETIMEDOUT; mu released either way. The batch taken is
 * on no list, and its slot READY on none: the caller's alone until it
 * puts the slot back under mu or hands it out.
 */
static int take_done_batch(rl_pipeline *p, int timeout_ms, rl_batch **out)
{
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    if (timeout_ms > 0) {
        deadline.tv_sec += timeout_ms / 1000;
        deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (deadline.tv_nsec >= 1000000000L) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000L;
        }
    }
    if (rl_pipeline_forked(p)) {
        return RL_ECLOSED; /* the threads that would finish it are gone */
    }
    rl__lock(p);
    for (;;) {
        if (p->head == NULL) {
            rl__unlock(p);
            return RL_ECLOSED;
        }
        if (p->head->done) {
            break;
        }
        if (timeout_ms < 0) {
            pthread_cond_wait(&p->done_cv, &p->mu);
        } else if (pthread_cond_timedwait(&p->done_cv, &p->mu, &deadline) ==
                   ETIMEDOUT) {
            if (!p->head->done) {
                rl__unlock(p);
                return RL_ETIMEDOUT;
            }
        }
    }
    *out = pop_head(p);
    rl__unlock(p);
    atomic_fetch_add(&p->n_batches, 1);
    return 0;
}

int rl_pipeline_next(rl_pipeline *p, int timeout_ms, uintptr_t consumer_stream,
                     rl_slot **out, rl_batch_report *rep)
{
    *out = NULL;
    memset(rep, 0, sizeof(*rep));
    rep->error.pos = -1;
    rl_batch *b;
    int rc = take_done_batch(p, timeout_ms, &b);
    if (rc != 0) {
        return rc;
    }
    rl_slot *s = b->slot;
    /* Without mu: the report asks the source where each failed sample
     * is, and allocates (core/pipeline_internal.h's rule). */
    rc = rl__report_make(p, b, rep);
    if (rc != 0) {
        rl__lock(p);
        rl__slot_put(p, s);
        rl__unlock(p);
        rl__batch_free(b);
        return rc;
    }
    rl_deliver *d = p->cfg.deliver;
    if (!d->device) {
        /* From READY, on no list, to its holders: no other thread can
         * reach it, so mu is not needed for the change. */
        s->state = SLOT_HANDED_OUT;
        atomic_store(&s->refs, 1);
        atomic_fetch_add(&p->refs, 1);
        rl__batch_free(b);
        *out = s;
        return 0;
    }
    /* Samples past the arena: copied after it into their spill buffer
     * (the caller's), the event recorded after the last copy. */
    if (rep->spill_bytes > 0) {
        rc = rl__slot_spill(p, s, rep);
    }
    /* The consumer's stream waits for the copies; the host never blocks. */
    if (rc == 0) {
        rc = d->ops->handoff(d, s->event, consumer_stream, rep->error.msg);
    }
    rl__lock(p);
    /* Onto the copying list until its event completes; its samples past
     * the arena are freed then, never while a copy may read them. */
    rl__slot_put(p, s);
    rl__unlock(p);
    rl__batch_free(b);
    if (rc != 0) { /* the batch failed whole: ids stay, the rest goes */
        free(rep->fallback);
        free(rep->replaced);
        rep->fallback = NULL;
        rep->replaced = NULL;
        rep->n_fallback = rep->n_replaced = 0;
        rep->error.status = rc;
        rep->error.pos = -1;
    }
    return rc;
}

int rl_pipeline_inflight(rl_pipeline *p)
{
    if (rl_pipeline_forked(p)) {
        return 0;
    }
    rl__lock(p);
    int n = p->inflight;
    rl__unlock(p);
    return n;
}

void rl_pipeline_cancel(rl_pipeline *p)
{
    if (rl_pipeline_forked(p)) {
        return; /* nothing would ever complete the parent's batches */
    }
    rl_source *src = p->cfg.source;
    rl__lock(p);
    for (rl_batch *b = p->head; b; b = b->next) {
        atomic_store(&b->cancelled, true);
    }
    while (p->head != NULL) {
        if (!p->head->done) {
            if (src == NULL || src->ops->cancel == NULL) {
                pthread_cond_wait(&p->done_cv, &p->mu);
                continue;
            }
            /* Again every 20 ms: a batch the I/O thread took just before
             * it was marked may have begun reading after the last call. */
            rl__unlock(p);
            rl__src_cancel(p);
            rl__lock(p);
            if (!p->head->done) {
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                ts.tv_nsec += 20000000;
                if (ts.tv_nsec >= 1000000000) {
                    ts.tv_sec++;
                    ts.tv_nsec -= 1000000000;
                }
                pthread_cond_timedwait(&p->done_cv, &p->mu, &ts);
            }
            continue;
        }
        rl_batch *b = pop_head(p);
        rl__slot_put(p, b->slot);
        rl__batch_free(b);
    }
    rl__unlock(p);
}

void rl_pipeline_stats_get(rl_pipeline *p, rl_pipeline_stats *st)
{
    memset(st, 0, sizeof(*st));
    st->samples = atomic_load(&p->n_samples);
    st->batches = atomic_load(&p->n_batches);
    st->bytes_read = atomic_load(&p->n_bytes);
    st->errors = atomic_load(&p->n_errors);
    st->skipped = atomic_load(&p->n_skipped);
    st->read_ns = atomic_load(&p->read_ns);
    st->io_cpu_ns = atomic_load(&p->io_cpu_ns);
    st->decode_ns = atomic_load(&p->decode_ns);
    st->direct_refused = atomic_load(&p->direct_refused);
    st->truncated = atomic_load(&p->n_truncated);
    st->fallback = atomic_load(&p->n_decodes[RL_FORMAT_OTHER]);
    for (int f = 0; f < RL_FORMATS; f++) {
        st->decodes[f] = atomic_load(&p->n_decodes[f]);
    }
    st->pixel_decodes = atomic_load(&p->n_pixel_decodes);
    st->views = atomic_load(&p->n_views);
    st->decode_buffer_bytes = atomic_load(&p->decode_held);
    st->past_arena = atomic_load(&p->n_past_arena);
    rl__src_counters(p, &st->source);
    if (rl_pipeline_forked(p)) {
        return;
    }
    rl__lock(p);
    st->inflight = p->inflight;
    for (rl_batch *b = p->head; b; b = b->next) {
        st->ready += b->done;
    }
    st->slots = atomic_load(&p->cfg.deliver->allocated);
    rl__unlock(p);
}

void rl_pipeline_destroy(rl_pipeline *p)
{
    if (p == NULL) {
        return;
    }
    if (rl_pipeline_forked(p)) {
        return; /* forked child: the threads are not ours; leave it be */
    }
    rl_pipeline_cancel(p);
    rl__lock(p);
    p->stopping = true;
    pthread_cond_broadcast(&p->io_cv);
    rl__unlock(p);
    if (p->io_started) {
        pthread_join(p->io_thread, NULL);
    }
    rl_pool_destroy(p->pool);
    p->pool = NULL;
    rl__src_destroy(p->cfg.source);
    p->cfg.source = NULL;
    rl__lock(p);
    p->closed = true;
    rl__unlock(p);
    rl__slots_free_all(p); /* waits for copies, with mu released */
    rl__pipeline_unref(p);
}
