/*
 * test_masks.c - the mask raster (targets/mask.h) without Python: known
 * rasters of polygons and COCO strings (the expected rows and strings are
 * pycocotools' output for the same input), the same mask from a polygon,
 * its counts and its string, sampling against the full raster indexed by
 * hand, OR of parts, and every bad input refused with a message and the
 * mask left as it was.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "targets/mask.h"

/* The full raster through identity maps, into out (h * w, row-major). */
static void full(const rl_mask *m, uint8_t *out)
{
    int32_t rows[64], cols[64];
    char msg[RL_MSG_MAX];
    for (int i = 0; i < 64; i++) {
        rows[i] = cols[i] = i;
    }
    CHECK(m->h <= 64 && m->w <= 64);
    CHECK_EQ(rl_mask_sample(m, rows, m->h, cols, m->w, 7, out, msg), 0);
}

/* The raster equals the picture: one string of '0'/'1' a row. */
static void check_picture(const rl_mask *m, const char *const *picture)
{
    uint8_t out[64 * 64];
    full(m, out);
    for (int y = 0; y < m->h; y++) {
        for (int x = 0; x < m->w; x++) {
            CHECK_EQ(out[y * m->w + x], picture[y][x] - '0');
        }
    }
}

static void check_invariants(const rl_mask *m)
{
    for (size_t i = 0; i < m->n; i++) {
        CHECK(m->pos[i] < (uint32_t)(m->h * m->w));
        CHECK(i == 0 || m->pos[i - 1] < m->pos[i]);
    }
}

static void test_known_polygons(void)
{
    char msg[RL_MSG_MAX];
    rl_mask m;
    static const double square[] = {1, 1, 4, 1, 4, 4, 1, 4};
    static const char *const square_rows[] = {"000000", "011100", "011100",
                                              "011100", "000000", "000000"};
    CHECK_EQ(rl_mask_init(&m, 6, 6, msg), 0);
    CHECK_EQ(rl_mask_add_polygon(&m, square, 4, msg), 0);
    check_picture(&m, square_rows);
    check_invariants(&m);
    rl_mask_exit(&m);

    /* at pixel centres (.5) */
    static const double tri[] = {0.5, 0.5, 6.5, 1.5, 2.5, 5.5};
    static const char *const tri_rows[] = {"00000000", "01111100", "01111100",
                                           "00111000", "00110000", "00000000",
                                           "00000000"};
    CHECK_EQ(rl_mask_init(&m, 7, 8, msg), 0);
    CHECK_EQ(rl_mask_add_polygon(&m, tri, 3, msg), 0);
    check_picture(&m, tri_rows);
    rl_mask_exit(&m);

    /* past three edges of the image, OR'd with a square inside it */
    static const double big[] = {-3, 2, 9, 2, 4, 12};
    static const double small[] = {1, 1, 3, 1, 3, 3};
    static const char *const or_rows[] = {"0000000", "0010000", "1111111",
                                          "1111111", "1111111", "1111111"};
    CHECK_EQ(rl_mask_init(&m, 6, 7, msg), 0);
    CHECK_EQ(rl_mask_add_polygon(&m, big, 3, msg), 0);
    CHECK_EQ(rl_mask_add_polygon(&m, small, 3, msg), 0);
    check_picture(&m, or_rows);
    check_invariants(&m);
    rl_mask_exit(&m);
}

/* The same three masks from the strings pycocotools encodes them to. */
static void test_known_strings(void)
{
    static const struct {
        int h, w;
        const char *polygon_string;
        double xy[8];
        size_t points;
    } cases[] = {
        {6, 6, "733000;", {1, 1, 4, 1, 4, 4, 1, 4}, 4},
        {7, 8, "8252N00O1O>", {0.5, 0.5, 6.5, 1.5, 2.5, 5.5}, 3},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char msg[RL_MSG_MAX];
        rl_mask a, b;
        CHECK_EQ(rl_mask_init(&a, cases[i].h, cases[i].w, msg), 0);
        CHECK_EQ(rl_mask_init(&b, cases[i].h, cases[i].w, msg), 0);
        CHECK_EQ(rl_mask_add_polygon(&a, cases[i].xy, cases[i].points, msg), 0);
        CHECK_EQ(rl_mask_add_string(&b, cases[i].polygon_string,
                                    strlen(cases[i].polygon_string), msg),
                 0);
        CHECK_EQ(a.n, b.n);
        CHECK(memcmp(a.pos, b.pos, a.n * sizeof(*a.pos)) == 0);
        rl_mask_exit(&a);
        rl_mask_exit(&b);
    }
}

/* Counts and their string agree; zero-length runs cancel. */
static void test_counts(void)
{
    char msg[RL_MSG_MAX];
    rl_mask a, b;
    /* 3 x 4: 0 zeros, 2 ones, 0 zeros, 3 ones, 7 zeros */
    static const int64_t counts[] = {0, 2, 0, 3, 7};
    static const char *const rows[] = {"1100", "1100", "1000"};
    CHECK_EQ(rl_mask_init(&a, 3, 4, msg), 0);
    CHECK_EQ(rl_mask_add_counts(&a, counts, 5, msg), 0);
    check_picture(&a, rows);
    check_invariants(&a);
    CHECK_EQ(a.n, 2); /* the zero run merged the ones */
    /* the string of the same counts: 0 2 0, then 3 - 2 = 1, 7 - 0 = 7 */
    CHECK_EQ(rl_mask_init(&b, 3, 4, msg), 0);
    CHECK_EQ(rl_mask_add_string(&b, "02017", 5, msg), 0);
    check_picture(&b, rows);
    rl_mask_exit(&a);
    rl_mask_exit(&b);
}

/* Sampling through maps with repeats, reversals and fill equals the full
 * raster indexed by hand. */
