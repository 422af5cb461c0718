/*
 * source/http.c - samples that are objects, or byte ranges of objects, on
 * HTTP(S) servers (tar shards in object storage: S3 with requests
 * signed by libcurl or presigned URLs, GCS, MinIO, a plain web server),
 * read with libcurl.
 *
 * DESIGN: the pipeline's I/O thread reads a batch through one libcurl
 * multi handle: every sample is a range GET ("bytes=a-b", the member's
 * range from the shard index) or a whole-object GET, up to max_inflight
 * of them at once, over connections kept open from batch to batch (HTTP/2
 * multiplexes them where the server offers it). Bytes are written by the
 * write callback straight into the fetch's buffer, sized from the index,
 * and each fetch is handed to the decode stage as soon as it is checked,
 * while the rest of the batch is still on the wire.
 *
 * A response is checked before it is believed: a range must come back as
 * 206 with the Content-Range asked for and exactly that many bytes; a body
 * cut short (the connection closed before Content-Length) fails. Failures
 * a server or network can recover from (5xx, 429 SlowDown, resets, refused
 * connections, timeouts, truncated or wrong bodies) are retried after a
 * backoff with full jitter (a random delay up to base * 2^attempt, capped;
 * Retry-After is honoured within the cap), up to opt.retries more times;
 * the rest (404, 403, 416, certificate failures) fail at once. "Timeout"
 * means no byte for timeout_s seconds, not a deadline on the whole body.
 *
 * The table is either the per-sample arrays given (object, offset,
 * length; none for one whole object a sample, a remote file list) or, for
 * tar shards with record files, the shards' first samples (borrowed) and
 * the record files: a sample's object is found by binary search and its
 * range looked up when its fetch is prepared, and the runs and the
 * cache's blocks step from a sample to its neighbours (ids i - 1, i + 1
 * in its shard), so that nothing is kept per sample.
 *
 * The objects' names are a borrowed blob and their fetch URLs are made
 * from them when a request is prepared (source/http_urls.c), or taken
 * from a blob of presigned URLs, which expire and can be replaced while
 * the pipeline runs (rl_http_source_set_urls, under mu), and so can the keys
 * that S3 GETs from plain URLs are signed with per request
 * (rl_http_source_set_keys, source/http_sign.c); messages name the
 * object by its display name (s3://bucket/key), never by a URL that may
 * carry a signature, nor by a key. cancel() bumps a generation and wakes the I/O
 * thread's wait: a read_batch in progress fails what it has not read with
 * RL_ECLOSED and returns within one wait.
 *
 * read_one (a replacement sample of the skip policy, on a worker) reads
 * with an easy handle and a multi handle of its own, with the same checks
 * and retries; cancel() also wakes each read_one's wait, so a transfer or
 * a backoff in progress ends with RL_ECLOSED at once. One
 * transfer's code (options, callbacks, verdicts, backoff) and the
 * table's lookups (a sample's object, range and neighbours) are in
 * source/http_xfer.c, the optional local cache of fetched byte ranges in
 * source/http_cache.c (with it, a member not yet cached is fetched with
 * its neighbours in one GET of a block while the cache has room; the
 * batch's other members of that block wait for it), the runs (a batch's
 * neighbouring samples in one GET) in source/http_runs.c, the wait for
 * the multi handle (libcurl's socket interface over epoll) in
 * source/http_wait.c, the signing of S3 GETs in source/http_sign.c;
 * libcurl is known by these files only.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "source/http_xfer.h"
#include "source/shard_records.h"

/* ---- the I/O thread: a batch through the multi handle ---- */

static CURL *easy_take(http_source *s)
{
    return s->nidle > 0 ? s->idle[--s->nidle] : rl__http_easy_new(s);
}

/* An idle handle keeps no key: its signing options go before it waits
 * in the pool (http_sign.c says what is wiped and what is libcurl's). */
static void easy_give(http_source *s, CURL *e)
{
    curl_multi_remove_handle(s->multi, e);
    rl__http_unsign(e);
    if (s->nidle < (int)(sizeof(s->idle) / sizeof(s->idle[0]))) {
        s->idle[s->nidle++] = e;
    } else {
        curl_easy_cleanup(e);
    }
}

