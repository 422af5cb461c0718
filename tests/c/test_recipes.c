/* test_recipes.c - the recipes of docs/ARCHITECTURE.md, one test each: a
 * toy stage is added here exactly as its header's contract says, and a real
 * pipeline runs it end to end.
 *   "Adding a source" (source/source.h): samples are JPEGs made in memory,
 *     each batch's reads complete in reverse order; the batches equal the
 *     same samples through rl_memory_source_create.
 *   "Adding a decoder" (decode/decode.h): "SOLID w h r g b" is a constant
 *     image; registered after libjpeg-turbo it decodes to exactly its
 *     colour, and the report and stats count it as a fallback.
 *   "Adding an augmentation op" (augment/augment.h): invert, with a
 *     probability drawn from the sample's own stream; p = 1 gives 255 - v of
 *     the pipeline without it, p = 0 the same bytes, and the draws are a
 *     pure function of (seed, epoch, key). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include <jpeglib.h>

#include "core/pipeline.h"
#include "check.h"

#define NJPEG 12
#define OUT_W 24
#define OUT_H 20
#define SAMPLE_U8 ((size_t)OUT_W * OUT_H * 3)

static uint8_t *jpegs[NJPEG];
static size_t jpeg_lens[NJPEG];

/* A w x h JPEG of gradients and a checkerboard, made in memory. */
static uint8_t *make_jpeg(int w, int h, int seed, size_t *len)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr err;
    c.err = jpeg_std_error(&err);
    jpeg_create_compress(&c);
    unsigned char *buf = NULL;
    unsigned long size = 0;
    jpeg_mem_dest(&c, &buf, &size);
    c.image_width = (JDIMENSION)w;
    c.image_height = (JDIMENSION)h;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 90, TRUE);
    if (seed % 4 == 1) {
        jpeg_simple_progression(&c);
    }
    jpeg_start_compress(&c, TRUE);
    uint8_t *row = malloc((size_t)w * 3);
    CHECK(row != NULL);
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++) {
            row[x * 3] = (uint8_t)(x * 255 / w);
            row[x * 3 + 1] = (uint8_t)(y * 255 / h + seed * 9);
            row[x * 3 + 2] = (uint8_t)(((x / 6 + y / 6 + seed) % 2) * 220);
        }
        JSAMPROW r = row;
        jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    free(row);
    *len = size;
    return buf;
}

/* The samples through the memory source; the pipeline owns it. */
static rl_source *memory_source(void)
{
    rl_source *src = rl_memory_source_create((const uint8_t *const *)jpegs,
                                             jpeg_lens, NULL, NJPEG);
    CHECK(src != NULL);
    return src;
}

/* RandomResizedCrop with flips: every sample's pixels depend on its key. */
static rl_pipeline_config config(int threads, rl_source *src)
{
    rl_pipeline_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.nthreads = threads;
    cfg.source = src;
    cfg.sample.seed = 1234;
    cfg.sample.limits.max_pixels = RL_DEFAULT_MAX_PIXELS;
    cfg.sample.limits.max_scans = RL_DEFAULT_MAX_SCANS;
    cfg.sample.limits.max_file_bytes = RL_DEFAULT_MAX_FILE_BYTES;
    rl_transform *t = &cfg.sample.transform;
    t->kind = RL_T_RANDOM_CROP;
    t->out_w = OUT_W;
    t->out_h = OUT_H;
    t->scale_lo = 0.08;
    t->scale_hi = 1.0;
    t->ratio_lo = 0.75;
    t->ratio_hi = 4.0 / 3.0;
    t->flip_p = 0.5;
    cfg.place.layout = RL_LAYOUT_NCHW;
    return cfg;
}

/* Creates a pipeline from cfg, runs samples 0..n-1 (keys = ids) of
 * `epoch` in batches of bs into out, and destroys it. */
