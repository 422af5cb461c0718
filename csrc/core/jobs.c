/*
 * core/jobs.c - the decode jobs, with the error policy.
 *
 * DESIGN. A submitted batch is one rl_batch holding one job per sample; the
 * I/O thread (core/io_thread.c) hands its jobs to the pool, each with its
 * bytes already read or to read itself. A job decodes into its fixed place
 * in the slot, so completion order never matters, and the last part of a
 * batch marks it done.
 *
 * The skip policy runs in the job that failed, on its worker: it reads and
 * decodes the next ids of the failed sample's part of the source's table
 * itself (read_one), into the same place, with a key of its own (rng.h's
 * rl_key_replacement), so the outcome depends on the data only, never on
 * timing or thread count. The parts are the datasets the table was made
 * of (a Mix's sources, a ConcatDataset's parts): a sample is replaced by
 * one of its own dataset, so no dataset's share of an epoch moves to
 * another, and a dataset the epoch never draws from is never read.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/pipeline_internal.h"
#include "rng.h"

uint64_t rl__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void *rl__worker_ctx_create(void *arg)
{
    rl_pipeline *p = arg;
    return rl_sample_ctx_create(&p->cfg.decoders);
}

void rl__worker_ctx_destroy(void *ctx)
{
    rl_sample_ctx_destroy(ctx);
}

void rl__batch_free(rl_batch *b)
{
    for (int i = 0; i < b->n; i++) {
        free(b->jobs[i].fields);
    }
    free(b);
}

/* The part of the table holding `id`: its first id in *first, its size in
 * *n (the whole table without parts). */
static void part_of(const rl_pipeline *p, int64_t id, int64_t *first,
                    int64_t *n)
{
    if (p->parts == NULL) {
        *first = 0;
        *n = p->cfg.source->count;
        return;
    }
    int64_t lo = rl_run_of(p->parts, p->cfg.nparts, id);
    *first = p->parts[lo];
    *n = p->parts[lo + 1] - p->parts[lo];
}

/* With fields: the image's part of f's bytes in *img, *ilen, and the rest
 * copied into j->fields (the bytes before the image, then those after it),
 * replacing what an earlier candidate left there. Returns 0, RL_EFIELD for
 * a refused sample, -EIO for bytes that do not hold the image's range, or
 * -ENOMEM, with j->msg set. */
static int split_fields(rl_pipeline *p, rl__job *j, const rl_fetch *f,
                        const uint8_t **img, size_t *ilen)
{
    int rc = rl__fields_at(p, j, f->id);
    if (rc != 0) {
        return rc;
    }
    int64_t at = j->image_at, len = j->image_len;
    if (at < 0) {
        snprintf(j->msg, RL_MSG_MAX, "%s", p->refusals[-at - 1]);
        return RL_EFIELD;
    }
    if ((uint64_t)at + (uint64_t)len > f->len) {
        snprintf(j->msg, RL_MSG_MAX,
                 "%zu bytes read, too few for the image at %lld..%lld", f->len,
                 (long long)at, (long long)(at + len));
        return -EIO;
    }
    free(j->fields);
    j->fields = NULL;
    j->fields_len = f->len - (size_t)len;
    if (j->fields_len > 0) {
        if ((j->fields = malloc(j->fields_len)) == NULL) {
            j->fields_len = 0;
            snprintf(j->msg, RL_MSG_MAX, "out of memory");
            return -ENOMEM;
        }
        memcpy(j->fields, f->data, (size_t)at);
        memcpy(j->fields + at, f->data + at + len, j->fields_len - (size_t)at);
    }
    *img = f->data + at;
    *ilen = (size_t)len;
    return 0;
}

bool rl__job_fails_batch(const rl__job *j)
{
    return j->status != 0;
}

/* Whether a status is the sample's fault (its data or its file) rather
 * than the process's (memory, a bug of ours): only those are skipped. */
static bool sample_error(int status)
{
    return status < 0 ? status != -ENOMEM
                      : status != RL_EINTERNAL && status != RL_ECLOSED;
}

/* The last part done starts the slot's copy and marks the batch done
 * (pipeline_internal.h). */
