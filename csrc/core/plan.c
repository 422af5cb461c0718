/*
 * core/plan.c - sample geometry as torchvision defines it.
 *
 * DESIGN: the arithmetic follows torchvision's definitions (Resize's
 * truncated long side, CenterCrop's rounded offsets, RandomResizedCrop's ten
 * tries in log-ratio space and its central fallback), with Python's
 * round-half-to-even reproduced by nearbyint() in the default rounding
 * mode. Only the random source differs: torchvision draws from torch's
 * global generator, we draw from Philox keyed by (seed, epoch, index), so the
 * distribution is the same and the draws are reproducible per sample
 * (rng.h).
 */
#define _GNU_SOURCE
#include "core/plan.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "rng.h"
#include "targets/draws.h"

/* torch.randint(lo, hi) for hi > lo: uniform over [lo, hi). */
static int randint(rl_rng *g, int lo, int hi)
{
    int v = lo + (int)floor(rl_rng_uniform(g) * (double)(hi - lo));
    return v < hi ? v : hi - 1;
}

/* Python's round() on a double, to int. */
static int pyround(double x)
{
    return (int)nearbyint(x);
}

static void random_crop_box(const rl_transform *t, int width, int height,
                            rl_rng *g, int *top, int *left, int *h, int *w)
{
    double area = (double)width * (double)height;
    double lr0 = log(t->ratio_lo), lr1 = log(t->ratio_hi);
    for (int attempt = 0; attempt < 10; attempt++) {
        double target = area * (t->scale_lo + rl_rng_uniform(g) *
                                                  (t->scale_hi - t->scale_lo));
        double ar = exp(lr0 + rl_rng_uniform(g) * (lr1 - lr0));
        int cw = pyround(sqrt(target * ar));
        int ch = pyround(sqrt(target / ar));
        if (cw > 0 && cw <= width && ch > 0 && ch <= height) {
            *top = randint(g, 0, height - ch + 1);
            *left = randint(g, 0, width - cw + 1);
            *h = ch;
            *w = cw;
            return;
        }
    }
    double in_ratio = (double)width / (double)height;
    double rmin = fmin(t->ratio_lo, t->ratio_hi);
    double rmax = fmax(t->ratio_lo, t->ratio_hi);
    int cw, ch;
    if (in_ratio < rmin) {
        cw = width;
        ch = pyround(cw / rmin);
    } else if (in_ratio > rmax) {
        ch = height;
        cw = pyround(ch * rmax);
    } else {
        cw = width;
        ch = height;
    }
    *top = (height - ch) / 2;
    *left = (width - cw) / 2;
    *h = ch;
    *w = cw;
}

/* timm's ResizeKeepRatio's random factors on the height and the width
 * (1, 1 when neither is drawn): the scale, then the aspect, each with its
 * own probability, in that order, as timm's get_params draws them. */
static void keep_ratio_factors(const rl_transform *t, rl_rng *g, double *fh,
                               double *fw)
{
    double s = 1.0;
    *fh = *fw = 1.0;
    if (t->keep_scale_p > 0 && rl_rng_uniform(g) < t->keep_scale_p) {
        /* random.uniform(a, b) is a + (b - a) * random() */
        s = t->keep_scale_lo +
            (t->keep_scale_hi - t->keep_scale_lo) * rl_rng_uniform(g);
        /* an area fraction, as RandomResizedCrop's scale: its side */
        s = t->keep_scale_area ? 1.0 / sqrt(s) : s;
        *fh = *fw = s;
    }
    if (t->keep_aspect_p > 0 && rl_rng_uniform(g) < t->keep_aspect_p) {
        double l0 = log(t->keep_aspect_lo), l1 = log(t->keep_aspect_hi);
        double a = sqrt(exp(l0 + (l1 - l0) * rl_rng_uniform(g)));
        *fh = s / a;
        *fw = s * a;
    }
}

