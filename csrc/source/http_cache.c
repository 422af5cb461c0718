/*
 * source/http_cache.c - the HTTP source's local cache of fetched bytes,
 * for runs of many epochs over data that fits on a local disk.
 *
 * DESIGN: each object (a shard) gets a sparse file in the cache folder, of
 * which only the byte ranges fetched are written, at their offsets in the
 * object: a sample fetched once is read from that file in later epochs
 * (pread, page cache), and only the members actually read take space.
 * Whole objects (file lists) are not cached: their length is not in the
 * table.
 *
 * Blocks (opt.block_bytes): at creation the samples of each object are
 * sorted by offset and cut into blocks of neighbours (at most block_bytes
 * from the first member's start to the last one's end, no gap over
 * BLOCK_GAP). A member not yet cached whose block fits in the cache's free
 * room is fetched with its whole block in one range GET, written into the
 * object's file as it arrives; the batch's other members of that block
 * wait for it and are then read from the file. This turns an epoch over
 * data the cache can hold into a few large GETs instead of one per member
 * (object stores charge, throttle and spend CPU per request), at the price
 * of fetching members another rank or a later epoch will read. Once the
 * cache is full, members are fetched one at a time again. A block whose
 * GET fails (after its retries) falls back to its members, each with its
 * own attempts and its own error, for the rest of the run; what it wrote
 * is punched out of the file (or, where holes cannot be punched, stays
 * counted until the object is evicted).
 *
 * The cache holds at most opt.cache_bytes of members: storing more evicts
 * the objects used least recently, a whole file at a time, and forgets
 * their samples. All of it runs on the I/O thread (read_batch), so no lock
 * is needed; read_one (the skip policy's replacements, on workers) does not
 * use it. A failure to write (a full disk) only leaves the bytes uncached;
 * a failure to read sends the sample to the network again. The files are
 * removed when the source is destroyed; the folder is the caller's.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "source/http_xfer.h"

/* The largest gap between two members of one block. */
#define BLOCK_GAP ((uint64_t)1 << 20)

static bool cache_on(const http_source *s)
{
    return s->cfd != NULL;
}

int rl__http_place_cmp(const void *a, const void *b)
{
    const rl_http_place *x = a, *y = b;
    if (x->obj != y->obj) {
        return x->obj < y->obj ? -1 : 1;
    }
    if (x->off != y->off) {
        return x->off < y->off ? -1 : 1;
    }
    return x->key < y->key ? -1 : x->key > y->key;
}

/* Cuts the samples into blocks (see above). false when out of memory. */
static bool blocks_init(http_source *s)
{
    int64_t n = s->base.count;
    size_t cnt = (size_t)(n > 0 ? n : 1);
    rl_http_place *v = malloc(cnt * sizeof(*v));
    s->bof = malloc(cnt * sizeof(*s->bof));
    s->bids = malloc(cnt * sizeof(*s->bids));
    s->bat = malloc((cnt + 1) * sizeof(*s->bat));
    s->boff = malloc(cnt * sizeof(*s->boff));
    s->bend = malloc(cnt * sizeof(*s->bend));
    s->cbusy = calloc((size_t)(s->nobj > 0 ? s->nobj : 1), sizeof(*s->cbusy));
    if (!v || !s->bof || !s->bids || !s->bat || !s->boff || !s->bend ||
        !s->cbusy) {
        free(v);
        return false;
    }
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        s->bof[i] = -1;
        if (s->lengths[i] > 0) {
            v[m++] = (rl_http_place){s->obj[i], i, s->offsets[i]};
        }
    }
    qsort(v, (size_t)m, sizeof(*v), rl__http_place_cmp);
    int64_t nb = 0, k = 0;
    for (int64_t a = 0; a < m;) {
        /* The block starting at v[a]: its neighbours while they fit. */
        uint64_t first = v[a].off;
        uint64_t end = first + (uint64_t)s->lengths[v[a].key];
        int64_t z = a + 1;
        while (z < m && v[z].obj == v[a].obj && v[z].off <= end + BLOCK_GAP) {
            uint64_t e = v[z].off + (uint64_t)s->lengths[v[z].key];
            e = e > end ? e : end;
            if (e - first > s->opt.block_bytes) {
                break;
            }
            end = e;
            z++;
        }
        if (z - a > 1) { /* one member alone gains nothing */
            s->boff[nb] = first;
            s->bend[nb] = end;
            s->bat[nb] = k;
            for (int64_t t = a; t < z; t++) {
                s->bof[v[t].key] = nb;
                s->bids[k++] = v[t].key;
            }
            nb++;
        }
        a = z;
    }
    s->bat[nb] = k;
    s->nblk = nb;
    s->bstate = calloc((size_t)(nb > 0 ? nb : 1), 1);
    free(v);
    return s->bstate != NULL;
}

