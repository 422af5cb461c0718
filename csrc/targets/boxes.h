/*
 * targets/boxes.h - a sample's target geometry: the ops its pixels went
 * through (flip, resize, crop, pad, center crop, affine, rotate,
 * perspective), and bounding boxes and keypoints mapped through them,
 * clamped and sanitized with torchvision.transforms.v2's rules.
 *
 * DESIGN: the geometry is the list of steps, not one composed matrix:
 * torchvision clamps boxes to the canvas after a crop, pad, affine or
 * perspective, and takes the axis-aligned hull of the 4 mapped corners
 * after an affine or perspective; neither commutes with the steps after
 * it, so each step is applied in turn, as torchvision applies each op.
 * All arithmetic is double (float64), with torchvision's one float32
 * rounding kept (a resize's ratios): the results match its float64
 * kernels to ~1e-9 px, and its float32 kernels within 1e-3 px wherever
 * float32 itself resolves 1e-3 px (coordinates below 4096).
 * A NaN or infinity in a box or keypoint is carried through (comparisons
 * with NaN fail, as torch.clamp propagates it); rl_boxes_sanitize drops
 * every non-finite box.
 */
#ifndef RL_TARGETS_BOXES_H
#define RL_TARGETS_BOXES_H

#include <stddef.h>
#include <stdint.h>

/* torchvision's BoundingBoxFormat (the axis-aligned ones). */
typedef enum {
    RL_BOX_XYXY = 0,
    RL_BOX_XYWH = 1,
    RL_BOX_CXCYWH = 2,
} rl_box_format;

/* AXIS: x' = m[0] x + m[2], y' = m[4] y + m[5], a box's ends swapped when
 * a scale is negative (torchvision's flip, resize, crop, pad); AFFINE: the
 * 2x3 matrix m, a box the hull of its 4 mapped corners; PERSPECTIVE: the
 * 3x3 matrix m (row-major), divided by the third row, as AFFINE for boxes.
 * AFFINE never divides: an infinite coordinate stays infinite (0 * inf
 * would make it NaN), as in torchvision's affine kernel. */
typedef enum {
    RL_GEOM_AXIS = 0,
    RL_GEOM_AFFINE = 1,
    RL_GEOM_PERSPECTIVE = 2,
} rl_geom_kind;

typedef struct {
    rl_geom_kind kind;
    double m[9];    /* input to output coordinates */
    double kp_d[2]; /* added to a keypoint (a flip maps x to W - 1 - x) */
    int clamp;      /* boxes clamped to the output canvas after this step */
    int out_w, out_h;
} rl_geom_step;

/* A plan's steps (a dozen at most) and the warps of an augment chain
 * (augment.h's RL_AUGMENT_MAX_WARPS, 64) after them. */
#define RL_GEOM_MAX_STEPS 80

typedef struct {
    int in_w, in_h;
    int n;
    rl_geom_step step[RL_GEOM_MAX_STEPS];
} rl_target_geom;

/* Each builder returns 0, or -1 with *err set to a static message (the
 * geometry left unchanged): too many steps, a size below 1, a singular
 * perspective. */
void rl_geom_init(rl_target_geom *g, int width, int height);
int rl_geom_out_width(const rl_target_geom *g);
int rl_geom_out_height(const rl_target_geom *g);
int rl_geom_hflip(rl_target_geom *g, const char **err);
int rl_geom_vflip(rl_target_geom *g, const char **err);
int rl_geom_resize(rl_target_geom *g, int height, int width, const char **err);
int rl_geom_crop(rl_target_geom *g, int top, int left, int height, int width,
                 const char **err);
/* torchvision's anchor: round half to even of (size - crop) / 2. */
int rl_geom_center_crop(rl_target_geom *g, int height, int width,
                        const char **err);
int rl_geom_pad(rl_target_geom *g, int left, int top, int right, int bottom,
                const char **err);
/* angle and shear in degrees (torchvision's affine: counter-clockwise is
 * negative angle); center NULL: the canvas' centre (w / 2, h / 2). */
int rl_geom_affine(rl_target_geom *g, double angle, double tx, double ty,
                   double scale, double shear_x, double shear_y,
                   const double *center, const char **err);
/* torchvision's rotate: affine by -angle, no expand. */
int rl_geom_rotate(rl_target_geom *g, double angle, const double *center,
                   const char **err);
/* coeffs: torchvision's 8 perspective coefficients (output to input, as
 * the pixels are sampled); inverted here as torchvision does. */
int rl_geom_perspective(rl_target_geom *g, const double coeffs[8],
                        const char **err);

/* n boxes of 4 values in format fmt, mapped in place through every step. */
void rl_boxes_map(const rl_target_geom *g, double *boxes, size_t n,
                  rl_box_format fmt);
/* The same for boxes of an integer dtype (torchvision's int64 boxes):
 * after each resize, each value is the float32 product truncated toward
 * zero, as torchvision's resize multiplies by float32 ratios and converts
 * back with .to(dtype); after each affine step likewise (torchvision
 * computes it in float32 and truncates); the other steps keep whole
 * numbers whole. */
void rl_boxes_map_whole(const rl_target_geom *g, double *boxes, size_t n,
                        rl_box_format fmt);
/* The same for float32 boxes (torchvision's default): each value rounded
 * to float32 before the first step and after every step, as a float32
 * tensor holds it between torchvision's kernels, so that a box on an edge
 * lands on the side of it torchvision's does (a right edge flipped after a
 * resize is -0.0 there, a few 1e-7 below zero in double, which
 * SanitizeBoundingBoxes would drop). */
void rl_boxes_map_f32(const rl_target_geom *g, double *boxes, size_t n,
                      rl_box_format fmt);
/* n keypoints (x, y) mapped in place; never clamped (as torchvision). */
void rl_keypoints_map(const rl_target_geom *g, double *points, size_t n);
/* The same, rounded to float32 as rl_boxes_map_f32 rounds. */
void rl_keypoints_map_f32(const rl_target_geom *g, double *points, size_t n);

/* torchvision's convert_bounding_box_format, in place. */
void rl_boxes_convert(double *boxes, size_t n, rl_box_format from,
                      rl_box_format to);
/* clamp_bounding_boxes: x to [0, width], y to [0, height]. */
void rl_boxes_clamp(double *boxes, size_t n, rl_box_format fmt, int width,
                    int height);
/* clamp_keypoints: x to [0, width - 1], y to [0, height - 1]. */
void rl_keypoints_clamp(double *points, size_t n, int width, int height);
/* SanitizeBoundingBoxes' mask: keep[i] = 1 where box i has both sides
 * >= min_size, area >= min_area, every coordinate >= 0 and within the
 * canvas (so NaN and infinities go); returns the count kept. */
size_t rl_boxes_sanitize(const double *boxes, size_t n, rl_box_format fmt,
                         int width, int height, double min_size,
                         double min_area, uint8_t *keep);

/* RandomIoUCrop's mark: in[i] = 1 where box i's centre lies strictly
 * inside the crop [left, left + width) x [top, top + height), from the
 * boxes before the crop; the boxes outside are then zeroed
 * (rl_boxes_zero_outside) so that the sanitizer drops them. Returns the
 * count inside. */
size_t rl_boxes_centers_within(const double *boxes, size_t n, rl_box_format fmt,
                               int top, int left, int height, int width,
                               uint8_t *in);
void rl_boxes_zero_outside(double *boxes, size_t n, const uint8_t *in);

#endif /* RL_TARGETS_BOXES_H */