/* Starts x's next attempt. Returns false when it could not start (x has
 * then ended with -ENOMEM). */
static bool start(http_source *s, xfer *x)
{
    CURL *e = easy_take(s);
    if (e == NULL || !rl__http_attempt_prepare(x, e) ||
        curl_multi_add_handle(s->multi, e) != CURLM_OK) {
        if (e != NULL) {
            curl_easy_cleanup(e);
        }
        if (x->blk >= 0) {
            /* Its block ends here, or the members held for it would wait
             * for it for ever: they are fetched alone. */
            x->f->status = -ENOMEM;
            rl__http_block_end(s, x);
        }
        x->f->status = -ENOMEM;
        snprintf(x->f->msg, RL_MSG_MAX, "out of memory");
        rl__http_finish(x, V_FAIL);
        return false;
    }
    rl__http_count_attempt(x);
    x->state = X_RUN;
    return true;
}

static void http_read_batch(rl_source *src, rl_fetch **fs, int n,
                            rl_fetch_done_fn done, void *arg)
{
    http_source *s = (http_source *)src;
    unsigned gen = atomic_load(&s->gen);
    size_t cnt = (size_t)(n > 0 ? n : 1);
    /* xs[0, n): the members; xs[n, n + nr): the GETs of the runs. */
    xfer *xs = calloc(2 * cnt, sizeof(*xs));
    rl_fetch *rf = calloc(cnt, sizeof(*rf));
    if (xs == NULL || rf == NULL) {
        free(xs);
        free(rf);
        for (int i = 0; i < n; i++) {
            fs[i]->status = -ENOMEM;
            snprintf(fs[i]->msg, RL_MSG_MAX, "out of memory");
            done(fs[i], arg);
        }
        return;
    }
    int left = n, running = 0, waiting = 0, holding = 0, next = 0, nr = 0;
    for (int i = 0; i < n; i++) {
        xfer *x = &xs[i];
        if (rl__http_xfer_init(s, x, fs[i]) != 0) {
            rl__http_finish(x, V_FAIL); /* its record: the lookup failed */
        } else if (x->want == 0) {
            rl__http_finish(x, V_OK); /* an empty member: nothing to ask */
        } else if (rl__http_cache_read(s, x)) {
            /* a hit: cached before this batch asked (not by its block) */
            atomic_fetch_add_explicit(&s->chits, 1, memory_order_relaxed);
        } else {
            continue;
        }
        left--;
        done(x->f, arg);
    }
    if (!rl__http_blocks_on(s)) { /* with blocks, the cache does better */
        nr = rl__http_runs_plan(s, xs, n, rf);
        for (int i = 0; i < n; i++) {
            holding += xs[i].state == X_HOLD;
        }
    }
    int all = n + nr;
    while (left > 0) {
        if (atomic_load(&s->gen) != gen) {
            for (int i = 0; i < all; i++) {
                if (xs[i].state == X_RUN) {
                    easy_give(s, xs[i].easy);
                }
                if (xs[i].blk >= 0 && xs[i].state != X_HOLD &&
                    xs[i].state != X_DONE) {
                    xs[i].f->status = RL_ECLOSED; /* its block, abandoned */
                    rl__http_block_end(s, &xs[i]);
                }
                if (xs[i].state != X_DONE) {
                    rl__http_fail_closed(&xs[i]);
                    if (i < n) {
                        done(xs[i].f, arg);
                    }
                }
            }
            break;
        }
        uint64_t now = rl__http_now_ns(), wake = now + 1000000000u;
        for (int i = 0; waiting > 0 && i < all && running < s->opt.max_inflight;
             i++) {
            xfer *x = &xs[i];
            if (x->state == X_WAIT && x->due_ns <= now) {
                waiting--;
                running += start(s, x);
                if (x->state == X_DONE) {
                    if (i >= n) {
                        rl__http_run_end(s, xs, n, i - n, &waiting, &holding,
                                         &left, done, arg);
                    } else {
                        left--;
                        done(x->f, arg);
                    }
                }
            }
        }
        /* The runs first, then the members alone. */
        while (next < all && running < s->opt.max_inflight) {
            int i = next < nr ? n + next : next - nr;
            next++;
            xfer *x = &xs[i];
            int64_t b;
            if (i >= n) {
                running += start(s, x);
                if (x->state == X_DONE) {
                    rl__http_run_end(s, xs, n, i - n, &waiting, &holding, &left,
                                     done, arg);
                }
                continue;
            }
            if (x->state != X_NEW) {
                continue; /* done at the start, or waiting for its run */
            }
            if ((b = rl__http_block_of(s, x)) >= 0 &&
                s->blks[b].state == B_BUSY) {
                x->state = X_HOLD; /* its block is on the way */
                x->blk = b;
                holding++;
            } else {
                if (b >= 0) {
                    rl__http_block_begin(s, x, b); /* else: the member */
                }
                running += start(s, x);
            }
            if (x->state == X_DONE) {
                left--;
                done(x->f, arg);
            }
        }
        rl__http_drive(s);
        CURLMsg *msg;
        int queued;
        while ((msg = curl_multi_info_read(s->multi, &queued)) != NULL) {
            if (msg->msg != CURLMSG_DONE) {
                continue;
            }
            xfer *x = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
            CURLcode rc = msg->data.result;
            easy_give(s, x->easy);
            running--;
            if (!rl__http_after_attempt(x, rc, &s->jitter)) {
                waiting++;
                continue;
            }
            if (x >= xs + n) {
                rl__http_run_end(s, xs, n, (int)(x - xs) - n, &waiting,
                                 &holding, &left, done, arg);
                continue;
            }
            if (x->blk >= 0) {
                /* A block ended: x is its member's fetch again, read from
                 * the cache, or fetched alone if the block failed. */
                rl__http_block_end(s, x);
                if (!rl__http_cache_read(s, x)) {
                    x->state = X_WAIT;
                    waiting++;
                    continue;
                }
            } else if (x->f->status == 0) {
                rl__http_cache_store(s, x);
            }
            left--;
            done(x->f, arg);
        }
        for (int i = 0; holding > 0 && i < n; i++) {
            xfer *x = &xs[i];
            if (x->state != X_HOLD || x->blk < 0 ||
                s->blks[x->blk].state == B_BUSY) {
                continue;
            }
            holding--;
            x->blk = -1;
            if (rl__http_cache_read(s, x)) {
                left--;
                done(x->f, arg);
            } else {
                x->state = X_WAIT; /* its block failed: the member alone */
                waiting++;
            }
        }
        if (left == 0) {
            break;
        }
        if (next < all && running < s->opt.max_inflight) {
            continue; /* room for more: start them first */
        }
        for (int i = 0; waiting > 0 && i < all; i++) {
            if (xs[i].state == X_WAIT && xs[i].due_ns < wake) {
                wake = xs[i].due_ns;
            }
        }
        /* Until a socket is ready, curl's timer or a retry is due, or
         * cancel(). */
        rl__http_wait(s, wake);
    }
    for (int r = 0; r < nr; r++) {
        free(xs[n + r].buf); /* a run's bytes, if still held */
    }
    free(xs);
    free(rf);
}

