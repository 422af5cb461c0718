/*
 * targets/draws.c - the detection ops' random parameters (draws.h).
 */
#include "targets/draws.h"

#include <limits.h>
#include <math.h>

/* torch.rand on float32: 24 random bits, a multiple of 2^-24 in [0, 1). */
static float rand_f32(rl_rng *g)
{
    return (float)(floor(rl_rng_uniform(g) * 16777216.0) / 16777216.0);
}

/* torchvision's `lo + torch.rand(1) * (hi - lo)`: the Python numbers made
 * float32, the product first. */
static float lerp_f32(double lo, double hi, float u)
{
    return (float)lo + u * (float)(hi - lo);
}

/* int(x): truncated toward zero, saturated at the ints' range (Python's
 * would be larger still; no image of such a size can be made). */
static int trunc_int(double x)
{
    if (x >= (double)INT_MAX)
        return INT_MAX;
    if (x <= (double)INT_MIN)
        return INT_MIN;
    return (int)x;
}

/* int(n * t) for a Python int n and a float32 tensor t: the product in
 * float32, truncated toward zero. */
static int trunc_f32(int n, float t)
{
    return trunc_int((double)((float)n * t));
}

static int finite_range(double lo, double hi)
{
    return isfinite(lo) && isfinite(hi) && lo <= hi;
}

/* ---- RandomIoUCrop ---- */

const char *rl_iou_crop_check(const rl_iou_crop_opts *o)
{
    if (!finite_range(o->min_scale, o->max_scale) || o->min_scale < 0)
        return "min_scale and max_scale must be finite with 0 <= min_scale "
               "<= max_scale";
    if (!finite_range(o->min_aspect_ratio, o->max_aspect_ratio) ||
        o->min_aspect_ratio < 0)
        return "min_aspect_ratio and max_aspect_ratio must be finite with 0 "
               "<= min_aspect_ratio <= max_aspect_ratio";
    if (o->n_options < 1)
        return "sampler_options must hold at least one value";
    for (int i = 0; i < o->n_options; i++) {
        if (isnan(o->options[i]))
            return "sampler_options must not hold NaN";
    }
    if (o->trials < 1)
        return "trials must be at least 1";
    return NULL;
}

/* box_iou of box b (XYXY) with the crop, in its order of operations. */
static double crop_iou(const double *b, int left, int top, int right,
                       int bottom)
{
    double area_b = (b[2] - b[0]) * (b[3] - b[1]);
    double area_c = (double)(right - left) * (double)(bottom - top);
    double w = fmin(b[2], right) - fmax(b[0], left);
    double h = fmin(b[3], bottom) - fmax(b[1], top);
    double inter = (w > 0 ? w : 0) * (h > 0 ? h : 0);
    return inter / (area_b + area_c - inter);
}

/* torchvision's test of one crop: some box's centre strictly inside, and
 * the largest IoU of those boxes not below the option (a NaN IoU makes the
 * maximum NaN, which is not below it). */
static int crop_fits(const double *boxes, size_t n, int left, int top,
                     int right, int bottom, double option)
{
    int any = 0, nan = 0;
    double best = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        const double *b = boxes + 4 * i;
        double cx = 0.5 * (b[0] + b[2]), cy = 0.5 * (b[1] + b[3]);
        if (!(left < cx && cx < right && top < cy && cy < bottom))
            continue;
        any = 1;
        double iou = crop_iou(b, left, top, right, bottom);
        if (isnan(iou))
            nan = 1;
        else if (iou > best)
            best = iou;
    }
    return any && (nan || !(best < option));
}

