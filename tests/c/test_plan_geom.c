/* test_plan_geom.c - targets/plan_geom.c without Python: the target
 * geometry read from a sample's plan (core/plan.c), with values worked
 * out by hand: a resize and a centre crop that pads, a RandomCrop's
 * padded window and a flip, RandomResizedCrop's box then its resize,
 * TrimBorder's crop, ScaleJitter's drawn size before a padded window,
 * RandomIoUCrop's crop drawn from the sample's boxes, RandomZoomOut's
 * canvas (alone and before the IoU crop, which draws on it from the boxes
 * moved by its offset), and the refusals. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "core/plan.h"
#include "rng.h"
#include "targets/draws.h"
#include "targets/plan_geom.h"

static double clampd(double v, double hi)
{
    return v < 0 ? 0 : (v > hi ? hi : v);
}

/* Plans sample `index` of t on a w x h image, reads its geometry into g
 * (checking its step count and its canvas, the transform's output), maps
 * the n values of v (4: a box in fmt, 2: a keypoint) through it and
 * checks them against want. */
static void expect(const rl_transform *t, int w, int h, int64_t index,
                   int steps, double *v, int n, rl_box_format fmt,
                   const double *want, rl_plan *p)
{
    char msg[RL_MSG_MAX];
    const char *err = NULL;
    rl_target_geom g;
    CHECK(rl_plan_make(t, w, h, 5, 0, index, 0, p, msg) == 0);
    CHECK(rl_geom_from_plan(t, p, w, h, &g, &err) == 0);
    CHECK_EQ(g.n, steps);
    CHECK_EQ(rl_geom_out_width(&g), t->out_w);
    CHECK_EQ(rl_geom_out_height(&g), t->out_h);
    if (n == 4)
        rl_boxes_map(&g, v, 1, fmt);
    else
        rl_keypoints_map(&g, v, 1);
    for (int i = 0; i < n; i++) {
        if (!(fabs(v[i] - want[i]) < 1e-6))
            fprintf(stderr, "value %d: %.12g, want %.12g\n", i, v[i], want[i]);
        CHECK(fabs(v[i] - want[i]) < 1e-6);
    }
}

static void resize_centre_pad(void)
{
    /* 80x40 resized by 0.5 to 40x20, then a 47x30 centre crop: padded
     * (47 - 40) // 2 = 3 columns and 5 rows before the image, and the
     * padded canvas is the crop: resize and pad, no crop */
    rl_transform t = {.kind = RL_T_RESIZE_CROP,
                      .resize_h = 20,
                      .resize_w = 40,
                      .out_w = 47,
                      .out_h = 30,
                      .ratio_lo = 1,
                      .ratio_hi = 1};
    rl_plan p;
    double b[4] = {10, 10, 60, 30}, k[2] = {10, 10};
    expect(&t, 80, 40, 0, 2, b, 4, RL_BOX_XYXY, (double[]){8, 10, 33, 20}, &p);
    expect(&t, 80, 40, 0, 2, k, 2, RL_BOX_XYXY, (double[]){8, 10}, &p);
}

static void random_crop_flip(void)
{
    /* 20x12 padded (2, 3, 4, 5) to 26x20 (reflected: boxes move as with
     * a constant), a 10x10 window, always mirrored: pad, crop, flip */
    rl_transform t = {.kind = RL_T_RESIZE_RANDOM_CROP,
                      .out_w = 10,
                      .out_h = 10,
                      .ratio_lo = 1,
                      .ratio_hi = 1,
                      .pad = {2, 3, 4, 5},
                      .flip_p = 1.0,
                      .pad_mode = RL_PAD_REFLECT};
    for (int i = 0; i < 20; i++) {
        rl_plan p;
        CHECK(rl_plan_make(&t, 20, 12, 5, 0, i, 0, &p, (char[RL_MSG_MAX]){0}) ==
              0);
        double wx = p.pad.x.w0, wy = p.pad.y.w0;
        double x0 = clampd(-wx, 10), x1 = clampd(20 - wx, 10);
        double b[4] = {0, 0, 20, 12}, k[2] = {4, 5};
        double want[4] = {10 - x1, clampd(-wy, 10), 10 - x0,
                          clampd(12 - wy, 10)};
        expect(&t, 20, 12, i, 3, b, 4, RL_BOX_XYXY, want, &p);
        /* a keypoint's flip is W - 1 - x */
        double kwant[2] = {10 - 1 - (4 - wx), 5 - wy};
        expect(&t, 20, 12, i, 3, k, 2, RL_BOX_XYXY, kwant, &p);
    }
}