/* ---- a worker: one fetch with an easy handle of its own ---- */

static void http_read_one(rl_source *src, rl_fetch *f)
{
    http_source *s = (http_source *)src;
    unsigned gen = atomic_load(&s->gen);
    uint64_t rng = rl__http_now_ns() ^ (uint64_t)f->id;
    xfer x;
    memset(&x, 0, sizeof(x)); /* no headers to free yet */
    if (rl__http_xfer_init(s, &x, f) != 0) {
        rl__http_finish(&x, V_FAIL);
        return;
    }
    if (x.want == 0) {
        rl__http_finish(&x, V_OK);
        return;
    }
    rl_http_one one;
    bool listed = rl__http_one_init(s, &one);
    CURL *e = listed ? rl__http_easy_new(s) : NULL;
    for (;;) {
        if (e == NULL || !rl__http_attempt_prepare(&x, e)) {
            f->status = -ENOMEM;
            snprintf(f->msg, RL_MSG_MAX, "out of memory");
            rl__http_finish(&x, V_FAIL);
            break;
        }
        rl__http_count_attempt(&x);
        CURLcode rc;
        /* Each wait ends at cancel(): the transfer mid-way, the backoff. */
        if (!rl__http_one_perform(s, &one, e, gen, &rc)) {
            rl__http_fail_closed(&x);
            break;
        }
        if (rl__http_after_attempt(&x, rc, &rng)) {
            break;
        }
        if (!rl__http_one_pause(s, &one, x.due_ns, gen)) {
            rl__http_fail_closed(&x);
            break;
        }
    }
    if (e != NULL) {
        curl_easy_cleanup(e);
    }
    if (listed) {
        rl__http_one_exit(s, &one);
    }
}

