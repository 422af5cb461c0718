/*
 * core/pipeline.h - batches of sample ids to filled batch slots, in order.
 *
 * A pipeline runs the stages (docs/ARCHITECTURE.md): its source (source/)
 * reads the bytes of each sample, on one I/O thread a batch at a time or on
 * the workers; a pool of decode threads runs each sample through decode/,
 * augment/ and place/ (core/sample.h) straight into the sample's place in
 * the batch's slot; its delivery (deliver/) gives the slot memory and, for
 * a device, copies each completed slot to the buffer given at submit.
 * rl_pipeline_next() hands out completed batches in submission order. How
 * many batches are in flight is the caller's choice (its prefetch depth): a
 * slot is taken per submitted batch and comes back when the consumer
 * releases it, so if consumers keep batches the set of slots grows rather
 * than overwriting them.
 *
 * The error policy is the core's: a sample that cannot be read or decoded
 * fails its batch (on_error "raise"), or with skip_errors is replaced by
 * the next sample of its part of the table that loads (id + 1, + 2, ...,
 * wrapping within the part: a table made of several datasets replaces a
 * sample by one of its own dataset's), on the same worker, up to
 * max_consecutive_errors samples in a row; the batch reports each
 * replacement.
 *
 * Slot states, written down once (core/slots.c):
 *   FREE -> FILLING (submitted) -> READY (all samples done)
 *        -> HANDED_OUT (returned by next, refcounted) -> FREE (last release)
 *   device delivery: READY -> COPYING (handed off) -> FREE once copied.
 * A cancelled or failed batch goes from FILLING/READY straight to FREE.
 *
 * Threading: submit, next, cancel and destroy are called by one owner
 * thread at a time (Python holds the GIL around them; they never call into
 * Python themselves, but for next's call of the owner's spill_alloc, on
 * the same thread); rl_slot_retain/rl_slot_release are thread-safe and may
 * be called from any thread at any time, even after rl_pipeline_destroy().
 */
#ifndef RL_PIPELINE_H
#define RL_PIPELINE_H

#include "core/fields.h"
#include "core/sample.h"
#include "deliver/deliver.h"
#include "rl.h"
#include "source/source.h"

typedef struct rl_pipeline rl_pipeline;
typedef struct rl_slot rl_slot;

/*
 * A device buffer of n bytes for the samples of one varying batch that
 * went past its arena (a device delivery's spill buffer): *dst its device
 * address, *owner the caller's handle on it, handed back untouched in
 * rl_batch_report.spill_owner for the caller to release (the core never
 * frees it). Called by rl_pipeline_next on the thread that called it,
 * without the pipeline's lock, at most once a batch. Returns 0, or
 * -ENOMEM (the allocation failed) or -EINTR (interrupted) with msg
 * (RL_MSG_MAX) saying why; the batch then fails with that status.
 */
typedef int (*rl_spill_alloc_fn)(void *arg, size_t n, void **dst, void **owner,
                                 char *msg);

