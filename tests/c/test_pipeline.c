/* test_pipeline.c - the pipeline without Python: batches come back in
 * order and equal a single-threaded decode of each sample, whatever the
 * thread count and backend; errors name their file; cancel and destroy work
 * with batches in flight and with slots still held. Run under TSan too. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <jpeglib.h>

#include "../../csrc/rl_pipeline.h"
#include "../../csrc/rl_sample.h"
#include "check.h"

#define DST(d, rs, ps, cs)                                                  \
    ((rl_dst){.data = (d), .row_stride = (rs), .px_stride = (ps),          \
              .ch_stride = (cs)})

#define NIMG 40

static char dir[] = "/tmp/rl_test_pipe_XXXXXX";
static char paths[NIMG][64];

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

static rl_pipeline_config config(int threads, rl_io_backend io,
                                 rl_transform_kind kind)
{
    rl_pipeline_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.nthreads = threads;
    cfg.io = io;
    cfg.seed = 42;
    cfg.layout = RL_LAYOUT_NCHW;
    cfg.limits.max_pixels = RL_DEFAULT_MAX_PIXELS;
    cfg.limits.max_scans = RL_DEFAULT_MAX_SCANS;
    cfg.limits.max_file_bytes = RL_DEFAULT_MAX_FILE_BYTES;
    cfg.transform.kind = kind;
    cfg.transform.out_h = 32;
    cfg.transform.out_w = 40;
    cfg.transform.resize_short = 48;
    cfg.transform.scale_lo = 0.08;
    cfg.transform.scale_hi = 1.0;
    cfg.transform.ratio_lo = 0.75;
    cfg.transform.ratio_hi = 4.0 / 3.0;
    cfg.transform.flip_p = 0.5;
    return cfg;
}

/* The reference: each sample decoded alone on this thread. */
static void reference(const rl_pipeline_config *cfg, int64_t epoch,
                      uint8_t *out)
{
    rl_decoder *d = rl_decoder_create();
    size_t sb = (size_t)cfg->transform.out_h * cfg->transform.out_w * 3;
    for (int i = 0; i < NIMG; i++) {
        size_t len;
        uint8_t *data = read_all(paths[i], &len);
        rl_dst dst = DST(out + (size_t)i * sb, cfg->transform.out_w, 1,
                      (ptrdiff_t)cfg->transform.out_w * cfg->transform.out_h);
        char msg[RL_MSG_MAX];
        CHECK_EQ(rl_sample_decode(d, data, len, &cfg->transform,
                                  &cfg->limits, cfg->seed, epoch, i, &dst,
                                  msg),
                 0);
        free(data);
    }
    rl_decoder_destroy(d);
}

static void run_epoch(rl_pipeline *p, int bs, int64_t epoch, uint8_t *out)
{
    size_t sb = rl_pipeline_sample_bytes(p);
    int submitted = 0, received = 0;
    while (received < NIMG) {
        while (submitted < NIMG && rl_pipeline_inflight(p) < 3) {
            rl_source src[16];
            int n = NIMG - submitted < bs ? NIMG - submitted : bs;
            for (int k = 0; k < n; k++) {
                src[k].path = paths[submitted + k];
                src[k].offset = 0;
                src[k].length = -1;
                src[k].index = submitted + k;
            }
            CHECK_EQ(rl_pipeline_submit(p, src, n, epoch), 0);
            submitted += n;
        }
        rl_slot *s;
        rl_batch_error err;
        CHECK_EQ(rl_pipeline_next(p, -1, &s, &err), 0);
        memcpy(out + (size_t)received * sb, rl_slot_data(s),
               (size_t)rl_slot_count(s) * sb);
        received += rl_slot_count(s);
        rl_slot_release(s);
    }
    rl_slot *s;
    rl_batch_error err;
    CHECK_EQ(rl_pipeline_next(p, 10, &s, &err), RL_ECLOSED);
}