/* torchvision's Resize(size, max_size) output size (its
 * _compute_resized_output_size): the shorter side to resize_short (or
 * drawn in [resize_short, resize_short_hi) from g), the
 * longer keeping the aspect, truncated; then where resize_max > 0 and
 * the longer side is past it, the longer side to resize_max and the
 * shorter scaled with it, truncated (resize_short 0: the longer side to
 * resize_max). Kept in int range (a 1 x 65500 image resized to 40000
 * would overflow it). */
static void shorter_side_size(const rl_transform *t, int width, int height,
                              rl_rng *g, int *rw, int *rh)
{
    int shorter = width <= height ? width : height;
    int longer = width <= height ? height : width;
    int ns, nl;
    if (t->n_short_sizes > 0) {
        /* RandomShortestSize: Python's float64 products, truncated */
        int m = t->short_sizes[rl_rng_index(g, t->n_short_sizes)];
        double r = (double)m / shorter;
        if (t->resize_max > 0)
            r = fmin(r, (double)t->resize_max / longer);
        *rw = (int)fmin(width * r, (double)INT_MAX);
        *rh = (int)fmin(height * r, (double)INT_MAX);
        return;
    }
    if (t->resize_short > 0) {
        ns = t->resize_short;
        if (t->resize_short_hi > ns) /* RandomResize's torch.randint */
            ns += rl_rng_index(g, t->resize_short_hi - ns);
        nl = (int)fmin((double)ns * longer / shorter, (double)INT_MAX);
        if (t->resize_max > 0 && nl > t->resize_max) {
            ns = (int)((double)((int64_t)t->resize_max * ns) / nl);
            nl = t->resize_max;
        }
    } else {
        ns = (int)((double)((int64_t)t->resize_max * shorter) / longer);
        nl = t->resize_max;
    }
    *rw = width <= height ? ns : nl;
    *rh = width <= height ? nl : ns;
}

/* The size of the image after Resize (as configured; a random
 * ResizeKeepRatio, ScaleJitter or drawn shorter side draws from g): 0, or
 * RL_EDECODE with msg for an image that a ResizeKeepRatio, ScaleJitter or
 * max_size leaves no row or column of (timm's and torchvision's resizes
 * fail on it too: an image of extreme aspect). */
static int resized_size(const rl_transform *t, int width, int height, rl_rng *g,
                        int *rw, int *rh, char *msg)
{
    int nw = width, nh = height;
    if (t->jitter_w > 0) {
        rl_scale_jitter_opts o = {
            {t->jitter_w, t->jitter_h}, t->jitter_scale[0], t->jitter_scale[1]};
        rl_scale_jitter_draw d;
        rl_draw_scale_jitter(g, &o, width, height, &d);
        nw = d.width;
        nh = d.height;
    } else if (t->resize_short > 0 || t->resize_max > 0 ||
               t->n_short_sizes > 0) {
        shorter_side_size(t, width, height, g, &nw, &nh);
    } else if (t->keep_ratio) {
        double rh = (double)height / t->resize_h;
        double rw = (double)width / t->resize_w;
        double r = fmax(rh, rw) * t->keep_longest +
                   fmin(rh, rw) * (1.0 - t->keep_longest);
        double fh, fw;
        keep_ratio_factors(t, g, &fh, &fw);
        /* timm's round(x * f / ratio); Python's round: half to even, as
         * nearbyint in the default mode */
        nh = (int)fmin(nearbyint(height * fh / r), (double)INT_MAX);
        nw = (int)fmin(nearbyint(width * fw / r), (double)INT_MAX);
    } else if (t->resize_h > 0 && t->resize_w > 0) {
        nw = t->resize_w;
        nh = t->resize_h;
    }
    *rw = nw;
    *rh = nh;
    if (nw <= 0 || nh <= 0) {
        if (t->keep_ratio)
            snprintf(msg, RL_MSG_MAX,
                     "ResizeKeepRatio(%d, %d) leaves the %dx%d image %dx%d "
                     "pixels",
                     t->resize_h, t->resize_w, width, height, nw, nh);
        else if (t->jitter_w > 0) /* a small scale on an extreme aspect */
            snprintf(msg, RL_MSG_MAX,
                     "ScaleJitter leaves the %dx%d image %dx%d pixels", width,
                     height, nw, nh);
        else /* max_size on an image of extreme aspect, as torchvision */
            snprintf(msg, RL_MSG_MAX,
                     "the resize (max_size %d) leaves the %dx%d image %dx%d "
                     "pixels",
                     t->resize_max, width, height, nw, nh);
        return RL_EDECODE;
    }
    return 0;
}

