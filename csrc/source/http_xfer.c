/*
 * source/http_xfer.c - one fetch of the HTTP source over its attempts:
 * the easy handle's options, the callbacks that write the body into the
 * fetch's buffer (a block's GET: into its cache file, whose descriptor the
 * cache hands over in sink_fd) and read the headers that matter (status, Content-Range,
 * Content-Length, Retry-After), the verdict on each attempt, and the
 * backoff before the next (see source/http.c for the whole design).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "source/http_xfer.h"
#include "source/shard_records.h"
#include "testing/hooks.h"

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc, curl_proto_rc;

/* Transfers go over HTTP(S) only, whatever libcurl was built with (FTP,
 * FILE, SMB, ...), and so do redirects; a redirect from an https URL
 * stays on https (https: true), never dropping TLS. The _STR options are
 * libcurl 7.85's; the bitmask ones before it are deprecated since. */
static CURLcode restrict_protocols(CURL *e, bool https)
{
#if LIBCURL_VERSION_NUM >= 0x075500
    CURLcode rc = curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    return rc != CURLE_OK ? rc
                          : curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR,
                                             https ? "https" : "http,https");
#else
    long all = CURLPROTO_HTTP | CURLPROTO_HTTPS;
    CURLcode rc = curl_easy_setopt(e, CURLOPT_PROTOCOLS, all);
    return rc != CURLE_OK
               ? rc
               : curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS,
                                  https ? (long)CURLPROTO_HTTPS : all);
#endif
}

static void curl_init(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_ALL);
    if (curl_init_rc != CURLE_OK) {
        return;
    }
    /* A libcurl older than the headers built against would refuse the
     * restriction: then no transfer, rather than one to any protocol. */
    CURL *e = curl_easy_init();
    curl_proto_rc = e == NULL ? CURLE_OUT_OF_MEMORY : restrict_protocols(e, 0);
    curl_easy_cleanup(e);
}

bool rl__http_global_init(char *msg)
{
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK) {
        snprintf(msg, RL_MSG_MAX, "libcurl failed to initialise: %s",
                 curl_easy_strerror(curl_init_rc));
        return false;
    }
    if (curl_proto_rc != CURLE_OK) {
        snprintf(msg, RL_MSG_MAX,
                 "libcurl %s cannot restrict transfers to HTTP(S) (%s): "
                 "ringloader was built against libcurl %s",
                 curl_version_info(CURLVERSION_NOW)->version,
                 curl_easy_strerror(curl_proto_rc), LIBCURL_VERSION);
        return false;
    }
    return true;
}

uint64_t rl__http_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* The delay before retry number `attempt` (1, 2, ...): uniform in
 * [0, min(cap, base * 2^(attempt-1))], or Retry-After within the cap. */
static uint64_t backoff_ns(const rl_http_options *o, int attempt,
                           double retry_after, uint64_t *rng)
{
    double hi = o->backoff_s;
    for (int i = 1; i < attempt && hi < o->backoff_max_s; i++) {
        hi *= 2;
    }
    hi = hi < o->backoff_max_s ? hi : o->backoff_max_s;
    double u = (double)(splitmix(rng) >> 11) / 9007199254740992.0;
    double d = retry_after >= 0 ? retry_after : u * hi;
    d = d < o->backoff_max_s ? d : o->backoff_max_s;
    return (uint64_t)(d * 1e9);
}

/* ---- the callbacks of one attempt ---- */

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
    xfer *x = arg;
    rl__http_resp_header(&x->resp, p, size * n);
    return size * n;
}

static bool grow(xfer *x, size_t need)
{
    size_t cap = x->cap ? x->cap : 65536;
    while (cap < need) {
        cap *= 2;
    }
    uint8_t *b = realloc(x->buf, cap);
    if (b == NULL) {
        return false;
    }
    x->buf = b;
    x->cap = cap;
    return true;
}

