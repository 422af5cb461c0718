/*
 * fuzz_masks.c - libFuzzer harness on the mask raster (targets/mask.h):
 * the compressed RLE parser, the counts reader and the polygon scan
 * conversion, then the sampling.
 *
 * DESIGN: the input's first 6 bytes are the header: what the rest is
 * (byte 0: a COCO string, counts one byte each, or polygons), the image's
 * height and width (bytes 1, 2: 0..69, so 0 is tried too), the sampled
 * size (bytes 3, 4) and how many polygons the points are dealt into (byte
 * 5). Polygon coordinates are 16-bit integers over 8 (+-4096 pixels, far
 * past the image), or, after a 0xff byte, a raw double (NaN, infinities,
 * huge values). Every call must return 0, -EINVAL with a message, or
 * -ENOMEM; on success the toggles are strictly increasing and inside the
 * image, a polygon's are those of a plain point-by-point walk of its
 * edges written here (the raster's exactness claim, checked), and a
 * sampled output is the full raster indexed by the maps. Any failed check
 * aborts; ASan and UBSan catch reads outside the input and undefined
 * arithmetic.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "targets/mask.h"

#define HEADER_BYTES 6

static void check(int ok)
{
    if (!ok) {
        abort();
    }
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* The toggles of one polygon by walking every upsampled point of every
 * edge and testing every step, in double arithmetic throughout: slow,
 * plain, and independent of mask_poly.c's shortcuts. Coordinates within
 * +-4096. Returns the count of toggles written to out (sorted, pairs
 * cancelled), or -1 out of memory. */
static long walk(const double *xy, size_t k, int h, int w, uint32_t **out)
{
    size_t cap = 0;
    int *px = malloc(sizeof(int) * (k + 1)),
        *py = malloc(sizeof(int) * (k + 1));
    for (size_t i = 0; px && py && i <= k; i++) {
        px[i] = (int)(5.0 * xy[2 * (i % k)] + 0.5);
        py[i] = (int)(5.0 * xy[2 * (i % k) + 1] + 0.5);
    }
    for (size_t i = 0; px && py && i < k; i++) {
        int dx = abs(px[i + 1] - px[i]), dy = abs(py[i + 1] - py[i]);
        cap += (size_t)(dx > dy ? dx : dy) + 1;
    }
    int *u = malloc(sizeof(int) * (cap + 1)),
        *v = malloc(sizeof(int) * (cap + 1));
    uint32_t *pos = malloc(sizeof(uint32_t) * (cap + 1));
    long n = -1;
    if (!px || !py || !u || !v || !pos) {
        goto out;
    }
    size_t m = 0;
    for (size_t i = 0; i < k; i++) {
        int ax = px[i], ay = py[i], bx = px[i + 1], by = py[i + 1];
        int dx = abs(bx - ax), dy = abs(by - ay);
        int len = dx >= dy ? dx : dy;
        for (int d = 0; d <= len; d++) {
            /* from a toward b; the coordinate across computed from the
             * end with the smaller coordinate along */
            int along_x = dx >= dy;
            int lowfirst = along_x ? ax <= bx : ay <= by;
            int sx = lowfirst ? ax : bx, sy = lowfirst ? ay : by;
            int ex = lowfirst ? bx : ax, ey = lowfirst ? by : ay;
            int t = lowfirst ? d : len - d;
            if (len == 0) {
                u[m] = ax;
                v[m] = ay;
            } else if (along_x) {
                u[m] = sx + t;
                v[m] = (int)(sy + (double)(ey - sy) / dx * t + 0.5);
            } else {
                v[m] = sy + t;
                u[m] = (int)(sx + (double)(ex - sx) / dy * t + 0.5);
            }
            m++;
        }
    }
    n = 0;
    for (size_t j = 1; j < m; j++) {
        if (u[j] == u[j - 1]) {
            continue;
        }
        double xd = (u[j] < u[j - 1] ? u[j] : u[j - 1]);
        xd = (xd + 0.5) / 5 - 0.5;
        if (floor(xd) != xd || xd < 0 || xd > w - 1) {
            continue;
        }
        double yd = (v[j] < v[j - 1] ? v[j] : v[j - 1]);
        yd = ceil(fmin(fmax((yd + 0.5) / 5 - 0.5, 0), h));
        pos[n++] = (uint32_t)((int)xd * h + (int)yd);
    }
    qsort(pos, (size_t)n, sizeof(*pos), cmp_u32);
    long kept = 0;
    for (long i = 0; i < n;) {
        long j = i + 1;
        while (j < n && pos[j] == pos[i]) {
            j++;
        }
        if (((j - i) & 1) && pos[i] < (uint32_t)(h * w)) {
            pos[kept++] = pos[i];
        }
        i = j;
    }
    n = kept;
    *out = pos;
    pos = NULL;
out:
    free(px);
    free(py);
    free(u);
    free(v);
    free(pos);
    return n;
}

