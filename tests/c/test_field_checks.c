/* test_field_checks.c - core/fields.h's checks of the members a sample
 * carries beside its image: each kind on bytes Python accepts and refuses
 * (tests/test_field_checks.py holds them to json.loads and friends on many
 * more), and in a pipeline: a sample whose JSON member does not parse
 * fails with RL_EFIELD naming the member, before its image is decoded, and
 * the skip policy replaces it by the next sample, counted; a check that
 * does not fit the table is refused at create. Run under TSan and ASan. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "core/pipeline.h"
#include "check.h"
#include "jpegmake.h"

#define N 8

typedef struct {
    int kind;
    const char *data;
    size_t len; /* 0: strlen(data) */
    bool ok;
} member_case;

static const member_case CASES[] = {
    {RL_FIELD_UTF8, "caption \xc3\xa9", 0, true},
    {RL_FIELD_UTF8, "caf\xe9", 0, false},
    {RL_FIELD_UTF8, "\xed\xa0\x80", 0, false}, /* a surrogate */
    {RL_FIELD_UTF8, "\xf4\x90\x80\x80", 0, false},
    {RL_FIELD_UTF8, "\xc0\xaf", 0, false}, /* overlong */
    {RL_FIELD_UTF8, "a\0b", 3, true},
    {RL_FIELD_UTF8, "", 0, true},
    {RL_FIELD_JSON, "{\"a\": [1, 2.5e-3, -0, null, true, \"\\u00e9\"]}", 0,
     true},
    {RL_FIELD_JSON, " NaN ", 0, true},
    {RL_FIELD_JSON, "-Infinity", 0, true},
    {RL_FIELD_JSON, "\"\\ud800\"", 0, true},      /* a lone surrogate escape */
    {RL_FIELD_JSON, "\"\xed\xa0\x80\"", 0, true}, /* surrogatepass */
    {RL_FIELD_JSON, "\xef\xbb\xbf[]", 0, true},   /* utf-8-sig */
    {RL_FIELD_JSON, "[\0001\0]\0", 6, true},      /* UTF-16-LE */
    {RL_FIELD_JSON, "\0\0\0001", 4, true},        /* UTF-32-BE */
    {RL_FIELD_JSON, "", 0, false},
    {RL_FIELD_JSON, "{\"i\": 6,", 0, false},
    {RL_FIELD_JSON, "[1,]", 0, false},
    {RL_FIELD_JSON, "{'a': 1}", 0, false},
    {RL_FIELD_JSON, "01", 0, false},
    {RL_FIELD_JSON, "1.", 0, false},
    {RL_FIELD_JSON, "\"a\tb\"", 0, false}, /* a control character */
    {RL_FIELD_JSON, "\"\\x41\"", 0, false},
    {RL_FIELD_JSON, "[1] 2", 0, false},
    {RL_FIELD_JSON, "\"caf\xe9\"", 0, false},
    {RL_FIELD_JSON, "1\0", 2, true}, /* two bytes: UTF-16-LE "1" */
    {RL_FIELD_INT, " 42\n", 0, true},
    {RL_FIELD_INT, "-9223372036854775808", 0, true},
    {RL_FIELD_INT, "9223372036854775808", 0, false},
    {RL_FIELD_INT, "1_000", 0, true},
    {RL_FIELD_INT, "1__000", 0, false},
    {RL_FIELD_INT, "seven", 0, false},
    {RL_FIELD_INT, "", 0, false},
    {RL_FIELD_ANY, "\xff anything", 0, true},
};

static rl_view view;

static rl_pipeline_config config(const uint8_t **bufs, const size_t *lens)
{
    rl_pipeline_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    memset(&view, 0, sizeof(view));
    cfg.nthreads = 2;
    cfg.source = rl_memory_source_create(bufs, lens, NULL, N);
    cfg.sample.views = &view;
    cfg.sample.nviews = 1;
    cfg.sample.limits.max_pixels = RL_DEFAULT_MAX_PIXELS;
    cfg.sample.limits.max_scans = RL_DEFAULT_MAX_SCANS;
    cfg.sample.limits.max_file_bytes = RL_DEFAULT_MAX_FILE_BYTES;
    view.transform.kind = RL_T_RESIZE_CROP;
    view.transform.out_h = view.transform.out_w = 4;
    view.transform.resize_short = 4;
    view.transform.scale_lo = view.transform.scale_hi = 1.0;
    view.transform.ratio_lo = view.transform.ratio_hi = 1.0;
    return cfg;
}

