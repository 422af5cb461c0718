/*
 * augment/kernels.h - the pixel kernels the ops are made of, shared by the
 * single ops (color_ops.c, geometry.c) and the policies (policy.c).
 *
 * Each follows the torchvision.transforms.v2.functional kernel of the same
 * name on a uint8 tensor, on img in place, and returns 0 or -ENOMEM.
 */
#ifndef RL_AUGMENT_KERNELS_H
#define RL_AUGMENT_KERNELS_H

#include "augment/augment.h"

/* ---- colour: brightness, contrast, saturation, hue and grayscale in
 * color.c; the rest in color_hist.c. Factors >= 0, hue in [-0.5, 0.5].
 * Like the resampler, they take their AVX2+FMA path (torch's rounding on
 * such CPUs) from rl_simd_level(), so RINGLOADER_SIMD=c selects the
 * plain C one. rl_k_gaussian_blur returns -EINVAL for an even or
 * non-positive size or sigma <= 0; the others fail only with -ENOMEM. */
int rl_k_brightness(rl_image *img, double factor);
int rl_k_contrast(rl_image *img, double factor);
int rl_k_saturation(rl_image *img, double factor);
int rl_k_hue(rl_image *img, double factor); /* factor in [-0.5, 0.5] */
/* Whether the colour kernels (grayscale, contrast, saturation, sharpness)
 * round torch's add with alpha fused (true) or in two steps, now: by the
 * SIMD level and the target (color.c's DESIGN). */
bool rl_color_fused(void);
int rl_k_grayscale(rl_image *img); /* three equal channels */
int rl_k_autocontrast(rl_image *img);
int rl_k_equalize(rl_image *img);
int rl_k_posterize(rl_image *img, int bits);
int rl_k_solarize(rl_image *img, double threshold);
int rl_k_sharpness(rl_image *img, double factor);
int rl_k_invert(rl_image *img);
/* kernel (kx, ky) odd sizes along x and y; sigma (sx, sy) */
int rl_k_gaussian_blur(rl_image *img, int kx, int ky, double sx, double sy);

/* ---- geometry (geometry.c) ---- */
typedef enum { RL_INTERP_NEAREST = 0, RL_INTERP_BILINEAR = 1 } rl_interp;

/* torchvision's _get_inverse_affine_matrix(center, angle, translate, scale,
 * shear) (degrees; center relative to the image centre) into m[6]. */
void rl_affine_inverse(double cx, double cy, double angle, double tx, double ty,
                       double scale, double shear_x, double shear_y,
                       double m[6]);

/* The affine warp of img by the inverse matrix m, output the same size, as
 * torchvision's affine/rotate (expand=False). fill: three values, or NULL
 * for fill=None. Returns 0, -ENOMEM, or -EOVERFLOW for a side over
 * 4,194,296 pixels (a limit of its rounding). */
int rl_k_affine(rl_image *img, const double m[6], rl_interp interp,
                const double *fill);

/* torchvision's perspective_image by its 8 coefficients (output to input,
 * (a x + b y + c) / (g x + h y + 1) and (d x + e y + f) / (g x + h y + 1)):
 * the float32 grid of _perspective_grid, then the grid sampler of
 * rl_k_affine, with the same fill, results and limit. */
int rl_k_perspective(rl_image *img, const double coeffs[8], rl_interp interp,
                     const double *fill);

/* Whether rl_k_affine (and rl_k_rotate, the policies' geometric sub-ops)
 * fuses its unnormalisation and bilinear sums now, as torch's AVX2 and
 * AVX512 kernels do: at the AVX2 SIMD level on a CPU with AVX2 and FMA;
 * false below it, and on any other target (aarch64: warp.c's DESIGN). */
bool rl_warp_fused(void);

/* All of torchvision's rotate (expand=False): the angle taken mod 360 as
 * Python's %, negated, the quarter-turn shortcut; center in pixels or NULL
 * for the image centre. */