static void check_mask(const rl_mask *m)
{
    for (size_t i = 0; i < m->n; i++) {
        check(m->pos[i] < (uint32_t)m->h * (uint32_t)m->w);
        check(i == 0 || m->pos[i - 1] < m->pos[i]);
    }
}

static void check_status(int rc, const char *msg)
{
    check(rc == 0 || rc == -EINVAL || rc == -ENOMEM);
    check(rc == 0 || msg[0] != '\0');
}

/* Samples m through maps made from the input, against the full raster. */
static void check_sampling(const rl_mask *m, const uint8_t *hdr,
                           const uint8_t *data, size_t size)
{
    int oh = hdr[3] % 40, ow = hdr[4] % 40;
    int32_t rows[40], cols[40];
    for (int i = 0; i < 40; i++) {
        uint8_t b = size ? data[i % size] : (uint8_t)i;
        rows[i] = (int32_t)((b + i) % (m->h + 1)) - 1;
        cols[i] = (int32_t)((b * 7 + i) % (m->w + 1)) - 1;
    }
    uint8_t *whole = malloc((size_t)m->h * (size_t)m->w + 1);
    int32_t *ir = malloc(sizeof(int32_t) * (size_t)m->h);
    int32_t *ic = malloc(sizeof(int32_t) * (size_t)m->w);
    uint8_t out[40 * 40];
    char msg[RL_MSG_MAX] = "";
    if (whole && ir && ic) {
        for (int i = 0; i < m->h; i++) {
            ir[i] = i;
        }
        for (int i = 0; i < m->w; i++) {
            ic[i] = i;
        }
        check(rl_mask_sample(m, ir, m->h, ic, m->w, 9, whole, msg) == 0);
        check(rl_mask_sample(m, rows, oh, cols, ow, 200, out, msg) == 0);
        for (int y = 0; y < oh; y++) {
            for (int x = 0; x < ow; x++) {
                uint8_t want = rows[y] < 0 || cols[x] < 0
                                   ? 200
                                   : whole[rows[y] * m->w + cols[x]];
                check(want <= 1 || want == 200);
                check(out[y * ow + x] == want);
            }
        }
    }
    free(whole);
    free(ir);
    free(ic);
}

/* Reads the polygons' coordinates; the count of numbers. */
static size_t read_coords(const uint8_t *data, size_t size, double *xy,
                          size_t most)
{
    size_t n = 0, p = 0;
    while (n < most && p + 2 <= size) {
        if (data[p] == 0xff && p + 9 <= size) {
            memcpy(&xy[n++], data + p + 1, sizeof(double));
            p += 9;
        } else {
            int16_t v = (int16_t)(data[p] | data[p + 1] << 8);
            xy[n++] = v / 8.0;
            p += 2;
        }
    }
    return n & ~(size_t)1;
}

static void run_polygons(rl_mask *m, const uint8_t *hdr, const uint8_t *data,
                         size_t size)
{
    double xy[256];
    size_t n = read_coords(data, size, xy, 256) / 2;
    size_t parts = (size_t)(hdr[5] % 4) + 1, at = 0;
    for (size_t i = 0; i < parts; i++) {
        size_t points = i + 1 == parts ? n - at : n / parts;
        char msg[RL_MSG_MAX] = "";
        int rc = rl_mask_add_polygon(m, xy + 2 * at, points, msg);
        check_status(rc, msg);
        int plain = 1;
        for (size_t j = 0; j < 2 * points; j++) {
            plain &= fabs(xy[2 * at + j]) <= 4096;
        }
        if (rc == 0 && parts == 1 && plain) {
            uint32_t *want = NULL;
            long k = walk(xy + 2 * at, points, m->h, m->w, &want);
            if (k >= 0) {
                check((size_t)k == m->n);
                check(k == 0 || memcmp(want, m->pos, (size_t)k * 4) == 0);
            }
            free(want);
        }
        at += points;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < HEADER_BYTES) {
        return 0;
    }
    const uint8_t *hdr = data;
    data += HEADER_BYTES;
    size -= HEADER_BYTES;
    rl_mask m;
    char msg[RL_MSG_MAX] = "";
    int rc = rl_mask_init(&m, hdr[1] % 70, hdr[2] % 70, msg);
    check_status(rc, msg);
    if (rc == 0) {
        msg[0] = '\0';
        switch (hdr[0] % 3) {
        case 0:
            rc = rl_mask_add_string(&m, (const char *)data, size, msg);
            check_status(rc, msg);
            break;
        case 1: {
            int64_t counts[512];
            size_t n = size < 512 ? size : 512;
            for (size_t i = 0; i < n; i++) {
                counts[i] = data[i];
            }
            rc = rl_mask_add_counts(&m, counts, n, msg);
            check_status(rc, msg);
            break;
        }
        default:
            run_polygons(&m, hdr, data, size);
        }
        check_mask(&m);
        check_sampling(&m, hdr, data, size);
    }
    rl_mask_exit(&m);
    return 0;
}
