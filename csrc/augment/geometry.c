/* augment/geometry.c - placeholder, filled by the ops work. */
#include "augment/kernels.h"

const rl_op_def *const rl_geometry_ops[] = {
    NULL,
};
