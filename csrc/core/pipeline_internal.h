/*
 * core/pipeline_internal.h - the pipeline's insides (struct rl_pipeline,
 * its batches, jobs and slots, its lock and its calls into the source),
 * shared by the files that make up the pipeline: core/pipeline.c (the
 * owner's calls), core/config.c (the configuration copied at create),
 * core/slots.c (slot memory and states), core/io_thread.c (the I/O
 * thread), core/jobs.c (the decode jobs and the skip policy),
 * core/field_checks.c (the member checks) and core/report.c (a done batch's
 * report). Not a public header.
 *
 * Locking: one mutex (mu) guards both batch lists, the free and copying
 * slot lists, the flags and each batch's `done`; job completion counts are
 * atomics, and only the last job of a batch takes mu. Lock order: mu only;
 * the pool's own lock is never held while taking mu, and mu is never held
 * while calling into the pool, a source or a decoder, nor while the
 * delivery may block (pinned alloc/free, waiting for a copy, handoff):
 * workers and stats() (called with the GIL held) take mu too. A source
 * may thus take locks of its own in any callback, and call back (read
 * completions) with them held. next() builds a batch's report (the
 * source's where(), allocations) after taking the batch off the FIFO and
 * releasing mu. Every call into the source goes through the rl__src_*
 * functions below, which test builds check: none runs on a thread that
 * holds a pipeline's lock (testing/hooks.h's rl__test_unlocked aborts).
 */
#ifndef RL_CORE_PIPELINE_INTERNAL_H
#define RL_CORE_PIPELINE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "core/pipeline.h"
#include "core/pool.h"
#include "source/shard_records.h"
#include "testing/hooks.h"

enum { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_HANDED_OUT, SLOT_COPYING };

struct rl_slot {
    rl_pipeline *p;
    atomic_int refs;
    int state; /* guarded by p->mu, except while HANDED_OUT */
    uint8_t *data;
    size_t cap;
    int n;
    rl_slot *next_free; /* free or copying list, guarded by p->mu */
    void *event;        /* device delivery: the copy's event */
    bool copying;       /* device delivery: a copy may be in flight */
    /* Varying batches: the arena's bytes reserved so far (never past
     * cfg.arena_bytes: what did not fit went to a buffer of its own), and
     * for each of ncap positions its sample's place and size, and its own
     * buffer or NULL. Reset when the slot is put back (rl__slot_put,
     * slot_free) or, while a copy may read the own buffers (COPYING), once
     * that copy completed. */
    atomic_size_t used;
    struct rl__placed *placed;
    int ncap;
};

/* Where a varying batch's sample went (rl_slot_sample). */
typedef struct rl__placed {
    uint8_t *data;
    uint8_t *own; /* its own buffer (past the arena), or NULL */
    size_t bytes; /* the sample's (rl_place_sample_bytes) */
    int w, h;
} rl__placed;

typedef struct rl_batch rl_batch;

typedef struct rl__job {
    rl_task task; /* first: the pool hands us back this pointer */
    rl_batch *batch;
    int pos;
    int64_t key;
    rl_fetch fetch; /* fetch.id: the sample first asked for */
    int status;
    int first_status;     /* skip policy: why the first sample failed */
    int decoder;          /* position of the decoder used, or -1 */
    int64_t replaced_by;  /* skip policy: the replacement's id, or -1 */
    int64_t replaced_key; /* skip policy: the key the replacement drew with */
    uint8_t *fields;      /* the sample's field bytes (malloc'd), or NULL */
    size_t fields_len;
    /* With fields: the sample's image_at and image_len, and each check's
     * member (at, len, ext by check), read by rl__fields_at. */
    int64_t image_at, image_len;
    int64_t at[RL_SHARD_RECORDS_MAX_FIELDS], len[RL_SHARD_RECORDS_MAX_FIELDS];
    int ext[RL_SHARD_RECORDS_MAX_FIELDS];
    char msg[RL_MSG_MAX];
} rl__job;

struct rl_batch {
    rl_pipeline *p;
    rl_slot *slot;
    int n;
    size_t bytes; /* the slot's bytes this batch fills (its n samples) */
    int64_t epoch;
    uint64_t ticket; /* its number in submission order, from 1 */
    atomic_int remaining;
    atomic_bool cancelled;
    bool done;         /* guarded by p->mu */
    rl_batch *next;    /* delivery FIFO */
    rl_batch *io_next; /* I/O queue */
    void *dst;         /* device delivery: where the slot is copied */
    int copy_status;   /* device delivery: 0 or RL_ECUDA */
    char copy_msg[RL_MSG_MAX];
    rl__job jobs[];
};

