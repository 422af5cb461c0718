/*
 * python/module.h - what the binding files share. Only the files of
 * csrc/python and testing/py_testing.c include Python.h (first, before any
 * system header); none of them includes liburing.h or jpeglib.h. One file
 * per concern: module.c (initialisation and the method table), shared.c
 * (module state, UTF-8), errors.c (statuses to exceptions), spec.c (the
 * transform and output schema), ops.c (the ops' argument layouts),
 * pipeline.c (the Pipeline type) with pipeline_config.c (its arguments
 * made into a configuration), pipeline_batches.c (submit and next) and
 * pipeline_state.c (closing while a call runs), all four through
 * pipeline.h; owners.c (device buffers in flight), stats.c (the counters
 * as a dict), batch.c (the Batch type), sources.c (the table of samples),
 * fallback.c (a Python decoder registered with the decode stage), tools.c
 * (stateless functions), masks.c (a segmentation's mask raster), boxes.c
 * (targets/boxes.h's private binding), plan_boxes.c (targets through a
 * sample's plan);
 * testing/py_testing.c in test builds.
 */
#ifndef RL_PY_MODULE_H
#define RL_PY_MODULE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* The bindings keep to the stable ABI of Python 3.11 (setup.py defines
 * Py_LIMITED_API), so one build runs on every CPython from 3.11 on: no
 * struct of the interpreter is read (type slots via PyType_GetSlot) and none
 * of its access macros is used (PyTuple_GET_ITEM and the like), only the
 * functions they stand for. These calls are per batch or per spec, never per
 * pixel. */

/* Item i of PySequence_Fast's result, a list or a tuple (borrowed): the
 * limited API has no PySequence_Fast_GET_ITEM. */
static inline PyObject *rl__py_fast_item(PyObject *seq, Py_ssize_t i)
{
    return PyList_Check(seq) ? PyList_GetItem(seq, i) : PyTuple_GetItem(seq, i);
}

/* shared.c: the UTF-8 text of str o (kept with o), or NULL with an exception; a
 * ValueError for an embedded NUL, which C would cut the text at (as
 * PyUnicode_AsUTF8 does since 3.13, outside the limited API before it). */
const char *rl__py_utf8(PyObject *o);

#include "core/pipeline.h"
#include "rl.h"
#include "targets/boxes.h"

/* Per-module state (PEP 489/630): the heap types and the exception. */
typedef struct rl_module_state {
    PyObject *decode_error; /* ringloader.DecodeError, a ValueError */
    PyTypeObject *pipeline_type;
    PyTypeObject *batch_type;
    PyTypeObject *devbuf_type; /* test builds only */
} rl_module_state;

/* shared.c: the state of the module that defines `type` (borrowed). */
rl_module_state *rl__py_state_of(PyTypeObject *type);

/* ---- errors.c ---- */

/*
 * Sets the Python exception for a C status: -ENOMEM -> MemoryError (with
 * msg when there is one),
 * -errno -> OSError(errno, msg, path), decode statuses -> DecodeError naming
 * path, RL_ECONFIG -> ValueError, RL_EFALLBACK -> TypeError naming path
 * (with .path), RL_ECLOSED -> RuntimeError, RL_ECUDA -> RuntimeError,
 * anything else -> SystemError. path may be NULL; st too, for a status
 * that is not a decode status. Always returns NULL.
 */
PyObject *rl__py_raise(rl_module_state *st, int status, const char *path,
                       const char *msg);

/* The exception set now, taken (cleared) into msg (RL_MSG_MAX): its text,
 * after its type's name when typed ("MemoryError: ..."); `otherwise` when
 * it has none. GIL held. */
void rl__py_exception_text(char *msg, bool typed, const char *otherwise);

/* Raises rl_pipeline_submit's failure `status` for a batch of n samples of
 * p: out of memory says the batch's size and what to lower. Always
 * returns NULL. */
PyObject *rl__py_raise_submit(rl_module_state *st, int status,
                              const rl_pipeline *p, int n);

/* The ids a reported batch was submitted with, and each position's random
 * key (rl_batch_report.keys), as tuples of ints (new references; None where
 * the report has no such array), or NULL with an exception set. */
