/*
 * rl_pipeline.h - batches from file names to filled batch slots, in order.
 *
 * A pipeline owns one I/O thread (it submits every read of a batch to
 * io_uring at once), a pool of decode threads, and the batch slots. The
 * caller submits batches of sources; each sample is read, decoded with the
 * fused transform and resampled straight into its place in the batch's
 * slot; rl_pipeline_next() hands out completed batches in submission order.
 * How many batches are in flight is the caller's choice (its prefetch
 * depth): a slot is taken per submitted batch and comes back when the
 * consumer releases it, so if consumers keep batches the set of slots grows
 * rather than overwriting them.
 *
 * Slot states, written down once (see rl_pipeline.c):
 *   FREE -> FILLING (submitted) -> READY (all samples done)
 *        -> HANDED_OUT (returned by next, refcounted) -> FREE (last release)
 *   GPU path: READY -> COPYING (copy issued) -> FREE once its event is done.
 * A cancelled or failed batch goes from FILLING/READY straight to FREE.
 *
 * Threading: submit, next, cancel and destroy are called by one owner thread
 * at a time (Python holds the GIL around them, and they never call back into
 * Python); rl_slot_retain/rl_slot_release are thread-safe and may be called
 * from any thread at any time, even after rl_pipeline_destroy().
 */
#ifndef RL_PIPELINE_H
#define RL_PIPELINE_H

#include "rl.h"
#include "rl_io.h"
#include "rl_resize.h"

typedef struct rl_pipeline rl_pipeline;
typedef struct rl_slot rl_slot;

typedef struct rl_pipeline_config {
    int nthreads;           /* decode threads, >= 1 */
    rl_transform transform; /* must have a fixed output size */
    rl_layout layout;
    rl_limits limits;
    rl_io_backend io;
    uint64_t seed;
    /* Output elements: RL_DTYPE_U8, or a float type holding
     * v * mul[c] + add[c] (see rl_dst in rl_resize.h). */
    rl_dtype dtype;
    float mul[3], add[3];
    /* GPU path: cuda puts slots in pinned memory and copies each completed
     * slot to the device buffer given at submit, on device cuda_device and
     * copy_stream (a cudaStream_t handle). false (zeroed): host only. */
    bool cuda;
    int cuda_device;
    uintptr_t copy_stream;
    /* Samples that are not JPEG (other magic bytes) do not fail their
     * batch: their places are left for the caller, who decodes them some
     * other way and calls rl_pipeline_fill(). */
    bool fallback;
    /* Read with O_DIRECT (see rl_io.h); files whose file system refuses it
     * are read buffered and counted in stats.direct_refused. */
    bool direct_io;
    /* A sample that cannot be read or decoded (an I/O or data error; not
     * running out of memory) does not fail its batch: its place is listed
     * in rl_batch_error.failed, with why, for the caller to fill with a
     * replacement (rl_pipeline_fill). It still counts in stats.errors. */
    bool skip_errors;
} rl_pipeline_config;

/* One sample to load: a whole file (length -1) or a byte range of it.
 * index is the sample's dataset index, the key of its randomness. */
typedef struct rl_source {
    const char *path;
    uint64_t offset;
    int64_t length;
    int64_t index;
} rl_source;

/* A sample that failed: where in its batch, which, and why. */
typedef struct rl_sample_failure {
    int status;  /* -errno or RL_E* */
    int pos;     /* position of the sample in its batch */
    int64_t index;
    char path[4096];
    char msg[RL_MSG_MAX];
} rl_sample_failure;

/*
 * Which sample of a batch failed, and why (the first one, when the batch
 * fails); and, on success too, which samples were left to the caller:
 * those that are not JPEG (cfg.fallback), as positions, and those that
 * failed (cfg.skip_errors), with why. Both arrays are malloc'd, owned by
 * the caller (free them; NULL when empty).
 */
typedef struct rl_batch_error {
    int status;  /* -errno or RL_E* */
    int pos;     /* position of the sample in its batch */
    int64_t index;
    char path[4096];
    char msg[RL_MSG_MAX];
    int *fallback;
    int n_fallback;
    rl_sample_failure *failed;
    int n_failed;
} rl_batch_error;

