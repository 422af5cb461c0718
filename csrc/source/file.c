/*
 * source/file.c - samples that are files, or byte ranges of files (tar
 * shards), read with io_uring or pread (source/io.h).
 *
 * DESIGN: the table is copied once, at creation, into one block of paths
 * and two arrays, so a batch names its samples by id and nothing is copied
 * per batch. With io_uring the pipeline's I/O thread reads a whole batch in
 * one submission through the context made here (used by that thread only);
 * with pread each worker reads its own sample, and read_batch is not
 * offered. Either way a replacement sample (the skip policy) is read with
 * pread on the worker that needs it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "source/source.h"

typedef struct file_source {
    rl_source base;
    rl_file_options opt;
    char **paths; /* into block */
    char *block;  /* every path, NUL-terminated */
    uint64_t *offsets;
    int64_t *lengths; /* -1: the whole file */
    rl_io *io;        /* the I/O thread's context */
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

static const char *file_where(const rl_source *s, int64_t id)
{
    const file_source *f = (const file_source *)s;
    return id >= 0 && id < s->count ? f->paths[id] : "?";
}

/* Fills the read request of a fetch from the table. */
static void fetch_prepare(file_source *f, rl_fetch *x)
{
    memset(&x->rd, 0, sizeof(x->rd));
    x->rd.path = f->paths[x->id];
    x->rd.offset = f->offsets[x->id];
    x->rd.length = f->lengths[x->id];
    x->rd.direct = f->opt.direct;
    x->rd.fd = -1;
}

/* Copies a finished read's outcome into its fetch. */
static void fetch_finish(file_source *f, rl_fetch *x)
{
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
    fetch_prepare(f, x);
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
    for (int i = 0; i < n; i++) {
        fetch_prepare(f, xs[i]);
        reqs[i] = &xs[i]->rd;
    }
    batch_ctx c = {f, done, arg};
    rl_io_read_batch(f->io, reqs, n, on_read, &c);
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
    free(f->paths);
    free(f->block);
    free(f->offsets);
    free(f->lengths);
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

rl_source *rl_file_source_create(const char *const *paths,
                                 const uint64_t *offsets,
                                 const int64_t *lengths, int64_t n,
                                 const rl_file_options *opt, char *msg)
{
    msg[0] = '\0';
    file_source *f = calloc(1, sizeof(*f));
    size_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        total += strlen(paths[i]) + 1;
    }
    size_t count = n > 0 ? (size_t)n : 1;
    if (f == NULL || (f->paths = malloc(sizeof(char *) * count)) == NULL ||
        (f->block = malloc(total ? total : 1)) == NULL ||
        (f->offsets = calloc(count, sizeof(uint64_t))) == NULL ||
        (f->lengths = malloc(sizeof(int64_t) * count)) == NULL) {
        goto out_nomem;
    }
    f->base.count = n;
    f->opt = *opt;
    char *p = f->block;
    for (int64_t i = 0; i < n; i++) {
        size_t len = strlen(paths[i]) + 1;
        memcpy(p, paths[i], len);
        f->paths[i] = p;
        p += len;
        f->lengths[i] = -1;
        if (offsets != NULL && lengths != NULL && lengths[i] >= 0) {
            f->offsets[i] = offsets[i];
            f->lengths[i] = lengths[i];
        }
    }
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
        free(f->paths);
        free(f->block);
        free(f->offsets);
        free(f->lengths);
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
