/*
 * rl_pipeline.c - the batch ring, the I/O thread and the decode tasks.
 *
 * DESIGN. A submitted batch becomes one rl_batch holding one job per sample
 * and a slot to fill. Every batch sits on two lists: the delivery FIFO
 * (submission order, which is the order rl_pipeline_next() returns them in)
 * and, until the I/O thread takes it, the I/O queue. With io_uring the I/O
 * thread opens the batch's files and submits all its reads at once; as each
 * read completes its decode job goes to the pool, so decoding starts before
 * the slowest read of the batch returns. With pread the I/O thread hands
 * the jobs to the pool at once and each worker reads its own file. A job
 * decodes into its fixed place in the slot, so completion order never
 * matters, and the last job of a batch marks it done.
 *
 * Slot state machine (the only place it is written down):
 *
 *   FREE ------submit------> FILLING ---last job---> READY
 *     ^                        |                       |
 *     |  cancel / failed batch |                       | next()
 *     +------------------------+-----------------------+
 *     |                                                v
 *     +-------------- last rl_slot_release ------ HANDED_OUT
 *
 * FREE slots sit on the free list; FILLING/READY ones belong to a batch;
 * HANDED_OUT ones belong to whoever holds references (tensors). A handed
 * out slot also holds a reference on the pipeline, so a consumer may release
 * it after rl_pipeline_destroy(): the memory then goes back to the system.
 *
 * Locking: one mutex (mu) guards both lists, the free list, the flags and
 * each batch's `done`; job completion counts are atomics, and only the last
 * job takes mu. Lock order: mu only; the pool's own lock is never held while
 * taking mu, and mu is never held while calling into the pool.
 */
#define _GNU_SOURCE
#include "rl_pipeline.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rl_cuda.h"
#include "rl_decode.h"
#include "rl_pool.h"
#include "rl_sample.h"

#define SLOT_ALIGN 4096

enum { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_HANDED_OUT, SLOT_COPYING };

struct rl_slot {
    rl_pipeline *p;
    atomic_int refs;
    int state;           /* guarded by p->mu, except while HANDED_OUT */
    uint8_t *data;
    size_t cap;
    int n;
    rl_slot *next_free;  /* free or copying list, guarded by p->mu */
    void *event;         /* GPU path: the copy's event */
    bool copying;        /* GPU path: a copy from it may be in flight */
};

typedef struct rl_batch rl_batch;

typedef struct job {
    rl_task task;        /* first: the pool hands us back this pointer */
    rl_batch *batch;
    int pos;
    int64_t index;
    rl_read rd;
    int status;
    bool fallback;       /* not a JPEG: left for the caller */
    bool failed;         /* status != 0, left for the caller (skip_errors) */
    char msg[RL_MSG_MAX];
} job;

struct rl_batch {
    rl_pipeline *p;
    rl_slot *slot;
    int n;
    int64_t epoch;
    atomic_int remaining;
    atomic_bool cancelled;
    bool done;           /* guarded by p->mu */
    rl_batch *next;      /* delivery FIFO */
    rl_batch *io_next;   /* I/O queue */
    char *paths;         /* one block holding every job's path */
    void *dev;           /* GPU path: where the slot is copied */
    int copy_status;     /* GPU path: 0 or RL_ECUDA */
    char copy_msg[RL_MSG_MAX];
    job jobs[];
};

