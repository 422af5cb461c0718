/* test_pipeline.c - the pipeline without Python: batches come back in
 * order and equal a single-threaded decode of each sample, whatever the
 * thread count and backend; errors name their file; the skip policy
 * replaces a bad sample with the next one of its part of the table that
 * loads and reports it; cancel and destroy work with batches in flight and
 * with slots still held. Run under TSan too. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <jpeglib.h>

#include "core/pipeline.h"
#include "core/plan.h"
#include "core/sample.h"
#include "rng.h"
#include "check.h"

#define DST(d, rs, ps, cs)        \
    ((rl_dst){.data = (d),        \
              .row_stride = (rs), \
              .px_stride = (ps),  \
              .ch_stride = (cs)})

#define NIMG 40

static char dir[] = "/tmp/rl_test_pipe_XXXXXX";
static char paths[NIMG][64];
static const char *path_list[NIMG];

static void write_jpeg(const char *path, int w, int h, int seed)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr err;
    c.err = jpeg_std_error(&err);
    jpeg_create_compress(&c);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    jpeg_stdio_dest(&c, f);
    c.image_width = (JDIMENSION)w;
    c.image_height = (JDIMENSION)h;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 85, TRUE);
    if (seed % 3 == 0) {
        jpeg_simple_progression(&c);
    }
    jpeg_start_compress(&c, TRUE);
    uint8_t *row = malloc((size_t)w * 3);
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++) {
            row[x * 3] = (uint8_t)(x * 255 / w);
            row[x * 3 + 1] = (uint8_t)(y * 255 / h);
            row[x * 3 + 2] = (uint8_t)(((x / 8 + y / 8 + seed) % 2) * 200);
        }
        JSAMPROW r = row;
        jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    fclose(f);
    free(row);
}

static uint8_t *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*len);
    CHECK_EQ(fread(b, 1, *len, f), *len);
    fclose(f);
    return b;
}

/* The tables the file sources borrow, freed at exit (after the
 * pipelines that read them). */
static void **tables;
static int ntables;

static void free_tables(void)
{
    for (int i = 0; i < ntables; i++) {
        free(tables[i]);
    }
    free(tables);
}

/* A file source over n paths, as one blob of names; the pipeline it is
 * given to owns it. */
static rl_source *file_source(const char *const *list, int n, rl_io_backend io)
{
    rl_file_options opt = {.io = io,
                           .max_file_bytes = RL_DEFAULT_MAX_FILE_BYTES};
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        total += strlen(list[i]);
    }
    int64_t *at = malloc(sizeof(int64_t) * (size_t)(n + 1));
    uint8_t *names = malloc(total + 1);
    if (ntables == 0) {
        atexit(free_tables);
    }
    tables = realloc(tables, sizeof(void *) * (size_t)(ntables + 2));
    CHECK(at != NULL && names != NULL && tables != NULL);
    tables[ntables++] = at;
    tables[ntables++] = names;
    at[0] = 0;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(list[i]);
        memcpy(names + at[i], list[i], len);
        at[i + 1] = at[i] + (int64_t)len;
    }
    rl_file_table t = {.names = names,
                       .names_len = total,
                       .at = at,
                       .nfiles = n,
                       .prefix = ""};
    char msg[RL_MSG_MAX];
    CHECK_EQ(rl_file_table_check(&t, msg), 0);
    rl_source *src = rl_file_source_create(&t, &opt, msg);
    CHECK(src != NULL);
    return src;
}

/* The one view of the configs config() makes (each call starts it anew). */
static rl_view view0;