static void blocks_free(http_source *s)
{
    free(s->bof);
    free(s->bids);
    free(s->bat);
    free(s->boff);
    free(s->bend);
    free(s->bstate);
    free(s->cbusy);
    s->bof = s->bids = s->bat = NULL;
    s->boff = s->bend = NULL;
    s->bstate = NULL;
    s->cbusy = NULL;
    s->nblk = 0;
}

static void cache_path(const http_source *s, int64_t j, char *out, size_t n)
{
    snprintf(out, n, "%s/%lld.part", s->opt.cache_dir, (long long)j);
}

bool rl__http_cache_init(http_source *s)
{
    if (s->opt.cache_dir[0] == '\0' || s->opt.cache_bytes == 0) {
        return true;
    }
    size_t nobj = (size_t)(s->nobj > 0 ? s->nobj : 1);
    size_t n = (size_t)(s->base.count > 0 ? s->base.count : 1);
    s->cfd = malloc(nobj * sizeof(*s->cfd));
    s->cbytes = calloc(nobj, sizeof(*s->cbytes));
    s->cused = calloc(nobj, sizeof(*s->cused));
    s->cached = calloc(n, 1);
    if (!s->cfd || !s->cbytes || !s->cused || !s->cached) {
        rl__http_cache_free(s);
        return false;
    }
    for (size_t j = 0; j < nobj; j++) {
        s->cfd[j] = -1;
    }
    if (s->opt.block_bytes > 0 && !blocks_init(s)) {
        rl__http_cache_free(s);
        return false;
    }
    return true;
}

/* Closes and removes object j's file. */
static void cache_remove(http_source *s, int64_t j)
{
    char path[1200];
    if (s->cfd[j] >= 0) {
        close(s->cfd[j]);
        s->cfd[j] = -1;
        cache_path(s, j, path, sizeof(path));
        unlink(path);
    }
}

/* Removes object j's file; its samples are no longer cached. */
static void cache_drop(http_source *s, int64_t j)
{
    cache_remove(s, j);
    for (int64_t i = 0; i < s->base.count; i++) {
        if (s->obj[i] == j) {
            s->cached[i] = 0;
        }
    }
    s->ctotal -= s->cbytes[j];
    s->cbytes[j] = 0;
}

void rl__http_cache_free(http_source *s)
{
    if (cache_on(s)) {
        for (int64_t j = 0; j < s->nobj; j++) {
            cache_remove(s, j);
        }
    }
    free(s->cfd);
    free(s->cbytes);
    free(s->cused);
    free(s->cached);
    blocks_free(s);
    s->cfd = NULL;
    s->cbytes = s->cused = NULL;
    s->cached = NULL;
}

bool rl__http_cache_read(http_source *s, xfer *x)
{
    int64_t id = x->f->id;
    if (!cache_on(s) || x->want <= 0 || !s->cached[id]) {
        return false;
    }
    int64_t j = s->obj[id];
    uint8_t *buf = malloc((size_t)x->want);
    size_t got = 0;
    while (buf != NULL && got < (size_t)x->want) {
        ssize_t r = pread(s->cfd[j], buf + got, (size_t)x->want - got,
                          (off_t)(x->off + got));
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0) {
            break;
        }
        got += (size_t)r;
    }
    if (got != (size_t)x->want) {
        free(buf);
        s->cached[id] = 0; /* fetched again; its bytes stay counted */
        return false;
    }
    x->buf = buf;
    x->len = got;
    s->cused[j] = ++s->ctick;
    rl__http_finish(x, V_OK);
    return true;
}

/* Evicts the object used least recently that holds bytes and has no
 * block being fetched into its file. false: none. */
static bool evict_one(http_source *s)
{
    int64_t lru = -1;
    for (int64_t j = 0; j < s->nobj; j++) {
        if (s->cbytes[j] > 0 && (s->cbusy == NULL || s->cbusy[j] == 0) &&
            (lru < 0 || s->cused[j] < s->cused[lru])) {
            lru = j;
        }
    }
    if (lru < 0) {
        return false;
    }
    cache_drop(s, lru);
    return true;
}