PyObject *rl__py_batch_ids(const rl_batch_report *rep);
PyObject *rl__py_batch_keys(const rl_batch_report *rep);

/* The exception for one failed sample, with .index set to its id (new
 * reference), or NULL with an exception set. */
PyObject *rl__py_sample_error(rl_module_state *st, const rl_sample_error *e);

/*
 * Raises the failure of a batch that rl_pipeline_next reported with
 * `status`: the failed sample's exception (rl__py_sample_error) or the
 * status's, with .fallback (positions decoded by a fallback before it
 * failed), .batch (the ids the batch was submitted with) and .ticket (its
 * submission number). Always returns NULL.
 */
PyObject *rl__py_raise_batch(rl_module_state *st, int status,
                             const rl_batch_report *rep);

/* ---- spec.c ---- */

/*
 * Parses a transform spec dict (borrowed) into t, then checks it with the
 * core's one check (rl_transform_check). Returns 0, or -1 with ValueError.
 */
int rl__py_parse_transform(PyObject *spec, rl_transform *t);

/* Parses the spec's optional "ops" list of (name, args) into a. 0 or -1
 * with ValueError (an unknown op, wrong arguments). */
int rl__py_parse_ops(PyObject *spec, rl_augment *a);

/* Parses dtype ("uint8", "float32", "float16", "bfloat16"), mul and add
 * (3-tuples or None) and layout ("NCHW", "NHWC") into c. 0 or -1. */
int rl__py_parse_place(const char *dtype, PyObject *mul, PyObject *add,
                       const char *layout, rl_place_config *c);

/*
 * The views of a pipeline into *views (malloc'd, the caller frees it even
 * on failure) and their number into *n: from one spec dict with the output
 * arguments dtype, mul, add and layout (one view), or from a sequence of
 * (spec, dtype, mul, add, layout) tuples, view by view (core/sample.h's
 * rl_view). 0, or -1 with an exception.
 */
int rl__py_parse_views(PyObject *transform, const char *dtype, PyObject *mul,
                       PyObject *add, const char *layout, rl_view **views,
                       int *n);

/* Adds TRANSFORM_FIELDS, the schema of the spec dict, to the module. */
int rl__py_spec_init(PyObject *module);

/* ---- ops.c ---- */

/* Adds the ops' argument layouts to the module: OP_ARGS, OP_LIMITS,
 * POLICY_KINDS, POLICY_TABLE_KINDS, AUTO_AUGMENT_POLICIES.
 * 0, or -1 with an exception (ImportError for a built-in op whose fields do
 * not describe its arguments). */
int rl__py_ops_init(PyObject *module);

/* ---- stats.c ---- */

/* The dict of Pipeline.stats() for s, its keys those of STATS_FIELDS (new
 * reference), or NULL with an exception. */
PyObject *rl__py_stats_dict(const rl_pipeline_stats *s);

/* Adds STATS_FIELDS, the keys of that dict, to the module. 0 or -1. */
int rl__py_stats_init(PyObject *module);

/* ---- sources.c ---- */

/* Item i of a sequence (a list, a numpy array) as an int64: -1 with an
 * exception set on failure (check PyErr_Occurred). For short sequences
 * only (a batch given as a list, a field's kinds): a table's columns come
 * through the buffer protocol. */
int64_t rl__py_item_i64(PyObject *seq, Py_ssize_t i);

/* The element types of the arrays a table is made of. */
typedef enum { RL_PY_I64, RL_PY_U8, RL_PY_I8, RL_PY_I32 } rl__py_dtype;

/*
 * obj as a 1-d C-contiguous array of dtype in native order (numpy's, or
 * any buffer) of `need` entries (need < 0: any number), its view in *view
 * for the caller to PyBuffer_Release. Returns 0, or -1 with TypeError (not
 * such an array) or ValueError (another length), naming `what`.
 */
int rl__py_array(PyObject *obj, const char *what, rl__py_dtype dtype,
                 Py_ssize_t need, Py_buffer *view);