/* One axis of a window of `out` pixels whose first pixel is at `start` of
 * a resized axis of n pixels (start may be negative, the window may pass
 * the end: padding): the part inside the image, in source pixels (*b0,
 * *bsize, with `scale` resized pixels a source pixel), and where it lands
 * in the output (*v0, *vsize; *vsize 0 when the window is all padding). */
static void window_axis(int start, int out, int n, int full, double scale,
                        double *b0, double *bsize, int *v0, int *vsize)
{
    int lo = start > 0 ? start : 0;
    int hi = start + out < n ? start + out : n;
    if (hi <= lo) {
        *v0 = 0;
        *vsize = 0;
        *b0 = 0;
        *bsize = full;
        return;
    }
    *v0 = lo - start;
    *vsize = hi - lo;
    *b0 = lo / scale;
    *bsize = (hi - lo) / scale;
}

/* The range [a->r0, *r1) of a resized axis that a window of `out` pixels
 * copies under a padding mode other than constant: contiguous, as each
 * step along the window moves the source by at most one pixel. */
static void mirrored_range(rl_pad_mode mode, rl_pad_axis *a, int out, int *r1)
{
    int lo = a->n, hi = -1;
    for (int i = 0; i < out; i++) {
        int s = rl_pad_axis_source(mode, a, i);
        lo = s < lo ? s : lo;
        hi = s > hi ? s : hi;
    }
    a->r0 = lo;
    *r1 = hi + 1;
}

/* torchvision's RandomCrop window on an nw x nh resized image: its
 * padding, then the draws of the top offset and the left one, each only
 * where the padded image is larger than the window. Sets pad->x, pad->y
 * (w0, n; lo, span where v1 pads twice); 0, or RL_EDECODE for an image
 * smaller than the window after padding. */
static int random_crop_window(const rl_transform *t, int nw, int nh, rl_rng *g,
                              const rl_plan *p, rl_plan_pad *pad)
{
    int pl = t->pad[0], pt = t->pad[1], pr = t->pad[2], pb = t->pad[3];
    int64_t pw = (int64_t)nw + pl + pr, ph = (int64_t)nh + pt + pb;
    int ow = p->out_w, oh = p->out_h;
    if (t->pad_if_needed == 2) {
        /* PadIfSmaller: the difference at the bottom and right only. */
        ph = ph < oh ? oh : ph;
        pw = pw < ow ? ow : pw;
    }
    if (t->pad_if_needed == 1 && ph < oh) {
        /* torchvision pads the difference on both sides. */
        pt += (int)(oh - ph);
        ph += 2 * (oh - ph);
    }
    if (t->pad_if_needed == 1 && pw < ow) {
        pl += (int)(ow - pw);
        pw += 2 * (ow - pw);
    }
    if (ph < oh || pw < ow) {
        return RL_EDECODE;
    }
    int top = ph > oh ? randint(g, 0, (int)(ph - oh + 1)) : 0;
    int left = pw > ow ? randint(g, 0, (int)(pw - ow + 1)) : 0;
    pad->x = (rl_pad_axis){.w0 = left - pl, .n = nw};
    pad->y = (rl_pad_axis){.w0 = top - pt, .n = nh};
    if (t->pad_twice && pl > t->pad[0]) {
        /* pad[] was added first: pad_if_needed's share mirrors it too
         * (an axis smaller than the window: no overflow). */
        pad->x.lo = t->pad[0];
        pad->x.span = nw + t->pad[0] + t->pad[2];
    }
    if (t->pad_twice && pt > t->pad[1]) {
        pad->y.lo = t->pad[1];
        pad->y.span = nh + t->pad[1] + t->pad[3];
    }
    return 0;
}

