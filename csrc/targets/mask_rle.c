/*
 * targets/mask_rle.c - COCO's run-length encodings read into a mask's
 * toggles: the counts list (uncompressed) and the string (compressed).
 *
 * Both are runs of zeros and ones, zeros first, over the image in
 * column-major order; a run's end is a toggle. The string holds each count
 * in little-endian groups of 5 bits, one byte per group ('0' + group, plus
 * 32 while more groups follow), the last group's bit 4 being the sign; from
 * the third count on, what is stored is the difference with the count two
 * before. Anything else - a byte outside '0'..'o', a count cut off by the
 * end, a negative count, counts that miss or overrun the image - is an
 * error naming the byte or count, never a guess: a wrong mask would train
 * silently.
 */
#include "targets/mask.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

/* 2^40: no count of an image (below 2^32) is near it */
#define RL_MASK_COUNT_LIMIT ((int64_t)1 << 40)

/* The run boundaries so far, and where the runs have reached. */
typedef struct runs {
    uint32_t *pos;
    size_t n;
    uint64_t at, total;
} runs;

/* Adds count number i: 0, or -EINVAL past the image. */
static int runs_add(runs *r, int64_t count, size_t i, char *msg)
{
    if (count < 0 || (uint64_t)count > r->total - r->at) {
        snprintf(msg, RL_MSG_MAX,
                 "RLE count %zu is %" PRId64 " where %" PRIu64
                 " pixels are left of %" PRIu64 " (height * width)",
                 i, count, r->total - r->at, r->total);
        return -EINVAL;
    }
    r->at += (uint64_t)count;
    r->pos[r->n++] = (uint32_t)r->at; /* <= total < 2^32 */
    return 0;
}

/* All counts read: 0 and the toggles OR'd into m, or -EINVAL short of the
 * image. Frees r->pos. */
static int runs_finish(rl_mask *m, runs *r, int rc, char *msg)
{
    if (rc == 0 && r->at != r->total) {
        snprintf(msg, RL_MSG_MAX,
                 "RLE counts sum to %" PRIu64
                 " where height * width is %" PRIu64 " (%d x %d)",
                 r->at, r->total, m->h, m->w);
        rc = -EINVAL;
    }
    if (rc == 0) {
        rc = rl__mask_or(m, r->pos, r->n, msg);
    }
    free(r->pos);
    return rc;
}

int rl_mask_add_counts(rl_mask *m, const int64_t *counts, size_t n,
                       char msg[RL_MSG_MAX])
{
    runs r = {.total = (uint64_t)m->h * (uint64_t)m->w};
    r.pos = malloc(sizeof(*r.pos) * (n ? n : 1));
    if (r.pos == NULL) {
        snprintf(msg, RL_MSG_MAX, "out of memory for %zu RLE counts", n);
        return -ENOMEM;
    }
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        rc = runs_add(&r, counts[i], i, msg);
    }
    return runs_finish(m, &r, rc, msg);
}

/* Reads one stored value at s[*p], moving *p past it. 0 or -EINVAL. */
static int read_value(const char *s, size_t len, size_t *p, int64_t *out,
                      char *msg)
{
    size_t start = *p;
    uint64_t x = 0;
    for (int k = 0;; k++) {
        if (*p == len) {
            snprintf(msg, RL_MSG_MAX,
                     "compressed RLE ends inside the count that starts at "
                     "byte %zu (its last byte says more follow)",
                     start);
            return -EINVAL;
        }
        unsigned char b = (unsigned char)s[*p];
        if (b < '0' || b > 'o') {
            snprintf(msg, RL_MSG_MAX,
                     "compressed RLE has byte 0x%02x at offset %zu: every "
                     "byte must be one of '0'..'o' (0x30..0x6f)",
                     b, *p);
            return -EINVAL;
        }
        if (k == RL_MASK_MAX_DIGITS) {
            snprintf(msg, RL_MSG_MAX,
                     "compressed RLE count at byte %zu has more than %d "
                     "digits",
                     start, RL_MASK_MAX_DIGITS);
            return -EINVAL;
        }
        unsigned digit = b - '0';
        x |= (uint64_t)(digit & 0x1f) << (5 * k);
        (*p)++;
        if (!(digit & 0x20)) {
            if (digit & 0x10) { /* negative: extend the sign */
                x |= ~(uint64_t)0 << (5 * (k + 1));
            }
            break;
        }
    }
    *out = (int64_t)x;
    return 0;
}

int rl_mask_add_string(rl_mask *m, const char *s, size_t len,
                       char msg[RL_MSG_MAX])
{
    /* at most one count a byte */
    int64_t *counts = malloc(sizeof(*counts) * (len ? len : 1));
    if (counts == NULL) {
        snprintf(msg, RL_MSG_MAX, "out of memory for %zu RLE bytes", len);
        return -ENOMEM;
    }
    size_t n = 0, p = 0;
    int rc = 0;
    while (p < len && rc == 0) {
        int64_t x = 0;
        rc = read_value(s, len, &p, &x, msg);
        x += n > 2 ? counts[n - 2] : 0;
        /* far outside any image: stop before the sums could overflow */
        if (rc == 0 && (x > RL_MASK_COUNT_LIMIT || x < -RL_MASK_COUNT_LIMIT)) {
            snprintf(msg, RL_MSG_MAX,
                     "compressed RLE count %zu is %" PRId64
                     ", beyond any image",
                     n, x);
            rc = -EINVAL;
        }
        counts[n++] = x;
    }
    if (rc == 0) {
        rc = rl_mask_add_counts(m, counts, n, msg);
    }
    free(counts);
    return rc;
}
