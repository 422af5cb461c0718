/*
 * source/source.h - the source stage: a sample id -> its bytes.
 *
 * A source knows a table of samples, numbered 0..count-1 (the dataset's
 * indices), and where each one's bytes are: a file or a byte range of one
 * (source/file.c), a buffer handed in from memory (source/memory.c), an
 * object or a byte range of one on an HTTP(S) server (source/http.c). The
 * pipeline asks for the bytes of the samples of each batch and hands them
 * to the decode stage; the source never looks at the bytes.
 *
 * A new source is one file implementing rl_source_ops and a constructor
 * returning a struct that starts with rl_source (see docs/ARCHITECTURE.md,
 * "Adding a source").
 *
 * Threading. read_batch is called by the pipeline's I/O thread only, one
 * batch at a time; a source that reads better one request at a time sets it
 * to NULL, and the pool's workers call read_one instead, concurrently.
 * read_one is also what the skip policy uses for a replacement sample, on a
 * worker, whatever read_batch is. cancel may be called from any thread
 * while read_batch runs. Everything else is called by the pipeline's
 * owner. A source is created by the caller, handed to
 * rl_pipeline_create, and from then on owned and destroyed by the pipeline.
 */
#ifndef RL_SOURCE_H
#define RL_SOURCE_H

#include "rl.h"
#include "source/io.h"

typedef struct rl_source rl_source;

/*
 * One sample's bytes. The pipeline sets id; the source fills data, len and
 * status: 0 with data[0..len) valid until release(), or -errno (an OS
 * failure) or RL_ETOOBIG (over the byte limit), with msg saying why in
 * words when the status alone would not (may stay ""). rd is the source's
 * own working space (file sources read through it).
 */
typedef struct rl_fetch {
    int64_t id;
    const uint8_t *data;
    size_t len;
    int status;
    bool direct_refused; /* O_DIRECT asked and refused: read buffered */
    char msg[RL_MSG_MAX];
    rl_read rd;
} rl_fetch;

typedef void (*rl_fetch_done_fn)(rl_fetch *f, void *arg);

/* What a remote source did since creation: requests (attempts) sent, of
 * which retries, body bytes received, and samples read from its local cache
 * instead. */
typedef struct rl_source_counters {
    uint64_t requests, retries, bytes, cache_hits;
} rl_source_counters;

typedef struct rl_source_ops {
    /* How the bytes are read, for users ("io_uring", "pread", "memory"). */
    const char *(*backend)(const rl_source *s);
    /* Why a better backend is not used ("" when it is). */
    const char *(*backend_reason)(const rl_source *s);
    /* Where sample id comes from, for error messages (a path or a URL),
     * written into buf (cap > 0 bytes, NUL-terminated, cut to fit): a
     * table whose names are borrowed holds no NUL-terminated copy to
     * point at. Thread-safe. */
    void (*where)(const rl_source *s, int64_t id, char *buf, size_t cap);
    /* Reads every fetch of a batch, calling done(f, arg) once for each as
     * it completes, on the calling (I/O) thread; blocks until all are
     * done. NULL: the source reads with read_one on the workers. */
    void (*read_batch)(rl_source *s, rl_fetch **f, int n, rl_fetch_done_fn done,
                       void *arg);
    /* Reads one fetch on the calling thread. Thread-safe. */
    void (*read_one)(rl_source *s, rl_fetch *f);
    /* Frees what a fetch holds (after its bytes were decoded, or after it
     * failed). Thread-safe; accepts a fetch that read nothing. */
    void (*release)(rl_source *s, rl_fetch *f);
    /* Frees the source. */
    void (*destroy)(rl_source *s);
    /* Makes a read_batch or read_one in progress return promptly, failing
     * what it has not read with RL_ECLOSED; later calls read normally.
     * Any thread, never blocks. NULL: reads end soon enough by themselves
     * (local files). The pipeline calls it when batches are cancelled. */
    void (*cancel)(rl_source *s);
    /* Its counters, from any thread. NULL: none (local sources). */
    void (*counters)(const rl_source *s, rl_source_counters *out);
} rl_source_ops;