void rl__batch_part_done(rl_batch *b)
{
    if (atomic_fetch_sub(&b->remaining, 1) != 1) {
        return;
    }
    rl_pipeline *p = b->p;
    if (b->dst != NULL && !atomic_load(&b->cancelled)) {
        /* The slot is complete: start its copy now, from this (the last)
         * worker, so it overlaps the decoding of the batches behind it.
         * Only this thread touches the slot here. */
        bool ok = true;
        for (int i = 0; i < b->n && ok; i++) {
            ok = !rl__job_fails_batch(&b->jobs[i]);
        }
        if (ok) {
            /* A varying batch: only the arena's reserved bytes (its
             * samples lie at the same offsets in the device buffer). */
            size_t n = p->varying ? atomic_load(&b->slot->used) : b->bytes;
            rl_deliver *d = p->cfg.deliver;
            b->copy_status = d->ops->complete(d, b->slot->data, n, b->dst,
                                              &b->slot->event, b->copy_msg);
            b->slot->copying = b->copy_status == 0;
        }
    }
    rl__lock(p);
    b->done = true;
    b->slot->state = SLOT_READY;
    pthread_cond_broadcast(&p->done_cv);
    rl__unlock(p);
    /* b may be freed from here on. */
}

/* A varying sample's destination, reserved in its batch's slot once its
 * size is known (rl_sample_sink). */
static int job_reserve(void *arg, int v, int out_w, int out_h, rl_dst *dst,
                       char *msg)
{
    rl__job *j = arg;
    rl_pipeline *p = j->batch->p;
    return rl__slot_reserve(j->batch->slot, j->pos, &p->places[v], out_w, out_h,
                            dst, msg);
}

/* Reads (when the I/O thread did not) and decodes one sample into dst
 * (one destination per view; a varying view's reserved when its size is
 * known); the fetch's bytes are released. Returns its status with j->msg
 * set. */
static int load(rl_pipeline *p, rl__job *j, rl_sample_ctx *ctx, rl_fetch *f,
                bool read, int64_t key, const rl_dst *dst)
{
    if (read) {
        uint64_t t0 = rl__now_ns();
        rl__src_read_one(p, f);
        atomic_fetch_add(&p->read_ns, rl__now_ns() - t0);
    }
    int status = f->status;
    const uint8_t *img = f->data;
    size_t ilen = f->len;
    if (status != 0) {
        snprintf(j->msg, RL_MSG_MAX, "%s", f->msg);
    } else if (rl__has_fields(p) &&
               ((status = split_fields(p, j, f, &img, &ilen)) != 0 ||
                (status = rl__fields_check(p, j)) != 0)) {
        /* j->msg says why */
    } else if (ctx == NULL) {
        status = -ENOMEM;
        snprintf(j->msg, RL_MSG_MAX, "out of memory for a decoder");
    } else {
        atomic_fetch_add(&p->n_bytes, f->len);
        if (f->direct_refused) {
            atomic_fetch_add(&p->direct_refused, 1);
        }
        rl_sample_note note;
        uint64_t t0 = rl__now_ns();
        rl_sample_sink sink = {job_reserve, j, NULL, 0};
        const int64_t *bo = p->cfg.plan_box_offsets;
        if (bo != NULL) { /* the sample's boxes, for its plan */
            sink.boxes = p->cfg.plan_boxes + 4 * bo[f->id];
            sink.nboxes = (size_t)(bo[f->id + 1] - bo[f->id]);
        }
        status = rl_sample_run_to(ctx, &p->cfg.sample, img, ilen,
                                  j->batch->epoch, key, dst,
                                  p->varying ? &sink : NULL, &note, j->msg);
        atomic_fetch_add(&p->decode_ns, rl__now_ns() - t0);
        atomic_fetch_add(&p->n_samples, 1);
        atomic_fetch_add(&p->n_pixel_decodes, (uint64_t)note.decodes);
        atomic_fetch_add(&p->n_views, (uint64_t)note.views);
        /* Two's complement: a negative change wraps back down. */
        atomic_fetch_add(&p->decode_held, (uint64_t)note.held_change);
        j->decoder = status == 0 ? note.decoder : -1;
        if (status == 0 && note.truncated) {
            atomic_fetch_add(&p->n_truncated, 1);
        }
        if (status == 0) {
            const rl_decoder_def *d = p->cfg.decoders.defs[note.decoder];
            atomic_fetch_add(&p->n_decodes[d->format], 1);
        }
    }
    rl__src_release(p, f);
    if (status != 0) {
        atomic_fetch_add(&p->n_errors, 1);
    }
    return status;
}

