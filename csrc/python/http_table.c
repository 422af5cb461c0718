/*
 * python/http_table.c - the table of the HTTP source (source/source.h),
 * made from a Pipeline's http dict, and what replaces its URLs and keys
 * while it runs.
 *
 * DESIGN: the objects' display names cross as one blob with its offsets
 * (a (blob, offsets, prefix) tuple, the StringBlob's buffers, borrowed
 * by the source: their views are held by the Pipeline), or as a sequence
 * of str packed into a blob here; each sample's object as the shards'
 * starts, an int64 array, nothing (one object a sample, in order) or a
 * name looked up. The fetch URLs are a dict {bucket: base URL} (made from
 * the names in C: nothing per object), or strings in the same two forms
 * (presigned), which the source copies into one blob.
 */
#include "python/module.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "source/shard_records.h"
#include "source/source.h"

/* The options of an http dict (see rl__py_http_source) into o. */
static int http_options(PyObject *http, uint64_t max_file_bytes,
                        rl_http_options *o)
{
    static const char *known[] = {
        "names",           "urls",   "retries", "timeout",   "connect_timeout",
        "max_connections", "verify", "ca_file", "cache_dir", "cache_bytes",
        "block_bytes",     "objects"};
    rl_http_options_default(o);
    o->max_file_bytes = max_file_bytes;
    PyObject *key, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(http, &pos, &key, &v)) {
        const char *k = PyUnicode_Check(key) ? rl__py_utf8(key) : NULL;
        size_t i = 0;
        while (k != NULL && i < sizeof(known) / sizeof(*known) &&
               strcmp(k, known[i]) != 0) {
            i++;
        }
        if (k == NULL || i == sizeof(known) / sizeof(*known)) {
            PyErr_Format(PyExc_TypeError, "unknown http option %R", key);
            return -1;
        }
        if (v == Py_None || i < 2 || i == 11) {
            continue; /* the table, not an option */
        }
        if (i == 2 || i == 5) {
            long x = PyLong_AsLong(v);
            *(i == 2 ? &o->retries : &o->max_inflight) = (int)x;
        } else if (i == 3 || i == 4) {
            double x = PyFloat_AsDouble(v);
            *(i == 3 ? &o->timeout_s : &o->connect_timeout_s) = x;
        } else if (i == 6) {
            int t = PyObject_IsTrue(v);
            o->verify = t > 0;
            if (t < 0) {
                return -1;
            }
        } else if (i == 9 || i == 10) {
            *(i == 9 ? &o->cache_bytes : &o->block_bytes) =
                PyLong_AsUnsignedLongLong(v);
        } else {
            const char *s = rl__py_utf8(v);
            if (s == NULL) {
                return -1;
            }
            char *dst = i == 7 ? o->ca_file : o->cache_dir;
            snprintf(dst, sizeof(o->ca_file), "%s", s);
        }
        if (PyErr_Occurred()) {
            return -1;
        }
    }
    if (o->retries < 0 || o->timeout_s <= 0 || o->connect_timeout_s <= 0 ||
        o->max_inflight < 1) {
        PyErr_SetString(PyExc_ValueError,
                        "http options: retries >= 0, timeout > 0, "
                        "connect_timeout > 0, max_connections >= 1");
        return -1;
    }
    return 0;
}

/* The display names of the objects as str, looked up in a dict: object
 * j is names' string j decoded. NULL with an exception. */
static PyObject *name_index(const rl_strings *names)
{
    PyObject *index = PyDict_New();
    const char *pre = names->prefix != NULL ? names->prefix : "";
    size_t np = strlen(pre);
    char *buf = NULL;
    size_t cap = 0;
    for (int64_t j = 0; index != NULL && j < names->n; j++) {
        size_t nb = (size_t)(names->at[j + 1] - names->at[j]);
        if (np + nb + 1 > cap) {
            char *more = realloc(buf, cap = 2 * (np + nb + 1));
            if (more == NULL) {
                PyErr_NoMemory();
                Py_CLEAR(index);
                break;
            }
            buf = more;
        }
        memcpy(buf, pre, np);
        memcpy(buf + np, names->bytes + names->at[j], nb);
        PyObject *k =
            PyUnicode_DecodeFSDefaultAndSize(buf, (Py_ssize_t)(np + nb));
        PyObject *jj = k != NULL ? PyLong_FromLongLong(j) : NULL;
        /* The first of a name given twice keeps it. */
        int rc = -1;
        if (jj != NULL) {
            rc = PyDict_GetItemWithError(index, k) != NULL ? 0
                 : PyErr_Occurred()                        ? -1
                                    : PyDict_SetItem(index, k, jj);
        }
        Py_XDECREF(k);
        Py_XDECREF(jj);
        if (rc != 0) {
            Py_CLEAR(index);
        }
    }
    free(buf);
    return index;
}