struct rl_source {
    const rl_source_ops *ops;
    int64_t count; /* samples in the table */
};

/* Frees a source (its ops->destroy). Accepts NULL. */
void rl_source_destroy(rl_source *s);

/* ---- the file source (source/file.c) ---- */

typedef struct rl_file_options {
    rl_io_backend io;        /* RL_IO_AUTO: io_uring when it works */
    bool direct;             /* O_DIRECT, see source/io.h */
    uint64_t max_file_bytes; /* larger files fail with RL_ETOOBIG */
} rl_file_options;

/*
 * A table of samples that are files or byte ranges of files, borrowed by
 * the source: every array must stay alive and unchanged until the source
 * is destroyed (the Python layer holds the buffers it was given). Nothing
 * is kept per sample beyond what the caller keeps: a file's name is
 * prefix + names[at[k] .. at[k + 1]), made when its read is prepared.
 *
 * starts NULL: file i is sample i (count = nfiles). Otherwise the files
 * are shards: file k holds samples starts[k] .. starts[k + 1] - 1 (found
 * by binary search), count = starts[nfiles]. Sample i is its file from
 * offsets[i] (NULL: 0) for lengths[i] bytes, or the whole file when
 * lengths is NULL or lengths[i] < 0. With records (shards only, offsets
 * and lengths NULL), each sample's range is looked up in its shard's record
 * file when its read is prepared (source/shard_records.h): nothing per
 * sample in memory; a lookup that fails fails that sample. The source that
 * is created owns records (and destroys it).
 */
typedef struct rl_file_table {
    const uint8_t *names; /* the file names' bytes, back to back, no NUL */
    size_t names_len;     /* bytes at names */
    const int64_t *at;    /* nfiles + 1 positions in names, from 0, rising */
    int64_t nfiles;
    const char *prefix; /* before every name ("": none); copied */
    const int64_t *starts;
    const int64_t *offsets;
    const int64_t *lengths;
    struct rl_shard_records *records;
} rl_file_table;

/* The number of samples of a table (see rl_file_table). */
int64_t rl_file_table_count(const rl_file_table *t);

/*
 * Checks what rl_file_source_create relies on: at has nfiles + 1 entries
 * from 0 to at most names_len, never falling; no NUL in names or prefix;
 * starts (when given) from 0, never falling; offsets >= 0 where a length
 * is given. Only the table's arrays are read (O(nfiles + count)). Returns
 * 0, or RL_ECONFIG with msg (RL_MSG_MAX) naming the array (as Pipeline's
 * keywords do: "paths", "starts", "offsets") and the first bad entry.
 */
int rl_file_table_check(const rl_file_table *t, char *msg);

/*
 * A source reading the samples of t (checked by rl_file_table_check),
 * whose arrays it borrows; the prefix is copied. A sample whose full path
 * is PATH_MAX bytes or longer fails its read with -ENAMETOOLONG and a
 * message saying how long. Returns the source, or NULL with msg
 * (RL_MSG_MAX) saying why (out of memory). On success msg holds "" or why
 * io_uring is not used.
 */
rl_source *rl_file_source_create(const rl_file_table *t,
                                 const rl_file_options *opt, char *msg);

/* ---- the memory source (source/memory.c) ---- */

/*
 * A table of n buffers: sample i is data[i][0..len[i]). The buffers are
 * borrowed (the caller keeps them alive and unchanged as long as the
 * pipeline runs), the two arrays are copied; names[i] (or "<memory>" when
 * names is NULL) is what error messages call the sample. Returns NULL when
 * out of memory.
 */
rl_source *rl_memory_source_create(const uint8_t *const *data,
                                   const size_t *len, const char *const *names,
                                   int64_t n);

/* ---- the HTTP(S) source (source/http.c) ---- */

