/* test_lock_rule.c - the pipeline's lock rule (core/pipeline_internal.h), seen from a
 * source: no callback of a source runs on a thread that holds a
 * pipeline's lock, so a source may take locks of its own. A memory source
 * is wrapped by one whose every callback checks that (test builds count
 * the locks each thread holds: testing/hooks.h), then driven through each
 * path that calls into a source: batch reads on the I/O thread and reads
 * on the workers, a failed sample's report (where), the skip policy's
 * replacements, stats (counters), cancel with batches in flight, destroy.
 * Run under TSan too. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/pipeline.h"
#include "testing/hooks.h"
#include "check.h"
#include "jpegmake.h"

#define NGOOD 8
#define NSAMPLES (NGOOD + 1) /* the last one is not an image */

enum { C_WHERE, C_READ_ONE, C_READ_BATCH, C_RELEASE, C_CANCEL, C_COUNTERS };
static const char *const call_names[] = {"where",   "read_one", "read_batch",
                                         "release", "cancel",   "counters"};

typedef struct checked_source {
    rl_source base; /* first: the pipeline sees an rl_source */
    rl_source *inner;
    atomic_int calls[6];
} checked_source;

static atomic_int destroyed;

/* Every callback starts here: the calling thread must hold no lock. */
static checked_source *enter(const rl_source *s, int call)
{
    if (rl__test_locks_held() != 0) {
        fprintf(stderr, "the source's %s was called under the lock\n",
                call_names[call]);
    }
    CHECK_EQ(rl__test_locks_held(), 0);
    checked_source *c = (checked_source *)s;
    atomic_fetch_add(&c->calls[call], 1);
    return c;
}

static const char *ck_backend(const rl_source *s)
{
    (void)s;
    return "checked";
}

static const char *ck_backend_reason(const rl_source *s)
{
    (void)s;
    return "";
}

static void ck_where(const rl_source *s, int64_t id, char *buf, size_t cap)
{
    checked_source *c = enter(s, C_WHERE);
    c->inner->ops->where(c->inner, id, buf, cap);
}

static void ck_read_one(rl_source *s, rl_fetch *f)
{
    checked_source *c = enter(s, C_READ_ONE);
    c->inner->ops->read_one(c->inner, f);
}

static void ck_read_batch(rl_source *s, rl_fetch **f, int n,
                          rl_fetch_done_fn done, void *arg)
{
    checked_source *c = enter(s, C_READ_BATCH);
    for (int i = 0; i < n; i++) {
        c->inner->ops->read_one(c->inner, f[i]);
        done(f[i], arg);
    }
}

static void ck_release(rl_source *s, rl_fetch *f)
{
    checked_source *c = enter(s, C_RELEASE);
    c->inner->ops->release(c->inner, f);
}

static void ck_cancel(rl_source *s)
{
    enter(s, C_CANCEL);
}

static void ck_counters(const rl_source *s, rl_source_counters *out)
{
    enter(s, C_COUNTERS);
    memset(out, 0, sizeof(*out));
}

static void ck_destroy(rl_source *s)
{
    CHECK_EQ(rl__test_locks_held(), 0);
    checked_source *c = (checked_source *)s;
    rl_source_destroy(c->inner);
    free(c);
    atomic_fetch_add(&destroyed, 1);
}

static const rl_source_ops batch_ops = {
    .backend = ck_backend,
    .backend_reason = ck_backend_reason,
    .where = ck_where,
    .read_batch = ck_read_batch,
    .read_one = ck_read_one,
    .release = ck_release,
    .destroy = ck_destroy,
    .cancel = ck_cancel,
    .counters = ck_counters,
};

/* The same read one sample at a time, on the workers. */
static const rl_source_ops one_ops = {
    .backend = ck_backend,
    .backend_reason = ck_backend_reason,
    .where = ck_where,
    .read_batch = NULL,
    .read_one = ck_read_one,
    .release = ck_release,
    .destroy = ck_destroy,
    .cancel = ck_cancel,
    .counters = ck_counters,
};

static const uint8_t *bufs[NSAMPLES];
static size_t lens[NSAMPLES];
static const char *names[NSAMPLES];
static rl_view view0;