/* ---- the source ---- */

static const char *http_backend(const rl_source *s)
{
    (void)s;
    return "http";
}

static const char *http_reason(const rl_source *s)
{
    (void)s;
    return "";
}

static void http_where(const rl_source *src, int64_t id, char *buf, size_t cap)
{
    const http_source *s = (const http_source *)src;
    if (id >= 0 && id < src->count) {
        rl__http_name(s, rl__http_obj_of(s, id), buf, cap);
    } else {
        snprintf(buf, cap, "?");
    }
}

static void http_release(rl_source *s, rl_fetch *f)
{
    (void)s;
    free(f->rd.buf);
    f->rd.buf = NULL;
    f->data = NULL;
    f->len = 0;
}

static void http_cancel(rl_source *src)
{
    http_source *s = (http_source *)src;
    atomic_fetch_add(&s->gen, 1);
    rl__http_wake(s);
    rl__http_one_wake_all(s);
}

static void http_destroy(rl_source *src)
{
    http_source *s = (http_source *)src;
    rl__http_cache_free(s);
    for (int i = 0; i < s->nidle; i++) {
        curl_easy_cleanup(s->idle[i]);
    }
    if (s->multi != NULL) {
        curl_multi_cleanup(s->multi);
    }
    rl__http_wait_free(s);
    free(s->names_prefix);
    rl__http_urls_free(s->urls);
    rl__http_keys_free(s->keys);
    free(s->obj);
    free(s->offsets);
    free(s->lengths);
    rl_shard_records_destroy(s->records);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static void http_counters(const rl_source *src, rl_source_counters *out)
{
    const http_source *s = (const http_source *)src;
    /* retries first: a snapshot never has more retries than requests */
    out->retries = atomic_load_explicit(&s->nretry, memory_order_relaxed);
    out->requests = atomic_load_explicit(&s->nreq, memory_order_relaxed);
    out->bytes = atomic_load_explicit(&s->nbytes, memory_order_relaxed);
    out->cache_hits = atomic_load_explicit(&s->chits, memory_order_relaxed);
}

static const rl_source_ops http_ops = {
    .backend = http_backend,
    .backend_reason = http_reason,
    .where = http_where,
    .read_batch = http_read_batch,
    .read_one = http_read_one,
    .release = http_release,
    .destroy = http_destroy,
    .cancel = http_cancel,
    .counters = http_counters,
};

void rl_http_options_default(rl_http_options *o)
{
    memset(o, 0, sizeof(*o));
    o->retries = 5;
    o->timeout_s = 30;
    o->connect_timeout_s = 10;
    o->max_inflight = 32;
    o->verify = true;
    o->max_file_bytes = RL_DEFAULT_MAX_FILE_BYTES;
    o->backoff_s = 0.1;
    o->backoff_max_s = 10;
}

/* The source's parts but its table (names, URLs, the multi handle), for
 * a table of n samples on the objects names that keeps table_bytes;
 * *nomem gets the message for a failure to allocate. NULL with msg and
 * *status (names or URLs out of shape, libcurl unusable, out of memory). */
static http_source *http_new(const rl_strings *names, const rl_http_urls *urls,
                             int64_t n, uint64_t table_bytes,
                             const rl_http_options *opt, char *nomem,
                             int *status, char *msg)
{
    msg[0] = '\0';
    *status = RL_ECONFIG;
    int64_t nobj = names->n;
    if (rl_strings_check(names, "names", msg) != 0 ||
        !rl__http_global_init(msg)) {
        return NULL;
    }
    rl_http_url_set *made = NULL;
    int rc = rl__http_urls_make(names, urls, &made, msg);
    if (rc != 0) {
        *status = rc;
        return NULL;
    }
    /* What the allocations take, for the message when they fail. */
    snprintf(nomem, RL_MSG_MAX,
             "out of memory for an HTTP source of %lld samples on %lld "
             "objects (its table: %llu bytes)",
             (long long)n, (long long)nobj, (unsigned long long)table_bytes);
    *status = -ENOMEM;
    http_source *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        rl__http_urls_free(made);
        snprintf(msg, RL_MSG_MAX, "%s", nomem);
        return NULL;
    }
    s->urls = made;
    pthread_mutex_init(&s->mu, NULL);
    s->epfd = s->evfd = -1;
    s->base.ops = &http_ops;
    s->base.count = n;
    s->opt = *opt;
    s->opt.max_inflight = opt->max_inflight > 0 ? opt->max_inflight : 1;
    s->nobj = nobj;
    s->jitter = rl__http_now_ns() ^ (uint64_t)(uintptr_t)s;
    atomic_init(&s->gen, 0);
    snprintf(s->ua, sizeof(s->ua), "ringloader libcurl/%s",
             curl_version_info(CURLVERSION_NOW)->version);
    s->names = *names;
    s->names_prefix = strdup(names->prefix != NULL ? names->prefix : "");
    s->names.prefix = s->names_prefix;
    s->multi = curl_multi_init();
    if (!s->names_prefix || !s->multi) {
        http_destroy(&s->base);
        snprintf(msg, RL_MSG_MAX, "%s", nomem);
        return NULL;
    }
    return s;
}