bool rl__http_write_at(int fd, const char *p, size_t k, uint64_t at)
{
    size_t put = 0;
    while (put < k) {
        ssize_t w = pwrite(fd, p + put, k - put, (off_t)(at + put));
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            return false;
        }
        put += (size_t)w;
    }
    return true;
}

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    xfer *x = arg;
    size_t k = size * n;
    if (x->resp.status < 200 || x->resp.status >= 300) {
        /* An error body: keep its start, for S3's <Code>. */
        size_t room = sizeof(x->body) - 1 - x->nbody;
        size_t c = k < room ? k : room;
        memcpy(x->body + x->nbody, p, c);
        x->nbody += c;
        x->body[x->nbody] = '\0';
        return k;
    }
    if (x->want >= 0) {
        x->failure = rl__http_resp_body(&x->resp, x->off, x->want, x->len, k);
        if (x->failure != F_NONE) {
            return 0;
        }
        if (x->blk >= 0) {
            /* counted before the write: a failed one may have put some */
            x->wrote = x->len + k > x->wrote ? x->len + k : x->wrote;
            if (!rl__http_write_at(x->sink_fd, p, k, x->off + x->len)) {
                x->failure = F_CACHE;
                return 0;
            }
            x->len += k;
            return k;
        }
    } else {
        uint64_t max = x->s->opt.max_file_bytes;
        if (x->len + k > max) {
            x->failure = F_TOO_BIG;
            return 0;
        }
        size_t hint = x->resp.clen > 0 && (uint64_t)x->resp.clen <= max
                          ? (size_t)x->resp.clen
                          : 0;
        size_t need = x->len + k > hint ? x->len + k : hint;
        if (need > x->cap && !grow(x, need)) {
            x->failure = F_NOMEM;
            return 0;
        }
    }
    memcpy(x->buf + x->len, p, k);
    x->len += k;
    return k;
}

/* ---- easy handles ---- */

CURL *rl__http_easy_new(http_source *s)
{
    CURL *e = curl_easy_init();
    if (e == NULL) {
        return NULL;
    }
    const rl_http_options *o = &s->opt;
    long stall = (long)(o->timeout_s + 0.999);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                     (long)(o->connect_timeout_s * 1000));
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, stall > 0 ? stall : 1L);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
    curl_easy_setopt(e, CURLOPT_PIPEWAIT, 1L);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L); /* to HTTP(S) only */
    curl_easy_setopt(e, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, o->verify ? 1L : 0L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, o->verify ? 2L : 0L);
    if (o->ca_file[0] != '\0') {
        curl_easy_setopt(e, CURLOPT_CAINFO, o->ca_file);
    }
    curl_easy_setopt(e, CURLOPT_USERAGENT, s->ua);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    return e;
}

static void free_headers(xfer *x)
{
    rl__http_headers_free(x->hdrs);
    x->hdrs = NULL;
}

/* Points easy at x's next attempt. Returns false when out of memory. */
bool rl__http_attempt_prepare(xfer *x, CURL *e)
{
    http_source *s = x->s;
    x->easy = e;
    x->len = 0;
    rl__http_resp_reset(&x->resp);
    x->failure = F_NONE;
    x->nbody = 0;
    x->body[0] = x->code[0] = x->err[0] = '\0';
    if (x->want >= 0 && x->buf == NULL && x->blk < 0) {
        x->buf = malloc(x->want > 0 ? (size_t)x->want : 1);
        x->cap = x->want > 0 ? (size_t)x->want : 1;
        if (x->buf == NULL) {
            return false;
        }
    }
    free_headers(x);
    int64_t j = x->obj;
    bool s3 = rl__http_is_s3(s, j);
    /* An S3 key's path goes as it is: "a/./b" and "a/../b" name objects
     * of their own, which dot-segment removal would turn into others. */
    curl_easy_setopt(e, CURLOPT_PATH_AS_IS, s3 ? 1L : 0L);
    pthread_mutex_lock(&s->mu);
    /* Made now (from the name, or the blob set_urls may replace): libcurl
     * copies it. */
    char *url = rl__http_url(s, j);
    if (url == NULL) {
        pthread_mutex_unlock(&s->mu);
        return false;
    }
    x->https = strncasecmp(url, "https:", 6) == 0;
    CURLcode rc = curl_easy_setopt(e, CURLOPT_URL, url);
    bool sign = s->keys != NULL && s3 && strchr(url, '?') == NULL;
    free(url);
    /* A test build may leave an unsigned attempt's handle as the pool of
     * idle handles left it, to show that the pool keeps no key. */
    bool as_pooled =
        !sign && rl__test_hook("RINGLOADER_TEST_HTTP_AS_POOLED", "1");
    if (rc == CURLE_OK && !as_pooled) {
        rc = rl__http_sign_attempt(x, e, sign ? s->keys : NULL);
    }
    x->sign = sign;
    pthread_mutex_unlock(&s->mu);
    if (rc == CURLE_OK) {
        rc = restrict_protocols(e, x->https);
    }
    char range[64];
    if (x->want >= 0) {
        snprintf(range, sizeof(range), "%llu-%llu", (unsigned long long)x->off,
                 (unsigned long long)(x->off + (uint64_t)x->want - 1));
    }
    curl_easy_setopt(e, CURLOPT_RANGE, x->want >= 0 ? range : NULL);
    /* A block or run (megabytes) is read 256 KiB at a time, in a few
     * write callbacks (for a block, a few writes into the cache file);
     * a sample with libcurl's default 16 KiB, which costs less per GET. */
    curl_easy_setopt(e, CURLOPT_BUFFERSIZE,
                     x->want > (1 << 20) ? 256L << 10 : 16L << 10);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(e, CURLOPT_PRIVATE, x);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->err);
    return rc == CURLE_OK;
}

