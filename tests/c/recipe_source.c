/* recipe_source.c - the recipe "Adding a source" of docs/ARCHITECTURE.md
 * (see test_recipes.c). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "recipes.h"

/* ---- "Adding a source": a toy source ---- */

#define TOY_FAIL_ID NJPEG /* one sample past the JPEGs that cannot be read */

typedef struct toy_source {
    rl_source base; /* first: the pipeline sees an rl_source */
    char where[NJPEG + 1][32];
    atomic_int batches, reads, releases;
} toy_source;

static atomic_int toy_destroyed;

static const char *toy_backend(const rl_source *s)
{
    (void)s;
    return "toy";
}

static const char *toy_backend_reason(const rl_source *s)
{
    (void)s;
    return "";
}

static void toy_where(const rl_source *s, int64_t id, char *buf, size_t cap)
{
    const toy_source *t = (const toy_source *)s;
    snprintf(buf, cap, "%s",
             id >= 0 && id < s->count ? t->where[id] : "toy://?");
}

/* Serves a copy of the sample's bytes, so that release has work to do. */
static void toy_read_one(rl_source *s, rl_fetch *f)
{
    toy_source *t = (toy_source *)s;
    atomic_fetch_add(&t->reads, 1);
    if (f->id == TOY_FAIL_ID) {
        f->status = -EIO;
        snprintf(f->msg, RL_MSG_MAX, "toy: sample %lld is unreadable",
                 (long long)f->id);
        return;
    }
    uint8_t *copy = malloc(jpeg_lens[f->id]);
    if (copy == NULL) {
        f->status = -ENOMEM;
        return;
    }
    memcpy(copy, jpegs[f->id], jpeg_lens[f->id]);
    f->data = copy;
    f->len = jpeg_lens[f->id];
    f->status = 0;
}

/* Completes the batch's reads last to first: the pipeline must place each
 * sample by its fetch, never by the order of completion. */
static void toy_read_batch(rl_source *s, rl_fetch **f, int n,
                           rl_fetch_done_fn done, void *arg)
{
    toy_source *t = (toy_source *)s;
    atomic_fetch_add(&t->batches, 1);
    for (int i = n - 1; i >= 0; i--) {
        toy_read_one(s, f[i]);
        done(f[i], arg);
    }
}

static void toy_release(rl_source *s, rl_fetch *f)
{
    toy_source *t = (toy_source *)s;
    if (f->data != NULL) {
        atomic_fetch_add(&t->releases, 1);
    }
    free((void *)f->data);
    f->data = NULL;
}

static void toy_destroy(rl_source *s)
{
    atomic_fetch_add(&toy_destroyed, 1);
    free(s);
}

static const rl_source_ops toy_ops = {
    .backend = toy_backend,
    .backend_reason = toy_backend_reason,
    .where = toy_where,
    .read_batch = toy_read_batch,
    .read_one = toy_read_one,
    .release = toy_release,
    .destroy = toy_destroy,
};

/* The same source read one sample at a time, on the workers. */
static const rl_source_ops toy_ops_one = {
    .backend = toy_backend,
    .backend_reason = toy_backend_reason,
    .where = toy_where,
    .read_batch = NULL,
    .read_one = toy_read_one,
    .release = toy_release,
    .destroy = toy_destroy,
};

static toy_source *toy_source_create(const rl_source_ops *ops)
{
    toy_source *t = calloc(1, sizeof(*t));
    CHECK(t != NULL);
    t->base.ops = ops;
    t->base.count = NJPEG + 1;
    for (int i = 0; i <= NJPEG; i++) {
        snprintf(t->where[i], sizeof(t->where[i]), "toy://sample/%d", i);
    }
    return t;
}

int test_source(void)
{
    static uint8_t ref[NJPEG * SAMPLE_U8], got[NJPEG * SAMPLE_U8];
    rl_pipeline_config cfg = config(3, memory_source());
    run_all(&cfg, NJPEG, 5, 1, ref, NULL);
    uint64_t bytes = 0;
    for (int i = 0; i < NJPEG; i++) {
        bytes += jpeg_lens[i];
    }

    const rl_source_ops *ops[2] = {&toy_ops, &toy_ops_one};
    for (int k = 0; k < 2; k++) {
        for (int threads = 1; threads <= 4; threads += 3) {
            toy_source *t = toy_source_create(ops[k]);
            cfg = config(threads, &t->base);
            char msg[RL_MSG_MAX];
            rl_pipeline *p = rl_pipeline_create(&cfg, NULL, msg);
            CHECK(p != NULL);
            CHECK(strcmp(rl_pipeline_io_name(p), "toy") == 0);
            CHECK(strcmp(rl_pipeline_io_reason(p), "") == 0);
            int64_t ids[NJPEG];
            for (int i = 0; i < NJPEG; i++) {
                ids[i] = i;
            }
            /* Batches of 5, 5 and 2, all in flight together. */
            for (int first = 0; first < NJPEG; first += 5) {
                int n = NJPEG - first < 5 ? NJPEG - first : 5;
                CHECK_EQ(rl_pipeline_submit(p, ids + first, ids + first, n, 1,
                                            NULL, NULL),
                         0);
            }
            memset(got, 0xAB, sizeof(got));
            for (int off = 0; off < NJPEG;) {
                rl_slot *s;
                rl_batch_report rep;
                CHECK_EQ(rl_pipeline_next(p, -1, 0, &s, &rep), 0);
                rl_batch_report_free(&rep);
                memcpy(got + (size_t)off * SAMPLE_U8, rl_slot_data(s),
                       (size_t)rl_slot_count(s) * SAMPLE_U8);
                off += rl_slot_count(s);
                rl_slot_release(s);
            }
            CHECK(memcmp(got, ref, sizeof(ref)) == 0);

            /* A read that fails names the source's own where and msg. */
            int64_t bad[3] = {0, TOY_FAIL_ID, 2};
            CHECK_EQ(rl_pipeline_submit(p, bad, bad, 3, 1, NULL, NULL), 0);
            rl_slot *s;
            rl_batch_report rep;
            CHECK_EQ(rl_pipeline_next(p, -1, 0, &s, &rep), -EIO);
            CHECK_EQ(rep.error.pos, 1);
            CHECK_EQ(rep.error.id, TOY_FAIL_ID);
            CHECK(strcmp(rep.error.where, "toy://sample/12") == 0);
            CHECK(strcmp(rep.error.msg, "toy: sample 12 is unreadable") == 0);
            rl_batch_report_free(&rep);

            /* Each sample was read once (a batch read per batch when the
             * source offers it), every byte counted, every read
             * released. */
            rl_pipeline_stats st;
            rl_pipeline_stats_get(p, &st);
            CHECK_EQ(atomic_load(&t->reads), NJPEG + 3);
            CHECK_EQ(atomic_load(&t->batches), ops[k] == &toy_ops ? 4 : 0);
            CHECK_EQ(atomic_load(&t->releases), NJPEG + 2);
            CHECK_EQ(st.bytes_read, bytes + jpeg_lens[0] + jpeg_lens[2]);
            CHECK_EQ(st.errors, 1);
            int destroyed = atomic_load(&toy_destroyed);
            rl_pipeline_destroy(p); /* the pipeline owns the source */
            CHECK_EQ(atomic_load(&toy_destroyed), destroyed + 1);
        }
    }
    printf("  source: a toy source (reverse completion, and read_one only)"
           " equals the memory source\n");
    return atomic_load(&rl_test_checks); /* this file's checks */
}