struct rl_pipeline {
    pthread_mutex_t mu;
    pthread_cond_t io_cv;   /* the I/O thread waits here for batches */
    pthread_cond_t done_cv; /* next() and cancel() wait here */
    atomic_int refs;
    pid_t pid;
    rl_pipeline_config cfg;
    rl_view *views; /* cfg.sample.views: the pipeline's copy */
    rl_place_config places[RL_MAX_VIEWS]; /* each view's, for the slot */
    size_t sample_bytes;
    bool varying; /* view 0's transform is varying (cfg.arena_bytes) */
    rl_pool *pool;
    pthread_t io_thread;
    bool io_started;
    rl_batch *head, *tail;           /* delivery FIFO, guarded by mu */
    rl_batch *io_head, *io_tail;     /* I/O queue, guarded by mu */
    int inflight;                    /* guarded by mu */
    uint64_t tickets;                /* batches ever submitted, by mu */
    bool stopping, closed;           /* guarded by mu */
    rl_slot *free_slots;             /* guarded by mu */
    rl_slot *copying, *copying_tail; /* oldest first, guarded by mu */
    atomic_uint_fast64_t n_samples, n_batches, n_bytes, n_errors, n_skipped;
    atomic_uint_fast64_t read_ns, decode_ns, direct_refused, n_truncated;
    atomic_uint_fast64_t io_cpu_ns, n_pixel_decodes, n_views;
    atomic_uint_fast64_t n_decodes[RL_FORMATS]; /* by the decoder's format */
    atomic_uint_fast64_t decode_held;  /* rl_sample_note.held_change summed */
    atomic_uint_fast64_t n_past_arena; /* samples placed past their arena */
    /* Test builds (RINGLOADER_CUDA_BREAK=spill): a COPYING slot's own
     * buffers freed when it is put back, before its copy ran. */
    bool break_spill;
    /* cfg.image_at, image_len, refusals: the pipeline's copies, or NULL. */
    int64_t *image_at, *image_len;
    char **refusals;
    /* cfg.checks: the pipeline's copies (arrays and names), or NULL. */
    rl_field_check *checks;
    /* cfg.parts: the pipeline's copy (nparts + 1 starts), or NULL. */
    int64_t *parts;
    /* cfg.plan_boxes, plan_box_offsets: the pipeline's copies, or NULL. */
    double *plan_boxes;
    int64_t *plan_box_offsets;
};

/* Takes and releases mu. Test builds tell the fake CUDA runtime, which
 * flags any blocking CUDA call made while mu is held (testing/hooks.h). */
static inline void rl__lock(rl_pipeline *p)
{
    pthread_mutex_lock(&p->mu);
    rl__test_lock_note(1);
}

static inline void rl__unlock(rl_pipeline *p)
{
    rl__test_lock_note(-1);
    pthread_mutex_unlock(&p->mu);
}

/* Calls into the pipeline's source (source/source.h), each checked in test
 * builds against the rule above. */
static inline const char *rl__src_backend(const rl_pipeline *p, bool reason)
{
    rl__test_unlocked("backend");
    const rl_source *s = p->cfg.source;
    return reason ? s->ops->backend_reason(s) : s->ops->backend(s);
}

static inline void rl__src_where(const rl_pipeline *p, int64_t id, char *buf,
                                 size_t cap)
{
    rl__test_unlocked("where");
    p->cfg.source->ops->where(p->cfg.source, id, buf, cap);
}

static inline void rl__src_read_one(rl_pipeline *p, rl_fetch *f)
{
    rl__test_unlocked("read_one");
    p->cfg.source->ops->read_one(p->cfg.source, f);
}

static inline void rl__src_read_batch(rl_pipeline *p, rl_fetch **f, int n,
                                      rl_fetch_done_fn done, void *arg)
{
    rl__test_unlocked("read_batch");
    p->cfg.source->ops->read_batch(p->cfg.source, f, n, done, arg);
}

static inline void rl__src_release(rl_pipeline *p, rl_fetch *f)
{
    rl__test_unlocked("release");
    p->cfg.source->ops->release(p->cfg.source, f);
}

/* cancel and counters are optional: nothing is called without them. */
static inline void rl__src_cancel(rl_pipeline *p)
{
    rl__test_unlocked("cancel");
    if (p->cfg.source->ops->cancel != NULL) {
        p->cfg.source->ops->cancel(p->cfg.source);
    }
}

static inline void rl__src_counters(const rl_pipeline *p,
                                    rl_source_counters *out)
{
    rl__test_unlocked("counters");
    if (p->cfg.source->ops->counters != NULL) {
        p->cfg.source->ops->counters(p->cfg.source, out);
    }
}

