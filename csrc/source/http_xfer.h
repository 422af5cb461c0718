/*
 * source/http_xfer.h - the parts of the HTTP source (source/http.c) shared
 * with one transfer's code (source/http_xfer.c), its cache (http_cache.c),
 * its runs (http_runs.c), its wait (http_wait.c) and its signing
 * (http_sign.c): the source's struct, one fetch's transfer across its
 * attempts, and the calls that prepare, judge and end an attempt. Internal to source/; libcurl is known by
 * these files only.
 */
#ifndef RL_HTTP_XFER_H
#define RL_HTTP_XFER_H

#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/epoll.h>

#include "source/http_resp.h"
#include "source/source.h"

#define RL_HTTP_READY 128 /* sockets handled per wake, at most */

typedef struct rl_http_one rl_http_one;

/* The keys S3 GETs are signed with (rl_http_source_set_keys): libcurl's
 * CURLOPT_AWS_SIGV4 argument ("aws:amz:<region>:s3"), the access key,
 * the secret and the x-amz-security-token header line ("" without a
 * session token). Replaced whole, never changed in place. */
typedef struct rl_http_keys {
    char *sigv4, *access, *secret, *token;
} rl_http_keys;

/* The byte ranges [v[2t], v[2t + 1]) of one cache file, sorted, apart
 * (neither overlapping nor touching), n of them in room for cap. */
typedef struct rl_http_spans {
    uint64_t *v;
    size_t n, cap;
} rl_http_spans;

/* A block being fetched: bytes off .. end of object obj. */
typedef struct rl_http_block {
    int64_t obj;
    uint64_t off, end;
    uint8_t state;
} rl_http_block;

/* The fetch URLs of the objects (rl_http_urls, copied): n URLs in one
 * blob (bytes, at, prefix), or at NULL: made from the names, an s3:// one
 * from its bucket's base. Replaced whole, never changed in place. */
typedef struct rl_http_url_set {
    uint8_t *bytes;
    int64_t *at;
    char *prefix;
    int64_t n;
    int64_t nbases;
    char **buckets, **bases;
} rl_http_url_set;

typedef struct http_source {
    rl_source base;
    rl_http_options opt;
    int64_t nobj;
    /* The display name of each object: borrowed but the prefix (owned, in
     * names_prefix). */
    rl_strings names;
    char *names_prefix;
    rl_http_url_set *urls; /* the fetch URLs, guarded by mu */
    rl_http_keys *keys;    /* S3 GETs signed with these, guarded by mu; NULL */
    rl_http_one *ones;     /* the read_one calls in progress, guarded by mu */
    /* The table, in one of two forms (source/source.h): per sample its
     * object, offset and length (-1: the whole object), copied; or, with
     * records (owned), the first sample of each object (borrowed, nobj +
     * 1 entries) and the record files that give each sample's range. The
     * other form's pointers are NULL; so are obj (sample i is object i)
     * and offsets and lengths (whole objects) when the table has none. */
    int64_t *obj;
    uint64_t *offsets;
    int64_t *lengths;
    const int64_t *starts;
    struct rl_shard_records *records;
    pthread_mutex_t mu;
    CURLM *multi;   /* the I/O thread's */
    CURL *idle[64]; /* easy handles to reuse (I/O thread) */
    int nidle;
    /* The multi handle's sockets and timer (http_wait.c): an epoll set
     * with an eventfd that ends a wait, curl's next timeout and the
     * sockets the last wait found ready. */
    int epfd, evfd;
    uint64_t timer_ns;
    int nready;
    struct epoll_event ready[RL_HTTP_READY];
    atomic_uint gen; /* cancel() generation */
    uint64_t jitter; /* the I/O thread's random state */
    char ua[64];
    /* The local cache of fetched bytes (http_cache.c), the I/O thread's:
     * per object its cache file, bytes held, last use and the byte ranges
     * its file holds (nothing per sample). */
    int *cfd;
    uint64_t *cbytes, *cused;
    rl_http_spans *cspans;
    uint64_t ctotal, ctick;
    /* rl_source_counters (read from any thread): cache hits, attempts,
     * retries, body bytes received. */
    atomic_uint_fast64_t chits, nreq, nretry, nbytes;
    /* The blocks of neighbouring members fetched in one GET into the cache
     * (opt.block_bytes), planned when one is needed: nblk slots, each a
     * block being fetched (B_BUSY) or free (B_IDLE); per object the
     * blocks being fetched into its file, and whether a block of it
     * failed (its members are then fetched one at a time). */
    int64_t nblk;
    rl_http_block *blks;
    int *cbusy;
    uint8_t *boffobj;
} http_source;