/* The first pixel of timm's CenterCropOrPad or RandomCropOrPad window of
 * `out` pixels on a resized axis of n (negative: padding before it). */
static int crop_or_pad_start(rl_window mode, int n, int out, rl_rng *g)
{
    int d = n - out;
    if (mode == RL_WINDOW_CENTER_OR_PAD) {
        /* center_crop_or_pad: (out - n) // 2 pixels of padding before the
         * image, or round((n - out) / 2) cropped */
        return d >= 0 ? pyround(d / 2.0) : -((-d) / 2);
    }
    /* copysign(random.randint(0, |d|), d) */
    int r = randint(g, 0, (d < 0 ? -d : d) + 1);
    return d < 0 ? -r : r;
}

/* Resize (as configured) then a window of out_h x out_w, as `window` says
 * (rl_window) with its padding: 0, or RL_EDECODE with msg for an image
 * resized to nothing or smaller than a RandomCrop's window after padding. */
static int resize_random_window(const rl_transform *t, int width, int height,
                                rl_rng *g, rl_plan *p, char *msg)
{
    int nw, nh;
    int rc = resized_size(t, width, height, g, &nw, &nh, msg);
    if (rc != 0) {
        return rc;
    }
    int ow = p->out_w, oh = p->out_h;
    rl_plan_pad *pad = &p->pad;
    for (int c = 0; c < 3; c++) {
        pad->fill[c] = (uint8_t)t->fill[c];
    }
    if (t->window == RL_WINDOW_RANDOM_CROP) {
        rc = random_crop_window(t, nw, nh, g, p, pad);
        if (rc != 0) {
            snprintf(msg, RL_MSG_MAX,
                     "RandomCrop(%d, %d) is larger than the %dx%d image after "
                     "its resize and padding",
                     oh, ow, width, height);
            return rc;
        }
    } else if (t->window == RL_WINDOW_FIXED_SIZE) {
        /* one r for both offsets, drawn only where an axis is cropped */
        rl_fixed_crop_draw d;
        rl_draw_fixed_crop(g, oh, ow, nw, nh, &d);
        pad->x = (rl_pad_axis){.w0 = d.left, .n = nw};
        pad->y = (rl_pad_axis){.w0 = d.top, .n = nh};
    } else {
        /* timm draws the top offset first, then the left one */
        int wy = crop_or_pad_start((rl_window)t->window, nh, oh, g);
        int wx = crop_or_pad_start((rl_window)t->window, nw, ow, g);
        pad->x = (rl_pad_axis){.w0 = wx, .n = nw};
        pad->y = (rl_pad_axis){.w0 = wy, .n = nh};
    }
    double sx = (double)nw / width, sy = (double)nh / height;
    int wx = pad->x.w0, wy = pad->y.w0;
    bool inside = wx >= 0 && wy >= 0 && wx + ow <= nw && wy + oh <= nh;
    if (t->pad_mode == RL_PAD_CONSTANT || inside) {
        /* Constant padding, or none seen: the window's part inside the
         * image is resampled into its place, the rest filled. */
        window_axis(wx, ow, nw, width, sx, &p->x, &p->w, &p->vx, &p->vw);
        window_axis(wy, oh, nh, height, sy, &p->y, &p->h, &p->vy, &p->vh);
        return 0;
    }
    /* The padding copies the image's pixels: resample every pixel the
     * window copies (rl_plan_pad), at the resized image's scale. */
    int r1;
    pad->mode = (rl_pad_mode)t->pad_mode;
    mirrored_range(pad->mode, &pad->x, ow, &r1);
    p->vx = 0;
    p->vw = r1 - pad->x.r0;
    p->x = pad->x.r0 / sx;
    p->w = p->vw / sx;
    mirrored_range(pad->mode, &pad->y, oh, &r1);
    p->vy = 0;
    p->vh = r1 - pad->y.r0;
    p->y = pad->y.r0 / sy;
    p->h = p->vh / sy;
    return 0;
}

