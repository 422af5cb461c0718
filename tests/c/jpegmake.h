/* jpegmake.h - a JPEG made in memory, for the C tests. */
#ifndef RL_TEST_JPEGMAKE_H
#define RL_TEST_JPEGMAKE_H

#include <stddef.h>
#include <stdint.h>

/* A w x h RGB JPEG of gradients and a checkerboard, quality 90, its
 * pattern shifted by seed (progressive when seed % 4 == 1), in a malloc'd
 * buffer of *len bytes that the caller frees. */
uint8_t *make_jpeg(int w, int h, int seed, size_t *len);

#endif /* RL_TEST_JPEGMAKE_H */
