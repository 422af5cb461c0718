/*
 * core/plan_check.c - the checks a transform passes before any sample is
 * planned with it (rl_transform_check), and the windows' names.
 *
 * DESIGN: every field is checked once, when the transform is given, with a
 * message naming the field, so that core/plan.c can take its fields as
 * valid on every sample.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>

#include "core/plan.h"
#include "targets/draws.h"

/* A probability in [0, 1]. */
static bool is_p(double p)
{
    return p >= 0 && p <= 1;
}

/* A factor range of two finite numbers over 0 (either order, as
 * random.uniform takes them). */
static bool is_range(double lo, double hi)
{
    return lo > 0 && hi > 0 && isfinite(lo) && isfinite(hi);
}

/* ResizeKeepRatio's random scale and aspect: 0, or RL_ECONFIG with msg. */
static int keep_random_check(const rl_transform *t, char *msg)
{
    bool random = t->keep_scale_p != 0 || t->keep_aspect_p != 0;
    if (!is_p(t->keep_scale_p) || !is_p(t->keep_aspect_p) ||
        (t->keep_scale_area != 0 && t->keep_scale_area != 1) ||
        (random && t->keep_ratio != 1) ||
        (t->keep_scale_p > 0 &&
         !is_range(t->keep_scale_lo, t->keep_scale_hi)) ||
        (t->keep_aspect_p > 0 &&
         !is_range(t->keep_aspect_lo, t->keep_aspect_hi))) {
        snprintf(msg, RL_MSG_MAX,
                 "ResizeKeepRatio's random scale and aspect need keep_ratio, "
                 "probabilities in [0, 1] and ranges of positive numbers");
        return RL_ECONFIG;
    }
    return 0;
}

/* ScaleJitter's fields (jitter_w or jitter_h set): its own options'
 * check, and no other resize with it. 0, or RL_ECONFIG with msg. */
static int jitter_check(const rl_transform *t, char *msg)
{
    rl_scale_jitter_opts o = {
        {t->jitter_w, t->jitter_h}, t->jitter_scale[0], t->jitter_scale[1]};
    const char *why = rl_scale_jitter_check(&o);
    if (!why && (t->jitter_w > RL_MAX_SIDE || t->jitter_h > RL_MAX_SIDE))
        why = "target_size past the largest side";
    if (!why && (t->kind == RL_T_RANDOM_CROP || t->resize_short ||
                 t->resize_short_hi || t->resize_max || t->n_short_sizes ||
                 t->resize_h || t->resize_w || t->keep_ratio))
        why = "it is the only resize (no other resize or RandomResizedCrop)";
    if (!why)
        return 0;
    snprintf(msg, RL_MSG_MAX,
             "jitter_w, jitter_h, jitter_scale (ScaleJitter's target_size, "
             "scale_range; sides up to %d): %s",
             RL_MAX_SIDE, why);
    return RL_ECONFIG;
}

/* A varying transform's fields: a resize (shorter side or none) alone. */
static bool varying_ok(const rl_transform *t)
{
    return t->varying == 1 && t->kind == RL_T_RESIZE_CROP && t->out_w == 0 &&
           t->out_h == 0 && t->resize_h == 0 && t->resize_w == 0 &&
           t->keep_ratio == 0 && t->trim == 0 && t->pad[0] == 0 &&
           t->pad[1] == 0 && t->pad[2] == 0 && t->pad[3] == 0 &&
           t->pad_if_needed == 0 && t->window == RL_WINDOW_RANDOM_CROP;
}