/* Resize (as configured) then CenterCrop(out_h, out_w). */
static int resize_crop_box(const rl_transform *t, int width, int height,
                           rl_rng *g, rl_plan *p, char *msg)
{
    int nw, nh;
    int rc = resized_size(t, width, height, g, &nw, &nh, msg);
    if (rc != 0) {
        return rc;
    }
    double sx = (double)nw / width, sy = (double)nh / height;
    /* Horizontal axis: the crop window in resized pixels, clipped to the
     * resized image; what the clip removes is zero padding. */
    int ow = p->out_w, oh = p->out_h;
    if (ow <= nw) {
        int left = pyround((nw - ow) / 2.0);
        p->vx = 0;
        p->vw = ow;
        p->x = left / sx;
        p->w = ow / sx;
    } else {
        p->vx = (ow - nw) / 2;
        p->vw = nw;
        p->x = 0;
        p->w = width;
    }
    if (oh <= nh) {
        int top = pyround((nh - oh) / 2.0);
        p->vy = 0;
        p->vh = oh;
        p->y = top / sy;
        p->h = oh / sy;
    } else {
        p->vy = (oh - nh) / 2;
        p->vh = nh;
        p->y = 0;
        p->h = height;
    }
    return 0;
}

/* RL_EINTERNAL, with msg naming the source size: the transform cannot
 * reach a sample (rl_transform_check refuses it). Written only on this
 * path: rl_plan_make runs for every view of every sample. */
static int invalid_transform(int width, int height, char *msg)
{
    snprintf(msg, RL_MSG_MAX, "invalid transform for a %dx%d image", width,
             height);
    return RL_EINTERNAL;
}

/* A varying transform's output: the whole image after its resize, the
 * output's size the resized one. 0, or RL_EDECODE with msg for a resized
 * side past RL_MAX_SIDE. */
static int varying_box(const rl_transform *t, int width, int height, rl_rng *g,
                       rl_plan *p, char *msg)
{
    int nw, nh;
    int rc = resized_size(t, width, height, g, &nw, &nh, msg);
    if (rc != 0) {
        return rc;
    }
    if (nw > RL_MAX_SIDE || nh > RL_MAX_SIDE) {
        snprintf(msg, RL_MSG_MAX,
                 "the %dx%d image resized to %dx%d: a side past %d pixels",
                 width, height, nw, nh, RL_MAX_SIDE);
        return RL_EDECODE;
    }
    p->out_w = p->vw = nw;
    p->out_h = p->vh = nh;
    p->vx = p->vy = 0;
    p->x = p->y = 0;
    p->w = width;
    p->h = height;
    return 0;
}

int rl_plan_make(const rl_transform *t, int width, int height, uint64_t seed,
                 int64_t epoch, int64_t index, int view, rl_plan *p, char *msg)
{
    return rl_plan_make_boxes(t, width, height, seed, epoch, index, view, NULL,
                              0, p, msg);
}