int main(void)
{
    CHECK(mkdtemp(dir) != NULL);
    for (int i = 0; i < NIMG; i++) {
        snprintf(paths[i], sizeof(paths[i]), "%s/%02d.jpg", dir, i);
        write_jpeg(paths[i], 40 + i * 7, 30 + (i * 13) % 90, i);
    }
    size_t total = (size_t)NIMG * 32 * 40 * 3;
    uint8_t *ref = malloc(total), *got = malloc(total);
    char msg[RL_MSG_MAX];

    rl_transform_kind kinds[] = {RL_T_RESIZE_CROP, RL_T_RANDOM_CROP};
    for (int k = 0; k < 2; k++) {
        for (int epoch = 0; epoch < 2; epoch++) {
            rl_pipeline_config cfg = config(1, RL_IO_PREAD, kinds[k]);
            reference(&cfg, epoch, ref);
            int threads[] = {1, 2, 4};
            rl_io_backend ios[] = {RL_IO_PREAD, RL_IO_AUTO};
            for (int t = 0; t < 3; t++) {
                for (int b = 0; b < 2; b++) {
                    cfg = config(threads[t], ios[b], kinds[k]);
                    rl_pipeline *p = rl_pipeline_create(&cfg, msg);
                    CHECK(p != NULL);
                    memset(got, 0xAB, total);
                    run_epoch(p, 1 + (t * 5 + b * 3) % 7, epoch, got);
                    CHECK(memcmp(got, ref, total) == 0);
                    rl_pipeline_destroy(p);
                }
            }
        }
    }

    /* Errors: the batch fails with the first bad sample's path. */
    rl_pipeline_config cfg = config(2, RL_IO_AUTO, RL_T_RESIZE_CROP);
    rl_pipeline *p = rl_pipeline_create(&cfg, msg);
    char bad[80];
    snprintf(bad, sizeof(bad), "%s/bad.jpg", dir);
    FILE *f = fopen(bad, "wb");
    fputs("\xff\xd8\xff garbage", f);
    fclose(f);
    rl_source src[3] = {{paths[0], 0, -1, 0},
                        {"/nonexistent.jpg", 0, -1, 1},
                        {bad, 0, -1, 2}};
    CHECK_EQ(rl_pipeline_submit(p, src, 3, 0), 0);
    CHECK_EQ(rl_pipeline_submit(p, src + 2, 1, 0), 0);
    rl_slot *s;
    rl_batch_error err;
    CHECK_EQ(rl_pipeline_next(p, -1, &s, &err), -ENOENT);
    CHECK(strcmp(err.path, "/nonexistent.jpg") == 0);
    CHECK_EQ(err.pos, 1);
    CHECK_EQ(rl_pipeline_next(p, -1, &s, &err), RL_EDECODE);
    CHECK(strcmp(err.path, bad) == 0);
    CHECK(err.msg[0] != '\0');

    /* Cancel with many batches in flight, then keep going. */
    for (int i = 0; i < 20; i++) {
        CHECK_EQ(rl_pipeline_submit(p, src, 1, 0), 0);
    }
    rl_pipeline_cancel(p);
    CHECK_EQ(rl_pipeline_inflight(p), 0);
    CHECK_EQ(rl_pipeline_next(p, 0, &s, &err), RL_ECLOSED);
    CHECK_EQ(rl_pipeline_submit(p, src, 1, 0), 0);
    CHECK_EQ(rl_pipeline_next(p, -1, &s, &err), 0);

    /* A slot held past destroy stays valid and is freed on release. */
    rl_slot_retain(s);
    rl_slot_release(s);
    for (int i = 0; i < 5; i++) {
        CHECK_EQ(rl_pipeline_submit(p, src, 1, 0), 0);
    }
    rl_pipeline_destroy(p); /* with 5 batches in flight */
    memset(rl_slot_data(s), 1, 32 * 40 * 3);
    rl_slot_release(s);

    /* Bad configurations are refused with a message. */
    cfg.nthreads = 0;
    CHECK(rl_pipeline_create(&cfg, msg) == NULL && msg[0] != '\0');
    cfg = config(1, RL_IO_AUTO, RL_T_NONE);
    CHECK(rl_pipeline_create(&cfg, msg) == NULL);

    for (int i = 0; i < NIMG; i++) {
        unlink(paths[i]);
    }
    unlink(bad);
    rmdir(dir);
    free(ref);
    free(got);
    PASS("test_pipeline");
}