static rl_pipeline_config config(int threads, rl_source *src,
                                 rl_transform_kind kind)
{
    rl_pipeline_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    memset(&view0, 0, sizeof(view0));
    cfg.nthreads = threads;
    cfg.source = src;
    cfg.sample.seed = 42;
    cfg.sample.views = &view0;
    cfg.sample.nviews = 1;
    view0.place.layout = RL_LAYOUT_NCHW;
    cfg.sample.limits.max_pixels = RL_DEFAULT_MAX_PIXELS;
    cfg.sample.limits.max_scans = RL_DEFAULT_MAX_SCANS;
    cfg.sample.limits.max_file_bytes = RL_DEFAULT_MAX_FILE_BYTES;
    rl_transform *t = &view0.transform;
    t->kind = kind;
    t->out_h = 32;
    t->out_w = 40;
    t->resize_short = 48;
    t->scale_lo = 0.08;
    t->scale_hi = 1.0;
    t->ratio_lo = 0.75;
    t->ratio_hi = 4.0 / 3.0;
    t->flip_p = 0.5;
    return cfg;
}

/* The reference: each sample decoded alone on this thread, with its index
 * as its key. */
static void reference(const rl_pipeline_config *cfg, int64_t epoch,
                      uint8_t *out)
{
    rl_decoders jpeg = {.defs = {&rl_jpeg_decoder}, .n = 1};
    rl_sample_ctx *c = rl_sample_ctx_create(&jpeg);
    CHECK(c != NULL);
    const rl_transform *t = &cfg->sample.views[0].transform;
    size_t sb = (size_t)t->out_h * t->out_w * 3;
    for (int i = 0; i < NIMG; i++) {
        size_t len;
        uint8_t *data = read_all(paths[i], &len);
        rl_dst dst = DST(out + (size_t)i * sb, t->out_w, 1,
                         (ptrdiff_t)t->out_w * t->out_h);
        char msg[RL_MSG_MAX];
        rl_sample_note note;
        CHECK_EQ(rl_sample_run(c, &cfg->sample, data, len, epoch, i, &dst,
                               &note, msg),
                 0);
        CHECK_EQ(note.decoder, 0);
        free(data);
    }
    rl_sample_ctx_destroy(c);
}

static void run_epoch(rl_pipeline *p, int bs, int64_t epoch, uint8_t *out)
{
    size_t sb = rl_pipeline_sample_bytes(p);
    int submitted = 0, received = 0;
    rl_slot *s;
    rl_batch_report rep;
    while (received < NIMG) {
        while (submitted < NIMG && rl_pipeline_inflight(p) < 3) {
            int64_t ids[16];
            int n = NIMG - submitted < bs ? NIMG - submitted : bs;
            for (int k = 0; k < n; k++) {
                ids[k] = submitted + k; /* keys: the ids themselves */
            }
            CHECK_EQ(rl_pipeline_submit(p, ids, ids, n, epoch, NULL, NULL), 0);
            submitted += n;
        }
        CHECK_EQ(rl_pipeline_next(p, -1, 0, &s, &rep), 0);
        CHECK_EQ(rep.n_fallback, 0);
        CHECK_EQ(rep.n_replaced, 0);
        rl_batch_report_free(&rep);
        memcpy(out + (size_t)received * sb, rl_slot_data(s),
               (size_t)rl_slot_count(s) * sb);
        received += rl_slot_count(s);
        rl_slot_release(s);
    }
    CHECK_EQ(rl_pipeline_next(p, 10, 0, &s, &rep), RL_ECLOSED);
}

/* The skip policy on a table with bad samples, read with backend io:
 * a failed sample is replaced by the next one of the table that loads
 * (wrapping), the report says which and why, and the stats add up; with
 * too small a max_consecutive_errors the batch fails and says so. */
