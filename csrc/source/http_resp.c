/*
 * source/http_resp.c - the checks of an HTTP response's headers and body
 * (see source/http_resp.h).
 *
 * DESIGN: a server's bytes are untrusted, so each header value is parsed
 * by hand over [p, end): decimal numbers must fit in 63 bits (sscanf's
 * %lld would be undefined behaviour on an overflowing number, and accepts
 * a sign), and nothing is read past end. A value that is not well formed
 * counts as absent, which makes the body checks refuse a range response
 * rather than believe it. The checks were in libcurl's callbacks
 * (source/http_xfer.c), which now call these, so that the fuzz harness
 * reaches the same code without a network.
 */
#define _GNU_SOURCE
#include <string.h>
#include <strings.h>

#include "source/http_resp.h"

void rl__http_resp_reset(rl_http_resp *r)
{
    r->status = 0;
    r->cr_seen = false;
    r->cr_first = r->cr_last = -1;
    r->clen = -1;
    r->retry_after = -1;
}

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t')) {
        p++;
    }
    return p;
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* A decimal number at p in [0, INT64_MAX]: the end of its digits, or NULL
 * when there is none or it overflows. */
static const char *number(const char *p, const char *end, int64_t *out)
{
    if (p == end || !is_digit(*p)) {
        return NULL;
    }
    int64_t v = 0;
    for (; p < end && is_digit(*p); p++) {
        int d = *p - '0';
        if (v > (INT64_MAX - d) / 10) {
            return NULL;
        }
        v = v * 10 + d;
    }
    *out = v;
    return p;
}

/* The value of header line [p, end) when its field name is `name`
 * (case-insensitive, with its colon), leading blanks skipped; else NULL. */
static const char *value_of(const char *p, const char *end, const char *name)
{
    size_t n = strlen(name);
    if ((size_t)(end - p) < n || strncasecmp(p, name, n) != 0) {
        return NULL;
    }
    return skip_ws(p + n, end);
}

/* "HTTP/<version> <3 digits>[ reason]": libcurl hands HTTP/2 and /3
 * status lines over in this form too. */
static void status_line(rl_http_resp *r, const char *p, const char *end)
{
    p += 5; /* "HTTP/" */
    while (p < end && *p != ' ') {
        p++;
    }
    p = skip_ws(p, end);
    int64_t s;
    const char *q = number(p, end, &s);
    if (q != NULL && q - p == 3 && s >= 100 && (q == end || *q == ' ')) {
        r->status = (long)s;
    }
}

/* "bytes <first>-<last>", then "/<length>" (first <= last < length), or
 * a slash and an asterisk, or nothing. */
static void content_range(rl_http_resp *r, const char *p, const char *end)
{
    int64_t a, b, total;
    if (end - p < 6 || strncasecmp(p, "bytes", 5) != 0 ||
        (p[5] != ' ' && p[5] != '\t')) {
        return;
    }
    p = skip_ws(p + 5, end);
    if ((p = number(p, end, &a)) == NULL || p == end || *p++ != '-' ||
        (p = number(p, end, &b)) == NULL || b < a) {
        return;
    }
    if (p < end && *p == '/') {
        p++;
        if (p < end && *p == '*') {
            p++;
        } else if ((p = number(p, end, &total)) == NULL || b >= total) {
            return;
        }
    }
    if (skip_ws(p, end) != end) {
        return;
    }
    r->cr_seen = true;
    r->cr_first = a;
    r->cr_last = b;
}

/* delta-seconds, with a fraction allowed (an HTTP-date is ignored: the
 * backoff then decides). Saturates rather than overflows. */
static void retry_after(rl_http_resp *r, const char *p, const char *end)
{
    double s = 0;
    if (p == end || !is_digit(*p)) {
        return;
    }
    for (; p < end && is_digit(*p); p++) {
        s = s < 1e15 ? s * 10 + (*p - '0') : s;
    }
    if (p < end && *p == '.') {
        double scale = 0.1;
        for (p++; p < end && is_digit(*p); p++, scale /= 10) {
            s += (*p - '0') * scale;
        }
    }
    if (skip_ws(p, end) == end) {
        r->retry_after = s;
    }
}

void rl__http_resp_header(rl_http_resp *r, const char *p, size_t len)
{
    const char *end = p + len, *v;
    while (end > p && (end[-1] == '\r' || end[-1] == '\n')) {
        end--;
    }
    end = end > p ? end : p;
    if (end - p >= 5 && memcmp(p, "HTTP/", 5) == 0) {
        /* A new response (after a redirect or a 100): forget the last. */
        rl__http_resp_reset(r);
        status_line(r, p, end);
    } else if ((v = value_of(p, end, "content-range:")) != NULL) {
        content_range(r, v, end);
    } else if ((v = value_of(p, end, "content-length:")) != NULL) {
        int64_t c;
        const char *q = number(v, end, &c);
        if (q != NULL && skip_ws(q, end) == end) {
            r->clen = c;
        }
    } else if ((v = value_of(p, end, "retry-after:")) != NULL) {
        retry_after(r, v, end);
    }
}

int rl__http_resp_body(const rl_http_resp *r, uint64_t off, int64_t want,
                       size_t have, size_t k)
{
    /* The range asked for, [off, last]; a server's numbers are compared
     * as unsigned after the parser kept them non-negative. */
    uint64_t last = off + (uint64_t)want - 1;
    bool exact = r->cr_seen && (uint64_t)r->cr_first == off &&
                 (uint64_t)r->cr_last == last;
    /* A 200 is the whole object unless it is exactly the range: the
     * object's first `want` bytes, or a Content-Range naming the range
     * asked for (some S3-API servers answer a range GET with 200). */
    if (r->status == 200 && (r->clen != want || (off != 0 && !exact))) {
        return F_IGNORED_RANGE;
    }
    if (have > (size_t)want || k > (size_t)want - have) {
        return F_TOO_MUCH;
    }
    if (r->status == 206 && !exact) {
        return F_WRONG_RANGE; /* not a byte of it is kept */
    }
    return F_NONE;
}

void rl__http_resp_s3_code(const char *body, size_t len, char *code, size_t cap)
{
    code[0] = '\0';
    const char *a = memmem(body, len, "<Code>", 6);
    if (a == NULL) {
        return;
    }
    a += 6;
    const char *b = memmem(a, (size_t)(body + len - a), "</Code>", 7);
    size_t n = b != NULL ? (size_t)(b - a) : 0;
    if (b == NULL || n == 0 || n + 4 > cap) {
        return; /* " (" + code + ")" + NUL */
    }
    for (size_t i = 0; i < n; i++) {
        /* A code is a word ("NoSuchKey"); anything else (a NUL, a newline,
         * an escape sequence) would reach messages and logs as it is. */
        if (a[i] <= ' ' || a[i] > '~') {
            return;
        }
    }
    code[0] = ' ';
    code[1] = '(';
    memcpy(code + 2, a, n);
    code[n + 2] = ')';
    code[n + 3] = '\0';
}