typedef struct rl_http_options {
    int retries;              /* further attempts after a retryable failure */
    double timeout_s;         /* an attempt with no byte for this long fails */
    double connect_timeout_s; /* to open a connection */
    int max_inflight;         /* requests at once (and connections per host) */
    bool verify;              /* TLS certificates and host names */
    char ca_file[1024];       /* CA bundle; "": libcurl's default */
    uint64_t max_file_bytes;  /* whole objects larger fail with RL_ETOOBIG */
    double backoff_s;         /* the first retry's longest delay; doubles */
    double backoff_max_s;     /* the longest delay, Retry-After included */
    /* A folder for a local cache of the byte ranges fetched (later epochs
     * read them from there), holding at most cache_bytes; "": none. The
     * folder must exist; the files made in it are removed with the
     * source. */
    char cache_dir[1024];
    uint64_t cache_bytes;
    /* With the cache: a member not yet cached is fetched with the members
     * next to it in its object that start in the same aligned window of
     * block_bytes, up to block_bytes in one range GET, as far as the
     * cache has room; 0: one member at a time. */
    uint64_t block_bytes;
} rl_http_options;

/* The defaults: 5 retries, 30 s, 10 s, 32, verify, 1 GiB, 0.1 s, 10 s. */
void rl_http_options_default(rl_http_options *o);

/*
 * Strings kept back to back: string k is prefix + bytes[at[k] .. at[k + 1])
 * (n + 1 positions from 0, never falling, at most len; no NUL). The
 * names of a remote table's objects come so (the Python side's
 * StringBlob: one blob and its offsets), as file names do in
 * rl_file_table.
 */
typedef struct rl_strings {
    const uint8_t *bytes;
    size_t len;
    const int64_t *at;
    int64_t n;
    const char *prefix; /* "" or NULL: none */
} rl_strings;

/* Whether t is well formed (offsets from 0, never falling, within len, no
 * NUL); RL_ECONFIG with msg (RL_MSG_MAX) naming `what` and the first bad
 * entry, or 0. (source/http_urls.c) */
int rl_strings_check(const rl_strings *t, const char *what, char *msg);

/*
 * The fetch URLs of an HTTP table's nobj objects. With urls.n == nobj,
 * object j is fetched from string j (presigned URLs, one an object by
 * nature); with urls.at == NULL they are made from the objects' names
 * when a request is prepared, nothing kept per object: an http(s):// name
 * is its URL, and s3://bucket/key is fetched from bases[b] (the URL of
 * the GETs of buckets[b], "https://bucket.s3.region.amazonaws.com/" or
 * "http://host:port/bucket/") followed by the key, leading slashes
 * dropped, each byte but A-Z a-z 0-9 - . _ ~ / percent-encoded (S3's
 * canonical path, which per-request signing signs as it is). Copied.
 */
typedef struct rl_http_urls {
    rl_strings urls;
    int64_t nbases;
    const char *const *buckets;
    const char *const *bases;
} rl_http_urls;

/*
 * A table of n samples on nobj = names->n objects: sample i is bytes
 * offsets[i] .. offsets[i] + lengths[i] of object obj[i] (obj NULL:
 * object i, n == nobj), or the whole object when lengths[i] < 0 (offsets
 * and lengths NULL: every sample whole). Object j is named names' string
 * j in messages (display names: http://host/a.jpg, s3://bucket/key) and
 * fetched from its URL (rl_http_urls; a presigned URL is fine, or a plain
 * S3 URL signed per request: rl_http_source_set_keys). The names are
 * borrowed (kept alive and unchanged by the caller until the source is
 * destroyed; the prefix is copied); obj, offsets and lengths are copied
 * when given (8 bytes a sample each); urls as rl_http_urls says. A table
 * of one object a sample, whole, keeps nothing per object but its URL
 * when that is presigned; shards with record files take
 * rl_http_source_create_shards. Returns the source, or NULL with msg
 * (RL_MSG_MAX) saying why and *status the kind: RL_ECONFIG (a sample
 * naming no object, names or URLs out of shape, an S3 name with no key
 * or whose bucket has no base, libcurl unusable), -ENOMEM (the message
 * says for what, how large), -errno (the epoll set). Statuses of fetches:
 * -ENOENT (404), -EACCES (401/403, certificate), -EIO (5xx, 429, other
 * HTTP), -ETIMEDOUT, -ECONNREFUSED, -ECONNRESET, -EPROTO (truncated or
 * wrong bodies, Range ignored), RL_ETOOBIG, RL_ECLOSED (cancelled); the
 * message says which HTTP status or libcurl error, and how many attempts.
 */
