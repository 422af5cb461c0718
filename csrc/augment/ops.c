/*
 * augment/ops.c - the tables of built-in augmentation ops.
 *
 * DESIGN: one entry per op, one table per file of ops; Python's transforms
 * compiler (ringloader/_compiler.py, with _steps.py's pack) names an op and packs its arguments by the
 * field names of the entry's layout (exported as _core.OP_ARGS), they go
 * through the entry's check once, and its draw and apply run per sample
 * (augment/augment.h). The ops follow torchvision's transforms.v2 on uint8
 * tensors: the same parameters give the same pixels (colour ops within the
 * tolerance each states), and the parameters are drawn with torchvision's
 * distributions from the sample's own stream. The groups (group.c) are
 * entries too: RandomApply, RandomChoice and RandomOrder hold the ops
 * before them in the chain. timm's augmentations (timm.c) follow timm on
 * PIL images instead: Pillow's kernels (pil.c), timm's distributions.
 */
#include "augment/augment.h"

const rl_op_def *const *const rl_op_tables[] = {
    rl_color_ops,  rl_geometry_ops,    rl_policy_ops,
    rl_augmix_ops, rl_output_ops,      rl_group_ops,
    rl_timm_ops,   rl_photometric_ops, rl_perspective_ops,
    NULL,
};