static void run_all(const rl_pipeline_config *cfg, int n, int bs, int64_t epoch,
                    uint8_t *out, rl_pipeline_stats *st)
{
    char msg[RL_MSG_MAX];
    rl_pipeline *p = rl_pipeline_create(cfg, msg);
    if (p == NULL) {
        fprintf(stderr, "rl_pipeline_create: %s\n", msg);
    }
    CHECK(p != NULL);
    size_t sb = rl_pipeline_sample_bytes(p);
    for (int first = 0; first < n; first += bs) {
        int64_t ids[64];
        int m = n - first < bs ? n - first : bs;
        for (int k = 0; k < m; k++) {
            ids[k] = first + k;
        }
        CHECK_EQ(rl_pipeline_submit(p, ids, ids, m, epoch, NULL), 0);
    }
    for (int got = 0; got < n;) {
        rl_slot *s;
        rl_batch_report rep;
        CHECK_EQ(rl_pipeline_next(p, -1, 0, &s, &rep), 0);
        CHECK_EQ(rep.n_replaced, 0);
        rl_batch_report_free(&rep);
        memcpy(out + (size_t)got * sb, rl_slot_data(s),
               (size_t)rl_slot_count(s) * sb);
        got += rl_slot_count(s);
        rl_slot_release(s);
    }
    if (st != NULL) {
        rl_pipeline_stats_get(p, st);
    }
    rl_pipeline_destroy(p);
}

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