static void check_skip(rl_io_backend io, const char *bad, uint8_t *ref)
{
    /* 0 good, 1 missing, 2 corrupt, 3 and 4 good, 5 missing (last). */
    const char *table[6] = {paths[0], "/nonexistent.jpg", bad,
                            paths[3], paths[4],           "/nonexistent.jpg"};
    char msg[RL_MSG_MAX];
    rl_pipeline_config cfg =
        config(2, file_source(table, 6, io), RL_T_RESIZE_CROP);
    /* No flip: a sample's pixels do not depend on its key, so a
     * replacement's equal the reference of its id. */
    view0.transform.flip_p = 0.0;
    cfg.skip_errors = true;
    cfg.max_consecutive_errors = 3;
    reference(&cfg, 0, ref);
    rl_pipeline *p = rl_pipeline_create(&cfg, NULL, msg);
    CHECK(p != NULL);
    size_t sb = rl_pipeline_sample_bytes(p);

    int64_t ids[3] = {0, 1, 4};
    CHECK_EQ(rl_pipeline_submit(p, ids, ids, 3, 0, NULL, NULL), 0);
    rl_slot *s;
    rl_batch_report rep;
    CHECK_EQ(rl_pipeline_next(p, -1, 0, &s, &rep), 0);
    CHECK_EQ(rep.n_replaced, 1);
    CHECK_EQ(rep.n_fallback, 0);
    CHECK_EQ(rep.replaced[0].id, 3); /* 2 is corrupt: 3 is the next good */
    CHECK_EQ(rep.replaced[0].error.pos, 1);
    CHECK_EQ(rep.replaced[0].error.id, 1);
    CHECK_EQ(rep.replaced[0].error.status, -ENOENT);
    CHECK(strcmp(rep.replaced[0].error.where, "/nonexistent.jpg") == 0);
    CHECK(rep.replaced[0].error.msg[0] != '\0');
    CHECK_EQ(rl_slot_count(s), 3);
    const uint8_t *got = rl_slot_data(s);
    CHECK(memcmp(got, ref, sb) == 0);
    CHECK(memcmp(got + sb, ref + 3 * sb, sb) == 0);
    CHECK(memcmp(got + 2 * sb, ref + 4 * sb, sb) == 0);
    rl_batch_report_free(&rep);
    CHECK(rep.replaced == NULL && rep.n_replaced == 0);
    rl_slot_release(s);

    /* The last sample of the table is replaced by the first. */
    ids[0] = 5;
    CHECK_EQ(rl_pipeline_submit(p, ids, ids, 1, 0, NULL, NULL), 0);
    CHECK_EQ(rl_pipeline_next(p, -1, 0, &s, &rep), 0);
    CHECK_EQ(rep.n_replaced, 1);
    CHECK_EQ(rep.replaced[0].id, 0);
    CHECK_EQ(rep.replaced[0].error.pos, 0);
    CHECK_EQ(rep.replaced[0].error.id, 5);
    CHECK(memcmp(rl_slot_data(s), ref, sb) == 0);
    rl_batch_report_free(&rep);
    rl_slot_release(s);

    /* Each sample that failed counts once in errors, candidates included
     * (1, 2, then 5); skipped counts the two replaced. */
    rl_pipeline_stats st;
    rl_pipeline_stats_get(p, &st);
    CHECK_EQ(st.errors, 3);
    CHECK_EQ(st.skipped, 2);
    CHECK(st.errors >= st.skipped);
    CHECK_EQ(st.batches, 2);
    rl_pipeline_destroy(p);

    /* One candidate allowed after the failure, and it is corrupt too. */
    cfg = config(2, file_source(table, 6, io), RL_T_RESIZE_CROP);
    cfg.skip_errors = true;
    cfg.max_consecutive_errors = 2;
    p = rl_pipeline_create(&cfg, NULL, msg);
    CHECK(p != NULL);
    CHECK_EQ(rl_pipeline_submit(p, ids + 1, ids + 1, 1, 0, NULL, NULL), 0);
    CHECK_EQ(rl_pipeline_next(p, -1, 0, &s, &rep), -ENOENT);
    CHECK(s == NULL);
    CHECK_EQ(rep.error.status, -ENOENT);
    CHECK_EQ(rep.error.pos, 0);
    CHECK_EQ(rep.error.id, 1);
    CHECK(strcmp(rep.error.where, "/nonexistent.jpg") == 0);
    CHECK(strstr(rep.error.msg, "on_error='skip'") != NULL);
    rl_batch_report_free(&rep);
    rl_pipeline_stats_get(p, &st);
    CHECK_EQ(st.errors, 2);
    CHECK_EQ(st.skipped, 0);
    rl_pipeline_destroy(p);
}

