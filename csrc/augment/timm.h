/*
 * augment/timm.h - what timm's policies (timm.c: RandAugment, AutoAugment;
 * timm_augmix.c: AugMixAugment) share: the arguments every one of them
 * starts with, the draw of one of timm's AugmentOp calls and its apply
 * (timm_augment_op.c).
 *
 * A policy's arguments start with the head (TM_HEAD_ARGS): the hparams
 * its AugmentOps share (magnitude_std, the magnitude's upper bound,
 * translate_const, translate_pct, the fill colour img_mean, and the
 * resampling filters one of which each geometric call picks) and `rows`:
 * one (kind, prob, magnitude) per AugmentOp, kind the index of timm's op
 * name in rl_timm_kinds. A call's draw is one number, a slot: 0 where the
 * op does not run (its prob), else
 *     (1 + row + TM_MAX_ROWS * (filter + 3 * negate)) * TM_SLOT_SCALE + m
 * with m the magnitude after timm's noise and clipping (below
 * TM_SLOT_SCALE), filter the index of the resampling filter drawn and
 * negate timm's _randomly_negate; for GaussianBlurRand, m is the blur
 * radius its op draws. Python decodes slots in its tests.
 */
#ifndef RL_AUGMENT_TIMM_H
#define RL_AUGMENT_TIMM_H

#include "augment/kernels.h"

#define TM_MAX_ROWS 64
#define TM_MAX_UPPER 1000    /* the largest magnitude bound (mmax) */
#define TM_SLOT_SCALE 1024.0 /* a power of two above TM_MAX_UPPER */
#define TM_MAX_FILTERS 3

#define TM_ROW_ARGS(X)           \
    X(TM_ROW_, kind, 1, RL_ARG_) \
    X(TM_ROW_, prob, 1, RL_ARG_) \
    X(TM_ROW_, magnitude, 1, RL_ARG_)
enum { TM_ROW_ARGS(RL_OP_ARG_AT) TM_ROW_NARGS };
extern const rl_op_field TM_ROW_fields[];

#define TM_HEAD_ARGS(X)                      \
    X(TM_, magnitude_std, 1, RL_ARG_)        \
    X(TM_, magnitude_upper, 1, RL_ARG_)      \
    X(TM_, translate_const, 1, RL_ARG_)      \
    X(TM_, translate_pct, 1, RL_ARG_)        \
    X(TM_, fill, 3, RL_ARG_)                 \
    X(TM_, n_filters, 1, RL_ARG_)            \
    X(TM_, filters, TM_MAX_FILTERS, RL_ARG_) \
    X(TM_, n_rows, 1, RL_ARG_)               \
    X(TM_, rows, TM_MAX_ROWS, TM_ROW_)
enum { TM_HEAD_ARGS(RL_OP_ARG_AT) TM_NARGS };

/* Checks the head of a policy's arguments: 0, or RL_ECONFIG with msg
 * naming the op. */
int rl__timm_check_head(const char *name, const double *a, char *msg);

/* Draws one call of AugmentOp `row`: its slot (above). */
double rl__timm_draw(const double *a, int row, rl_rng *g);

/* Runs the call a slot describes on img: 0, or -ENOMEM with msg. */
int rl__timm_run(const double *a, double slot, rl_image *img, char *msg);

/* The number of timm's op functions (rl_timm_funcs). */
#define TM_NFUNCS 19

/* timm's op function number `func` (rl_timm_funcs; 0 <= func < TM_NFUNCS)
 * with argument arg on img (resample: Pillow's filter number; fill: the
 * three fill values). Returns 0 or -ENOMEM. */
int rl__timm_func(int func, double arg, int resample, const double *fill,
                  rl_image *img);

/* The argument checks the policies share: whether v is a finite integer,
 * fill three integers 0..255, f bilinear or bicubic; rl__timm_fail sets
 * msg to "name: what" and returns RL_ECONFIG. */
bool rl__timm_is_int(double v);
bool rl__timm_fill_ok(const double *fill);
bool rl__timm_filter_ok(double f);
int rl__timm_fail(char *msg, const char *name, const char *what);

/* timm's AugMixAugment (timm_augmix.c), listed in timm.c's table. */
extern const rl_op_def rl__timm_augmix;

#endif /* RL_AUGMENT_TIMM_H */