static void resized_crop_and_trim(void)
{
    /* RandomResizedCrop: the whole image becomes the box, then 8x8 */
    rl_transform t = {.kind = RL_T_RANDOM_CROP,
                      .out_w = 8,
                      .out_h = 8,
                      .scale_lo = 0.2,
                      .scale_hi = 0.5,
                      .ratio_lo = 0.75,
                      .ratio_hi = 1.33};
    rl_plan p;
    double b[4] = {0, 0, 64, 48};
    expect(&t, 64, 48, 0, 2, b, 4, RL_BOX_XYXY, (double[]){0, 0, 8, 8}, &p);

    /* TrimBorder(2) of 10x10, then a 4x4 centre crop at 1 of the 6x6:
     * (3, 3, 7, 9) in XYWH is (3, 3)-(10, 12), clamped to the window */
    rl_transform c = {.kind = RL_T_RESIZE_CROP,
                      .out_w = 4,
                      .out_h = 4,
                      .ratio_lo = 1,
                      .ratio_hi = 1,
                      .trim = 2};
    double d[4] = {3, 3, 7, 9};
    expect(&c, 10, 10, 0, 2, d, 4, RL_BOX_XYWH, (double[]){0, 0, 4, 4}, &p);
}

static void scale_jitter_window(void)
{
    /* ScaleJitter's size is its draw's from the plan's stream (48x40 to
     * 32..128 wide), then RandomCrop(64, pad_if_needed): the image's own
     * box lands where the window has it; resize, [pad], [crop] */
    rl_transform t = {.kind = RL_T_RESIZE_RANDOM_CROP,
                      .out_w = 64,
                      .out_h = 64,
                      .ratio_lo = 1,
                      .ratio_hi = 1,
                      .pad_if_needed = 1,
                      .jitter_w = 64,
                      .jitter_h = 64,
                      .jitter_scale = {0.5, 2.0}};
    char msg[RL_MSG_MAX];
    CHECK(rl_transform_check(&t, msg) == 0);
    rl_scale_jitter_opts o = {{64, 64}, 0.5, 2.0};
    int padded = 0;
    for (int i = 0; i < 40; i++) {
        rl_rng g;
        rl_scale_jitter_draw d;
        rl_rng_init(&g, 5, 0, i, rl_rng_view(RL_RNG_PLAN, 0));
        rl_draw_scale_jitter(&g, &o, 48, 40, &d);
        rl_plan p;
        double b[4] = {0, 0, 48, 40};
        CHECK(rl_plan_make(&t, 48, 40, 5, 0, i, 0, &p, msg) == 0);
        CHECK_EQ(p.pad.x.n, d.width);
        CHECK_EQ(p.pad.y.n, d.height);
        /* the box's far corner scaled by torchvision's float32 ratios */
        double rw = 48 * (double)(float)(d.width / 48.0);
        double rh = 40 * (double)(float)(d.height / 40.0);
        double wx = p.pad.x.w0, wy = p.pad.y.w0;
        double want[4] = {clampd(-wx, 64), clampd(-wy, 64), clampd(rw - wx, 64),
                          clampd(rh - wy, 64)};
        int pad = d.width < 64 || d.height < 64;
        /* pad_if_needed pads the lack on both sides: a crop after it */
        int crop = d.width != 64 || d.height != 64;
        padded += pad;
        expect(&t, 48, 40, i, 1 + pad + crop, b, 4, RL_BOX_XYXY, want, &p);
    }
    CHECK(padded > 0 && padded < 40);
    t.jitter_scale[0] = 3.0; /* inverted */
    CHECK(rl_transform_check(&t, msg) == RL_ECONFIG);
    CHECK(strstr(msg, "jitter_scale") != NULL);
}

/* rl_transform_check refuses t with a message holding `needle`. */
static void refused(const rl_transform *t, const char *needle)
{
    char msg[RL_MSG_MAX] = "";
    CHECK(rl_transform_check(t, msg) == RL_ECONFIG);
    CHECK(strstr(msg, needle) != NULL);
}