/* Views of arrays the core borrows, held by the Pipeline until the core
 * (its source) is gone. Zeroed: empty. */
typedef struct rl__py_held {
    Py_buffer *v;
    int n, cap;
} rl__py_held;

/* rl__py_array's view of obj added to h, its data in *data and its entry
 * count in *len (may be NULL). None: *data NULL, nothing held. Returns 0,
 * or -1 with an exception. */
int rl__py_hold(rl__py_held *h, PyObject *obj, const char *what,
                rl__py_dtype dtype, Py_ssize_t need, const void **data,
                Py_ssize_t *len);
/* Releases every view of h; h is empty again. */
void rl__py_held_release(rl__py_held *h);

/*
 * The fields table of a pipeline (core/pipeline.h's image_at, image_len,
 * refusals, checks, max_int_digits) from the tuple `fields` of them into
 * cfg, whose source is made; nothing when fields is None. The int64 and
 * int8 columns are views added to held (one entry a sample each). Returns
 * 0, or -1 with an exception; either way the caller frees what was
 * allocated with rl__py_fields_free, after rl_pipeline_create (which
 * copies it). The strings are borrowed from `fields`. Each check is a
 * tuple (at, len, ext, exts, kinds) of core/fields.h's rl_field_check.
 * The record form, (records, starts, refusals, checks, max_int_digits)
 * with records the shards' (files, sizes, mtimes, tag) and each check
 * (column, exts, kinds), makes cfg->field_records instead of arrays: the
 * positions are read from the version-2 record files as jobs run.
 */
int rl__py_fields(PyObject *fields, rl_pipeline_config *cfg, rl__py_held *held);
/* The skip policy's parts (core/pipeline.h's parts, nparts) from `parts`,
 * an int64 array (buffer protocol: each part's first id, then the table's
 * length) copied into cfg; nothing when parts is None. Returns 0, or -1
 * with TypeError, ValueError or MemoryError. The values are the core's to
 * check. */
int rl__py_parts(PyObject *parts, rl_pipeline_config *cfg);
/* The boxes table a plan reads (core/pipeline.h's plan_boxes) from
 * `table`, a (boxes, offsets) pair: (N, 4) float64 XYXY rows and int64
 * offsets, one a sample of cfg's source and one more; both copied into
 * cfg. None: no table. Returns 0, or -1 with TypeError or ValueError
 * naming plan_boxes (the values are the core's to check). */
int rl__py_plan_box_table(PyObject *table, rl_pipeline_config *cfg);
/* Frees what rl__py_fields, rl__py_parts and rl__py_plan_box_table
 * allocated in cfg. */
void rl__py_fields_free(rl_pipeline_config *cfg);

/* Strings (source/source.h's rl_strings) from a (blob, offsets, prefix)
 * tuple (uint8 blob of fs-encoded strings back to back, their int64 count
 * + 1 offsets, a str before each) or a sequence of str (packed into a
 * blob here), the views added to held, t borrowing them; *prefix gets the
 * fs-encoded prefix (new reference, or NULL: t->prefix is then ""), to
 * keep until t's prefix was copied. `what` names the argument in errors.
 * Returns 0, or -1 with an exception. */
int rl__py_strings(PyObject *strings, const char *what, rl__py_held *held,
                   rl_strings *t, PyObject **prefix);
/* The int64 arrays offsets and lengths, n entries each (None: not given;
 * offsets alone refused), their views held in held. 0 or -1. */
int rl__py_file_ranges(PyObject *offsets, PyObject *lengths, int64_t n,
                       rl__py_held *held, const int64_t **offs,
                       const int64_t **lens);
/* The record files of a shard table (see rl__py_file_source) into
 * t->records, over t's starts. 0, or -1 with an exception. */
int rl__py_shard_records(PyObject *records, rl_file_table *t,
                         rl__py_held *held);

/* The file backend named by io ("auto", "io_uring", "pread") into *out.
 * Returns 0, or -1 with a ValueError. */
int rl__py_parse_io(const char *io, rl_io_backend *out);