typedef struct rl_pipeline_config {
    int nthreads;         /* decode threads, 1..256 */
    rl_source *source;    /* owned by the pipeline from create on */
    rl_deliver *deliver;  /* likewise; NULL: host memory */
    rl_decoders decoders; /* tried in order; n = 0: JPEG only */
    /* Limits, seed and the views (each: transform, ops, place), which the
     * pipeline copies at create, setting each view's place size from its
     * transform and its chain's view index (sample.views is borrowed only
     * during rl_pipeline_create). */
    rl_sample_spec sample;
    /* The skip policy: a failed sample (an I/O or data error, not running
     * out of memory) is replaced, up to max_consecutive_errors failures in
     * a row (>= 1), then its batch fails. */
    bool skip_errors;
    int max_consecutive_errors;
    /* The table's parts for the skip policy (the datasets it was made of):
     * part k is ids parts[k] .. parts[k + 1] - 1, with parts[0] = 0 <
     * parts[1] < ... < parts[nparts] = source->count (nparts + 1 entries);
     * a replacement is tried only within the failed sample's part. NULL
     * (nparts 0): one part, the whole table. Copied at create. */
    const int64_t *parts;
    int64_t nparts;
    /* Samples whose bytes hold more than the image (a tar shard's sample
     * read with its other members in one read): for id i the image is
     * bytes image_at[i] .. image_at[i] + image_len[i] of its fetch, and the
     * fetch's other bytes (those before the image, then those after it) are
     * the sample's field bytes, reported with its batch
     * (rl_batch_report.fields). image_at[i] < 0 refuses the sample with
     * RL_EFIELD and the message refusals[-image_at[i] - 1] (one of
     * nrefusals). NULL: a fetch is the image alone. Both arrays have
     * source->count entries; they and the messages are copied at create. */
    const int64_t *image_at, *image_len;
    const char *const *refusals;
    int nrefusals;
    /* With image_at: the fields each sample's field bytes must hold as
     * their kind's Python decoding accepts them (core/fields.h), one
     * check a field; a sample failing one fails with RL_EFIELD, naming
     * the member, before its image is decoded. max_int_digits: Python's
     * int max_str_digits (0: no limit). Copied at create. */
    const rl_field_check *checks;
    int nchecks;
    int max_int_digits;
    /* Instead of the image_at/image_len arrays and the checks' per-sample
     * arrays, for a table of tar shards whose version-2 record files
     * (source/shard_records.h) hold them: sample i's image_at, image_len
     * and each check's member are read from its record when its job runs
     * (one pread), so that nothing per sample is held. image_at and
     * image_len are then NULL, refusals as above, and each check names
     * its field's column in the record (rl_field_check.column; its at,
     * len and ext NULL); at most RL_SHARD_RECORDS_MAX_FIELDS checks. A
     * record whose values are out of range (a refusal number past
     * nrefusals, an extension past the check's) fails its sample with
     * -EBADMSG naming the record file. Owned by the pipeline from create
     * on, whether create succeeds or not. NULL: the arrays, or no
     * fields. */
    struct rl_shard_records *field_records;
    /* Varying batches (a view whose transform is varying: one view, its
     * ops drawn on each sample's own size): each sample's size is its own,
     * known once its
     * header is read. A batch's slot is then an arena of arena_bytes (0:
     * RL_ARENA_DEFAULT_BYTES) from which each sample, once planned and
     * decoded, reserves its bytes (RL_PLACE_VIEW_ALIGN-aligned) with a
     * compare-and-swap, advancing only when they fit: the samples'
     * bytes never reach past arena_bytes itself (not the slot's size,
     * rounded up to pages). A sample that does not fit gets a buffer of
     * its own (one more allocation and a page-fault pass over it: a batch
     * of huge images still loads, at that cost), counted in past_arena;
     * with a device delivery it is then copied through a spill buffer
     * (spill_alloc below; without one it fails its batch, naming
     * arena_bytes). A sample's bytes never depend on where they went;
     * rl_slot_sample says where (rl_batch_report.places on a device). */
    size_t arena_bytes;
    /* Device delivery of varying batches: the device memory of a batch's
     * samples past its arena (rl_spill_alloc_fn), called with spill_arg;
     * NULL: such a sample fails its batch. */
    rl_spill_alloc_fn spill_alloc;
    void *spill_arg;
    /* The samples' boxes a plan reads (RandomIoUCrop, rl_plan_make_boxes):
     * sample id i's are rows plan_box_offsets[i] .. plan_box_offsets[i +
     * 1] - 1 of plan_boxes (XYXY, float64, in its image's pixels, 4 a row,
     * finite), offsets source->count + 1 entries, never falling, from 0 to
     * plan_box_rows. NULL: none (a view with an IoU crop is then refused).
     * Copied at create. */
    const double *plan_boxes;
    const int64_t *plan_box_offsets;
    int64_t plan_box_rows;
} rl_pipeline_config;

/* The default arena of a varying batch: 64 MiB (about 22 float32
 * 640x480 images, or 8 of 1333x800). */
#define RL_ARENA_DEFAULT_BYTES ((size_t)64 << 20)
/* The largest arena_bytes taken (1 TiB): past it, RL_ECONFIG (a wrapped
 * or mistaken value rather than memory to reserve). */
#define RL_ARENA_MAX_BYTES ((size_t)1 << 40)

/* A sample that failed: where in its batch, which, and why. */
typedef struct rl_sample_error {
    int status; /* -errno or RL_E* */
    int pos;    /* position in the batch, or -1 (the batch's copy) */
    int64_t id; /* the sample's id in the source, or -1 */
    char where[4096];
    char msg[RL_MSG_MAX];
} rl_sample_error;

/* A failed sample replaced under the skip policy. */
typedef struct rl_replacement {
    int64_t id;            /* the replacement's id */
    rl_sample_error error; /* why the sample at error.pos failed */
} rl_replacement;

/* Where a varying sample of a device batch lies (rl_batch_report.places):
 * in the batch's device buffer, or, spilled (it went past the arena), in
 * the batch's spill buffer; its first byte's offset there, its width and
 * height; laid out as the view's place says for a w x h image. */
typedef struct rl_sample_place {
    size_t offset;
    int w, h;
    bool spilled;
} rl_sample_place;