static const char *toy_where(const rl_source *s, int64_t id)
{
    const toy_source *t = (const toy_source *)s;
    return id >= 0 && id < s->count ? t->where[id] : "toy://?";
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

static void test_source(void)
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
            rl_pipeline *p = rl_pipeline_create(&cfg, msg);
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
                CHECK_EQ(
                    rl_pipeline_submit(p, ids + first, ids + first, n, 1, NULL),
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
            CHECK_EQ(rl_pipeline_submit(p, bad, bad, 3, 1, NULL), 0);
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
}

/* ---- "Adding a decoder": SOLID w h r g b ---- */

typedef struct solid_state {
    int w, h;
    uint8_t rgb[3];
    uint8_t *px; /* RGBX, the whole image */
    size_t cap;
} solid_state;

static bool solid_claims(const rl_decoder_def *def, const uint8_t *data,
                         size_t len)
{
    (void)def;
    return len >= 5 && memcmp(data, "SOLID", 5) == 0;
}

static void *solid_create(const rl_decoder_def *def)
{
    (void)def;
    return calloc(1, sizeof(solid_state));
}

static void solid_destroy(void *state)
{
    solid_state *s = state;
    free(s->px);
    free(s);
}

/* The next decimal number of text at *p, in [lo, hi]; -1 when none. */
static long solid_number(const char **p, long lo, long hi)
{
    char *end;
    long v = strtol(*p, &end, 10);
    if (end == *p || v < lo || v > hi) {
        return -1;
    }
    *p = end;
    return v;
}

static int solid_header(void *state, const uint8_t *data, size_t len,
                        const rl_limits *lim, rl_image_info *info, char *msg)
{
    solid_state *s = state;
    char text[64];
    size_t n = len < sizeof(text) - 1 ? len : sizeof(text) - 1;
    memcpy(text, data, n);
    text[n] = '\0';
    const char *p = text + 5;
    long v[5];
    static const long hi[5] = {1L << 30, 1L << 30, 255, 255, 255};
    for (int i = 0; i < 5; i++) {
        if ((v[i] = solid_number(&p, i < 2 ? 1 : 0, hi[i])) < 0) {
            snprintf(msg, RL_MSG_MAX, "SOLID: want \"SOLID w h r g b\"");
            return RL_EDECODE;
        }
    }
    if ((uint64_t)v[0] * (uint64_t)v[1] > lim->max_pixels) {
        snprintf(msg, RL_MSG_MAX,
                 "SOLID: %ldx%ld is over the %llu-pixel "
                 "limit",
                 v[0], v[1], (unsigned long long)lim->max_pixels);
        return RL_ETOOBIG;
    }
    s->w = (int)v[0];
    s->h = (int)v[1];
    for (int c = 0; c < 3; c++) {
        s->rgb[c] = (uint8_t)v[2 + c];
    }
    info->width = s->w;
    info->height = s->h;
    info->components = 3;
    info->progressive = false;
    return 0;
}

/* Cannot scale (scaled_size is NULL, so m is 8) nor decode a part: gives
 * the whole image, which the contract allows. */
static int solid_region(void *state, int m, int x0, int y0, int w, int h,
                        const rl_limits *lim, rl_pixels *out, char *msg)
{
    solid_state *s = state;
    (void)lim;
    CHECK_EQ(m, 8);
    CHECK(x0 >= 0 && y0 >= 0 && x0 + w <= s->w && y0 + h <= s->h);
    size_t need = (size_t)s->w * (size_t)s->h * 4;
    if (need > s->cap) {
        uint8_t *px = realloc(s->px, need);
        if (px == NULL) {
            snprintf(msg, RL_MSG_MAX, "out of memory");
            return -ENOMEM;
        }
        s->px = px;
        s->cap = need;
    }
    for (size_t i = 0; i < need; i += 4) {
        memcpy(s->px + i, s->rgb, 3);
        s->px[i + 3] = 0;
    }
    out->data = s->px;
    out->stride = (size_t)s->w * 4;
    out->x0 = out->y0 = 0;
    out->w = out->full_w = s->w;
    out->h = out->full_h = s->h;
    return 0;
}

static const rl_decoder_def solid_decoder = {
    .name = "solid",
    .claims = solid_claims,
    .create = solid_create,
    .destroy = solid_destroy,
    .header = solid_header,
    .scaled_size = NULL,
    .region = solid_region,
    .truncated = NULL,
};

#define NMIX 9

static void test_decoder(void)
{
    /* JPEGs at 0, 2, 5; constant images at 1, 3, 4 (a tall one and a
     * single pixel); a malformed SOLID at 6, one over the pixel limit at 7,
     * and at 8 bytes nobody claims. */
    const char *solid[NMIX] = {NULL,
                               "SOLID 64 48 200 30 7",
                               NULL,
                               "SOLID 5 300 0 255 128",
                               "SOLID 1 1 17 34 51",
                               NULL,
                               "SOLID 0 5 1 2 3",
                               "SOLID 100000 100000 1 2 3",
                               "NOT A PICTURE"};
    static const uint8_t colour[NMIX][3] = {
        [1] = {200, 30, 7}, [3] = {0, 255, 128}, [4] = {17, 34, 51}};
    const uint8_t *data[NMIX];
    size_t len[NMIX];
    const char *names[NMIX];
    char name_buf[NMIX][16];
    for (int i = 0; i < NMIX; i++) {
        int j = i == 0 ? 0 : i == 2 ? 1 : 2; /* which JPEG */
        data[i] = solid[i] ? (const uint8_t *)solid[i] : jpegs[j];
        len[i] = solid[i] ? strlen(solid[i]) : jpeg_lens[j];
        snprintf(name_buf[i], sizeof(name_buf[i]), "mix%d", i);
        names[i] = name_buf[i];
    }
    rl_decoders both = {.defs = {&rl_jpeg_decoder, &solid_decoder}, .n = 2};
    char msg[RL_MSG_MAX];

    /* The reference: JPEG only (n = 0 is libjpeg-turbo alone). */
    rl_pipeline_config cfg =
        config(2, rl_memory_source_create(data, len, names, NMIX));
    rl_pipeline *jp = rl_pipeline_create(&cfg, msg);
    CHECK(jp != NULL);
    int64_t jpeg_ids[3] = {0, 2, 5};
    CHECK_EQ(rl_pipeline_submit(jp, jpeg_ids, jpeg_ids, 3, 0, NULL), 0);
    rl_slot *js;
    rl_batch_report rep;
    CHECK_EQ(rl_pipeline_next(jp, -1, 0, &js, &rep), 0);
    CHECK_EQ(rep.n_fallback, 0);
    rl_batch_report_free(&rep);
    /* Without the decoder, SOLID bytes are nobody's. */
    int64_t one = 1;
    CHECK_EQ(rl_pipeline_submit(jp, &one, &one, 1, 0, NULL), 0);
    rl_slot *s;
    CHECK_EQ(rl_pipeline_next(jp, -1, 0, &s, &rep), RL_EFORMAT);
    CHECK(strcmp(rep.error.where, "mix1") == 0);
    rl_batch_report_free(&rep);

    for (int layout = 0; layout < 2; layout++) {
        cfg = config(3, rl_memory_source_create(data, len, names, NMIX));
        cfg.decoders = both;
        cfg.place.layout = (rl_layout)layout;
        rl_pipeline *p = rl_pipeline_create(&cfg, msg);
        CHECK(p != NULL);
        int64_t ids[6] = {0, 1, 2, 3, 4, 5};
        CHECK_EQ(rl_pipeline_submit(p, ids, ids, 6, 0, NULL), 0);
        CHECK_EQ(rl_pipeline_next(p, -1, 0, &s, &rep), 0);
        /* The fallback positions name the SOLID samples, in order. */
        CHECK_EQ(rep.n_fallback, 3);
        CHECK_EQ(rep.fallback[0], 1);
        CHECK_EQ(rep.fallback[1], 3);
        CHECK_EQ(rep.fallback[2], 4);
        CHECK_EQ(rep.n_replaced, 0);
        rl_batch_report_free(&rep);
        const uint8_t *got = rl_slot_data(s);
        for (int i = 0; i < 6; i++) {
            const uint8_t *px = got + (size_t)i * SAMPLE_U8;
            if (solid[i] == NULL) {
                if (layout == RL_LAYOUT_NCHW) {
                    /* Adding a decoder changes nothing for JPEGs. */
                    int j = i == 0 ? 0 : i == 2 ? 1 : 2;
                    CHECK(memcmp(px, rl_slot_data(js) + (size_t)j * SAMPLE_U8,
                                 SAMPLE_U8) == 0);
                }
                continue;
            }
            /* A resampled constant image is that constant, exactly. */
            for (int k = 0; k < OUT_W * OUT_H; k++) {
                for (int c = 0; c < 3; c++) {
                    size_t at = layout == RL_LAYOUT_NCHW
                                    ? (size_t)c * OUT_W * OUT_H + k
                                    : (size_t)k * 3 + c;
                    if (px[at] != colour[i][c]) {
                        CHECK_EQ(px[at], colour[i][c]);
                    }
                }
            }
        }
        rl_slot_release(s);

        /* The decoder's own failures reach the report with its message. */
        int64_t bad[3] = {0, 6, 2};
        CHECK_EQ(rl_pipeline_submit(p, bad, bad, 3, 0, NULL), 0);
        CHECK_EQ(rl_pipeline_next(p, -1, 0, &s, &rep), RL_EDECODE);
        CHECK_EQ(rep.error.pos, 1);
        CHECK(strcmp(rep.error.where, "mix6") == 0);
        CHECK(strncmp(rep.error.msg, "SOLID: ", 7) == 0);
        rl_batch_report_free(&rep);
        int64_t big = 7, nobody = 8;
        CHECK_EQ(rl_pipeline_submit(p, &big, &big, 1, 0, NULL), 0);
        CHECK_EQ(rl_pipeline_next(p, -1, 0, &s, &rep), RL_ETOOBIG);
        CHECK(strstr(rep.error.msg, "pixel limit") != NULL);
        rl_batch_report_free(&rep);
        CHECK_EQ(rl_pipeline_submit(p, &nobody, &nobody, 1, 0, NULL), 0);
        CHECK_EQ(rl_pipeline_next(p, -1, 0, &s, &rep), RL_EFORMAT);
        rl_batch_report_free(&rep);

        rl_pipeline_stats st;
        rl_pipeline_stats_get(p, &st);
        CHECK_EQ(st.fallback, 3);
        CHECK_EQ(st.errors, 3);
        rl_pipeline_destroy(p);
    }
    rl_slot_release(js);
    rl_pipeline_destroy(jp);
    printf("  decoder: SOLID after libjpeg-turbo gives its colour exactly, "
           "reported as fallback\n");
}

/* ---- "Adding an augmentation op": invert with probability p ---- */

static int invert_check(const double *args, char *msg)
{
    if (!(args[0] >= 0.0 && args[0] <= 1.0)) {
        snprintf(msg, RL_MSG_MAX, "invert: p must be in [0, 1], not %g",
                 args[0]);
        return RL_EINTERNAL;
    }
    return 0;
}

/* One uniform number: the sample is inverted when it is below p. */
static void invert_draw(const rl_op *op, rl_rng *g, double *params)
{
    (void)op;
    params[0] = rl_rng_uniform(g);
}

static int invert_apply(const rl_op *op, const double *params, rl_image *img,
                        char *msg)
{
    (void)msg;
    if (!(params[0] < op->args[0])) {
        return 0;
    }
    for (int y = 0; y < img->h; y++) {
        uint8_t *row = img->data + (size_t)y * img->stride;
        for (int i = 0; i < img->w * 3; i++) {
            row[i] = (uint8_t)(255 - row[i]);
        }
    }
    return 0;
}

static const rl_op_def invert_op = {
    .name = "invert",
    .nargs = 1,
    .check = invert_check,
    .draw = invert_draw,
    .apply = invert_apply,
};

/* A pipeline config over the JPEGs with invert(p) added, or none when
 * p < 0. */
static rl_pipeline_config invert_config(double p, rl_layout layout)
{
    rl_pipeline_config cfg = config(3, memory_source());
    cfg.place.layout = layout;
    if (p >= 0) {
        char msg[RL_MSG_MAX];
        CHECK_EQ(rl_augment_add(&cfg.sample.augment, &invert_op, &p, 1, msg),
                 0);
    }
    return cfg;
}

static void test_op(void)
{
    enum { EPOCH = 3 };
    static uint8_t base[NJPEG * SAMPLE_U8], inv[NJPEG * SAMPLE_U8];
    static uint8_t same[NJPEG * SAMPLE_U8], half[NJPEG * SAMPLE_U8];
    static float f32[NJPEG * SAMPLE_U8];
    char msg[RL_MSG_MAX];

    /* The op's check and arity are enforced when it is added. */
    rl_augment a;
    memset(&a, 0, sizeof(a));
    double bad_p = 1.5, two[2] = {0.5, 0.5};
    CHECK_EQ(rl_augment_add(&a, &invert_op, &bad_p, 1, msg), RL_EINTERNAL);
    CHECK(strstr(msg, "invert") != NULL);
    CHECK_EQ(rl_augment_add(&a, &invert_op, two, 2, msg), RL_EINTERNAL);
    CHECK_EQ(a.n, 0);

    for (int layout = 0; layout < 2; layout++) {
        rl_pipeline_config cfg = invert_config(-1, (rl_layout)layout);
        run_all(&cfg, NJPEG, 5, EPOCH, base, NULL);
        cfg = invert_config(1.0, (rl_layout)layout);
        run_all(&cfg, NJPEG, 5, EPOCH, inv, NULL);
        cfg = invert_config(0.0, (rl_layout)layout);
        run_all(&cfg, NJPEG, 4, EPOCH, same, NULL);
        /* Same crops and flips (their stream is not the op's), then
         * inverted, or left alone. */
        for (size_t i = 0; i < sizeof(base); i++) {
            if (inv[i] != 255 - base[i]) {
                CHECK_EQ(inv[i], 255 - base[i]);
            }
        }
        CHECK(memcmp(same, base, sizeof(base)) == 0);

        /* p = 0.5: a sample is inverted exactly when rl_augment_draw
         * says so for its key. */
        cfg = invert_config(0.5, (rl_layout)layout);
        rl_augment chain = cfg.sample.augment;
        uint64_t seed = cfg.sample.seed;
        run_all(&cfg, NJPEG, 5, EPOCH, half, NULL);
        int inverted = 0;
        for (int k = 0; k < NJPEG; k++) {
            double params[RL_OP_MAX_PARAMS];
            rl_augment_draw(&chain, seed, EPOCH, k, params);
            const uint8_t *want = params[0] < 0.5 ? inv : base;
            inverted += params[0] < 0.5;
            CHECK(memcmp(half + k * SAMPLE_U8, want + k * SAMPLE_U8,
                         SAMPLE_U8) == 0);
        }
        CHECK(inverted > 0 && inverted < NJPEG);
    }

    /* float32 with Normalize fused: the conversion of the inverted uint8
     * values (inv holds the NHWC run: redo NCHW). */
    rl_pipeline_config cfg = invert_config(1.0, RL_LAYOUT_NCHW);
    run_all(&cfg, NJPEG, 5, EPOCH, inv, NULL);
    static const float mean[3] = {0.485f, 0.456f, 0.406f};
    static const float std[3] = {0.229f, 0.224f, 0.225f};
    cfg = invert_config(1.0, RL_LAYOUT_NCHW);
    cfg.place.dtype = RL_DTYPE_F32;
    for (int c = 0; c < 3; c++) {
        cfg.place.mul[c] = 1.0f / (255.0f * std[c]);
        cfg.place.add[c] = -mean[c] / std[c];
    }
    run_all(&cfg, NJPEG, 5, EPOCH, (uint8_t *)f32, NULL);
    for (size_t i = 0; i < NJPEG * SAMPLE_U8; i++) {
        int c = (int)(i % SAMPLE_U8 / ((size_t)OUT_W * OUT_H));
        /* In float32, multiply then add, as the store does (no FMA). */
        volatile float scaled = (float)inv[i] * cfg.place.mul[c];
        float want = scaled + cfg.place.add[c];
        if (f32[i] != want) {
            CHECK(f32[i] == want);
        }
    }

    /* The draws are a pure function of (seed, epoch, key). */
    memset(&a, 0, sizeof(a));
    double p = 0.5;
    CHECK_EQ(rl_augment_add(&a, &invert_op, &p, 1, msg), 0);
    CHECK_EQ(rl_augment_add(&a, &invert_op, &p, 1, msg), 0);
    enum { NKEYS = 200 };
    static double u[NKEYS];
    for (int k = 0; k < NKEYS; k++) {
        double x[2 * RL_OP_MAX_PARAMS], y[2 * RL_OP_MAX_PARAMS];
        rl_augment_draw(&a, 7, 2, k, x);
        rl_augment_draw(&a, 7, 2, k, y);
        CHECK(memcmp(x, y, sizeof(x)) == 0);
        CHECK(x[0] >= 0.0 && x[0] < 1.0);
        CHECK(x[0] != x[RL_OP_MAX_PARAMS]); /* each op its own draws */
        rl_augment_draw(&a, 7, 3, k, y);
        CHECK(x[0] != y[0]); /* another epoch */
        rl_augment_draw(&a, 8, 2, k, y);
        CHECK(x[0] != y[0]); /* another seed */
        u[k] = x[0];
        for (int j = 0; j < k; j++) {
            if (u[j] == u[k]) {
                CHECK(u[j] != u[k]); /* another key */
            }
        }
    }
    printf("  op: invert(p) equals 255 - v (uint8 NCHW, NHWC; float32 "
           "normalised), draws keyed by (seed, epoch, key)\n");
}

int main(void)
{
    for (int i = 0; i < NJPEG; i++) {
        jpegs[i] = make_jpeg(30 + i * 11, 26 + (i * 17) % 70, i, &jpeg_lens[i]);
    }
    test_source();
    test_decoder();
    test_op();
    for (int i = 0; i < NJPEG; i++) {
        free(jpegs[i]);
    }
    PASS("test_recipes");
}
