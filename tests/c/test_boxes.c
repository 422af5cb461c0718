/* test_boxes.c - targets/boxes.c without Python: boxes and keypoints
 * mapped through each kind of geometry step, with values worked out by
 * hand from torchvision's rules (a flip maps a box's x to W - x and a
 * keypoint's to W - 1 - x; crop, pad, affine and perspective clamp boxes
 * to their canvas, resize and flips do not; an affine box is the hull of
 * its corners); format conversion, clamping, the sanitizer's mask,
 * RandomIoUCrop's mark, a NaN carried through a clamp, and the builders'
 * refusals. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "targets/boxes.h"

static int near(const double *got, const double *want, int n)
{
    for (int i = 0; i < n; i++) {
        if (!(fabs(got[i] - want[i]) < 1e-9)) {
            fprintf(stderr, "value %d: %.12g != %.12g\n", i, got[i], want[i]);
            return 0;
        }
    }
    return 1;
}

static void axis_steps(void)
{
    const char *err = NULL;
    rl_target_geom g;
    rl_geom_init(&g, 200, 100);
    CHECK(rl_geom_hflip(&g, &err) == 0);
    double b[4] = {10, 20, 50, 60};
    rl_boxes_map(&g, b, 1, RL_BOX_XYXY);
    CHECK(near(b, (double[]){150, 20, 190, 60}, 4));
    double p[2] = {10, 20};
    rl_keypoints_map(&g, p, 1);
    CHECK(near(p, (double[]){189, 20}, 2));

    /* resize by 2 and 0.5, then a crop the box sticks out of: clamped */
    rl_geom_init(&g, 200, 100);
    CHECK(rl_geom_resize(&g, 50, 400, &err) == 0);
    CHECK(rl_geom_crop(&g, 5, 100, 20, 30, &err) == 0);
    CHECK_EQ(rl_geom_out_width(&g), 30);
    CHECK_EQ(rl_geom_out_height(&g), 20);
    double c[4] = {40, 20, 70, 60}; /* (80..140, 10..30) after the resize */
    rl_boxes_map(&g, c, 1, RL_BOX_XYXY);
    CHECK(near(c, (double[]){0, 5, 30, 20}, 4));

    /* pad, in XYWH: moved, the canvas grown */
    rl_geom_init(&g, 20, 10);
    CHECK(rl_geom_pad(&g, 3, 4, 5, 6, &err) == 0);
    CHECK_EQ(rl_geom_out_width(&g), 28);
    CHECK_EQ(rl_geom_out_height(&g), 20);
    double d[4] = {1, 2, 5, 6};
    rl_boxes_map(&g, d, 1, RL_BOX_XYWH);
    CHECK(near(d, (double[]){4, 6, 5, 6}, 4));

    /* a center crop anchors at round-half-even((15 - 10) / 2) = 2 */
    rl_geom_init(&g, 15, 15);
    CHECK(rl_geom_center_crop(&g, 10, 10, &err) == 0);
    double e[4] = {3, 3, 6, 6};
    rl_boxes_map(&g, e, 1, RL_BOX_XYXY);
    CHECK(near(e, (double[]){1, 1, 4, 4}, 4));
}

static void matrix_steps(void)
{
    const char *err = NULL;
    rl_target_geom g;
    /* rotate by 90 degrees about the centre of a 100x100 canvas:
     * torchvision's rotate turns counter-clockwise, (x, y) -> (y, 100 - x) */
    rl_geom_init(&g, 100, 100);
    CHECK(rl_geom_rotate(&g, 90, NULL, &err) == 0);
    double b[4] = {10, 20, 30, 60};
    rl_boxes_map(&g, b, 1, RL_BOX_XYXY);
    CHECK(near(b, (double[]){20, 70, 60, 90}, 4));
    double p[2] = {10, 20};
    rl_keypoints_map(&g, p, 1);
    CHECK(near(p, (double[]){20, 90}, 2));

    /* rotate by 45 degrees: the hull of the corners, clamped to the canvas */
    rl_geom_init(&g, 100, 100);
    CHECK(rl_geom_rotate(&g, 45, NULL, &err) == 0);
    double c[4] = {0, 0, 100, 100};
    rl_boxes_map(&g, c, 1, RL_BOX_XYXY);
    CHECK(near(c, (double[]){0, 0, 100, 100}, 4));

    /* the identity perspective, then one that halves: x = 2 x' samples */
    const double id[8] = {1, 0, 0, 0, 1, 0, 0, 0};
    const double half[8] = {2, 0, 0, 0, 2, 0, 0, 0};
    rl_geom_init(&g, 100, 100);
    CHECK(rl_geom_perspective(&g, id, &err) == 0);
    CHECK(rl_geom_perspective(&g, half, &err) == 0);
    double d[4] = {20, 40, 20, 40}; /* (10, 20, 30, 60) as XYXY */
    rl_boxes_map(&g, d, 1, RL_BOX_CXCYWH);
    CHECK(near(d, (double[]){10, 20, 10, 20}, 4));
}