/* Runs ids[0..n) as one batch of a skip pipeline over table (6 samples,
 * as check_skip's) cut into parts; returns its status, *rep filled. */
static int skip_batch(const char *const *table, const int64_t *parts,
                      int64_t nparts, const int64_t *ids, int n,
                      rl_batch_report *rep)
{
    char msg[RL_MSG_MAX];
    rl_pipeline_config cfg =
        config(2, file_source(table, 6, RL_IO_PREAD), RL_T_RESIZE_CROP);
    cfg.skip_errors = true;
    cfg.max_consecutive_errors = 4;
    cfg.parts = parts;
    cfg.nparts = nparts;
    rl_pipeline *p = rl_pipeline_create(&cfg, NULL, msg);
    CHECK(p != NULL);
    CHECK_EQ(rl_pipeline_submit(p, ids, ids, n, 0, NULL, NULL), 0);
    rl_slot *s;
    int rc = rl_pipeline_next(p, -1, 0, &s, rep);
    if (rc == 0) {
        rl_slot_release(s);
    }
    rl_pipeline_destroy(p);
    return rc;
}

/* A table made of several datasets (parts): a failed sample is replaced
 * by the next one of its own part that loads, wrapping to the part's
 * first, never by another part's; a part with no other sample cannot
 * replace it. Parts that do not cover the table are refused. */
static void check_skip_parts(const char *bad)
{
    /* 0 good, 1 missing, 2 corrupt | 3 and 4 good, 5 missing. */
    const char *table[6] = {paths[0], "/nonexistent.jpg", bad,
                            paths[3], paths[4],           "/nonexistent.jpg"};
    const int64_t two[3] = {0, 3, 6}, single[4] = {0, 3, 5, 6};
    int64_t ids[2] = {1, 5};
    rl_batch_report rep;
    CHECK_EQ(skip_batch(table, two, 2, ids, 2, &rep), 0);
    CHECK_EQ(rep.n_replaced, 2);
    CHECK_EQ(rep.replaced[0].id, 0); /* 2 failed; part 0 wraps to 0, not 3 */
    CHECK_EQ(rep.replaced[1].id, 3); /* part 1 wraps to 3, not 0 */
    rl_batch_report_free(&rep);
    /* Sample 5 alone in its part. */
    CHECK_EQ(skip_batch(table, single, 3, ids + 1, 1, &rep), -ENOENT);
    CHECK(strstr(rep.error.msg, "no other sample in its dataset") != NULL);
    rl_batch_report_free(&rep);

    int64_t wrong[3][3] = {{1, 3, 6}, {0, 3, 5}, {0, 6, 6}};
    for (int k = 0; k < 3; k++) {
        char msg[RL_MSG_MAX];
        int status = 0;
        rl_pipeline_config cfg =
            config(1, file_source(table, 6, RL_IO_PREAD), RL_T_RESIZE_CROP);
        cfg.parts = wrong[k];
        cfg.nparts = 2;
        CHECK(rl_pipeline_create(&cfg, &status, msg) == NULL);
        CHECK(status == RL_ECONFIG && strstr(msg, "parts") != NULL);
    }
}