static rl_pipeline *make(const rl_source_ops *ops, bool skip,
                         checked_source **out)
{
    checked_source *c = calloc(1, sizeof(*c));
    CHECK(c != NULL);
    c->inner = rl_memory_source_create(bufs, lens, names, NSAMPLES);
    CHECK(c->inner != NULL);
    c->base.ops = ops;
    c->base.count = NSAMPLES;
    rl_pipeline_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    memset(&view0, 0, sizeof(view0));
    cfg.nthreads = 3;
    cfg.source = &c->base;
    cfg.sample.seed = 5;
    cfg.sample.views = &view0;
    cfg.sample.nviews = 1;
    cfg.sample.limits.max_pixels = RL_DEFAULT_MAX_PIXELS;
    cfg.sample.limits.max_scans = RL_DEFAULT_MAX_SCANS;
    cfg.sample.limits.max_file_bytes = RL_DEFAULT_MAX_FILE_BYTES;
    view0.place.layout = RL_LAYOUT_NCHW;
    view0.transform.kind = RL_T_RESIZE_CROP;
    view0.transform.out_h = view0.transform.out_w = 16;
    view0.transform.resize_short = 20;
    view0.transform.ratio_lo = view0.transform.ratio_hi = 1.0;
    cfg.skip_errors = skip;
    cfg.max_consecutive_errors = 4;
    char msg[RL_MSG_MAX];
    rl_pipeline *p = rl_pipeline_create(&cfg, NULL, msg);
    if (p == NULL) {
        fprintf(stderr, "%s\n", msg);
    }
    CHECK(p != NULL);
    *out = c;
    return p;
}

static void run(const rl_source_ops *ops)
{
    /* A failed sample's batch: its report names it by the source. */
    checked_source *c;
    rl_pipeline *p = make(ops, false, &c);
    int64_t ids[4] = {0, NGOOD, 2, 3};
    CHECK_EQ(rl_pipeline_submit(p, ids, ids, 4, 0, NULL, NULL), 0);
    rl_slot *s;
    rl_batch_report rep;
    CHECK_EQ(rl_pipeline_next(p, -1, 0, &s, &rep), RL_EDECODE);
    CHECK(strcmp(rep.error.where, "not-an-image") == 0);
    CHECK_EQ(rep.error.id, NGOOD);
    rl_batch_report_free(&rep);
    rl_pipeline_stats st;
    rl_pipeline_stats_get(p, &st);
    /* Batches in flight, cancelled: the source's cancel is called. */
    for (int i = 0; i < 6; i++) {
        CHECK_EQ(rl_pipeline_submit(p, ids, ids, 4, 0, NULL, NULL), 0);
    }
    rl_pipeline_cancel(p);
    CHECK(atomic_load(&c->calls[C_WHERE]) > 0);
    CHECK(atomic_load(&c->calls[C_COUNTERS]) > 0);
    int reads = ops->read_batch != NULL ? C_READ_BATCH : C_READ_ONE;
    CHECK(atomic_load(&c->calls[reads]) > 0);
    int gone = atomic_load(&destroyed);
    rl_pipeline_destroy(p);
    CHECK_EQ(atomic_load(&destroyed), gone + 1);

    /* The skip policy: the bad sample is replaced on its worker
     * (read_one), and the report names it. */
    p = make(ops, true, &c);
    CHECK_EQ(rl_pipeline_submit(p, ids, ids, 4, 0, NULL, NULL), 0);
    CHECK_EQ(rl_pipeline_next(p, -1, 0, &s, &rep), 0);
    CHECK_EQ(rep.n_replaced, 1);
    CHECK_EQ(rep.replaced[0].id, 0); /* the next one of the table, wrapped */
    CHECK(strcmp(rep.replaced[0].error.where, "not-an-image") == 0);
    rl_batch_report_free(&rep);
    rl_slot_release(s);
    CHECK(atomic_load(&c->calls[C_READ_ONE]) > 0);
    CHECK(atomic_load(&c->calls[C_RELEASE]) > 0);
    rl_pipeline_destroy(p);
}

int main(void)
{
    for (int i = 0; i < NGOOD; i++) {
        bufs[i] = make_jpeg(24 + i, 20 + 2 * i, i, &lens[i]);
        names[i] = "a-jpeg";
    }
    static const uint8_t junk[] = "\xff\xd8\xff not an image";
    bufs[NGOOD] = junk;
    lens[NGOOD] = sizeof(junk);
    names[NGOOD] = "not-an-image";
    run(&batch_ops);
    run(&one_ops);
    for (int i = 0; i < NGOOD; i++) {
        free((void *)bufs[i]);
    }
    PASS("test_lock_rule");
}
