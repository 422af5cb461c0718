/* test_draws.c - targets/draws.c without Python: every RandomIoUCrop crop
 * keeps a box centre and reaches its option's IoU; the loop's limit with no
 * box; RandomZoomOut's padding adds up to its canvas; FixedSizeCrop's
 * sizes; a permutation is one; the same stream draws the same; and the
 * checks name the option at fault. (The distributions against
 * torchvision's are tests/test_detect_draws.py's.) */
#include <math.h>
#include <string.h>

#include "check.h"
#include "targets/draws.h"

static const double BOXES[] = {10, 20, 110, 90, 200, 150, 300, 280};

static double iou(const double *b, const rl_iou_crop_draw *d)
{
    double r = d->left + d->width, t = d->top + d->height;
    double w = fmin(b[2], r) - fmax(b[0], d->left);
    double h = fmin(b[3], t) - fmax(b[1], d->top);
    double inter = (w > 0 ? w : 0) * (h > 0 ? h : 0);
    double area = (b[2] - b[0]) * (b[3] - b[1]);
    return inter / (area + (double)d->width * d->height - inter);
}

static void iou_crops(void)
{
    static const double opts[] = {0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0};
    rl_iou_crop_opts o = {0.3, 1.0, 0.5, 2.0, opts, 7, 40};
    CHECK(rl_iou_crop_check(&o) == NULL);
    int crops = 0;
    for (int i = 0; i < 2000; i++) {
        rl_rng g;
        rl_rng_init(&g, 7, 0, i, RL_RNG_PLAN);
        rl_iou_crop_draw d;
        rl_draw_iou_crop(&g, &o, 320, 300, BOXES, 2, &d);
        CHECK(!d.limited);
        if (!d.crop) {
            CHECK(d.option >= 1.0);
            continue;
        }
        crops++;
        CHECK(d.option < 1.0);
        CHECK(d.left >= 0 && d.left + d.width <= 320);
        CHECK(d.top >= 0 && d.top + d.height <= 300);
        double best = -1;
        for (int k = 0; k < 2; k++) {
            const double *b = BOXES + 4 * k;
            double cx = (b[0] + b[2]) / 2, cy = (b[1] + b[3]) / 2;
            if (d.left < cx && cx < d.left + d.width && d.top < cy &&
                cy < d.top + d.height)
                best = fmax(best, iou(b, &d));
        }
        CHECK(best >= d.option);
    }
    CHECK(crops > 1000);

    /* no box and no option >= 1.0: stops at the limit, uncropped */
    static const double half[] = {0.5};
    o.options = half;
    o.n_options = 1;
    rl_rng g;
    rl_rng_init(&g, 7, 0, 0, RL_RNG_PLAN);
    rl_iou_crop_draw d;
    rl_draw_iou_crop(&g, &o, 64, 64, NULL, 0, &d);
    CHECK(d.limited && !d.crop && d.rounds == RL_IOU_CROP_MAX_ROUNDS);

    o.n_options = 0;
    CHECK(strstr(rl_iou_crop_check(&o), "sampler_options") != NULL);
    o.n_options = 1;
    o.min_scale = 2.0;
    CHECK(strstr(rl_iou_crop_check(&o), "min_scale") != NULL);
}

static void other_draws(void)
{
    rl_zoom_out_opts z = {1.0, 4.0, 1.0};
    CHECK(rl_zoom_out_check(&z) == NULL);
    for (int i = 0; i < 500; i++) {
        rl_rng g;
        rl_rng_init(&g, 3, 1, i, RL_RNG_PLAN);
        rl_zoom_out_draw d;
        rl_draw_zoom_out(&g, &z, 37, 53, &d);
        CHECK(d.applied && d.left >= 0 && d.top >= 0 && d.right >= 0 &&
              d.bottom >= 0);
        CHECK_EQ(d.left + 37 + d.right, d.canvas_width);
        CHECK_EQ(d.top + 53 + d.bottom, d.canvas_height);

        rl_fixed_crop_draw f;
        rl_draw_fixed_crop(&g, 40, 60, 100, 30, &f);
        CHECK(f.crop && f.height == 30 && f.width == 60);
        CHECK(f.left >= 0 && f.left <= 40 && f.top == 0);
        CHECK(f.pad_bottom == 10 && f.pad_right == 0);

        rl_photometric_opts p = {
            {0.875, 0.5, 0.5, -0.05}, {1.125, 1.5, 1.5, 0.05}, 1.0, 4};
        rl_photometric_draw pd;
        rl_draw_photometric(&g, &p, &pd);
        int seen = 0;
        for (int c = 0; c < 4; c++)
            seen |= 1 << pd.perm[c];
        CHECK(pd.permute && seen == 15);
    }
    z.side_lo = 0.5;
    CHECK(strstr(rl_zoom_out_check(&z), "side_range") != NULL);
    CHECK(strstr(rl_fixed_crop_check(0, 5), "size") != NULL);

    /* the same stream, the same draw */
    int sizes[] = {480, 512, 544};
    rl_shortest_size_opts s = {sizes, 3, 1333};
    rl_shortest_size_draw a, b;
    rl_rng g1, g2;
    rl_rng_init(&g1, 9, 2, 5, RL_RNG_PLAN);
    rl_rng_init(&g2, 9, 2, 5, RL_RNG_PLAN);
    rl_draw_shortest_size(&g1, &s, 640, 480, &a);
    rl_draw_shortest_size(&g2, &s, 640, 480, &b);
    CHECK(memcmp(&a, &b, sizeof(a)) == 0);
    CHECK(a.height == a.min_size && a.width == (int)(640.0 * a.min_size / 480));
    s.n_sizes = 0;
    CHECK(strstr(rl_shortest_size_check(&s), "min_size") != NULL);
}

int main(void)
{
    iou_crops();
    other_draws();
    PASS("test_draws");
}