int main(void)
{
    CHECK(mkdtemp(dir) != NULL);
    for (int i = 0; i < NIMG; i++) {
        snprintf(paths[i], sizeof(paths[i]), "%s/%02d.jpg", dir, i);
        write_jpeg(paths[i], 40 + i * 7, 30 + (i * 13) % 90, i);
        path_list[i] = paths[i];
    }
    size_t total = (size_t)NIMG * 32 * 40 * 3;
    uint8_t *ref = malloc(total), *got = malloc(total);
    char msg[RL_MSG_MAX];
    bool uring = rl_io_uring_probe(NULL);

    rl_transform_kind kinds[] = {RL_T_RESIZE_CROP, RL_T_RANDOM_CROP};
    for (int k = 0; k < 2; k++) {
        for (int epoch = 0; epoch < 2; epoch++) {
            rl_pipeline_config cfg = config(1, NULL, kinds[k]);
            reference(&cfg, epoch, ref);
            int threads[] = {1, 2, 4};
            rl_io_backend ios[] = {RL_IO_PREAD, RL_IO_AUTO};
            for (int t = 0; t < 3; t++) {
                for (int b = 0; b < 2; b++) {
                    cfg =
                        config(threads[t], file_source(path_list, NIMG, ios[b]),
                               kinds[k]);
                    rl_pipeline *p = rl_pipeline_create(&cfg, NULL, msg);
                    CHECK(p != NULL);
                    CHECK(strcmp(rl_pipeline_io_name(p),
                                 ios[b] == RL_IO_AUTO && uring ? "io_uring"
                                                               : "pread") == 0);
                    memset(got, 0xAB, total);
                    run_epoch(p, 1 + (t * 5 + b * 3) % 7, epoch, got);
                    CHECK(memcmp(got, ref, total) == 0);
                    rl_pipeline_destroy(p);
                }
            }
        }
    }

    /* Errors: the batch fails with the first bad sample's path. */
    char bad[80];
    snprintf(bad, sizeof(bad), "%s/bad.jpg", dir);
    FILE *f = fopen(bad, "wb");
    fputs("\xff\xd8\xff garbage", f);
    fclose(f);
    const char *table[3] = {paths[0], "/nonexistent.jpg", bad};
    rl_pipeline_config cfg =
        config(2, file_source(table, 3, RL_IO_AUTO), RL_T_RESIZE_CROP);
    rl_pipeline *p = rl_pipeline_create(&cfg, NULL, msg);
    CHECK(p != NULL);
    int64_t ids[3] = {0, 1, 2};
    uint64_t t1 = 0, t2 = 0;
    CHECK_EQ(rl_pipeline_submit(p, ids, ids, 3, 0, NULL, &t1), 0);
    CHECK_EQ(rl_pipeline_submit(p, ids + 2, ids + 2, 1, 0, NULL, &t2), 0);
    CHECK(t1 == 1 && t2 == 2);
    rl_slot *s;
    rl_batch_report rep;
    CHECK_EQ(rl_pipeline_next(p, -1, 0, &s, &rep), -ENOENT);
    CHECK(strcmp(rep.error.where, "/nonexistent.jpg") == 0);
    CHECK_EQ(rep.error.pos, 1);
    CHECK_EQ(rep.error.id, 1);
    /* A failed batch still says which it was. */
    CHECK(rep.ticket == t1 && rep.n == 3 && rep.ids != NULL);
    CHECK(rep.ids[0] == 0 && rep.ids[1] == 1 && rep.ids[2] == 2);
    rl_batch_report_free(&rep);
    CHECK(rep.ids == NULL);
    CHECK_EQ(rl_pipeline_next(p, -1, 0, &s, &rep), RL_EDECODE);
    CHECK(strcmp(rep.error.where, bad) == 0);
    CHECK(rep.error.msg[0] != '\0');
    CHECK(rep.ticket == t2 && rep.n == 1 && rep.ids[0] == 2);
    rl_batch_report_free(&rep);

    /* Ids outside the table, and a dst without a device, are refused. */
    int64_t out_of_range = 3;
    CHECK_EQ(rl_pipeline_submit(p, &out_of_range, ids, 1, 0, NULL, NULL),
             -EINVAL);
    CHECK_EQ(rl_pipeline_submit(p, ids, ids, 1, 0, got, NULL), -EINVAL);

    /* Cancel with many batches in flight, then keep going. */
    for (int i = 0; i < 20; i++) {
        CHECK_EQ(rl_pipeline_submit(p, ids, ids, 1, 0, NULL, NULL), 0);
    }
    rl_pipeline_cancel(p);
    CHECK_EQ(rl_pipeline_inflight(p), 0);
    CHECK_EQ(rl_pipeline_next(p, 0, 0, &s, &rep), RL_ECLOSED);
    /* The next batch is the one submitted after the cancel, known by its
     * ticket (the 20 cancelled ones had 3 to 22). */
    CHECK_EQ(rl_pipeline_submit(p, ids + 2, ids, 1, 0, NULL, &t1), 0);
    CHECK(t1 == 23);
    CHECK_EQ(rl_pipeline_submit(p, ids, ids, 1, 0, NULL, NULL), 0);
    CHECK_EQ(rl_pipeline_next(p, -1, 0, &s, &rep), RL_EDECODE);
    CHECK(rep.ticket == t1 && rep.ids[0] == 2);
    rl_batch_report_free(&rep);
    CHECK_EQ(rl_pipeline_next(p, -1, 0, &s, &rep), 0);
    CHECK(rep.ticket == t1 + 1 && rep.ids[0] == 0);
    rl_batch_report_free(&rep);

    /* A slot held past destroy stays valid and is freed on release. */
    rl_slot_retain(s);
    rl_slot_release(s);
    for (int i = 0; i < 5; i++) {
        CHECK_EQ(rl_pipeline_submit(p, ids, ids, 1, 0, NULL, NULL), 0);
    }
    rl_pipeline_destroy(p); /* with 5 batches in flight */
    memset(rl_slot_data(s), 1, 32 * 40 * 3);
    rl_slot_release(s);

    check_skip(RL_IO_PREAD, bad, ref);
    check_skip(RL_IO_AUTO, bad, ref);
    check_skip_parts(bad);

    /* Bad configurations are refused with a message and RL_ECONFIG (and
     * the source, owned by the pipeline from create on, freed). */
    int status = 0;
    cfg = config(1, file_source(path_list, NIMG, RL_IO_AUTO), RL_T_RESIZE_CROP);
    cfg.nthreads = 0;
    CHECK(rl_pipeline_create(&cfg, &status, msg) == NULL && msg[0] != '\0' &&
          status == RL_ECONFIG);
    cfg = config(1, file_source(path_list, NIMG, RL_IO_AUTO), RL_T_NONE);
    status = 0;
    CHECK(rl_pipeline_create(&cfg, &status, msg) == NULL &&
          status == RL_ECONFIG);
    cfg = config(1, file_source(path_list, NIMG, RL_IO_AUTO), RL_T_RESIZE_CROP);
    cfg.skip_errors = true;
    cfg.max_consecutive_errors = 0;
    CHECK(rl_pipeline_create(&cfg, NULL, msg) == NULL && msg[0] != '\0');
    /* One more than the attempts a replacement key holds (rng.h). */
    cfg = config(1, file_source(path_list, NIMG, RL_IO_AUTO), RL_T_RESIZE_CROP);
    cfg.skip_errors = true;
    cfg.max_consecutive_errors = RL_MAX_CONSECUTIVE_ERRORS + 1;
    CHECK(rl_pipeline_create(&cfg, NULL, msg) == NULL &&
          strstr(msg, "max_consecutive_errors") != NULL);
    cfg = config(1, file_source(path_list, NIMG, RL_IO_AUTO), RL_T_RESIZE_CROP);
    cfg.skip_errors = true;
    cfg.max_consecutive_errors = RL_MAX_CONSECUTIVE_ERRORS;
    p = rl_pipeline_create(&cfg, &status, msg);
    CHECK(p != NULL && status == 0);
    rl_pipeline_destroy(p);
    cfg = config(1, NULL, RL_T_RESIZE_CROP);
    CHECK(rl_pipeline_create(&cfg, NULL, msg) == NULL && msg[0] != '\0');
    /* A transform's values are the user's: RL_ECONFIG, never the status
     * of a bug of ours (RL_EINTERNAL). */
    rl_transform bad_t = view0.transform;
    bad_t.out_w = 70000;
    CHECK_EQ(rl_transform_check(&bad_t, msg), RL_ECONFIG);
    bad_t = view0.transform;
    bad_t.flip_p = 2.0;
    CHECK_EQ(rl_transform_check(&bad_t, msg), RL_ECONFIG);

    for (int i = 0; i < NIMG; i++) {
        unlink(paths[i]);
    }
    unlink(bad);
    rmdir(dir);
    free(ref);
    free(got);
    PASS("test_pipeline");
}
