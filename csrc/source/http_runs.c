/*
 * source/http_runs.c - runs of the HTTP source (source/http.c): a batch's
 * samples that follow each other in the table (ids i, i + 1, ...) and in
 * one object are fetched in one range GET, and each member gets its bytes
 * copied out of the run's.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "source/http_xfer.h"

/* Run r of the batch ended: on success each member waiting for it gets
 * its bytes, copied out of the run's; otherwise each is fetched alone. */
void rl__http_run_end(http_source *s, xfer *xs, int n, int r, int *waiting,
                      int *holding, int *left, rl_fetch_done_fn done, void *arg)
{
    xfer *rx = &xs[n + r];
    bool ok = rx->f->status == 0;
    for (int i = 0; i < n; i++) {
        xfer *x = &xs[i];
        if (x->state != X_HOLD || x->run != r) {
            continue;
        }
        (*holding)--;
        x->run = -1;
        x->buf = ok ? malloc((size_t)x->want) : NULL;
        if (x->buf == NULL) {
            x->state = X_WAIT; /* alone, at once */
            x->due_ns = 0;
            (*waiting)++;
            continue;
        }
        memcpy(x->buf, rx->buf + (x->off - rx->off), (size_t)x->want);
        x->len = (size_t)x->want;
        rl__http_finish(x, V_OK);
        rl__http_cache_store(s, x);
        (*left)--;
        done(x->f, arg);
    }
    if (ok) {
        free(rx->buf);
    }
    rx->buf = NULL;
}

/* Runs: a batch's samples that follow each other in the table (ids i,
 * i + 1, ...) and in one object (gaps of at most RUN_GAP bytes between
 * them: a tar shard's headers and members that are not samples) are
 * fetched in one range GET of at most RUN_BYTES. No byte of a sample
 * outside the batch is fetched. Sequential reading and orders that keep
 * neighbours together (shuffle="runs") fetch a batch in a few GETs. */
#define RUN_GAP ((uint64_t)1 << 20)
#define RUN_BYTES ((uint64_t)16 << 20)

/* Plans the batch's runs: each gets xs[n + r], the GET of its span for a
 * fetch of its own (rf[r]), and its members wait for it (X_HOLD, run r).
 * Returns how many runs there are; members not in a run stay X_NEW. */
int rl__http_runs_plan(http_source *s, xfer *xs, int n, rl_fetch *rf)
{
    rl_http_place *v = malloc((size_t)(n > 0 ? n : 1) * sizeof(*v));
    if (v == NULL) {
        return 0; /* every member alone */
    }
    int m = 0, nr = 0;
    for (int i = 0; i < n; i++) {
        if (xs[i].state == X_NEW && xs[i].want > 0) {
            v[m++] = (rl_http_place){xs[i].obj, i, xs[i].off};
        }
    }
    qsort(v, (size_t)m, sizeof(*v), rl__http_place_cmp);
    for (int a = 0; a < m;) {
        uint64_t first = v[a].off;
        uint64_t end = first + (uint64_t)xs[v[a].key].want;
        int z = a + 1;
        while (z < m && v[z].obj == v[a].obj && v[z].off <= end + RUN_GAP) {
            int64_t prev = xs[v[z - 1].key].f->id, id = xs[v[z].key].f->id;
            if (id != prev && id != prev + 1) {
                break; /* another sample lies between them */
            }
            uint64_t e = v[z].off + (uint64_t)xs[v[z].key].want;
            e = e > end ? e : end;
            if (e - first > RUN_BYTES) {
                break;
            }
            end = e;
            z++;
        }
        if (z - a > 1) {
            xfer *rx = &xs[n + nr];
            rf[nr].id = xs[v[a].key].f->id; /* for where() */
            rl__http_xfer_setup(s, rx, &rf[nr], v[a].obj, first,
                                (int64_t)(end - first));
            for (int t = a; t < z; t++) {
                xs[v[t].key].state = X_HOLD;
                xs[v[t].key].run = nr;
            }
            nr++;
        }
        a = z;
    }
    free(v);
    return nr;
}
