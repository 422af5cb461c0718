/*
 * source/http_cache.c - the HTTP source's local cache of fetched bytes,
 * for runs of many epochs over data that fits on a local disk.
 *
 * DESIGN: each object (a shard) gets a sparse file in the cache folder, of
 * which only the byte ranges fetched are written, at their offsets in the
 * object: a sample fetched once is read from that file in later epochs
 * (pread, page cache), and only the members actually read take space.
 * Nothing is fetched for the cache's sake. Whole objects (file lists) are
 * not cached: their length is not in the table.
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

static bool cache_on(const http_source *s)
{
    return s->cfd != NULL;
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
    atomic_fetch_add(&s->chits, 1);
    rl__http_finish(x, V_OK);
    return true;
}

/* Evicts the object used least recently that holds bytes. false: none. */
static bool evict_one(http_source *s)
{
    int64_t lru = -1;
    for (int64_t j = 0; j < s->nobj; j++) {
        if (s->cbytes[j] > 0 && (lru < 0 || s->cused[j] < s->cused[lru])) {
            lru = j;
        }
    }
    if (lru < 0) {
        return false;
    }
    cache_drop(s, lru);
    return true;
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
    if (s->cfd[j] < 0) {
        char path[1200];
        cache_path(s, j, path, sizeof(path));
        s->cfd[j] = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (s->cfd[j] < 0) {
            return;
        }
    }
    size_t put = 0;
    while (put < x->len) {
        ssize_t w = pwrite(s->cfd[j], x->buf + put, x->len - put,
                           (off_t)(x->off + put));
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            return; /* a full disk: the bytes stay uncached */
        }
        put += (size_t)w;
    }
    s->cached[id] = 1;
    s->cbytes[j] += x->len;
    s->ctotal += x->len;
    s->cused[j] = ++s->ctick;
}
