/* recipe_decoder.c - the recipe "Adding a decoder" of docs/ARCHITECTURE.md
 * (see test_recipes.c). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "recipes.h"

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

int test_decoder(void)
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
    rl_pipeline *jp = rl_pipeline_create(&cfg, NULL, msg);
    CHECK(jp != NULL);
    int64_t jpeg_ids[3] = {0, 2, 5};
    CHECK_EQ(rl_pipeline_submit(jp, jpeg_ids, jpeg_ids, 3, 0, NULL, NULL), 0);
    rl_slot *js;
    rl_batch_report rep;
    CHECK_EQ(rl_pipeline_next(jp, -1, 0, &js, &rep), 0);
    CHECK_EQ(rep.n_fallback, 0);
    rl_batch_report_free(&rep);
    /* Without the decoder, SOLID bytes are nobody's. */
    int64_t one = 1;
    CHECK_EQ(rl_pipeline_submit(jp, &one, &one, 1, 0, NULL, NULL), 0);
    rl_slot *s;
    CHECK_EQ(rl_pipeline_next(jp, -1, 0, &s, &rep), RL_EFORMAT);
    CHECK(strcmp(rep.error.where, "mix1") == 0);
    rl_batch_report_free(&rep);

    for (int layout = 0; layout < 2; layout++) {
        cfg = config(3, rl_memory_source_create(data, len, names, NMIX));
        cfg.decoders = both;
        recipe_view.place.layout = (rl_layout)layout;
        rl_pipeline *p = rl_pipeline_create(&cfg, NULL, msg);
        CHECK(p != NULL);
        int64_t ids[6] = {0, 1, 2, 3, 4, 5};
        CHECK_EQ(rl_pipeline_submit(p, ids, ids, 6, 0, NULL, NULL), 0);
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
        CHECK_EQ(rl_pipeline_submit(p, bad, bad, 3, 0, NULL, NULL), 0);
        CHECK_EQ(rl_pipeline_next(p, -1, 0, &s, &rep), RL_EDECODE);
        CHECK_EQ(rep.error.pos, 1);
        CHECK(strcmp(rep.error.where, "mix6") == 0);
        CHECK(strncmp(rep.error.msg, "SOLID: ", 7) == 0);
        rl_batch_report_free(&rep);
        int64_t big = 7, nobody = 8;
        CHECK_EQ(rl_pipeline_submit(p, &big, &big, 1, 0, NULL, NULL), 0);
        CHECK_EQ(rl_pipeline_next(p, -1, 0, &s, &rep), RL_ETOOBIG);
        CHECK(strstr(rep.error.msg, "pixel limit") != NULL);
        rl_batch_report_free(&rep);
        CHECK_EQ(rl_pipeline_submit(p, &nobody, &nobody, 1, 0, NULL, NULL), 0);
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
    return atomic_load(&rl_test_checks); /* this file's checks */
}
