/* augment/erase.c - placeholder. */
#include "augment/kernels.h"

const rl_op_def *const rl_output_ops[] = {
    NULL,
};