void rl__http_count_attempt(const xfer *x)
{
    atomic_fetch_add_explicit(&x->s->nreq, 1, memory_order_relaxed);
    if (x->attempt > 0) {
        atomic_fetch_add_explicit(&x->s->nretry, 1, memory_order_relaxed);
    }
}

/* ---- judging an attempt ---- */

static bool retryable(CURLcode rc)
{
    switch (rc) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_WEIRD_SERVER_REPLY:
        return true;
    default:
        return false;
    }
}

static int errno_of(CURLcode rc)
{
    switch (rc) {
    case CURLE_COULDNT_RESOLVE_HOST:
        return EHOSTUNREACH;
    case CURLE_COULDNT_CONNECT:
        return ECONNREFUSED;
    case CURLE_OPERATION_TIMEDOUT:
        return ETIMEDOUT;
    case CURLE_PARTIAL_FILE:
    case CURLE_WEIRD_SERVER_REPLY:
        return EPROTO;
    default:
        return ECONNRESET;
    }
}

/* S3's error code from an XML error body ("SlowDown", "NoSuchKey"). */
static void s3_code(xfer *x)
{
    rl__http_resp_s3_code(x->body, x->nbody, x->code, sizeof(x->code));
}

/* The message of a transfer refused for its protocol: a redirect to one
 * other than HTTP(S), or from https to http. The URL is named without
 * its query string, which may carry a signature. */
static void refused_protocol(xfer *x, char *m)
{
    char *url = NULL;
    long redirects = 0;
    curl_easy_getinfo(x->easy, CURLINFO_EFFECTIVE_URL, &url);
    curl_easy_getinfo(x->easy, CURLINFO_REDIRECT_COUNT, &redirects);
    url = url != NULL ? url : "?";
    int n = (int)strcspn(url, "?#");
    bool http = strncasecmp(url, "http:", 5) == 0;
    if (redirects == 0 && strncasecmp(url, "http", 4) != 0) {
        snprintf(m, RL_MSG_MAX, "%.*s: only http:// and https:// URLs are read",
                 n, url);
    } else if (x->https && http) {
        snprintf(m, RL_MSG_MAX,
                 "redirected to %.*s: refused, a redirect from https:// to "
                 "http:// would send the request unencrypted",
                 n, url);
    } else {
        snprintf(m, RL_MSG_MAX,
                 "redirected to %.*s: refused, redirects are followed to "
                 "http:// and https:// only",
                 n, url);
    }
}

/* Judges an attempt that ended with rc: V_OK, V_RETRY or V_FAIL with
 * x->f's status and message set. */