static void test_sampling(void)
{
    char msg[RL_MSG_MAX];
    rl_mask m;
    static const double poly[] = {2.3, 0.2, 17.8, 5.5, 9.1, 13.9, 0.4, 8.0};
    CHECK_EQ(rl_mask_init(&m, 15, 19, msg), 0);
    CHECK_EQ(rl_mask_add_polygon(&m, poly, 4, msg), 0);
    uint8_t whole[64 * 64];
    full(&m, whole);
    int32_t rows[40], cols[50];
    unsigned seed = 12345;
    for (int round = 0; round < 50; round++) {
        int oh = 1 + round % 40, ow = 1 + (round * 7) % 50;
        for (int y = 0; y < oh; y++) {
            seed = seed * 1103515245u + 12345u;
            rows[y] = (int32_t)((seed >> 16) % 16) - 1; /* -1..14 */
        }
        for (int x = 0; x < ow; x++) {
            seed = seed * 1103515245u + 12345u;
            cols[x] = (int32_t)((seed >> 16) % 20) - 1; /* -1..18 */
        }
        uint8_t out[40 * 50];
        CHECK_EQ(rl_mask_sample(&m, rows, oh, cols, ow, 255, out, msg), 0);
        for (int y = 0; y < oh; y++) {
            for (int x = 0; x < ow; x++) {
                int want = rows[y] < 0 || cols[x] < 0
                               ? 255
                               : whole[rows[y] * 19 + cols[x]];
                CHECK_EQ(out[y * ow + x], want);
            }
        }
    }
    rl_mask_exit(&m);
}

/* Bad input: -EINVAL, a message, and the mask as it was. */
static void test_errors(void)
{
    char msg[RL_MSG_MAX];
    rl_mask m;
    CHECK_EQ(rl_mask_init(&m, 0, 4, msg), -EINVAL);
    CHECK(strstr(msg, "1..65535") != NULL);
    rl_mask_exit(&m);
    CHECK_EQ(rl_mask_init(&m, 4, 65536, msg), -EINVAL);
    rl_mask_exit(&m);

    CHECK_EQ(rl_mask_init(&m, 4, 5, msg), 0);
    static const double sq[] = {1, 1, 3, 1, 3, 3, 1, 3};
    CHECK_EQ(rl_mask_add_polygon(&m, sq, 4, msg), 0);
    size_t n = m.n;

    static const double two[] = {0, 0, 3, 3};
    msg[0] = '\0';
    CHECK_EQ(rl_mask_add_polygon(&m, two, 2, msg), -EINVAL);
    CHECK(strstr(msg, "at least 3") != NULL);
    double bad[] = {0, 0, 3, 3, 1, 2};
    bad[3] = 0.0 / 0.0;
    CHECK_EQ(rl_mask_add_polygon(&m, bad, 3, msg), -EINVAL);
    CHECK(strstr(msg, "point 1 has y = nan") != NULL);
    bad[3] = 1e300 * 1e300;
    CHECK_EQ(rl_mask_add_polygon(&m, bad, 3, msg), -EINVAL);
    bad[3] = RL_MASK_MAX_COORD * 2;
    CHECK_EQ(rl_mask_add_polygon(&m, bad, 3, msg), -EINVAL);

    static const int64_t short_counts[] = {5, 5}, neg[] = {25, -5},
                         over[] = {15, 6};
    CHECK_EQ(rl_mask_add_counts(&m, short_counts, 2, msg), -EINVAL);
    CHECK(strstr(msg, "sum to 10 where height * width is 20") != NULL);
    CHECK_EQ(rl_mask_add_counts(&m, neg, 2, msg), -EINVAL);
    CHECK_EQ(rl_mask_add_counts(&m, over, 2, msg), -EINVAL);
    CHECK(strstr(msg, "count 1 is 6 where 5 pixels are left") != NULL);

    static const char *const strings[] = {
        "",         /* sums to 0 */
        "4p",       /* a byte past 'o' */
        "4/",       /* a byte before '0' */
        "4P",       /* ends inside a count */
        "PPPPPPPP", /* more than 7 digits */
        "@",        /* -16 */
        "4\xff",    /* a byte of the upper half */
        "44444",    /* counts 4 4 4 8 8: the last past the image */
    };
    for (size_t i = 0; i < sizeof(strings) / sizeof(strings[0]); i++) {
        msg[0] = '\0';
        CHECK_EQ(rl_mask_add_string(&m, strings[i], strlen(strings[i]), msg),
                 -EINVAL);
        CHECK(msg[0] != '\0');
    }
    /* a NUL inside the given length is a bad byte, not the end */
    CHECK_EQ(rl_mask_add_string(&m, "4\0004", 3, msg), -EINVAL);
    CHECK(strstr(msg, "byte 0x00 at offset 1") != NULL);

    int32_t rows[2] = {0, 4}, cols[2] = {0, -2};
    uint8_t out[4];
    CHECK_EQ(rl_mask_sample(&m, rows, 2, cols, 1, 0, out, msg), -EINVAL);
    CHECK(strstr(msg, "row map entry 1 is 4") != NULL);
    rows[1] = 3;
    CHECK_EQ(rl_mask_sample(&m, rows, 2, cols, 2, 0, out, msg), -EINVAL);
    CHECK(strstr(msg, "column map entry 1 is -2") != NULL);
    CHECK_EQ(rl_mask_sample(&m, rows, -1, cols, 1, 0, out, msg), -EINVAL);

    CHECK_EQ(m.n, n); /* nothing was OR'd in */
    rl_mask_exit(&m);
}

int main(void)
{
    test_known_polygons();
    test_known_strings();
    test_counts();
    test_sampling();
    test_errors();
    PASS("test_masks");
}