enum { B_IDLE, B_BUSY };

enum { X_NEW, X_WAIT, X_RUN, X_HOLD, X_DONE };

/* One fetch's transfer, across its attempts. */
typedef struct xfer {
    http_source *s;
    rl_fetch *f;
    CURL *easy;
    int64_t obj; /* the object of f's sample (of a run: its members') */
    uint64_t off;
    int64_t want;  /* bytes asked for, -1: the whole object */
    uint64_t moff; /* blk's GET: its member's own range, for after it */
    int64_t mwant;
    int64_t blk;  /* the block this attempt fetches into the cache, or the
                   * block an X_HOLD fetch waits for; -1: none */
    int sink_fd;  /* blk's GET: the cache file its body is written into,
                   * at the body's offset in the object; -1: none */
    int run;      /* the run (source/http.c) an X_HOLD fetch waits for; -1 */
    size_t wrote; /* a block's bytes written into the cache file, the most
                   * of any attempt (each starts at the block's start) */
    uint8_t *buf;
    size_t cap, len;
    int attempt, state, failure; /* failure: F_* (source/http_resp.h) */
    uint64_t due_ns;
    rl_http_resp resp; /* this attempt's last response's headers */
    char code[48];     /* S3's <Code> of an error body */
    char body[256];    /* start of an error body */
    size_t nbody;
    bool https; /* this attempt's URL is https: (no redirect to http:) */
    bool sign;  /* this attempt is signed (SigV4): it follows no redirect */
    /* This attempt's extra headers (a signed one's), which libcurl reads
     * until it ends: freed when the next is prepared or x ends. */
    struct curl_slist *hdrs;
    char err[CURL_ERROR_SIZE];
} xfer;

enum { V_OK, V_RETRY, V_FAIL };

/* ---- names and URLs (http_urls.c) ---- */

/* Object j's display name into buf (cap > 0 bytes), cut to fit. */
void rl__http_name(const http_source *s, int64_t j, char *buf, size_t cap);

/* Whether object j's display name is s3://... */
bool rl__http_is_s3(const http_source *s, int64_t j);

/* Object j's fetch URL (s->urls: under mu), malloc'd; NULL when out of
 * memory. */
char *rl__http_url(const http_source *s, int64_t j);

/* The fetch URLs `in` of the objects `names`, copied into *out: 0,
 * RL_ECONFIG (out of shape, not one an object, an S3 name with no key or
 * no base for its bucket) or -ENOMEM, with msg. */
int rl__http_urls_make(const rl_strings *names, const rl_http_urls *in,
                       rl_http_url_set **out, char *msg);

/* Frees a set of URLs; accepts NULL. */
void rl__http_urls_free(rl_http_url_set *u);

/* Initialises libcurl once per process. false with msg on failure. */
bool rl__http_global_init(char *msg);

uint64_t rl__http_now_ns(void);

/* An easy handle with the source's fixed options (timeouts, TLS, HTTP(S)
 * only). NULL when out of memory. */
CURL *rl__http_easy_new(http_source *s);

/* x for fetch f of s: its object and range from the table (a record
 * file's lookup with records); f emptied. x is zeroed or a transfer that
 * ended (its headers are freed). Returns 0, or the status the lookup
 * failed with, with f->status and f->msg set (x is then to be ended with
 * rl__http_finish(x, V_FAIL)). */
int rl__http_xfer_init(http_source *s, xfer *x, rl_fetch *f);

/* x for fetch f of bytes off .. off + want of object obj (-1: all of it),
 * without looking at the table; otherwise as rl__http_xfer_init. */
void rl__http_xfer_setup(http_source *s, xfer *x, rl_fetch *f, int64_t obj,
                         uint64_t off, int64_t want);