/*
 * The file source of a table (source/source.h's rl_file_table): paths is
 * (blob, offsets, prefix), a uint8 array of fs-encoded names back to back,
 * the int64 array of their count + 1 offsets and a str before each name,
 * or a sequence of str (packed into a blob here); starts (None, or int64,
 * count + 1: paths are shards, file k holding samples starts[k] ..
 * starts[k + 1] - 1); offsets and lengths (None, or int64, one a sample;
 * lengths alone: from offset 0); records (None, or for shards instead of
 * offsets and lengths: (files, sizes, mtimes, tag), each shard's record
 * file as a sequence of str, the int64 size and mtime_ns each must state
 * and the bytes its tag starts with: see source/shard_records.h). The
 * arrays' views are added to held, the source borrowing them. Returns
 * NULL with an exception set (ValueError naming the bad array and entry).
 */
rl_source *rl__py_file_source(PyObject *paths, PyObject *starts,
                              PyObject *offsets, PyObject *lengths,
                              PyObject *records, const rl_file_options *opt,
                              rl__py_held *held, char *msg);

/* The memory source of a sequence of bytes (with optional names), each
 * appended to keep (a list the caller holds as long as the pipeline).
 * Returns NULL with an exception set. */
rl_source *rl__py_memory_source(PyObject *buffers, PyObject *names,
                                PyObject *keep);

/* The HTTP(S) source (python/http_table.c): object j is string j of
 * http["names"] (display names: a (blob, offsets, prefix) tuple, borrowed,
 * or a sequence of str), fetched from its URL: http["urls"] a dict
 * {bucket: base URL} (made from the name: http(s) names are their URL,
 * s3://bucket/key the bucket's base and the key, percent-encoded), or one
 * string an object in either form (copied); each sample's object is given
 * by exactly one of starts (int64, objects + 1 entries, as for files),
 * http["objects"] (int64, one a sample; None: object j is sample j) or
 * paths (one display name a sample, looked up); offsets/lengths as for
 * files (None: whole objects); the dict's other keys are options
 * (retries, timeout, connect_timeout, max_connections, verify, ca_file).
 * Or, with records (as for files; tag None: no size, mtime or tag
 * checked), starts gives the shards and each sample's range is read from
 * its record file when it is fetched: nothing per sample. The views of
 * the names and starts are added to held, the source borrowing them.
 * Returns NULL with an exception set. */
rl_source *rl__py_http_source(PyObject *paths, PyObject *starts,
                              PyObject *offsets, PyObject *lengths,
                              PyObject *records, PyObject *http,
                              uint64_t max_file_bytes, rl__py_held *held,
                              char *msg);

/* Replaces an HTTP source's fetch URLs (as http["urls"] gives them).
 * Returns None (new reference) or NULL with an exception (TypeError when
 * src is NULL: not an HTTP pipeline; ValueError naming what is wrong). */
PyObject *rl__py_http_set_urls(rl_source *src, PyObject *urls);
/* _core.object_ids(blob, offsets): see python/http_table.c. */
PyObject *rl__py_object_ids(PyObject *module, PyObject *args);
/* Pipeline.set_keys(region, access, secret, token=None) or (None): the
 * keys an HTTP source signs S3 GETs with. New reference (None), or NULL
 * with TypeError (src NULL), ValueError (a field unusable, not named),
 * NotImplementedError (libcurl older than 7.75), MemoryError. */
PyObject *rl__py_http_set_keys(rl_source *src, PyObject *args);

/* ---- fallback.c ---- */

/*
 * Makes *def a decoder that claims any bytes and decodes them by calling
 * decode(memoryview, max_pixels) -> (rgb bytes, width, height) with the GIL
 * taken: the one place a pool thread runs Python. For an image over
 * max_pixels, decode returns (None, width, height) without decoding it
 * (RL_ETOOBIG); an exception is RL_EFORMAT; a result of another shape
 * RL_EFALLBACK. decode is borrowed: the caller keeps
 * it alive as long as the pipeline. Returns 0 or -1 with an exception.
 */
int rl__py_fallback_def(PyObject *decode, rl_decoder_def *def);

/* ---- types ---- */