static void iou_crop(void)
{
    /* RandomIoUCrop with option 0 (any crop keeping the box's centre),
     * then a flip: the plan's box is the crop, its output the crop's
     * size, its geometry the crop then the flip; a box over the whole
     * image becomes the whole crop */
    rl_transform t = {.kind = RL_T_RESIZE_CROP,
                      .varying = 1,
                      .ratio_lo = 1,
                      .ratio_hi = 1,
                      .flip_p = 1.0,
                      .iou_crop = 1,
                      .iou_scale_lo = 0.3,
                      .iou_scale_hi = 1.0,
                      .iou_aspect_lo = 0.5,
                      .iou_aspect_hi = 2.0,
                      .n_iou_options = 1,
                      .iou_options = {0.0},
                      .iou_trials = 40};
    char msg[RL_MSG_MAX];
    CHECK(rl_transform_check(&t, msg) == 0);
    double whole[4] = {0, 0, 100, 80};
    for (int i = 0; i < 20; i++) {
        rl_plan p;
        rl_target_geom g;
        const char *err = NULL;
        CHECK(rl_plan_make_boxes(&t, 100, 80, 5, 0, i, 0, whole, 1, &p, msg) ==
              0);
        CHECK(p.iou_crop == 1 && p.crop_first && p.flip);
        CHECK(p.x >= 0 && p.y >= 0 && p.x + p.w <= 100 && p.y + p.h <= 80);
        CHECK(p.out_w == (int)p.w && p.out_h == (int)p.h);
        CHECK(rl_geom_from_plan(&t, &p, 100, 80, &g, &err) == 0);
        CHECK_EQ(g.n, 2);
        double b[4] = {0, 0, 100, 80};
        rl_boxes_map(&g, b, 1, RL_BOX_XYXY);
        CHECK(b[0] == 0 && b[1] == 0 && b[2] == p.w && b[3] == p.h);
    }
    /* no box and no option >= 1: the image whole, after the limit */
    t.iou_options[0] = 0.5;
    rl_plan p;
    rl_target_geom g;
    const char *err = NULL;
    CHECK(rl_plan_make(&t, 100, 80, 5, 0, 0, 0, &p, msg) == 0);
    CHECK(p.iou_crop == 0 && p.iou_limited && p.out_w == 100 && p.out_h == 80);
    CHECK(rl_geom_from_plan(&t, &p, 100, 80, &g, &err) == 0);
    CHECK_EQ(g.n, 1); /* the flip alone */
    /* refused: a crop past the image, a resize before it, one size */
    t.iou_scale_hi = 1.5;
    refused(&t, "max_scale");
    t.iou_scale_hi = 1.0;
    t.resize_short = 32;
    refused(&t, "RandomIoUCrop");
    t.resize_short = 0;
    t.n_iou_options = 0;
    refused(&t, "sampler_options");
}

/* RandomZoomOut with p 1 and side 2: a 200x160 canvas of the fill, the
 * 100x80 image 1:1 at the offset rl_draw_zoom_out draws first from the
 * plan stream; the geometry is its padding, a mask's maps -1 around the
 * image. */