/* The object of sample id (a binary search on starts with records). */
int64_t rl__http_obj_of(const http_source *s, int64_t id);

/* Sample id's byte range: 0 with *off and *want (-1: the whole object),
 * or -errno with msg (RL_MSG_MAX) naming the record file; RL_ETOOBIG for
 * a range over opt.max_file_bytes. Thread-safe. */
int rl__http_range_of(http_source *s, int64_t id, uint64_t *off, int64_t *want,
                      char *msg);

/* The sample after id in id's object (id + 1 when it is there), or -1;
 * the one before it (id - 1), or -1. */
int64_t rl__http_next_of(const http_source *s, int64_t id);
int64_t rl__http_prev_of(const http_source *s, int64_t id);

/* Points e at x's next attempt (URL and signing keys under s->mu, Range,
 * callbacks, the protocols a redirect may go to: https only from an https
 * URL, none for a signed attempt). Returns false when out of memory. */
bool rl__http_attempt_prepare(xfer *x, CURL *e);
/* Counts an attempt that was sent off (rl_source_counters). */
void rl__http_count_attempt(const xfer *x);

/* After an attempt that ended with rc: true when x ended (its fetch holds
 * the bytes or a status); false when it waits for a retry at x->due_ns. */
bool rl__http_after_attempt(xfer *x, CURLcode rc, uint64_t *rng);

/* Ends x with verdict V_OK (the fetch gets the bytes) or V_FAIL (its
 * status and message stay). */
void rl__http_finish(xfer *x, int verdict);

/* Ends x with RL_ECLOSED (cancelled). */
void rl__http_fail_closed(xfer *x);

/* ---- signing (http_sign.c) ---- */

/* New keys (rl_http_source_set_keys' contract) into *out: 0, -EINVAL,
 * -ENOTSUP or -ENOMEM (*out untouched). */
int rl__http_keys_make(const char *region, const char *access,
                       const char *secret, const char *token,
                       rl_http_keys **out);

/* Frees the keys, the secret wiped (NULL is fine). */
void rl__http_keys_free(rl_http_keys *k);

/* Makes e sign x's attempt with k (called under s->mu: libcurl copies the
 * strings; the header lines go into x->hdrs, which must be NULL), or not
 * sign it (k NULL: no auth, no extra header, redirects followed). Sets
 * x->sign. Returns libcurl's status (CURLE_OUT_OF_MEMORY). */
CURLcode rl__http_sign_attempt(xfer *x, CURL *e, const rl_http_keys *k);

/* Clears e's signing options (SigV4, user name, password, headers), so
 * that e holds no key and cannot sign: before it goes back to the pool
 * of idle handles. libcurl frees its copies of those strings (without
 * wiping them: they are libcurl's). */
void rl__http_unsign(CURL *e);

/* Frees a header list built for an attempt (NULL is fine), each line
 * wiped first: a session token travels in one. */
void rl__http_headers_free(struct curl_slist *h);

/* A sample's place in its object, sorted by (object, offset, key) with
 * rl__http_place_cmp: the blocks (http_cache.c) and runs (http_runs.c)
 * are neighbours in that order. key: the sample's id, or its index in a
 * batch. */
typedef struct {
    int64_t obj, key;
    uint64_t off;
} rl_http_place;

int rl__http_place_cmp(const void *a, const void *b);

/* ---- waiting for the multi handle (http_wait.c), I/O thread only ---- */

/* The epoll set and eventfd, and the multi handle's socket and timer
 * callbacks. false (errno set) when they cannot be made. */
bool rl__http_wait_init(http_source *s);

/* Closes them (after curl_multi_cleanup, which still calls back). */
void rl__http_wait_free(http_source *s);

/* Ends a wait in progress, or the next one, at once. Any thread. */
void rl__http_wake(http_source *s);

/* Drives libcurl for the sockets the last wait found ready and its timer,
 * if due: transfers start, progress and end (curl_multi_info_read). */
void rl__http_drive(http_source *s);

/* Waits until a socket is ready, curl's timer is due, until_ns passes (1 s
 * at most) or rl__http_wake. */
void rl__http_wait(http_source *s, uint64_t until_ns);

/* ---- a worker's read_one (http_wait.c): its own multi handle ---- */

