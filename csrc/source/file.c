/*
 * source/file.c - samples that are files, or byte ranges of files (tar
 * shards), read with io_uring or pread (source/io.h).
 *
 * DESIGN: the table is borrowed (source/source.h, rl_file_table): the
 * names of the files back to back in one blob with their positions, a
 * prefix kept once, and for tar shards the first sample of each shard
 * instead of a name a sample, so a data set of a billion samples costs
 * the source nothing per sample beyond the caller's offsets and lengths.
 * A sample's full path is made when its read is prepared, into a buffer
 * of the request's own (the blob holds no NUL terminators), and freed
 * when the read ends: the path is needed only to open the file. A batch
 * names its samples by id and nothing of the table is copied per batch.
 * With io_uring the pipeline's I/O thread reads a whole batch in
 * one submission through the context made here (used by that thread only);
 * with pread each worker reads its own sample, and read_batch is not
 * offered. Either way a replacement sample (the skip policy) is read with
 * pread on the worker that needs it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "source/shard_records.h"
#include "source/source.h"

typedef struct file_source {
    rl_source base;
    rl_file_options opt;
    rl_file_table t; /* borrowed arrays; t.prefix points at prefix */
    char *prefix;    /* copied */
    size_t prefix_len;
    rl_io *io; /* the I/O thread's context */
    bool uring;
    char reason[RL_MSG_MAX];
} file_source;

static const char *file_backend(const rl_source *s)
{
    return ((const file_source *)s)->uring ? "io_uring" : "pread";
}

static const char *file_backend_reason(const rl_source *s)
{
    return ((const file_source *)s)->reason;
}

int64_t rl_file_table_count(const rl_file_table *t)
{
    return t->starts != NULL ? t->starts[t->nfiles] : t->nfiles;
}

/* The file of sample id (its shard's, found by binary search). */
static int64_t file_of(const rl_file_table *t, int64_t id)
{
    return t->starts != NULL ? rl_run_of(t->starts, t->nfiles, id) : id;
}

/* The name of sample id's file (not NUL-terminated) in *name, its length
 * returned. */
static size_t name_of(const file_source *f, int64_t id, const uint8_t **name)
{
    int64_t k = file_of(&f->t, id);
    *name = f->t.names + f->t.at[k];
    return (size_t)(f->t.at[k + 1] - f->t.at[k]);
}

static void file_where(const rl_source *s, int64_t id, char *buf, size_t cap)
{
    const file_source *f = (const file_source *)s;
    if (id < 0 || id >= s->count) {
        snprintf(buf, cap, "?");
        return;
    }
    const uint8_t *name;
    size_t len = name_of(f, id, &name);
    snprintf(buf, cap, "%s%.*s", f->prefix, (int)(len < INT_MAX ? len : 0),
             (const char *)name);
}

/* Fills the read request of a fetch from the table: its path in a buffer
 * of its own (freed by fetch_finish). Returns 0, or a status the fetch
 * fails with (its message said). */
static int fetch_prepare(file_source *f, rl_fetch *x)
{
    memset(&x->rd, 0, sizeof(x->rd));
    x->rd.fd = -1;
    const uint8_t *name;
    size_t len = name_of(f, x->id, &name);
    size_t need = f->prefix_len + len + 1;
    if (need > PATH_MAX) {
        /* Named by its first bytes: the name is not NUL-terminated. */
        const char *head = f->prefix_len > 0 ? f->prefix : (const char *)name;
        size_t shown = f->prefix_len > 0 ? f->prefix_len : len;
        snprintf(x->msg, RL_MSG_MAX,
                 "file name too long: a path of %zu bytes (prefix %zu + "
                 "name %zu), PATH_MAX is %d: %.*s...",
                 need - 1, f->prefix_len, len, PATH_MAX,
                 (int)(shown < 64 ? shown : 64), head);
        return -ENAMETOOLONG;
    }
    char *path = malloc(need);
    if (path == NULL) {
        snprintf(x->msg, RL_MSG_MAX, "out of memory");
        return -ENOMEM;
    }
    memcpy(path, f->prefix, f->prefix_len);
    memcpy(path + f->prefix_len, name, len);
    path[need - 1] = '\0';
    x->rd.path = path;
    x->rd.direct = f->opt.direct;
    if (f->t.records != NULL) {
        uint64_t at, bytes;
        int rc = rl_shard_records_get(f->t.records, x->id, &at, &bytes, NULL,
                                      x->msg, RL_MSG_MAX);
        if (rc != 0 || at > (uint64_t)INT64_MAX ||
            bytes > (uint64_t)INT64_MAX - at) {
            free(path);
            x->rd.path = NULL;
            if (rc == 0) {
                /* Only a corrupt record file gives one: name the range. */
                snprintf(x->msg, RL_MSG_MAX,
                         "its record gives bytes %llu..+%llu, past any file: "
                         "the shard's record file is corrupt (remove it; "
                         "opening the shard set again rebuilds it)",
                         (unsigned long long)at, (unsigned long long)bytes);
            }
            return rc != 0 ? rc : -EBADMSG;
        }
        x->rd.offset = at;
        x->rd.length = (int64_t)bytes;
        return 0;
    }
    int64_t n = f->t.lengths != NULL ? f->t.lengths[x->id] : -1;
    x->rd.offset =
        n >= 0 && f->t.offsets != NULL ? (uint64_t)f->t.offsets[x->id] : 0;
    x->rd.length = n >= 0 ? n : -1;
    return 0;
}