int rl_k_rotate(rl_image *img, double angle, rl_interp interp,
                const double *center, const double *fill);

/* ---- the policies' sub-ops (policy.c) ----
 * torchvision's auto-augment sub-op `kind` with `magnitude` on img, as its
 * _apply_image_or_video_transform runs it: kind is the index of its name in
 * rl_policy_kinds (0 Identity .. 14 Invert), the magnitude already signed,
 * Solarize's in pixel values; an unknown kind does nothing. fill: three
 * values, or NULL for fill=None. Returns 0, -ENOMEM or -EOVERFLOW (as
 * rl_k_affine). */
int rl_policy_apply(rl_image *img, int kind, double magnitude, rl_interp interp,
                    const double *fill);

/* The arguments every policy op has (policy.c's and AugMix's): interp 0
 * (nearest) or 1 (bilinear), fill three NaN (None) or three values in
 * [0, 255]. Returns 0, or RL_ECONFIG with msg "name: what is wrong". */
int rl_policy_check_common(const char *name, double interp, const double *fill,
                           char *msg);

/* ---- Pillow's kernels, as timm's ops call them (pil.c) ----
 * Each gives Pillow's bytes for the same call on an RGB image: ImageOps
 * invert, posterize (bits <= 0: black, as Pillow before 13 gave; >= 8:
 * unchanged), solarize (values >= threshold inverted), autocontrast and
 * equalize (no cutoff, no mask); timm's solarize_add (values below
 * threshold raised by add, clipped); ImageEnhance Color, Contrast,
 * Brightness and Sharpness enhance(factor); Image.transform(size, AFFINE,
 * a, resample, fillcolor=fill), a the output-to-input matrix, and
 * Image.rotate(degrees, resample, fillcolor=fill). resample is Pillow's
 * number: RL_PIL_BILINEAR or RL_PIL_BICUBIC. Return 0 or -ENOMEM. */
enum { RL_PIL_BILINEAR = 2, RL_PIL_BICUBIC = 3 };
/* Per-channel tables, shared by torchvision's kernels (color_hist.c, which
 * defines them) and Pillow's (pil.c): lut[c] applied to channel c of every
 * pixel; each channel's histogram (a count fits 32 bits: an image's sides
 * are at most 65535, the plan's RL_MAX_SIDE, so it has under 2^32 pixels). */
void rl__image_apply_luts(rl_image *img, const uint8_t lut[3][256]);
void rl__image_histograms(const rl_image *img, uint32_t hist[3][256]);

int rl_pil_invert(rl_image *img);
int rl_pil_posterize(rl_image *img, int bits);
int rl_pil_solarize(rl_image *img, int threshold);
int rl_pil_solarize_add(rl_image *img, int add, int threshold);
int rl_pil_autocontrast(rl_image *img);
int rl_pil_equalize(rl_image *img);
int rl_pil_color(rl_image *img, double factor);
int rl_pil_contrast(rl_image *img, double factor);
int rl_pil_brightness(rl_image *img, double factor);
int rl_pil_sharpness(rl_image *img, double factor);
/* Image.blend(in1, img, alpha) into img (float32, truncated; clipped
 * outside [0, 1]), in1 an image of img's size with rows stride1 apart. */
void rl_pil_blend(const uint8_t *in1, size_t stride1, rl_image *img,
                  float alpha);
/* ImageFilter.GaussianBlur(radius): Pillow's three box blurs a direction */
int rl_pil_gaussian_blur(rl_image *img, double radius);
int rl_pil_affine(rl_image *img, const double a[6], int resample,
                  const uint8_t fill[3]);
int rl_pil_rotate(rl_image *img, double degrees, int resample,
                  const uint8_t fill[3]);

/* n weights ~ Dirichlet(alpha, ..., alpha) from g, each rounded to
 * float32 (at least FLT_MIN), into out (augmix.c; timm's AugMix too). */
void rl__dirichlet_f32(rl_rng *g, double alpha, int n, double *out);

#endif /* RL_AUGMENT_KERNELS_H */