static int judge(xfer *x, CURLcode rc)
{
    rl_fetch *f = x->f;
    char *m = f->msg;
    unsigned long long a = x->off, b = x->off + (uint64_t)x->want - 1;
    if (x->failure == F_TOO_BIG) {
        f->status = RL_ETOOBIG;
        snprintf(m, RL_MSG_MAX, "object larger than the %llu-byte limit",
                 (unsigned long long)x->s->opt.max_file_bytes);
        return V_FAIL;
    }
    if (x->failure == F_NOMEM) {
        f->status = -ENOMEM;
        snprintf(m, RL_MSG_MAX, "out of memory");
        return V_FAIL;
    }
    if (x->failure == F_CACHE) {
        f->status = -EIO;
        snprintf(m, RL_MSG_MAX, "could not write the cache file");
        return V_FAIL;
    }
    if (x->failure == F_IGNORED_RANGE) {
        f->status = -EPROTO;
        snprintf(m, RL_MSG_MAX,
                 "the server ignored the Range header (HTTP 200 for bytes "
                 "%llu-%llu): shards are read by byte range, so it must "
                 "support range requests",
                 a, b);
        return V_FAIL;
    }
    if (x->failure == F_TOO_MUCH) {
        f->status = -EPROTO;
        snprintf(m, RL_MSG_MAX, "more bytes than asked for (bytes %llu-%llu)",
                 a, b);
        return V_RETRY;
    }
    if (x->failure == F_WRONG_RANGE) {
        f->status = -EPROTO;
        snprintf(m, RL_MSG_MAX,
                 "wrong Content-Range (bytes %lld-%lld for bytes %llu-%llu)",
                 (long long)(x->resp.cr_seen ? x->resp.cr_first : -1),
                 (long long)(x->resp.cr_seen ? x->resp.cr_last : -1), a, b);
        return V_RETRY;
    }
    if (rc == CURLE_UNSUPPORTED_PROTOCOL) {
        f->status = -EPROTO;
        refused_protocol(x, m);
        return V_FAIL;
    }
    if (rc != CURLE_OK) {
        f->status = -errno_of(rc);
        /* libcurl's error buffer says more than its code's text. */
        snprintf(m, RL_MSG_MAX, "%s",
                 x->err[0] ? x->err : curl_easy_strerror(rc));
        if (rc == CURLE_PEER_FAILED_VERIFICATION ||
            rc == CURLE_SSL_CACERT_BADFILE) {
            f->status = -EACCES;
            size_t k = strlen(m);
            snprintf(m + k, RL_MSG_MAX - k,
                     " (certificates are verified; name a CA bundle with "
                     "SSL_CERT_FILE)");
        }
        return retryable(rc) ? V_RETRY : V_FAIL;
    }
    long h = x->resp.status;
    if (h == 429 || h >= 500) {
        s3_code(x);
        f->status = -EIO;
        snprintf(m, RL_MSG_MAX, "HTTP %ld%s", h, x->code);
        return V_RETRY;
    }
    if (h >= 300 || h < 200) {
        s3_code(x);
        f->status = h == 404 ? -ENOENT : h == 403 || h == 401 ? -EACCES : -EIO;
        snprintf(m, RL_MSG_MAX, "HTTP %ld%s%s", h, x->code,
                 h == 404   ? ": no such object"
                 : h == 416 ? ": the object is shorter than its index says "
                              "(rebuild the index)"
                 : h == 403 ? ": access denied (check the credentials)"
                 : x->sign && h < 400
                     ? ": a signed request follows no redirect (is the "
                       "bucket in another region than AWS_REGION says?)"
                 : x->sign && h == 400
                     ? ": the signed request was refused (check the region "
                       "and endpoint, AWS_REGION, AWS_ENDPOINT_URL_S3)"
                     : "");
        return V_FAIL;
    }
    if (x->want >= 0 && x->len != (size_t)x->want) {
        f->status = -EPROTO;
        snprintf(m, RL_MSG_MAX, "truncated body: %zu of %lld bytes", x->len,
                 (long long)x->want);
        return V_RETRY;
    }
    f->status = 0;
    m[0] = '\0';
    return V_OK;
}

/* Ends x: its fetch gets the bytes (status 0) or keeps the status judge()
 * gave, with the attempts counted in the message. */
void rl__http_finish(xfer *x, int verdict)
{
    rl_fetch *f = x->f;
    x->state = X_DONE;
    free_headers(x);
    if (verdict == V_OK) {
        f->data = x->buf ? x->buf : (const uint8_t *)"";
        f->len = x->len;
        f->rd.buf = x->buf;
        return;
    }
    free(x->buf);
    x->buf = NULL;
    if (x->attempt > 0) {
        size_t k = strlen(f->msg);
        snprintf(f->msg + k, RL_MSG_MAX - k, " (%d attempts)", x->attempt + 1);
    }
}

/* After an attempt: V_OK/V_FAIL end x; V_RETRY schedules the next attempt,
 * or ends x when none is left. Returns true when x ended. */
bool rl__http_after_attempt(xfer *x, CURLcode rc, uint64_t *rng)
{
    int v = judge(x, rc);
    free_headers(x); /* the transfer has ended */
    atomic_fetch_add_explicit(&x->s->nbytes, x->len, memory_order_relaxed);
    if (v == V_RETRY && x->attempt < x->s->opt.retries) {
        x->attempt++;
        x->state = X_WAIT;
        x->due_ns = rl__http_now_ns() + backoff_ns(&x->s->opt, x->attempt,
                                                   x->resp.retry_after, rng);
        return false;
    }
    rl__http_finish(x, v == V_RETRY ? V_FAIL : v);
    return true;
}

