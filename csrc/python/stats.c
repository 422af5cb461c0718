/*
 * python/stats.c - the pipeline's counters as a dict: one table, shared by
 * Python and C.
 *
 * DESIGN: the keys of Pipeline.stats() are listed once, in the table below,
 * each with the field of rl_pipeline_stats it reads and its kind. The dict
 * is built from the table, and the module exports the table as
 * STATS_FIELDS, from which the Python side takes the counters a loader
 * carries across its pipelines (every kind but "gauge") and the keys of
 * Loader.stats(): a new counter is one row here.
 */
#include "python/module.h"

#include <stddef.h>

typedef enum {
    STAT_COUNT,   /* a uint64_t count, cumulative */
    STAT_SECONDS, /* a uint64_t of nanoseconds, cumulative; in seconds */
    STAT_GAUGE,   /* an int, the state now (not cumulative) */
    STAT_GAUGE64, /* a uint64_t, the state now: a "gauge" to Python */
} stat_kind;

static const char *const kind_names[] = {"count", "seconds", "gauge", "gauge"};

typedef struct stat_field {
    const char *name;
    stat_kind kind;
    size_t offset; /* in rl_pipeline_stats */
    const char *doc;
} stat_field;

#define AT(member) offsetof(rl_pipeline_stats, member)
/* The count of one format in the decodes array. */
#define AT_FORMAT(f) (AT(decodes) + (size_t)(f) * sizeof(uint64_t))

static const stat_field fields[] = {
    {"samples", STAT_COUNT, AT(samples),
     "samples loaded or tried (replacement candidates included)"},
    {"batches", STAT_COUNT, AT(batches), "batches returned"},
    {"bytes_read", STAT_COUNT, AT(bytes_read), "bytes of the samples read"},
    {"errors", STAT_COUNT, AT(errors),
     "loads that failed, replacement candidates included"},
    {"skipped", STAT_COUNT, AT(skipped), "samples replaced (skip policy)"},
    {"read_seconds", STAT_SECONDS, AT(read_ns),
     "thread time in reads, summed over threads"},
    {"decode_seconds", STAT_SECONDS, AT(decode_ns),
     "thread time in decode and transform, summed over threads"},
    {"io_cpu_seconds", STAT_SECONDS, AT(io_cpu_ns),
     "CPU time of the I/O thread in batch reads"},
    {"inflight", STAT_GAUGE, AT(inflight),
     "batches submitted, not yet returned"},
    {"ready", STAT_GAUGE, AT(ready), "of those, decoded and waiting"},
    {"slots", STAT_GAUGE, AT(slots),
     "slots allocated (pinned ones with a device)"},
    {"decode_buffer_bytes", STAT_GAUGE64, AT(decode_buffer_bytes),
     "bytes the decode threads keep for their next images (the buffers "
     "of their decoders, given back some images after an outlier)"},
    {"direct_refused", STAT_COUNT, AT(direct_refused),
     "O_DIRECT reads that fell back to buffered ones"},
    {"truncated", STAT_COUNT, AT(truncated),
     "truncated JPEGs, PNGs and WebPs decoded (allow_truncated)"},
    {"decodes_jpeg", STAT_COUNT, AT_FORMAT(RL_FORMAT_JPEG),
     "samples decoded by libjpeg-turbo"},
    {"decodes_png", STAT_COUNT, AT_FORMAT(RL_FORMAT_PNG),
     "samples decoded by libspng"},
    {"decodes_webp", STAT_COUNT, AT_FORMAT(RL_FORMAT_WEBP),
     "samples decoded by libwebp"},
    {"fallback_decodes", STAT_COUNT, AT(fallback),
     "samples decoded by the Pillow fallback (not JPEG, PNG or WebP)"},
    {"decodes", STAT_COUNT, AT(pixel_decodes),
     "pixel decodes: one per sample loaded, whatever its views"},
    {"views", STAT_COUNT, AT(views),
     "views written: one per view of each sample loaded"},
    {"past_arena", STAT_COUNT, AT(past_arena),
     "samples of varying size placed past their batch's arena_bytes, each "
     "in a buffer of its own (on a device, copied through a spill buffer)"},
    {"http_requests", STAT_COUNT, AT(source.requests),
     "HTTP(S) requests sent, each attempt counted (0 for local data)"},
    {"http_retries", STAT_COUNT, AT(source.retries),
     "of those, the attempts after a failure"},
    {"http_bytes", STAT_COUNT, AT(source.bytes),
     "bytes of HTTP(S) response bodies received"},
    {"http_cache_hits", STAT_COUNT, AT(source.cache_hits),
     "remote samples read from the local cache"},
};

#define NFIELDS (sizeof(fields) / sizeof(fields[0]))

/* The value of field f of s (new reference), or NULL with an exception. */
static PyObject *field_value(const stat_field *f, const rl_pipeline_stats *s)
{
    const char *at = (const char *)s + f->offset;
    if (f->kind == STAT_GAUGE) {
        return PyLong_FromLong(*(const int *)at);
    }
    uint64_t v = *(const uint64_t *)at; /* STAT_COUNT, _SECONDS, _GAUGE64 */
    if (f->kind == STAT_SECONDS) {
        return PyFloat_FromDouble((double)v / 1e9);
    }
    return PyLong_FromUnsignedLongLong((unsigned long long)v);
}

PyObject *rl__py_stats_dict(const rl_pipeline_stats *s)
{
    PyObject *d = PyDict_New();
    for (size_t i = 0; d != NULL && i < NFIELDS; i++) {
        PyObject *v = field_value(&fields[i], s);
        if (v == NULL || PyDict_SetItemString(d, fields[i].name, v) < 0) {
            Py_CLEAR(d);
        }
        Py_XDECREF(v);
    }
    return d;
}

int rl__py_stats_init(PyObject *module)
{
    /* {name: (kind, description)}, in the order of Pipeline.stats() */
    PyObject *d = PyDict_New();
    for (size_t i = 0; d != NULL && i < NFIELDS; i++) {
        const stat_field *f = &fields[i];
        PyObject *item = Py_BuildValue("(ss)", kind_names[f->kind], f->doc);
        if (item == NULL || PyDict_SetItemString(d, f->name, item) < 0) {
            Py_CLEAR(d);
        }
        Py_XDECREF(item);
    }
    if (d == NULL) {
        return -1;
    }
    int rc = PyModule_AddObjectRef(module, "STATS_FIELDS", d);
    Py_DECREF(d);
    return rc;
}