/* Each sample's object by a dict lookup of its display name among
 * names: the form of a table given as a sequence of names, one a sample
 * (a composition of datasets). Consecutive samples of one object cost
 * one lookup. Returns a malloc'd array of *n entries, or NULL with an
 * exception. */
static int64_t *objects_by_name(PyObject *paths, const rl_strings *names,
                                Py_ssize_t *n)
{
    PyObject *index = NULL, *prev = NULL;
    int64_t *obj = NULL;
    *n = PySequence_Size(paths);
    if (*n < 0 || (index = name_index(names)) == NULL) {
        goto out_fail;
    }
    obj = malloc(sizeof(*obj) * (size_t)(*n > 0 ? *n : 1));
    if (obj == NULL) {
        PyErr_NoMemory();
        goto out_fail;
    }
    for (Py_ssize_t i = 0; i < *n; i++) {
        PyObject *p = PySequence_GetItem(paths, i);
        if (p == NULL) {
            goto out_fail;
        }
        if (i == 0 || PyObject_RichCompareBool(p, prev, Py_EQ) != 1) {
            PyObject *j = PyDict_GetItemWithError(index, p);
            if (j == NULL) {
                if (!PyErr_Occurred()) {
                    PyErr_Format(PyExc_ValueError,
                                 "sample %zd: %R is not among the http names",
                                 i, p);
                }
                Py_DECREF(p);
                goto out_fail;
            }
            obj[i] = PyLong_AsLongLong(j);
        } else {
            obj[i] = obj[i - 1];
        }
        Py_XDECREF(prev); /* p holds its own reference */
        prev = p;
    }
    Py_XDECREF(prev);
    Py_DECREF(index);
    return obj;
out_fail:
    Py_XDECREF(prev);
    Py_XDECREF(index);
    free(obj);
    return NULL;
}

/* Each sample's object from starts (nobj + 1 entries, from 0, never
 * falling: object k holds samples starts[k] .. starts[k + 1] - 1), or
 * from `objects` (an int64 array, one a sample), or by name from paths;
 * `each` (http['objects'] given as None): object j is sample j. Returns a
 * malloc'd array of *n entries, or NULL with an exception; *none (each):
 * NULL and no exception, *n = nobj. */
static int64_t *objects_of(PyObject *paths, PyObject *starts, PyObject *objects,
                           bool each, const rl_strings *names, Py_ssize_t *n,
                           bool *none)
{
    Py_ssize_t nobj = (Py_ssize_t)names->n;
    *none = false;
    if ((starts != Py_None) + (objects != Py_None) + (paths != Py_None) +
            each !=
        1) {
        PyErr_SetString(PyExc_TypeError,
                        "an HTTP table gives each sample's object by one of "
                        "paths, starts or http['objects'] (None: object j is "
                        "sample j)");
        return NULL;
    }
    if (each) {
        *none = true;
        *n = nobj;
        return NULL;
    }
    if (paths != Py_None) {
        return objects_by_name(paths, names, n);
    }
    Py_buffer v;
    bool by_start = starts != Py_None;
    if (rl__py_array(by_start ? starts : objects,
                     by_start ? "starts" : "http['objects']", RL_PY_I64,
                     by_start ? nobj + 1 : -1, &v) != 0) {
        return NULL;
    }
    const int64_t *a = v.buf;
    Py_ssize_t k = 0;
    while (by_start && k < nobj && a[k] <= a[k + 1]) {
        k++;
    }
    if (by_start && (a[0] != 0 || k < nobj)) {
        PyErr_Format(PyExc_ValueError,
                     "starts: each object's first sample, from 0, never "
                     "falling (starts[0] = %lld; entry %zd is %lld, the "
                     "next %lld)",
                     (long long)a[0], k, (long long)a[k],
                     (long long)a[k < nobj ? k + 1 : k]);
        PyBuffer_Release(&v);
        return NULL;
    }
    if (by_start && (uint64_t)a[nobj] > (uint64_t)(PY_SSIZE_T_MAX / 8)) {
        PyErr_Format(PyExc_ValueError,
                     "starts: %lld samples are more than memory can hold",
                     (long long)a[nobj]);
        PyBuffer_Release(&v);
        return NULL;
    }
    *n = by_start ? (Py_ssize_t)a[nobj] : v.shape[0];
    int64_t *obj = malloc(sizeof(*obj) * (size_t)(*n > 0 ? *n : 1));
    if (obj == NULL) {
        PyErr_NoMemory();
    } else if (by_start) {
        for (Py_ssize_t j = 0; j < nobj; j++) {
            for (int64_t i = a[j]; i < a[j + 1]; i++) {
                obj[i] = j;
            }
        }
    } else {
        memcpy(obj, a, sizeof(*obj) * (size_t)*n);
    }
    PyBuffer_Release(&v);
    return obj;
}