/* The rest of s once its table is in: the cache, the epoll set, the
 * multi handle's options. The source, or NULL (s destroyed) with msg and
 * *status. */
static rl_source *http_ready(http_source *s, const char *nomem, int *status,
                             char *msg)
{
    if (!rl__http_cache_init(s)) {
        http_destroy(&s->base);
        snprintf(msg, RL_MSG_MAX, "%.200s (and its cache's)", nomem);
        return NULL;
    }
    if (!rl__http_wait_init(s)) {
        int e = errno;
        http_destroy(&s->base);
        snprintf(msg, RL_MSG_MAX, "cannot make the HTTP source's epoll set: %s",
                 strerror(e));
        *status = e > 0 ? -e : -EIO;
        return NULL;
    }
    curl_multi_setopt(s->multi, CURLMOPT_MAX_HOST_CONNECTIONS,
                      (long)s->opt.max_inflight);
    curl_multi_setopt(s->multi, CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX);
    /* Keep every connection open between batches. libcurl's default
     * keeps 4 per transfer still added: a batch's last few transfers
     * would close the rest, and the next batch connect again. */
    curl_multi_setopt(s->multi, CURLMOPT_MAXCONNECTS,
                      (long)s->opt.max_inflight);
    return &s->base;
}

/* A copy of n int64s (NULL: none given), into *out; false when out of
 * memory. */
static bool copy_i64(const void *v, int64_t n, void *out)
{
    void **to = out;
    size_t bytes = sizeof(int64_t) * (size_t)(n > 0 ? n : 1);
    *to = v != NULL ? malloc(bytes) : NULL;
    if (*to != NULL) {
        memcpy(*to, v, sizeof(int64_t) * (size_t)n);
    }
    return v == NULL || *to != NULL;
}

