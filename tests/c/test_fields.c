/* test_fields.c - a sample whose bytes hold more than its image (a tar
 * shard's sample read with its other members, rl_pipeline_config's
 * image_at/image_len): the image is decoded from its part, exactly as the
 * image alone; the other bytes come back with the batch, in position
 * order; a refused sample fails with RL_EFIELD and its message, and the
 * skip policy replaces it, field bytes included; a fetch too short for the
 * image's place fails with -EIO. The same with the places read from a
 * version-2 record file (rl_pipeline_config.field_records) rather than
 * arrays: the same pixels and field bytes, a refusal and a bad member
 * checked, and a record whose values are out of range failing its sample
 * (-EBADMSG), never read past. Run under TSan and ASan too. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/fields.h"
#include "core/pipeline.h"
#include "check.h"
#include "source/shard_records.h"
#include "jpegmake.h"

#define N 12

static rl_view view;

static rl_pipeline_config config(rl_source *src)
{
    rl_pipeline_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    memset(&view, 0, sizeof(view));
    cfg.nthreads = 2;
    cfg.source = src;
    cfg.sample.views = &view;
    cfg.sample.nviews = 1;
    cfg.sample.limits.max_pixels = RL_DEFAULT_MAX_PIXELS;
    cfg.sample.limits.max_scans = RL_DEFAULT_MAX_SCANS;
    cfg.sample.limits.max_file_bytes = RL_DEFAULT_MAX_FILE_BYTES;
    view.transform.kind = RL_T_RESIZE_CROP;
    view.transform.out_h = view.transform.out_w = 16;
    view.transform.resize_short = 20;
    view.transform.scale_lo = view.transform.scale_hi = 1.0;
    view.transform.ratio_lo = view.transform.ratio_hi = 1.0;
    return cfg;
}

/* One batch of ids through p; the slot's bytes into out (when not NULL).
 * Returns next()'s status, with *rep filled (the caller frees it). */
static int batch(rl_pipeline *p, const int64_t *ids, int n, uint8_t *out,
                 rl_batch_report *rep)
{
    CHECK_EQ(rl_pipeline_submit(p, ids, ids, n, 0, NULL, NULL), 0);
    rl_slot *s;
    int rc = rl_pipeline_next(p, -1, 0, &s, rep);
    if (rc == 0) {
        if (out != NULL) {
            memcpy(out, rl_slot_data(s), rl_pipeline_batch_bytes(p, n));
        }
        rl_slot_release(s);
    }
    return rc;
}

/* Little-endian v into p (n bytes). */
static void put(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++) {
        p[i] = (unsigned char)(v >> (8 * i));
    }
}

/* A version-2 record file (one field: the bytes before the image, as a
 * .txt member) of n samples with the image at at[i], len[i] and the
 * member at 0, head_len[i]; ext[i] its extension. Tag "t", shard size
 * and mtime 0. */
static void write_records(const char *path, int n, const int64_t *at,
                          const int64_t *len, const int64_t *head_len,
                          const int64_t *ext)
{
    unsigned char h[64] = {0}, r[64];
    memcpy(h, "RLSAMPLE", 8);
    put(h + 8, RL_SHARD_RECORDS_FIELDS_VERSION, 4);
    put(h + 12, 2, 4);
    put(h + 32, (uint64_t)n, 8);
    put(h + 40, sizeof h, 4);
    put(h + 44, 1, 4);
    put(h + 48, sizeof r, 4);
    put(h + 52, 1, 4);
    h[RL_SHARD_RECORDS_FIELDS_HEAD] = 't';
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK(fwrite(h, 1, sizeof h, f) == sizeof h);
    for (int i = 0; i < n; i++) {
        int64_t v[8] = {0, 0, -1, at[i], len[i], 0, head_len[i], ext[i]};
        for (int k = 0; k < 8; k++) {
            put(r + 8 * k, (uint64_t)v[k], 8);
        }
        CHECK(fwrite(r, 1, sizeof r, f) == sizeof r);
    }
    CHECK(fclose(f) == 0);
}

/* Each position's field bytes: its head, then its tail. */
static void check_fields(const rl_batch_report *rep, char (*head)[16],
                         char (*tail)[16])
{
    CHECK(rep->fields != NULL);
    for (int i = 0; i < N; i++) {
        char want[40];
        int wl = snprintf(want, sizeof(want), "%s%s", head[i], tail[i]);
        CHECK_EQ(rep->fields_len[i], wl);
        CHECK(memcmp(rep->fields[i], want, (size_t)wl) == 0);
    }
}