/* One trial; 1 with the crop in d when it is accepted. */
static int iou_trial(rl_rng *g, const rl_iou_crop_opts *o, int width,
                     int height, const double *boxes, size_t n, double option,
                     rl_iou_crop_draw *d)
{
    float r0 = rand_f32(g), r1 = rand_f32(g);
    int new_w = trunc_f32(width, lerp_f32(o->min_scale, o->max_scale, r0));
    int new_h = trunc_f32(height, lerp_f32(o->min_scale, o->max_scale, r1));
    if (new_h == 0)
        return 0;
    double ar = (double)new_w / (double)new_h;
    if (!(o->min_aspect_ratio <= ar && ar <= o->max_aspect_ratio))
        return 0;
    float q0 = rand_f32(g), q1 = rand_f32(g);
    int left = trunc_f32(width - new_w, q0);
    int top = trunc_f32(height - new_h, q1);
    int right = left + new_w, bottom = top + new_h;
    if (left == right || top == bottom)
        return 0;
    if (!crop_fits(boxes, n, left, top, right, bottom, option))
        return 0;
    d->top = top;
    d->left = left;
    d->height = new_h;
    d->width = new_w;
    return 1;
}

void rl_draw_iou_crop(rl_rng *g, const rl_iou_crop_opts *o, int width,
                      int height, const double *boxes, size_t n,
                      rl_iou_crop_draw *d)
{
    *d = (rl_iou_crop_draw){0};
    for (int round = 0; round < RL_IOU_CROP_MAX_ROUNDS; round++) {
        d->rounds = round + 1;
        d->option = o->options[rl_rng_index(g, o->n_options)];
        if (d->option >= 1.0)
            return;
        for (int t = 0; t < o->trials; t++) {
            if (iou_trial(g, o, width, height, boxes, n, d->option, d)) {
                d->crop = 1;
                return;
            }
        }
    }
    d->limited = 1;
}

/* ---- RandomZoomOut ---- */

const char *rl_zoom_out_check(const rl_zoom_out_opts *o)
{
    if (!finite_range(o->side_lo, o->side_hi) || o->side_lo < 1.0)
        return "side_range must be finite with 1 <= side_range[0] <= "
               "side_range[1]";
    if (!(o->p >= 0.0 && o->p <= 1.0))
        return "p must be in [0, 1]";
    return NULL;
}

void rl_draw_zoom_out(rl_rng *g, const rl_zoom_out_opts *o, int width,
                      int height, rl_zoom_out_draw *d)
{
    *d = (rl_zoom_out_draw){0};
    /* _RandomApplyTransform: skipped when torch.rand(1) >= p */
    if (!(rand_f32(g) < (float)o->p))
        return;
    d->applied = 1;
    d->ratio = lerp_f32(o->side_lo, o->side_hi, rand_f32(g));
    d->canvas_width = trunc_f32(width, d->ratio);
    d->canvas_height = trunc_f32(height, d->ratio);
    float r0 = rand_f32(g), r1 = rand_f32(g);
    d->left = trunc_f32(d->canvas_width - width, r0);
    d->top = trunc_f32(d->canvas_height - height, r1);
    d->right = d->canvas_width - (d->left + width);
    d->bottom = d->canvas_height - (d->top + height);
}

/* ---- ScaleJitter ---- */

const char *rl_scale_jitter_check(const rl_scale_jitter_opts *o)
{
    if (o->target_size[0] < 1 || o->target_size[1] < 1)
        return "target_size must be two sizes >= 1";
    if (!finite_range(o->scale_lo, o->scale_hi) || o->scale_lo <= 0)
        return "scale_range must be finite with 0 < scale_range[0] <= "
               "scale_range[1]";
    return NULL;
}

void rl_draw_scale_jitter(rl_rng *g, const rl_scale_jitter_opts *o, int width,
                          int height, rl_scale_jitter_draw *d)
{
    d->scale = lerp_f32(o->scale_lo, o->scale_hi, rand_f32(g));
    double base = fmin((double)o->target_size[1] / height,
                       (double)o->target_size[0] / width);
    float r = (float)base * d->scale;
    d->width = trunc_f32(width, r);
    d->height = trunc_f32(height, r);
}

/* ---- RandomShortestSize ---- */