rl_source *rl_http_source_create(const rl_strings *names,
                                 const rl_http_urls *urls, const int64_t *obj,
                                 const uint64_t *offsets,
                                 const int64_t *lengths, int64_t n,
                                 const rl_http_options *opt, int *status,
                                 char *msg);

/*
 * The same source over tar shards with record files, holding nothing per
 * sample: object k (a shard, named names' string k, fetched from its URL)
 * holds samples starts[k] .. starts[k + 1] - 1 (nobj + 1 entries, from 0,
 * never falling; borrowed, as the names are: the caller keeps them alive
 * and unchanged until the source is destroyed), found by binary search;
 * each sample's byte range is looked up in its shard's record file
 * (source/shard_records.h, a table over the same starts) when its fetch
 * is prepared, and a lookup that fails fails that sample with -errno and
 * the lookup's message, which names the record file. count =
 * starts[nobj]. On success the source owns records (and destroys it); on
 * failure the caller still does. Returns and fails as
 * rl_http_source_create (RL_ECONFIG for starts that do not start at 0 or
 * fall).
 */
rl_source *rl_http_source_create_shards(const rl_strings *names,
                                        const rl_http_urls *urls,
                                        const int64_t *starts,
                                        struct rl_shard_records *records,
                                        const rl_http_options *opt, int *status,
                                        char *msg);

/* libcurl's version line, with its TLS and HTTP/2 libraries. */
const char *rl_http_library(void);

/*
 * Replaces the fetch URLs of the objects (presigned URLs made anew before
 * the old ones expire), copied as rl_http_source_create copies them;
 * requests already sent keep theirs. Thread-safe. Returns 0, -EINVAL
 * (not an HTTP source; URLs out of shape or not one an object, an S3 name
 * whose bucket has no base: msg, RL_MSG_MAX, says which) or -ENOMEM (the
 * old URLs are kept).
 */
int rl_http_source_set_urls(rl_source *s, const rl_http_urls *urls, char *msg);

/* Whether the libcurl in use signs requests with AWS Signature Version 4
 * (CURLOPT_AWS_SIGV4: built against and running 7.75 or later). */
bool rl_http_sigv4(void);

/*
 * Signs the S3 objects' GETs from now on (requests already sent keep
 * theirs): each attempt on an object whose display name is s3://... and
 * whose fetch URL has no query string (a presigned URL carries its own
 * signature) is signed by libcurl with SigV4 for region `region` and
 * service s3, with access key `access` and secret `secret`, and sends
 * the session token `token` (NULL or "": none) as x-amz-security-token.
 * Such a URL's path must be S3's canonical form of the key (each byte
 * but A-Z a-z 0-9 - . _ ~ / percent-encoded): it is signed as it is. A
 * signed request follows no redirect (its credentials would go along).
 * region NULL turns signing off. Everything is copied; the secret and the
 * token never reach a message. Thread-safe. Returns 0, -EINVAL (not an
 * HTTP source; a field empty, too long or holding a control character,
 * an access key holding ':'), -ENOTSUP (!rl_http_sigv4()) or -ENOMEM
 * (the old keys are kept).
 */
int rl_http_source_set_keys(rl_source *s, const char *region,
                            const char *access, const char *secret,
                            const char *token);

#endif /* RL_SOURCE_H */