/* Opens object j's cache file if it is not open. false on failure. */
static bool cache_open(http_source *s, int64_t j)
{
    if (s->cfd[j] < 0) {
        char path[1200];
        cache_path(s, j, path, sizeof(path));
        s->cfd[j] = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    }
    return s->cfd[j] >= 0;
}

void rl__http_cache_store(http_source *s, const xfer *x)
{
    int64_t id = x->f->id;
    if (!cache_on(s) || x->want <= 0 || s->cached[id] ||
        (uint64_t)x->len > s->opt.cache_bytes) {
        return;
    }
    while (s->ctotal + x->len > s->opt.cache_bytes) {
        if (!evict_one(s)) {
            return;
        }
    }
    int64_t j = s->obj[id];
    if (!cache_open(s, j)) {
        return;
    }
    if (!rl__http_write_at(s->cfd[j], (const char *)x->buf, x->len, x->off)) {
        return; /* a full disk: the bytes stay uncached */
    }
    s->cached[id] = 1;
    s->cbytes[j] += x->len;
    s->ctotal += x->len;
    s->cused[j] = ++s->ctick;
}

/* ---- blocks ---- */

int64_t rl__http_block_of(http_source *s, const xfer *x)
{
    if (!cache_on(s) || s->bof == NULL || x->want <= 0) {
        return -1;
    }
    int64_t b = s->bof[x->f->id];
    if (b < 0 || s->bstate[b] == B_OFF) {
        return -1;
    }
    if (s->bstate[b] == B_IDLE &&
        s->ctotal + (s->bend[b] - s->boff[b]) > s->opt.cache_bytes) {
        return -1; /* no room: this member alone */
    }
    return b;
}

bool rl__http_block_begin(http_source *s, xfer *x, int64_t b)
{
    int64_t j = s->obj[x->f->id];
    if (!cache_open(s, j)) {
        return false;
    }
    uint64_t span = s->bend[b] - s->boff[b];
    x->blk = b;
    x->sink_fd = s->cfd[j];
    x->off = s->boff[b];
    x->want = (int64_t)span;
    s->bstate[b] = B_BUSY;
    s->cbusy[j]++;
    s->cbytes[j] += span; /* its room, taken now */
    s->ctotal += span;
    s->cused[j] = ++s->ctick;
    return true;
}

/* Frees the `wrote` bytes a failed block wrote into object j's file from
 * its start, all but those of its members cached before it (the room of a
 * block is counted only while it is fetched; a member's, once it is
 * cached). false when the file system cannot punch holes: the bytes stay
 * and must stay counted. */
static bool block_unwrite(http_source *s, int64_t b, int64_t j, size_t wrote)
{
    uint64_t at = s->boff[b], end = s->boff[b] + wrote;
    for (int64_t t = s->bat[b]; t <= s->bat[b + 1] && at < end; t++) {
        uint64_t to = end, next = to;
        if (t < s->bat[b + 1]) {
            int64_t id = s->bids[t];
            if (!s->cached[id]) {
                continue;
            }
            to = s->offsets[id] < end ? s->offsets[id] : end;
            next = s->offsets[id] + (uint64_t)s->lengths[id];
        }
        if (to > at &&
            fallocate(s->cfd[j], FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                      (off_t)at, (off_t)(to - at)) != 0) {
            return false;
        }
        at = next > at ? next : at;
    }
    return true;
}

void rl__http_block_end(http_source *s, xfer *x)
{
    int64_t b = x->blk;
    int64_t j = s->obj[x->f->id];
    uint64_t span = s->bend[b] - s->boff[b];
    s->cbusy[j]--;
    if (x->f->status == 0) {
        /* Its samples are in the file now; those cached before were
         * counted twice. */
        for (int64_t t = s->bat[b]; t < s->bat[b + 1]; t++) {
            int64_t id = s->bids[t];
            if (s->cached[id]) {
                s->cbytes[j] -= (uint64_t)s->lengths[id];
                s->ctotal -= (uint64_t)s->lengths[id];
            }
            s->cached[id] = 1;
        }
        s->bstate[b] = B_IDLE;
    } else {
        if (block_unwrite(s, b, j, x->wrote)) {
            s->cbytes[j] -= span;
            s->ctotal -= span;
        }
        s->bstate[b] = B_OFF;
    }
    x->f->rd.buf = NULL;
    rl__http_xfer_init(s, x, x->f);
}