static void zoom_out_alone(rl_transform *t)
{
    char msg[RL_MSG_MAX];
    CHECK(rl_transform_check(t, msg) == 0);
    for (int i = 0; i < 10; i++) {
        rl_plan p;
        rl_target_geom g;
        const char *err = NULL;
        CHECK(rl_plan_make(t, 100, 80, 5, 0, i, 0, &p, msg) == 0);
        rl_rng r;
        rl_rng_init(&r, 5, 0, i, rl_rng_view(RL_RNG_PLAN, 0));
        rl_zoom_out_opts o = {.side_lo = 2, .side_hi = 2, .p = 1};
        rl_zoom_out_draw d;
        rl_draw_zoom_out(&r, &o, 100, 80, &d);
        CHECK(p.zoom_out && p.zoom_left == d.left && p.zoom_top == d.top);
        CHECK(p.out_w == 200 && p.out_h == 160 && p.crop_first);
        CHECK(p.vx == d.left && p.vy == d.top && p.vw == 100 && p.vh == 80);
        CHECK(p.x == 0 && p.y == 0 && p.w == 100 && p.h == 80);
        CHECK(p.pad.fill[0] == 10 && p.pad.fill[1] == 20 &&
              p.pad.fill[2] == 30);
        CHECK(rl_geom_from_plan(t, &p, 100, 80, &g, &err) == 0);
        CHECK_EQ(g.n, 1);
        double b[4] = {0, 0, 100, 80};
        rl_boxes_map(&g, b, 1, RL_BOX_XYXY);
        CHECK(b[0] == d.left && b[1] == d.top && b[2] == d.left + 100 &&
              b[3] == d.top + 80);
        int32_t rows[160], cols[200];
        CHECK(rl_geom_maps(&g, t, false, rows, cols, &err) == 0);
        CHECK(cols[d.left] == 0 && cols[d.left + 99] == 99);
        CHECK(rows[d.top] == 0 && rows[d.top + 79] == 79);
        CHECK(d.left == 0 || cols[d.left - 1] == -1);
        CHECK(d.left + 100 == 200 || cols[d.left + 100] == -1);
    }
    t->zoom_p = 0; /* never applied: the image as it is, no step */
    rl_plan p;
    rl_target_geom g;
    const char *err = NULL;
    CHECK(rl_plan_make(t, 100, 80, 5, 0, 0, 0, &p, msg) == 0);
    CHECK(!p.zoom_out && p.out_w == 100 && p.out_h == 80 && p.vx == 0);
    CHECK(rl_geom_from_plan(t, &p, 100, 80, &g, &err) == 0);
    CHECK_EQ(g.n, 0);
    t->zoom_p = 1;
}

/* The plan's IoU crop is rl_draw_iou_crop's after rl_draw_zoom_out's on
 * sample i's plan stream, reading its box moved by the offset and
 * clamped to the canvas, as torchvision's pad leaves it. */
static void expect_iou_draw(const rl_transform *t, int i, const double *box,
                            const rl_plan *p)
{
    rl_rng r;
    rl_rng_init(&r, 5, 0, i, rl_rng_view(RL_RNG_PLAN, 0));
    rl_zoom_out_opts zo = {t->zoom_side[0], t->zoom_side[1], t->zoom_p};
    rl_zoom_out_draw z;
    rl_draw_zoom_out(&r, &zo, 100, 80, &z);
    double moved[4] = {box[0] + z.left, box[1] + z.top, box[2] + z.left,
                       box[3] + z.top};
    rl_boxes_clamp(moved, 1, RL_BOX_XYXY, z.canvas_width, z.canvas_height);
    rl_iou_crop_opts o = {t->iou_scale_lo,  t->iou_scale_hi, t->iou_aspect_lo,
                          t->iou_aspect_hi, t->iou_options,  t->n_iou_options,
                          t->iou_trials};
    rl_iou_crop_draw d;
    rl_draw_iou_crop(&r, &o, z.canvas_width, z.canvas_height, moved, 1, &d);
    CHECK(p->iou_crop == d.crop && p->iou_rounds == d.rounds);
    CHECK(!d.crop || (p->iou_x == d.left && p->iou_y == d.top &&
                      p->iou_w == d.width && p->iou_h == d.height));
}

/* Then RandomIoUCrop with option 0: the crop lies in the canvas and holds
 * the box's centre moved by the offset; the plan's box and rectangle are
 * the image's part of it; the box maps through the padding then the
 * crop. */
