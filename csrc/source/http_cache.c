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
 * What each file holds is kept as its sorted list of byte ranges, so
 * that nothing is kept per sample: a member is cached when a range holds
 * all of its bytes.
 *
 * Blocks (opt.block_bytes): each object is cut into aligned windows of
 * block_bytes, and a block is the members that start in one window, as
 * many as a GET of block_bytes holds around the member asked for, found
 * by stepping to the samples before and after it in its object (ids
 * i - 1, i + 1, ...: a tar shard's members are in offset order in its
 * record file; a step that finds a member out of order, BLOCK_GAP or more
 * away, cached, being fetched or past the cache's free room ends the
 * block there). A member not yet cached is fetched with its block (of two
 * members at least) in one range GET, written into the object's file as
 * it arrives; the batch's other members of that block wait for it and
 * are then read from the file. This turns an epoch over
 * data the cache can hold into a few large GETs instead of one per member
 * (object stores charge, throttle and spend CPU per request), at the price
 * of fetching members another rank or a later epoch will read. Blocks are
 * planned when needed, from the neighbours' ranges (looked up in the
 * record files with records), and only the blocks being fetched are kept.
 * Once the cache is full, members are fetched one at a time again. A
 * block whose GET fails (after its retries) turns blocks off for its
 * object: its members are fetched one at a time, each with its own
 * attempts and its own error, for the rest of the run; what it wrote is
 * punched out of the file (or, where holes cannot be punched, stays
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

/* ---- the byte ranges a cache file holds ---- */

/* The first range of sp that ends after `at` (sp->n: none). */
static size_t spans_after(const rl_http_spans *sp, uint64_t at)
{
    size_t lo = 0, hi = sp->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (sp->v[2 * mid + 1] <= at) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

/* Whether one range of sp holds all of [a, b) (a < b). */
static bool spans_hold(const rl_http_spans *sp, uint64_t a, uint64_t b)
{
    size_t t = spans_after(sp, a);
    return t < sp->n && sp->v[2 * t] <= a && b <= sp->v[2 * t + 1];
}

/* Adds [a, b) to sp, merged with the ranges it overlaps or touches. The
 * bytes it adds that sp did not hold, or -1 when out of memory (sp
 * unchanged). */
static int64_t spans_add(rl_http_spans *sp, uint64_t a, uint64_t b)
{
    /* [t, z): the ranges that overlap or touch [a, b). */
    size_t t = spans_after(sp, a > 0 ? a - 1 : 0), z = t;
    uint64_t held = 0, lo = a, hi = b;
    while (z < sp->n && sp->v[2 * z] <= b) {
        uint64_t x = sp->v[2 * z], y = sp->v[2 * z + 1];
        uint64_t ox = x > a ? x : a, oy = y < b ? y : b;
        held += oy > ox ? oy - ox : 0;
        lo = x < lo ? x : lo;
        hi = y > hi ? y : hi;
        z++;
    }
    if (z == t && sp->n == sp->cap) {
        size_t cap = sp->cap ? 2 * sp->cap : 4;
        uint64_t *v = realloc(sp->v, 2 * cap * sizeof(*v));
        if (v == NULL) {
            return -1;
        }
        sp->v = v;
        sp->cap = cap;
    }
    /* One range replaces the z - t it merges (or is inserted at t). */
    size_t keep = sp->n - z;
    size_t at = t + 1;
    memmove(sp->v + 2 * at, sp->v + 2 * z, 2 * keep * sizeof(*sp->v));
    sp->v[2 * t] = lo;
    sp->v[2 * t + 1] = hi;
    sp->n = at + keep;
    return (int64_t)((b - a) - held);
}

static void spans_clear(rl_http_spans *sp)
{
    free(sp->v);
    sp->v = NULL;
    sp->n = sp->cap = 0;
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
    s->cfd = malloc(nobj * sizeof(*s->cfd));
    /* -1 before anything else can fail: the cleanup below closes the
     * descriptors it finds. */
    for (size_t j = 0; s->cfd != NULL && j < nobj; j++) {
        s->cfd[j] = -1;
    }
    s->cbytes = calloc(nobj, sizeof(*s->cbytes));
    s->cused = calloc(nobj, sizeof(*s->cused));
    s->cspans = calloc(nobj, sizeof(*s->cspans));
    s->cbusy = calloc(nobj, sizeof(*s->cbusy));
    s->boffobj = calloc(nobj, 1);
    if (!s->cfd || !s->cbytes || !s->cused || !s->cspans || !s->cbusy ||
        !s->boffobj) {
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
    spans_clear(&s->cspans[j]);
    s->ctotal -= s->cbytes[j];
    s->cbytes[j] = 0;
}

void rl__http_cache_free(http_source *s)
{
    for (int64_t j = 0; cache_on(s) && j < s->nobj; j++) {
        cache_remove(s, j);
        if (s->cspans != NULL) {
            spans_clear(&s->cspans[j]);
        }
    }
    free(s->cfd);
    free(s->cbytes);
    free(s->cused);
    free(s->cspans);
    free(s->cbusy);
    free(s->boffobj);
    free(s->blks);
    s->cfd = s->cbusy = NULL;
    s->cbytes = s->cused = NULL;
    s->cspans = NULL;
    s->boffobj = NULL;
    s->blks = NULL;
    s->nblk = 0;
}

bool rl__http_cache_read(http_source *s, xfer *x)
{
    int64_t j = x->obj;
    if (!cache_on(s) || x->want <= 0 ||
        !spans_hold(&s->cspans[j], x->off, x->off + (uint64_t)x->want)) {
        return false;
    }
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
        if (buf != NULL && s->cbusy[j] == 0) {
            cache_drop(s, j); /* the file failed us: fetched again */
        }
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
        if (s->cbytes[j] > 0 && s->cbusy[j] == 0 &&
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
    int64_t j = x->obj;
    if (!cache_on(s) || x->want <= 0 || x->len == 0 ||
        (uint64_t)x->len > s->opt.cache_bytes ||
        spans_hold(&s->cspans[j], x->off, x->off + x->len)) {
        return;
    }
    while (s->ctotal + x->len > s->opt.cache_bytes) {
        if (!evict_one(s)) {
            return;
        }
    }
    if (!cache_open(s, j)) {
        return;
    }
    if (!rl__http_write_at(s->cfd[j], (const char *)x->buf, x->len, x->off)) {
        return; /* a full disk: the bytes stay uncached */
    }
    int64_t added = spans_add(&s->cspans[j], x->off, x->off + x->len);
    if (added > 0) {
        s->cbytes[j] += (uint64_t)added;
        s->ctotal += (uint64_t)added;
    }
    s->cused[j] = ++s->ctick;
}

/* ---- blocks ---- */

bool rl__http_blocks_on(const http_source *s)
{
    return cache_on(s) && s->opt.block_bytes > 0;
}

/* A block being fetched into object j's file that overlaps [a, b), or
 * -1. */
static int64_t block_busy(const http_source *s, int64_t j, uint64_t a,
                          uint64_t b)
{
    for (int64_t t = 0; t < s->nblk; t++) {
        const rl_http_block *k = &s->blks[t];
        if (k->state == B_BUSY && k->obj == j && k->off < b && a < k->end) {
            return t;
        }
    }
    return -1;
}

/* A free block slot (more slots when all are taken), or -1 when out of
 * memory. Slots are as many as blocks were ever fetched at once. */
static int64_t block_slot(http_source *s)
{
    for (int64_t t = 0; t < s->nblk; t++) {
        if (s->blks[t].state == B_IDLE) {
            return t;
        }
    }
    int64_t old = s->nblk, n = old > 0 ? 2 * old : 8;
    rl_http_block *v = realloc(s->blks, (size_t)n * sizeof(*v));
    if (v == NULL) {
        return -1;
    }
    for (int64_t t = old; t < n; t++) {
        v[t].state = B_IDLE;
    }
    s->blks = v;
    s->nblk = n;
    return old;
}

/* Whether sample id (another than x's) may join x's block, whose window
 * is [w, w + block_bytes), now spanning [*first, *end): the next sample
 * (after) starting at or after *end, the previous one ending at or
 * before *first, within BLOCK_GAP, starting inside the window, the block
 * then spanning at most block_bytes and fitting in the cache's free room,
 * neither cached nor being fetched
 * (so that no byte is fetched twice). If so, the block grows to hold it. */
static bool block_joins(http_source *s, int64_t j, int64_t id, bool after,
                        uint64_t w, uint64_t *first, uint64_t *end)
{
    uint64_t off;
    int64_t want;
    char why[RL_MSG_MAX];
    if (id < 0 || rl__http_range_of(s, id, &off, &want, why) != 0 ||
        want <= 0 || off < w || off - w >= s->opt.block_bytes) {
        return false; /* its own fetch says what went wrong, if anything */
    }
    uint64_t e = off + (uint64_t)want;
    if (after ? off < *end || off - *end > BLOCK_GAP ||
                    e - *first > s->opt.block_bytes
              : e > *first || *first - e > BLOCK_GAP ||
                    *end - off > s->opt.block_bytes) {
        return false;
    }
    if (s->ctotal + ((after ? e : *end) - (after ? *first : off)) >
        s->opt.cache_bytes) {
        return false; /* no room for it: a full cache steps no further */
    }
    if (spans_hold(&s->cspans[j], off, e) || block_busy(s, j, off, e) >= 0) {
        return false;
    }
    *first = after ? *first : off;
    *end = after ? e : *end;
    return true;
}

int64_t rl__http_block_of(http_source *s, const xfer *x)
{
    int64_t j = x->obj;
    if (!rl__http_blocks_on(s) || x->want <= 0 || s->boffobj[j]) {
        return -1;
    }
    uint64_t first = x->off, end = x->off + (uint64_t)x->want;
    int64_t b = block_busy(s, j, first, end);
    if (b >= 0) {
        return b;
    }
    /* Blocks are the members that start in one aligned window of
     * block_bytes of the object, as many as one GET of block_bytes holds:
     * much the same blocks whichever member of one is asked first. */
    uint64_t w = first - first % s->opt.block_bytes;
    int64_t members = 1, id = x->f->id;
    while (block_joins(s, j, id = rl__http_prev_of(s, id), false, w, &first,
                       &end)) {
        members++;
    }
    id = x->f->id;
    while (block_joins(s, j, id = rl__http_next_of(s, id), true, w, &first,
                       &end)) {
        members++;
    }
    if (members < 2 || s->ctotal + (end - first) > s->opt.cache_bytes ||
        (b = block_slot(s)) < 0) {
        return -1; /* one member alone gains nothing; no room for two */
    }
    s->blks[b] = (rl_http_block){j, first, end, B_IDLE};
    return b;
}

bool rl__http_block_begin(http_source *s, xfer *x, int64_t b)
{
    int64_t j = x->obj;
    if (!cache_open(s, j)) {
        return false; /* the slot stays free */
    }
    rl_http_block *k = &s->blks[b];
    uint64_t span = k->end - k->off;
    x->moff = x->off;
    x->mwant = x->want;
    x->blk = b;
    x->sink_fd = s->cfd[j];
    x->off = k->off;
    x->want = (int64_t)span;
    k->state = B_BUSY;
    s->cbusy[j]++;
    s->cbytes[j] += span; /* its room, taken now */
    s->ctotal += span;
    s->cused[j] = ++s->ctick;
    return true;
}

/* Frees the `wrote` bytes a failed block wrote into object j's file from
 * its start, all but the ranges cached before it (the room of a block is
 * counted only while it is fetched; a member's, once it is cached). false
 * when the file system cannot punch holes: the bytes stay and must stay
 * counted. */
static bool block_unwrite(http_source *s, const rl_http_block *k, size_t wrote)
{
    const rl_http_spans *sp = &s->cspans[k->obj];
    uint64_t at = k->off, end = k->off + wrote;
    for (size_t t = spans_after(sp, at); at < end; t++) {
        /* [at, to): a gap before range t (or the rest) */
        uint64_t to = t < sp->n && sp->v[2 * t] < end ? sp->v[2 * t] : end;
        if (to > at && fallocate(s->cfd[k->obj],
                                 FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                 (off_t)at, (off_t)(to - at)) != 0) {
            return false;
        }
        if (t >= sp->n) {
            break;
        }
        at = sp->v[2 * t + 1] > at ? sp->v[2 * t + 1] : at;
    }
    return true;
}

void rl__http_block_end(http_source *s, xfer *x)
{
    rl_http_block *k = &s->blks[x->blk];
    int64_t j = k->obj;
    uint64_t span = k->end - k->off;
    s->cbusy[j]--;
    if (x->f->status == 0) {
        /* Its bytes are in the file now: its room becomes what it added
         * (the ranges cached before it were counted already). Out of
         * memory for the range: the bytes stay, uncounted and unused. */
        int64_t added = spans_add(&s->cspans[j], k->off, k->end);
        uint64_t now = added > 0 ? (uint64_t)added : 0;
        s->cbytes[j] = s->cbytes[j] - span + now;
        s->ctotal = s->ctotal - span + now;
    } else {
        if (block_unwrite(s, k, x->wrote)) {
            s->cbytes[j] -= span;
            s->ctotal -= span;
        }
        if (x->f->status != RL_ECLOSED) {
            s->boffobj[j] = 1; /* failed, not cancelled */
        }
    }
    k->state = B_IDLE;
    uint64_t off = x->moff;
    int64_t want = x->mwant;
    x->f->rd.buf = NULL;
    rl__http_xfer_setup(s, x, x->f, j, off, want);
}