/* Any source (the pipeline's, or one it was given but never started). */
static inline void rl__src_destroy(rl_source *s)
{
    rl__test_unlocked("destroy");
    rl_source_destroy(s);
}

/* ---- core/slots.c ---- */

/* With mu held: a slot able to hold `need` bytes (and, for a varying
 * pipeline, where n samples went), FILLING and on no list,
 * in *out; returns 0 or -ENOMEM. May release mu and take it again (device
 * delivery): to wait for the oldest copy, or to allocate pinned memory,
 * which may block; the caller rechecks what mu guards afterwards. */
int rl__slot_take(rl_pipeline *p, size_t need, int n, rl_slot **out);
/* A varying batch's sample at position pos of slot s, out_w x out_h in
 * place's layout and dtype: its bytes reserved in the arena, or a buffer
 * of its own past it (replacing one an earlier candidate of the position
 * had); *dst its destination. 0, or -ENOMEM with msg. Thread-safe for
 * distinct positions of a FILLING slot. */
int rl__slot_reserve(rl_slot *s, int pos, const rl_place_config *place,
                     int out_w, int out_h, rl_dst *dst, char *msg);
/* With mu held: back to the free list (or the copying list while its copy
 * runs, its samples past the arena kept until it completed). Never blocks;
 * the pipeline must not be closed. */
void rl__slot_put(rl_pipeline *p, rl_slot *s);
/* Without mu, in next(), for a varying device batch whose report
 * (rl__report_make) lists samples past its arena (rep->spill_bytes > 0):
 * their spill buffer from cfg.spill_alloc into rep->spill and
 * rep->spill_owner, then each sample's own buffer copied into it on the
 * copy stream, after the arena's copy, the slot's event recorded after
 * the last. 0, or the callback's or the copy's status with
 * rep->error.msg. */
int rl__slot_spill(rl_pipeline *p, rl_slot *s, rl_batch_report *rep);
/* Without mu: frees every free and copying slot (destroy), waiting for
 * their copies, with mu released. */
void rl__slots_free_all(rl_pipeline *p);
/* Drops a reference on the pipeline; the last frees it. Without mu. */
void rl__pipeline_unref(rl_pipeline *p);

/* ---- core/io_thread.c ---- */

/* The I/O thread's main loop; arg is the pipeline. Returns when stopping
 * is set and the I/O queue is empty. */
void *rl__io_main(void *arg);

/* ---- core/jobs.c ---- */

/* A worker's context: its decoders and scratch (rl_sample_ctx). */
void *rl__worker_ctx_create(void *arg);
void rl__worker_ctx_destroy(void *ctx);
/* Prepares job i of batch b for sample ids[i] with keys[i]. */
void rl__job_init(rl_batch *b, int i, int64_t id, int64_t key);
/* Frees a batch and the field bytes its jobs still hold. */
void rl__batch_free(rl_batch *b);
/* Counts one finished part of a batch: each job is one part, and the I/O
 * thread holds one more while it dispatches, so the batch cannot complete
 * (and be freed by next()) while the dispatcher still walks its jobs. The
 * last part starts the slot's copy (device delivery) and marks the batch
 * done; b may be freed once it returns. Without mu. */
void rl__batch_part_done(rl_batch *b);
/* Whether the job's outcome fails its whole batch. */
bool rl__job_fails_batch(const rl__job *j);
/* CLOCK_MONOTONIC in nanoseconds, for the stage timings. */
uint64_t rl__now_ns(void);

/* ---- core/field_checks.c ---- */

/* At create (from core/config.c): the pipeline's copy of cfg.checks.
 * Returns 0, -ENOMEM or RL_ECONFIG with msg; freed by rl__checks_free. */
int rl__checks_copy(rl_pipeline *p, char *msg);
void rl__checks_free(rl_pipeline *p);
/* Whether samples carry fields (the config's image_at or field_records). */
bool rl__has_fields(const rl_pipeline *p);
/* Sample `id`'s image_at, image_len and checked members into j (from the
 * pipeline's arrays, or its record: core/pipeline.h's field_records).
 * Returns 0, or -EBADMSG / -errno with j->msg naming the record file.
 * Thread-safe; may block on a pread. */
int rl__fields_at(rl_pipeline *p, rl__job *j, int64_t id);
/* Sample `id`'s members (rl__fields_at's) checked in j->fields. Returns 0, or RL_EFIELD with
 * j->msg naming the member and what is wrong. Thread-safe. */
int rl__fields_check(rl_pipeline *p, rl__job *j);

#endif /* RL_CORE_PIPELINE_INTERNAL_H */