/* Cumulative counters since creation. */
typedef struct rl_pipeline_stats {
    uint64_t samples, batches, bytes_read, errors;
    uint64_t read_ns, decode_ns; /* summed over threads */
    uint64_t direct_refused;     /* O_DIRECT reads that fell back */
    uint64_t truncated;          /* JPEGs decoded although truncated */
    int inflight;                /* batches submitted, not yet returned */
    int ready;                   /* of those, decoded and waiting */
} rl_pipeline_stats;

/*
 * Starts the threads. Returns the pipeline, or NULL with msg (RL_MSG_MAX)
 * saying why (bad configuration, out of memory, threads). On success msg
 * holds "" or why io_uring is not used.
 */
rl_pipeline *rl_pipeline_create(const rl_pipeline_config *cfg, char *msg);

/*
 * True in a process forked from the one that created p. There the
 * pipeline's threads do not exist and its lock may have been held at the
 * fork: submit and next return RL_ECLOSED, cancel, destroy and slot
 * releases do nothing (the child leaks the copy rather than deadlock),
 * stats are zero. The child makes a pipeline of its own.
 */
bool rl_pipeline_forked(const rl_pipeline *p);

/* The I/O backend in use: "io_uring" or "pread". */
const char *rl_pipeline_io_name(const rl_pipeline *p);

/* Bytes of one sample in a slot (out_h * out_w * 3 * element size). */
size_t rl_pipeline_sample_bytes(const rl_pipeline *p);

/*
 * Queues a batch of n >= 1 sources (paths are copied) for `epoch`.
 * Returns 0, -EINVAL, -ENOMEM or RL_ECLOSED. Never blocks on decoding.
 */
int rl_pipeline_submit(rl_pipeline *p, const rl_source *src, int n,
                       int64_t epoch);

/*
 * GPU path: as rl_pipeline_submit, with the device buffer (at least n *
 * sample_bytes bytes, allocated by the caller on cfg.cuda_device) that the
 * batch is copied into as soon as its slot is complete.
 */
int rl_pipeline_submit_to(rl_pipeline *p, const rl_source *src, int n,
                          int64_t epoch, void *device_buffer);

/*
 * GPU path: waits like rl_pipeline_next for the oldest batch; on success
 * its copy has been issued and consumer_stream has been made to wait for
 * it, so work queued on that stream sees the data. The pinned slot is
 * reused only after the copy's event completed. Returns 0 or a status as
 * rl_pipeline_next (RL_ECUDA with err filled when the copy failed).
 */
int rl_pipeline_next_device(rl_pipeline *p, int timeout_ms,
                            uintptr_t consumer_stream, rl_batch_error *err);

/*
 * Places an already decoded image (h rows of w RGB pixels, tightly packed)
 * as sample `index` of `epoch`: the same transform, layout and conversion as
 * the pipeline's own samples, written to dst (rl_pipeline_sample_bytes()
 * bytes). For the caller's fallback decoder. Returns 0, -ENOMEM or
 * RL_EINTERNAL with msg.
 */
int rl_pipeline_fill(rl_pipeline *p, uint8_t *dst, const uint8_t *rgb, int w,
                     int h, int64_t epoch, int64_t index, char *msg);

/* GPU path: pinned slots currently allocated (for leak checks). */
int rl_pipeline_pinned_slots(rl_pipeline *p);

/*
 * Waits up to timeout_ms (-1: forever) for the oldest submitted batch.
 * Returns 0 with *out set (a reference the caller releases with
 * rl_slot_release); RL_ETIMEDOUT; RL_ECLOSED when no batch is in flight; or
 * the status of the batch's first failed sample with *err filled, the batch
 * then being dropped. Blocks: call without the GIL.
 */
int rl_pipeline_next(rl_pipeline *p, int timeout_ms, rl_slot **out,
                     rl_batch_error *err);

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

/* The samples of a handed-out slot: rl_slot_count() images of
 * rl_pipeline_sample_bytes() each, laid out as configured. */
uint8_t *rl_slot_data(const rl_slot *s);
int rl_slot_count(const rl_slot *s);
void rl_slot_retain(rl_slot *s);
void rl_slot_release(rl_slot *s);

#endif /* RL_PIPELINE_H */
