/*
 * augment/ops.c - the table of built-in augmentation ops.
 *
 * DESIGN: one entry per op; Python's transforms compiler names an op, its
 * arguments go through the entry's check once, and its draw and apply run
 * per sample (augment/augment.h). The table is empty in this release: the
 * fused recipes end with the flip and the output conversion, and ops that
 * cannot be fused run in Python after the C pipeline.
 */
#include "augment/augment.h"

const rl_op_def *const rl_op_table[] = {
    NULL,
};