/* One read_one in progress, on its worker's stack: cancel() wakes its
 * multi handle's wait (curl_multi_wakeup) through the source's list. */
struct rl_http_one {
    CURLM *multi;
    rl_http_one *prev, *next;
};

/* Makes o's multi handle and puts o on s's list. false when out of
 * memory (o is then not on the list). */
bool rl__http_one_init(http_source *s, rl_http_one *o);

/* Takes o off s's list and frees its multi handle. */
void rl__http_one_exit(http_source *s, rl_http_one *o);

/* Runs transfer e to its end on o's multi handle: true with *rc its
 * result, or false as soon as cancel() has moved s->gen from gen (e is
 * then abandoned mid-transfer). Either way e is off the multi handle. */
bool rl__http_one_perform(http_source *s, rl_http_one *o, CURL *e, unsigned gen,
                          CURLcode *rc);

/* Sleeps until due_ns: true, or false as soon as cancel() has moved
 * s->gen from gen. */
bool rl__http_one_pause(http_source *s, rl_http_one *o, uint64_t due_ns,
                        unsigned gen);

/* Wakes every read_one in progress (they then see the new generation).
 * Any thread; takes s->mu. */
void rl__http_one_wake_all(http_source *s);

/* ---- runs (http_runs.c) ---- */

/* Plans the runs of a batch of n members xs[0, n) (those still X_NEW):
 * run r gets xs[n + r], the GET of its span for fetch rf[r], and its
 * members wait for it (X_HOLD, run r). Returns the number of runs. */
int rl__http_runs_plan(http_source *s, xfer *xs, int n, rl_fetch *rf);

/* Run r ended (xs[n + r] holds its bytes or a failure): each member
 * waiting for it gets its bytes and is done, or is fetched alone (X_WAIT,
 * counted in *waiting). */
void rl__http_run_end(http_source *s, xfer *xs, int n, int r, int *waiting,
                      int *holding, int *left, rl_fetch_done_fn done,
                      void *arg);

/* ---- the cache of fetched bytes (http_cache.c), I/O thread only ---- */

/* Allocates the cache's tables when opt.cache_dir is set. false when out
 * of memory. */
bool rl__http_cache_init(http_source *s);

/* Removes the cache's files and frees its tables. */
void rl__http_cache_free(http_source *s);

/* Ends x with its bytes from the cache, if they are there: true. */
bool rl__http_cache_read(http_source *s, xfer *x);

/* Keeps the bytes x fetched, evicting the objects used least recently to
 * stay within opt.cache_bytes. Failures (a full disk) only skip it. */
void rl__http_cache_store(http_source *s, const xfer *x);

/* Whether members not yet cached are fetched in blocks. */
bool rl__http_blocks_on(const http_source *s);

/* The block for x's member: a block being fetched that holds it (B_BUSY:
 * x waits for it), or a new one planned around x's member over the
 * samples before and after it in its object that lie in the same window
 * of block_bytes, in offset order, not cached (B_IDLE:
 * rl__http_block_begin must come next). -1 when
 * blocks are off or failed for x's object, no neighbour fits, or the
 * cache lacks room; then x is fetched alone. Looks up the ranges of at
 * most one window's members (and one more each way); allocates only
 * block slots. */
int64_t rl__http_block_of(http_source *s, const xfer *x);

/* Turns x into the GET of block b, which is written into the cache file
 * as it arrives; its room in the cache is taken now. false (x unchanged,
 * the slot freed) when the cache file cannot be opened. */
bool rl__http_block_begin(http_source *s, xfer *x, int64_t b);

/* After x's block GET ended (x->f->status 0: all of it arrived): its
 * samples are cached, or its room is given back and the block falls back
 * to members. x is made a fetch of its own member again. */
void rl__http_block_end(http_source *s, xfer *x);

/* Writes the k bytes at p into fd at offset `at`, retrying short writes
 * and EINTR: how fetched bytes reach a cache file (the body of a block's
 * GET as it arrives, a member's bytes once fetched). false on failure (a
 * full disk), with what was written left in place. */
bool rl__http_write_at(int fd, const char *p, size_t k, uint64_t at);

#endif /* RL_HTTP_XFER_H */