static void zoom_out_iou(rl_transform *t)
{
    char msg[RL_MSG_MAX];
    t->iou_crop = 1;
    t->iou_scale_lo = 0.3;
    t->iou_scale_hi = 1.0;
    t->iou_aspect_lo = 0.5;
    t->iou_aspect_hi = 2.0;
    t->n_iou_options = 1;
    t->iou_options[0] = 0.0;
    t->iou_trials = 40;
    CHECK(rl_transform_check(t, msg) == 0);
    double box[4] = {40, 30, 60, 50};
    int in_fill = 0;
    for (int i = 0; i < 40; i++) {
        rl_plan p;
        rl_target_geom g;
        const char *err = NULL;
        CHECK(rl_plan_make_boxes(t, 100, 80, 5, 0, i, 0, box, 1, &p, msg) == 0);
        CHECK(p.zoom_out && p.iou_crop && p.crop_first);
        expect_iou_draw(t, i, box, &p);
        int cx = p.zoom_left + 50, cy = p.zoom_top + 40;
        CHECK(p.iou_x < cx && cx < p.iou_x + p.iou_w);
        CHECK(p.iou_y < cy && cy < p.iou_y + p.iou_h);
        CHECK(p.iou_x + p.iou_w <= 200 && p.iou_y + p.iou_h <= 160);
        CHECK(p.out_w == p.iou_w && p.out_h == p.iou_h);
        CHECK(p.vx == (int)p.x + p.zoom_left - p.iou_x && p.vw == (int)p.w);
        CHECK(p.vy == (int)p.y + p.zoom_top - p.iou_y && p.vh == (int)p.h);
        in_fill += p.vw < p.out_w || p.vh < p.out_h;
        CHECK(rl_geom_from_plan(t, &p, 100, 80, &g, &err) == 0);
        CHECK_EQ(g.n, 2);
        double b[4] = {40, 30, 60, 50};
        rl_boxes_map(&g, b, 1, RL_BOX_XYXY);
        CHECK(b[0] == clampd(cx - 10 - p.iou_x, p.iou_w));
        CHECK(b[3] == clampd(cy + 10 - p.iou_y, p.iou_h));
    }
    CHECK(in_fill > 0);
    /* a box past the image's left edge: the draw reads it clamped to the
     * canvas (where the zoom-out leaves it past the canvas's edge) */
    double past[4] = {-90, 30, 20, 50};
    for (int i = 0; i < 40; i++) {
        rl_plan p;
        CHECK(rl_plan_make_boxes(t, 100, 80, 5, 0, i, 0, past, 1, &p, msg) ==
              0);
        expect_iou_draw(t, i, past, &p);
    }
    t->iou_crop = 0;
}

static void zoom_out(void)
{
    rl_transform t = {.kind = RL_T_RESIZE_CROP,
                      .varying = 1,
                      .ratio_lo = 1,
                      .ratio_hi = 1,
                      .fill = {10, 20, 30},
                      .zoom_out = 1,
                      .zoom_p = 1,
                      .zoom_side = {2, 2}};
    zoom_out_alone(&t);
    zoom_out_iou(&t);
    /* a canvas past RL_MAX_SIDE: that sample's error */
    char msg[RL_MSG_MAX];
    rl_plan p;
    t.zoom_side[0] = t.zoom_side[1] = 4;
    CHECK(rl_plan_make(&t, 20000, 10, 5, 0, 0, 0, &p, msg) == RL_EDECODE);
    CHECK(strstr(msg, "canvas") != NULL);
    /* refused, naming the option: side_range, p, a resize before it */
    t.zoom_side[0] = 0.5;
    refused(&t, "RandomZoomOut: side_range");
    t.zoom_side[0] = 1;
    t.zoom_p = 1.5;
    refused(&t, "RandomZoomOut: p");
    t.zoom_p = 1;
    t.resize_short = 32;
    refused(&t, "RandomZoomOut: zoom_out");
}

static void refusals(void)
{
    rl_transform t = {.kind = RL_T_RESIZE_CROP,
                      .out_w = 4,
                      .out_h = 4,
                      .ratio_lo = 1,
                      .ratio_hi = 1};
    rl_plan p;
    double k[2] = {5, 5};
    expect(&t, 10, 10, 0, 1, k, 2, RL_BOX_XYXY, (double[]){2, 2}, &p);
    const char *err = NULL;
    rl_target_geom g;
    t.out_w = 5; /* not the transform that planned p */
    CHECK(rl_geom_from_plan(&t, &p, 10, 10, &g, &err) == -1);
    CHECK(strstr(err, "not made by this transform") != NULL);
    CHECK_EQ(g.n, 0);
    t.out_w = 4;
    t.kind = RL_T_NONE;
    err = NULL;
    CHECK(rl_geom_from_plan(&t, &p, 10, 10, &g, &err) == -1);
    CHECK(strstr(err, "fixed output") != NULL);
}

int main(void)
{
    resize_centre_pad();
    random_crop_flip();
    resized_crop_and_trim();
    scale_jitter_window();
    iou_crop();
    zoom_out();
    refusals();
    PASS("test_plan_geom");
}