/* Copies a finished read's outcome into its fetch and frees its path. */
static void fetch_finish(file_source *f, rl_fetch *x)
{
    free((void *)x->rd.path);
    x->rd.path = NULL;
    x->status = x->rd.status;
    x->direct_refused = x->rd.direct_refused;
    if (x->status == 0) {
        x->data = x->rd.data;
        x->len = x->rd.len;
    } else if (x->status == RL_ETOOBIG) {
        snprintf(x->msg, RL_MSG_MAX, "file larger than the %llu-byte limit",
                 (unsigned long long)f->opt.max_file_bytes);
    } else {
        snprintf(x->msg, RL_MSG_MAX, "%s", strerror(-x->status));
    }
}

static void file_read_one(rl_source *s, rl_fetch *x)
{
    file_source *f = (file_source *)s;
    int status = fetch_prepare(f, x);
    if (status != 0) {
        x->status = status;
        return;
    }
    rl_io_read_one(&x->rd, f->opt.max_file_bytes);
    fetch_finish(f, x);
}

typedef struct {
    file_source *f;
    rl_fetch_done_fn done;
    void *arg;
} batch_ctx;

static void on_read(rl_read *r, void *arg)
{
    batch_ctx *c = arg;
    rl_fetch *x = (rl_fetch *)((char *)r - offsetof(rl_fetch, rd));
    fetch_finish(c->f, x);
    c->done(x, c->arg);
}

static void file_read_batch(rl_source *s, rl_fetch **xs, int n,
                            rl_fetch_done_fn done, void *arg)
{
    file_source *f = (file_source *)s;
    rl_read *small[64];
    rl_read **reqs = n <= 64 ? small : malloc(sizeof(*reqs) * (size_t)n);
    if (reqs == NULL) {
        for (int i = 0; i < n; i++) {
            xs[i]->status = -ENOMEM;
            snprintf(xs[i]->msg, RL_MSG_MAX, "out of memory");
            done(xs[i], arg);
        }
        return;
    }
    int m = 0; /* the requests prepared; the others failed at once */
    for (int i = 0; i < n; i++) {
        int status = fetch_prepare(f, xs[i]);
        if (status != 0) {
            xs[i]->status = status;
            done(xs[i], arg);
        } else {
            reqs[m++] = &xs[i]->rd;
        }
    }
    batch_ctx c = {f, done, arg};
    rl_io_read_batch(f->io, reqs, m, on_read, &c);
    if (reqs != small) {
        free(reqs);
    }
}

static void file_release(rl_source *s, rl_fetch *x)
{
    (void)s;
    free(x->rd.buf);
    x->rd.buf = NULL;
    x->data = NULL;
}

static void file_destroy(rl_source *s)
{
    file_source *f = (file_source *)s;
    rl_io_destroy(f->io);
    rl_shard_records_destroy(f->t.records);
    free(f->prefix);
    free(f);
}

static const rl_source_ops file_ops = {
    .backend = file_backend,
    .backend_reason = file_backend_reason,
    .where = file_where,
    .read_batch = file_read_batch,
    .read_one = file_read_one,
    .release = file_release,
    .destroy = file_destroy,
};