rl_source *rl_http_source_create(const rl_strings *names,
                                 const rl_http_urls *urls, const int64_t *obj,
                                 const uint64_t *offsets,
                                 const int64_t *lengths, int64_t n,
                                 const rl_http_options *opt, int *status,
                                 char *msg)
{
    int64_t nobj = names->n;
    for (int64_t i = 0; i < n && (obj != NULL || n != nobj); i++) {
        if (obj == NULL || obj[i] < 0 || obj[i] >= nobj) {
            *status = RL_ECONFIG;
            snprintf(msg, RL_MSG_MAX, "sample %lld names no object",
                     (long long)i);
            return NULL;
        }
    }
    char nomem[RL_MSG_MAX];
    uint64_t per = 8 * ((obj != NULL) + (offsets != NULL) + (lengths != NULL));
    http_source *s =
        http_new(names, urls, n, per * (uint64_t)n, opt, nomem, status, msg);
    if (s == NULL) {
        return NULL;
    }
    if (!copy_i64(obj, n, &s->obj) || !copy_i64(offsets, n, &s->offsets) ||
        !copy_i64(lengths, n, &s->lengths)) {
        http_destroy(&s->base);
        snprintf(msg, RL_MSG_MAX, "%s", nomem);
        return NULL;
    }
    if (s->offsets != NULL && s->lengths == NULL) {
        /* offsets alone: each from its offset to the object's end, which
         * the table's form cannot say (as before, whole objects). */
        free(s->offsets);
        s->offsets = NULL;
    }
    return http_ready(s, nomem, status, msg);
}

rl_source *rl_http_source_create_shards(const rl_strings *names,
                                        const rl_http_urls *urls,
                                        const int64_t *starts,
                                        struct rl_shard_records *records,
                                        const rl_http_options *opt, int *status,
                                        char *msg)
{
    int64_t nobj = names->n, k = 0;
    while (nobj >= 0 && k < nobj && starts[k] <= starts[k + 1]) {
        k++;
    }
    if (nobj < 0 || starts[0] != 0 || k < nobj || records == NULL) {
        *status = RL_ECONFIG;
        snprintf(msg, RL_MSG_MAX,
                 "starts: each shard's first sample, from 0, never falling, "
                 "and a record table (entry %lld)",
                 (long long)k);
        return NULL;
    }
    char nomem[RL_MSG_MAX];
    http_source *s =
        http_new(names, urls, starts[nobj], 8 * (uint64_t)(nobj + 1), opt,
                 nomem, status, msg);
    if (s == NULL) {
        return NULL;
    }
    rl_source *src = http_ready(s, nomem, status, msg);
    if (src != NULL) {
        s->starts = starts; /* from here on, records is the source's */
        s->records = records;
    }
    return src;
}

int rl_http_source_set_urls(rl_source *src, const rl_http_urls *urls, char *msg)
{
    http_source *s = (http_source *)src;
    if (src == NULL || src->ops != &http_ops) {
        snprintf(msg, RL_MSG_MAX, "not an HTTP source");
        return -EINVAL;
    }
    rl_http_url_set *fresh = NULL;
    int rc = rl__http_urls_make(&s->names, urls, &fresh, msg);
    if (rc != 0) {
        return rc == -ENOMEM ? rc : -EINVAL;
    }
    pthread_mutex_lock(&s->mu);
    rl_http_url_set *old = s->urls;
    s->urls = fresh;
    pthread_mutex_unlock(&s->mu);
    rl__http_urls_free(old);
    return 0;
}

int rl_http_source_set_keys(rl_source *src, const char *region,
                            const char *access, const char *secret,
                            const char *token)
{
    http_source *s = (http_source *)src;
    if (src == NULL || src->ops != &http_ops) {
        return -EINVAL;
    }
    rl_http_keys *k = NULL;
    if (region != NULL) {
        int rc = rl__http_keys_make(region, access, secret, token, &k);
        if (rc != 0) {
            return rc;
        }
    }
    pthread_mutex_lock(&s->mu);
    rl_http_keys *old = s->keys;
    s->keys = k;
    pthread_mutex_unlock(&s->mu);
    rl__http_keys_free(old);
    return 0;
}

const char *rl_http_library(void)
{
    return curl_version();
}
