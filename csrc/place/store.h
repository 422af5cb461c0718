/*
 * place/store.h - writing finished 8-bit rows into a destination (internal
 * to the place stage; rl_store_rgb() and rl_fill_zero() are the public
 * faces of the same code).
 */
#ifndef RL_PLACE_STORE_H
#define RL_PLACE_STORE_H

#include <stdbool.h>

#include "place/place.h"
#include "simd.h"

/*
 * Writes one row of w RGBX pixels (px, 4-byte aligned, only read) to row y
 * of dst from column 0, converted to dst's dtype with the kernels of level
 * simd. Writes nothing outside those w pixels. A mirrored output is the
 * horizontal pass's business (resample_kernels.h): rows come here in output order.
 */
void rl__store_row(const rl_dst *dst, const uint8_t *px, int w, int y,
                   rl_simd simd);

#endif /* RL_PLACE_STORE_H */