/* Adds Pipeline (pipeline.c) and Batch (batch.c) to the module. 0 or -1. */
int rl__py_pipeline_init(PyObject *module, rl_module_state *st);
int rl__py_batch_init(PyObject *module, rl_module_state *st);

/*
 * A Batch for a handed-out host slot (stolen) or, with slot NULL, for a
 * device buffer at dev_ptr on CUDA device `device` owned by `owner`
 * (borrowed), of n samples whose views are laid out by places[0 ..
 * nviews) (place.h's rl_place_view_offset): the first view's Batch, the
 * others in its `views`; with the report's ticket, ids, fallback
 * positions and replacements. A varying device batch's samples past its
 * arena lie in its spill buffer (rep->spill), owned by spill_owner
 * (borrowed; NULL when none). New reference, or NULL with an exception
 * (the slot is then released).
 */
PyObject *rl__py_batch_new(rl_module_state *st, rl_slot *slot,
                           uintptr_t dev_ptr, int device, PyObject *owner,
                           PyObject *spill_owner, int n,
                           const rl_place_config *places, int nviews,
                           const rl_batch_report *rep);

/* ---- owners.c ---- */

/*
 * Calls allocator(nbytes) for a batch's device buffer. Returns its
 * (owner, pointer) pair (new reference) with *ptr the pointer, or NULL with
 * an exception set (also for a NULL pointer). Keep the pair in a dict
 * under the batch's ticket until its Batch is made.
 */
PyObject *rl__py_device_buffer(PyObject *allocator, size_t nbytes,
                               uintptr_t *ptr);

/* The pair kept in `owners` under `ticket`, removed from it (new
 * reference); NULL when there is none (no exception set then) or with an
 * exception set. */
PyObject *rl__py_pop_owner(PyObject *owners, uint64_t ticket);

/*
 * The core's spill_alloc (core/pipeline.h's rl_spill_alloc_fn) for a
 * Pipeline on a device: arg is the Pipeline (rl__py_pipeline), whose
 * allocator is called as for a batch's device buffer with the GIL taken
 * again (next() runs with it released); *owner the (owner, pointer) pair,
 * a new reference. Its exception becomes -ENOMEM with its text in msg,
 * but one that is no Exception (KeyboardInterrupt, SystemExit), which is
 * kept on the Pipeline (arg) for next() to raise as it was: -EINTR.
 */
int rl__py_spill_alloc(void *arg, size_t n, void **dst, void **owner,
                       char *msg);

/* ---- masks.c ---- */

/* Adds mask_from_polygons and mask_from_rle (targets/mask.h) to the
 * module. 0 or -1. */
int rl__py_masks_init(PyObject *module);

/* ---- tools.c ---- */

extern PyMethodDef rl__py_tool_methods[];

/* ---- boxes.c: targets/boxes.h's private binding ---- */

extern PyMethodDef rl__py_boxes_methods[];
/* What plan_boxes.c shares with it: a box format by name ("XYXY", "XYWH",
 * "CXCYWH"); a malloc'd copy of a C-contiguous float64 buffer of rows of
 * `per` values (*n rows; `what` names it in the error); (bytes of the
 * n * per values, (h, w)), freeing v. 0 / NULL with an exception. */
int rl__py_box_format(PyObject *o, rl_box_format *fmt);
double *rl__py_float64_rows(PyObject *o, size_t per, const char *what,
                            size_t *n);
PyObject *rl__py_mapped(double *v, size_t n, size_t per, int w, int h);

/* ---- plan_boxes.c: boxes and keypoints through a sample's plan ---- */

extern PyMethodDef rl__py_plan_boxes_methods[];

/* ---- draws.c: targets/draws.h's private binding ---- */

extern PyMethodDef rl__py_draws_methods[];

/* ---- testing/py_testing.c (test builds) ---- */

#ifdef RL_TEST_HOOKS
extern PyMethodDef rl__py_testing_methods[];
int rl__py_testing_init(PyObject *module, rl_module_state *st);
#else
static inline int rl__py_testing_init(PyObject *module, rl_module_state *st)
{
    (void)module;
    (void)st;
    return 0;
}
#endif

#endif /* RL_PY_MODULE_H */
