/*
 * source/http_resp.h - the checks that decide whether the HTTP source
 * believes a response: the header lines that matter (the status line,
 * Content-Range, Content-Length, Retry-After), whether body bytes may be
 * kept for the byte range that was asked for, and S3's error code in an
 * error body. Internal to source/.
 *
 * These are pure functions of their arguments: no libcurl, no I/O, no
 * allocation. Every byte they read comes from a server, so they accept
 * any input (any length, any bytes, no terminating NUL needed) and never
 * read outside it; tests/fuzz/fuzz_http.c calls them on arbitrary bytes.
 * All functions are thread-safe (they touch only what they are given).
 */
#ifndef RL_HTTP_RESP_H
#define RL_HTTP_RESP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What the headers of the last response said (a redirect or a 100 starts
 * a new response: rl__http_resp_header forgets the previous one's). */
typedef struct rl_http_resp {
    long status;               /* of the status line; 0: none yet */
    bool cr_seen;              /* a valid Content-Range: bytes a-b/... */
    int64_t cr_first, cr_last; /* its range, 0 <= first <= last */
    int64_t clen;              /* Content-Length; -1: none or invalid */
    double retry_after;        /* Retry-After seconds; -1: none */
} rl_http_resp;

/* Why an attempt's body was refused, or could not be kept (F_NONE: it
 * was not). */
enum {
    F_NONE,
    F_TOO_MUCH,      /* more bytes than the range asked for */
    F_TOO_BIG,       /* a whole object over max_file_bytes */
    F_IGNORED_RANGE, /* a 200 with the whole object for a range GET */
    F_WRONG_RANGE,   /* a 206 whose Content-Range is not the range */
    F_NOMEM,
    F_CACHE /* the cache file could not be written */
};

/* r as before any header: no status, no Content-Range, Content-Length or
 * Retry-After. */
void rl__http_resp_reset(rl_http_resp *r);

/* Takes one header line p[0, len) (as libcurl hands them over: with its
 * CRLF, or without) into r. A status line ("HTTP/1.1 206 ...") resets r
 * first. Values that are not well formed (a negative or overflowing
 * number, a range whose end is before its start, a Retry-After that is
 * not a finite number of seconds) are ignored, as if absent. */
void rl__http_resp_header(rl_http_resp *r, const char *p, size_t len);

/*
 * Whether k more body bytes of a 2xx response r may be kept, when have
 * bytes were kept already, for a GET of bytes [off, off + want) (want > 0;
 * a GET of a whole object has no range to check). Returns F_NONE, or
 * F_IGNORED_RANGE (a 200 other than exactly the range), F_TOO_MUCH or
 * F_WRONG_RANGE (a 206 without the Content-Range asked for). With F_NONE
 * the bytes kept never exceed want, and a 206's range is exactly the one
 * asked for.
 */
int rl__http_resp_body(const rl_http_resp *r, uint64_t off, int64_t want,
                       size_t have, size_t k);

/* S3's error code in an XML error body body[0, len) ("SlowDown"), as
 * " (SlowDown)" in code[0, cap); "" when there is none, it is not one
 * word of printable ASCII, or it does not fit. cap >= 1. */
void rl__http_resp_s3_code(const char *body, size_t len, char *code,
                           size_t cap);

#endif /* RL_HTTP_RESP_H */