/*
 * What happened to a batch: which batch it is (its ticket and the ids it
 * was submitted with, so that a caller never pairs it with another batch's
 * bookkeeping); on failure, the first failed sample; and, on failure too,
 * the positions decoded by a decoder after the first of the set (a
 * fallback, e.g. Pillow for a PNG) and the replacements. The arrays are
 * malloc'd and owned by the caller (rl_batch_report_free); empty ones NULL.
 */
typedef struct rl_batch_report {
    int n;           /* samples in the batch */
    uint64_t ticket; /* what rl_pipeline_submit gave for it; 0: none */
    int64_t *ids;    /* the n ids submitted, in position order */
    /* Each position's random key: the one submitted, or the key a
     * replacement under the skip policy was drawn with (its own), so a
     * caller can draw again what the sample's pixels were drawn with. */
    int64_t *keys;
    rl_sample_error error;
    int *fallback;
    int n_fallback;
    rl_replacement *replaced;
    int n_replaced;
    /* With image_at (the config): each position's field bytes, fields[i]
     * of fields_len[i] bytes (NULL when none), on success only. */
    uint8_t **fields;
    size_t *fields_len;
    /* A varying batch copied to a device, on success: each position's
     * place in the device buffer or the spill buffer (the slot itself is
     * not handed out). NULL otherwise. */
    rl_sample_place *places;
    /* Such a batch's samples past its arena: their bytes together (each
     * sample's RL_PLACE_VIEW_ALIGN-aligned; 0: none), and once next() got
     * their spill buffer (rl_spill_alloc_fn), its device address and its
     * owner. spill_owner, whatever the batch's outcome, is the caller's
     * to release; rl_batch_report_free leaves it alone. */
    size_t spill_bytes;
    void *spill;
    void *spill_owner;
} rl_batch_report;

/* Frees the report's arrays (not the report). */
void rl_batch_report_free(rl_batch_report *r);

/* Cumulative counters since creation. Every sample that could not be
 * loaded counts once in errors, replacement candidates included; skipped
 * counts the failed samples that were replaced, so errors >= skipped and
 * errors - skipped samples were raised or failed as candidates. */
typedef struct rl_pipeline_stats {
    uint64_t samples, batches, bytes_read, errors, skipped;
    uint64_t read_ns, decode_ns; /* summed over threads */
    uint64_t io_cpu_ns;          /* CPU time of the I/O thread's reads */
    uint64_t direct_refused;     /* O_DIRECT reads that fell back */
    uint64_t truncated;          /* files decoded although truncated */
    uint64_t fallback;           /* samples decoded by a fallback */
    uint64_t pixel_decodes;      /* pixel decodes: one per sample loaded */
    uint64_t views;              /* views written (samples x views) */
    rl_source_counters source;   /* a remote source's (0 for local) */
    int inflight;                /* batches submitted, not yet returned */
    int ready;                   /* of those, decoded and waiting */
    int slots;                   /* slot memory allocated (pinned on GPU) */
    /* Bytes the decode threads' decoder states hold now, between images
     * (decode.h's rl_decode_buf; libjpeg's memory is not kept). */
    uint64_t decode_buffer_bytes;
    /* Samples decoded, by their decoder's format (decode/decode.h);
     * decodes[RL_FORMAT_OTHER] is fallback, Pillow's. */
    uint64_t decodes[RL_FORMATS];
    /* Varying batches: samples placed past their batch's arena, each in a
     * buffer of its own (and on a device copied through a spill buffer). */
    uint64_t past_arena;
} rl_pipeline_stats;

/*
 * Checks the configuration and starts the threads. Returns the pipeline,
 * or NULL with msg (RL_MSG_MAX) saying why and *status (when status is not
 * NULL) what kind of failure it was: RL_ECONFIG, a configuration refused;
 * -ENOMEM, out of memory, a thread that could not start included (its
 * stack, or the limit of threads: pthread_create's EAGAIN), msg then
 * saying what asked for it and what to lower; another -errno from
 * pthread_create. On failure everything made so far is freed and joined,
 * and cfg->source and cfg->deliver are destroyed too.
 */
rl_pipeline *rl_pipeline_create(const rl_pipeline_config *cfg, int *status,
                                char *msg);

/*
 * True in a process forked from the one that created p. There the
 * pipeline's threads do not exist and its lock may have been held at the
 * fork: submit and next return RL_ECLOSED, cancel, destroy and slot
 * releases do nothing (the child leaks the copy rather than deadlock),
 * stats are zero. The child makes a pipeline of its own.
 */