const char *rl_shortest_size_check(const rl_shortest_size_opts *o)
{
    if (o->n_sizes < 1)
        return "min_size must hold at least one size";
    for (int i = 0; i < o->n_sizes; i++) {
        if (o->min_size[i] < 1)
            return "min_size must hold sizes >= 1";
    }
    if (o->max_size < 0)
        return "max_size must be >= 1 or None";
    return NULL;
}

/* Python's arithmetic: true division and products in float64. */
void rl_draw_shortest_size(rl_rng *g, const rl_shortest_size_opts *o, int width,
                           int height, rl_shortest_size_draw *d)
{
    d->min_size = o->min_size[rl_rng_index(g, o->n_sizes)];
    int lo = width < height ? width : height;
    int hi = width < height ? height : width;
    double r = (double)d->min_size / lo;
    if (o->max_size > 0)
        r = fmin(r, (double)o->max_size / hi);
    d->width = trunc_int(width * r);
    d->height = trunc_int(height * r);
}

/* ---- FixedSizeCrop ---- */

const char *rl_fixed_crop_check(int size_h, int size_w)
{
    return size_h < 1 || size_w < 1 ? "size must be two sizes >= 1" : NULL;
}

void rl_draw_fixed_crop(rl_rng *g, int size_h, int size_w, int width,
                        int height, rl_fixed_crop_draw *d)
{
    *d = (rl_fixed_crop_draw){0};
    d->height = height < size_h ? height : size_h;
    d->width = width < size_w ? width : size_w;
    if (d->height != height || d->width != width) {
        float r = rand_f32(g);
        d->crop = 1;
        d->top = trunc_f32(height > size_h ? height - size_h : 0, r);
        d->left = trunc_f32(width > size_w ? width - size_w : 0, r);
    }
    d->pad_bottom = size_h - d->height;
    d->pad_right = size_w - d->width;
}

/* ---- RandomPhotometricDistort ---- */

const char *rl_photometric_check(const rl_photometric_opts *o)
{
    static const char *const msg[4] = {
        "brightness must be finite with 0 <= min <= max",
        "contrast must be finite with 0 <= min <= max",
        "saturation must be finite with 0 <= min <= max",
        "hue must be within [-0.5, 0.5] with min <= max",
    };
    for (int k = 0; k < 4; k++) {
        double floor_k = k == RL_DISTORT_HUE ? -0.5 : 0.0;
        if (!finite_range(o->lo[k], o->hi[k]) || o->lo[k] < floor_k ||
            (k == RL_DISTORT_HUE && o->hi[k] > 0.5))
            return msg[k];
    }
    if (!(o->p >= 0.0 && o->p <= 1.0))
        return "p must be in [0, 1]";
    if (o->channels < 1 || o->channels > RL_DRAW_MAX_CHANNELS)
        return "channels must be 1 .. 16";
    return NULL;
}

void rl_draw_photometric(rl_rng *g, const rl_photometric_opts *o,
                         rl_photometric_draw *d)
{
    *d = (rl_photometric_draw){0};
    float p = (float)o->p;
    for (int k = 0; k < 4; k++) {
        if (rand_f32(g) < p) {
            d->apply[k] = 1;
            /* uniform_(lo, hi) on float32: u * (hi - lo) + lo */
            float lo = (float)o->lo[k], hi = (float)o->hi[k];
            d->factor[k] = (double)(rand_f32(g) * (hi - lo) + lo);
        }
    }
    d->contrast_before = rand_f32(g) < 0.5f;
    if (rand_f32(g) < p) {
        d->permute = 1;
        for (int i = 0; i < o->channels; i++)
            d->perm[i] = i;
        for (int i = 0; i < o->channels - 1; i++) {
            int j = i + rl_rng_index(g, o->channels - i);
            int t = d->perm[i];
            d->perm[i] = d->perm[j];
            d->perm[j] = t;
        }
    }
}