/* The skip policy: tries the samples after the failed one in its part,
 * in table order (wrapping to the part's first), until one loads or
 * max_consecutive_errors failed in a row. */
static void replace(rl_pipeline *p, rl__job *j, rl_sample_ctx *ctx,
                    const rl_dst *dst)
{
    int64_t first, count;
    part_of(p, j->fetch.id, &first, &count);
    int limit = p->cfg.max_consecutive_errors, tried = 0;
    for (int k = 1; k < limit && k < count; k++) {
        tried++;
        if (atomic_load(&j->batch->cancelled)) {
            return;
        }
        rl_fetch f;
        memset(&f, 0, sizeof(f));
        f.id = first + (j->fetch.id - first + k) % count;
        int64_t key = rl_key_replacement(j->key, k);
        char keep[RL_MSG_MAX];
        memcpy(keep, j->msg, sizeof(keep));
        int status = load(p, j, ctx, &f, true, key, dst);
        memcpy(j->msg, keep, sizeof(keep)); /* the report names the first */
        if (status == 0) {
            j->replaced_by = f.id;
            j->replaced_key = key;
            atomic_fetch_add(&p->n_skipped, 1);
            return;
        }
    }
    size_t len = strlen(j->msg);
    if (tried == 0 && limit > 1) {
        snprintf(j->msg + len, RL_MSG_MAX - len,
                 " (on_error='skip': no other sample in its dataset to "
                 "replace it)");
    } else if (tried == 0) {
        snprintf(j->msg + len, RL_MSG_MAX - len,
                 " (on_error='skip': max_consecutive_errors=%d allows no "
                 "replacement)",
                 limit);
    } else {
        snprintf(j->msg + len, RL_MSG_MAX - len,
                 " (on_error='skip': the %d samples after it in its "
                 "dataset failed too)",
                 tried);
    }
}

static void job_run(rl_task *task, void *ctx)
{
    rl__job *j = (rl__job *)task;
    rl_batch *b = j->batch;
    rl_pipeline *p = b->p;

    if (atomic_load(&b->cancelled)) {
        j->status = RL_ECLOSED;
        rl__src_release(p, &j->fetch);
        rl__batch_part_done(b);
        return;
    }
    /* The sample's place in each view's region of the slot. */
    rl_dst dst[RL_MAX_VIEWS];
    int nv = p->varying ? 0 : p->cfg.sample.nviews; /* varying: reserved */
    for (int v = 0; v < nv; v++) {
        size_t at = rl_place_view_offset(p->places, nv, b->n, v) +
                    (size_t)j->pos * rl_place_sample_bytes(&p->places[v]);
        rl_place_dst(&p->places[v], b->slot->data + at, &dst[v]);
    }
    bool read = p->cfg.source->ops->read_batch == NULL;
    j->status = load(p, j, ctx, &j->fetch, read, j->key, dst);
    if (j->status != 0 && p->cfg.skip_errors && sample_error(j->status)) {
        j->first_status = j->status;
        replace(p, j, ctx, dst);
        if (j->replaced_by >= 0) {
            /* Reported with the batch; the sample's place is filled. */
            j->status = 0;
        }
    }
    rl__batch_part_done(b);
}

void rl__job_init(rl_batch *b, int i, int64_t id, int64_t key)
{
    rl__job *j = &b->jobs[i];
    j->task.fn = job_run;
    j->batch = b;
    j->pos = i;
    j->key = key;
    j->decoder = -1;
    j->replaced_by = -1;
    j->fetch.id = id;
}