/* The same, for pread: no batch reads. */
static const rl_source_ops file_pread_ops = {
    .backend = file_backend,
    .backend_reason = file_backend_reason,
    .where = file_where,
    .read_batch = NULL,
    .read_one = file_read_one,
    .release = file_release,
    .destroy = file_destroy,
};

/* The first i in [0, n) with a[i] > a[i + 1] (at n - 1: none). */
static int64_t first_fall(const int64_t *a, int64_t n)
{
    int64_t i = 0;
    while (i + 1 < n && a[i] <= a[i + 1]) {
        i++;
    }
    return i;
}

int rl_file_table_check(const rl_file_table *t, char *msg)
{
    const int64_t *at = t->at;
    int64_t k = t->nfiles >= 0 ? first_fall(at, t->nfiles + 1) : 0;
    if (t->nfiles < 0 || at[0] != 0) {
        snprintf(msg, RL_MSG_MAX, "paths: the name offsets must start at 0");
    } else if (k < t->nfiles) {
        snprintf(msg, RL_MSG_MAX,
                 "paths: the name offsets must not fall (entry %lld is %lld, "
                 "entry %lld is %lld)",
                 (long long)k, (long long)at[k], (long long)k + 1,
                 (long long)at[k + 1]);
    } else if ((uint64_t)at[t->nfiles] > t->names_len) {
        snprintf(msg, RL_MSG_MAX,
                 "paths: the name offsets end at %lld, past the %zu-byte blob",
                 (long long)at[t->nfiles], t->names_len);
    } else if (memchr(t->names, 0, t->names_len) != NULL) {
        snprintf(msg, RL_MSG_MAX, "paths: a NUL byte in a name");
    } else if (t->starts != NULL &&
               (t->starts[0] != 0 ||
                first_fall(t->starts, t->nfiles + 1) < t->nfiles)) {
        k = first_fall(t->starts, t->nfiles + 1);
        snprintf(msg, RL_MSG_MAX,
                 "starts: each shard's first sample, from 0, never falling "
                 "(starts[0] = %lld; entry %lld is %lld, the next %lld)",
                 (long long)t->starts[0], (long long)k, (long long)t->starts[k],
                 (long long)t->starts[k < t->nfiles ? k + 1 : k]);
    } else if (t->records != NULL && (t->starts == NULL || t->offsets != NULL ||
                                      t->lengths != NULL)) {
        snprintf(msg, RL_MSG_MAX,
                 "records: only for shards (starts), without offsets or "
                 "lengths");
    } else {
        int64_t n = rl_file_table_count(t), i = 0;
        while (t->offsets != NULL && t->lengths != NULL && i < n &&
               (t->offsets[i] >= 0 || t->lengths[i] < 0)) {
            i++;
        }
        if (t->offsets == NULL || t->lengths == NULL || i == n) {
            return 0;
        }
        snprintf(msg, RL_MSG_MAX, "offsets: sample %lld starts at %lld",
                 (long long)i, (long long)t->offsets[i]);
    }
    return RL_ECONFIG;
}

rl_source *rl_file_source_create(const rl_file_table *t,
                                 const rl_file_options *opt, char *msg)
{
    msg[0] = '\0';
    file_source *f = calloc(1, sizeof(*f));
    if (f == NULL || (f->prefix = strdup(t->prefix)) == NULL) {
        goto out_nomem;
    }
    f->t = *t;
    f->t.prefix = f->prefix;
    f->prefix_len = strlen(f->prefix);
    f->base.count = rl_file_table_count(t);
    f->opt = *opt;
    f->io = rl_io_create(opt->io, opt->max_file_bytes, f->reason);
    if (f->io == NULL) {
        goto out_nomem;
    }
    f->uring = rl_io_backend_of(f->io) == RL_IO_URING;
    f->base.ops = f->uring ? &file_ops : &file_pread_ops;
    snprintf(msg, RL_MSG_MAX, "%s", f->reason);
    return &f->base;

out_nomem:
    if (f != NULL) {
        free(f->prefix);
        free(f);
    }
    snprintf(msg, RL_MSG_MAX, "out of memory");
    return NULL;
}

void rl_source_destroy(rl_source *s)
{
    if (s != NULL) {
        s->ops->destroy(s);
    }
}
