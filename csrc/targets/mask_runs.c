/*
 * targets/mask_runs.c - a mask's toggle positions: made, freed, and one
 * part OR'd into them.
 *
 * A part arrives as positions in any order (a polygon's crossings come
 * edge by edge) with repeats: two toggles at one index flip it twice, so
 * repeats cancel in pairs. It is sorted, its pairs dropped, and merged
 * with the toggles so far in one pass that tracks both values and keeps a
 * position where their OR changes: the union of the two rasters, as
 * pycocotools' merge makes it, in time linear in the toggles and never at
 * the image's size.
 */
#include "targets/mask.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rl_mask_init(rl_mask *m, int h, int w, char msg[RL_MSG_MAX])
{
    memset(m, 0, sizeof(*m));
    if (h < 1 || w < 1 || h > RL_MASK_MAX_SIDE || w > RL_MASK_MAX_SIDE) {
        snprintf(msg, RL_MSG_MAX,
                 "mask size %d x %d (height x width): each side must be "
                 "1..%d",
                 h, w, RL_MASK_MAX_SIDE);
        return -EINVAL;
    }
    m->h = h;
    m->w = w;
    return 0;
}

void rl_mask_exit(rl_mask *m)
{
    free(m->pos);
    m->pos = NULL;
    m->n = 0;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Sorts pos (skipped when it already is, as an RLE's are) and keeps one
 * of each position that occurs an odd number of times, below end. The
 * count kept. */
static size_t normalize(uint32_t *pos, size_t n, uint32_t end)
{
    size_t i = 1;
    while (i < n && pos[i - 1] <= pos[i]) {
        i++;
    }
    if (i < n) {
        qsort(pos, n, sizeof(*pos), cmp_u32);
    }
    size_t k = 0;
    for (i = 0; i < n && pos[i] < end;) {
        size_t j = i + 1;
        while (j < n && pos[j] == pos[i]) {
            j++;
        }
        if ((j - i) & 1) {
            pos[k++] = pos[i];
        }
        i = j;
    }
    return k;
}

int rl__mask_or(rl_mask *m, uint32_t *pos, size_t n, char msg[RL_MSG_MAX])
{
    n = normalize(pos, n, (uint32_t)m->h * (uint32_t)m->w);
    if (n == 0) {
        return 0;
    }
    uint32_t *out = malloc(sizeof(*out) * (m->n + n));
    if (out == NULL) {
        snprintf(msg, RL_MSG_MAX, "out of memory for %zu mask runs", m->n + n);
        return -ENOMEM;
    }
    const uint32_t *a = m->pos;
    size_t i = 0, j = 0, k = 0;
    int va = 0, vb = 0, was = 0;
    while (i < m->n || j < n) {
        uint32_t p = j == n || (i < m->n && a[i] < pos[j]) ? a[i] : pos[j];
        if (i < m->n && a[i] == p) {
            va ^= 1;
            i++;
        }
        if (j < n && pos[j] == p) {
            vb ^= 1;
            j++;
        }
        if ((va | vb) != was) {
            out[k++] = p;
            was = va | vb;
        }
    }
    free(m->pos);
    m->pos = out;
    m->n = k;
    return 0;
}