/* The fetch URLs of an http dict's "urls" into u: a dict {bucket: base}
 * (made from the names), or strings (see rl__py_strings), whose views go
 * into tmp; *keep holds what u points to (the prefix, the bases' arrays)
 * until the source copied it: py_urls_free. 0 or -1 with an
 * exception. */
typedef struct py_urls {
    rl_http_urls u;
    rl__py_held tmp;
    PyObject *prefix;
    const char **buckets, **bases;
} py_urls;

static void py_urls_free(py_urls *p)
{
    rl__py_held_release(&p->tmp);
    Py_XDECREF(p->prefix);
    free(p->buckets);
    free(p->bases);
    memset(p, 0, sizeof(*p));
}

static int py_urls_of(PyObject *urls, py_urls *p)
{
    memset(p, 0, sizeof(*p));
    if (!PyDict_Check(urls)) {
        return rl__py_strings(urls, "urls", &p->tmp, &p->u.urls, &p->prefix);
    }
    Py_ssize_t nb = PyDict_Size(urls), pos = 0, b = 0;
    p->buckets = calloc((size_t)(nb > 0 ? nb : 1), sizeof(char *));
    p->bases = calloc((size_t)(nb > 0 ? nb : 1), sizeof(char *));
    if (p->buckets == NULL || p->bases == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    PyObject *k, *v;
    while (PyDict_Next(urls, &pos, &k, &v)) {
        p->buckets[b] = rl__py_utf8(k);
        p->bases[b] = p->buckets[b] != NULL ? rl__py_utf8(v) : NULL;
        if (p->bases[b] == NULL) {
            return -1;
        }
        b++;
    }
    p->u.nbases = nb;
    p->u.buckets = p->buckets;
    p->u.bases = p->bases;
    return 0;
}

/* The HTTP source over shards with record files: starts (held, the
 * source borrowing it) and the record table (the source's once made). */
static rl_source *http_shards(const rl_strings *names, const rl_http_urls *urls,
                              PyObject *starts, PyObject *records,
                              const rl_http_options *opt, rl__py_held *held,
                              char *msg)
{
    rl_file_table t = {0};
    const void *st;
    Py_ssize_t nobj = (Py_ssize_t)names->n;
    if (starts == Py_None) {
        PyErr_SetString(PyExc_ValueError, "records: only for shards (starts)");
        return NULL;
    }
    if (rl__py_hold(held, starts, "starts", RL_PY_I64, nobj + 1, &st, NULL)) {
        return NULL;
    }
    t.starts = st;
    t.nfiles = nobj;
    for (Py_ssize_t k = 0; k < nobj; k++) {
        if (t.starts[k] > t.starts[k + 1] || t.starts[0] != 0) {
            PyErr_Format(PyExc_ValueError,
                         "starts: each shard's first sample, from 0, never "
                         "falling (entry %zd)",
                         k);
            return NULL;
        }
    }
    if (rl__py_shard_records(records, &t, held) != 0) {
        return NULL;
    }
    int status;
    rl_source *src;
    Py_BEGIN_ALLOW_THREADS
    src = rl_http_source_create_shards(names, urls, t.starts, t.records, opt,
                                       &status, msg);
    Py_END_ALLOW_THREADS
    if (src == NULL) {
        rl_shard_records_destroy(t.records); /* the source did not take it */
        rl__py_raise(NULL, status, NULL, msg);
    }
    return src;
}

/* The HTTP source: object j of the table is named http["names"]' string j
 * (display names, for messages; borrowed, held in held) and fetched from
 * its URL (http["urls"], see py_urls_of); each sample's object comes from
 * objects_of; offsets/lengths as for files (None: whole objects); the
 * other keys of http are its options (retries, timeout, connect_timeout,
 * max_connections, verify, ca_file). */
rl_source *rl__py_http_source(PyObject *paths, PyObject *starts,
                              PyObject *offsets, PyObject *lengths,
                              PyObject *records, PyObject *http,
                              uint64_t max_file_bytes, rl__py_held *held,
                              char *msg)
{
    PyObject *names =
        PyDict_Check(http) ? PyDict_GetItemString(http, "names") : NULL;
    PyObject *urls = names ? PyDict_GetItemString(http, "urls") : NULL;
    PyObject *objects = names ? PyDict_GetItemString(http, "objects") : NULL;
    if (urls == NULL) {
        PyErr_SetString(PyExc_TypeError,
                        "http must be a dict with names and urls");
        return NULL;
    }
    rl_http_options opt;
    if (http_options(http, max_file_bytes, &opt) != 0) {
        return NULL;
    }
    Py_ssize_t n = 0;
    bool none = false;
    rl_strings cnames;
    PyObject *prefix = NULL;
    py_urls u = {0};
    int64_t *obj = NULL;
    const int64_t *offs = NULL, *lens = NULL;
    rl__py_held ranges = {0};
    rl_source *src = NULL;
    if (rl__py_strings(names, "http['names']", held, &cnames, &prefix) != 0 ||
        py_urls_of(urls, &u) != 0) {
        goto out;
    }
    /* Checked before anything reads the names (objects found by name). */
    if (rl_strings_check(&cnames, "http['names']", msg) != 0) {
        PyErr_SetString(PyExc_ValueError, msg);
        goto out;
    }
    if (records != Py_None) {
        src = http_shards(&cnames, &u.u, starts, records, &opt, held, msg);
        goto out;
    }
    obj = objects_of(paths, starts, objects ? objects : Py_None,
                     objects == Py_None, &cnames, &n, &none);
    if ((obj == NULL && !none) ||
        rl__py_file_ranges(offsets, lengths, n, &ranges, &offs, &lens) != 0) {
        goto out;
    }
    for (Py_ssize_t i = 0; offs != NULL && i < n; i++) {
        if (offs[i] < 0 && lens[i] >= 0) {
            PyErr_Format(PyExc_ValueError, "offsets: sample %zd starts at %lld",
                         i, (long long)offs[i]);
            goto out;
        }
    }
    int status;
    Py_BEGIN_ALLOW_THREADS
    src = rl_http_source_create(&cnames, &u.u, obj, (const uint64_t *)offs,
                                lens, n, &opt, &status, msg);
    Py_END_ALLOW_THREADS
    if (src == NULL) {
        /* RL_ECONFIG a ValueError, -ENOMEM a MemoryError, -errno an
         * OSError: no decode status, which alone needs the module's. */
        rl__py_raise(NULL, status, NULL, msg);
    }
out:
    rl__py_held_release(&ranges);
    py_urls_free(&u);
    Py_XDECREF(prefix);
    free(obj);
    return src;
}

/* Pipeline.set_urls: new fetch URLs for an HTTP source. */
PyObject *rl__py_http_set_urls(rl_source *src, PyObject *urls)
{
    if (src == NULL) {
        PyErr_SetString(PyExc_TypeError, "not an HTTP pipeline");
        return NULL;
    }
    py_urls u;
    char msg[RL_MSG_MAX];
    int rc = 0;
    if (py_urls_of(urls, &u) == 0) {
        Py_BEGIN_ALLOW_THREADS
        rc = rl_http_source_set_urls(src, &u.u, msg);
        Py_END_ALLOW_THREADS
    } else {
        rc = 1;
    }
    py_urls_free(&u);
    if (rc == 1) {
        return NULL;
    }
    if (rc == -ENOMEM) {
        return PyErr_NoMemory();
    }
    if (rc != 0) {
        PyErr_Format(PyExc_ValueError, "set_urls: %s", msg);
        return NULL;
    }
    Py_RETURN_NONE;
}

PyObject *rl__py_http_set_keys(rl_source *src, PyObject *args)
{
    if (src == NULL) {
        PyErr_SetString(PyExc_TypeError, "not an HTTP pipeline");
        return NULL;
    }
    const char *region = NULL, *access = NULL, *secret = NULL, *token = NULL;
    if (!PyArg_ParseTuple(args, "z|ssz:set_keys", &region, &access, &secret,
                          &token)) {
        return NULL;
    }
    if (region != NULL && (access == NULL || secret == NULL)) {
        PyErr_SetString(PyExc_TypeError,
                        "set_keys(region, access_key, secret_key, token)");
        return NULL;
    }
    int rc = rl_http_source_set_keys(src, region, access, secret, token);
    if (rc == -ENOMEM) {
        return PyErr_NoMemory();
    }
    if (rc == -ENOTSUP) {
        PyErr_Format(PyExc_NotImplementedError,
                     "libcurl %s cannot sign requests (SigV4 needs 7.75)",
                     rl_http_library());
        return NULL;
    }
    if (rc != 0) {
        /* The values are not named: they are credentials. */
        PyErr_SetString(PyExc_ValueError,
                        "set_keys: a region, access key, secret or token "
                        "that is empty, too long or holds a control "
                        "character (or ':' in the region or access key)");
        return NULL;
    }
    Py_RETURN_NONE;
}

/* FNV-1a of n bytes. */
static uint64_t hash_bytes(const uint8_t *p, size_t n)
{
    uint64_t h = 1469598103934665603u;
    for (size_t i = 0; i < n; i++) {
        h = (h ^ p[i]) * 1099511628211u;
    }
    return h;
}

/* object_ids(blob, offsets) -> None when the strings are all different,
 * else bytes of one int64 a string: the id of its first occurrence among
 * the distinct strings, numbered in the order they first come. Exact
 * (hashed, then compared byte for byte), with the GIL released; the
 * table is malloc's, freed before the return. */
PyObject *rl__py_object_ids(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *blob, *offsets;
    if (!PyArg_ParseTuple(args, "OO:object_ids", &blob, &offsets)) {
        return NULL;
    }
    rl__py_held held = {0};
    const void *b, *a;
    Py_ssize_t nb, na;
    if (rl__py_hold(&held, blob, "blob", RL_PY_U8, -1, &b, &nb) != 0 ||
        rl__py_hold(&held, offsets, "offsets", RL_PY_I64, -1, &a, &na) != 0) {
        rl__py_held_release(&held);
        return NULL;
    }
    const uint8_t *bytes = b;
    const int64_t *at = a;
    int64_t n = na > 0 ? na - 1 : 0;
    for (int64_t i = 0; i < n; i++) {
        if (at[i] < 0 || at[i] > at[i + 1] || at[i + 1] > nb) {
            rl__py_held_release(&held);
            return PyErr_Format(PyExc_ValueError,
                                "offsets: entry %lld out of order or past "
                                "the blob",
                                (long long)i);
        }
    }
    size_t cap = 16;
    while (cap < 2 * (size_t)n) {
        cap *= 2;
    }
    int64_t *slot = malloc(cap * sizeof(*slot));
    int64_t *ids = malloc(sizeof(*ids) * (size_t)(n > 0 ? n : 1));
    int64_t distinct = 0;
    if (slot != NULL && ids != NULL) {
        Py_BEGIN_ALLOW_THREADS
        memset(slot, 0xff, cap * sizeof(*slot)); /* -1: empty */
        for (int64_t i = 0; i < n; i++) {
            size_t len = (size_t)(at[i + 1] - at[i]);
            size_t h = (size_t)hash_bytes(bytes + at[i], len) & (cap - 1);
            for (;; h = (h + 1) & (cap - 1)) {
                int64_t r = slot[h];
                if (r < 0) {
                    slot[h] = i;
                    ids[i] = distinct++;
                    break;
                }
                if ((size_t)(at[r + 1] - at[r]) == len &&
                    memcmp(bytes + at[r], bytes + at[i], len) == 0) {
                    ids[i] = ids[r];
                    break;
                }
            }
        }
        Py_END_ALLOW_THREADS
    }
    free(slot);
    rl__py_held_release(&held);
    if (slot == NULL || ids == NULL) {
        free(ids);
        return PyErr_NoMemory();
    }
    PyObject *out =
        distinct == n
            ? Py_NewRef(Py_None)
            : PyBytes_FromStringAndSize((const char *)ids,
                                        (Py_ssize_t)(sizeof(*ids) * (size_t)n));
    free(ids);
    return out;
}
