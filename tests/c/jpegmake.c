/* jpegmake.c - the C tests' JPEGs, made in memory (jpegmake.h). */
#include "jpegmake.h"

#include <stdio.h>
#include <stdlib.h>

#include <jpeglib.h>

#include "check.h"

uint8_t *make_jpeg(int w, int h, int seed, size_t *len)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr err;
    c.err = jpeg_std_error(&err);
    jpeg_create_compress(&c);
    unsigned char *buf = NULL;
    unsigned long size = 0;
    jpeg_mem_dest(&c, &buf, &size);
    c.image_width = (JDIMENSION)w;
    c.image_height = (JDIMENSION)h;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 90, TRUE);
    if (seed % 4 == 1) {
        jpeg_simple_progression(&c);
    }
    jpeg_start_compress(&c, TRUE);
    uint8_t *row = malloc((size_t)w * 3);
    CHECK(row != NULL);
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++) {
            row[x * 3] = (uint8_t)(x * 255 / w);
            row[x * 3 + 1] = (uint8_t)(y * 255 / h + seed * 9);
            row[x * 3 + 2] = (uint8_t)(((x / 6 + y / 6 + seed) % 2) * 220);
        }
        JSAMPROW r = row;
        jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    free(row);
    *len = size;
    return buf;
}
