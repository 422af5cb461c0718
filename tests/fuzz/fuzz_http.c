/*
 * fuzz_http.c - libFuzzer harness on the HTTP source's response checks
 * (source/http_resp.h): what decides whether a server's headers and body
 * are believed.
 *
 * DESIGN: the input is what a server controls. Its first 8 bytes are the
 * request (the byte range asked for: an offset, small or past 2^31, and a
 * length) and how the body arrives (the size of each write callback); the
 * rest is the response's header block, cut into lines at each '\n' and
 * handed over one line at a time with its line end, as libcurl does. The
 * harness then feeds a body of the range's length plus some more through
 * the body check, and asserts what source/http_xfer.c relies on: no more
 * bytes are kept than were asked for; a 206 whose bytes are kept named
 * exactly the range; a 200 whose bytes are kept is exactly the range; the
 * parsed values are in their documented ranges. The same bytes go through
 * the S3 error-code parser with room for the whole code and with too
 * little. Any failed check aborts (a finding); ASan and UBSan catch reads
 * outside the input and undefined arithmetic.
 *
 * Built with libFuzzer by the Makefile; tests/test_fuzz_regressions.py
 * builds it with replay_main.c instead and replays the seeds and
 * regressions_http/ through it.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "source/http_resp.h"

#define HEADER_BYTES 8

static void check(bool ok)
{
    if (!ok) {
        abort();
    }
}

static void check_parsed(const rl_http_resp *r)
{
    check(r->status == 0 || (r->status >= 100 && r->status <= 999));
    check(!r->cr_seen || (r->cr_first >= 0 && r->cr_first <= r->cr_last));
    check(r->clen >= -1);
    check(r->retry_after == -1 ||
          (r->retry_after >= 0 && isfinite(r->retry_after)));
}

static void check_s3_code(const uint8_t *p, size_t n, size_t cap)
{
    char code[48];
    memset(code, 'x', sizeof(code));
    rl__http_resp_s3_code((const char *)p, n, code, cap);
    size_t len = strnlen(code, cap);
    check(len < cap);
    check(len == 0 || (len >= 4 && code[0] == ' ' && code[1] == '(' &&
                       code[len - 1] == ')'));
    for (size_t i = 0; i < len; i++) {
        check(code[i] >= ' ' && code[i] <= '~'); /* printable: no escapes */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < HEADER_BYTES) {
        return 0;
    }
    const uint8_t *h = data;
    uint64_t off = (uint64_t)h[0] | (uint64_t)h[1] << 8 | (uint64_t)h[2] << 16;
    if (h[3] & 1) {
        off <<= 31; /* past 32 bits: the sums must not wrap */
    }
    int64_t want = 1 + (int64_t)(h[4] | h[5] << 8);
    size_t step = 1 + (size_t)h[6] * 37;
    const uint8_t *p = data + HEADER_BYTES;
    size_t n = size - HEADER_BYTES;

    rl_http_resp r;
    rl__http_resp_reset(&r);
    for (size_t i = 0; i < n;) {
        const uint8_t *nl = memchr(p + i, '\n', n - i);
        size_t end = nl != NULL ? (size_t)(nl - p) + 1 : n;
        rl__http_resp_header(&r, (const char *)p + i, end - i);
        check_parsed(&r);
        i = end;
    }

    /* A body of want + a few bytes, as libcurl would hand it over. */
    size_t have = 0, total = (size_t)want + (h[7] & 7);
    int verdict = F_NONE;
    for (size_t sent = 0; sent < total && verdict == F_NONE;) {
        size_t k = total - sent < step ? total - sent : step;
        verdict = rl__http_resp_body(&r, off, want, have, k);
        if (verdict == F_NONE) {
            have += k;
        }
        sent += k;
    }
    check(have <= (size_t)want);
    if (have > 0 && r.status == 206) {
        check(r.cr_seen && (uint64_t)r.cr_first == off &&
              (uint64_t)r.cr_last == off + (uint64_t)want - 1);
    }
    if (have > 0 && r.status == 200) {
        check(r.clen == want);
        check(off == 0 || (r.cr_seen && (uint64_t)r.cr_first == off));
    }
    check(verdict == F_NONE || verdict == F_TOO_MUCH ||
          verdict == F_IGNORED_RANGE || verdict == F_WRONG_RANGE);

    check_s3_code(p, n, 48);
    check_s3_code(p, n, 1 + (h[7] >> 3) % 8); /* too little room */
    return 0;
}