static void formats_clamp_sanitize(void)
{
    double b[4] = {10, 20, 30, 60}; /* XYXY */
    rl_boxes_convert(b, 1, RL_BOX_XYXY, RL_BOX_CXCYWH);
    CHECK(near(b, (double[]){20, 40, 20, 40}, 4));
    rl_boxes_convert(b, 1, RL_BOX_CXCYWH, RL_BOX_XYWH);
    CHECK(near(b, (double[]){10, 20, 20, 40}, 4));

    double c[8] = {-5, 3, 120, 40, NAN, 3, 4, 200};
    rl_boxes_clamp(c, 2, RL_BOX_XYXY, 100, 50);
    CHECK(near(c, (double[]){0, 3, 100, 40}, 4));
    CHECK(isnan(c[4]));
    CHECK(near(c + 5, (double[]){3, 4, 50}, 3));

    double k[4] = {-1, 7, 100, 60};
    rl_keypoints_clamp(k, 2, 100, 50);
    CHECK(near(k, (double[]){0, 7, 99, 49}, 4));

    double s[7 * 4] = {
        0,  0,  100,      50, /* the whole canvas: kept */
        10, 10, 10,       20, /* zero width */
        10, 10, 10.5,     20, /* narrower than min_size */
        -1, 0,  10,       10, /* outside */
        0,  0,  101,      10, /* past the right edge */
        0,  0,  INFINITY, 10, /* infinite */
        5,  5,  6,        6,  /* exactly min_size and min_area: kept */
    };
    uint8_t keep[7];
    CHECK_EQ(rl_boxes_sanitize(s, 7, RL_BOX_XYXY, 100, 50, 1.0, 1.0, keep), 2);
    const uint8_t want[7] = {1, 0, 0, 0, 0, 0, 1};
    CHECK(memcmp(keep, want, 7) == 0);
}

/* RandomIoUCrop's mark: centres strictly inside the crop, from the boxes
 * before it; the others zeroed */
static void iou_crop_mark(void)
{
    double b[12] = {0, 0, 20, 20, 30, 30, 50, 50, 0, 0, 60, 60};
    uint8_t in[3];
    /* crop [10, 40) x [10, 40): centres 10 (on the edge), 40, 30 */
    CHECK_EQ(rl_boxes_centers_within(b, 3, RL_BOX_XYXY, 10, 10, 30, 30, in), 1);
    CHECK(in[0] == 0 && in[1] == 0 && in[2] == 1);
    rl_boxes_zero_outside(b, 3, in);
    CHECK(near(b, (double[]){0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 60, 60}, 12));
}

static void refusals(void)
{
    const char *err = NULL;
    rl_target_geom g;
    rl_geom_init(&g, 10, 10);
    CHECK(rl_geom_crop(&g, 0, 0, 0, 4, &err) == -1 && err);
    CHECK(rl_geom_resize(&g, 4, -1, &err) == -1);
    CHECK(rl_geom_pad(&g, -5, 0, -5, 0, &err) == -1);
    const double singular[8] = {1, 2, 0, 2, 4, 0, 0, 0};
    CHECK(rl_geom_perspective(&g, singular, &err) == -1);
    CHECK(strstr(err, "inverted") != NULL);
    CHECK(rl_geom_affine(&g, 0, 0, 0, 0, 0, 0, NULL, &err) == -1);
    CHECK_EQ(g.n, 0);
    for (int i = 0; i < RL_GEOM_MAX_STEPS; i++) {
        CHECK(rl_geom_hflip(&g, &err) == 0);
    }
    CHECK(rl_geom_hflip(&g, &err) == -1);
    CHECK(strstr(err, "too many") != NULL);
    /* sixteen flips: back where it started */
    double b[4] = {1, 2, 3, 4};
    rl_boxes_map(&g, b, 1, RL_BOX_XYXY);
    CHECK(near(b, (double[]){1, 2, 3, 4}, 4));
}

int main(void)
{
    axis_steps();
    matrix_steps();
    formats_clamp_sanitize();
    iou_crop_mark();
    refusals();
    PASS("test_boxes");
}