int rl_transform_check(const rl_transform *t, char *msg)
{
    if (t->kind != RL_T_RESIZE_CROP && t->kind != RL_T_RANDOM_CROP &&
        t->kind != RL_T_RESIZE_RANDOM_CROP) {
        snprintf(msg, RL_MSG_MAX,
                 "the transform must give a fixed output size");
        return RL_ECONFIG;
    }
    if (t->varying != 0 && !varying_ok(t)) {
        snprintf(msg, RL_MSG_MAX,
                 "a varying output (varying 1) is a resize_crop without an "
                 "output size, padding, window, trim or keep_ratio");
        return RL_ECONFIG;
    }
    if (t->varying == 0 && (t->out_w <= 0 || t->out_h <= 0 ||
                            t->out_w > RL_MAX_SIDE || t->out_h > RL_MAX_SIDE)) {
        snprintf(msg, RL_MSG_MAX,
                 "the output size must be 1..%d a side, not %dx%d", RL_MAX_SIDE,
                 t->out_w, t->out_h);
        return RL_ECONFIG;
    }
    if ((t->jitter_w != 0 || t->jitter_h != 0) && jitter_check(t, msg) != 0)
        return RL_ECONFIG;
    bool sizes_ok = t->n_short_sizes >= 0 &&
                    t->n_short_sizes <= RL_MAX_SHORT_SIZES &&
                    (t->n_short_sizes == 0 ||
                     (t->resize_short == 0 && t->resize_short_hi == 0 &&
                      t->resize_h == 0 && t->resize_w == 0 && !t->keep_ratio));
    for (int i = 0; sizes_ok && i < t->n_short_sizes; i++)
        sizes_ok = t->short_sizes[i] >= 1 && t->short_sizes[i] <= RL_MAX_SIDE;
    if (!sizes_ok) {
        snprintf(msg, RL_MSG_MAX,
                 "short_sizes must hold 1..%d sizes in 1..%d, without another "
                 "resize",
                 RL_MAX_SHORT_SIZES, RL_MAX_SIDE);
        return RL_ECONFIG;
    }
    if (t->resize_max < 0 || t->resize_max > RL_MAX_SIDE ||
        (t->resize_max > 0 && t->n_short_sizes == 0 &&
         (t->resize_max <= t->resize_short || t->resize_h || t->resize_w ||
          t->keep_ratio))) {
        snprintf(msg, RL_MSG_MAX,
                 "resize_max must be in 0..%d, past resize_short and without "
                 "resize_h, resize_w or keep_ratio",
                 RL_MAX_SIDE);
        return RL_ECONFIG;
    }
    if (t->resize_short_hi != 0 &&
        (t->resize_short < 1 || t->resize_short_hi <= t->resize_short ||
         t->resize_short_hi > RL_MAX_SIDE + 1 || t->resize_max != 0)) {
        snprintf(msg, RL_MSG_MAX,
                 "resize_short_hi must be 0 or in resize_short + 1..%d, "
                 "without resize_max",
                 RL_MAX_SIDE + 1);
        return RL_ECONFIG;
    }
    if (t->resize_short < 0 || t->resize_short > RL_MAX_SIDE ||
        t->resize_h < 0 || t->resize_h > RL_MAX_SIDE || t->resize_w < 0 ||
        t->resize_w > RL_MAX_SIDE) {
        snprintf(msg, RL_MSG_MAX, "resize sizes must be in 0..%d", RL_MAX_SIDE);
        return RL_ECONFIG;
    }
    if (!(t->ratio_lo > 0) || !(t->ratio_hi > 0) || !(t->scale_lo >= 0) ||
        !(t->scale_hi >= t->scale_lo) || !(t->flip_p >= 0) ||
        !(t->flip_p <= 1)) {
        snprintf(msg, RL_MSG_MAX, "invalid scale, ratio or flip_p");
        return RL_ECONFIG;
    }
    if (t->filter < 0 || t->filter >= RL_FILTER_COUNT) {
        snprintf(msg, RL_MSG_MAX, "unknown interpolation %d", t->filter);
        return RL_ECONFIG;
    }
    if (t->filter_random != 0 && t->filter_random != 1) {
        snprintf(msg, RL_MSG_MAX, "filter_random must be 0 or 1");
        return RL_ECONFIG;
    }
    if (t->keep_ratio != 0 &&
        (t->keep_ratio != 1 || t->resize_h <= 0 || t->resize_w <= 0 ||
         !(t->keep_longest >= 0 && t->keep_longest <= 1))) {
        snprintf(msg, RL_MSG_MAX,
                 "keep_ratio needs resize_h, resize_w and keep_longest in "
                 "[0, 1]");
        return RL_ECONFIG;
    }
    if (keep_random_check(t, msg) != 0 || rl__iou_crop_check(t, msg) != 0 ||
        rl__zoom_out_check(t, msg) != 0) {
        return RL_ECONFIG;
    }
    if (t->window < 0 || t->window >= RL_WINDOW_COUNT ||
        (t->window != RL_WINDOW_RANDOM_CROP &&
         (t->kind != RL_T_RESIZE_RANDOM_CROP || t->pad[0] || t->pad[1] ||
          t->pad[2] || t->pad[3] || t->pad_if_needed || t->pad_twice))) {
        snprintf(msg, RL_MSG_MAX,
                 "window %d: timm's crop-or-pad windows and FixedSizeCrop's "
                 "take no RandomCrop padding and need kind resize_random_crop",
                 t->window);
        return RL_ECONFIG;
    }
    if (t->passes != RL_PASSES_PILLOW13 &&
        t->passes != RL_PASSES_HORIZONTAL_FIRST) {
        snprintf(msg, RL_MSG_MAX, "unknown pass order %d", t->passes);
        return RL_ECONFIG;
    }
    if (!(t->vflip_p >= 0) || !(t->vflip_p <= 1)) {
        snprintf(msg, RL_MSG_MAX, "vflip_p must be in [0, 1]");
        return RL_ECONFIG;
    }
    for (int i = 0; i < 4; i++) {
        if (t->pad[i] < 0 || t->pad[i] > RL_MAX_SIDE) {
            snprintf(msg, RL_MSG_MAX, "RandomCrop padding must be in 0..%d",
                     RL_MAX_SIDE);
            return RL_ECONFIG;
        }
    }
    if (t->trim < 0 || t->trim > RL_MAX_SIDE) {
        snprintf(msg, RL_MSG_MAX, "TrimBorder's border must be in 0..%d",
                 RL_MAX_SIDE);
        return RL_ECONFIG;
    }
    if (t->pad_if_needed < 0 || t->pad_if_needed > 2 ||
        t->pad_flips_first < 0 || t->pad_flips_first > 3 ||
        (t->pad_if_needed != 2 && t->pad_flips_first != 0) ||
        (t->pad_if_needed == 2 &&
         (t->kind != RL_T_RESIZE_RANDOM_CROP ||
          t->window != RL_WINDOW_RANDOM_CROP || t->pad[0] || t->pad[1] ||
          t->pad[2] || t->pad[3] || t->pad_twice ||
          t->pad_mode != RL_PAD_CONSTANT))) {
        snprintf(msg, RL_MSG_MAX,
                 "pad_if_needed %d (0, 1 or 2), pad_flips_first %d (0..3): "
                 "2 (PadIfSmaller's bottom and right) is resize_random_crop's "
                 "RandomCrop with no other padding and a constant fill; "
                 "pad_flips_first needs it",
                 t->pad_if_needed, t->pad_flips_first);
        return RL_ECONFIG;
    }
    if (t->pad_mode < 0 || t->pad_mode >= RL_PAD_MODE_COUNT ||
        t->pad_twice < 0 || t->pad_twice > 1) {
        snprintf(msg, RL_MSG_MAX, "unknown padding mode %d (pad_twice %d)",
                 t->pad_mode, t->pad_twice);
        return RL_ECONFIG;
    }
    for (int c = 0; c < 3; c++) {
        if (t->fill[c] < 0 || t->fill[c] > 255) {
            snprintf(msg, RL_MSG_MAX, "RandomCrop fill must be in 0..255");
            return RL_ECONFIG;
        }
    }
    return 0;
}

const char *rl_window_name(int window)
{
    static const char *const names[RL_WINDOW_COUNT] = {
        "random_crop", "center_crop_or_pad", "random_crop_or_pad",
        "fixed_size_crop"};
    return window >= 0 && window < RL_WINDOW_COUNT ? names[window] : NULL;
}