struct rl_pipeline {
    pthread_mutex_t mu;
    pthread_cond_t io_cv;   /* the I/O thread waits here for batches */
    pthread_cond_t done_cv; /* next() and cancel() wait here */
    atomic_int refs;
    pid_t pid;
    rl_pipeline_config cfg;
    size_t sample_bytes;
    rl_pool *pool;
    rl_io *io;              /* used only by the I/O thread after create */
    bool uring;
    pthread_t io_thread;
    bool io_started;
    rl_batch *head, *tail;       /* delivery FIFO, guarded by mu */
    rl_batch *io_head, *io_tail; /* I/O queue, guarded by mu */
    int inflight;                /* guarded by mu */
    bool stopping, closed;       /* guarded by mu */
    rl_slot *free_slots;         /* guarded by mu */
    rl_slot *copying, *copying_tail; /* GPU path, oldest first, by mu */
    int pinned_slots;            /* GPU path, guarded by mu */
    bool break_wait, break_recycle; /* test hooks: see rl_pipeline_create */
    atomic_uint_fast64_t n_samples, n_batches, n_bytes, n_errors;
    atomic_uint_fast64_t read_ns, decode_ns, direct_refused, n_truncated;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- slots ---- */

static void slot_free(rl_pipeline *p, rl_slot *s)
{
    if (p->cfg.cuda) {
        if (s->copying) {
            rl_cuda_event_sync(s->event, NULL);
        }
        rl_cuda_event_destroy(s->event);
        if (s->data != NULL) {
            rl_cuda_host_free(s->data);
            p->pinned_slots--;
        }
    } else {
        free(s->data);
    }
    free(s);
}

/* Moves slots whose copy completed from the copying list to the free list;
 * with `wait`, first waits for the oldest one. Called with mu held. */
static void reclaim_copied(rl_pipeline *p, bool wait)
{
    if (wait && p->copying != NULL && !p->break_recycle) {
        rl_cuda_event_sync(p->copying->event, NULL);
    }
    while (p->copying != NULL) {
        rl_slot *s = p->copying;
        if (!p->break_recycle &&
            rl_cuda_event_query(s->event, NULL) == RL_ETIMEDOUT) {
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

/* Takes a free slot able to hold `need` bytes, or makes one. Called with mu
 * held. Returns NULL when out of memory. */
static rl_slot *slot_take(rl_pipeline *p, size_t need)
{
    if (p->cfg.cuda) {
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
        if (p->cfg.cuda) {
            void *pinned = NULL;
            if (rl_cuda_host_alloc(&pinned, cap, NULL) == 0) {
                data = pinned;
                p->pinned_slots++;
            }
        } else {
            data = aligned_alloc(SLOT_ALIGN, cap);
        }
        if (data == NULL) {
            s->next_free = p->free_slots;
            p->free_slots = s;
            return NULL;
        }
        if (p->cfg.cuda && s->data != NULL) {
            rl_cuda_host_free(s->data);
            p->pinned_slots--;
        } else if (!p->cfg.cuda) {
            free(s->data);
        }
        s->data = data;
        s->cap = cap;
    }
    s->state = SLOT_FILLING;
    s->next_free = NULL;
    return s;
}

/* Puts a slot back on the free list, or frees it once the pipeline is
 * closed. Called with mu held. */
static void slot_put(rl_pipeline *p, rl_slot *s)
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

static void pipeline_unref(rl_pipeline *p)
{
    if (atomic_fetch_sub(&p->refs, 1) != 1) {
        return;
    }
    while (p->free_slots) {
        rl_slot *s = p->free_slots;
        p->free_slots = s->next_free;
        slot_free(p, s);
    }
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
    slot_put(p, s);
    pthread_mutex_unlock(&p->mu);
    pipeline_unref(p);
}

/* ---- jobs ---- */

/* Whether the job's outcome fails its whole batch (rather than leaving the
 * sample to the caller as a non-JPEG or skipped failure). */
static bool job_fails_batch(const job *j)
{
    return j->status != 0 && !j->failed;
}

/* Counts one finished part of a batch: each job is one part, and the I/O
 * thread holds one more while it dispatches, so the batch cannot complete
 * (and be freed by next()) while the dispatcher still walks its jobs. */
static void batch_part_done(rl_batch *b)
{
    if (atomic_fetch_sub(&b->remaining, 1) != 1) {
        return;
    }
    rl_pipeline *p = b->p;
    if (b->dev != NULL && !atomic_load(&b->cancelled)) {
        /* The slot is complete: start its copy to the device now, from
         * this (the last) worker, so it overlaps the decoding of the
         * batches behind it. Only this thread touches the slot here. */
        bool ok = true;
        for (int i = 0; i < b->n && ok; i++) {
            ok = !job_fails_batch(&b->jobs[i]);
        }
        if (ok) {
            b->copy_status = rl_cuda_copy_h2d(
                p->cfg.cuda_device, b->dev, b->slot->data,
                p->sample_bytes * (size_t)b->n, p->cfg.copy_stream,
                &b->slot->event, b->copy_msg);
            b->slot->copying = b->copy_status == 0;
        }
    }
    pthread_mutex_lock(&p->mu);
    b->done = true;
    if (b->slot != NULL) {
        b->slot->state = SLOT_READY;
    }
    pthread_cond_broadcast(&p->done_cv);
    pthread_mutex_unlock(&p->mu);
    /* b may be freed from here on. */
}

static void job_done(job *j)
{
    batch_part_done(j->batch);
}

static void describe_read_error(job *j)
{
    if (j->rd.status == RL_ETOOBIG) {
        snprintf(j->msg, RL_MSG_MAX, "file larger than the %llu-byte limit",
                 (unsigned long long)j->batch->p->cfg.limits.max_file_bytes);
    } else {
        snprintf(j->msg, RL_MSG_MAX, "%s", strerror(-j->rd.status));
    }
}

/* Where one sample's pixels go, in the configured layout and dtype. */
static void sample_dst(const rl_pipeline *p, uint8_t *base, rl_dst *dst)
{
    const rl_transform *t = &p->cfg.transform;
    memset(dst, 0, sizeof(*dst));
    dst->data = base;
    dst->dtype = p->cfg.dtype;
    memcpy(dst->mul, p->cfg.mul, sizeof(dst->mul));
    memcpy(dst->add, p->cfg.add, sizeof(dst->add));
    if (p->cfg.layout == RL_LAYOUT_NHWC) {
        dst->row_stride = (ptrdiff_t)t->out_w * 3;
        dst->px_stride = 3;
        dst->ch_stride = 1;
    } else {
        dst->row_stride = t->out_w;
        dst->px_stride = 1;
        dst->ch_stride = (ptrdiff_t)t->out_w * t->out_h;
    }
}

int rl_pipeline_fill(rl_pipeline *p, uint8_t *dst, const uint8_t *rgb, int w,
                     int h, int64_t epoch, int64_t index, char *msg)
{
    rl_dst d;
    sample_dst(p, dst, &d);
    return rl_sample_place_rgb(rgb, w, h, &p->cfg.transform, p->cfg.seed,
                               epoch, index, &d, msg);
}

static void job_run(rl_task *task, void *ctx)
{
    job *j = (job *)task;
    rl_batch *b = j->batch;
    rl_pipeline *p = b->p;
    rl_decoder *dec = ctx;

    if (atomic_load(&b->cancelled)) {
        j->status = RL_ECLOSED;
        goto out;
    }
    if (!p->uring) {
        uint64_t t0 = now_ns();
        rl_io_read_one(&j->rd, p->cfg.limits.max_file_bytes);
        atomic_fetch_add(&p->read_ns, now_ns() - t0);
    }
    if (j->rd.status != 0) {
        j->status = j->rd.status;
        describe_read_error(j);
        goto out;
    }
    atomic_fetch_add(&p->n_bytes, j->rd.len);
    if (j->rd.direct_refused) {
        atomic_fetch_add(&p->direct_refused, 1);
    }
    if (dec == NULL) {
        j->status = -ENOMEM;
        snprintf(j->msg, RL_MSG_MAX, "out of memory for a decoder");
        goto out;
    }
    const rl_transform *t = &p->cfg.transform;
    rl_dst dst;
    sample_dst(p, b->slot->data + (size_t)j->pos * p->sample_bytes, &dst);
    uint64_t t0 = now_ns();
    j->status = rl_sample_decode(dec, j->rd.data, j->rd.len, t,
                                 &p->cfg.limits, p->cfg.seed, b->epoch,
                                 j->index, &dst, j->msg);
    if (j->status == RL_EFORMAT && p->cfg.fallback) {
        j->status = 0;
        j->fallback = true;
    }
    if (j->status == 0 && rl_decode_was_truncated(dec)) {
        atomic_fetch_add(&p->n_truncated, 1);
    }
    atomic_fetch_add(&p->decode_ns, now_ns() - t0);
    atomic_fetch_add(&p->n_samples, 1);
out:
    if (j->status != 0 && j->status != RL_ECLOSED) {
        atomic_fetch_add(&p->n_errors, 1);
        /* The sample's data or file is bad, not the process: with
         * skip_errors its place goes back to the caller. */
        bool sample_error = j->status < 0 ? j->status != -ENOMEM
                                          : j->status != RL_EINTERNAL;
        j->failed = p->cfg.skip_errors && sample_error;
    }
    free(j->rd.buf);
    j->rd.buf = NULL;
    job_done(j);
}

/* ---- the I/O thread ---- */

static void on_read(rl_read *r, void *arg)
{
    rl_pipeline *p = arg;
    job *j = (job *)((char *)r - offsetof(job, rd));
    rl_pool_submit(p->pool, &j->task);
}

static void dispatch(rl_pipeline *p, rl_batch *b)
{
    if (atomic_load(&b->cancelled) || !p->uring) {
        /* Cancelled jobs return at once; pread jobs read for themselves. */
        for (int i = 0; i < b->n; i++) {
            rl_pool_submit(p->pool, &b->jobs[i].task);
        }
        return;
    }
    rl_read *reqs_small[64];
    rl_read **reqs = b->n <= 64 ? reqs_small
                                : malloc(sizeof(*reqs) * (size_t)b->n);
    if (reqs == NULL) {
        for (int i = 0; i < b->n; i++) {
            b->jobs[i].rd.status = -ENOMEM;
            rl_pool_submit(p->pool, &b->jobs[i].task);
        }
        return;
    }
    for (int i = 0; i < b->n; i++) {
        reqs[i] = &b->jobs[i].rd;
    }
    uint64_t t0 = now_ns();
    rl_io_read_batch(p->io, reqs, b->n, on_read, p);
    atomic_fetch_add(&p->read_ns, now_ns() - t0);
    if (reqs != reqs_small) {
        free(reqs);
    }
}

static void *io_main(void *arg)
{
    rl_pipeline *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->io_head == NULL && !p->stopping) {
            pthread_cond_wait(&p->io_cv, &p->mu);
        }
        rl_batch *b = p->io_head;
        if (b == NULL) {
            break;
        }
        p->io_head = b->io_next;
        if (p->io_head == NULL) {
            p->io_tail = NULL;
        }
        pthread_mutex_unlock(&p->mu);
        dispatch(p, b);
        batch_part_done(b); /* the dispatcher's own part */
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* ---- the pipeline ---- */

static void *decoder_new(void)
{
    return rl_decoder_create();
}

static void decoder_free(void *d)
{
    rl_decoder_destroy(d);
}

rl_pipeline *rl_pipeline_create(const rl_pipeline_config *cfg, char *msg)
{
    msg[0] = '\0';
    const rl_transform *t = &cfg->transform;
    if (cfg->nthreads < 1 || cfg->nthreads > 256) {
        snprintf(msg, RL_MSG_MAX, "num_threads must be 1..256, not %d",
                 cfg->nthreads);
        return NULL;
    }
    if (cfg->dtype > RL_DTYPE_BF16) {
        snprintf(msg, RL_MSG_MAX, "unknown output dtype %d", cfg->dtype);
        return NULL;
    }
    if (t->kind == RL_T_NONE || t->out_w <= 0 || t->out_h <= 0 ||
        t->out_w > 65535 || t->out_h > 65535) {
        snprintf(msg, RL_MSG_MAX,
                 "the transform must give a fixed output size");
        return NULL;
    }
    rl_pipeline *p = calloc(1, sizeof(*p));
    if (p == NULL) {
        snprintf(msg, RL_MSG_MAX, "out of memory");
        return NULL;
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
    p->sample_bytes = (size_t)t->out_w * (size_t)t->out_h * 3 *
                      rl_dtype_size(cfg->dtype);

    p->io = rl_io_create(cfg->io, cfg->limits.max_file_bytes, msg);
    if (p->io == NULL) {
        snprintf(msg, RL_MSG_MAX, "out of memory");
        goto fail;
    }
    p->uring = rl_io_backend_of(p->io) == RL_IO_URING;
    if (cfg->cuda) {
        int count = 0;
        if (rl_cuda_device_count(&count, msg) != 0) {
            goto fail;
        }
        if (cfg->cuda_device >= count) {
            snprintf(msg, RL_MSG_MAX, "CUDA device %d requested, %d present",
                     cfg->cuda_device, count);
            goto fail;
        }
        /* Test hooks, only for showing that the fake runtime's checks can
         * fail: skip the consumer's event wait, or recycle slots without
         * waiting for their copies. */
        const char *brk = getenv("RINGLOADER_CUDA_BREAK");
        p->break_wait = brk != NULL && strcmp(brk, "wait") == 0;
        p->break_recycle = brk != NULL && strcmp(brk, "recycle") == 0;
    }
    p->pool = rl_pool_create(cfg->nthreads, decoder_new, decoder_free);
    if (p->pool == NULL) {
        snprintf(msg, RL_MSG_MAX, "cannot start decode threads: %s",
                 strerror(errno));
        goto fail;
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&p->io_thread, NULL, io_main, p);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        snprintf(msg, RL_MSG_MAX, "cannot start the I/O thread: %s",
                 strerror(rc));
        goto fail;
    }
    p->io_started = true;
    return p;

fail:
    rl_pool_destroy(p->pool);
    rl_io_destroy(p->io);
    pipeline_unref(p);
    return NULL;
}

const char *rl_pipeline_io_name(const rl_pipeline *p)
{
    return p->uring ? "io_uring" : "pread";
}

size_t rl_pipeline_sample_bytes(const rl_pipeline *p)
{
    return p->sample_bytes;
}

int rl_pipeline_submit(rl_pipeline *p, const rl_source *src, int n,
                       int64_t epoch)
{
    if (p->cfg.cuda) {
        return -EINVAL; /* the GPU path needs a device buffer */
    }
    return rl_pipeline_submit_to(p, src, n, epoch, NULL);
}

int rl_pipeline_submit_to(rl_pipeline *p, const rl_source *src, int n,
                          int64_t epoch, void *device_buffer)
{
    if (rl_pipeline_forked(p)) {
        return RL_ECLOSED;
    }
    if (n < 1 || n > (1 << 20) ||
        (device_buffer != NULL) != (p->cfg.cuda)) {
        return -EINVAL;
    }
    size_t paths = 0;
    for (int i = 0; i < n; i++) {
        paths += strlen(src[i].path) + 1;
    }
    rl_batch *b = calloc(1, sizeof(*b) + sizeof(job) * (size_t)n);
    char *block = malloc(paths);
    if (b == NULL || block == NULL) {
        free(b);
        free(block);
        return -ENOMEM;
    }
    b->p = p;
    b->n = n;
    b->epoch = epoch;
    b->dev = device_buffer;
    b->paths = block;
    atomic_init(&b->remaining, n + 1); /* + the dispatcher's part */
    atomic_init(&b->cancelled, false);
    for (int i = 0; i < n; i++) {
        job *j = &b->jobs[i];
        size_t len = strlen(src[i].path) + 1;
        memcpy(block, src[i].path, len);
        j->task.fn = job_run;
        j->batch = b;
        j->pos = i;
        j->index = src[i].index;
        j->rd.path = block;
        j->rd.offset = src[i].offset;
        j->rd.length = src[i].length;
        j->rd.direct = p->cfg.direct_io;
        j->rd.fd = -1;
        block += len;
    }

    pthread_mutex_lock(&p->mu);
    if (p->closed || p->stopping) {
        pthread_mutex_unlock(&p->mu);
        free(b->paths);
        free(b);
        return RL_ECLOSED;
    }
    b->slot = slot_take(p, p->sample_bytes * (size_t)n);
    if (b->slot == NULL) {
        pthread_mutex_unlock(&p->mu);
        free(b->paths);
        free(b);
        return -ENOMEM;
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
    pthread_cond_signal(&p->io_cv);
    pthread_mutex_unlock(&p->mu);
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

static void batch_free(rl_batch *b)
{
    free(b->paths);
    free(b);
}

/*
 * Waits for the oldest batch and unlinks it. Returns 0 with mu held and
 * *out set, or a status with mu released: RL_ECLOSED, RL_ETIMEDOUT, or a
 * failed sample's status with err filled (that batch is then dropped).
 */
static int take_done_batch(rl_pipeline *p, int timeout_ms, rl_batch **out,
                           rl_batch_error *err)
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
    pthread_mutex_lock(&p->mu);
    for (;;) {
        if (p->head == NULL) {
            pthread_mutex_unlock(&p->mu);
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
                pthread_mutex_unlock(&p->mu);
                return RL_ETIMEDOUT;
            }
        }
    }
    rl_batch *b = pop_head(p);
    atomic_fetch_add(&p->n_batches, 1);

    int status = 0;
    err->fallback = NULL;
    err->n_fallback = 0;
    err->failed = NULL;
    err->n_failed = 0;
    for (int i = 0; i < b->n && status == 0; i++) {
        job *j = &b->jobs[i];
        if (job_fails_batch(j)) {
            status = err->status = j->status;
            err->pos = i;
            err->index = j->index;
            snprintf(err->path, sizeof(err->path), "%s", j->rd.path);
            snprintf(err->msg, sizeof(err->msg), "%s", j->msg);
        }
    }
    if (status == 0 && b->copy_status != 0) {
        status = err->status = b->copy_status;
        err->pos = -1;
        err->index = -1;
        err->path[0] = '\0';
        snprintf(err->msg, sizeof(err->msg), "%s", b->copy_msg);
    }
    if (status != 0) {
        slot_put(p, b->slot);
        pthread_mutex_unlock(&p->mu);
        batch_free(b);
        return status;
    }
    int nfb = 0, nfail = 0;
    for (int i = 0; i < b->n; i++) {
        nfb += b->jobs[i].fallback;
        nfail += b->jobs[i].failed;
    }
    err->fallback = nfb ? malloc(sizeof(int) * (size_t)nfb) : NULL;
    err->failed = nfail ? malloc(sizeof(*err->failed) * (size_t)nfail) : NULL;
    if ((nfb && err->fallback == NULL) || (nfail && err->failed == NULL)) {
        free(err->fallback);
        free(err->failed);
        err->fallback = NULL;
        err->failed = NULL;
        snprintf(err->msg, sizeof(err->msg), "out of memory");
        err->status = -ENOMEM;
        slot_put(p, b->slot);
        pthread_mutex_unlock(&p->mu);
        batch_free(b);
        return -ENOMEM;
    }
    for (int i = 0; i < b->n; i++) {
        job *j = &b->jobs[i];
        if (j->fallback) {
            err->fallback[err->n_fallback++] = i;
        } else if (j->failed) {
            rl_sample_failure *f = &err->failed[err->n_failed++];
            f->status = j->status;
            f->pos = i;
            f->index = j->index;
            snprintf(f->path, sizeof(f->path), "%s", j->rd.path);
            snprintf(f->msg, sizeof(f->msg), "%s", j->msg);
        }
    }
    *out = b;
    return 0;
}

int rl_pipeline_next(rl_pipeline *p, int timeout_ms, rl_slot **out,
                     rl_batch_error *err)
{
    *out = NULL;
    if (p->cfg.cuda) {
        return -EINVAL;
    }
    rl_batch *b;
    int rc = take_done_batch(p, timeout_ms, &b, err);
    if (rc != 0) {
        return rc;
    }
    rl_slot *s = b->slot;
    s->state = SLOT_HANDED_OUT;
    atomic_store(&s->refs, 1);
    atomic_fetch_add(&p->refs, 1);
    pthread_mutex_unlock(&p->mu);
    batch_free(b);
    *out = s;
    return 0;
}

int rl_pipeline_next_device(rl_pipeline *p, int timeout_ms,
                            uintptr_t consumer_stream, rl_batch_error *err)
{
    if (!p->cfg.cuda) {
        return -EINVAL;
    }
    rl_batch *b;
    int rc = take_done_batch(p, timeout_ms, &b, err);
    if (rc != 0) {
        return rc;
    }
    rl_slot *s = b->slot;
    pthread_mutex_unlock(&p->mu);
    /* The consumer's stream waits for the copy; the host never blocks. */
    if (!p->break_wait) {
        rc = rl_cuda_stream_wait(p->cfg.cuda_device, consumer_stream,
                                 s->event, err->msg);
    }
    pthread_mutex_lock(&p->mu);
    slot_put(p, s); /* onto the copying list until its event completes */
    pthread_mutex_unlock(&p->mu);
    batch_free(b);
    if (rc != 0) {
        err->status = rc;
        err->pos = -1;
        err->path[0] = '\0';
    }
    return rc;
}

int rl_pipeline_pinned_slots(rl_pipeline *p)
{
    if (rl_pipeline_forked(p)) {
        return 0;
    }
    pthread_mutex_lock(&p->mu);
    int n = p->pinned_slots;
    pthread_mutex_unlock(&p->mu);
    return n;
}

int rl_pipeline_inflight(rl_pipeline *p)
{
    if (rl_pipeline_forked(p)) {
        return 0;
    }
    pthread_mutex_lock(&p->mu);
    int n = p->inflight;
    pthread_mutex_unlock(&p->mu);
    return n;
}

void rl_pipeline_cancel(rl_pipeline *p)
{
    if (rl_pipeline_forked(p)) {
        return; /* nothing would ever complete the parent's batches */
    }
    pthread_mutex_lock(&p->mu);
    for (rl_batch *b = p->head; b; b = b->next) {
        atomic_store(&b->cancelled, true);
    }
    while (p->head != NULL) {
        if (!p->head->done) {
            pthread_cond_wait(&p->done_cv, &p->mu);
            continue;
        }
        rl_batch *b = pop_head(p);
        slot_put(p, b->slot);
        batch_free(b);
    }
    pthread_mutex_unlock(&p->mu);
}

void rl_pipeline_stats_get(rl_pipeline *p, rl_pipeline_stats *st)
{
    st->samples = atomic_load(&p->n_samples);
    st->batches = atomic_load(&p->n_batches);
    st->bytes_read = atomic_load(&p->n_bytes);
    st->errors = atomic_load(&p->n_errors);
    st->read_ns = atomic_load(&p->read_ns);
    st->decode_ns = atomic_load(&p->decode_ns);
    st->direct_refused = atomic_load(&p->direct_refused);
    st->truncated = atomic_load(&p->n_truncated);
    st->inflight = st->ready = 0;
    if (rl_pipeline_forked(p)) {
        return;
    }
    pthread_mutex_lock(&p->mu);
    st->inflight = p->inflight;
    st->ready = 0;
    for (rl_batch *b = p->head; b; b = b->next) {
        st->ready += b->done;
    }
    pthread_mutex_unlock(&p->mu);
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
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    pthread_cond_broadcast(&p->io_cv);
    pthread_mutex_unlock(&p->mu);
    if (p->io_started) {
        pthread_join(p->io_thread, NULL);
    }
    rl_pool_destroy(p->pool);
    p->pool = NULL;
    rl_io_destroy(p->io);
    p->io = NULL;
    pthread_mutex_lock(&p->mu);
    p->closed = true;
    while (p->free_slots) {
        rl_slot *s = p->free_slots;
        p->free_slots = s->next_free;
        slot_free(p, s);
    }
    while (p->copying) { /* slot_free waits for each copy to finish */
        rl_slot *s = p->copying;
        p->copying = s->next_free;
        slot_free(p, s);
    }
    p->copying_tail = NULL;
    pthread_mutex_unlock(&p->mu);
    pipeline_unref(p);
}