int rl_plan_make_boxes(const rl_transform *t, int width, int height,
                       uint64_t seed, int64_t epoch, int64_t index, int view,
                       const double *boxes, size_t n, rl_plan *p, char *msg)
{
    bool sized = t->varying ? t->out_w == 0 && t->out_h == 0
                            : t->out_w > 0 && t->out_h > 0;
    if (width <= 0 || height <= 0 || !sized || view < 0 ||
        view >= RL_MAX_VIEWS) {
        return invalid_transform(width, height, msg);
    }
    /* timm's TrimBorder: everything after it sees the inner image. */
    if ((int64_t)2 * t->trim >= width || (int64_t)2 * t->trim >= height) {
        snprintf(msg, RL_MSG_MAX,
                 "the %dx%d image is no larger than TrimBorder's %d-pixel "
                 "borders",
                 width, height, t->trim);
        return RL_EDECODE;
    }
    width -= 2 * t->trim;
    height -= 2 * t->trim;
    p->trim = t->trim;
    p->iou_crop = p->iou_rounds = p->iou_limited = 0;
    p->iou_option = 0;
    p->iou_x = p->iou_y = p->iou_w = p->iou_h = 0;
    p->zoom_out = p->zoom_left = p->zoom_top = p->zoom_w = p->zoom_h = 0;
    rl_rng g;
    rl_rng_init(&g, seed, epoch, index, rl_rng_view(RL_RNG_PLAN, view));
    p->out_w = t->out_w;
    p->out_h = t->out_h;
    p->filter = (rl_filter)t->filter;
    p->passes = (rl_passes)t->passes;
    memset(&p->pad, 0, sizeof(p->pad));
    /* CenterCrop pads with zeros (fill's default), timm's CenterCropOrPad
     * with its fill */
    for (int c = 0; c < 3; c++) {
        p->pad.fill[c] = (uint8_t)t->fill[c];
    }
    if (t->kind == RL_T_RANDOM_CROP) {
        int top, left, h, w;
        random_crop_box(t, width, height, &g, &top, &left, &h, &w);
        p->x = left;
        p->y = top;
        p->w = w;
        p->h = h;
        p->vx = p->vy = 0;
        p->vw = t->out_w;
        p->vh = t->out_h;
        p->crop_first = true;
    } else if (t->varying && t->kind == RL_T_RESIZE_CROP) {
        bool canvas = t->iou_crop || t->zoom_out;
        int rc = canvas
                     ? rl__plan_zoom_iou(t, width, height, &g, boxes, n, p, msg)
                     : varying_box(t, width, height, &g, p, msg);
        if (rc != 0) {
            return rc;
        }
        p->crop_first = canvas; /* 1:1, the box alone */
    } else if (t->kind == RL_T_RESIZE_CROP ||
               t->kind == RL_T_RESIZE_RANDOM_CROP) {
        int rc = t->kind == RL_T_RESIZE_CROP
                     ? resize_crop_box(t, width, height, &g, p, msg)
                     : resize_random_window(t, width, height, &g, p, msg);
        if (rc != 0) {
            return rc;
        }
        p->crop_first = false;
    } else {
        /* the size as given, before the trim */
        return invalid_transform(width + 2 * t->trim, height + 2 * t->trim,
                                 msg);
    }
    /* timm's RandomResizedCropAndInterpolation picks its interpolation
     * after the box, before the flip's transform runs: a transform without
     * the choice draws what it drew before. */
    if (t->filter_random) {
        p->filter =
            rl_rng_uniform(&g) < 0.5 ? RL_FILTER_BILINEAR : RL_FILTER_BICUBIC;
    }
    /* The flip draw comes after the crop's, as torchvision's Compose runs
     * RandomResizedCrop before RandomHorizontalFlip. */
    p->flip = t->flip_p > 0.0 && rl_rng_uniform(&g) < t->flip_p;
    /* (A mirrored padding's flips are the place stage's: rl_plan_pad.) */
    bool rect = p->pad.mode == RL_PAD_CONSTANT;
    /* A pad after the flip (pad_flips_first) stays where it is: the image
     * is mirrored inside its rectangle, the rectangle is not. */
    if (p->flip && rect && !(t->pad_flips_first & 1)) {
        p->vx = p->out_w - p->vx - p->vw;
    }
    /* The vertical flip's draw comes last: a transform without one draws
     * what it drew before vertical flips existed. */
    p->vflip = t->vflip_p > 0.0 && rl_rng_uniform(&g) < t->vflip_p;
    if (p->vflip && rect && !(t->pad_flips_first & 2)) {
        p->vy = p->out_h - p->vy - p->vh;
    }
    return 0;
}