bool rl_pipeline_forked(const rl_pipeline *p);

/* The source's backend in use ("io_uring", "pread", "memory") and why a
 * better one is not ("" when it is). */
const char *rl_pipeline_io_name(const rl_pipeline *p);
const char *rl_pipeline_io_reason(const rl_pipeline *p);

/* Bytes of one sample in a slot, all its views together (one view:
 * out_h * out_w * 3 * element size). */
size_t rl_pipeline_sample_bytes(const rl_pipeline *p);

/* Bytes of the slot (and of a device batch's buffer) of n samples: the
 * views' regions one after the other (place.h's rl_place_view_offset);
 * a varying pipeline's: its arena's. */
size_t rl_pipeline_batch_bytes(const rl_pipeline *p, int n);

/* The pipeline's views (its own copy, valid until it is freed) and their
 * number in *n. */
const rl_view *rl_pipeline_views(const rl_pipeline *p, int *n);

/*
 * Queues a batch of n >= 1 samples of `epoch`: ids[i] names the sample in
 * the source's table, keys[i] the key of its randomness (rng.h). With a
 * device delivery, dst is the device buffer (batch_bytes(n) bytes, the
 * caller's) the batch is copied into; else NULL. On success *ticket (when
 * not NULL) is the batch's number, 1, 2, ... in submission order, which
 * rl_pipeline_next reports with it. Returns 0, -EINVAL (an id out of
 * range, a missing or extra dst), -ENOMEM or RL_ECLOSED. Never blocks on
 * decoding; with a device delivery it may wait for an in-flight copy
 * before refilling a pinned slot, and allocates a slot's pinned memory on
 * the calling thread (its current device is restored after), both
 * without the pipeline's lock: workers and stats() never wait for them.
 */
int rl_pipeline_submit(rl_pipeline *p, const int64_t *ids, const int64_t *keys,
                       int n, int64_t epoch, void *dst, uint64_t *ticket);

/*
 * Waits up to timeout_ms (-1: forever) for the oldest submitted batch.
 * Whatever its outcome, once a batch is taken rep->ticket and rep->ids say
 * which it was (-ENOMEM aside). Returns 0 with *rep filled and, on the host, *out set to the slot (a
 * reference the caller releases with rl_slot_release); with a device
 * delivery *out is NULL, the batch is in its dst, and consumer_stream has
 * been made to wait for its copy. A varying device batch with samples
 * past its arena first gets their spill buffer from cfg.spill_alloc, on
 * this thread, and each such sample is copied into it on the copy stream
 * after the arena, the batch's event recorded again after the last copy,
 * so that the consumer's wait covers them (rep->spill_owner is then the
 * caller's, whatever the outcome). Else RL_ETIMEDOUT; RL_ECLOSED when no
 * batch is in flight; or the status of the batch's first failed sample
 * with rep->error filled (pos -1: the batch's copy or spill buffer), the
 * batch then being dropped. Blocks: call without the GIL (spill_alloc
 * may take it).
 */
int rl_pipeline_next(rl_pipeline *p, int timeout_ms, uintptr_t consumer_stream,
                     rl_slot **out, rl_batch_report *rep);

/* Batches submitted and not yet returned by next. */
int rl_pipeline_inflight(rl_pipeline *p);

/*
 * Drops every batch in flight: samples not started are skipped, running ones
 * finish. Blocks until their slots are free again (milliseconds).
 */
void rl_pipeline_cancel(rl_pipeline *p);

void rl_pipeline_stats_get(rl_pipeline *p, rl_pipeline_stats *st);

/*
 * Cancels, stops and joins every thread, and frees what no consumer holds;
 * slots still held are freed by their last rl_slot_release. Accepts NULL.
 * In a process forked from the creator, where the threads do not exist, it
 * only forgets the pipeline (its memory is leaked, never touched).
 */
void rl_pipeline_destroy(rl_pipeline *p);

/* The samples of a handed-out slot: the regions of its views, each of
 * rl_slot_count() images, laid out as configured. */
uint8_t *rl_slot_data(const rl_slot *s);
int rl_slot_count(const rl_slot *s);
/* A varying batch's sample at position i (0 .. count - 1) of a handed-out
 * slot: its first byte (in the slot's arena or a buffer of its own, both
 * freed with the slot), its width and height in *w, *h; laid out as the
 * view's place says for a w x h image. NULL for a fixed-size pipeline. */
uint8_t *rl_slot_sample(const rl_slot *s, int i, int *w, int *h);
void rl_slot_retain(rl_slot *s);
void rl_slot_release(rl_slot *s);

#endif /* RL_PIPELINE_H */