int main(void)
{
    char why[RL_MSG_MAX];
    for (size_t k = 0; k < sizeof(CASES) / sizeof(CASES[0]); k++) {
        const member_case *c = &CASES[k];
        size_t n = c->len ? c->len : strlen(c->data);
        int rc = rl_field_check_bytes(c->kind, (const uint8_t *)c->data, n,
                                      4300, why);
        if ((rc == 0) != c->ok) {
            fprintf(stderr, "case %zu (%s): %d, %s\n", k, c->data, rc, why);
        }
        CHECK_EQ(rc, c->ok ? 0 : RL_EFIELD);
    }
    /* Nesting: up to RL_JSON_MAX_DEPTH, not one more. */
    char deep[2 * (RL_JSON_MAX_DEPTH + 1)];
    for (int d = RL_JSON_MAX_DEPTH; d <= RL_JSON_MAX_DEPTH + 1; d++) {
        memset(deep, '[', (size_t)d);
        memset(deep + d, ']', (size_t)d);
        int rc = rl_field_check_bytes(RL_FIELD_JSON, (uint8_t *)deep,
                                      2 * (size_t)d, 0, why);
        CHECK_EQ(rc, d == RL_JSON_MAX_DEPTH ? 0 : RL_EFIELD);
    }
    CHECK(strstr(why, "nested deeper than 512") != NULL);
    /* The digit limit: json.loads and int() refuse longer integers. */
    CHECK_EQ(rl_field_check_bytes(RL_FIELD_JSON, (uint8_t *)"12345", 5, 4, why),
             RL_EFIELD);
    CHECK_EQ(
        rl_field_check_bytes(RL_FIELD_JSON, (uint8_t *)"1234.5", 6, 4, why), 0);

    /* In a pipeline: each sample is a JSON member, then its image. */
    size_t jpeg_len;
    uint8_t *image = make_jpeg(8, 8, 0, &jpeg_len);
    uint8_t *bufs[N];
    size_t lens[N];
    int64_t at[N], len[N], jat[N], jlen[N], all[N];
    int8_t ext[N];
    for (int i = 0; i < N; i++) {
        char js[32];
        int jl = i == 5 ? snprintf(js, sizeof(js), "{\"i\": %d,", i)
                        : snprintf(js, sizeof(js), "{\"i\": %d}", i);
        lens[i] = (size_t)jl + jpeg_len;
        bufs[i] = malloc(lens[i]);
        memcpy(bufs[i], js, (size_t)jl);
        memcpy(bufs[i] + jl, image, jpeg_len);
        at[i] = jl;
        len[i] = jpeg_len;
        jat[i] = 0;
        jlen[i] = jl;
        ext[i] = 0;
        all[i] = i;
    }
    rl_field_check check = {.at = jat, .len = jlen, .ext = ext, .nexts = 1};
    check.exts[0] = "json";
    check.kinds[0] = RL_FIELD_JSON;
    for (int skip = 0; skip <= 1; skip++) {
        rl_pipeline_config cfg = config((const uint8_t **)bufs, lens);
        cfg.image_at = at;
        cfg.image_len = len;
        cfg.checks = &check;
        cfg.nchecks = 1;
        cfg.skip_errors = skip;
        cfg.max_consecutive_errors = 4;
        char msg[RL_MSG_MAX];
        rl_pipeline *p = rl_pipeline_create(&cfg, NULL, msg);
        CHECK(p != NULL);
        CHECK_EQ(rl_pipeline_submit(p, all, all, N, 0, NULL, NULL), 0);
        rl_slot *s;
        rl_batch_report rep;
        int rc = rl_pipeline_next(p, -1, 0, &s, &rep);
        rl_pipeline_stats st;
        rl_pipeline_stats_get(p, &st);
        if (!skip) {
            CHECK_EQ(rc, RL_EFIELD);
            CHECK_EQ(rep.error.id, 5);
            CHECK(strstr(rep.error.msg, "its .json member is not valid JSON") ==
                  rep.error.msg);
        } else {
            CHECK_EQ(rc, 0);
            rl_slot_release(s);
            CHECK_EQ(rep.n_replaced, 1);
            CHECK_EQ(rep.replaced[0].id, 6);
            CHECK_EQ(rep.replaced[0].error.status, RL_EFIELD);
            CHECK(memcmp(rep.fields[5], "{\"i\": 6}", 8) == 0);
            CHECK_EQ(st.skipped, 1);
            CHECK_EQ(st.samples, N); /* no image decoded for sample 5 */
        }
        CHECK_EQ(st.errors, 1);
        rl_batch_report_free(&rep);
        rl_pipeline_destroy(p);
    }
    /* A check whose extension index does not fit: refused at create. */
    ext[2] = 1;
    rl_pipeline_config cfg = config((const uint8_t **)bufs, lens);
    cfg.image_at = at;
    cfg.image_len = len;
    cfg.checks = &check;
    cfg.nchecks = 1;
    char msg[RL_MSG_MAX];
    CHECK(rl_pipeline_create(&cfg, NULL, msg) == NULL);
    CHECK(strstr(msg, "out of range") != NULL);
    for (int i = 0; i < N; i++) {
        free(bufs[i]);
    }
    free(image);
    PASS("test_field_checks");
}