/* The pipeline over bufs with its places in record file path. */
static rl_pipeline *by_records(const uint8_t **bufs, const size_t *lens,
                               const char *path, bool skip, char *msg)
{
    static int64_t starts[2] = {0, N}, zero[1] = {0};
    static const char *why[] = {"has no .txt member", "its member is too big"};
    static rl_field_check check = {
        .column = 0, .nexts = 1, .exts = {"txt"}, .kinds = {RL_FIELD_UTF8}};
    rl_pipeline_config cfg =
        config(rl_memory_source_create(bufs, lens, NULL, N));
    const char *paths[1] = {path};
    cfg.field_records = rl_shard_records_new(starts, paths, 1, 0);
    CHECK(cfg.field_records != NULL);
    CHECK_EQ(rl_shard_records_expect(cfg.field_records, zero, zero,
                                     (const uint8_t *)"t", 1),
             0);
    cfg.refusals = why;
    cfg.nrefusals = 2;
    cfg.checks = &check;
    cfg.nchecks = 1;
    cfg.skip_errors = skip;
    cfg.max_consecutive_errors = 4;
    return rl_pipeline_create(&cfg, NULL, msg);
}

static void test_records(const uint8_t **bufs, const size_t *lens,
                         const int64_t *at, const int64_t *len,
                         char (*head)[16], char (*tail)[16], const uint8_t *ref,
                         size_t bytes)
{
    char dir[] = "/tmp/rl-fields-XXXXXX", path[64], msg[RL_MSG_MAX];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/s.rec", dir);
    int64_t a[N], hl[N], ext[N] = {0}, all[N];
    for (int i = 0; i < N; i++) {
        a[i] = at[i];
        hl[i] = (int64_t)strlen(head[i]);
        all[i] = i;
    }
    write_records(path, N, a, len, hl, ext);
    rl_pipeline *p = by_records(bufs, lens, path, false, msg);
    CHECK(p != NULL);
    uint8_t *got = malloc(bytes);
    rl_batch_report rep;
    CHECK_EQ(batch(p, all, N, got, &rep), 0);
    CHECK(memcmp(got, ref, bytes) == 0);
    check_fields(&rep, head, tail);
    rl_batch_report_free(&rep);
    rl_pipeline_destroy(p);
    /* Refused (3), a member past the bytes read (6), a refusal past the
     * messages (7), an extension past the field's (8). */
    a[3] = -2;
    hl[6] = (int64_t)(strlen(head[6]) + strlen(tail[6])) + 1;
    a[7] = -3;
    ext[8] = 1;
    write_records(path, N, a, len, hl, ext);
    p = by_records(bufs, lens, path, false, msg);
    CHECK(p != NULL);
    int64_t ids[6] = {2, 3, 6, 7, 8, 9};
    int want[6] = {0, RL_EFIELD, -EIO, -EBADMSG, -EBADMSG, 0};
    for (int k = 0; k < 6; k++) {
        CHECK_EQ(batch(p, &ids[k], 1, NULL, &rep), want[k]);
        if (k == 3 || k == 4) {
            CHECK(strstr(rep.error.msg, "out of range") != NULL);
        }
        rl_batch_report_free(&rep);
    }
    rl_pipeline_destroy(p);
    /* Skipped: 3 replaced by the next that loads, 4. */
    p = by_records(bufs, lens, path, true, msg);
    CHECK(p != NULL);
    CHECK_EQ(batch(p, ids, 3, NULL, &rep), 0);
    CHECK(rep.n_replaced >= 1 && rep.replaced[0].id == 4);
    rl_batch_report_free(&rep);
    rl_pipeline_destroy(p);
    free(got);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    uint8_t *img[N], *whole[N];
    size_t img_len[N], whole_len[N];
    int64_t at[N], len[N], all[N];
    char head[N][16], tail[N][16];
    const uint8_t *bufs[N];
    for (int i = 0; i < N; i++) {
        img[i] = make_jpeg(24 + i, 20 + 2 * i, i, &img_len[i]);
        int hl = snprintf(head[i], sizeof(head[i]), "head%d|", i);
        int tl = snprintf(tail[i], sizeof(tail[i]), "|tail%d", i);
        whole_len[i] = (size_t)hl + img_len[i] + (size_t)tl;
        whole[i] = malloc(whole_len[i]);
        memcpy(whole[i], head[i], (size_t)hl);
        memcpy(whole[i] + hl, img[i], img_len[i]);
        memcpy(whole[i] + hl + img_len[i], tail[i], (size_t)tl);
        at[i] = hl;
        len[i] = (int64_t)img_len[i];
        all[i] = i;
    }
    char msg[RL_MSG_MAX];
    /* The reference: the images alone. */
    for (int i = 0; i < N; i++) {
        bufs[i] = img[i];
    }
    rl_pipeline_config cfg =
        config(rl_memory_source_create(bufs, img_len, NULL, N));
    rl_pipeline *plain = rl_pipeline_create(&cfg, NULL, msg);
    CHECK(plain != NULL);
    size_t bytes = rl_pipeline_batch_bytes(plain, N);
    uint8_t *ref = malloc(bytes), *got = malloc(bytes);
    rl_batch_report rep;
    CHECK_EQ(batch(plain, all, N, ref, &rep), 0);
    CHECK(rep.fields == NULL); /* no fields: nothing extra */
    rl_batch_report_free(&rep);
    rl_pipeline_destroy(plain);

    /* With fields: the same pixels; each position's bytes around its
     * image come back, in position order. */
    for (int i = 0; i < N; i++) {
        bufs[i] = whole[i];
    }
    const char *why[] = {"has no .txt member", "its member is too big"};
    cfg = config(rl_memory_source_create(bufs, whole_len, NULL, N));
    cfg.image_at = at;
    cfg.image_len = len;
    cfg.refusals = why;
    cfg.nrefusals = 2;
    rl_pipeline *p = rl_pipeline_create(&cfg, NULL, msg);
    CHECK(p != NULL);
    CHECK_EQ(batch(p, all, N, got, &rep), 0);
    CHECK(memcmp(got, ref, bytes) == 0);
    CHECK(rep.fields != NULL);
    check_fields(&rep, head, tail);
    rl_batch_report_free(&rep);
    /* Batches dropped with their field bytes (cancel, destroy): LeakSanitizer
     * (make check SANITIZE=address) finds any left behind. */
    CHECK_EQ(rl_pipeline_submit(p, all, all, N, 0, NULL, NULL), 0);
    CHECK_EQ(rl_pipeline_submit(p, all, all, N, 1, NULL, NULL), 0);
    rl_pipeline_cancel(p);
    CHECK_EQ(rl_pipeline_submit(p, all, all, N, 2, NULL, NULL), 0);
    rl_pipeline_destroy(p);

    test_records(bufs, whole_len, at, len, head, tail, ref, bytes);

    /* Refused (sample 3) and too short for its image (sample 5). */
    at[3] = -2;
    at[5] = (int64_t)whole_len[5];
    cfg = config(rl_memory_source_create(bufs, whole_len, NULL, N));
    cfg.image_at = at;
    cfg.image_len = len;
    cfg.refusals = why;
    cfg.nrefusals = 2;
    p = rl_pipeline_create(&cfg, NULL, msg);
    CHECK(p != NULL);
    int64_t ids[3] = {2, 3, 4};
    CHECK_EQ(batch(p, ids, 3, NULL, &rep), RL_EFIELD);
    CHECK_EQ(rep.error.pos, 1);
    CHECK(strcmp(rep.error.msg, "its member is too big") == 0);
    CHECK(rep.fields == NULL);
    rl_batch_report_free(&rep);
    int64_t short_ids[1] = {5};
    CHECK_EQ(batch(p, short_ids, 1, NULL, &rep), -EIO);
    CHECK(strstr(rep.error.msg, "too few for the image") != NULL);
    rl_batch_report_free(&rep);
    rl_pipeline_destroy(p);

    /* The skip policy: sample 3 replaced by 4, with 4's field bytes. */
    cfg = config(rl_memory_source_create(bufs, whole_len, NULL, N));
    cfg.image_at = at;
    cfg.image_len = len;
    cfg.refusals = why;
    cfg.nrefusals = 2;
    cfg.skip_errors = true;
    cfg.max_consecutive_errors = 4;
    p = rl_pipeline_create(&cfg, NULL, msg);
    CHECK(p != NULL);
    CHECK_EQ(batch(p, ids, 3, NULL, &rep), 0);
    CHECK_EQ(rep.n_replaced, 1);
    CHECK_EQ(rep.replaced[0].id, 4);
    CHECK_EQ(rep.replaced[0].error.status, RL_EFIELD);
    CHECK(memcmp(rep.fields[1], head[4], strlen(head[4])) == 0);
    CHECK(memcmp(rep.fields[2], head[4], strlen(head[4])) == 0);
    rl_batch_report_free(&rep);
    rl_pipeline_stats st;
    rl_pipeline_stats_get(p, &st);
    CHECK_EQ(st.skipped, 1);
    rl_pipeline_destroy(p);

    /* A refusal out of the table's range is refused at create. */
    at[3] = -3;
    cfg = config(rl_memory_source_create(bufs, whole_len, NULL, N));
    cfg.image_at = at;
    cfg.image_len = len;
    cfg.refusals = why;
    cfg.nrefusals = 2;
    CHECK(rl_pipeline_create(&cfg, NULL, msg) == NULL);
    CHECK(strstr(msg, "out of range") != NULL);

    for (int i = 0; i < N; i++) {
        free(img[i]);
        free(whole[i]);
    }
    free(ref);
    free(got);
    PASS("test_fields");
}