int rl__http_xfer_init(http_source *s, xfer *x, rl_fetch *f)
{
    uint64_t off = 0;
    int64_t want = 0;
    char why[RL_MSG_MAX];
    int rc = rl__http_range_of(s, f->id, &off, &want, why);
    rl__http_xfer_setup(s, x, f, rl__http_obj_of(s, f->id), off, want);
    if (rc != 0) {
        f->status = rc;
        snprintf(f->msg, RL_MSG_MAX, "%s", why);
    }
    return rc;
}

void rl__http_xfer_setup(http_source *s, xfer *x, rl_fetch *f, int64_t obj,
                         uint64_t off, int64_t want)
{
    free_headers(x);
    memset(x, 0, sizeof(*x));
    x->s = s;
    x->f = f;
    x->obj = obj;
    x->off = off;
    x->want = want;
    x->blk = -1;
    x->sink_fd = -1;
    x->run = -1;
    memset(&f->rd, 0, sizeof(f->rd));
    f->data = NULL;
    f->len = 0;
    f->status = 0;
    f->msg[0] = '\0';
}

void rl__http_fail_closed(xfer *x)
{
    x->f->status = RL_ECLOSED;
    snprintf(x->f->msg, RL_MSG_MAX, "closed");
    rl__http_finish(x, V_FAIL);
}

/* ---- the table: per sample, or shards with record files ---- */

int64_t rl__http_obj_of(const http_source *s, int64_t id)
{
    if (s->records != NULL) {
        return rl_run_of(s->starts, s->nobj, id);
    }
    return s->obj != NULL ? s->obj[id] : id;
}

int64_t rl__http_next_of(const http_source *s, int64_t id)
{
    int64_t j = rl__http_obj_of(s, id);
    bool same = id + 1 < s->base.count &&
                (s->records != NULL ? id + 1 < s->starts[j + 1]
                                    : s->obj != NULL && s->obj[id + 1] == j);
    return same ? id + 1 : -1;
}

int64_t rl__http_prev_of(const http_source *s, int64_t id)
{
    int64_t j = rl__http_obj_of(s, id);
    bool same =
        id > 0 && (s->records != NULL ? id - 1 >= s->starts[j]
                                      : s->obj != NULL && s->obj[id - 1] == j);
    return same ? id - 1 : -1;
}

/* A ranged fetch's buffer is allocated at its full length before the
 * body comes: a length over max_file_bytes (a corrupt index or record
 * file) fails the sample, as an object over it does, before a byte is
 * asked for. 0, or RL_ETOOBIG with msg naming where the range came from
 * (the record file; "": the table). */
static int range_fits(const http_source *s, int64_t want, const char *from,
                      char *msg)
{
    if (want <= 0 || (uint64_t)want <= s->opt.max_file_bytes) {
        return 0;
    }
    snprintf(msg, RL_MSG_MAX,
             "its range of %lld bytes%s%s is over the %llu-byte limit "
             "(max_file_bytes)",
             (long long)want, *from ? ", from " : "", from,
             (unsigned long long)s->opt.max_file_bytes);
    return RL_ETOOBIG;
}

int rl__http_range_of(http_source *s, int64_t id, uint64_t *off, int64_t *want,
                      char *msg)
{
    msg[0] = '\0';
    if (s->records == NULL) {
        *off = s->offsets != NULL ? s->offsets[id] : 0;
        *want = s->lengths != NULL ? s->lengths[id] : -1;
        return range_fits(s, *want, "", msg);
    }
    uint64_t at = 0, bytes = 0;
    int rc = rl_shard_records_get(s->records, id, &at, &bytes, NULL, msg,
                                  RL_MSG_MAX);
    if (rc == 0 &&
        (at > (uint64_t)INT64_MAX || bytes > (uint64_t)INT64_MAX - at)) {
        /* Only a corrupt record file gives one: name the range. */
        snprintf(msg, RL_MSG_MAX,
                 "its record gives bytes %llu..+%llu, past any object: the "
                 "shard's record file is corrupt (remove it; opening the "
                 "shard set again rebuilds it)",
                 (unsigned long long)at, (unsigned long long)bytes);
        rc = -EBADMSG;
    }
    *off = at;
    *want = (int64_t)bytes;
    if (rc == 0) {
        rc = range_fits(s, *want, rl_shard_records_path(s->records, id), msg);
    }
    return rc;
}
