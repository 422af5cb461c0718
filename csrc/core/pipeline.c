/*
 * core/pipeline.c - the owner's calls: create, submit, next, cancel, stats
 * and destroy (core/pipeline.h).
 *
 * DESIGN. Every batch sits on two lists: the delivery FIFO (submission
 * order, which is the order rl_pipeline_next() returns them in) and, until
 * the I/O thread takes it (core/jobs.c), the I/O queue. next() waits for the
 * head of the FIFO, turns its jobs' outcomes into a report, and hands out
 * its slot (core/slots.c). Locking is described in core/ring.h.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/plan.h"
#include "core/ring.h"
#include "rng.h"

static void fail_msg(char *msg, const char *what, int value)
{
    snprintf(msg, RL_MSG_MAX, what, value);
}

/* The configuration's own checks (the transform's are rl_transform_check). */
static bool config_ok(const rl_pipeline_config *cfg, char *msg)
{
    if (cfg->nthreads < 1 || cfg->nthreads > 256) {
        fail_msg(msg, "num_threads must be 1..256, not %d", cfg->nthreads);
        return false;
    }
    if (cfg->source == NULL) {
        snprintf(msg, RL_MSG_MAX, "a pipeline needs a source");
        return false;
    }
    if (cfg->skip_errors &&
        (cfg->max_consecutive_errors < 1 ||
         cfg->max_consecutive_errors > RL_MAX_CONSECUTIVE_ERRORS)) {
        /* Above the bound, replacement keys would repeat (rng.h). */
        snprintf(msg, RL_MSG_MAX,
                 "max_consecutive_errors must be 1..%d, not %d",
                 RL_MAX_CONSECUTIVE_ERRORS, cfg->max_consecutive_errors);
        return false;
    }
    if (cfg->sample.nviews < 1 || cfg->sample.nviews > RL_MAX_VIEWS ||
        cfg->sample.views == NULL) {
        snprintf(msg, RL_MSG_MAX, "a sample has 1..%d views, not %d",
                 RL_MAX_VIEWS, cfg->sample.nviews);
        return false;
    }
    return true;
}

/* The pipeline's own copy of the views, each with its place sized by its
 * transform and its chain drawing as its view; then their one check.
 * Returns 0 or RL_ECONFIG / -ENOMEM with msg. */
static int copy_views(rl_pipeline *p, const rl_sample_spec *s, char *msg)
{
    p->views = malloc(sizeof(rl_view) * (size_t)s->nviews);
    if (p->views == NULL) {
        snprintf(msg, RL_MSG_MAX, "out of memory for a pipeline's views");
        return -ENOMEM;
    }
    size_t bytes = 0;
    for (int v = 0; v < s->nviews; v++) {
        rl_view *view = &p->views[v];
        *view = s->views[v];
        view->place.out_w = view->transform.out_w;
        view->place.out_h = view->transform.out_h;
        view->augment.view = v;
        p->places[v] = view->place;
        bytes += rl_place_sample_bytes(&view->place);
    }
    p->cfg.sample.views = p->views;
    p->sample_bytes = bytes;
    return rl_sample_views_check(p->views, s->nviews, msg);
}

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
    if (!config_ok(cfg, msg)) {
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
    p->cfg = *cfg;
    p->cfg.deliver = deliver;
    if (p->cfg.decoders.n == 0) {
        rl_decode_add_native(&p->cfg.decoders);
    }
    int rc = copy_views(p, &cfg->sample, msg);
    if (rc == 0) {
        rc = rl__fields_copy(p, msg);
    }
    if (rc == 0) {
        rc = rl__parts_copy(p, msg);
    }
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
    int rc = rl__slot_take(p, b->bytes, &b->slot);
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

void rl_batch_report_free(rl_batch_report *r)
{
    free(r->ids);
    free(r->fallback);
    free(r->replaced);
    for (int i = 0; r->extras != NULL && i < r->n; i++) {
        free(r->extras[i]);
    }
    free(r->extras);
    free(r->extras_len);
    r->extras = NULL;
    r->extras_len = NULL;
    r->ids = NULL;
    r->fallback = NULL;
    r->replaced = NULL;
    r->n_fallback = r->n_replaced = 0;
}

static void describe(const rl_pipeline *p, const rl__job *j, rl_sample_error *e)
{
    e->status = j->status;
    e->pos = j->pos;
    e->id = j->fetch.id;
    snprintf(e->where, sizeof(e->where), "%s", rl__src_where(p, j->fetch.id));
    snprintf(e->msg, sizeof(e->msg), "%s", j->msg);
}

/* Whether job j was decoded by a fallback (Pillow), not a native decoder. */
static bool by_fallback(const rl_pipeline *p, const rl__job *j)
{
    return j->decoder >= 0 &&
           rl_decoder_is_fallback(p->cfg.decoders.defs[j->decoder]);
}

/* Fills rep from a done batch's jobs. Returns 0, the first failure's
 * status (rep->error filled; the fallback positions are listed all the
 * same, so the caller can say what was decoded how), or -ENOMEM. */
static int report(const rl_pipeline *p, rl_batch *b, rl_batch_report *rep)
{
    memset(rep, 0, sizeof(*rep));
    rep->n = b->n;
    rep->ticket = b->ticket;
    rep->error.pos = -1;
    rep->error.id = -1;
    int nfb = 0, nrep = 0;
    for (int i = 0; i < b->n; i++) {
        nfb += by_fallback(p, &b->jobs[i]);
        nrep += b->jobs[i].replaced_by >= 0;
    }
    rep->ids = malloc(sizeof(int64_t) * (size_t)b->n);
    rep->fallback = nfb ? malloc(sizeof(int) * (size_t)nfb) : NULL;
    rep->replaced = nrep ? malloc(sizeof(rl_replacement) * (size_t)nrep) : NULL;
    if (rep->ids == NULL || (nfb && rep->fallback == NULL) ||
        (nrep && rep->replaced == NULL)) {
        rl_batch_report_free(rep);
        rep->error.status = -ENOMEM;
        snprintf(rep->error.msg, sizeof(rep->error.msg), "out of memory");
        return -ENOMEM;
    }
    int status = 0;
    for (int i = 0; i < b->n; i++) {
        const rl__job *j = &b->jobs[i];
        rep->ids[i] = j->fetch.id;
        if (by_fallback(p, j)) {
            rep->fallback[rep->n_fallback++] = i;
        }
        if (j->replaced_by >= 0) {
            rl_replacement *r = &rep->replaced[rep->n_replaced++];
            r->id = j->replaced_by;
            describe(p, j, &r->error);
            r->error.status = j->first_status;
        }
        if (status == 0 && rl__job_fails_batch(j)) {
            describe(p, j, &rep->error);
            status = j->status;
        }
    }
    if (status == 0 && b->copy_status != 0) {
        rep->error.status = status = b->copy_status;
        snprintf(rep->error.msg, sizeof(rep->error.msg), "%s", b->copy_msg);
    }
    if (status == 0 && p->image_at != NULL && rl__report_extras(b, rep) != 0) {
        rl_batch_report_free(rep);
        rep->error.status = status = -ENOMEM;
        snprintf(rep->error.msg, sizeof(rep->error.msg), "out of memory");
    }
    return status;
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
     * is, and allocates (core/ring.h's rule). */
    rc = report(p, b, rep);
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
    /* The consumer's stream waits for the copy; the host never blocks. */
    rc = d->ops->handoff(d, s->event, consumer_stream, rep->error.msg);
    rl__lock(p);
    rl__slot_put(p, s); /* onto the copying list until its event completes */
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
