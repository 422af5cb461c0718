/* test_fields.c - a sample whose bytes hold more than its image (a tar
 * shard's sample read with its other members, rl_pipeline_config's
 * image_at/image_len): the image is decoded from its part, exactly as the
 * image alone; the other bytes come back with the batch, in position
 * order; a refused sample fails with RL_EFIELD and its message, and the
 * skip policy replaces it, field bytes included; a fetch too short for the
 * image's place fails with -EIO. Run under TSan and ASan too. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/pipeline.h"
#include "check.h"
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
    for (int i = 0; i < N; i++) {
        char want[40];
        int wl = snprintf(want, sizeof(want), "%s%s", head[i], tail[i]);
        CHECK_EQ(rep.fields_len[i], wl);
        CHECK(memcmp(rep.fields[i], want, (size_t)wl) == 0);
    }
    rl_batch_report_free(&rep);
    /* Batches dropped with their field bytes (cancel, destroy): LeakSanitizer
     * (make check SANITIZE=address) finds any left behind. */
    CHECK_EQ(rl_pipeline_submit(p, all, all, N, 0, NULL, NULL), 0);
    CHECK_EQ(rl_pipeline_submit(p, all, all, N, 1, NULL, NULL), 0);
    rl_pipeline_cancel(p);
    CHECK_EQ(rl_pipeline_submit(p, all, all, N, 2, NULL, NULL), 0);
    rl_pipeline_destroy(p);

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
