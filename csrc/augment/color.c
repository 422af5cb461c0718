/* augment/color.c - placeholder, filled by the ops work. */
#include "augment/kernels.h"

const rl_op_def *const rl_color_ops[] = {
    NULL,
};
